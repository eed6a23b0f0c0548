#!/usr/bin/env node
/**
 * `npm run bench`: latency (p50/p99) and throughput (calls/s) of one tools/call three ways, in
 * one run on loopback: directly against the upstream, through a bare pass-through Worker on the
 * same runtime, and through Portcullis (transparent mode), in both protocol eras. Prints ratios.
 * Bounded: fixed call counts, every request with a timeout; all processes stopped at the end,
 * each with its whole tree: every child leads its own process group (the wrangler shim, the real
 * wrangler and workerd share it), stopped by SIGTERM to the group, SIGKILL after a bound; on
 * Ctrl-C/SIGTERM (which no longer reach the groups from the terminal) and at exit as well.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { Agent, request } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startGateway } from "../bin/portcullis.mjs";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const SEQ = Number(process.env.BENCH_SEQ ?? 400);
const PAR_CALLS = Number(process.env.BENCH_PAR_CALLS ?? 800);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
const WARMUP = 50;

const freePort = () => new Promise((res) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => res(p)); }); });
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

function post(url, headers, body) {
  const u = new URL(url);
  return new Promise((resolveP, reject) => {
    const req = request({ host: u.hostname, port: u.port, path: u.pathname, method: "POST", agent, headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers }, timeout: 10_000 }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolveP({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", reject);
    req.end(body);
  });
}

async function waitHttp(url, ms = 90_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    try { const r = await fetch(url, { signal: AbortSignal.timeout(1000) }); if (r.status > 0) return; } catch {}
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timeout waiting for ${url}`);
}

/** A caller for one target and era: returns a function doing one tools/call. */
async function caller(url, era) {
  if (era === "modern") {
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const headers = { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "test_simple_text" };
    let id = 0;
    return async () => {
      const r = await post(url, headers, JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {}, _meta: meta } }));
      if (r.status !== 200 || !r.body.includes("simple text")) throw new Error(`bad answer ${r.status} ${r.body.slice(0, 200)}`);
    };
  }
  const init = await post(url, {}, JSON.stringify({ jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bench", version: "1" } } }));
  const sid = init.headers["mcp-session-id"];
  const headers = { "mcp-protocol-version": "2025-11-25", ...(sid ? { "mcp-session-id": sid } : {}) };
  await post(url, headers, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  let id = 0;
  return async () => {
    const r = await post(url, headers, JSON.stringify({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name: "test_simple_text", arguments: {} } }));
    if (r.status !== 200 || !r.body.includes("simple text")) throw new Error(`bad answer ${r.status} ${r.body.slice(0, 200)}`);
  };
}

/** Does process group `pgid` still have a live (not zombie) member? /proc where there is one, else signal 0. */
function groupAlive(pgid) {
  if (!existsSync("/proc/self/stat")) { try { process.kill(-pgid, 0); return true; } catch { return false; } }
  return readdirSync("/proc").some((d) => {
    if (!/^\d+$/.test(d)) return false;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const [state, , pgrp] = s.slice(s.lastIndexOf(")") + 2).split(" ");
      return Number(pgrp) === pgid && state !== "Z" && state !== "X";
    } catch { return false; }
  });
}
const signalGroup = (pgid, sig) => { try { process.kill(-pgid, sig); } catch { /* gone */ } };

/** Stops the groups led by `procs`: SIGTERM, then SIGKILL for what still runs after `graceMs` (bounded). */
async function stopGroups(procs, graceMs = 8000) {
  const pgids = procs.map((p) => p.pid).filter((pid) => pid !== undefined);
  for (const g of pgids) signalGroup(g, "SIGTERM");
  for (const [sig, ms] of [["SIGKILL", graceMs], [null, 3000]]) {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && pgids.some(groupAlive)) await new Promise((r) => setTimeout(r, 100));
    if (sig) for (const g of pgids.filter(groupAlive)) signalGroup(g, sig);
  }
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]; };

