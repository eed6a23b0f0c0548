/**
 * The local processes the CLI starts and stops: a gateway (`wrangler dev` on workerd, its vars
 * through a private env file), the bundled demo upstream (the `demo-upstream` command in a child
 * process), the dev signing key they are given, and the signal handling of `dev` and `start`
 * (Ctrl-C and SIGTERM reach every child; a child still running after a grace period is killed
 * with its whole process tree). The e2e harness and the bench build Workers once (`builtWorker`)
 * and start gateways through this file too. Must never: put a secret on a command line (a gateway gets its vars through a private env
 * file of mode 0600, removed when it exits), let the process environment reach the Worker's vars,
 * or leave a child running after a second signal.
 */
import { type ChildProcess, execFileSync, type StdioOptions, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";

/** The directory of the nearest package.json above `dir` (this file runs as cli/*.ts in a checkout, as dist/cli/*.js in the package). */
function packageRoot(dir: string): string {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(join(d, "package.json"))) return d;
    if (dirname(d) === d) return resolve(dir, "..");
  }
}

/** The repository, or the installed package (node_modules/portcullis), the CLI runs from. */
export const root = packageRoot(import.meta.dirname);
/** Whether the CLI runs from an installed package (a gateway project's node_modules), not a checkout. */
export const installed = /[\\/]node_modules[\\/]/.test(root);
/** Where the CLI keeps its local files (.portcullis/): the checkout, or the directory an installed CLI runs in (a gateway project). */
export const home = installed ? process.cwd() : root;

/**
 * The path of an npm bin: the checkout's node_modules/.bin, or, for an installed package, the
 * project's (node_modules/.bin beside node_modules/portcullis). The first that exists; else the first.
 */
export function bin(name: string): string {
  const candidates = [resolve(root, "node_modules", ".bin", name)];
  if (basename(dirname(root)) === "node_modules") candidates.push(resolve(dirname(root), ".bin", name));
  return candidates.find((c) => existsSync(c)) ?? candidates[0]!;
}

const DEV_KEY = resolve(home, ".portcullis", "dev-signing-key.json");

/**
 * The local dev signing key (a private Ed25519 JWK, its JSON text), created on first use. Never
 * for production. PORTCULLIS_DEV_KEY_FILE names another file (tests use a temporary one).
 */
export async function devSigningKey(file = process.env.PORTCULLIS_DEV_KEY_FILE || DEV_KEY): Promise<string> {
  if (existsSync(file)) return readFileSync(file, "utf8");
  const { generateSigningKey } = await import("../src/identity/keys.ts");
  const { privateJwk } = await generateSigningKey(`dev-${Date.now().toString(36)}`);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(privateJwk), { mode: 0o600 });
  return JSON.stringify(privateJwk);
}

/**
 * The text of a dotenv file that `wrangler dev --env-file` (wrangler 4: dotenv 16.3 parses it,
 * then dotenv-expand 12 expands it, with nothing from the process environment) turns back into
 * exactly `vars`, whatever the values hold: newlines, CR, quotes of every kind, `$`, `#`, `\`.
 * That parser has no escapes of its own beyond `\n`/`\r` in double quotes, so each value is
 * quoted with a quote it does not contain (', then `, else "), every `$` is written `\$` (the
 * expander's escape), and what a quote cannot hold comes from `${…}` expansions: a run of
 * backslashes at the end of a value, or before `n`/`r` in double quotes, as the default of a
 * name that is never set (`${T_UNSET:-\\}`); a `"` inside double quotes (with the backslashes
 * before it) as a helper var defined first (`T_0='"'`), which the Worker then also sees.
 * T is a random tag that no name or value contains. Names must be [A-Za-z_][A-Za-z0-9_]*.
 * test/e2e/secrets.test.ts runs wrangler's own parser over this text.
 */
