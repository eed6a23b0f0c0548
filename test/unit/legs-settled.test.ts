/**
 * Upstream legs (src/upstream/legs.ts) share no promise in flight between requests, in workerd with
 * the network replaced by a fake (globalThis.fetch: every upstream here is legacy-only, so
 * `server/discover` gets a 404): a modern principal's legacy leg whose store read never settles
 * (another request, ended) does not hold up another request, which reads the store itself; a
 * settled leg is then served from the isolate without reading the store; a renew opens afresh.
 * A legacy session's lazy leg: uses within one request share one opening (one session read),
 * while another request (its own session record) reads for itself and is not held up by one
 * that never settles; a leg already kept in the session is used and nothing is opened upstream.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import { modernClientLeg, sessionLeg } from "../../src/upstream/legs.ts";
import type { SessionApi, SessionRecord, UpstreamLegRecord } from "../../durable-objects/contract.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

let n = 0;
const legacyOnly = (): UpstreamConfig =>
  testUpstream(`old${n}`, `http://127.0.0.1:9021/old-${n++}-${crypto.randomUUID()}`, {
    timeoutMs: 2000,
    egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true },
  });
let seen: string[] = [];

beforeEach(() => {
  seen = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (_input, init) => {
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    seen.push(init?.method === "DELETE" ? "DELETE" : body.method);
    if (body.method === "server/discover") return new Response("not found", { status: 404 });
    if (body.method === "initialize") {
      const result = { protocolVersion: "2025-11-25", capabilities: { tools: {} }, serverInfo: { name: "old", version: "1" } };
      return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), {
        headers: { "content-type": "application/json", "mcp-session-id": `up-${crypto.randomUUID()}` },
      });
    }
    return new Response(null, { status: 202 });
  });
});
afterEach(() => vi.restoreAllMocks());

const within = <T>(p: Promise<T>, ms = 1500) => Promise.race([p, new Promise<"hung">((r) => setTimeout(() => r("hung"), ms))]);
const kept: UpstreamLegRecord = { leg: { era: "legacy", protocolVersion: "2025-11-25", sessionId: "kept-1" }, capabilities: { tools: {} } };

describe("modernClientLeg", () => {
  it("a store read that never settles holds up no other request; the settled leg is then served without the store", async () => {
    const up = legacyOnly();
    const never = {
      get: () => new Promise<UpstreamLegRecord | null>(() => undefined),
      put: async () => true,
      keep: async (rec: UpstreamLegRecord) => ({ rec, stored: true }),
    };
    void modernClientLeg(up, "agent:a", false, never);
    let reads = 0;
    const store = {
      get: async () => {
        reads++;
        return kept;
      },
      put: async () => true,
      keep: async (rec: UpstreamLegRecord) => ({ rec, stored: true }),
    };
    const got = await within(modernClientLeg(up, "agent:a", false, store));
    expect(got).toEqual(kept);
    expect(reads).toBe(1);
    const again = await modernClientLeg(up, "agent:a", false, store);
    expect(again).toEqual(kept);
    expect(reads).toBe(1); // from the isolate's settled value
    expect(seen.filter((m) => m === "initialize")).toEqual([]);
  });

  it("renew ignores the store and the cached leg, opens a new upstream session and keeps it", async () => {
    const up = legacyOnly();
    const puts: UpstreamLegRecord[] = [];
    const store = {
      get: async () => kept,
      put: async (r: UpstreamLegRecord) => puts.push(r) > 0,
      keep: async (rec: UpstreamLegRecord) => ({ rec, stored: false }),
    };
    expect(await modernClientLeg(up, "agent:b", false, store)).toEqual(kept);
    const renewed = await modernClientLeg(up, "agent:b", true, store);
    expect(renewed.leg?.era).toBe("legacy");
    expect(renewed.leg && "sessionId" in renewed.leg ? renewed.leg.sessionId : "").toMatch(/^up-/);
    expect(puts).toEqual([renewed]);
    expect(await modernClientLeg(up, "agent:b", false, store)).toBe(renewed);
    expect(seen.filter((m) => m === "initialize").length).toBe(1);
  });
});

describe("modernClientLeg, two first openings at once", () => {
  it("both requests end on the leg stored first; the other upstream session is closed (one session per principal and upstream)", async () => {
    const up = legacyOnly();
    let stored: UpstreamLegRecord | null = null;
    const store = {
      get: async () => null,
      put: async () => true,
      // As SessionDO.keepLeg: the first leg stored wins.
      keep: async (rec: UpstreamLegRecord) => {
        if (stored) return { rec: stored, stored: false };
        stored = rec;
        return { rec, stored: true };
      },
    };
    const [a, b] = await Promise.all([modernClientLeg(up, "agent:c", false, store), modernClientLeg(up, "agent:c", false, store)]);
    expect(a).toEqual(stored);
    expect(b).toEqual(stored);
    expect(seen.filter((m) => m === "initialize").length).toBe(2);
    expect(seen.filter((m) => m === "DELETE").length).toBe(1);
    expect(await modernClientLeg(up, "agent:c", false, store)).toEqual(stored);
  });
});

function session(principal = "agent:s"): SessionRecord {
  return {
    v: 1,
    id: `s-${crypto.randomUUID()}`,
    principal,
    protocolVersion: "2025-11-25",
    clientCapabilities: {},
    upstreams: {},
    createdAt: 0,
    touchedAt: 0,
    ttlS: 60,
  };
}
function sessionStore(open: () => Promise<SessionRecord | null>, counts: { open: number; adopt: number }): SessionApi {
  return {
    open: () => {
      counts.open++;
      return open();
    },
    adoptLeg: async (_p: string, _u: string, leg: UpstreamLegRecord) => {
      counts.adopt++;
      return { rec: leg, stored: true };
    },
  } as unknown as SessionApi;
}

describe("sessionLeg", () => {
  it("uses within one request share one opening; another request is not held up by one that never settles", async () => {
    const up = legacyOnly();
    const stuck = { open: 0, adopt: 0 };
    void sessionLeg(
      sessionStore(() => new Promise(() => undefined), stuck),
      session(),
      up,
    );
    const counts = { open: 0, adopt: 0 };
    const rec = session();
    const store = sessionStore(async () => ({ ...rec, upstreams: {} }), counts);
    const both = await within(Promise.all([sessionLeg(store, rec, up), sessionLeg(store, rec, up)]));
    expect(both).not.toBe("hung");
    const [a, b] = both as (UpstreamLegRecord | undefined)[];
    expect(a?.leg?.era).toBe("legacy");
    expect(b).toBe(a);
    expect(counts).toEqual({ open: 1, adopt: 1 });
    expect(rec.upstreams[up.name]).toBe(a);
    expect(seen.filter((m) => m === "initialize").length).toBe(1);
    // The rest of the request finds it in its record: nothing more is read or opened.
    expect(await sessionLeg(store, rec, up)).toBe(a);
    expect(counts).toEqual({ open: 1, adopt: 1 });
    expect(stuck.open).toBe(1);
  });

  it("a leg another request kept in the session is used; nothing is opened upstream", async () => {
    const up = legacyOnly();
    const counts = { open: 0, adopt: 0 };
    const rec = session();
    const store = sessionStore(async () => ({ ...rec, upstreams: { [up.name]: kept } }), counts);
    expect(await sessionLeg(store, rec, up)).toEqual(kept);
    expect(counts).toEqual({ open: 1, adopt: 0 });
    expect(seen.filter((m) => m === "initialize")).toEqual([]);
  });
});