async function measure(call) {
  for (let i = 0; i < WARMUP; i++) await call();
  const lat = [];
  for (let i = 0; i < SEQ; i++) { const t = performance.now(); await call(); lat.push(performance.now() - t); }
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (next++ < PAR_CALLS) await call(); }));
  const secs = (performance.now() - t0) / 1000;
  return { p50: pct(lat, 50), p99: pct(lat, 99), rps: PAR_CALLS / secs };
}

async function main() {
  const procs = [];
  const dirs = [];
  const removeDirs = () => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); };
  const stopAll = async () => { await stopGroups([...procs]); procs.length = 0; removeDirs(); };
  // At exit (whatever the path): SIGKILL any group still running, synchronously.
  process.on("exit", () => { for (const p of procs) if (p.pid !== undefined) signalGroup(p.pid, "SIGKILL"); removeDirs(); });
  for (const [sig, code] of [["SIGINT", 130], ["SIGTERM", 143]]) process.once(sig, () => { void stopAll().finally(() => process.exit(code)); });
  try {
    const upPort = await freePort();
    const up = spawn(process.execPath, [join(root, "test/fixtures/conformance-upstream/server.ts"), "--port", String(upPort)], { stdio: "ignore", detached: true });
    procs.push(up);
    const upstreamUrl = `http://127.0.0.1:${upPort}/mcp`;
    await waitHttp(upstreamUrl);

    const ptPort = await freePort();
    const ptDir = mkdtempSync(join(tmpdir(), "bench-pt-")); dirs.push(ptDir);
    const pt = spawn(join(root, "node_modules/.bin/wrangler"), ["dev", "--config", join(root, "bench/passthrough.wrangler.toml"), "--ip", "127.0.0.1", "--port", String(ptPort), "--inspector-port", "0", "--show-interactive-dev-session=false", "--log-level", "error", "--persist-to", ptDir, "--var", `UPSTREAM_URL:${upstreamUrl}`], { stdio: "ignore", detached: true, env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" } });
    procs.push(pt);

    const gwPort = await freePort();
    const gwDir = mkdtempSync(join(tmpdir(), "bench-gw-")); dirs.push(gwDir);
    const gw = startGateway({ configText: `actor: local:bench\negress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${upstreamUrl}\n`, port: gwPort, persistTo: gwDir, stdio: "ignore", logLevel: process.env.BENCH_GATEWAY_LOG_LEVEL ?? "log", detached: true });
    procs.push(gw);
    await waitHttp(`http://127.0.0.1:${ptPort}/`);
    await waitHttp(`http://127.0.0.1:${gwPort}/healthz`);

    const targets = [
      ["direct", upstreamUrl],
      ["passthrough-worker", `http://127.0.0.1:${ptPort}/mcp`],
      ["portcullis", `http://127.0.0.1:${gwPort}/mcp`],
    ];
    const results = {};
    for (const era of ["legacy", "modern"]) {
      for (const [name, url] of targets) {
        results[`${era}/${name}`] = await measure(await caller(url, era));
      }
    }
    console.log(`\none tools/call (test_simple_text), ${SEQ} sequential + ${PAR_CALLS} at concurrency ${CONCURRENCY}, loopback\n`);
    console.log("era     target               p50 ms   p99 ms   calls/s");
    for (const [k, r] of Object.entries(results)) {
      const [era, name] = k.split("/");
      console.log(`${era.padEnd(7)} ${name.padEnd(20)} ${r.p50.toFixed(2).padStart(7)}  ${r.p99.toFixed(2).padStart(7)}  ${r.rps.toFixed(0).padStart(8)}`);
    }
    console.log("\nratios (portcullis ÷ baseline; latency >1 = slower, throughput <1 = fewer calls/s)");
    for (const era of ["legacy", "modern"]) {
      const g = results[`${era}/portcullis`];
      for (const base of ["direct", "passthrough-worker"]) {
        const b = results[`${era}/${base}`];
        console.log(`${era.padEnd(7)} vs ${base.padEnd(19)} p50 ×${(g.p50 / b.p50).toFixed(2)}  p99 ×${(g.p99 / b.p99).toFixed(2)}  calls/s ×${(g.rps / b.rps).toFixed(2)}`);
      }
    }
  } finally {
    await stopAll();
  }
}

await main();
process.exit(0);
