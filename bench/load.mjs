#!/usr/bin/env node
/**
 * `npm run bench:load`: a bounded load run of governed tools/call traffic over loopback, then
 * the checks that matter under load. Portcullis is built once (`wrangler deploy --dry-run`, the
 * deploy bundler) and served on the production runtime without wrangler dev's proxy (workerd
 * through Miniflare's API, bench/miniflare.mjs: local D1 and SQLite Durable Objects,
 * wrangler.toml's compatibility date and flags) in enforce, with grants required, the tool
 * mapped and the bench's 50-rule policy (bench/harness.mjs), in front of the conformance fixture
 * (test/fixtures/conformance-upstream, through bench/upstream.mjs). Two autocannon instances run
 * at once, each for a fixed number of calls at a fixed rate (`overallRate`, half of LOAD_RATE
 * each): legacy (2025-11-25) calls over LOAD_LEGACY_CONNECTIONS connections that share
 * LOAD_LEGACY_SESSIONS sessions round-robin (each session opened before the run with its own
 * initialize, Mcp-Session-Id and notifications/initialized), and modern (2026-07-28) calls over
 * LOAD_MODERN_STREAMS connections, each request carrying its own `_meta`; every request has a
 * fresh JSON-RPC id.
 * Each answer is read: a non-2xx status, a JSON-RPC error, an `isError` result, an answer without
 * the tool's text or without a receipt, a socket error or a timeout each count as an error. After
 * the run the team's ledger is exported (`GET /v1/ledger/export?team=`, an auditor's grant) and
 * the decision and outcome entries of the tool are counted (each must equal the calls made, every
 * outcome `succeeded`, no `blocked` entry), and the export is verified offline with
 * `portcullis ledger verify --file … --key …` against the gateway's JWKS, as an auditor would.
 * Exits 1 if any check fails, or if an era answered under 95% of its planned rate. Sizes from
 * the environment: LOAD_SECONDS (default 60), LOAD_RATE (calls/s over both eras, default 120),
 * LOAD_LEGACY_SESSIONS (default 32), LOAD_LEGACY_CONNECTIONS and LOAD_MODERN_STREAMS (default 20
 * each; each era's rate must be a multiple of its connections). Bounded: a fixed number of
 * calls, every request with a timeout, the run
 * stopped after twice its planned time; every process stopped at the end (the upstream's process
 * group, Miniflare disposed and its workerd killed), on Ctrl-C/SIGTERM as well. Never asserts a
 * latency; prints it.
 */
import { execFileSync, spawn } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir, totalmem } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import { builtWorker, devSigningKey, gatewayOrigin } from "../cli/gateway-start.ts";
import {
  enforceConfig,
  freePort,
  mint,
  openSession,
  root,
  rpcMessage,
  sleep,
  stateLocation,
  stopGroups,
  stopOnSignals,
  tempDirMaker,
  waitHttp,
} from "./harness.mjs";
import { rssOf, serveBuilt } from "./miniflare.mjs";

const SECONDS = Number(process.env.LOAD_SECONDS ?? 60);
const RATE = Number(process.env.LOAD_RATE ?? 120);
const LEGACY = Number(process.env.LOAD_LEGACY_SESSIONS ?? 32);
/** Concurrent connections per era: the legacy ones share the sessions round-robin; each modern one is a stream of stateless calls. */
const CONNECTIONS = { legacy: Number(process.env.LOAD_LEGACY_CONNECTIONS ?? 20), modern: Number(process.env.LOAD_MODERN_STREAMS ?? 20) };
const TIMEOUT_S = 30;
const TEAM = "bench";
const TOOL = "test_simple_text";
for (const [k, v] of Object.entries({
  LOAD_SECONDS: SECONDS,
  LOAD_RATE: RATE,
  LOAD_LEGACY_SESSIONS: LEGACY,
  LOAD_LEGACY_CONNECTIONS: CONNECTIONS.legacy,
  LOAD_MODERN_STREAMS: CONNECTIONS.modern,
}))
  if (!Number.isInteger(v) || v < 1) throw new Error(`${k} must be a positive integer, not ${v}`);
