/**
 * preview_impact and lists that follow policy, on the production build: an agent's
 * `portcullis.preview_impact` on /mcp, `POST /v1/preview` and the operator tool report allowed /
 * held / blocked with the check and rule — and a recording upstream proves nothing was executed;
 * a tool the policy denies unconditionally is absent from tools/list, one whose deny depends on
 * the call is listed; an agent cannot preview as another principal. Owns its gateway and upstream.
 * Must never: leave them running, or reach beyond 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { LONG_TOOL, startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let upstream: Upstream;
let gw: Proc & { url: string };
let origin = "";
let jwk = "";

const config = (url: string) => `
actor: local:preview
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
mappings:
  m:
    tools:
      bump: { effect: reversible }
      ask_name: { effect: read_only }
      ask_model: { effect: read_only, approval: required }
      ${LONG_TOOL}: { effect: idempotent }
policy:
  rules:
    - id: no-bump
      match: { tool: "bump" }
      decision: deny
      reason: nobody bumps
      owner: platform@example.com
    - id: big-quarters
      match: { tool: "${LONG_TOOL}" }
      when: 'args.quarter == "Q4"'
      decision: deny
      reason: Q4 attestations go through finance
upstreams:
  - name: m
    url: ${url}
    timeout: 10s
`;

const grant = async (sub: string, roles: string[], tools: string[] = ["*"]) =>
  (
    await mintGrant(
      await parseKeySet(jwk),
      { iss: origin, aud: origin, sub, team: "e2e", roles: roles as never, tools, ttlSeconds: 600 },
      { maxLifetimeSeconds: 3600 },
    )
  ).token;

const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
async function rpc(path: string, token: string, method: string, params: Record<string, unknown> = {}): Promise<any> {
  const r = await fetch(`${origin}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${token}`,
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": method,
      ...(method === "tools/call" ? { "mcp-name": String(params.name) } : {}),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: { ...params, _meta: META } }),
  });
  return r.json();
}
const calls = () => upstream.log.filter((s) => s.method === "tools/call").length;

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("preview-key")).privateJwk);
  upstream = await startModernOnlyUpstream({ longTool: true });
  gw = await startPortcullis(config(upstream.url), await freePort(), { PORTCULLIS_SIGNING_KEY: jwk });
  origin = new URL(gw.url).origin;
}, 120_000);
afterAll(async () => {
  await gw?.stop();
  await upstream?.close();
});

describe("lists follow policy", () => {
  it("a tool denied unconditionally is not listed; one whose deny depends on its arguments is; the agent tool is offered to a '*' grant", async () => {
    const token = await grant("agent:lists", ["agent"]);
    const names = ((await rpc("/mcp", token, "tools/list")).result.tools as { name: string }[]).map((t) => t.name);
    expect(names).not.toContain("bump");
    expect(names).toContain(LONG_TOOL);
    expect(names).toContain("ask_name");
    expect(names).toContain("portcullis.preview_impact");
    // Calling the hidden tool anyway is still refused by the same rule.
    const out = await rpc("/mcp", token, "tools/call", { name: "bump", arguments: {} });
    expect(out.result.isError).toBe(true);
    expect(out.result.content[0].text).toContain("rule: no-bump");
    expect(out.result.content[0].text).toContain("ask platform@example.com");
  });
});

describe("preview_impact executes nothing", () => {
  it("reports allowed, held, blocked by rule, blocked by condition and outside the grant — and the upstream sees no call", async () => {
    // The agent tool is granted like any tool: without a glob covering it, it is refused as outside the grant.
    const without = await grant("agent:preview", ["agent"], ["ask_*", LONG_TOOL, "bump"]);
    const refused = await rpc("/mcp", without, "tools/call", { name: "portcullis.preview_impact", arguments: { name: "ask_name" } });
    expect(refused.result.isError).toBe(true);
    expect(refused.result.content[0].text).toContain('tool "portcullis.preview_impact" is outside the grant of agent:preview');
    const token = await grant("agent:preview", ["agent"], ["ask_*", LONG_TOOL, "bump", "portcullis.preview_impact"]);
    const before = calls();
    const preview = async (name: string, args?: Record<string, unknown>) =>
      (await rpc("/mcp", token, "tools/call", { name: "portcullis.preview_impact", arguments: { name, ...(args ? { arguments: args } : {}) } })).result
        .structuredContent;
    expect(await preview("ask_name")).toMatchObject({ outcome: "allowed", mode: "enforce", classification: { source: "mapping", effect: "read_only" } });
    expect(await preview("ask_model")).toMatchObject({ outcome: "held" });
    expect(await preview("bump")).toMatchObject({ outcome: "blocked", check: "rule", rule: "no-bump" });
    expect(await preview(LONG_TOOL, { quarter: "Q4" })).toMatchObject({ outcome: "blocked", rule: "big-quarters" });
    expect(await preview(LONG_TOOL, { quarter: "Q1" })).toMatchObject({ outcome: "allowed" });
    expect(await preview(LONG_TOOL, { quarter: 4 })).toMatchObject({ outcome: "blocked", check: "schema" });
    expect(await preview("ask_roots")).toMatchObject({ outcome: "blocked", check: "baseline", rule: null });
    expect(await preview("not_a_tool")).toMatchObject({ outcome: "blocked", check: "grant" });
    expect(await preview("ask_nothing")).toMatchObject({ outcome: "unknown_tool" });
    expect(calls()).toBe(before);
  });

  it("POST /v1/preview: an agent previews its own grant only; an operator may name any principal; so may the operator tool", async () => {
    const agent = await grant("agent:rest", ["agent"], ["ask_name"]);
    const own = await fetch(`${origin}/v1/preview`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${agent}` },
      body: JSON.stringify({ name: "ask_model" }),
    });
    expect(own.status).toBe(200);
    expect(await own.json()).toMatchObject({ principal: "agent:rest", outcome: "blocked", check: "grant" });
    const asOther = await fetch(`${origin}/v1/preview`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${agent}` },
      body: JSON.stringify({ name: "ask_model", principal: { sub: "agent:other", tools: ["*"] } }),
    });
    expect(asOther.status).toBe(403);
    const op = await grant("human:op", ["operator"], []);
    const forOther = await fetch(`${origin}/v1/preview`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${op}` },
      body: JSON.stringify({ name: "ask_model", principal: { sub: "agent:other", tools: ["*"] } }),
    });
    expect(await forOther.json()).toMatchObject({ principal: "agent:other", outcome: "held" });
    const viaTool = await fetch(`${origin}/operator/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${op}` },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "portcullis.preview_impact", arguments: { name: "bump", principal: { sub: "agent:other", tools: ["*"] } } },
      }),
    });
    const j = (await viaTool.json()) as { result: { structuredContent: Record<string, unknown> } };
    expect(j.result.structuredContent).toMatchObject({ principal: "agent:other", outcome: "blocked", rule: "no-bump" });
    const bad = await fetch(`${origin}/v1/preview`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${agent}` },
      body: JSON.stringify({ nme: "x" }),
    });
    expect(bad.status).toBe(400);
  });

  it("the operator tool portcullis.classify reports each upstream tool's banner level, and an agent cannot call it", async () => {
    const call = async (token: string) =>
      (
        await fetch(`${origin}/operator/mcp`, {
          method: "POST",
          headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "portcullis.classify", arguments: {} } }),
        })
      ).json() as Promise<{
        result?: { structuredContent: { totals: Record<string, number>; tools: { tool: string; level: string }[]; unlisted: string[] } };
        error?: { code: number };
      }>;
    const before = calls();
    const out = await call(await grant("human:auditor", ["auditor"], []));
    const r = out.result!.structuredContent;
    const level = (t: string) => r.tools.find((x) => x.tool === t)?.level;
    expect(level("bump")).toBe("OK");
    expect(level(LONG_TOOL)).toBe("OK");
    expect(level("ask_roots")).toBe("BLOCK");
    expect(r.totals.OK).toBe(4);
    expect(r.unlisted).toEqual([]);
    expect(calls()).toBe(before);
    expect((await call(await grant("agent:nosy", ["agent"]))).error).toBeDefined();
  });
});
