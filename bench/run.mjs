#!/usr/bin/env node
/**
 * `npm run bench`, in one run on loopback. (1) One tools/call, in both protocol eras, at
 * concurrency 1, 8 and 32 (p50/p90/p99 and calls/s), against: the upstream directly; and, on each
 * of two runtimes side by side — the production runtime without wrangler dev's proxy (workerd
 * through Miniflare's API serving the built bundle, bench/miniflare.mjs) and `wrangler dev
 * --no-bundle` (for comparison with the earlier runs) — a bare pass-through Worker
 * (bench/passthrough-worker.ts), Portcullis without its ledger (bench/no-ledger-worker.ts, which
 * gives what a governed call pays for its two ledger appends), Portcullis in observe (mode:
 * observe, no mappings) and Portcullis in enforce (a 50-rule policy, the tool mapped, grants
 * required: every call carries a real minted grant, is decided by the policy and written ahead
 * and after to the ledger). Ratios are against the pass-through on the same runtime. (2) The
 * ledger itself: appends/s of one chain (the production LedgerDO, driven from inside
 * bench/ledger-worker.ts, on Miniflare) at 1, 50 and 500 appends in flight, the group-commit
 * factor, the do-nothing Durable Object floor and the decision + outcome pair. (3) What
 * governance itself adds, in-process (bench/policy.mjs in a child Node with code generation
 * from strings refused, run first, before any Worker loads the machine). (4) The bundle (raw and
 * gzip, and the dry run's own "Total Upload" line), each Worker's startup on Miniflare
 * (construction to ready, to its first answer) and workerd's resident memory, the memory and
 * storage a legacy session object costs (workerd RSS and the SessionDO SQLite files before and
 * after BENCH_SESSIONS sessions), and a probe that the runtime refuses code generation from
 * strings. Prints ratios, never asserts a time. `BENCH_ONLY=ledger` runs part (2) alone;
 * `BENCH_RUNTIMES=miniflare` leaves wrangler dev out. Every Worker is built once up front
 * (`wrangler deploy --dry-run`), so edits to the tree during a run change nothing. Bounded: fixed
 * counts, every request with a timeout; all processes stopped at the end, each with its whole
 * tree (wrangler dev children lead their own process groups, stopped by SIGTERM then SIGKILL;
 * Miniflare instances disposed, their workerd killed at exit), on Ctrl-C/SIGTERM as well.
 */
import { execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { builtWorker, devSigningKey, gatewayOrigin, privateEnvFile } from "../cli/gateway-start.ts";
import {
  enforceConfig,
  freePort,
  mint,
  observeConfig,
  openSession,
  pct,
  post,
  root,
  signalGroup,
  sleep,
  stateLocation,
  stopGroups,
  stopOnSignals,
  tempDirMaker,
  WORKER_ENV,
  waitHttp,
  wrangler,
} from "./harness.mjs";
import { codegenProbe, cpuMsOf, rssOf, serveBuilt } from "./miniflare.mjs";

/** Calls per target: sequential (concurrency 1, round-robin over the targets), and per level above 1. */
const SEQ = Number(process.env.BENCH_SEQ ?? 150);
const PAR_CALLS = Number(process.env.BENCH_PAR_CALLS ?? 300);
const CONCURRENCY = (process.env.BENCH_CONCURRENCY ?? "1,8,32").split(",").map(Number);
const WARMUP = 50;
/** Which runtimes serve the Workers: miniflare (production runtime, no dev proxy) and/or wrangler (wrangler dev). */
const RUNTIMES = (process.env.BENCH_RUNTIMES ?? "miniflare,wrangler").split(",");
for (const r of RUNTIMES) if (r !== "miniflare" && r !== "wrangler") throw new Error(`BENCH_RUNTIMES: miniflare and/or wrangler, not ${r}`);
/** Legacy sessions opened to measure a session object's memory. */
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 200);
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
/** Issue [P]'s targets on the production runtime: governed ÷ pass-through. */
const TARGETS = { p50: 1.2, p99: 1.3, rpsAt8: 0.85, bundleGzipBytes: 1024 * 1024 };
const signed = (x) => `${x >= 0 ? "+" : "−"}${Math.abs(x).toFixed(2)}`;
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;

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