export function envFileText(vars: Record<string, unknown>): string {
  const entries = Object.entries(vars).map(([k, v]): [string, string] => {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new Error(`var name ${JSON.stringify(k)}: use letters, digits and _ only`);
    return [k, String(v)];
  });
  let tag: string;
  do tag = `PORTCULLIS_ENV_${randomBytes(6).toString("hex").toUpperCase()}`;
  while (entries.some(([k, v]) => k.includes(tag) || v.includes(tag)));
  const literal = (run: string) => `\${${tag}_UNSET:-${run}}`;
  const helpers = new Map<string, string>();
  const helper = (text: string) => {
    if (!helpers.has(text)) helpers.set(text, `${tag}_${helpers.size}`);
    return `\${${helpers.get(text)}}`;
  };
  const lines = entries.map(([k, v]) => {
    const q = !/['\r]/.test(v) ? "'" : !/[`\r]/.test(v) ? "`" : '"';
    let out = "";
    for (let i = 0; i < v.length; ) {
      let j = i;
      while (v[j] === "\\") j++;
      const run = v.slice(i, j);
      if (j === v.length) {
        out += literal(run); // a backslash just before the closing quote would escape it
        break;
      }
      const c = v[j];
      if (q === '"' && c === '"') out += helper(`${run}"`);
      else if (q === '"' && run && (c === "n" || c === "r")) out += `${literal(run)}${c}`;
      else out += run + (c === "$" ? "\\$" : c === "\r" ? "\\r" : c);
      i = j + 1;
    }
    return `${k}=${q}${out}${q}`;
  });
  return `${[...[...helpers].map(([text, name]) => `${name}='${text}'`), ...lines].join("\n")}\n`;
}

/** Private env-file directories not yet removed; removed at this process's exit whatever the path to it. */
const envDirs = new Set<string>();
let envDirsHooked = false;

/**
 * Writes `vars` (see `envFileText`) to a file of mode 0600 in a fresh directory of mode 0700
 * under the temporary directory, for `wrangler dev --env-file`. Returns `{ dir, file, remove }`;
 * `remove()` deletes both (idempotent), and anything not removed by then goes at process exit.
 */
export function privateEnvFile(vars: Record<string, unknown>): { dir: string; file: string; remove: () => void } {
  const text = envFileText(vars);
  const dir = mkdtempSync(join(tmpdir(), "portcullis-vars-"));
  chmodSync(dir, 0o700);
  const file = join(dir, "gateway.env");
  envDirs.add(dir);
  if (!envDirsHooked) {
    envDirsHooked = true;
    process.on("exit", () => {
      for (const d of envDirs) {
        try {
          rmSync(d, { recursive: true, force: true });
        } catch {
          /* best effort at exit */
        }
      }
      envDirs.clear();
    });
  }
  const remove = () => {
    if (!envDirs.delete(dir)) return;
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      /* best effort: the exit hook no longer lists it */
    }
  };
  try {
    writeFileSync(file, text, { mode: 0o600, flag: "wx" });
  } catch (e) {
    remove();
    throw e;
  }
  return { dir, file, remove };
}

/** The origin a gateway started on `ip`:`port` serves: `http://127.0.0.1:8787`, `http://[::1]:8787`. */
export function gatewayOrigin(ip: string, port: number | string): string {
  return `http://${String(ip).includes(":") ? `[${ip}]` : ip}:${port}`;
}

/**
 * Builds the Worker of `config` (entry `entry`, else its own `main`) with the bundler a deploy
 * uses (`wrangler deploy --dry-run --outdir DIR/bundle`, offline), or takes the bundle already
 * built in `prebuilt` (an outdir of that same command), and writes DIR/wrangler.toml: the same
 * bindings, flags and compatibility date, `main` pointing at the bundle, for `wrangler dev
 * --no-bundle` (startGateway's `builtConfig`) and the bench's Miniflare. Every Worker then runs the
 * source as it was when the build ran. Returns the config written, the bundle's path and what the
 * dry run printed (its "Total Upload" line; empty for a prebuilt bundle).
 */
