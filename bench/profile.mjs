#!/usr/bin/env node
/**
 * `node bench/profile.mjs`: where a governed tools/call spends its CPU on the production runtime.
 * Builds Portcullis once (`wrangler deploy --dry-run`), serves it on Miniflare (bench/miniflare.mjs)
 * in enforce with the bench's 50-rule policy and grants required (bench/harness.mjs) in front of
 * the conformance fixture, warms it up, then takes a V8 CPU profile of the gateway's isolate
 * (workerd's inspector, Chrome DevTools protocol: Profiler.start/stop) over PROFILE_CALLS calls
 * (default 400, at concurrency 8, half legacy on one session, half modern; PROFILE_ERA=legacy or
 * modern for one era) and prints the
 * self time by bundled source module (esbuild's `// path` markers in the bundle) and by function,
 * with the workerd CPU per call over the same calls. The Worker and its Durable Objects share
 * one isolate here, so the profile covers both; Miniflare's own services (its entry Worker, the
 * D1 simulator) run in other isolates and show up only in the CPU per call. Prints numbers,
 * asserts nothing; every process stopped at the end. Bench only, never deployed.
 */
import { spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { builtWorker, devSigningKey, gatewayOrigin } from "../cli/gateway-start.ts";
import { enforceConfig, freePort, mint, openSession, post, root, sleep, stopGroups, tempDirMaker, waitHttp } from "./harness.mjs";
import { cpuMsOf, serveBuilt } from "./miniflare.mjs";

const CALLS = Number(process.env.PROFILE_CALLS ?? 400);
/** Which agent era the timed calls speak: `both` (alternating, the default), `legacy` or `modern`. */
const ERA = process.env.PROFILE_ERA ?? "both";
if (!["both", "legacy", "modern"].includes(ERA)) throw new Error(`PROFILE_ERA must be both, legacy or modern, not ${JSON.stringify(ERA)}`);
const ERA_TEXT = ERA === "both" ? "half legacy, half modern" : `all ${ERA}`;
const WARM = 200;

/** A minimal CDP client over the inspector WebSocket. */
async function cdp(wsUrl) {
  const ws = new WebSocket(wsUrl);
  await new Promise((res, rej) => {
    ws.onopen = res;
    ws.onerror = rej;
  });
  let id = 0;
  const waiting = new Map();
  ws.onmessage = (ev) => {
    const m = JSON.parse(ev.data);
    if (m.id && waiting.has(m.id)) {
      waiting.get(m.id)(m);
      waiting.delete(m.id);
    }
  };
  return {
    send: (method, params = {}) =>
      new Promise((res, rej) => {
        const i = ++id;
        waiting.set(i, (m) => (m.error ? rej(new Error(`${method}: ${m.error.message}`)) : res(m.result)));
        ws.send(JSON.stringify({ id: i, method, params }));
      }),
    close: () => ws.close(),
  };
}

/** The bundle's module of each line: esbuild's `// path` comment lines start a module. */
function moduleMap(bundleFile) {
  const starts = [];
  for (const [i, line] of readFileSync(bundleFile, "utf8").split("\n").entries()) {
    const m = /^\/\/ ((?:src|durable-objects|node_modules|bench)\/\S+)$/.exec(line);
    if (m) starts.push([i, m[1].replace(/^node_modules\/((?:@[^/]+\/)?[^/]+)\/.*$/, "node_modules/$1")]);
  }
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found = "(bundle prelude)";
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid][0] <= line) {
        found = starts[mid][1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}

async function main() {
  const procs = [];
  const dirs = [];
  let mf = null;
  const tmp = tempDirMaker(dirs);
  try {
    const keyFile = join(tmp("bench-prof-key-"), "k.json");
    const signingKey = await devSigningKey(keyFile);
    const gw = builtWorker(join(root, "wrangler.toml"), tmp("bench-prof-gw-"));
    const upPort = await freePort();
    procs.push(spawn(process.execPath, [join(root, "bench/upstream.mjs"), "--port", String(upPort)], { stdio: "ignore", detached: true }));
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await waitHttp(upstreamUrl);
    const port = await freePort();
    const inspectorPort = await freePort();
    const origin = gatewayOrigin("127.0.0.1", port);
    const s = await serveBuilt(gw.file, {
      port,
      inspectorPort,
      persistTo: join(tmp("bench-prof-mf-"), "state"),
      name: "portcullis",
      vars: { PORTCULLIS_CONFIG: enforceConfig(upstreamUrl), PORTCULLIS_SIGNING_KEY: signingKey, PORTCULLIS_ORIGIN: origin },
    });
    mf = s.mf;
    const url = `http://127.0.0.1:${port}/mcp`;
    await waitHttp(`http://127.0.0.1:${port}/healthz`);
    const token = mint(keyFile, origin, { sub: "agent:bench", team: "bench", tools: ["test_*"] });
    const auth = { authorization: `Bearer ${token}` };
    const sid = await openSession(url, auth, "prof");
    let id = 0;
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const call = async (i) => {
      const legacy = ERA === "both" ? i % 2 === 0 : ERA === "legacy";
      const r = legacy
        ? await post(
            url,
            { ...auth, "mcp-protocol-version": "2025-11-25", "mcp-session-id": sid },
            JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {} } }),
          )
        : await post(
            url,
            { ...auth, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_simple_text" },
            JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {}, _meta: meta } }),
          );
      if (r.status !== 200 || !r.body.includes("simple text") || r.body.includes('"isError":true'))
        throw new Error(`bad answer ${r.status} ${r.body.slice(0, 200)}`);
    };
    const run = async (n) => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < n) await call(next++);
        }),
      );
    };
    await run(WARM);

    const list = await (await fetch(`http://127.0.0.1:${inspectorPort}/json/list`)).json();
    const target = list.find((t) => /portcullis/.test(`${t.title} ${t.id} ${t.url}`)) ?? list[0];
    const c = await cdp(target.webSocketDebuggerUrl);
    await c.send("Profiler.enable");
    await c.send("Profiler.setSamplingInterval", { interval: 200 });
    await c.send("Profiler.start");
    const cpu0 = cpuMsOf(s.pids);
    const t0 = performance.now();
    await run(CALLS);
    const wall = performance.now() - t0;
    const cpu = cpuMsOf(s.pids) - cpu0;
    const { profile } = await c.send("Profiler.stop");
    c.close();

    // Self time per node: each sample's node gets the time delta that follows it.
    const self = new Map();
    for (const [i, nodeId] of profile.samples.entries()) self.set(nodeId, (self.get(nodeId) ?? 0) + (profile.timeDeltas[i + 1] ?? 0) / 1000);
    const modOf = moduleMap(gw.bundle);
    const byModule = new Map();
    const byFunction = new Map();
    let total = 0;
    for (const node of profile.nodes) {
      const ms = self.get(node.id) ?? 0;
      if (!ms) continue;
      total += ms;
      const f = node.callFrame;
      const special = f.url === "" || !f.url;
      const mod = special ? f.functionName || "(native)" : f.url.endsWith(".js") && /index\.js$/.test(f.url) ? modOf(f.lineNumber) : f.url;
      byModule.set(mod, (byModule.get(mod) ?? 0) + ms);
      const fn = `${f.functionName || "(anonymous)"}  ${special ? "" : `${mod}:${f.lineNumber + 1}`}`;
      byFunction.set(fn, (byFunction.get(fn) ?? 0) + ms);
    }
    // The same self time with each native frame (SQLite's exec, fetch, timers…) charged to the bundled module that called it.
    const parent = new Map();
    for (const node of profile.nodes) for (const ch of node.children ?? []) parent.set(ch, node);
    const moduleOfNode = (node) => {
      const f = node.callFrame;
      return f.url && /index\.js$/.test(f.url) ? modOf(f.lineNumber) : null;
    };
    const charged = new Map();
    for (const node of profile.nodes) {
      const ms = self.get(node.id) ?? 0;
      if (!ms || node.callFrame.functionName === "(idle)") continue;
      let at = node;
      let mod = moduleOfNode(at);
      while (!mod && parent.has(at.id)) {
        at = parent.get(at.id);
        mod = moduleOfNode(at);
      }
      const key = mod ?? (node.callFrame.functionName || "(native, no bundled caller)");
      charged.set(key, (charged.get(key) ?? 0) + ms);
    }
    const busy = total - (byModule.get("(idle)") ?? 0);
    console.log(
      `\nCPU profile of the gateway's isolate (enforce, 50 rules, grant; Worker and Durable Objects in one isolate), ${CALLS} calls at c=8 (${ERA_TEXT}) after ${WARM} warm-up calls: wall ${wall.toFixed(0)} ms, ${(CALLS / (wall / 1000)).toFixed(0)} calls/s; workerd CPU ${cpu.toFixed(0)} ms = ${(cpu / CALLS).toFixed(2)} ms per call; profiled ${total.toFixed(0)} ms, of which not idle ${busy.toFixed(0)} ms = ${(busy / CALLS).toFixed(2)} ms per call (the sampler's time is wall time between samples, so it also counts time the thread waited for a core on a busy machine: read the shares, and workerd's CPU for the absolute cost)`,
    );
    const top = (m, n) => [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
    console.log("\nself time by module (not idle)                                         ms   ms/call   % of busy");
    for (const [k, v] of top(byModule, 30))
      if (k !== "(idle)")
        console.log(
          `${k.slice(0, 66).padEnd(66)} ${v.toFixed(0).padStart(8)} ${(v / CALLS).toFixed(3).padStart(9)} ${((100 * v) / busy).toFixed(1).padStart(10)}`,
        );
    console.log(
      "\nthe same, each native frame (SQLite exec, fetch, timers, crypto…) charged to the bundled module that called it      ms   ms/call   % of busy",
    );
    for (const [k, v] of top(charged, 30))
      console.log(
        `${k.slice(0, 66).padEnd(66)} ${v.toFixed(0).padStart(8)} ${(v / CALLS).toFixed(3).padStart(9)} ${((100 * v) / busy).toFixed(1).padStart(10)}`,
      );
    printSteps(charged, busy);
    console.log("\nself time by function (top 40)                                                               ms   ms/call   % of busy");
    for (const [k, v] of top(byFunction, 41))
      if (!k.startsWith("(idle)"))
        console.log(
          `${k.slice(0, 90).padEnd(90)} ${v.toFixed(0).padStart(6)} ${(v / CALLS).toFixed(3).padStart(9)} ${((100 * v) / busy).toFixed(1).padStart(10)}`,
        );
  } finally {
    if (mf) await Promise.race([mf.dispose().catch(() => {}), sleep(10_000)]);
    await stopGroups(procs);
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

/**
 * The request path of DESIGN.md, step by step: which bundled modules do each step's work. Ordered:
 * the first pattern a module matches names its step. What matches none is listed by name under
 * "other", so every millisecond of the charged table is in exactly one row.
 */
const STEPS = [
  [
    "1 edge checks (Hono, body cap, JSON-RPC shape, hosts, routes)",
    /node_modules\/hono|src\/wire\/(body|http|jsonrpc|hosts|headers)\.ts|src\/routes\/|src\/mcp\/edge\.ts|src\/index\.ts/,
  ],
  ["2 identity (grant signature, claims, revocation cache)", /src\/identity\/|node_modules\/jose/],
  ["5 kill switch (isolate cache, KillSwitchDO, in-flight watch)", /killswitch/],
  ["9 hold (HoldsDO, holds service)", /hold/],
  ["8 history (HistoryDO, rate limits)", /histor/],
  [
    "10+13 ledger: decision and outcome (Worker batching, LedgerDO commit, D1 flush)",
    /ledger|node_modules\/canonicalize|src\/wire\/canonical\.ts|@noble\/hashes/,
  ],
  [
    "3 route (legacy: SessionDO, session legs; modern: per request)",
    /src\/mcp\/(legacy|modern|context|dispatch|legs|streams|live-config|grant-watch)\.ts|durable-objects\/(session|sse)\.ts/,
  ],
  ["4 resolve (tool catalog)", /src\/mcp\/(catalog|catalog-store|aggregate|names)\.ts|src\/governance\/catalog\.ts/],
  [
    "6-8 classify, validate, decide (policy, CEL, JSON Schema)",
    /src\/governance\/(classify|validate|policy|policy-cel|policy-compile|engine|call-decide|grant-scope|steps)\.ts|cel-js|json-schema|src\/config\//,
  ],
  ["12 obligations", /obligations/],
  [
    "11 forward (egress rules, credentials, upstream HTTP and SSE)",
    /src\/egress\/|src\/mcp\/(upstream|upstream-http|forward|relay)\.ts|src\/wire\/(sse|bounded)\.ts/,
  ],
  ["14 answer (call orchestration, answer shapes, JSON/SSE response)", /src\/mcp\/respond\.ts|src\/governance\/call(-answers)?\.ts/],
  ["runtime (V8 program, GC, natives with no bundled caller, bundle prelude)", /^\(/],
];

function printSteps(charged, busy) {
  const rows = new Map(STEPS.map(([name]) => [name, 0]));
  const other = new Map();
  for (const [mod, ms] of charged) {
    const step = STEPS.find(([, re]) => re.test(mod));
    if (step) rows.set(step[0], rows.get(step[0]) + ms);
    else other.set(mod, ms);
  }
  console.log(
    "\nthe charged time by step of the request path (DESIGN.md), modules matched in the order bench/profile.mjs STEPS lists      ms   ms/call   % of busy",
  );
  const line = (k, v) =>
    console.log(`${k.slice(0, 84).padEnd(84)} ${v.toFixed(0).padStart(8)} ${(v / CALLS).toFixed(3).padStart(9)} ${((100 * v) / busy).toFixed(1).padStart(10)}`);
  for (const [k, v] of [...rows].sort((a, b) => b[1] - a[1])) line(k, v);
  const otherMs = [...other.values()].reduce((a, b) => a + b, 0);
  line("other", otherMs);
  if (other.size)
    console.log(
      `  other: ${[...other]
        .sort((a, b) => b[1] - a[1])
        .map(([m, ms]) => `${m} ${(ms / CALLS).toFixed(3)}`)
        .join(", ")}`,
    );
}

await main();
process.exit(0);