/** The rate each era gets (half each; autocannon gives every connection a whole number of calls/s, at least one). */
const RATES = { legacy: Math.floor(RATE / 2), modern: RATE - Math.floor(RATE / 2) };
// autocannon splits the rate into whole calls/s per connection and the calls evenly: a rate its connections do not divide
// leaves some connections slower than others with as many calls to make, and the run falls short of its rate.
if (RATES.legacy % CONNECTIONS.legacy || RATES.modern % CONNECTIONS.modern)
  throw new Error(
    `LOAD_RATE ${RATE} gives ${RATES.legacy} + ${RATES.modern} calls/s: each era's rate must be a multiple of its connections (${CONNECTIONS.legacy} legacy, ${CONNECTIONS.modern} modern), at least one call/s each`,
  );
/** The achieved rate must be at least this share of the planned one for the run to count as "at the target rate". */
const SUSTAINED = 0.95;

/** What one era's answers were: counted by what was wrong with them. */
function tally() {
  return { ok: 0, non2xx: 0, rpcError: 0, isError: 0, noText: 0, noReceipt: 0, examples: [] };
}

/** Classifies one answer into `t`. */
function record(t, status, body) {
  let what = "ok";
  if (status < 200 || status > 299) what = "non2xx";
  else {
    const m = rpcMessage(body);
    if (!m || m.error) what = "rpcError";
    else if (m.result?.isError) what = "isError";
    else if (!JSON.stringify(m.result?.content ?? []).includes("simple text")) what = "noText";
    else if (!/^[0-9a-f]{64}$/.test(m.result?._meta?.["portcullis/receipt"]?.hash ?? "")) what = "noReceipt";
  }
  t[what]++;
  if (what !== "ok" && t.examples.length < 3) t.examples.push(`${status} ${body.slice(0, 300)}`);
}

let nextId = 1;

/**
 * One era's autocannon run: `connections` connections at `rate` calls/s overall, `amount` calls
 * in all, each with `headers` plus what `perCall(n)` adds for the n-th call (a session, a fresh
 * JSON-RPC id in its body). Resolves to autocannon's result; answers are classified into `t` as
 * they arrive.
 */
function cannon({ url, connections, rate, amount, headers, perCall, t }) {
  let n = 0;
  return new Promise((resolveP, reject) => {
    const inst = autocannon(
      {
        url,
        connections,
        pipelining: 1,
        overallRate: rate,
        amount,
        timeout: TIMEOUT_S,
        requests: [
          {
            method: "POST",
            path: new URL(url).pathname,
            headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
            setupRequest: (req) => {
              const c = perCall(n++);
              return { ...req, headers: { ...req.headers, ...c.headers }, body: c.body };
            },
            onResponse: (status, body) => record(t, status, body),
          },
        ],
      },
      (err, result) => (err ? reject(err) : resolveP(result)),
    );
    // Bounded: stop at twice the planned time whatever the rate achieved.
    const guard = setTimeout(() => inst.stop(), 2 * SECONDS * 1000 + 30_000);
    inst.on("done", () => clearTimeout(guard));
  });
}

