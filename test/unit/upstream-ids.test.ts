/**
 * The ids the gateway's upstream requests carry (upstreamRequestId, forward.ts), in workerd with
 * the network replaced by a fake upstream (globalThis.fetch) that answers after a delay and
 * records what it saw: ids are `pc:<isolate>:<n>` and never repeat; concurrent client requests
 * with the same id on one shared leg go upstream under distinct ids and each gets its own answer
 * back under the client's id; the id recorded for cancellation is the one the upstream saw;
 * fan-outs (list pages, logging/setLevel) and MRTR rounds never derive an id from the client's;
 * and SessionDO keeps the upstream id in its id map.
 */
import { NO_HALTS } from "../../src/governance/halts.ts";
import { env, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import { forward } from "../../src/upstream/forward.ts";
import { upstreamRequestId } from "../../src/upstream/exchange.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import type { Leg, SessionApi, SessionRecord } from "../../durable-objects/contract.ts";
import { testConfig } from "./fixtures.ts";

const mk = (name: string, url: string): UpstreamConfig => ({
  name,
  url,
  namespaced: true,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 2000,
  credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
  egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true },
  onLoopback: true,
});
const alpha = mk("alpha", "http://127.0.0.1:9001/alpha");
const beta = mk("beta", "http://127.0.0.1:9002/beta");
const who: Principal = { sub: "agent:a", team: "t", roles: ["agent"], tools: null, authenticated: true };
const PC_ID = /^pc:[0-9a-z]{24}:[0-9a-z]+$/;

let seen: { url: string; body: JsonRpcRequest }[] = [];
/** How the fake upstream answers one request (after `delayMs`); default: echo the call's tag. */
let answer: (body: JsonRpcRequest) => { delayMs?: number; result: unknown };

beforeEach(() => {
  seen = [];
  clearCatalog();
  answer = (body) => {
    if (body.method === "tools/list") return { result: { tools: [{ name: "echo", inputSchema: { type: "object" } }] } };
    const args = (body.params?.arguments ?? {}) as { tag?: string; ms?: number };
    return { delayMs: args.ms ?? 0, result: { content: [{ type: "text", text: String(args.tag) }] } };
  };
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    seen.push({ url, body });
    if (!("id" in body)) return new Response(null, { status: 202 });
    const a = answer(body);
    if (a.delayMs) await new Promise((r) => setTimeout(r, a.delayMs));
    return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result: a.result }), { headers: { "content-type": "application/json" } });
  });
});
afterEach(() => vi.restoreAllMocks());

function ctx(
  upstreams: UpstreamConfig[],
  opts: { era?: "legacy" | "modern"; leg?: Leg; recorded?: [string | number, string, string][]; ask?: boolean } = {},
): CallContext {
  const c: CallContext = {
    cfg: testConfig(upstreams),
    era: opts.era ?? "modern",
    principal: who,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: false,
    runId: null,
    legs: {
      leg: async () => opts.leg ?? { era: "legacy", protocolVersion: "2025-11-25", sessionId: "shared-upstream-session" },
      renew: async () => null,
      capabilities: async () => ({ tools: {}, logging: {} }),
      recordRequest: async (id, up, upstreamId) => {
        opts.recorded?.push([id, up.name, upstreamId]);
      },
    },
    stores: {
      ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" },
      killSwitch: () => NO_HALTS,
    },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
  };
  if (opts.ask) c.relay.ask = async () => ({ action: "accept", content: { name: "ada" } });
  return c;
}
const call = (id: string | number, tag: string, ms: number): JsonRpcRequest => ({
  jsonrpc: "2.0",
  id,
  method: "tools/call",
  params: { name: "echo", arguments: { tag, ms } },
});
const textOf = (r: { response: { result?: JsonObject } }) => ((r.response.result?.content as JsonObject[] | undefined)?.[0]?.text as string | undefined) ?? "";

