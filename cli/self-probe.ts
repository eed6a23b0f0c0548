/**
 * `portcullis check --self-probe`: proves this build fails closed. A local gateway (wrangler dev
 * on a free 127.0.0.1 port or the one --port names, a fresh signing key, its state in a temporary directory) in front of a
 * recording upstream defined here; a real `tools/call` as a grant whose team is not a valid ledger
 * chain name must be refused at the write-ahead and never reach the upstream, then a control call
 * with a writable ledger must reach it. Owns the probe, its report and exit codes (0 PASS, 1 FAIL,
 * 2 usage, 3 the probe could not be run). Must never: leave a process it started running, listen
 * beyond 127.0.0.1, or say PASS unless both calls did what they must.
 */
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { durationArg, FLAG, HELP_OPTION, type Options, portArg, STRING, UsageError } from "./args.ts";
import { codeOf, isObject, type JsonObject, messageOf } from "./gateway-http.ts";
import { startGateway } from "./gateway-start.ts";
import { HELP } from "./local.ts";

const MODERN_VERSION = "2026-07-28";

/** The options of `check` as this file runs it (--self-probe; --config is only refused here). */
export const CHECK_OPTIONS = { "self-probe": FLAG, port: STRING, timeout: STRING, verbose: FLAG, json: FLAG, ...HELP_OPTION, config: STRING } as const;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** The team of the probe's grant: not a ledger chain name (durable-objects/object-names.ts CHAIN_NAME), so its chain cannot be written. */
export const UNWRITABLE_TEAM = "self-probe/no-ledger";
const CONTROL_TEAM = "self-probe";
const PROBE_TOOL = "probe_record";

/**
 * A 2026-07-28 upstream on 127.0.0.1 (a free port) with one tool, `probe_record`; it counts
 * every request by method, so the probe can show what reached it. `close()` stops it.
 */
export async function startRecordingUpstream(): Promise<{ url: string; count: (method: string) => number; close: () => Promise<void> }> {
  const seen: Record<string, number> = {};
  const reply = (res: ServerResponse, id: unknown, result: JsonObject) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id, result: { resultType: "complete", ...result } }));
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= 1 << 20) chunks.push(c);
    });
    req.on("end", () => {
      let parsed: unknown;
      try {
        parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return void res.writeHead(400).end();
      }
      const msg: JsonObject = isObject(parsed) ? parsed : {};
      const method = typeof msg.method === "string" ? msg.method : "(none)";
      seen[method] = (seen[method] ?? 0) + 1;
      const params = isObject(msg.params) ? msg.params : {};
      const meta = isObject(params._meta) ? params._meta : {};
      if (meta["io.modelcontextprotocol/protocolVersion"] !== MODERN_VERSION) {
        res.writeHead(400, { "content-type": "application/json" });
        return void res.end(
          JSON.stringify({
            jsonrpc: "2.0",
            id: msg.id ?? null,
            error: { code: -32022, message: "this server speaks only 2026-07-28", data: { supported: [MODERN_VERSION] } },
          }),
        );
      }
      if (!("id" in msg)) return void res.writeHead(202).end();
      if (method === "server/discover")
        return reply(res, msg.id, {
          supportedVersions: [MODERN_VERSION],
          capabilities: { tools: {} },
          _meta: { "io.modelcontextprotocol/serverInfo": { name: "portcullis-self-probe", version: "1" } },
        });
      if (method === "tools/list")
        return reply(res, msg.id, {
          tools: [
            {
              name: PROBE_TOOL,
              description: "Records that it was called (the self-probe's upstream)",
              inputSchema: { type: "object", additionalProperties: false },
            },
          ],
          ttlMs: 0,
          cacheScope: "public",
        });
      if (method === "tools/call" && params.name === PROBE_TOOL) return reply(res, msg.id, { content: [{ type: "text", text: "recorded" }] });
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } }));
    });
  });
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(0, "127.0.0.1", ok);
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`,
    count: (method) => seen[method] ?? 0,
    close: () =>
      new Promise((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}

/** A port free on 127.0.0.1: `port` itself when it is free (else the listen's error, e.g. EADDRINUSE), or any free one when 0. */
function freePort(port = 0): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(port, "127.0.0.1", () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => ok(port));
    });
  });
}

/** The probe gateway's config: the recording upstream, its one tool mapped (so enforce lets it through to the write-ahead). */
const probeConfig = (upstreamUrl: string) => `# portcullis check --self-probe
actor: local:self-probe
mode: enforce
egress:
  allow_loopback: true
