/**
 * Dispatch, aggregation, the tool catalog and the upstream leg in workerd, with the network
 * replaced by a recording fake upstream (globalThis.fetch): list aggregation and filtering,
 * aliased (over 64 characters) names resolved from a cold catalog, catalog isolation between
 * principals whose credentials make an upstream list different tools, list_changed
 * invalidation, the client's `portcullis/` `_meta` keys dropped from every forwarded request, and
 * the leg's answered / failed / uncertain / auth results.
 */
import { NO_HALTS } from "../../src/governance/halts.ts";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { clearCatalog, noteNotification } from "../../src/upstream/catalog-cache.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import { callLeg } from "../../src/upstream/forward.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testUpstream, testConfig } from "./fixtures.ts";

const LONG = `create_${"very_".repeat(14)}long_tool_name`;

const mk = (name: string, url: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig =>
  testUpstream(name, url, { timeoutMs: 2000, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true }, ...extra });

interface Seen {
  url: string;
  body: JsonRpcRequest;
  auth: string | null;
}
let seen: Seen[] = [];
/** Tools each fake upstream lists; `vault` lists by bearer token (per-principal credentials). */
let toolsOf: (url: string, auth: string | null) => string[];
let behaviour: (url: string, body: JsonRpcRequest) => Response | Promise<Response> | null;

beforeEach(() => {
  seen = [];
  clearCatalog();
  toolsOf = (url) => (url.includes("alpha") ? ["read", "write", LONG] : ["search", "secret_dump"]);
  behaviour = () => null;
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    const auth = new Headers(init?.headers).get("authorization");
    seen.push({ url, body, auth });
    const special = await behaviour(url, body);
    if (special) return special;
    const reply = (result: JsonObject) =>
      new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
    if (body.method === "tools/list")
      return reply({
        tools: toolsOf(url, auth).map((name) => ({
          name,
          description: `${name}!`,
          inputSchema: { type: "object" },
          annotations: { readOnlyHint: name === "read" },
        })),
      });
    if (body.method === "tools/call") return reply({ content: [{ type: "text", text: `ran ${String(body.params?.name)}` }] });
    return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, error: { code: -32601, message: "Method not found" } }), {
      headers: { "content-type": "application/json" },
    });
  });
});
afterEach(() => vi.restoreAllMocks());

const alpha = mk("alpha", "http://127.0.0.1:9001/alpha");
const beta = mk("beta", "http://127.0.0.1:9002/beta", { deny: ["secret_*"] });
const everyone: Principal = { sub: "agent:a", team: "t", roles: ["agent"], tools: null, authenticated: true };

function ctx(upstreams: UpstreamConfig[], who: Principal = everyone, era: "legacy" | "modern" = "modern"): CallContext {
  // agentTools off: these tests are about what upstreams list (the agent tool is covered in test/e2e/preview.test.ts).
  const cfg = testConfig(upstreams);
  const emitted: JsonObject[] = [];
  return {
    cfg,
    era,
    principal: who,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: who.tools !== null,
    runId: null,
    legs: {
      leg: async () => ({ era: "modern", meta: {} }),
      renew: async () => null,
      capabilities: async () => ({ tools: {}, prompts: {}, resources: {} }),
      recordRequest: async () => undefined,
    },
    stores: {
      ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" },
      killSwitch: () => NO_HALTS,
    },
    relay: {
      send: async (m) => {
        emitted.push(m as unknown as JsonObject);
      },
      upstreamRequest: async () => undefined,
    },
  };
}
const rpc = (method: string, params: JsonObject = {}, id: number | string = 1): JsonRpcRequest => ({ jsonrpc: "2.0", id, method, params });
const names = (r: { response: { result?: JsonObject } }) => ((r.response.result?.tools ?? []) as JsonObject[]).map((t) => t.name);
const calls = () => seen.filter((s) => s.body.method === "tools/call");

