/**
 * Bench only: what `npm run bench` (bench/run.mjs) and `npm run bench:load` (bench/load.mjs)
 * share — free loopback ports, a keep-alive HTTP POST with a timeout, waiting for a server,
 * percentiles (a Worker is built once by cli/gateway-start.ts `builtWorker`),
 * stopping whole process groups, the gateway configs the benches serve (observe; enforce with a
 * 50-rule policy, a mapping and grants required), minting a grant with the CLI, and reading a
 * JSON-RPC answer that came as JSON or as SSE. Owns no gateway behaviour; must never touch the
 * developer's .portcullis key or .dev.vars, listen off loopback, or leave a process running.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const root = resolve(fileURLToPath(import.meta.url), "../..");
export const wrangler = join(root, "node_modules/.bin/wrangler");
// Vars reach each Worker through a private env file or Miniflare bindings only (never argv; no .dev.vars, nothing from this environment).
export const WORKER_ENV = {
  ...process.env,
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true",
  CLOUDFLARE_INCLUDE_PROCESS_ENV: "false",
};

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export const freePort = () =>
  new Promise((res) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

export function post(url, headers, body, timeout = 10_000) {
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

/**
 * Opens one 2025-11-25 session at `url` (`headers` carry its grant, if any): initialize, then
 * notifications/initialized. Its Mcp-Session-Id; throws naming the step that was refused.
 */
export async function openSession(url, headers, clientName) {
  const init = await post(
    url,
    headers,
    JSON.stringify({
      jsonrpc: "2.0",
      id: 0,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: clientName, version: "1" } },
    }),
  );
  const sid = init.headers["mcp-session-id"];
  if (init.status !== 200 || !sid) throw new Error(`initialize: ${init.status} ${init.body.slice(0, 300)}`);
  const n = await post(
    url,
    { ...headers, "mcp-protocol-version": "2025-11-25", "mcp-session-id": sid },
    JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
  );
  if (n.status >= 300) throw new Error(`notifications/initialized: ${n.status} ${n.body.slice(0, 300)}`);
  return sid;
}

export async function waitHttp(url, ms = 90_000) {
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

export const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};

/** The JSON-RPC message of an answer that is JSON, or the last `data:` message of an SSE answer; null if neither. */
export function rpcMessage(body) {
  const t = body.trimStart();
  try {
    if (t.startsWith("{")) return JSON.parse(t);
    let last = null;
    for (const line of t.split("\n")) if (line.startsWith("data:") && line.slice(5).trim().startsWith("{")) last = JSON.parse(line.slice(5));
    return last;
  } catch {
    return null;
  }
}

/** Does process group `pgid` still have a live (not zombie) member? /proc where there is one, else signal 0. */
export function groupAlive(pgid) {
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

export const signalGroup = (pgid, sig) => {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* gone */
  }
};

