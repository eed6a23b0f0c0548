/**
 * W3C trace context through the production build: an agent's `traceparent` is continued — the
 * recording upstream receives the same trace id with the gateway's own span as its parent, and
 * the call's decision record carries the trace id, the gateway's span and the agent's span, the
 * outcome its trace id — in both eras (a 2026-07-28 request and a 2025-11-25 SDK session); a call
 * without one gets a trace started, and what the upstream receives names the trace the ledger
 * records; a refused call's blocked record carries its trace id and the upstream sees nothing;
 * each decision prints one JSON log line with the trace id and never the hashed arguments. Owns
 * its gateway and its recording upstream; everything on loopback.
 */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { api, grantFor, modern } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON read loosely in tests
type Any = any;

let upstream: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let gw: Proc & { url: string };
let origin: string;
let jwk: string;
const dir = mkdtempSync(join(tmpdir(), "portcullis-traces-"));
const logFile = join(dir, "gateway.log");

const token = async (sub: string, team: string, roles: string[], tools: string[] = []) =>
  (await grantFor(jwk, origin, { sub, team, roles: roles as never, tools, ttlSeconds: 900 })).token;
const traceparentOf = (h: Any): string | undefined => (Array.isArray(h?.traceparent) ? h.traceparent[0] : h?.traceparent);
/** The upstream's tools/call requests since `from`. */
const callsSince = (from: number) => upstream.log.slice(from).filter((s) => s.method === "tools/call");

/** A call's records by its receipt's decision id (its decision and outcome). */
async function recordsOf(auditor: string, decisionId: string): Promise<{ decision: Any; outcome: Any }> {
  const t = await api(origin, auditor, `/v1/ledger/${decisionId}/trace`);
  expect(t.status).toBe(200);
  const decision = t.json.records.find((r: Any) => r.kind === "decision");
  const outcome = t.json.records.find((r: Any) => r.kind === "outcome");
  return { decision, outcome };
}