describe("dispatch and aggregation", () => {
  it("tools/list merges upstreams under exposed names, applies deny and the grant, aliases long names within 64 characters", async () => {
    const all = await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    const listed = names(all) as string[];
    expect(listed.slice(0, 2)).toEqual(["alpha__read", "alpha__write"]);
    expect(listed).toContain("beta__search");
    expect(listed).not.toContain("beta__secret_dump");
    const alias = listed.find((n) => n.startsWith("alpha__create_"))!;
    expect(alias.length).toBeLessThanOrEqual(64);
    expect(alias).not.toBe(`alpha__${LONG}`);
    // Schemas and unknown fields pass verbatim; only the name changes.
    expect((all.response.result!.tools as JsonObject[])[0]).toEqual({
      name: "alpha__read",
      description: "read!",
      inputSchema: { type: "object" },
      annotations: { readOnlyHint: true },
    });
    const narrow = await dispatch(ctx([alpha, beta], { ...everyone, tools: ["beta__*"] }), rpc("tools/list"));
    expect(names(narrow)).toEqual(["beta__search"]);
    expect(narrow.response.result?.cacheScope).toBe("private");
  });

  it("an aliased tool name resolves from a cold catalog (no tools/list served first) and reaches the upstream under its real name", async () => {
    const listing = await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    const alias = (names(listing) as string[]).find((n) => n.startsWith("alpha__create_"))!;
    clearCatalog(); // a fresh isolate: nothing listed here
    seen = [];
    const out = await dispatch(ctx([alpha, beta]), rpc("tools/call", { name: alias, arguments: {} }));
    expect(out.response.result?.content).toEqual([{ type: "text", text: `ran ${LONG}` }]);
    expect(calls().map((c) => c.body.params?.name)).toEqual([LONG]);
    // The catalog was filled on demand with one tools/list to alpha only.
    expect(seen.filter((s) => s.body.method === "tools/list").map((s) => s.url)).toEqual([alpha.url]);
  });

  it("a tools/list refreshes the catalog, so the following call needs no extra upstream request", async () => {
    await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    seen = [];
    await dispatch(ctx([alpha, beta]), rpc("tools/call", { name: "alpha__read", arguments: {} }));
    expect(seen.map((s) => s.body.method)).toEqual(["tools/call"]);
  });

  it("unknown and denied tools are -32602 and never forwarded; calls outside the grant are readable refusals", async () => {
    for (const name of ["alpha__nope", "beta__secret_dump", "gamma__x", "nounderscore"]) {
      const out = await dispatch(ctx([alpha, beta]), rpc("tools/call", { name, arguments: {} }));
      expect(out.response.error?.code, name).toBe(-32602);
    }
    const outside = await dispatch(ctx([alpha, beta], { ...everyone, tools: ["beta__*"] }), rpc("tools/call", { name: "alpha__write", arguments: {} }));
    expect(outside.response.result?.isError).toBe(true);
    expect(calls()).toHaveLength(0);
  });

  it("per-principal credentials: one principal's catalog never resolves a tool for another", async () => {
    const vault = mk("vault", "http://127.0.0.1:9003/vault", {
      namespaced: false,
      credentials: { mode: "per_principal", header: "Authorization", prefix: "Bearer " },
    });
    toolsOf = (_url, auth) => (auth === "Bearer token-a" ? ["admin_reset", "read"] : ["read"]);
    const asA = ctx([{ ...vault, headers: { Authorization: "Bearer token-a" } }], { ...everyone, sub: "agent:a" });
    const asB = ctx([{ ...vault, headers: { Authorization: "Bearer token-b" } }], { ...everyone, sub: "agent:b" });
    expect(names(await dispatch(asA, rpc("tools/list")))).toEqual(["admin_reset", "read"]); // one upstream, transparent names
    const b = await dispatch(asB, rpc("tools/call", { name: "admin_reset", arguments: {} }));
    expect(b.response.error?.code).toBe(-32602);
    const a = await dispatch(asA, rpc("tools/call", { name: "admin_reset", arguments: {} }));
    expect(a.response.result?.content).toEqual([{ type: "text", text: "ran admin_reset" }]);
    expect(calls().map((c) => c.auth)).toEqual(["Bearer token-a"]);
  });

  it("notifications/tools/list_changed drops the upstream's catalog: the next call reads the list again", async () => {
    await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    toolsOf = (url) => (url.includes("alpha") ? ["read", "write", "added_later"] : ["search"]);
    noteNotification("alpha", "notifications/tools/list_changed");
    seen = [];
    const out = await dispatch(ctx([alpha, beta]), rpc("tools/call", { name: "alpha__added_later", arguments: {} }));
    expect(out.response.result?.content).toEqual([{ type: "text", text: "ran added_later" }]);
    expect(seen.map((s) => s.body.method)).toEqual(["tools/list", "tools/call"]);
  });

  it("an unknown method reaches a single transparent upstream verbatim; with several upstreams it is -32601", async () => {
    const solo = mk("solo", "http://127.0.0.1:9004/solo", { namespaced: false });
    const one = await dispatch(ctx([solo]), rpc("vendor/custom", { a: 1 }));
    expect(one.response.error?.message).toBe("Method not found");
    expect(seen.at(-1)?.body.params).toMatchObject({ a: 1 });
    const many = await dispatch(ctx([alpha, beta]), rpc("vendor/custom"));
    expect(many.response.error?.code).toBe(-32601);
    expect(seen.filter((s) => s.body.method === "vendor/custom")).toHaveLength(1);
  });

  it("the client's portcullis/ _meta keys reach no upstream, on a tools/call or any other forwarded request; other keys go verbatim", async () => {
    const solo = mk("solo", "http://127.0.0.1:9005/solo", { namespaced: false });
    const meta = { "portcullis/idempotency_key": "AGENT-KEY", "portcullis/x": 1, "vendor/trace": "t-1" };
    await dispatch(ctx([solo]), rpc("tools/call", { name: "search", arguments: {}, _meta: meta }));
    await dispatch(ctx([solo]), rpc("prompts/get", { name: "p", _meta: meta }));
    await dispatch(ctx([solo]), rpc("vendor/custom", { a: 1, _meta: meta }));
    const forwarded = seen.filter((s) => s.body.method !== "tools/list");
    expect(forwarded.map((s) => [s.body.method, s.body.params?._meta])).toEqual([
      ["tools/call", { "vendor/trace": "t-1" }],
      ["prompts/get", { "vendor/trace": "t-1" }],
      ["vendor/custom", { "vendor/trace": "t-1" }],
    ]);
    expect(JSON.stringify(seen)).not.toContain("AGENT-KEY");
  });

  it("concurrent calls of one principal each get their own answer", async () => {
    const outs = await Promise.all(
      ["read", "write", "read", "write"].map((t, i) => dispatch(ctx([alpha, beta]), rpc("tools/call", { name: `alpha__${t}`, arguments: {} }, `r${i}`))),
    );
    outs.forEach((o, i) => {
      expect(o.response.id).toBe(`r${i}`);
      expect(o.response.result?.content).toEqual([{ type: "text", text: `ran ${i % 2 ? "write" : "read"}` }]);
    });
  });
});