describe("upstream request ids", () => {
  it("are pc:<isolate>:<n>, one isolate part, and never repeat", () => {
    const ids = Array.from({ length: 5000 }, () => upstreamRequestId());
    for (const id of ids.slice(0, 50)) expect(id).toMatch(PC_ID);
    expect(new Set(ids).size).toBe(ids.length);
    expect(new Set(ids.map((i) => i.split(":")[1])).size).toBe(1);
  });

  it("two concurrent requests with the same client id on one shared leg: distinct upstream ids, each answer to its own request under the client's id", async () => {
    const recorded: [string | number, string, string][] = [];
    const c = ctx([alpha], { recorded });
    const [a, b] = await Promise.all([forward(c, alpha, call(7, "first", 60)), forward(c, alpha, call(7, "second", 5))]);
    expect(a.response.id).toBe(7);
    expect(b.response.id).toBe(7);
    expect(textOf(a)).toBe("first");
    expect(textOf(b)).toBe("second");
    const ids = seen.filter((s) => s.body.method === "tools/call").map((s) => s.body.id);
    expect(ids).toHaveLength(2);
    expect(ids[0]).not.toBe(ids[1]);
    for (const id of ids) expect(String(id)).toMatch(PC_ID);
    // What is recorded for cancellation is the id the upstream saw.
    expect(recorded.map(([id, up]) => [id, up])).toEqual([
      [7, "alpha"],
      [7, "alpha"],
    ]);
    expect(recorded.map((r) => r[2]).sort()).toEqual([...ids].map(String).sort());
  });

  it("a client id that looks like a fan-out's id is never what a fan-out sends, and list pages and setLevel never carry the client's id", async () => {
    const c = ctx([alpha, beta]);
    const [list, clash] = await Promise.all([
      dispatch(c, { jsonrpc: "2.0", id: 9, method: "tools/list", params: {} }),
      forward(c, alpha, call("9:alpha:0", "clash", 5)),
    ]);
    expect(list.response.id).toBe(9);
    expect(((list.response.result?.tools ?? []) as JsonObject[]).map((t) => t.name)).toEqual(["alpha__echo", "beta__echo"]);
    expect(clash.response.id).toBe("9:alpha:0");
    expect(textOf(clash)).toBe("clash");
    const level = await dispatch(c, { jsonrpc: "2.0", id: "lvl", method: "logging/setLevel", params: { level: "debug" } });
    expect(level.response).toEqual({ jsonrpc: "2.0", id: "lvl", result: {} });
    const ids = seen.map((s) => s.body.id).filter((i) => i !== undefined);
    expect(seen.filter((s) => s.body.method === "logging/setLevel")).toHaveLength(2);
    for (const id of ids) expect(String(id)).toMatch(PC_ID);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("each MRTR round (legacy client, 2026-07-28 upstream) is a new request with a new gateway-made id", async () => {
    answer = (body) => {
      const params = body.params ?? {};
      if (params.inputResponses === undefined)
        return {
          result: {
            resultType: "input_required",
            inputRequests: { name: { method: "elicitation/create", params: { message: "name?" } } },
            requestState: "s1",
          },
        };
      return { result: { content: [{ type: "text", text: `got ${JSON.stringify(params.inputResponses)}` }] } };
    };
    const c = ctx([alpha], { era: "legacy", leg: { era: "modern", meta: {} }, ask: true });
    const out = await forward(c, alpha, call(3, "x", 0));
    expect(out.response.id).toBe(3);
    expect(textOf(out)).toContain("ada");
    const ids = seen.map((s) => s.body.id);
    expect(ids).toHaveLength(2);
    expect(ids[0]).not.toBe(ids[1]);
    for (const id of ids) expect(String(id)).toMatch(PC_ID);
  });
});

describe("SessionDO id map", () => {
  const rec = (id: string): SessionRecord => ({
    v: 1,
    id,
    principal: "agent:a",
    protocolVersion: "2025-11-25",
    clientCapabilities: {},
    upstreams: {},
    createdAt: Date.now(),
    touchedAt: Date.now(),
    ttlS: 3600,
  });
  it("keeps the upstream request id next to the upstream, for its owner only", async () => {
    const api = env.SESSIONS.get(env.SESSIONS.idFromName("session:idmap-1")) as unknown as SessionApi;
    await api.create(rec("idmap-1"));
    await api.begin("agent:a", JSON.stringify(7), "alpha", "pc:abc:1");
    await api.begin("agent:a", JSON.stringify("7"), "beta", "pc:abc:2");
    expect(await api.lookupRequest("agent:a", "7")).toEqual({ upstream: "alpha", upstreamId: "pc:abc:1" });
    expect(await api.lookupRequest("agent:a", '"7"')).toEqual({ upstream: "beta", upstreamId: "pc:abc:2" });
    expect(await api.lookupRequest("agent:b", "7")).toBeNull();
    expect(await api.lookupRequest("agent:a", "8")).toBeNull();
  });

  it("an id map written before upstream ids were kept gains the column: old rows have no upstream id, new ones do", async () => {
    const raw = env.SESSIONS.get(env.SESSIONS.idFromName("session:idmap-old"));
    await runInDurableObject(raw, (_i, state) => {
      state.storage.sql.exec(
        "CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL); CREATE TABLE idmap (down_id TEXT PRIMARY KEY, upstream TEXT NOT NULL, at INTEGER NOT NULL)",
      );
      state.storage.sql.exec("INSERT INTO meta (k, v) VALUES ('session', ?)", JSON.stringify(rec("idmap-old")));
      state.storage.sql.exec("INSERT INTO idmap (down_id, upstream, at) VALUES ('5', 'alpha', ?)", Date.now());
    });
    await evictDurableObject(raw);
    const api = raw as unknown as SessionApi;
    expect(await api.lookupRequest("agent:a", "5")).toEqual({ upstream: "alpha", upstreamId: null });
    await api.begin("agent:a", "6", "alpha", "pc:abc:3");
    expect(await api.lookupRequest("agent:a", "6")).toEqual({ upstream: "alpha", upstreamId: "pc:abc:3" });
  });
});