upstreams:
  - name: probe
    url: ${upstreamUrl}
    timeout: 10s
mappings:
  probe:
    tools:
      ${PROBE_TOOL}: { effect: idempotent, verb: record }
`;

const parsedJson = (text: string): unknown => {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
};

/** One 2026-07-28 tools/call to the gateway's /mcp as `bearer`; the JSON-RPC answer (from JSON or SSE). */
async function callTool(
  origin: string,
  bearer: string,
  name: string,
  timeoutMs = 60_000,
): Promise<{ status: number; answer: JsonObject | null; body: string }> {
  const res = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${bearer}`,
      "mcp-protocol-version": MODERN_VERSION,
      "mcp-method": "tools/call",
      "mcp-name": name,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name, arguments: {}, _meta: { "io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": {} } },
    }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = await res.text();
  const messages = (res.headers.get("content-type") ?? "").includes("text/event-stream")
    ? body
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trim())
        .filter(Boolean)
        .map(parsedJson)
    : [parsedJson(body)];
  return { status: res.status, answer: messages.filter(isObject).find((m) => m.id === 1) ?? null, body: body.slice(0, 500) };
}

const resultOf = (answer: JsonObject | null): JsonObject | undefined => (isObject(answer?.result) ? answer.result : undefined);

const textOf = (answer: JsonObject | null): string => {
  const content = resultOf(answer)?.content;
  if (Array.isArray(content))
    return content
      .filter((c): c is JsonObject => isObject(c) && c.type === "text")
      .map((c) => c.text)
      .join("\n");
  const error = isObject(answer?.error) ? answer.error : undefined;
  return typeof error?.message === "string" ? error.message : "";
};

