import { env, evictDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { SessionApi, SessionRecord } from "../../durable-objects/records.ts";

function stub(name: string) {
  const id = env.SESSIONS.idFromName(name);
  return { api: env.SESSIONS.get(id) as unknown as SessionApi, raw: env.SESSIONS.get(id) };
}
const rec = (id: string, principal = "agent:a"): SessionRecord => ({
  v: 1, id, principal, protocolVersion: "2025-11-25", clientCapabilities: { sampling: {} },
  upstreams: { up: { leg: { era: "legacy", protocolVersion: "2025-11-25", sessionId: "u1" } } },
  createdAt: Date.now(), touchedAt: Date.now(), ttlS: 3600,
});

describe("SessionDO", () => {
  it("serves a session only to the principal that opened it", async () => {
    const { api } = stub("s1");
    expect(await api.create(rec("s1"))).toBe(true);
    expect(await api.create(rec("s1", "agent:b"))).toBe(false);
    expect((await api.open("agent:a"))?.id).toBe("s1");
    expect(await api.open("agent:b")).toBeNull();
    expect(await api.end("agent:b")).toBeNull();
    expect((await api.open("agent:a"))?.id).toBe("s1");
  });

  it("ends a session for good", async () => {
    const { api } = stub("s2");
    await api.create(rec("s2"));
    expect(await api.end("agent:a")).not.toBeNull();
    expect(await api.open("agent:a")).toBeNull();
    expect(await api.end("agent:a")).toBeNull();
  });

  it("keeps id maps, pending relays and event buffers across eviction", async () => {
    const { api, raw } = stub("s3");
    await api.create(rec("s3"));
    await api.begin("agent:a", "7", "up");
    await api.addPending("agent:a", { id: "pc-1", upstream: "up", upId: 42 });
    await api.appendEvents("sx", [{ seq: 1, data: "one" }, { seq: 2, data: "two" }], false);
    await api.update("agent:a", { logLevel: "debug" });
    await evictDurableObject(raw);
    expect((await api.open("agent:a"))?.logLevel).toBe("debug");
    expect(await api.lookupRequest("agent:a", "7")).toBe("up");
    expect(await api.readEvents("agent:a", "sx", 1)).toEqual({ events: [{ seq: 2, data: "two" }], done: false });
    expect(await api.readEvents("agent:b", "sx", 0)).toBeNull();
    await api.appendEvents("sx", [], true);
    expect((await api.readEvents("agent:a", "sx", 2))?.done).toBe(true);
    expect(await api.takePending("agent:b", "pc-1")).toBeNull();
    expect(await api.takePending("agent:a", "pc-1")).toEqual({ id: "pc-1", upstream: "up", upId: 42 });
    expect(await api.takePending("agent:a", "pc-1")).toBeNull();
  });

  it("keeps a modern principal's legacy upstream leg for its owner only", async () => {
    const { api } = stub("leg:agent:a");
    const rec = { leg: { era: "legacy" as const, protocolVersion: "2025-11-25", sessionId: "up-1" }, capabilities: { tools: {} } };
    expect(await api.getLeg("agent:a")).toBeNull();
    expect(await api.putLeg("agent:a", rec)).toBe(true);
    expect(await api.getLeg("agent:a")).toEqual(rec);
    expect(await api.getLeg("agent:b")).toBeNull();
    expect(await api.putLeg("agent:b", rec)).toBe(false);
  });

  it("hands a bridged answer to its waiter", async () => {
    const { api } = stub("s4");
    await api.create(rec("s4"));
    const waiting = api.awaitAnswer("agent:a", "pc-9", 5000);
    await api.putAnswer("agent:a", "pc-9", { jsonrpc: "2.0", id: "pc-9", result: { ok: true } });
    expect(await waiting).toEqual({ jsonrpc: "2.0", id: "pc-9", result: { ok: true } });
    expect(await api.awaitAnswer("agent:a", "pc-10", 50)).toBeNull();
  });
});