/** A caller for one target and era (with `token` as its grant, if any): returns a function doing one tools/call. */
async function caller(url, era, receipt = "none", token) {
  const ok = receiptCheck(receipt);
  const auth = token ? { authorization: `Bearer ${token}` } : {};
  const check = (r) => {
    if (r.status !== 200 || !r.body.includes("simple text") || r.body.includes('"isError":true') || !ok(r.body))
      throw new Error(`bad answer from ${url} (receipt: ${receipt}) ${r.status} ${r.body.slice(0, 300)}`);
  };
  if (era === "modern") {
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const headers = { ...auth, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_simple_text" };
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
    auth,
    JSON.stringify({
      jsonrpc: "2.0",
      id: 0,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bench", version: "1" } },
    }),
  );
  if (init.status !== 200) throw new Error(`initialize at ${url}: ${init.status} ${init.body.slice(0, 300)}`);
  const sid = init.headers["mcp-session-id"];
  const headers = { ...auth, "mcp-protocol-version": "2025-11-25", ...(sid ? { "mcp-session-id": sid } : {}) };
  await post(url, headers, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  let id = 0;
  return async () =>
    check(await post(url, headers, JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {} } })));
}

/** A row: latency percentiles of the good calls, good calls per second, workerd CPU per good call. */
const stats = (lat, ms, cpu) => ({
  p50: pct(lat, 50),
  p90: pct(lat, 90),
  p99: pct(lat, 99),
  rps: (lat.length * 1000) / ms,
  n: lat.length,
  cpuPerCall: cpu === null ? null : cpu / lat.length,
});

/** Calls that failed (a bad answer, a socket error or a timeout), per target index; the first few, to print. */
const failed = new Map();
const failures = [];
/** One timed call of target `k`: its latency, or null (counted in `failed`) if it failed. */
async function timed(call, k) {
  const t = performance.now();
  try {
    await call();
    return performance.now() - t;
  } catch (e) {
    failed.set(k, (failed.get(k) ?? 0) + 1);
    if (failures.length < 5) failures.push(String(e?.message ?? e).slice(0, 400));
    return null;
  }
}

/** `n` calls of target `k`'s `call` at concurrency `c`; each good call's latency pushed to `lat`; the elapsed ms. */
async function runAt(call, k, n, c, lat) {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next++ < n) {
        const d = await timed(call, k);
        if (d !== null) lat.push(d);
      }
    }),
  );
  return performance.now() - t0;
}

/**
 * One era's targets side by side: warm-up; at concurrency 1, SEQ calls round-robin over the
 * targets (call i of every target runs under the same machine conditions, so the ratios hold on
 * a shared machine); at each higher level, PAR_CALLS calls per target in two halves, the second
 * half in the reverse target order (so slow drift of the machine's load does not favour the
 * targets measured first). Answers `results[level][k]`, with the CPU time per call of the
 * target's own processes (`pids[k]`: a Miniflare target's workerd; null where unknown) over the
 * levels above 1, where each target runs alone.
 */
async function measureEra(calls, pids) {
  for (const [k, call] of calls.entries()) for (let i = 0; i < WARMUP; i++) await timed(call, k);
  const out = { warmupErrors: [...failed.values()].reduce((a, b) => a + b, 0) };
  for (const c of CONCURRENCY) {
    failed.clear();
    const lat = calls.map(() => []);
    const ms = calls.map(() => 0);
    const cpu = calls.map((_, k) => (c > 1 && pids[k] ? 0 : null));
    if (c === 1) {
      for (let i = 0; i < SEQ; i++)
        for (const [k, call] of calls.entries()) {
          const t = performance.now();
          const d = await timed(call, k);
          if (d !== null) lat[k].push(d);
          ms[k] += performance.now() - t;
        }
    } else {
      const order = calls.map((_, k) => k);
      for (const half of [0, 1])
        for (const k of half ? [...order].reverse() : order) {
          const cpu0 = pids[k] ? cpuMsOf(pids[k]) : 0;
          ms[k] += await runAt(calls[k], k, PAR_CALLS / 2, c, lat[k]);
          if (cpu[k] !== null) cpu[k] += cpuMsOf(pids[k]) - cpu0;
        }
    }
    out[c] = calls.map((_, k) => ({ ...stats(lat[k], ms[k], cpu[k]), errors: failed.get(k) ?? 0 }));
  }
  return out;
}

/** `wrangler dev --no-bundle` of a built Worker (see `builtWorker` in cli/gateway-start.ts) in its own process group. */
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