describe("the upstream leg (callLeg) never throws", () => {
  const call = rpc("tools/call", { name: "read", arguments: {} });
  it("answered", async () => {
    const r = await callLeg(ctx([alpha]), alpha, call);
    expect(r).toEqual({ kind: "answered", status: 200, response: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "ran read" }] } } });
  });
  it("failed: unreachable", async () => {
    behaviour = () => {
      throw new TypeError("connection refused");
    };
    const r = await callLeg(ctx([alpha]), alpha, call);
    expect(r.kind).toBe("failed");
    expect(r.kind === "failed" && !r.auth && r.reason).toContain("unreachable");
  });
  it("failed: refused by the egress rules before any request is made", async () => {
    const r = await callLeg(ctx([alpha]), { ...alpha, url: "http://169.254.169.254/latest" }, call);
    expect(r.kind).toBe("failed");
    expect(seen).toHaveLength(0);
  });
  it("failed with auth: the upstream refused the gateway's credential", async () => {
    behaviour = () => new Response("no", { status: 401 });
    const r = await callLeg(ctx([alpha]), alpha, call);
    expect(r).toMatchObject({ kind: "failed", auth: true });
  });
  it("uncertain: the stream closed before the response", async () => {
    behaviour = () =>
      new Response('event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}\n\n', {
        headers: { "content-type": "text/event-stream" },
      });
    const r = await callLeg(ctx([alpha], everyone, "legacy"), alpha, call);
    expect(r.kind).toBe("uncertain");
  });
  it("uncertain: no answer within the upstream's timeout", async () => {
    behaviour = (_u, _b) => new Promise<Response>(() => undefined);
    const r = await callLeg(ctx([alpha]), { ...alpha, timeoutMs: 50 }, call);
    expect(r.kind).toBe("uncertain");
    expect(r.kind === "uncertain" && r.reason).toContain("no answer within 50 ms");
  });
});
