/**
 * Grants end to end on the production build: per-grant tool lists in both eras (the gateway's
 * agent tools included: a grant for one tool lists exactly that tool), calls outside a grant
 * refused before any upstream sees them, session and run ownership, no token passthrough,
 * and RFC 9728 discovery from a 401 (auth.oauth off: no authorization server named, and the 401
 * says how to get a grant).
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet, type KeySet } from "../../src/identity/keys.ts";

const url = inject("namespacedUrl");
const origin = new URL(url).origin;
let keys: KeySet;
let tokenA = "";
let tokenB = "";
let tokenOne = "";
let tokenWithAgentTools = "";
const open: { client: Client; transport: StreamableHTTPClientTransport }[] = [];

async function grant(sub: string, tools: string[]) {
  return (await mintGrant(keys, { iss: origin, aud: origin, sub, team: "e2e", roles: ["agent"], tools, ttlSeconds: 900 }, { maxLifetimeSeconds: 86400 })).token;
}

beforeAll(async () => {
  keys = await parseKeySet(inject("signingKey"));
  tokenA = await grant("agent:alice", ["everything__*"]);
  tokenB = await grant("agent:bob", ["conf__test_simple_text", "conf__test_echo_headers", "modern__*"]);
  tokenOne = await grant("agent:one", ["everything__echo"]);
  tokenWithAgentTools = await grant("agent:carol", ["everything__echo", "portcullis.*"]);
});

afterEach(async () => {
  for (const { client, transport } of open.splice(0)) {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  }
});

type Mode = "legacy" | { pin: "2026-07-28" };
async function connect(mode: Mode, token: string) {
  const client = new Client({ name: "identity-e2e", version: "1" }, { versionNegotiation: { mode } });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  open.push({ client, transport });
  return { client, transport };
}

const modernLog = async () => (await (await fetch(inject("modernLogUrl"))).json()) as { method: string; name?: string; headers: Record<string, string> }[];

for (const mode of ["legacy", { pin: "2026-07-28" }] as Mode[]) {
  const era = mode === "legacy" ? "legacy" : "modern";
  describe(`grants, ${era} era`, () => {
    it("two agents with different globs see different tools, prompts and resources", async () => {
      const a = await connect(mode, tokenA);
      const b = await connect(mode, tokenB);
      // Neither grant covers the gateway's agent tools (portcullis.*): each lists its upstream tools alone.
      const ta = (await a.client.listTools()).tools.map((t) => t.name);
      const tb = (await b.client.listTools()).tools.map((t) => t.name).sort();
      expect(ta.length).toBeGreaterThan(3);
      expect(ta.every((n) => n.startsWith("everything__"))).toBe(true);
      expect(tb).toEqual(["conf__test_echo_headers", "conf__test_simple_text", "modern__ask_model", "modern__ask_name", "modern__ask_roots", "modern__bump"]);
      const ra = (await a.client.listResources()).resources.map((r) => r.uri);
      const rb = (await b.client.listResources()).resources.map((r) => r.uri);
      expect(ra.every((u) => u.startsWith("everything+"))).toBe(true);
      expect(rb.every((u) => u.startsWith("conf+") || u.startsWith("modern+"))).toBe(true);
      expect(rb).toContain("modern+modern://note");
      expect((await a.client.listPrompts()).prompts.every((p) => p.name.startsWith("everything__"))).toBe(true);
    });

    it("a grant for one tool lists exactly that tool; the agent tools are listed and callable only where the grant covers them", async () => {
      const one = await connect(mode, tokenOne);
      expect((await one.client.listTools()).tools.map((t) => t.name)).toEqual(["everything__echo"]);
      // An agent tool outside the grant gets the refusal any tool outside the grant gets.
      for (const name of ["portcullis.plan_rollback", "portcullis.list_runs", "portcullis.preview_impact"]) {
        const r = await one.client.callTool({ name, arguments: { run: "run-e2e-0001" } });
        expect(r.isError, name).toBe(true);
        expect(JSON.stringify(r.content), name).toContain(`Blocked by Portcullis: tool \\"${name}\\" is outside the grant of agent:one`);
      }
      const carol = await connect(mode, tokenWithAgentTools);
      expect((await carol.client.listTools()).tools.map((t) => t.name)).toEqual([
        "everything__echo",
        "portcullis.list_runs",
        "portcullis.get_run",
        "portcullis.get_action_trace",
        "portcullis.plan_rollback",
        "portcullis.dry_run_rollback",
        "portcullis.validate_mapping",
        "portcullis.preview_impact",
      ]);
      const preview = await carol.client.callTool({ name: "portcullis.preview_impact", arguments: { name: "everything__echo", arguments: { message: "hi" } } });
      expect(preview.isError).toBeFalsy();
      expect(preview.structuredContent).toBeDefined();
    });

    it("denies calls outside the grant at the door with a reason, and the upstream sees nothing", async () => {
      const a = await connect(mode, tokenA);
      const before = (await modernLog()).filter((s) => s.method === "tools/call").length;
      for (const name of ["modern__ask_name", "conf__test_simple_text", "nonexistent__tool"]) {
        const r = await a.client.callTool({ name, arguments: {} });
        expect(r.isError, name).toBe(true);
        expect(JSON.stringify(r.content), name).toContain(`tool \\"${name}\\" is outside the grant of agent:alice`);
      }
      await expect(a.client.readResource({ uri: "conf+test://static-text" })).rejects.toThrow(/not found/i);
      expect((await modernLog()).filter((s) => s.method === "tools/call").length).toBe(before);
      expect((await a.client.callTool({ name: "everything__echo", arguments: { message: "ok" } })).content).toEqual([{ type: "text", text: "Echo: ok" }]);
    });

    it("never lets the grant token reach an upstream", async () => {
      const b = await connect(mode, tokenB);
      const echoed = JSON.stringify((await b.client.callTool({ name: "conf__test_echo_headers", arguments: {} })).content);
      expect(echoed).not.toContain(tokenB.slice(0, 40));
      expect(echoed.toLowerCase()).not.toMatch(/bearer/);
      await b.client.listTools();
      for (const seen of await modernLog()) {
        expect(JSON.stringify(seen.headers)).not.toContain(tokenB.slice(0, 40));
        expect(JSON.stringify(seen.headers)).not.toContain(tokenA.slice(0, 40));
        expect(seen.headers.authorization).toBeUndefined();
      }
    });
  });
}

describe("streams respect the grant", () => {
  it("does not subscribe a principal to resources of an upstream its grant cannot reach", async () => {
    const a = await connect({ pin: "2026-07-28" }, tokenA);
    const sub = await a.client.listen({ toolsListChanged: true, resourceSubscriptions: ["conf+test://watched-resource"] });
    expect(sub.honoredFilter.resourceSubscriptions ?? []).toEqual([]);
    await sub.close();
    const b = await connect({ pin: "2026-07-28" }, tokenB);
    const subB = await b.client.listen({ resourceSubscriptions: ["conf+test://watched-resource"] });
    expect(subB.honoredFilter.resourceSubscriptions).toEqual(["conf+test://watched-resource"]);
    await subB.close();
  });
});

describe("ownership", () => {
  const H = { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" };
  it("answers principal B presenting A's session id with 404, and A's session carries on", async () => {
    const a = await connect("legacy", tokenA);
    const sid = a.transport.sessionId!;
    for (const method of ["POST", "GET", "DELETE"]) {
      const r = await fetch(url, {
        method,
        headers: { ...H, "mcp-session-id": sid, authorization: `Bearer ${tokenB}`, ...(method === "GET" ? { accept: "text/event-stream" } : {}) },
        ...(method === "POST" ? { body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }) } : {}),
      });
      expect(r.status, method).toBe(404);
      await r.text();
    }
    expect((await a.client.listTools()).tools.length).toBeGreaterThan(3);
  });

  it("lets only the opener continue a Portcullis-Run-Id", async () => {
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const call = (token: string) =>
      fetch(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": "tools/list",
          "portcullis-run-id": "run-e2e-0001",
          authorization: `Bearer ${token}`,
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: { _meta: meta } }),
      });
    expect((await call(tokenA)).status).toBe(200);
    expect((await call(tokenB)).status).toBe(404);
    expect((await call(tokenA)).status).toBe(200);
  });
});

describe("discovery", () => {
  it("a client following RFC 9728 finds the metadata from a 401", async () => {
    const r = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: "Bearer not-a-grant" },
      body: "{}",
    });
    expect(r.status).toBe(401);
    const challenge = r.headers.get("www-authenticate")!;
    expect(challenge).toMatch(/error="invalid_token"/);
    const meta = (await (await fetch(/resource_metadata="([^"]+)"/.exec(challenge)![1]!)).json()) as { resource: string; authorization_servers?: string[] };
    expect(meta.resource).toBe(`${origin}/mcp`);
    // auth.oauth is off: no authorization server is named, and none answers at the gateway's origin.
    expect(meta.authorization_servers).toBeUndefined();
    expect((await fetch(`${origin}/.well-known/oauth-authorization-server`)).status).toBe(404);
  });

  it("without auth.oauth, a 401 without a grant says how to get one, in the body and the challenge", async () => {
    // This gateway serves /mcp without a grant on loopback (auth.required: false); /operator/mcp never does.
    const r = await fetch(`${origin}/operator/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: "{}",
    });
    expect(r.status).toBe(401);
    const hint = `a grant token is required: ask an operator for a grant (portcullis token mint --gateway ${origin} --sub human:<name> --role auditor|approver|operator), then send it as Authorization: Bearer <grant>`;
    expect(((await r.json()) as { error_description: string }).error_description).toBe(hint);
    const challenge = r.headers.get("www-authenticate")!;
    expect(challenge).toContain(`resource_metadata="${origin}/.well-known/oauth-protected-resource/operator/mcp"`);
    expect(challenge).toContain(`error_description="${hint}`);
    expect(challenge).not.toContain("error=");
  });
});
