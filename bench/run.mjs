#!/usr/bin/env node
/**
 * `npm run bench`, in one run on loopback: (1) latency (p50/p99) and throughput (calls/s) of one
 * tools/call four ways, in both protocol eras: directly against the upstream, through a bare
 * pass-through Worker on the same runtime, through Portcullis (transparent mode), and through
 * the same Portcullis build with its ledger taken out (bench/no-ledger-worker.ts), which gives
 * what a governed call pays for its two ledger appends; (2) the ledger itself: appends/s of one
 * chain (the production LedgerDO, driven from inside bench/ledger-worker.ts) at 1, 50 and 500
 * appends in flight, with the transactions they took (the group-commit factor) and the same loop
 * against a do-nothing Durable Object (the RPC floor), and the latency of the decision + outcome
 * pair one governed call writes; (3) what governance itself adds to a call, measured in-process
 * (bench/policy.mjs in a child Node with code generation from strings refused, run first, before
 * any Worker loads the machine): classification + validation + policy evaluation (50 rules), p50
 * and p99 in µs, side by side with the same steps as pass-throughs. Prints ratios, never asserts
 * a time. `BENCH_ONLY=ledger` runs part (2) alone: only the ledger Worker is built and started, and
 * only its tables are printed. Every Worker is built once up front (`wrangler deploy --dry-run`) and served with
 * `wrangler dev --no-bundle`, so edits to the tree during a run change nothing. Bounded: fixed counts, every request with a timeout; all
 * processes stopped at the end, each with its whole tree: every child leads its own process
 * group (the wrangler shim, the real wrangler and workerd share it), stopped by SIGTERM to the
 * group, SIGKILL after a bound; on Ctrl-C/SIGTERM (which no longer reach the groups from the
 * terminal) and at exit as well.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { createServer } from "node:net";
import { cpus, tmpdir, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { devSigningKey, gatewayOrigin, privateEnvFile } from "../bin/portcullis.mjs";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const SEQ = Number(process.env.BENCH_SEQ ?? 400);
const PAR_CALLS = Number(process.env.BENCH_PAR_CALLS ?? 800);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const WARMUP = 50;
/** Ledger: appends per level, the levels (appends in flight), decision + outcome pairs. */
const APPENDS = Number(process.env.BENCH_APPENDS ?? 5000);
const LEVELS = (process.env.BENCH_LEVELS ?? "1,50,500").split(",").map(Number);
const PAIRS = Number(process.env.BENCH_PAIRS ?? 400);
const TARGET_APPENDS_PER_S = 2000;
/** Appends made one per HTTP request (across requests, as governed calls make them), and how many requests at once. */
const CROSS_APPENDS = Number(process.env.BENCH_CROSS_APPENDS ?? 2000);
const CROSS_CONCURRENCY = 50;
/** Governance in-process: timed calls per row (bench/policy.mjs). */
const GOV_N = Number(process.env.BENCH_GOV_N ?? 20_000);
/** `BENCH_ONLY=ledger`: only the ledger part (2); unset: every part. */
const ONLY = process.env.BENCH_ONLY ?? "";
if (ONLY !== "" && ONLY !== "ledger") throw new Error(`BENCH_ONLY must be "ledger" or unset, not ${JSON.stringify(ONLY)}`);
/** The no-op ledger's receipts carry this hash (bench/no-ledger-worker.ts); a real chain's never do. */
const ZERO_HASH = "0".repeat(64);
// Vars reach each Worker through a private env file only (never argv; no .dev.vars, nothing from this environment).
const WORKER_ENV = {
  ...process.env,
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true",
  CLOUDFLARE_INCLUDE_PROCESS_ENV: "false",
};

const freePort = () =>
  new Promise((res) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });
const agent = new Agent({ keepAlive: true, maxSockets: 64 });
const signed = (x) => `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(2)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function post(url, headers, body, timeout = 10_000) {
  const u = new URL(url);
  return new Promise((resolveP, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
        timeout,
      },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => resolveP({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(body);
  });
}

async function waitHttp(url, ms = 90_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (r.status > 0) return;
    } catch {}
    await sleep(250);
  }
  throw new Error(`timeout waiting for ${url}`);
}

/**
 * What the answer must carry besides the tool's text: Portcullis a receipt from a real chain,
 * the no-ledger build a receipt from its no-op chain (proof the seam took), the baselines none.
 */
function receiptCheck(kind) {
  return (body) => {
    const m = /"portcullis\/receipt":\{[^}]*"hash":"([0-9a-f]{64})"/.exec(body);
    if (kind === "none") return true;
    if (!m) return false;
    return kind === "zero" ? m[1] === ZERO_HASH : m[1] !== ZERO_HASH;
  };
}

/** A caller for one target and era: returns a function doing one tools/call. */
async function caller(url, era, receipt = "none") {
  const ok = receiptCheck(receipt);
  const check = (r) => {
    if (r.status !== 200 || !r.body.includes("simple text") || !ok(r.body))
      throw new Error(`bad answer from ${url} (receipt: ${receipt}) ${r.status} ${r.body.slice(0, 300)}`);
  };
  if (era === "modern") {
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const headers = { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_simple_text" };
    let id = 0;
    return async () =>
      check(
        await post(
          url,
          headers,
          JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {}, _meta: meta } }),
        ),
      );
  }
  const init = await post(
    url,
    {},
    JSON.stringify({
      jsonrpc: "2.0",
      id: 0,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bench", version: "1" } },
    }),
  );
  const sid = init.headers["mcp-session-id"];
  const headers = { "mcp-protocol-version": "2025-11-25", ...(sid ? { "mcp-session-id": sid } : {}) };
  await post(url, headers, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  let id = 0;
  return async () =>
    check(await post(url, headers, JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {} } })));
}

/** Does process group `pgid` still have a live (not zombie) member? /proc where there is one, else signal 0. */
function groupAlive(pgid) {
  if (!existsSync("/proc/self/stat")) {
    try {
      process.kill(-pgid, 0);
      return true;
    } catch {
      return false;
    }
  }
  return readdirSync("/proc").some((d) => {
    if (!/^\d+$/.test(d)) return false;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const [state, , pgrp] = s.slice(s.lastIndexOf(")") + 2).split(" ");
      return Number(pgrp) === pgid && state !== "Z" && state !== "X";
    } catch {
      return false;
    }
  });
}
const signalGroup = (pgid, sig) => {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
};

/** Stops the groups led by `procs`: SIGTERM, then SIGKILL for what still runs after `graceMs` (bounded). */
async function stopGroups(procs, graceMs = 8000) {
  const pgids = procs.map((p) => p.pid).filter((pid) => pid !== undefined);
  for (const g of pgids) signalGroup(g, "SIGTERM");
  for (const [sig, ms] of [
    ["SIGKILL", graceMs],
    [null, 3000],
  ]) {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && pgids.some(groupAlive)) await sleep(100);
    if (sig) for (const g of pgids.filter(groupAlive)) signalGroup(g, sig);
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/**
 * One era's targets side by side: warm-up, then sequential latency round-robin over the targets
 * (call i of every target runs under the same machine conditions, so the ratios hold on a
 * shared machine), then throughput at CONCURRENCY, one target after the other.
 */
async function measureEra(calls) {
  for (const call of calls) for (let i = 0; i < WARMUP; i++) await call();
  const lat = calls.map(() => []);
  for (let i = 0; i < SEQ; i++) {
    for (const [k, call] of calls.entries()) {
      const t = performance.now();
      await call();
      lat[k].push(performance.now() - t);
    }
  }
  const rps = [];
  for (const call of calls) {
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next++ < PAR_CALLS) await call();
      }),
    );
    rps.push(PAR_CALLS / ((performance.now() - t0) / 1000));
  }
  return calls.map((_, k) => ({ p50: pct(lat[k], 50), p99: pct(lat[k], 99), rps: rps[k] }));
}

const wrangler = join(root, "node_modules/.bin/wrangler");

/**
 * Builds the Worker of `config` (entry `entry`, else its own `main`) once, with the bundler a
 * deploy uses (`wrangler deploy --dry-run`, offline), and writes the config `wrangler dev
 * --no-bundle` runs it with: the same bindings, flags and compatibility date, `main` pointing at
 * the bundle. So every Worker runs the source as it was when the bench started: edits made to the
 * tree meanwhile neither restart it mid-run nor mix two versions into one comparison.
 */
function bundled(config, dir, { entry, name } = {}) {
  const out = join(dir, "bundle");
  try {
    execFileSync(wrangler, ["deploy", ...(entry ? [entry] : []), "--dry-run", "--outdir", out, "--config", config], {
      cwd: root,
      env: WORKER_ENV,
      stdio: "pipe",
      timeout: 120_000,
    });
  } catch (err) {
    throw new Error(`building ${entry ?? config} failed:\n${err.stderr?.toString() ?? ""}${err.stdout?.toString() ?? ""}`);
  }
  const js = readdirSync(out).filter((f) => f.endsWith(".js"));
  if (js.length !== 1) throw new Error(`building ${entry ?? config}: expected one .js bundle in ${out}, found ${js.join(", ") || "none"}`);
  const main = /^main = ".*"$/m;
  const text = readFileSync(config, "utf8");
  if (!main.test(text)) throw new Error(`${config}: no main line`);
  let outText = text
    .replace(main, `main = ${JSON.stringify(join(out, js[0]))}`)
    .replace(/^migrations_dir = "(.*)"$/m, (_, d) => `migrations_dir = ${JSON.stringify(resolve(dirname(config), d))}`);
  if (name) outText = outText.replace(/^name = ".*"$/m, `name = ${JSON.stringify(name)}`);
  const file = join(dir, "wrangler.toml");
  writeFileSync(file, outText);
  return file;
}

/** `wrangler dev --no-bundle` of a built Worker (see `bundled`) in its own process group. */
function wranglerDev(config, port, persistTo, vars, logLevel = "error") {
  const argv = [
    "dev",
    "--no-bundle",
    "--config",
    config,
    "--ip",
    "127.0.0.1",
    "--port",
    String(port),
    "--inspector-port",
    "0",
    "--show-interactive-dev-session=false",
    "--log-level",
    logLevel,
    "--persist-to",
    persistTo,
  ];
  // As startGateway does: the vars (a gateway's with the origin it serves) in a private env file, removed when the child exits.
  const envFile = privateEnvFile("PORTCULLIS_CONFIG" in vars ? { PORTCULLIS_ORIGIN: gatewayOrigin("127.0.0.1", port), ...vars } : vars);
  argv.push("--env-file", envFile.file);
  const child = spawn(wrangler, argv, { cwd: root, stdio: "ignore", detached: true, env: WORKER_ENV });
  child.once("exit", envFile.remove);
  return child;
}

/** One call to the bench ledger Worker. */
async function ledgerCall(base, path, params) {
  const r = await post(`${base}${path}?${new URLSearchParams(params)}`, {}, "", 120_000);
  const j = JSON.parse(r.body);
  if (r.status !== 200) throw new Error(`ledger worker ${path}: ${r.status} ${j.error ?? r.body}`);
  return j;
}

/** Waits (bounded) until chain `chain` is flushed to D1; the seconds that took, or null if it did not within `ms`. */
async function flushWait(base, chain, ms = 30_000) {
  const t0 = performance.now();
  while (performance.now() - t0 < ms) {
    const s = await ledgerCall(base, "/status", { chain });
    if (s.flushedSeq >= s.seq) return (performance.now() - t0) / 1000;
    await sleep(100);
  }
  return null;
}

/** Appends/s of one chain per level of appends in flight, and the decision + outcome pair's latency. */
async function ledgerBench(base) {
  const run = Date.now().toString(36);
  const levels = [];
  for (const inFlight of LEVELS) {
    const chain = `bench-${run}-c${inFlight}`;
    await ledgerCall(base, "/appends", { chain, n: 50, c: Math.min(inFlight, 50) }); // the object exists, its SQLite is warm
    await flushWait(base, chain);
    const r = await ledgerCall(base, "/appends", { chain, n: APPENDS, c: inFlight });
    const appends = r.after.appends - r.before.appends;
    const transactions = r.after.transactions - r.before.transactions;
    const stored = r.after.seq - r.before.seq;
    if (r.failed > 0 || appends !== APPENDS || stored !== APPENDS)
      throw new Error(`ledger level ${inFlight}: ${r.failed} failed, ${appends} counted, ${stored} stored of ${APPENDS}`);
    const flushS = await flushWait(base, chain);
    const after = await ledgerCall(base, "/status", { chain });
    // The same appends with one RPC each, straight to the object (what the chain did before the Worker's group commit).
    const rpcChain = `bench-${run}-r${inFlight}`;
    await ledgerCall(base, "/appends", { chain: rpcChain, n: 50, c: Math.min(inFlight, 50), via: "rpc" });
    await flushWait(base, rpcChain);
    const rpc = await ledgerCall(base, "/appends", { chain: rpcChain, n: APPENDS, c: inFlight, via: "rpc" });
    if (rpc.failed > 0) throw new Error(`ledger level ${inFlight}, one RPC per append: ${rpc.failed} failed`);
    await flushWait(base, rpcChain);
    // The same loop against a Durable Object method that does nothing: what RPC alone allows here.
    await ledgerCall(base, "/floor", { n: 50, c: Math.min(inFlight, 50) });
    const floor = await ledgerCall(base, "/floor", { n: APPENDS, c: inFlight });
    if (floor.failed > 0) throw new Error(`RPC floor at ${inFlight} in flight: ${floor.failed} calls failed`);
    levels.push({
      floorPerS: (APPENDS * 1000) / floor.ms,
      inFlight,
      ms: r.ms,
      perS: (APPENDS * 1000) / r.ms,
      rpcPerS: (APPENDS * 1000) / rpc.ms,
      perRpc: APPENDS / (r.after.rpcs - r.before.rpcs),
      transactions,
      perTx: APPENDS / transactions,
      flushS,
      checkpointSize: after.checkpointSize,
      seq: after.seq,
      checkpointProblem: after.checkpointProblem,
    });
  }
  // Across requests, as governed calls append: one append per HTTP request, many requests at once.
  const xChain = `bench-${run}-x`;
  await ledgerCall(base, "/append-one", { chain: xChain });
  const xBefore = await ledgerCall(base, "/status", { chain: xChain });
  let xNext = 0;
  const xT0 = performance.now();
  await Promise.all(
    Array.from({ length: CROSS_CONCURRENCY }, async () => {
      while (xNext++ < CROSS_APPENDS) {
        const r = await post(`${base}/append-one?${new URLSearchParams({ chain: xChain })}`, {}, "", 30_000);
        if (r.status !== 200) throw new Error(`append-one: ${r.status} ${r.body}`);
      }
    }),
  );
  const xMs = performance.now() - xT0;
  const xAfter = await ledgerCall(base, "/status", { chain: xChain });
  await flushWait(base, xChain);
  const cross = {
    perS: (CROSS_APPENDS * 1000) / xMs,
    appends: xAfter.appends - xBefore.appends,
    rpcs: xAfter.rpcs - xBefore.rpcs,
    transactions: xAfter.transactions - xBefore.transactions,
  };
  const chain = `bench-${run}-pairs`;
  await ledgerCall(base, "/pairs", { chain, n: 20 });
  const p = await ledgerCall(base, "/pairs", { chain, n: PAIRS });
  await flushWait(base, chain);
  return { levels, cross, pairs: { mean: p.total / PAIRS, p50: pct(p.ms, 50), p99: pct(p.ms, 99) } };
}

/**
 * The governance cost per call (bench/policy.mjs --governance-json): one child Node, the same
 * flags as `npm run bench:policy` (type transformation; code generation from strings refused, as
 * in production). Bounded by a timeout; its JSON carries the rows and their text.
 */
function governanceBench() {
  const out = execFileSync(
    process.execPath,
    [
      "--experimental-transform-types",
      "--disable-warning=ExperimentalWarning",
      "--disallow-code-generation-from-strings",
      join(root, "bench/policy.mjs"),
      "--governance-json",
    ],
    { cwd: root, env: { ...process.env, BENCH_GOV_N: String(GOV_N) }, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 180_000 },
  );
  const g = JSON.parse(out.trim().split("\n").at(-1));
  if (!g.codegenRefused) throw new Error("bench/policy.mjs ran with code generation from strings allowed: its numbers would not be production's");
  return g;
}

function machine() {
  const c = cpus();
  let workerd = "?";
  try {
    workerd = execFileSync(join(root, "node_modules/.bin/workerd"), ["--version"], { encoding: "utf8" }).trim();
  } catch {
    /* unknown */
  }
  const wrangler = JSON.parse(readFileSync(join(root, "node_modules/wrangler/package.json"), "utf8")).version;
  return `${c[0]?.model ?? "?"} × ${c.length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${process.platform} ${process.arch}; Node ${process.version}, wrangler ${wrangler}, ${workerd}`;
}

/** The ledger part's tables (appends/s per level beside the RPC floor, the decision + outcome pair's latency, the last chain's checkpoints). */
function printLedger(ledger) {
  console.log(
    `\nledger: one chain (LedgerDO in workerd), ${APPENDS} one-entry appends per level through the gateway's append path (src/mcp/ledger-batch.ts), timed inside the Worker; target ≥ ${TARGET_APPENDS_PER_S} appends/s`,
  );
  console.log(
    "in flight   appends/s   ms total   appends/RPC   transactions   appends/transaction   D1 flushed after   vs target   one RPC per append/s   ×   RPC floor calls/s   ÷ floor",
  );
  for (const l of ledger.levels) {
    const flushed = l.flushS === null ? "> 30 s" : `${l.flushS.toFixed(1)} s`;
    console.log(
      `${String(l.inFlight).padStart(9)}   ${l.perS.toFixed(0).padStart(9)}   ${l.ms.toFixed(0).padStart(8)}   ${l.perRpc.toFixed(1).padStart(11)}   ${String(l.transactions).padStart(12)}   ${l.perTx.toFixed(1).padStart(19)}   ${flushed.padStart(16)}   ${`×${(l.perS / TARGET_APPENDS_PER_S).toFixed(2)}`.padStart(9)}   ${l.rpcPerS.toFixed(0).padStart(20)}   ${`×${(l.perS / l.rpcPerS).toFixed(2)}`.padStart(5)}   ${l.floorPerS.toFixed(0).padStart(17)}   ×${(l.perS / l.floorPerS).toFixed(2)}`,
    );
  }
  console.log(
    "(one RPC per append: the same loop, each append its own RPC to the object; × = gateway path ÷ that. RPC floor: one RPC per call to EchoDO, whose append stores nothing; the driving Worker and the objects share one workerd)",
  );

  const x = ledger.cross;
  console.log(
    `across requests: ${CROSS_APPENDS} appends, one per HTTP request, ${CROSS_CONCURRENCY} requests at once: ${x.perS.toFixed(0)} appends/s (bounded by wrangler dev's HTTP path), ${x.appends} appends in ${x.rpcs} RPCs (${(x.appends / x.rpcs).toFixed(1)} per RPC) and ${x.transactions} transactions`,
  );
  const last = ledger.levels[ledger.levels.length - 1];
  if (last)
    console.log(
      `checkpoints: the last chain (${last.seq} entries) is signed up to ${last.checkpointSize}${last.checkpointProblem ? ` (problem: ${last.checkpointProblem})` : ""}`,
    );
}