export function builtWorker(
  config: string,
  dir: string,
  { entry, name, prebuilt }: { entry?: string; name?: string; prebuilt?: string | undefined } = {},
): { file: string; bundle: string; dryRun: string } {
  const out = prebuilt || join(dir, "bundle");
  let dryRun = "";
  if (!prebuilt) {
    try {
      dryRun = execFileSync(bin("wrangler"), ["deploy", ...(entry ? [entry] : []), "--dry-run", "--outdir", out, "--config", config], {
        cwd: root,
        env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
        stdio: "pipe",
        timeout: 120_000,
        encoding: "utf8",
      });
    } catch (err) {
      const e = err as { stderr?: Buffer | string; stdout?: Buffer | string };
      throw new Error(`building ${entry ?? config} failed:\n${e.stderr?.toString() ?? ""}${e.stdout?.toString() ?? ""}`);
    }
  }
  const js = readdirSync(out).filter((f) => f.endsWith(".js"));
  if (js.length !== 1) throw new Error(`building ${entry ?? config}: expected one .js bundle in ${out}, found ${js.join(", ") || "none"}`);
  const bundle = join(out, js[0]!);
  const main = /^main = ".*"$/m;
  const text = readFileSync(config, "utf8");
  if (!main.test(text)) throw new Error(`${config}: no main line`);
  let outText = text
    .replace(main, `main = ${JSON.stringify(bundle)}`)
    .replace(/^migrations_dir = "(.*)"$/m, (_, d: string) => `migrations_dir = ${JSON.stringify(resolve(dirname(config), d))}`);
  if (name) outText = outText.replace(/^name = ".*"$/m, `name = ${JSON.stringify(name)}`);
  const file = join(dir, "wrangler.toml");
  writeFileSync(file, outText);
  return { file, bundle, dryRun };
}

export interface GatewayStart {
  /**
   * The config text (its files inlined): the Worker's PORTCULLIS_CONFIG. Absent for a `project`,
   * whose bundle carries its built config (cli/project.ts).
   */
  configText?: string;
  /**
   * A gateway project's directory (cli/project.ts): its own wrangler.toml, run from there (its
   * local state in its .wrangler/ unless persistTo), serving the config built into its bundle.
   */
  project?: string | undefined;
  port?: number;
  persistTo?: string | undefined;
  stdio?: StdioOptions;
  extraVars?: Record<string, string>;
  /** The private JWK (JSON text) the gateway signs with. */
  signingKey?: string;
  logLevel?: string;
  ip?: string | undefined;
  detached?: boolean;
  /**
   * A wrangler config whose `main` is an already built bundle (`wrangler deploy --dry-run
   * --outdir`), served with `--no-bundle`: the same Worker without bundling it again at each start
   * (the e2e suite builds once and starts many gateways). Default: the repository's wrangler.toml.
   */
  builtConfig?: string | undefined;
}

/**
 * Starts wrangler dev for the gateway; returns the child. The Worker's vars — the config
 * text (PORTCULLIS_CONFIG), the origin it serves (PORTCULLIS_ORIGIN, `http://<ip>:<port>`), the
 * dev signing key (PORTCULLIS_SIGNING_KEY) and every `extraVars` entry (these win) — go through a
 * private env file (`privateEnvFile`, `--env-file`), never the command line, where any local user
 * could read them; it is removed when the child exits (or this process does). With `--env-file`
 * wrangler reads no .dev.vars or .env, and the process environment is kept out of the Worker's
 * vars (CLOUDFLARE_INCLUDE_PROCESS_ENV=false): the file is all the Worker gets.
 * `ip` is 127.0.0.1 for every command; tests may pass another local address to show what the
 * gateway does when it is exposed beyond loopback. `detached` (default false, as the commands
 * use it) starts the gateway in its own process group: the wrangler shim, the real wrangler and
 * workerd then share that group, so a caller can stop the whole tree with `process.kill(-pid, sig)`
 * (the e2e harness and the bench do; the caller then owns the signals and must unref the child).
 */