/** Stops the groups led by `procs`: SIGTERM, then SIGKILL for what still runs after `graceMs` (bounded). */
export async function stopGroups(procs, graceMs = 8000) {
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

/** The bench's transparent gateway: observe (no mappings, no policy), no grant needed on loopback. */
export function observeConfig(upstreamUrl) {
  return `actor: local:bench\nmode: observe\negress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${upstreamUrl}\n`;
}

/** `n` rules about other tools (matched on name and skipped for the timed tool), a third of them denials: the bulk of a typical policy. */
export function otherToolRules(n) {
  const rules = [];
  for (let i = 0; i < n; i++)
    rules.push({
      id: `other-${i}`,
      match: { tool: `svc${i}__*`, effect: ["irreversible", "reversible"] },
      decision: i % 3 ? "allow" : "deny",
      reason: `rule for svc${i}`,
    });
  return rules;
}

/** `n` static allow rules for the ops team's pay tools, each with its own mask obligation (ids `<prefix>-<i>`). */
export function opsPayRules(n, prefix) {
  return Array.from({ length: n }, (_, i) => ({
    id: `${prefix}-${i}`,
    match: { tool: "pay__*", team: "ops", role: "agent" },
    decision: "allow",
    reason: "ops may pay",
    obligations: [`mask:field${i}`],
  }));
}

/**
 * 50 policy rules as an operator would write them (the typical mix of bench/policy.mjs, aimed
 * at this gateway's tool): most about other tools, so they are matched and skipped; static rules
 * and CEL conditions that do match test_simple_text and are evaluated on every call; a shadow
 * (mode: observe) rule; no history rule matches it, so no HistoryDO read is on the timed path.
 * No rule denies or holds test_simple_text: every call is allowed, by rule "bench-allow".
 */
export function fiftyRules() {
  const rules = [...otherToolRules(30), ...opsPayRules(6, "pay")];
  for (let i = 0; i < 6; i++)
    rules.push({
      id: `cel-${i}`,
      match: { upstream: "conf", tool: "test_*" },
      when: `has(args.amount) && args.amount > ${1000 * (i + 1)}.0 && principal.team == "ops"`,
      decision: "require_approval",
      reason: "large amounts need approval",
    });
  rules.push({
    id: "rate-other",
    match: { tool: "pay__*" },
    history: { count: { tool: "pay__*", within: "1m" } },
    when: "history.count >= 20",
    decision: "deny",
    reason: "at most 20 payments a minute",
  });
  rules.push({
    id: "weekend-other",
    match: { tool: "pay__*" },
    window: { days: ["sat", "sun"] },
    decision: "require_approval",
    reason: "weekend payments need approval",
  });
  rules.push({ id: "no-drops", match: { tool: "*drop*" }, decision: "deny", reason: "never drop" });
  rules.push({ id: "no-deletes", match: { tool: "test_delete*" }, decision: "deny", reason: "no deletes" });
  rules.push({
    id: "readers",
    match: { effect: "read_only", role: "agent" },
    when: 'tool.upstream == "conf" && classification.effect == "read_only"',
    decision: "allow",
    reason: "reads are fine",
  });
  rules.push({
    id: "shadow",
    match: { tool: "test_*" },
    when: 'principal.sub.startsWith("agent:blocked-")',
    decision: "deny",
    reason: "blocked agents",
    mode: "observe",
  });
  rules.push({ id: "team-only", match: { tool: "test_*", team: "bench*" }, when: '"agent" in principal.roles', decision: "allow", reason: "bench team" });
  rules.push({ id: "bench-allow", match: { tool: "test_simple_text", upstream: "conf", principal: "agent:*" }, decision: "allow", reason: "the bench's tool" });
  if (rules.length !== 50) throw new Error(`fiftyRules: ${rules.length} rules`);
  return rules;
}

/** The governed gateway: enforce, grants required, test_simple_text mapped read_only, the 50 rules. */
export function enforceConfig(upstreamUrl) {
  const config = {
    mode: "enforce",
    auth: { required: true },
    egress: { allow_loopback: true },
    upstreams: [{ name: "conf", url: upstreamUrl }],
    mappings: { conf: { tools: { test_simple_text: { effect: "read_only" } } } },
    policy: { rules: fiftyRules() },
  };
  return JSON.stringify(config); // JSON is YAML
}

/** A grant for the gateway at `origin`, minted by the CLI with the key in `keyFile` (`portcullis token mint --key`). */
export function mint(keyFile, origin, { sub, team, roles = ["agent"], tools = [], ttl = "1h" }) {
  const argv = [
    join(root, "bin/portcullis.mjs"),
    "token",
    "mint",
    "--key",
    keyFile,
    "--gateway",
    origin,
    "--sub",
    sub,
    "--team",
    team,
    "--role",
    roles.join(","),
    "--ttl",
    ttl,
  ];
  if (tools.length) argv.push("--tools", tools.join(","));
  return execFileSync(process.execPath, argv, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 }).trim();
}

/**
 * Where the runs keep their Durable Object and D1 state (the OS temp directory, `TMPDIR`) and on
 * what filesystem, from /proc/mounts: on a disk every durable commit waits for its fsync; on
 * tmpfs (`TMPDIR=/dev/shm`) none does, which shows what the code costs without this disk.
 */
export function stateLocation(dir) {
  let best = { point: "", type: "unknown" };
  try {
    for (const line of readFileSync("/proc/mounts", "utf8").split("\n")) {
      const [, point, type] = line.split(" ");
      if (!point || !type) continue;
      const inside = dir === point || dir.startsWith(point.endsWith("/") ? point : `${point}/`);
      if (inside && point.length >= best.point.length) best = { point, type };
    }
  } catch {
    // not Linux: the type stays unknown
  }
  return `${dir} (${best.type}${best.type === "tmpfs" ? ": in memory, commits wait for no fsync" : ", commits wait for the disk's fsync"})`;
}

/** On SIGINT or SIGTERM: `stopAll`, then exit with the signal's conventional code (130, 143). */
export function stopOnSignals(stopAll) {
  for (const [sig, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ])
    process.once(sig, () => {
      void stopAll().finally(() => process.exit(code));
    });
}

/** A maker of throwaway directories under the OS temp directory, each pushed onto `dirs` (for the caller to remove). */
export function tempDirMaker(dirs) {
  return (prefix) => {
    const d = mkdtempSync(join(tmpdir(), prefix));
    dirs.push(d);
    return d;
  };
}