/** Stops the gateway's whole process group (it was started detached): SIGTERM, then SIGKILL after a bound. */
async function stopGroup(child: ChildProcess): Promise<void> {
  const pid = child.pid;
  if (pid === undefined) return;
  const alive = () => {
    try {
      process.kill(-pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-pid, s);
    } catch {
      /* gone */
    }
  };
  signal("SIGTERM");
  for (let i = 0; i < 80 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
  if (alive()) {
    signal("SIGKILL");
    for (let i = 0; i < 30 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
  }
}

async function waitHealthy(origin: string, timeoutMs: number, child: ChildProcess, progress: (s: string) => void): Promise<string | null> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  let told = Date.now();
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) return `the gateway exited while starting (code ${child.exitCode}, signal ${child.signalCode})`;
    try {
      const r = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(2000) });
      await r.body?.cancel();
      if (r.ok) return null;
      last = `HTTP ${r.status}`;
    } catch (e) {
      const cause = e instanceof Error ? e.cause : undefined;
      last = isObject(cause) && typeof cause.code === "string" ? cause.code : messageOf(e);
    }
    if (Date.now() - told >= 10_000) {
      told = Date.now();
      progress(`still waiting for ${origin}/healthz (${last})`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  return `the gateway did not answer ${origin}/healthz within ${timeoutMs / 1000} s (${last})`;
}

interface ProbeReport {
  ok: boolean;
  verdict: "PASS" | "FAIL";
  method: string;
  gateway: string | null;
  upstream: string | null;
  probe: { status: number; refused_by_ledger: boolean; answer: string; upstream_tools_calls: number } | null;
  control: { status: number; reached_upstream: boolean; answer: string; upstream_tools_calls: number } | null;
  reason: string;
}

/** Runs the self-probe. Resolves to `{ code, report }`: code 0 PASS, 1 FAIL, 3 the probe could not run. */
export async function selfProbe({
  port: wanted,
  timeoutMs = 180_000,
  verbose = false,
  progress = (s: string) => console.error(`portcullis check: ${s}`),
}: {
  /** The gateway's port on 127.0.0.1 (default: a free one). */
  port?: number | undefined;
  timeoutMs?: number;
  verbose?: boolean;
  progress?: (s: string) => void;
} = {}): Promise<{ code: number; report: ProbeReport }> {
  const report: ProbeReport = {
    ok: false,
    verdict: "FAIL",
    method: `a grant whose team (${JSON.stringify(UNWRITABLE_TEAM)}) is not a valid ledger chain name: the gateway cannot append the call's decision to that team's chain before forwarding it (src/ports/ledger-writer.ts)`,
    gateway: null,
    upstream: null,
    probe: null,
    control: null,
    reason: "",
  };
  const cleanups: (() => Promise<void>)[] = [];
  const cleanup = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  };
  const onSignal = () => {
    void cleanup().then(() => process.exit(130));
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const upstream = await startRecordingUpstream();
    cleanups.push(() => upstream.close());
    report.upstream = upstream.url;
    progress(`recording upstream on ${upstream.url}`);

    const { generateSigningKey, parseKeySet } = await import("../src/identity/keys.ts");
    const { mintGrant } = await import("../src/identity/tokens.ts");
    const { privateJwk } = await generateSigningKey(`self-probe-${Date.now().toString(36)}`);
    let port: number;
    try {
      port = await freePort(wanted);
    } catch (e) {
      report.reason = `--port ${wanted}: 127.0.0.1:${wanted} cannot be listened on (${codeOf(e)}): choose another port, or leave --port out for a free one`;
      return { code: 3, report };
    }
    const origin = `http://127.0.0.1:${port}`;
    report.gateway = origin;
    const persistTo = mkdtempSync(join(tmpdir(), "portcullis-self-probe-"));
    cleanups.push(async () => rmSync(persistTo, { recursive: true, force: true }));
    progress(`starting a gateway on ${origin} (wrangler dev; its state in ${persistTo}, removed afterwards)`);
    let logs = "";
    const child = startGateway({
      configText: probeConfig(upstream.url),
      port,
      persistTo,
      signingKey: JSON.stringify(privateJwk),
      stdio: ["ignore", verbose ? "inherit" : "pipe", verbose ? "inherit" : "pipe"],
      detached: true,
    });
    cleanups.push(() => stopGroup(child));
    for (const s of [child.stdout, child.stderr]) s?.on("data", (d: Buffer) => (logs = (logs + d.toString()).slice(-20_000)));
    const started = Date.now();
    const notUp = await waitHealthy(origin, timeoutMs, child, progress);
    if (notUp) {
      report.reason = notUp;
      if (!verbose && logs) console.error(`--- the gateway's output (last lines) ---\n${logs.split("\n").slice(-30).join("\n")}`);
      return { code: 3, report };
    }
    progress(`gateway up after ${((Date.now() - started) / 1000).toFixed(1)} s`);

    const keys = await parseKeySet(JSON.stringify(privateJwk));
    const grant = (team: string) =>
      mintGrant(
        keys,
        { iss: origin, aud: origin, sub: "agent:self-probe", team, roles: ["agent"], tools: ["*"], ttlSeconds: 600 },
        { maxLifetimeSeconds: 3600 },
      );

    progress(`tools/call ${PROBE_TOOL} as team ${JSON.stringify(UNWRITABLE_TEAM)} (a ledger chain that cannot be written)`);
    const probe = await callTool(origin, (await grant(UNWRITABLE_TEAM)).token, PROBE_TOOL);
    const reachedDuringProbe = upstream.count("tools/call");
    const probeText = textOf(probe.answer);
    const refusedByLedger = resultOf(probe.answer)?.isError === true && /\bcheck: ledger\b/.test(probeText);
    report.probe = { status: probe.status, refused_by_ledger: refusedByLedger, answer: probeText || probe.body, upstream_tools_calls: reachedDuringProbe };
    progress(`probe answered: ${probeText || `HTTP ${probe.status}`}`);

    progress(`control: tools/call ${PROBE_TOOL} as team ${JSON.stringify(CONTROL_TEAM)} (a writable ledger chain)`);
    const control = await callTool(origin, (await grant(CONTROL_TEAM)).token, PROBE_TOOL);
    const reachedAfterControl = upstream.count("tools/call");
    const controlText = textOf(control.answer);
    const controlRan = resultOf(control.answer)?.isError !== true && controlText === "recorded" && reachedAfterControl === reachedDuringProbe + 1;
    report.control = { status: control.status, reached_upstream: controlRan, answer: controlText || control.body, upstream_tools_calls: reachedAfterControl };

    const problems: string[] = [];
    if (!refusedByLedger) problems.push(`the probe call was not refused by the ledger step (answer: ${(probeText || probe.body).slice(0, 300)})`);
    if (reachedDuringProbe !== 0)
      problems.push(`the upstream received ${plural(reachedDuringProbe, "tools/call request")} while the ledger could not be written`);
    if (!controlRan)
      problems.push(
        `the control call with a writable ledger did not reach the upstream (answer: ${(controlText || control.body).slice(0, 300)}), so the probe proves nothing`,
      );
    report.ok = problems.length === 0;
    report.verdict = report.ok ? "PASS" : "FAIL";
    report.reason = report.ok
      ? "the call was refused before it reached the upstream because its decision could not be written to the ledger; with a writable ledger the same call ran"
      : problems.join("; ");
    return { code: report.ok ? 0 : 1, report };
  } finally {
    progress("stopping the probe's gateway and upstream");
    await cleanup();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

/** `portcullis check --self-probe …`, its options parsed: the exit code. */
export async function selfProbeCommand(a: Options<typeof CHECK_OPTIONS>): Promise<number> {
  if (a.help) {
    console.log(HELP.check);
    return 0;
  }
  if (!a["self-probe"]) throw new UsageError("give --self-probe (or --config FILE to validate a config)");
  if (a.config !== undefined) throw new UsageError("--self-probe runs its own config: drop --config (check --config FILE validates a config)");
  const { code, report } = await selfProbe({
    port: portArg(a.port, undefined),
    timeoutMs: durationArg(a.timeout, 180_000, "--timeout", { min: 5000, max: 1_800_000 }),
    verbose: Boolean(a.verbose),
  });
  if (a.json) console.log(JSON.stringify(report, null, 2));
  else {
    console.log(`portcullis check --self-probe: ${code === 3 ? "NOT RUN" : report.verdict}`);
    console.log(`  how:     ${report.method}`);
    if (report.probe)
      console.log(
        `  probe:   ${report.probe.refused_by_ledger ? "refused by the ledger step" : "NOT refused by the ledger step"}; the upstream saw ${plural(report.probe.upstream_tools_calls, "tools/call request")}\n           "${report.probe.answer}"`,
      );
    if (report.control)
      console.log(`  control: ${report.control.reached_upstream ? "reached the upstream" : "did NOT reach the upstream"} ("${report.control.answer}")`);
    console.log(`  ${code === 0 ? "why" : "reason"}:  ${report.reason}`);
    if (code === 3 && report.gateway)
      console.log("  the gateway did not start: run with --verbose to see its output, or try `npx portcullis dev --config portcullis.yaml`");
  }
  return code;
}
