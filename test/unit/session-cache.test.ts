/**
 * The legacy session off the per-call path (src/front/session-cache.ts), with a fake SessionDO
 * that counts its calls: a session read once is served from the isolate for SESSION_CACHE_MS,
 * each request its own copy; another principal always goes to the object (which refuses); a
 * change through the front's store drops the record at once; the id map of a call is written to
 * the object only once the call has run ID_MAP_AFTER_MS, never for a call that ended before, and
 * is found in this isolate while the call runs.
 */
import { describe, expect, it } from "vitest";
import type { SessionApi, SessionRecord } from "../../durable-objects/contract.ts";
import { forgetSession, ID_MAP_AFTER_MS, idMap, inFlightRequest, openSession, SESSION_CACHE_MS, writingStore } from "../../src/front/session-cache.ts";

function fakeStore(principal: string) {
  const calls: string[] = [];
  let rec: SessionRecord | null = {
    v: 1,
    id: "s1",
    principal,
    protocolVersion: "2025-11-25",
    clientCapabilities: {},
    upstreams: {},
    createdAt: 1,
    touchedAt: 1,
    ttlS: 3600,
  };
  const store = {
    open: async (p: string) => {
      calls.push(`open:${p}`);
      return rec && rec.principal === p ? structuredClone(rec) : null;
    },
    update: async (p: string, patch: Partial<SessionRecord>) => {
      calls.push(`update:${p}`);
      if (rec) rec = { ...rec, ...patch };
      return rec;
    },
    end: async (p: string) => {
      calls.push(`end:${p}`);
      const was = rec;
      rec = null;
      return was;
    },
    begin: async (_p: string, downId: string | null) => {
      calls.push(`begin:${downId}`);
      return rec;
    },
  } as unknown as SessionApi;
  return { store, calls };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("the session record, per isolate", () => {
  it("serves a session read once from the isolate, a copy each time, and asks the object again after the bound", async () => {
    const sid = `a-${crypto.randomUUID()}`;
    const { store, calls } = fakeStore("agent:a");
    const first = await openSession(sid, store, "agent:a");
    const second = await openSession(sid, store, "agent:a");
    expect(first).toEqual(second);
    expect(first).not.toBe(second);
    second!.logLevel = "debug"; // one request's change to its copy is not another's
    expect((await openSession(sid, store, "agent:a"))?.logLevel).toBeUndefined();
    expect(calls).toEqual(["open:agent:a"]);
    await sleep(SESSION_CACHE_MS + 50);
    await openSession(sid, store, "agent:a");
    expect(calls).toEqual(["open:agent:a", "open:agent:a"]);
  });

  it("never serves a cached session to another principal: the object is asked, and refuses", async () => {
    const sid = `b-${crypto.randomUUID()}`;
    const { store, calls } = fakeStore("agent:a");
    await openSession(sid, store, "agent:a");
    expect(await openSession(sid, store, "agent:b")).toBeNull();
    expect(calls).toEqual(["open:agent:a", "open:agent:b"]);
  });

  it("drops the record at once when the front changes or ends the session", async () => {
    const sid = `c-${crypto.randomUUID()}`;
    const { store, calls } = fakeStore("agent:a");
    await openSession(sid, store, "agent:a");
    await writingStore(sid, store).update("agent:a", { logLevel: "warning" });
    expect((await openSession(sid, store, "agent:a"))?.logLevel).toBe("warning");
    await writingStore(sid, store).end("agent:a");
    expect(await openSession(sid, store, "agent:a")).toBeNull();
    forgetSession(sid);
    expect(calls).toEqual(["open:agent:a", "update:agent:a", "open:agent:a", "end:agent:a", "open:agent:a"]);
  });
});

describe("the id map of calls in flight", () => {
  it("is written to the object only for a call still running after ID_MAP_AFTER_MS, and found here meanwhile", async () => {
    const sid = `d-${crypto.randomUUID()}`;
    const written: string[] = [];
    const ids = idMap(sid, async (downId, upstream, upId) => void written.push(`${downId}>${upstream}:${upId}`));
    ids.record("1", "alpha", "pc-1");
    ids.record("2", "beta", "pc-2");
    expect(inFlightRequest(sid, "1")).toEqual({ upstream: "alpha", upstreamId: "pc-1" });
    await sleep(ID_MAP_AFTER_MS + 50);
    expect(written).toEqual(["1>alpha:pc-1", "2>beta:pc-2"]);
    ids.done();
    expect(inFlightRequest(sid, "1")).toBeUndefined();

    const quick = idMap(sid, async (downId) => void written.push(`quick ${downId}`));
    quick.record("3", "alpha", "pc-3");
    quick.done(); // answered before the bound: nothing written
    await sleep(ID_MAP_AFTER_MS + 50);
    expect(written).not.toContain("quick 3");
    expect(inFlightRequest(sid, "3")).toBeUndefined();
  });
});
