/**
 * Bench only (`npm run bench`, `npm run bench:load`): serves a Worker that `wrangler deploy
 * --dry-run` already built on the production runtime through Miniflare's API, without wrangler
 * dev's proxy in front of it: one workerd process per Worker, the built bundle and the text modules beside it,
 * the bindings, compatibility date and flags of the Worker's wrangler.toml (read with wrangler's
 * own `unstable_getMiniflareWorkerOptions`, the options `wrangler dev` gives Miniflare), local D1
 * and SQLite-backed Durable Objects persisted under a throwaway directory, and no `unsafeEval`
 * binding, so code generation from strings is refused as in production (`codegenProbe` proves it
 * on the same runtime and flags). Also measures what a served Worker costs: its startup time
 * (Miniflare construction to ready, then to the first answered request) and its workerd
 * processes' resident memory from /proc. Owns nothing of the gateway; must never serve anything
 * but loopback, read the developer's .portcullis or .dev.vars, or outlive the bench that started it.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { convertV4MiniflareOptions, Log, LogLevel, Miniflare } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";

/** Miniflare's log, quiet except for errors (kept, the last few, for a failure message). */
class QuietLog extends Log {
  constructor() {
    super(LogLevel.ERROR);
    this.lines = [];
  }
  log(message) {
    this.lines.push(message);
    if (this.lines.length > 50) this.lines.shift();
  }
}

/**
 * Serves the built Worker of `config` (a wrangler.toml whose `main` is the bundle, as
 * cli/gateway-start.ts `builtWorker` writes it) on 127.0.0.1:`port`, with `vars` as plain-text bindings and
 * its state under `persistTo`. Returns `{ mf, url, constructMs, readyMs, t0, log, pids }`: the
 * time the constructor took, the time until Miniflare answered ready (workerd started, the bundle
 * loaded), the clock at construction (for a first-request time), workerd's log lines (the last
 * 50, for a failure message) and the workerd processes this instance started. Start instances one
 * at a time: `pids` is what appeared among this process's descendants meanwhile. `inspectorPort`
 * opens workerd's inspector on loopback (bench/profile.mjs only; it costs nothing until attached).
 */
export async function serveBuilt(config, { port, persistTo, vars = {}, name, inspectorPort }) {
  // modulesRules and rootPath locate a source tree's extra modules; the bundle's are listed below.
  const {
    workerOptions: { modulesRules, rootPath, ...workerOptions },
    main,
  } = unstable_getMiniflareWorkerOptions(config);
  if (!main) throw new Error(`${config}: no main`);
  const log = new QuietLog();
  const before = new Set(workerdProcesses().map((p) => p.pid));
  const t0 = performance.now();
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      ...workerOptions,
      name,
      // The bundle, and the text modules wrangler wrote beside it (the D1 migration, `*.sql`).
      modules: [
        { type: "ESModule", path: main },
        ...readdirSync(dirname(main))
          .filter((f) => f.endsWith(".sql"))
          .map((f) => ({ type: "Text", path: join(dirname(main), f) })),
      ],
      modulesRoot: dirname(main),
      bindings: { ...workerOptions.bindings, ...vars },
      host: "127.0.0.1",
      port,
      resourcePersistencePath: persistTo,
      ...(inspectorPort ? { inspectorPort } : {}),
      log,
      handleStructuredLogs({ level, message }) {
        log.lines.push(`${level}: ${String(message).slice(0, 2000)}`);
        if (log.lines.length > 50) log.lines.shift();
      },
    }),
  );
  const constructMs = performance.now() - t0;
  const url = await mf.ready;
  const readyMs = performance.now() - t0;
  const pids = workerdProcesses()
    .map((p) => p.pid)
    .filter((pid) => !before.has(pid));
  return { mf, url, constructMs, readyMs, log, t0, pids };
}

/**
 * Whether this runtime (workerd through Miniflare, no unsafeEval binding) refuses `eval` and
 * `new Function` at request time with `config`'s compatibility date and flags: a one-module
 * Worker that tries both and answers what happened.
 */
export async function codegenProbe(config, port) {
  const { workerOptions } = unstable_getMiniflareWorkerOptions(config);
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      name: "codegen-probe",
      compatibilityDate: workerOptions.compatibilityDate,
      compatibilityFlags: workerOptions.compatibilityFlags,
      modules: true,
      script: `export default { fetch() {
        const tryIt = (f) => { try { f(); return "allowed"; } catch (e) { return "refused: " + String(e && e.message); } };
        return Response.json({ eval: tryIt(() => (0, eval)("1")), newFunction: tryIt(() => new Function("return 1")()) });
      } };`,
      host: "127.0.0.1",
      port,
      log: new QuietLog(),
      handleStructuredLogs() {},
    }),
  );
  try {
    const url = await mf.ready;
    const r = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    const j = await r.json();
    return { ...j, refused: j.eval.startsWith("refused") && j.newFunction.startsWith("refused") };
  } finally {
    await mf.dispose();
  }
}

/** Children of `pid` (direct and indirect), from /proc; [] where there is no /proc. */
export function descendants(pid) {
  let entries;
  try {
    entries = readdirSync("/proc").filter((d) => /^\d+$/.test(d));
  } catch {
    return [];
  }
  const parent = new Map();
  for (const d of entries) {
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(s.slice(s.lastIndexOf(")") + 2).split(" ")[1]);
      parent.set(Number(d), ppid);
    } catch {
      /* gone */
    }
  }
  const out = [];
  const walk = (p) => {
    for (const [c, pp] of parent)
      if (pp === p) {
        out.push(c);
        walk(c);
      }
  };
  walk(pid);
  return out;
}

/** Resident memory (kB) and command name of a process, or null. */
export function rssOf(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const rss = /^VmRSS:\s+(\d+) kB/m.exec(status);
    const name = /^Name:\s+(.*)$/m.exec(status);
    return { pid, name: name?.[1] ?? "?", rssKb: rss ? Number(rss[1]) : 0 };
  } catch {
    return null;
  }
}

/** The workerd processes this Node process started (Miniflare's), with their resident memory. */
export function workerdProcesses() {
  return descendants(process.pid)
    .map(rssOf)
    .filter((p) => p?.name.startsWith("workerd"));
}

/** CPU time (user + system, ms) that processes `pids` have used so far, from /proc (0 for a process that is gone). */
export function cpuMsOf(pids) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const s = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]); // utime, stime (fields 14 and 15 of stat)
    } catch {
      /* gone */
    }
  }
  return (ticks * 1000) / CLOCK_TICKS;
}

/** The kernel's clock ticks per second (getconf CLK_TCK; 100 on Linux). */
const CLOCK_TICKS = 100;