/** Bytes of the files under `dir` (recursively); 0 if it does not exist. */
function bytesUnder(dir) {
  let total = 0;
  let files = 0;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return { bytes: 0, files: 0 };
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) {
      const s = bytesUnder(p);
      total += s.bytes;
      files += s.files;
    } else {
      total += statSync(p).size;
      files++;
    }
  }
  return { bytes: total, files };
}

/** SIGKILL to one process (a workerd Miniflare started), if it still runs. */
const killPid = (pid) => {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    /* gone */
  }
};

const rssKbOf = (pids) => pids.reduce((a, pid) => a + (rssOf(pid)?.rssKb ?? 0), 0);

/**
 * What a legacy session object costs on the production runtime: SESSIONS sessions opened
 * (initialize + notifications/initialized, 8 at a time) against a served gateway; the gateway's
 * workerd resident memory and its SessionDO SQLite files (database + WAL) before and after.
 */
async function sessionMemory(url, pids, persistTo, scriptName) {
  const dir = join(persistTo, "do", `${scriptName}-SessionDO`);
  await sleep(1000);
  const rss0 = rssKbOf(pids);
  const disk0 = bytesUnder(dir);
  let next = 0;
  const ids = new Set();
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next++ < SESSIONS) {
        ids.add(await openSession(url, {}, "bench-mem"));
      }
    }),
  );
  await sleep(1000);
  const rss1 = rssKbOf(pids);
  const disk1 = bytesUnder(dir);
  return { sessions: ids.size, rss0, rss1, disk0, disk1 };
}