export function startGateway({
  configText,
  port = 8787,
  persistTo,
  stdio = "inherit",
  extraVars = {},
  signingKey,
  logLevel = "log",
  ip = "127.0.0.1",
  detached = false,
  builtConfig,
  project,
}: GatewayStart): ChildProcess {
  // The dev signing key travels as a var: local runs only (a deploy uses `wrangler secret put`).
  const vars = {
    ...(configText === undefined ? {} : { PORTCULLIS_CONFIG: configText }),
    PORTCULLIS_ORIGIN: gatewayOrigin(ip, port),
    ...(signingKey ? { PORTCULLIS_SIGNING_KEY: signingKey } : {}),
    ...extraVars,
  };
  const envFile = privateEnvFile(vars);
  const argv = [
    "dev",
    ...(builtConfig ? ["--no-bundle"] : []),
    "--config",
    builtConfig ?? (project ? join(project, "wrangler.toml") : resolve(root, "wrangler.toml")),
    "--ip",
    ip,
    "--port",
    String(port),
    // "log" level: the Worker's own structured lines (one per upstream request) are shown.
    "--inspector-port",
    "0",
    "--show-interactive-dev-session=false",
    "--log-level",
    logLevel,
    "--env-file",
    envFile.file,
  ];
  if (persistTo) argv.push("--persist-to", persistTo);
  let child: ChildProcess;
  try {
    child = spawn(bin("wrangler"), argv, {
      cwd: project ?? root,
      stdio,
      detached,
      env: {
        ...process.env,
        WRANGLER_SEND_METRICS: "false",
        CLOUDFLARE_CF_FETCH_ENABLED: "false",
        // The env file is the Worker's only source of vars: loaded (the default, made sure of), and nothing from this environment.
        CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true",
        CLOUDFLARE_INCLUDE_PROCESS_ENV: "false",
      },
    });
  } catch (e) {
    envFile.remove();
    throw e;
  }
  child.once("exit", envFile.remove);
  child.once("error", () => {
    if (child.pid === undefined) envFile.remove(); // never started: no exit will come
  });
  return child;
}

/**
 * Starts the bundled demo upstream (server-everything, streamableHttp) on 127.0.0.1:`port` only,
 * the way `start` does: a child running the CLI's `demo-upstream` command (cli/demo.ts), which
 * pins its listening socket to 127.0.0.1 before loading server-everything (node_modules stays
 * untouched). `detached` (default false): its own process group, as for `startGateway`.
 */
export function startDemoUpstream({
  port = 3001,
  stdio = ["ignore", "inherit", "inherit"],
  detached = false,
}: {
  port?: number;
  stdio?: StdioOptions;
  detached?: boolean;
} = {}): ChildProcess {
  return spawn(process.execPath, [resolve(root, "bin", "portcullis.mjs"), "demo-upstream", "--port", String(port)], {
    cwd: root,
    stdio,
    detached,
    env: { ...process.env },
  });
}

/** `pid` and every descendant of it, from `ps` (Linux and macOS); just `pid` when ps cannot be run. */
function processTree(pid: number): number[] {
  const kids = new Map<number, number[]>();
  try {
    for (const line of execFileSync("ps", ["-A", "-o", "pid=,ppid="], { encoding: "utf8" }).split("\n")) {
      const [c, p] = line.trim().split(/\s+/).map(Number);
      if (c && p !== undefined && !Number.isNaN(p)) kids.set(p, [...(kids.get(p) ?? []), c]);
    }
  } catch {
    /* no ps: the child alone */
  }
  const out: number[] = [];
  const pending = [pid];
  for (let p = pending.pop(); p !== undefined; p = pending.pop()) {
    out.push(p);
    pending.push(...(kids.get(p) ?? []));
  }
  return out;
}

/**
 * Ctrl-C and SIGTERM for `dev` and `start`: the signal goes on to each child (a terminal's Ctrl-C
 * reaches them anyway; `kill PID` reaches only this process, and the gateway would be orphaned).
 * A second signal, or a child still running `graceMs` later, gets SIGKILL for that child and its
 * whole tree (the wrangler shim, the real wrangler, workerd), so nothing is left behind.
 * `children` is read at each signal: callers may add to it.
 */
export function stopChildrenOnSignal(children: ChildProcess[], graceMs = 10_000): void {
  const running = () => children.filter((c) => c.pid !== undefined && c.exitCode === null && c.signalCode === null);
  const killTrees = () => {
    for (const pid of running().flatMap((c) => (c.pid === undefined ? [] : processTree(c.pid)))) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }
    setTimeout(() => process.exit(1), 2000).unref();
  };
  let timer: NodeJS.Timeout | undefined;
  const onSignal = (sig: NodeJS.Signals) => {
    if (timer) {
      clearTimeout(timer);
      killTrees();
      return;
    }
    for (const c of running()) c.kill(sig);
    timer = setTimeout(killTrees, graceMs);
    timer.unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}
