/**
 * Real MCP clients (SDK v2) through Portcullis with two namespaced upstreams — server-everything
 * (legacy-only) and the conformance upstream (dual-era) — in both protocol eras.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, inject, it } from "vitest";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";

const url = inject("namespacedUrl");
type Mode = "legacy" | { pin: "2026-07-28" };
const open: { client: Client; transport: StreamableHTTPClientTransport }[] = [];

async function connect(mode: Mode, opts: { authorization?: string } = {}) {
  const client = new Client(
    { name: "e2e", version: "1.0.0" },
    {
      versionNegotiation: { mode },
      capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } },
    },
  );
  client.setRequestHandler("sampling/createMessage", async (req) => ({
    model: "e2e-model",
    role: "assistant",
    content: { type: "text", text: `sampled(${JSON.stringify(req.params.messages[0]?.content).slice(0, 60)})` },
  }));
  client.setRequestHandler("elicitation/create", async (req) => {
    // Answer every field the form asks for, typed as the schema says.
    const props = (req.params as { requestedSchema?: { properties?: Record<string, { type?: string }> } }).requestedSchema?.properties ?? {};
    const content: Record<string, string | number | boolean> = {};
    for (const [k, p] of Object.entries(props))
      content[k] = p.type === "boolean" ? true : p.type === "number" || p.type === "integer" ? 1 : k === "email" ? "ada@example.com" : "ada";
    return { action: "accept", content };
  });
  client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///work/e2e", name: "e2e-root" }] }));
  const headers: Record<string, string> = opts.authorization ? { authorization: opts.authorization } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  await client.connect(transport);
  open.push({ client, transport });
  return { client, transport };
}

afterEach(async () => {
  for (const { client, transport } of open.splice(0)) {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  }
});

const text = (r: unknown) => JSON.stringify((r as { content?: unknown }).content ?? r);

for (const mode of ["legacy", { pin: "2026-07-28" }] as Mode[]) {
  const era = mode === "legacy" ? "legacy" : "modern";
  describe(`${era} client through two namespaced upstreams`, () => {
    it("lists both upstreams' tools under <upstream>__ names and hides denied tools", async () => {
      const { client } = await connect(mode);
      expect(client.getProtocolEra()).toBe(era);
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      expect(names).toContain("everything__echo");
      expect(names).toContain("conf__test_simple_text");
      expect(names).not.toContain("conf__test_error_handling");
      expect(names.every((n) => n.length <= 64)).toBe(true);
      const schemaTool = tools.find((t) => t.name === "conf__json_schema_2020_12_tool")!;
      expect(schemaTool.inputSchema).toMatchObject({ $schema: "https://json-schema.org/draft/2020-12/schema", additionalProperties: false });
      expect(JSON.stringify(schemaTool.inputSchema)).toContain("$anchor");
    });

    it("calls tools on both upstreams, with progress", async () => {
      const { client } = await connect(mode);
      expect(text(await client.callTool({ name: "everything__echo", arguments: { message: "hi" } }))).toContain("Echo: hi");
      expect(text(await client.callTool({ name: "conf__test_simple_text", arguments: {} }))).toContain("simple text response");
      const progress: number[] = [];
      const r = await client.callTool({ name: "conf__test_tool_with_progress", arguments: {} }, { onprogress: (p) => progress.push(p.progress) });
      expect(r.isError ?? false).toBe(false);
      expect(progress.length).toBeGreaterThanOrEqual(3);
      expect([...progress].sort((a, b) => a - b)).toEqual(progress);
    });

    it("cancels a running call upstream", async () => {
      const { client } = await connect(mode);
      const ac = new AbortController();
      const call = client.callTool({ name: "conf__test_slow_cancellable", arguments: { ms: 10_000 } }, { signal: ac.signal });
      await new Promise((r) => setTimeout(r, 400));
      ac.abort();
      await expect(call).rejects.toThrow();
      let last = "";
      for (let i = 0; i < 40 && !/c:|\d/.test(last); i++) {
        await new Promise((r) => setTimeout(r, 100));
        last = text(await client.callTool({ name: "conf__test_last_cancelled", arguments: {} }));
      }
      expect(last).not.toMatch(/none|null/i);
    });

    it("serves resources, prompts and completion from the owning upstream", async () => {
      const { client } = await connect(mode);
      const { resources } = await client.listResources();
      expect(resources.map((r) => r.uri)).toContain("conf+test://static-text");
      expect(resources.some((r) => r.uri.startsWith("everything+demo://"))).toBe(true);
      const read = await client.readResource({ uri: "conf+test://static-text" });
      expect(JSON.stringify(read.contents)).toContain("static text resource");
      const tmpl = await client.readResource({ uri: "conf+test://template/123/data" });
      expect(JSON.stringify(tmpl.contents)).toContain("123");
      const { prompts } = await client.listPrompts();
      expect(prompts.map((p) => p.name)).toContain("conf__test_prompt_with_arguments");
      const p = await client.getPrompt({ name: "conf__test_prompt_with_arguments", arguments: { arg1: "one", arg2: "two" } });
      expect(JSON.stringify(p.messages)).toContain("arg1='one'");
      const c = await client.complete({ ref: { type: "ref/prompt", name: "conf__test_prompt_with_arguments" }, argument: { name: "arg1", value: "t" } });
      expect(Array.isArray(c.completion.values)).toBe(true);
    });

    it("never sends the client's Authorization upstream; each upstream gets only its own credential", async () => {
      const origin = new URL(url).origin;
      const keys = await parseKeySet(inject("signingKey"));
      const { token } = await mintGrant(
        keys,
        { iss: origin, aud: origin, sub: "agent:echo", team: "e2e", roles: ["agent"], tools: ["*"], ttlSeconds: 300 },
        { maxLifetimeSeconds: 3600 },
      );
      const { client } = await connect(mode, { authorization: `Bearer ${token}` });
      const r = text(await client.callTool({ name: "conf__test_echo_headers", arguments: {} }));
      expect(r).toContain("conf-secret-2");
      expect(r).not.toContain(token.slice(0, 40));
      expect(r).not.toContain("ev-secret-1");
      expect(r.toLowerCase()).not.toContain('"authorization"');
    });
  });
}

describe("legacy-only features", () => {
  it("cancels upstream a call cancelled in its first 250 ms, before its id map is written to the session (found in the isolate)", async () => {
    const { client } = await connect("legacy");
    const before = text(await client.callTool({ name: "conf__test_last_cancelled", arguments: {} }));
    const ac = new AbortController();
    const call = client.callTool({ name: "conf__test_slow_cancellable", arguments: { ms: 10_000 } }, { signal: ac.signal });
    await new Promise((r) => setTimeout(r, 150));
    ac.abort();
    await expect(call).rejects.toThrow();
    let last = before;
    for (let i = 0; i < 40 && last === before; i++) {
      await new Promise((r) => setTimeout(r, 100));
      last = text(await client.callTool({ name: "conf__test_last_cancelled", arguments: {} }));
    }
    expect(last).not.toBe(before);
    expect(last).not.toMatch(/none|null/i);
  });

  it("relays sampling and elicitation from both upstreams, and roots", async () => {
    const { client } = await connect("legacy");
    expect(text(await client.callTool({ name: "conf__test_sampling", arguments: { prompt: "capital?" } }))).toContain("sampled(");
    expect(text(await client.callTool({ name: "conf__test_elicitation", arguments: { message: "who?" } }))).toContain("ada");
    expect(text(await client.callTool({ name: "everything__trigger-sampling-request", arguments: { prompt: "hello", maxTokens: 10 } }))).toContain("sampled(");
    expect(text(await client.callTool({ name: "everything__get-roots-list", arguments: {} }))).toContain("file:///work/e2e");
  });

  it("sends log messages at the level the client set", async () => {
    const { client } = await connect("legacy");
    const logs: unknown[] = [];
    client.setNotificationHandler("notifications/message", async (n) => {
      logs.push(n.params);
    });
    await client.setLoggingLevel("debug");
    await client.callTool({ name: "conf__test_tool_with_logging", arguments: {} });
    await new Promise((r) => setTimeout(r, 300));
    expect(logs.length).toBeGreaterThanOrEqual(3);
  });

  it("delivers list_changed and resources/updated on the GET stream", async () => {
    const { client } = await connect("legacy");
    const seen: string[] = [];
    client.setNotificationHandler("notifications/tools/list_changed", async () => {
      seen.push("tools");
    });
    client.setNotificationHandler("notifications/resources/updated", async (n) => {
      seen.push(`updated:${n.params.uri}`);
    });
    await client.subscribeResource({ uri: "conf+test://watched-resource" });
    await new Promise((r) => setTimeout(r, 500)); // let the GET stream open
    await client.callTool({ name: "conf__test_trigger_tool_change", arguments: {} });
    await client.callTool({ name: "conf__test_trigger_resource_update", arguments: {} });
    for (let i = 0; i < 50 && seen.length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    expect(seen).toContain("tools");
    expect(seen).toContain("updated:conf+test://watched-resource");
  });

  it("bridges a modern-only upstream's input_required rounds through server→client requests", async () => {
    const { client } = await connect("legacy");
    expect(text(await client.callTool({ name: "modern__ask_name", arguments: {} }))).toMatch(/got .*name.*ada.* with state-for-ask_name/);
    expect(text(await client.callTool({ name: "modern__ask_model", arguments: {} }))).toMatch(/sampled\(.* with state-for-ask_model/);
    expect(text(await client.callTool({ name: "modern__ask_roots", arguments: {} }))).toMatch(/file:\/\/\/work\/e2e.* with state-for-ask_roots/);
  });

  it("carries list changes and resource updates of a modern-only upstream on the GET stream", async () => {
    const { client } = await connect("legacy");
    const seen: string[] = [];
    client.setNotificationHandler("notifications/tools/list_changed", async () => {
      seen.push("tools");
    });
    client.setNotificationHandler("notifications/resources/updated", async (n) => {
      seen.push(`updated:${n.params.uri}`);
    });
    await client.subscribeResource({ uri: "modern+modern://note" });
    await new Promise((r) => setTimeout(r, 2500)); // the GET stream renews its listen with the new subscription
    await client.callTool({ name: "modern__bump", arguments: {} });
    for (let i = 0; i < 50 && seen.length < 2; i++) await new Promise((r) => setTimeout(r, 100));
    expect(seen).toContain("tools");
    expect(seen).toContain("updated:modern+modern://note");
  });

  it("ends a session with DELETE (404 afterwards) and reconnects", async () => {
    const { client, transport } = await connect("legacy");
    await client.listTools();
    const sid = transport.sessionId!;
    await transport.terminateSession();
    const after = await fetch(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-session-id": sid,
        "mcp-protocol-version": "2025-11-25",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(after.status).toBe(404);
    const again = await connect("legacy");
    expect(again.transport.sessionId).not.toBe(sid);
    expect((await again.client.listTools()).tools.length).toBeGreaterThan(5);
  });
});

describe("modern-only features", () => {
  it("passes MRTR input_required rounds through with requestState untouched", async () => {
    const { client } = await connect({ pin: "2026-07-28" });
    expect(text(await client.callTool({ name: "conf__test_input_required_result_elicitation", arguments: {} }))).toMatch(/Hello/);
    expect(text(await client.callTool({ name: "conf__test_input_required_result_request_state", arguments: {} }))).toContain("state-ok");
    expect(text(await client.callTool({ name: "modern__ask_name", arguments: {} }))).toMatch(/got .*name.*ada.* with state-for-ask_name/);
  });

  it("fans in list_changed on subscriptions/listen", async () => {
    const { client } = await connect({ pin: "2026-07-28" });
    const seen: string[] = [];
    client.setNotificationHandler("notifications/tools/list_changed", async () => {
      seen.push("tools");
    });
    const sub = await client.listen({ toolsListChanged: true });
    expect(sub.honoredFilter).toMatchObject({ toolsListChanged: true });
    await client.callTool({ name: "conf__test_trigger_tool_change", arguments: {} });
    for (let i = 0; i < 50 && seen.length < 1; i++) await new Promise((r) => setTimeout(r, 100));
    expect(seen).toContain("tools");
    await sub.close();
  });

  it("declares upstream exactly the capabilities a modern client declared, and answers a legacy upstream's requests in input rounds", async () => {
    // server-everything (a 2025-11-25-only SDK server) registers its sampling/elicitation tools only
    // for sessions that declared those capabilities: the gateway's legacy session for a modern
    // client declares what that client's requests declare (one session per set), and the
    // upstream's sampling request mid-call reaches the client as an input_required round.
    const { client } = await connect({ pin: "2026-07-28" });
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toContain("everything__trigger-sampling-request");
    const r = await client.callTool({ name: "everything__trigger-sampling-request", arguments: { prompt: "a haiku", maxTokens: 20 } });
    expect(text(r)).toContain("sampled(");
    const bare = new Client({ name: "e2e-bare", version: "1.0.0" }, { versionNegotiation: { mode: { pin: "2026-07-28" } }, capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await bare.connect(transport);
    open.push({ client: bare, transport });
    const bareNames = (await bare.listTools()).tools.map((t) => t.name);
    expect(bareNames).toContain("everything__echo");
    expect(bareNames).not.toContain("everything__trigger-sampling-request");
    expect(bareNames).not.toContain("everything__trigger-elicitation-request");
  });
});