async function main() {
  const procs = [];
  const dirs = [];
  const removeDirs = () => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  };
  const stopAll = async () => {
    await stopGroups([...procs]);
    procs.length = 0;
    removeDirs();
  };
  // At exit (whatever the path): SIGKILL any group still running, synchronously.
  process.on("exit", () => {
    for (const p of procs) if (p.pid !== undefined) signalGroup(p.pid, "SIGKILL");
    removeDirs();
  });
  for (const [sig, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ])
    process.once(sig, () => {
      void stopAll().finally(() => process.exit(code));
    });
  const tmp = (prefix) => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
  try {
    if (ONLY === "ledger") {
      // Only part (2): the ledger Worker, with a throwaway checkpoint signing key (never the developer's .portcullis key).
      const signingKey = await devSigningKey(join(tmp("bench-key-"), "signing-key.json"));
      const ldDir = tmp("bench-ledger-");
      const ldConfig = bundled(join(root, "bench/ledger.wrangler.toml"), ldDir);
      const ldPort = await freePort();
      procs.push(wranglerDev(ldConfig, ldPort, join(ldDir, "state"), { PORTCULLIS_SIGNING_KEY: signingKey }));
      await waitHttp(`http://127.0.0.1:${ldPort}/`);
      const ledger = await ledgerBench(`http://127.0.0.1:${ldPort}`);
      console.log(`\nmachine: ${machine()}`);
      const pr = ledger.pairs;
      console.log(
        `\ndecision + outcome appends, sequential, from a Worker (${PAIRS} pairs; workerd's timer ticks in ms): mean ${pr.mean.toFixed(2)} ms  p50 ${pr.p50.toFixed(2)} ms  p99 ${pr.p99.toFixed(2)} ms`,
      );
      printLedger(ledger);
      return;
    }
    // Governance in-process first, while no Worker loads the machine.
    const governance = governanceBench();
    // A throwaway checkpoint signing key (never the developer's .portcullis key).
    const signingKey = await devSigningKey(join(tmp("bench-key-"), "signing-key.json"));

    const upPort = await freePort();
    const up = spawn(process.execPath, [join(root, "test/fixtures/conformance-upstream/server.ts"), "--port", String(upPort)], {
      stdio: "ignore",
      detached: true,
    });
    procs.push(up);
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await waitHttp(upstreamUrl);

    // Portcullis and Portcullis without its ledger: one source tree, built back to back.
    const gwDir = tmp("bench-gw-");
    const gwConfig = bundled(join(root, "wrangler.toml"), gwDir);
    const nlDir = tmp("bench-nl-");
    const nlConfig = bundled(join(root, "wrangler.toml"), nlDir, { entry: "bench/no-ledger-worker.ts", name: "portcullis-bench-no-ledger" });
    const ptDir = tmp("bench-pt-");
    const ptConfig = bundled(join(root, "bench/passthrough.wrangler.toml"), ptDir);
    const ldDir = tmp("bench-ledger-");
    const ldConfig = bundled(join(root, "bench/ledger.wrangler.toml"), ldDir);

    const ptPort = await freePort();
    procs.push(wranglerDev(ptConfig, ptPort, join(ptDir, "state"), { UPSTREAM_URL: upstreamUrl }));
    // The gateway's config and checkpoint signing key as `portcullis dev` passes them; the same log level for both builds.
    const configText = `actor: local:bench\negress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${upstreamUrl}\n`;
    const gwVars = { PORTCULLIS_CONFIG: configText, PORTCULLIS_SIGNING_KEY: signingKey };
    const gwLog = process.env.BENCH_GATEWAY_LOG_LEVEL ?? "log";
    const gwPort = await freePort();
    procs.push(wranglerDev(gwConfig, gwPort, join(gwDir, "state"), gwVars, gwLog));
    const nlPort = await freePort();
    procs.push(wranglerDev(nlConfig, nlPort, join(nlDir, "state"), gwVars, gwLog));
    const ldPort = await freePort();
    procs.push(wranglerDev(ldConfig, ldPort, join(ldDir, "state"), { PORTCULLIS_SIGNING_KEY: signingKey }));

    await waitHttp(`http://127.0.0.1:${ptPort}/`);
    await waitHttp(`http://127.0.0.1:${gwPort}/healthz`);
    await waitHttp(`http://127.0.0.1:${nlPort}/healthz`);
    await waitHttp(`http://127.0.0.1:${ldPort}/`);

    const targets = [
      ["direct", upstreamUrl, "none"],
      ["passthrough-worker", `http://127.0.0.1:${ptPort}/mcp`, "none"],
      ["portcullis-no-ledger", `http://127.0.0.1:${nlPort}/mcp`, "zero"],
      ["portcullis", `http://127.0.0.1:${gwPort}/mcp`, "chained"],
    ];
    const results = {};
    for (const era of ["legacy", "modern"]) {
      const calls = [];
      for (const [, url, receipt] of targets) calls.push(await caller(url, era, receipt));
      for (const [k, r] of (await measureEra(calls)).entries()) results[`${era}/${targets[k][0]}`] = r;
      await sleep(2000); // the gateway's ledger flushes its entries to D1 behind the calls: let it finish before the next era
    }
    const ledger = await ledgerBench(`http://127.0.0.1:${ldPort}`);

    console.log(`\nmachine: ${machine()}`);
    console.log(
      `\none tools/call (test_simple_text), per target: ${SEQ} sequential (round-robin over the targets) + ${PAR_CALLS} at concurrency ${CONCURRENCY}, loopback\n`,
    );
    console.log("era     target                  p50 ms   p99 ms   calls/s");
    for (const [k, r] of Object.entries(results)) {
      const [era, name] = k.split("/");
      console.log(`${era.padEnd(7)} ${name.padEnd(22)} ${r.p50.toFixed(2).padStart(8)} ${r.p99.toFixed(2).padStart(8)}  ${r.rps.toFixed(0).padStart(8)}`);
    }
    console.log("\nratios (portcullis ÷ baseline; latency >1 = slower, throughput <1 = fewer calls/s)");
    for (const era of ["legacy", "modern"]) {
      const g = results[`${era}/portcullis`];
      for (const base of ["direct", "passthrough-worker", "portcullis-no-ledger"]) {
        const b = results[`${era}/${base}`];
        console.log(
          `${era.padEnd(7)} vs ${base.padEnd(21)} p50 ×${(g.p50 / b.p50).toFixed(2)}  p99 ×${(g.p99 / b.p99).toFixed(2)}  calls/s ×${(g.rps / b.rps).toFixed(2)}`,
        );
      }
    }
    console.log("\nthe ledger's share of a governed call (portcullis − portcullis-no-ledger: its decision + outcome appends)");
    for (const era of ["legacy", "modern"]) {
      const g = results[`${era}/portcullis`];
      const n = results[`${era}/portcullis-no-ledger`];
      console.log(
        `${era.padEnd(7)} p50 ${signed(g.p50 - n.p50)} ms  p99 ${signed(g.p99 - n.p99)} ms  calls/s ×${(g.rps / n.rps).toFixed(2)}  (${((100 * (g.p50 - n.p50)) / g.p50).toFixed(0)}% of portcullis's p50)`,
      );
    }
    const pr = ledger.pairs;
    console.log(
      `decision + outcome appends, sequential, from a Worker (${PAIRS} pairs; workerd's timer ticks in ms): mean ${pr.mean.toFixed(2)} ms  p50 ${pr.p50.toFixed(2)} ms  p99 ${pr.p99.toFixed(2)} ms`,
    );

    console.log("\nwhat governance adds to a call (classification + validation + policy, in-process; pass-through = the same steps doing nothing)");
    console.log(governance.text);
    const total = governance.rows.at(-1);
    console.log(
      `added per call: p50 +${(total.governed.p50 - total.baseline.p50).toFixed(2)} µs, p99 +${(total.governed.p99 - total.baseline.p99).toFixed(2)} µs (against portcullis's own modern p50 of ${results["modern/portcullis"].p50.toFixed(2)} ms)`,
    );

    printLedger(ledger);
  } finally {
    await stopAll();
  }
}

await main();
process.exit(0);