/** The team's export (NDJSON lines parsed) through GET /v1/ledger/export with an auditor's grant. */
async function exportLedger(base, token) {
  const r = await fetch(`${base}/v1/ledger/export?team=${TEAM}`, {
    headers: { authorization: `Bearer ${token}`, accept: "application/x-ndjson" },
    signal: AbortSignal.timeout(120_000),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`export: ${r.status} ${text.slice(0, 300)}`);
  return text;
}

/** Counts a team chain's entries: decisions and outcomes of the tool, outcome statuses, every kind. */
function countExport(text) {
  const kinds = {};
  const decisions = new Set();
  const outcomes = { total: 0, byStatus: {}, ofDecision: 0 };
  const outcomeDecisions = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const e = JSON.parse(line).entry;
    if (!e || e.chain !== TEAM) continue;
    kinds[e.kind] = (kinds[e.kind] ?? 0) + 1;
    if (e.kind === "decision" && e.body?.tool === TOOL) decisions.add(e.id);
    if (e.kind === "outcome") {
      outcomes.total++;
      outcomes.byStatus[e.body?.status] = (outcomes.byStatus[e.body?.status] ?? 0) + 1;
      outcomeDecisions.push(e.body?.decision_id);
    }
  }
  outcomes.ofDecision = outcomeDecisions.filter((d) => decisions.has(d)).length;
  return { kinds, decisions: decisions.size, outcomes };
}

function machine() {
  const c = cpus();
  return `${c[0]?.model ?? "?"} × ${c.length} cores, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${process.platform} ${process.arch}; Node ${process.version}`;
}

const pad = (x, n) => String(x).padStart(n);