function bundleSize(file, dryRun) {
  const raw = readFileSync(file);
  const upload = /Total Upload: ([^\n]+)/.exec(dryRun ?? "")?.[1]?.trim() ?? "?";
  const startup = /Worker Startup Time: ([^\n]+)/.exec(dryRun ?? "")?.[1]?.trim() ?? null;
  return { raw: raw.length, gzip: gzipSync(raw, { level: 9 }).length, upload, startup };
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

function workerdVersion() {
  try {
    return execFileSync(join(root, "node_modules/.bin/workerd"), ["--version"], { encoding: "utf8" }).trim();
  } catch {
    return "?";
  }
}

function machine() {
  const c = cpus();
  const version = (pkg) => JSON.parse(readFileSync(join(root, `node_modules/${pkg}/package.json`), "utf8")).version;
  return `${c[0]?.model ?? "?"} × ${c.length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${process.platform} ${process.arch}; Node ${process.version}, wrangler ${version("wrangler")}, miniflare ${version("miniflare")}, ${workerdVersion()}`;
}

/** The ledger part's tables (appends/s per level beside the RPC floor, the decision + outcome pair's latency, the last chain's checkpoints). */
function printLedger(ledger, runtime = "miniflare") {
  console.log(
    `\nledger: one chain (LedgerDO in workerd, on ${runtime}), ${APPENDS} one-entry appends per level through the gateway's append path (src/ports/ledger-batch.ts), timed inside the Worker; target ≥ ${TARGET_APPENDS_PER_S} appends/s`,
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
    `across requests: ${CROSS_APPENDS} appends, one per HTTP request, ${CROSS_CONCURRENCY} requests at once: ${x.perS.toFixed(0)} appends/s (one HTTP request per append into ${runtime}), ${x.appends} appends in ${x.rpcs} RPCs (${(x.appends / x.rpcs).toFixed(1)} per RPC) and ${x.transactions} transactions`,
  );
  const last = ledger.levels[ledger.levels.length - 1];
  if (last)
    console.log(
      `checkpoints: the last chain (${last.seq} entries) is signed up to ${last.checkpointSize}${last.checkpointProblem ? ` (problem: ${last.checkpointProblem})` : ""}`,
    );
}

async function main() {
  const procs = [];
  const mfs = [];
  const mfPids = [];
  const dirs = [];
  const removeDirs = () => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  };
  const stopAll = async () => {
    await Promise.all(mfs.splice(0).map((mf) => Promise.race([mf.dispose().catch(() => {}), sleep(10_000)])));
    for (const pid of mfPids) killPid(pid);
    await stopGroups([...procs]);
    procs.length = 0;
    removeDirs();
  };
  // At exit (whatever the path): SIGKILL any group and workerd still running, synchronously.
  process.on("exit", () => {
    for (const p of procs) if (p.pid !== undefined) signalGroup(p.pid, "SIGKILL");
    for (const pid of mfPids) killPid(pid);
    removeDirs();
  });
  stopOnSignals(stopAll);
  const tmp = tempDirMaker(dirs);
  /** Serves a built Worker on Miniflare; answers its URL, startup times and workerd pids (first answer: GET `probe`). */
  const serve = async (built, { name, vars, probe = "/" }) => {
    const port = await freePort();
    const persistTo = join(tmp("bench-mf-"), "state");
    const s = await serveBuilt(built.file, { port, persistTo, name, vars: typeof vars === "function" ? vars(port) : vars });
    mfs.push(s.mf);
    mfPids.push(...s.pids);
    const base = `http://127.0.0.1:${port}`;
    let first = null;
    for (let i = 0; i < 200 && first === null; i++) {
      try {
        const r = await fetch(`${base}${probe}`, { signal: AbortSignal.timeout(5000) });
        await r.arrayBuffer();
        first = performance.now() - s.t0;
      } catch {
        await sleep(25);
      }
    }
    return {
      base,
      port,
      persistTo,
      pids: s.pids,
      startup: { constructMs: s.constructMs, readyMs: s.readyMs, firstMs: first, rssKb: rssKbOf(s.pids) },
      log: s.log,
    };
  };
  try {
    const startedAt = performance.now();
    const load0 = loadavg()[0];
    if (ONLY === "ledger") {
      // Only part (2): the ledger Worker on Miniflare, with a throwaway checkpoint signing key (never the developer's .portcullis key).
      const signingKey = await devSigningKey(join(tmp("bench-key-"), "signing-key.json"));
      const ld = await serve(builtWorker(join(root, "bench/ledger.wrangler.toml"), tmp("bench-ledger-")), {
        name: "portcullis-bench-ledger",
        vars: { PORTCULLIS_SIGNING_KEY: signingKey },
      });
      const ledger = await ledgerBench(ld.base);
      console.log(`\nmachine: ${machine()}; load average at the start ${load0.toFixed(2)}; state ${stateLocation(tmpdir())}`);
      const pr = ledger.pairs;
      console.log(
        `\ndecision + outcome appends, sequential, from a Worker (${PAIRS} pairs; workerd's timer ticks in ms): mean ${pr.mean.toFixed(2)} ms  p50 ${pr.p50.toFixed(2)} ms  p99 ${pr.p99.toFixed(2)} ms`,
      );
      printLedger(ledger);
      return;
    }
    // Governance in-process first, while no Worker loads the machine.
    const governance = governanceBench();
    // A throwaway checkpoint and grant signing key (never the developer's .portcullis key).
    const keyFile = join(tmp("bench-key-"), "signing-key.json");
    const signingKey = await devSigningKey(keyFile);

    // Every Worker built once, back to back, from one source tree.
    const gw = builtWorker(join(root, "wrangler.toml"), tmp("bench-gw-"));
    const nl = builtWorker(join(root, "wrangler.toml"), tmp("bench-nl-"), { entry: "bench/no-ledger-worker.ts", name: "portcullis-bench-no-ledger" });
    const pt = builtWorker(join(root, "bench/passthrough.wrangler.toml"), tmp("bench-pt-"));
    const ld = builtWorker(join(root, "bench/ledger.wrangler.toml"), tmp("bench-ledger-"));
    const sizes = {
      portcullis: bundleSize(gw.bundle, gw.dryRun),
      "portcullis-no-ledger": bundleSize(nl.bundle, nl.dryRun),
      "passthrough-worker": bundleSize(pt.bundle, pt.dryRun),
    };

    const upPort = await freePort();
    const up = spawn(process.execPath, [join(root, "bench/upstream.mjs"), "--port", String(upPort)], { stdio: "ignore", detached: true });
    procs.push(up);
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await waitHttp(upstreamUrl);

    const codegen = await codegenProbe(gw.file, await freePort());
    const gwVars = (text) => (port) => ({ PORTCULLIS_CONFIG: text, PORTCULLIS_SIGNING_KEY: signingKey, PORTCULLIS_ORIGIN: gatewayOrigin("127.0.0.1", port) });

    // The production runtime: each Worker in its own Miniflare (one workerd each), started one at a time so each startup is its own.
    const mf = {};
    mf.pt = await serve(pt, { name: "portcullis-bench-passthrough", vars: { UPSTREAM_URL: upstreamUrl } });
    mf.nl = await serve(nl, { name: "portcullis-bench-no-ledger", vars: gwVars(observeConfig(upstreamUrl)), probe: "/healthz" });
    mf.obs = await serve(gw, { name: "portcullis", vars: gwVars(observeConfig(upstreamUrl)), probe: "/healthz" });
    mf.enf = await serve(gw, { name: "portcullis", vars: gwVars(enforceConfig(upstreamUrl)), probe: "/healthz" });
    mf.ld = await serve(ld, { name: "portcullis-bench-ledger", vars: { PORTCULLIS_SIGNING_KEY: signingKey } });

    // wrangler dev, for comparison: the same bundles behind wrangler's proxy.
    const wd = {};
    if (RUNTIMES.includes("wrangler")) {
      const gwLog = process.env.BENCH_GATEWAY_LOG_LEVEL ?? "log";
      const start = async (key, built, vars, logLevel, probe) => {
        const port = await freePort();
        const dir = tmp(`bench-wd-${key}-`);
        procs.push(wranglerDev(built.file, port, join(dir, "state"), vars, logLevel));
        wd[key] = { base: `http://127.0.0.1:${port}`, port, probe };
      };
      await start("pt", pt, { UPSTREAM_URL: upstreamUrl }, "error", "/");
      await start("nl", nl, { PORTCULLIS_CONFIG: observeConfig(upstreamUrl), PORTCULLIS_SIGNING_KEY: signingKey }, gwLog, "/healthz");
      await start("obs", gw, { PORTCULLIS_CONFIG: observeConfig(upstreamUrl), PORTCULLIS_SIGNING_KEY: signingKey }, gwLog, "/healthz");
      await start("enf", gw, { PORTCULLIS_CONFIG: enforceConfig(upstreamUrl), PORTCULLIS_SIGNING_KEY: signingKey }, gwLog, "/healthz");
      for (const w of Object.values(wd)) await waitHttp(`${w.base}${w.probe}`);
    }

    // The enforce gateways' grants: an agent of team bench allowed test_* (what the policy's rules read).
    const grant = (port) => mint(keyFile, gatewayOrigin("127.0.0.1", port), { sub: "agent:bench", team: "bench", roles: ["agent"], tools: ["test_*"] });
    const targets = [{ name: "direct", runtime: "-", url: upstreamUrl, receipt: "none" }];
    const runtimes = [["miniflare", mf], ...(RUNTIMES.includes("wrangler") ? [["wrangler dev", wd]] : [])];
    for (const [runtime, w] of runtimes) {
      targets.push({ name: "passthrough-worker", key: "pt", runtime, url: `${w.pt.base}/mcp`, receipt: "none" });
      targets.push({ name: "portcullis-no-ledger", key: "nl", runtime, url: `${w.nl.base}/mcp`, receipt: "zero" });
      targets.push({ name: "portcullis observe", key: "obs", runtime, url: `${w.obs.base}/mcp`, receipt: "chained" });
      targets.push({ name: "portcullis enforce", key: "enf", runtime, url: `${w.enf.base}/mcp`, receipt: "chained", token: grant(w.enf.port) });
    }
    const results = {};
    for (const era of ["legacy", "modern"]) {
      const calls = [];
      for (const t of targets) calls.push(await caller(t.url, era, t.receipt, t.token));
      results[era] = await measureEra(
        calls,
        targets.map((t) => (t.runtime === "miniflare" ? mf[t.key].pids : t.runtime === "-" ? [up.pid] : null)),
      );
      await sleep(2000); // the gateways' ledgers flush their entries to D1 behind the calls: let them finish before the next part
    }
    const ledger = await ledgerBench(mf.ld.base);
    const memory = await sessionMemory(`${mf.obs.base}/mcp`, mf.obs.pids, mf.obs.persistTo, "portcullis");
    const load1 = loadavg()[0];

    console.log(`\nmachine: ${machine()}`);
    console.log(`state (Durable Objects, D1): ${stateLocation(tmpdir())}`);
    console.log(
      `load average (1 min): ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} at the end; the run took ${((performance.now() - startedAt) / 1000).toFixed(0)} s`,
    );
    console.log(
      `runtimes: miniflare = the production runtime without the dev proxy (workerd ${workerdVersion()} through Miniflare's API, serving the bundle \`wrangler deploy --dry-run\` built, local D1 and SQLite Durable Objects, wrangler.toml's compatibility date and flags)${RUNTIMES.includes("wrangler") ? "; wrangler dev = `wrangler dev --no-bundle` of the same bundle" : ""}`,
    );
    console.log(`code generation from strings on that runtime: eval ${codegen.eval}; new Function ${codegen.newFunction}`);
    console.log(
      `\none tools/call (test_simple_text on test/fixtures/conformance-upstream), per target and level: ${SEQ} calls at c=1 (round-robin over the targets), ${PAR_CALLS} at each higher level (two halves, the second in reverse target order); loopback. × = this row ÷ the pass-through Worker on the same runtime (latency >1 slower, calls/s <1 fewer). CPU ms/call, at c>1 where each target runs alone: the target's workerd (user + system, /proc), for direct the upstream's Node process (which every other row also pays)\n`,
    );
    console.log(
      "era     c   runtime       target                   p50 ms   p90 ms   p99 ms   calls/s  errors    × p50   × p90   × p99   × calls/s   workerd CPU ms/call",
    );
    for (const era of ["legacy", "modern"])
      for (const c of CONCURRENCY) {
        for (const [k, t] of targets.entries()) {
          const r = results[era][c][k];
          const base = t.key ? results[era][c][targets.findIndex((u) => u.runtime === t.runtime && u.key === "pt")] : null;
          const ratio =
            base && t.key !== "pt"
              ? `   ×${(r.p50 / base.p50).toFixed(2).padStart(5)}  ×${(r.p90 / base.p90).toFixed(2).padStart(5)}  ×${(r.p99 / base.p99).toFixed(2).padStart(5)}     ×${(r.rps / base.rps).toFixed(2).padStart(5)}`
              : " ".repeat(41);
          const cpu = r.cpuPerCall === null ? "" : `   ${r.cpuPerCall.toFixed(2).padStart(19)}`;
          console.log(
            `${era.padEnd(7)} ${String(c).padStart(2)}  ${t.runtime.padEnd(12)}  ${t.name.padEnd(22)} ${r.p50.toFixed(2).padStart(8)} ${r.p90.toFixed(2).padStart(8)} ${r.p99.toFixed(2).padStart(8)}  ${r.rps.toFixed(0).padStart(8)}  ${String(r.errors).padStart(6)}${ratio}${cpu}`,
          );
        }
        console.log("");
      }

    const totalErrors = ["legacy", "modern"].reduce(
      (a, era) => a + results[era].warmupErrors + CONCURRENCY.reduce((b, c) => b + results[era][c].reduce((x, r) => x + r.errors, 0), 0),
      0,
    );
    console.log(
      totalErrors
        ? `${totalErrors} calls failed (warm-up included: ${results.legacy.warmupErrors} legacy, ${results.modern.warmupErrors} modern), left out of the latencies and calls/s; the first: \n  ${failures.join("\n  ")}\n`
        : "no call failed (every answer 200 with the tool's text, no isError, the receipt each target must carry)\n",
    );
    const idx = (runtime, key) => targets.findIndex((t) => t.runtime === runtime && t.key === key);
    console.log(
      "the performance targets on the production runtime (miniflare): portcullis enforce ÷ passthrough-worker — p50 and p99 at c=1 (≤ ×1.2, ≤ ×1.3), calls/s at c=8 (≥ ×0.85)",
    );
    for (const era of ["legacy", "modern"]) {
      const lat = results[era][1];
      const thr = results[era][8];
      if (!lat || !thr) {
        console.log(`${era.padEnd(7)} (needs levels 1 and 8 in BENCH_CONCURRENCY)`);
        continue;
      }
      const [g, b] = [idx("miniflare", "enf"), idx("miniflare", "pt")];
      const p50 = lat[g].p50 / lat[b].p50;
      const p99 = lat[g].p99 / lat[b].p99;
      const rps = thr[g].rps / thr[b].rps;
      const verdict = (ok) => (ok ? "met" : "missed");
      console.log(
        `${era.padEnd(7)} p50 ×${p50.toFixed(2)} (${verdict(p50 <= TARGETS.p50)})   p99 ×${p99.toFixed(2)} (${verdict(p99 <= TARGETS.p99)})   calls/s at c=8 ×${rps.toFixed(2)} (${verdict(rps >= TARGETS.rpsAt8)})`,
      );
    }

    console.log("\nthe ledger's share of a governed call at c=1 (portcullis observe − portcullis-no-ledger: its decision + outcome appends)");
    for (const [runtime] of runtimes)
      for (const era of ["legacy", "modern"]) {
        const lat = results[era][CONCURRENCY[0]];
        const g = lat[idx(runtime, "obs")];
        const n = lat[idx(runtime, "nl")];
        console.log(
          `${runtime.padEnd(12)} ${era.padEnd(7)} p50 ${signed(g.p50 - n.p50)} ms  p99 ${signed(g.p99 - n.p99)} ms  (${((100 * (g.p50 - n.p50)) / g.p50).toFixed(0)}% of observe's p50; c=${CONCURRENCY[0]})`,
        );
      }
    const pr = ledger.pairs;
    console.log(
      `decision + outcome appends, sequential, from a Worker on miniflare (${PAIRS} pairs; workerd's timer ticks in ms): mean ${pr.mean.toFixed(2)} ms  p50 ${pr.p50.toFixed(2)} ms  p99 ${pr.p99.toFixed(2)} ms`,
    );

    console.log("\nbundles (`wrangler deploy --dry-run --outdir`): the .js module; gzip level 9 by the bench; the dry run's own Total Upload line (its gzip)");
    console.log("worker                    raw          gzip        dry run: Total Upload");
    for (const [name, s] of Object.entries(sizes))
      console.log(`${name.padEnd(24)}  ${kib(s.raw).padStart(11)}  ${kib(s.gzip).padStart(11)}   ${s.upload}${s.startup ? `  (startup ${s.startup})` : ""}`);
    const gzOk = sizes.portcullis.gzip <= TARGETS.bundleGzipBytes;
    console.log(
      `portcullis gzip ${kib(sizes.portcullis.gzip)} against the ≤ 1 MiB target: ${gzOk ? "met" : "missed"}. The dry run prints no "Worker Startup Time" (only a real deploy does); the startup below is measured on Miniflare.`,
    );

    console.log(
      "\nstartup on miniflare (each Worker in its own workerd, started one at a time): construction → ready (workerd up, bundle loaded) → first answer (GET /healthz, the pass-through and ledger Workers GET /), and workerd's resident memory then",
    );
    console.log("worker                        → ready ms   → first answer ms   workerd RSS MiB");
    for (const [name, key] of [
      ["passthrough-worker", "pt"],
      ["portcullis-no-ledger", "nl"],
      ["portcullis observe", "obs"],
      ["portcullis enforce", "enf"],
      ["bench ledger worker", "ld"],
    ]) {
      const s = mf[key].startup;
      console.log(
        `${name.padEnd(28)}  ${s.readyMs.toFixed(0).padStart(10)}   ${(s.firstMs === null ? "none" : s.firstMs.toFixed(0)).padStart(17)}   ${(s.rssKb / 1024).toFixed(1).padStart(15)}`,
      );
    }

    const m = memory;
    console.log(
      `\na legacy session object (SessionDO) on miniflare: ${m.sessions} sessions opened (initialize + notifications/initialized) against portcullis observe; its workerd RSS ${(m.rss0 / 1024).toFixed(1)} → ${(m.rss1 / 1024).toFixed(1)} MiB (${(((m.rss1 - m.rss0) * 1024) / m.sessions / 1024).toFixed(1)} KiB per session, live objects, all in one workerd); SessionDO SQLite files on disk ${m.disk0.files} → ${m.disk1.files} files, ${kib(m.disk0.bytes)} → ${kib(m.disk1.bytes)} (${kib((m.disk1.bytes - m.disk0.bytes) / m.sessions)} per session, database + WAL)`,
    );

    console.log("\nwhat governance adds to a call (classification + validation + policy, in-process; pass-through = the same steps doing nothing)");
    console.log(governance.text);
    const total = governance.rows.at(-1);
    const mfEnf = results.modern[CONCURRENCY[0]][idx("miniflare", "enf")];
    console.log(
      `added per call: p50 +${(total.governed.p50 - total.baseline.p50).toFixed(2)} µs, p99 +${(total.governed.p99 - total.baseline.p99).toFixed(2)} µs (against portcullis enforce's own modern p50 of ${mfEnf.p50.toFixed(2)} ms on miniflare)`,
    );

    printLedger(ledger, "miniflare");
  } finally {
    await stopAll();
  }
}

await main();
process.exit(0);