beforeAll(async () => {
  upstream = await startModernOnlyUpstream();
  jwk = JSON.stringify((await generateSigningKey("traces-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  appendFileSync(logFile, "");
  gw = await startPortcullis(
    `
actor: local:e2e
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: rec
    url: ${upstream.url}
    timeout: 30s
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
    logFile,
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

describe("W3C trace context", () => {
  it("2026-07-28: an agent's traceparent is continued to the upstream (the gateway's span as parent) and names the call's decision and outcome", async () => {
    const agent = await token("agent:traced", "team-trace", ["agent"], ["*"]);
    const auditor = await token("human:audit", "team-trace", ["auditor"]);
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const agentSpan = "00f067aa0ba902b7";
    const from = upstream.log.length;
    const a = await modern(
      `${origin}/mcp`,
      agent,
      "tools/call",
      { name: "bump", arguments: {} },
      { headers: { traceparent: `00-${traceId}-${agentSpan}-01`, tracestate: "vendor=abc" } },
    );
    expect(a.result?.isError, JSON.stringify(a)).not.toBe(true);
    const sent = callsSince(from);
    expect(sent).toHaveLength(1);
    const got = traceparentOf(sent[0]!.headers);
    const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(got ?? "");
    expect(m, got).not.toBeNull();
    expect(m![1]).toBe(traceId);
    expect(m![2]).not.toBe(agentSpan);
    expect(sent[0]!.headers.tracestate).toBe("vendor=abc");

    const { decision, outcome } = await recordsOf(auditor, a.result._meta["portcullis/receipt"].decision_id);
    expect(decision.body.trace).toEqual({ trace_id: traceId, span_id: m![2], parent_span_id: agentSpan });
    expect(outcome.body.trace_id).toBe(traceId);
  });

  it("2025-11-25 (an SDK session): the same trace on every request, a span per request; the decision names the trace the upstream saw", async () => {
    const agent = await token("agent:legacy", "team-trace", ["agent"], ["*"]);
    const auditor = await token("human:audit", "team-trace", ["auditor"]);
    const traceId = "0af7651916cd43dd8448eb211c80319c";
    const client = new Client({ name: "traced-legacy", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${origin}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${agent}`, traceparent: `00-${traceId}-b7ad6b7169203331-01` } },
    });
    await client.connect(transport);
    try {
      const from = upstream.log.length;
      const r: Any = await client.callTool({ name: "bump", arguments: {} });
      expect(r.isError, JSON.stringify(r)).not.toBe(true);
      const sent = callsSince(from);
      expect(sent).toHaveLength(1);
      const got = traceparentOf(sent[0]!.headers) ?? "";
      expect(got.split("-")[1]).toBe(traceId);
      const { decision } = await recordsOf(auditor, r._meta["portcullis/receipt"].decision_id);
      expect(decision.body.trace.trace_id).toBe(traceId);
      expect(decision.body.trace.parent_span_id).toBe("b7ad6b7169203331");
      expect(decision.body.trace.span_id).toBe(got.split("-")[2]);
    } finally {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    }
  });

  it("without a traceparent a trace is started: the upstream's traceparent and the ledger name the same trace; a malformed one is not continued", async () => {
    const agent = await token("agent:untraced", "team-trace", ["agent"], ["*"]);
    const auditor = await token("human:audit", "team-trace", ["auditor"]);
    const cases: Record<string, string>[] = [{}, { traceparent: "00-not-a-trace-01" }];
    for (const headers of cases) {
      const from = upstream.log.length;
      const a = await modern(`${origin}/mcp`, agent, "tools/call", { name: "bump", arguments: {} }, { headers });
      const got = traceparentOf(callsSince(from)[0]?.headers) ?? "";
      expect(got).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      const { decision, outcome } = await recordsOf(auditor, a.result._meta["portcullis/receipt"].decision_id);
      expect(decision.body.trace).toEqual({ trace_id: got.split("-")[1], span_id: got.split("-")[2], parent_span_id: null });
      expect(outcome.body.trace_id).toBe(got.split("-")[1]);
    }
  });

  it("a refused call's blocked record carries its trace id, the upstream sees nothing, and every decision printed one log line with its trace id and no arguments", async () => {
    const narrow = await token("agent:narrow", "team-trace", ["agent"], ["ask_*"]);
    const auditor = await token("human:audit", "team-trace", ["auditor"]);
    const traceId = "1234567890abcdef1234567890abcdef";
    const from = upstream.log.length;
    const a = await modern(
      `${origin}/mcp`,
      narrow,
      "tools/call",
      { name: "bump", arguments: { note: "SECRET-ARG-VALUE" } },
      { headers: { traceparent: `00-${traceId}-1111111111111111-01` } },
    );
    expect(a.result?.isError ?? a.error).toBeTruthy();
    expect(callsSince(from)).toHaveLength(0);
    let blocked: Any;
    for (let i = 0; i < 60 && !blocked; i++) {
      const r = await api(origin, auditor, "/v1/ledger?kind=blocked&limit=500");
      blocked = (r.json.entries ?? []).find((e: Any) => e.body.trace_id === traceId);
      if (!blocked) await new Promise((res) => setTimeout(res, 500));
    }
    expect(blocked?.body).toMatchObject({ principal: "agent:narrow", tool: "bump", trace_id: traceId });

    // The log: one decision line per recorded decision or refusal, each with its trace id.
    let lines: Any[] = [];
    for (let i = 0; i < 20; i++) {
      lines = readFileSync(logFile, "utf8")
        .split("\n")
        .map((l) => l.slice(l.indexOf("{")))
        .filter((l) => l.startsWith('{"event":"decision"'))
        .map((l) => JSON.parse(l));
      if (lines.some((l) => l.trace_id === traceId)) break;
      await new Promise((res) => setTimeout(res, 250));
    }
    const refusal = lines.find((l) => l.trace_id === traceId);
    expect(refusal).toMatchObject({ event: "decision", decision: "blocked", principal: "agent:narrow", exposed: "bump", blocked_id: blocked.id });
    const allowed = lines.find((l) => l.trace_id === "4bf92f3577b34da6a3ce929d0e0e4736");
    expect(allowed).toMatchObject({ event: "decision", decision: "allow", upstream: "rec", tool: "bump", chain: "team-trace" });
    expect(lines.every((l) => typeof l.trace_id === "string" && /^[0-9a-f]{32}$/.test(l.trace_id))).toBe(true);
    expect(readFileSync(logFile, "utf8")).not.toContain("SECRET-ARG-VALUE");
  });
});