async function main() {
  const procs = [];
  const dirs = [];
  let mf = null;
  let pids = [];
  const killPids = () => {
    for (const pid of pids)
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
  };
  const removeDirs = () => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  };
  const stopAll = async () => {
    if (mf) await Promise.race([mf.dispose().catch(() => {}), sleep(10_000)]);
    mf = null;
    killPids();
    await stopGroups([...procs]);
    procs.length = 0;
    removeDirs();
  };
  process.on("exit", () => {
    for (const p of procs)
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {
        /* gone */
      }
    killPids();
    removeDirs();
  });
  stopOnSignals(stopAll);
  const tmp = tempDirMaker(dirs);
  const failures = [];
  try {
    const load0 = loadavg()[0];
    const keyFile = join(tmp("bench-load-key-"), "signing-key.json");
    const signingKey = await devSigningKey(keyFile);
    const gw = builtWorker(join(root, "wrangler.toml"), tmp("bench-load-gw-"));

    const upPort = await freePort();
    procs.push(spawn(process.execPath, [join(root, "bench/upstream.mjs"), "--port", String(upPort)], { stdio: "ignore", detached: true }));
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await waitHttp(upstreamUrl);

    const port = await freePort();
    const origin = gatewayOrigin("127.0.0.1", port);
    const served = await serveBuilt(gw.file, {
      port,
      persistTo: join(tmp("bench-load-mf-"), "state"),
      name: "portcullis",
      vars: { PORTCULLIS_CONFIG: enforceConfig(upstreamUrl), PORTCULLIS_SIGNING_KEY: signingKey, PORTCULLIS_ORIGIN: origin },
    });
    mf = served.mf;
    pids = served.pids;
    const base = `http://127.0.0.1:${port}`;
    const url = `${base}/mcp`;
    await waitHttp(`${base}/healthz`);

    const agent = mint(keyFile, origin, { sub: "agent:load", team: TEAM, roles: ["agent"], tools: ["test_*"] });
    const auditor = mint(keyFile, origin, { sub: "human:load-auditor", team: TEAM, roles: ["auditor"] });

    const sessions = [];
    for (let i = 0; i < LEGACY; i++) sessions.push(await openSession(url, { authorization: `Bearer ${agent}` }, "bench-load"));
    if (new Set(sessions).size !== LEGACY) throw new Error("two legacy sessions got one Mcp-Session-Id");

    const amount = { legacy: RATES.legacy * SECONDS, modern: RATES.modern * SECONDS };
    const t = { legacy: tally(), modern: tally() };
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const rss0 = pids.reduce((a, p) => a + (rssOf(p)?.rssKb ?? 0), 0);
    let rssMax = rss0;
    const rssTimer = setInterval(() => {
      rssMax = Math.max(
        rssMax,
        pids.reduce((a, p) => a + (rssOf(p)?.rssKb ?? 0), 0),
      );
    }, 1000);
    const t0 = performance.now();
    const [legacy, modern] = await Promise.all([
      cannon({
        url,
        connections: CONNECTIONS.legacy,
        rate: RATES.legacy,
        amount: amount.legacy,
        t: t.legacy,
        headers: { authorization: `Bearer ${agent}`, "mcp-protocol-version": "2025-11-25" },
        // Round-robin over the sessions: each call in one of them, every session in use throughout.
        perCall: (n) => ({
          headers: { "mcp-session-id": sessions[n % LEGACY] },
          body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name: TOOL, arguments: {} } }),
        }),
      }),
      cannon({
        url,
        connections: CONNECTIONS.modern,
        rate: RATES.modern,
        amount: amount.modern,
        t: t.modern,
        headers: { authorization: `Bearer ${agent}`, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": TOOL },
        perCall: () => ({
          headers: {},
          body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name: TOOL, arguments: {}, _meta: meta } }),
        }),
      }),
    ]);
    const elapsedS = (performance.now() - t0) / 1000;
    clearInterval(rssTimer);
    const load1 = loadavg()[0];

    // The ledger: export until two exports in a row agree (the chain's tail flushes to D1 behind the calls), bounded.
    let text = "";
    let counts = null;
    for (let i = 0; i < 30; i++) {
      await sleep(1000);
      const next = await exportLedger(base, auditor);
      const c = countExport(next);
      if (counts && JSON.stringify(c) === JSON.stringify(counts)) break;
      text = next;
      counts = c;
    }
    const dir = tmp("bench-load-export-");
    const exportFile = join(dir, "export.ndjson");
    const jwksFile = join(dir, "jwks.json");
    writeFileSync(exportFile, text);
    writeFileSync(jwksFile, await (await fetch(`${base}/.well-known/jwks.json`, { signal: AbortSignal.timeout(10_000) })).text());
    let verify;
    let verifyOk = true;
    try {
      verify = execFileSync(process.execPath, [join(root, "bin/portcullis.mjs"), "ledger", "verify", "--file", exportFile, "--key", jwksFile, "--quiet"], {
        cwd: root,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
        timeout: 300_000,
      });
    } catch (e) {
      verifyOk = false;
      verify = `${e.stdout ?? ""}${e.stderr ?? ""}exit ${e.status}`;
    }

    console.log(`\nmachine: ${machine()}; load average (1 min) ${load0.toFixed(2)} at the start, ${load1.toFixed(2)} after the run`);
    console.log(`state (Durable Objects, D1): ${stateLocation(tmpdir())}`);
    console.log(
      `runtime: the production runtime without the dev proxy (workerd through Miniflare's API, the bundle \`wrangler deploy --dry-run\` built, local D1 and SQLite Durable Objects); Portcullis in enforce, grants required, ${TOOL} mapped read_only, the 50-rule policy of bench/harness.mjs; upstream test/fixtures/conformance-upstream (Node) on loopback`,
    );
    console.log(
      `\nload: ${SECONDS} s planned at ${RATE} calls/s (legacy ${RATES.legacy}/s over ${CONNECTIONS.legacy} connections sharing ${LEGACY} sessions round-robin, each session its own initialize and Mcp-Session-Id; modern ${RATES.modern}/s over ${CONNECTIONS.modern} connections), autocannon overallRate, pipelining 1, timeout ${TIMEOUT_S} s; took ${elapsedS.toFixed(1)} s`,
    );
    console.log(
      "era      conns   calls    answered   calls/s    ok   non-2xx  JSON-RPC err  isError  no text  no receipt  socket err  timeouts   p50 ms   p90 ms   p99 ms   max ms",
    );
    let calls = 0;
    let ok = 0;
    for (const [era, r, n] of [
      ["legacy", legacy, CONNECTIONS.legacy],
      ["modern", modern, CONNECTIONS.modern],
    ]) {
      const x = t[era];
      const answered = x.ok + x.non2xx + x.rpcError + x.isError + x.noText + x.noReceipt;
      calls += amount[era];
      ok += x.ok;
      console.log(
        `${era.padEnd(7)} ${pad(n, 6)} ${pad(amount[era], 7)} ${pad(answered, 10)} ${pad((answered / elapsedS).toFixed(1), 9)} ${pad(x.ok, 5)} ${pad(x.non2xx, 9)} ${pad(x.rpcError, 13)} ${pad(x.isError, 8)} ${pad(x.noText, 8)} ${pad(x.noReceipt, 11)} ${pad(r.errors, 11)} ${pad(r.timeouts, 9)} ${pad(r.latency.p50, 8)} ${pad(r.latency.p90, 8)} ${pad(r.latency.p99, 8)} ${pad(r.latency.max, 8)}`,
      );
      if (x.ok !== amount[era]) failures.push(`${era}: ${x.ok} calls answered well of ${amount[era]}`);
      if (r.errors || r.timeouts) failures.push(`${era}: ${r.errors} socket errors, ${r.timeouts} timeouts`);
      for (const e of x.examples) failures.push(`${era}: e.g. ${e}`);
      if (answered / elapsedS < SUSTAINED * RATES[era])
        failures.push(`rate: ${era} answered ${(answered / elapsedS).toFixed(1)} calls/s, under ${SUSTAINED * 100}% of the planned ${RATES[era]}/s`);
    }
    console.log(
      `(latency: autocannon's, corrected for coordinated omission at the fixed rate; workerd RSS ${(rss0 / 1024).toFixed(1)} MiB before the run, at most ${(rssMax / 1024).toFixed(1)} MiB during it)`,
    );

    const c = counts;
    console.log(
      `\nledger (team ${TEAM}'s chain, GET /v1/ledger/export?team=${TEAM} with an auditor's grant): ${c.decisions} decisions of ${TOOL}, ${c.outcomes.total} outcomes (${Object.entries(
        c.outcomes.byStatus,
      )
        .map(([k, v]) => `${v} ${k}`)
        .join(", ")}), ${c.outcomes.ofDecision} of them answering those decisions; every kind: ${JSON.stringify(c.kinds)}; calls made ${calls}`,
    );
    if (c.decisions !== calls) failures.push(`ledger: ${c.decisions} decisions for ${calls} calls`);
    if (c.outcomes.ofDecision !== calls || c.outcomes.total !== calls)
      failures.push(`ledger: ${c.outcomes.total} outcomes (${c.outcomes.ofDecision} of the tool's decisions) for ${calls} calls`);
    if ((c.outcomes.byStatus.succeeded ?? 0) !== calls) failures.push(`ledger: ${c.outcomes.byStatus.succeeded ?? 0} outcomes succeeded of ${calls}`);
    if (c.kinds.blocked) failures.push(`ledger: ${c.kinds.blocked} blocked entries`);
    console.log(`\nportcullis ledger verify --file export.ndjson --key jwks.json (${text.split("\n").filter(Boolean).length} export lines):\n${verify.trim()}`);
    if (!verifyOk) failures.push("ledger verify: the export does not verify");

    console.log(
      `\nchecks: zero errors ${ok === calls && !failures.some((f) => /^(legacy|modern)/.test(f)) ? "yes" : "NO"}; the planned rate sustained (≥ ${SUSTAINED * 100}% in each era) ${failures.some((f) => f.startsWith("rate:")) ? "NO" : "yes"}; ledger records equal calls ${failures.some((f) => f.startsWith("ledger:")) ? "NO" : "yes"}; the chain verifies ${verifyOk ? "yes" : "NO"}`,
    );
    for (const f of failures) console.log(`FAILED: ${f}`);
    if (failures.length) console.log(`workerd's last log lines:\n${served.log.lines.slice(-10).join("\n")}`);
  } finally {
    await stopAll();
  }
  return failures.length ? 1 : 0;
}

process.exit(await main());
