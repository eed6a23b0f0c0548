/**
 * The Durable Objects as thin state machines, through direct stubs: SessionDO's sessions, runs
 * and legs (ownership, persistence across eviction, bridged answers), retention (alarms run with
 * runDurableObjectAlarm; idle time is aged by rewriting the stored timestamps), the version rule
 * (a record of an unknown version is "not found" and is never overwritten or deleted), and the
 * column migrations of old tables; CredentialsDO's versioned rows and RevocationsDO's retention.
 * docs/storage.md documents what is asserted here.
 */
import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { LEG_IDLE_TTL_S, type CredentialsApi, type RevocationsApi, type SessionApi, type SessionRecord } from "../../durable-objects/contract.ts";
import { SESSION_SCHEMA } from "../../durable-objects/session-rows.ts";

function stub(name: string) {
  const id = env.SESSIONS.idFromName(name);
  return { api: env.SESSIONS.get(id) as unknown as SessionApi, raw: env.SESSIONS.get(id) };
}
const rec = (id: string, principal = "agent:a"): SessionRecord => ({
  v: 1,
  id,
  principal,
  protocolVersion: "2025-11-25",
  clientCapabilities: { sampling: {} },
  upstreams: { up: { leg: { era: "legacy", protocolVersion: "2025-11-25", sessionId: "u1" } } },
  createdAt: Date.now(),
  touchedAt: Date.now(),
  ttlS: 3600,
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
    await api.begin("agent:a", "7", "up", "pc:t:1");
    await api.addPending("agent:a", { id: "pc-1", upstream: "up", upId: 42 });
    await api.appendEvents(
      "sx",
      [
        { seq: 1, data: "one" },
        { seq: 2, data: "two" },
      ],
      false,
    );
    await api.update("agent:a", { logLevel: "debug" });
    await evictDurableObject(raw);
    expect((await api.open("agent:a"))?.logLevel).toBe("debug");
    expect(await api.lookupRequest("agent:a", "7")).toEqual({ upstream: "up", upstreamId: "pc:t:1" });
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
    // keepLeg: the leg kept first wins; another principal's object is never one's own.
    const other = { ...rec, instructions: "another opening" } as typeof rec;
    expect(await api.keepLeg("agent:a", other)).toEqual({ rec, stored: false });
    expect(await api.getLeg("agent:a")).toEqual(rec);
    expect(await api.keepLeg("agent:b", other)).toBeNull();
    const fresh = stub("leg:agent:k").api;
    expect(await fresh.keepLeg("agent:k", other)).toEqual({ rec: other, stored: true });
    expect(await fresh.getLeg("agent:k")).toEqual(other);
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

type Row = Record<string, SqlStorageValue>;
/** Runs one SQL statement inside the object (to read what it stores, or to age or forge a record). */
function sql(raw: DurableObjectStub, q: string, ...binds: SqlStorageValue[]): Promise<Row[]> {
  return runInDurableObject(raw, (_i, state) => {
    // A forged row stands for what an older release wrote: such an object has its tables.
    if (/^\s*INSERT/i.test(q)) state.storage.sql.exec(SESSION_SCHEMA);
    return state.storage.sql.exec(q, ...binds).toArray();
  });
}
const alarmOf = (raw: DurableObjectStub) => runInDurableObject(raw, (_i, state) => state.storage.getAlarm());
const TABLES = ["events", "streams", "idmap", "pending", "answers"];
async function counts(raw: DurableObjectStub): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const t of ["meta", ...TABLES]) out[t] = Number((await sql(raw, `SELECT COUNT(*) AS n FROM ${t}`))[0]!.n);
  return out;
}
const EMPTY = { meta: 0, events: 0, streams: 0, idmap: 0, pending: 0, answers: 0 };
/** Moves the stored record's idle clock back by `ms`. */
async function age(raw: DurableObjectStub, k: "session" | "leg", ms: number): Promise<void> {
  const row = (await sql(raw, "SELECT v FROM meta WHERE k = ?", k))[0]!;
  const rec = JSON.parse(row.v as string) as { touchedAt: number };
  rec.touchedAt -= ms;
  await sql(raw, "UPDATE meta SET v = ? WHERE k = ?", JSON.stringify(rec), k);
}
/** A session with a row in every buffer table. */
async function busy(api: SessionApi, id: string): Promise<void> {
  expect(await api.create(rec(id))).toBe(true);
  await api.begin("agent:a", "1", "up");
  await api.addPending("agent:a", { id: "pc-1", upstream: "up", upId: 1 });
  await api.addPending("agent:a", { id: "pc-2", upstream: "__bridge__", upId: "pc-2" });
  await api.putAnswer("agent:a", "pc-2", { jsonrpc: "2.0", id: "pc-2", result: {} });
  await api.appendEvents("s1", [{ seq: 1, data: "one" }], true);
}

describe("SessionDO retention", () => {
  it("an idle session's alarm deletes everything it held, the answers table included, and leaves no alarm", async () => {
    const { api, raw } = stub("r1");
    await busy(api, "r1");
    expect(await counts(raw)).toEqual({ meta: 1, events: 1, streams: 1, idmap: 1, pending: 2, answers: 1 });
    const due = await alarmOf(raw);
    expect(due).toBeGreaterThan(Date.now() + 3500_000);
    await age(raw, "session", 3601_000);
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    expect(await counts(raw)).toEqual(EMPTY);
    expect(await alarmOf(raw)).toBeNull();
    expect(await api.open("agent:a")).toBeNull();
  });

  it("ending a session deletes everything and its alarm; late events are not buffered", async () => {
    const { api, raw } = stub("r2");
    await busy(api, "r2");
    expect((await api.end("agent:a"))?.ended).toBe(true);
    expect(await counts(raw)).toEqual(EMPTY);
    expect(await alarmOf(raw)).toBeNull();
    await api.appendEvents("s1", [{ seq: 2, data: "late" }], false);
    expect(await counts(raw)).toEqual(EMPTY);
  });

  it("a live session's alarm drops buffer rows idle longer than its TTL, keeps the rest, and comes back", async () => {
    const { api, raw } = stub("r3");
    await busy(api, "r3");
    await api.appendEvents("s2", [{ seq: 1, data: "fresh" }], false);
    const old = Date.now() - 3700_000;
    for (const [t, where] of [
      ["streams", "stream = 's1'"],
      ["idmap", "1 = 1"],
      ["pending", "id = 'pc-1'"],
      ["answers", "1 = 1"],
    ] as const) {
      await sql(raw, `UPDATE ${t} SET at = ? WHERE ${where}`, old);
    }
    await age(raw, "session", 120_000); // touched two minutes ago: not due
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    expect(await counts(raw)).toEqual({ meta: 1, events: 1, streams: 1, idmap: 0, pending: 1, answers: 0 });
    expect(await api.readEvents("agent:a", "s2", 0)).toEqual({ events: [{ seq: 1, data: "fresh" }], done: false });
    expect(await api.readEvents("agent:a", "s1", 0)).toBeNull();
    expect(await api.takePending("agent:a", "pc-2")).toEqual({ id: "pc-2", upstream: "__bridge__", upId: "pc-2" });
    const next = (await alarmOf(raw))!;
    expect(next).toBeGreaterThan(Date.now() + 3400_000);
    expect(next).toBeLessThan(Date.now() + 3600_000);
  });

  it("a run's alarm keeps only a tombstone: the owner may open the id again, nobody else ever", async () => {
    const { api, raw } = stub("run:r4");
    expect(await api.claimRun("agent:a", "r4-run-id", 3600)).toBe(true);
    expect(await api.claimRun("agent:b", "r4-run-id", 3600)).toBe(false);
    await age(raw, "session", 3601_000); // a run's record is a SessionRecord under the same key
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    const tomb = JSON.parse((await sql(raw, "SELECT v FROM meta WHERE k = 'session'"))[0]!.v as string) as SessionRecord;
    expect(tomb).toMatchObject({ v: 1, id: "r4-run-id", principal: "agent:a", ended: true });
    expect(await alarmOf(raw)).toBeNull();
    expect(await api.open("agent:a")).toBeNull();
    expect(await api.claimRun("agent:b", "r4-run-id", 3600)).toBe(false);
    expect(await api.claimRun("agent:a", "r4-run-id", 3600)).toBe(true);
    expect((await api.open("agent:a"))?.ended).toBeFalsy();
    expect(await alarmOf(raw)).not.toBeNull();
  });

  it("a run idle past its TTL counts as ended even before its alarm runs", async () => {
    const { api, raw } = stub("run:r5");
    expect(await api.claimRun("agent:a", "r5-run-id", 60)).toBe(true);
    await age(raw, "session", 61_000);
    expect(await api.claimRun("agent:b", "r5-run-id", 60)).toBe(false);
    expect(await api.claimRun("agent:a", "r5-run-id", 60)).toBe(true);
    expect(await api.open("agent:a")).not.toBeNull();
  });

  it("an object holding a legacy session is never claimed as a run", async () => {
    const { api } = stub("r6");
    await api.create(rec("r6"));
    expect(await api.claimRun("agent:a", "r6", 3600)).toBe(false);
    expect((await api.open("agent:a"))?.protocolVersion).toBe("2025-11-25");
  });

  it("a leg is armed when written, kept while read, and deleted once idle past LEG_IDLE_TTL_S", async () => {
    const { api, raw } = stub("leg:r7");
    const leg = { leg: { era: "legacy" as const, protocolVersion: "2025-11-25", sessionId: "up-7" } };
    expect(await api.putLeg("agent:a", leg)).toBe(true);
    const due = (await alarmOf(raw))!;
    expect(Math.abs(due - (Date.now() + LEG_IDLE_TTL_S * 1000))).toBeLessThan(60_000);
    await age(raw, "leg", 3600_000);
    expect(await api.getLeg("agent:a")).toEqual(leg); // a read refreshes the idle clock
    const touched = JSON.parse((await sql(raw, "SELECT v FROM meta WHERE k = 'leg'"))[0]!.v as string) as { touchedAt: number };
    expect(Date.now() - touched.touchedAt).toBeLessThan(60_000);
    expect(await runDurableObjectAlarm(raw)).toBe(true); // not due: kept, armed again
    expect(await api.getLeg("agent:a")).toEqual(leg);
    expect(await alarmOf(raw)).toBeGreaterThan(Date.now() + LEG_IDLE_TTL_S * 1000 - 120_000);
    await age(raw, "leg", LEG_IDLE_TTL_S * 1000 + 1000);
    expect(await api.getLeg("agent:a")).toBeNull();
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    expect(await counts(raw)).toEqual(EMPTY);
    expect(await alarmOf(raw)).toBeNull();
    expect(await api.putLeg("agent:a", leg)).toBe(true);
  });

  it("a leg written before versioning and retention (no v, no touchedAt) is read as v1 and armed on first read", async () => {
    const { api, raw } = stub("leg:r8");
    const leg = { leg: { era: "legacy" as const, protocolVersion: "2025-11-25", sessionId: "up-8" } };
    await sql(raw, "INSERT INTO meta (k, v) VALUES ('leg', ?)", JSON.stringify({ principal: "agent:a", rec: leg }));
    expect(await alarmOf(raw)).toBeNull();
    expect(await api.getLeg("agent:a")).toEqual(leg);
    const stored = JSON.parse((await sql(raw, "SELECT v FROM meta WHERE k = 'leg'"))[0]!.v as string) as { v: number; touchedAt: number };
    expect(stored.v).toBe(1);
    expect(Date.now() - stored.touchedAt).toBeLessThan(60_000);
    expect(await alarmOf(raw)).not.toBeNull();
  });

  it("adds the timestamp columns to buffer tables of objects created before them", async () => {
    const { api, raw } = stub("r9");
    await api.create(rec("r9"));
    await sql(raw, "DROP TABLE streams");
    await sql(raw, "DROP TABLE answers");
    await sql(raw, "CREATE TABLE streams (stream TEXT PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0)");
    await sql(raw, "CREATE TABLE answers (id TEXT PRIMARY KEY, msg TEXT NOT NULL)");
    await sql(raw, "INSERT INTO streams (stream, done) VALUES ('old', 1)");
    await sql(raw, "INSERT INTO answers (id, msg) VALUES ('pc-old', '{}')");
    await evictDurableObject(raw);
    const s = (await sql(raw, "SELECT at FROM streams WHERE stream = 'old'"))[0]!;
    const a = (await sql(raw, "SELECT at FROM answers WHERE id = 'pc-old'"))[0]!;
    expect(Date.now() - Number(s.at)).toBeLessThan(60_000);
    expect(Date.now() - Number(a.at)).toBeLessThan(60_000);
    expect(await api.readEvents("agent:a", "old", 0)).toEqual({ events: [], done: true });
  });
});

describe("SessionDO record versions", () => {
  const future = (id: string) => JSON.stringify({ ...rec(id), v: 99, principal: "agent:a", meaning: "changed" });

  it("a session record of an unknown version is not found, never overwritten, and left alone by the alarm", async () => {
    const { api, raw } = stub("v1");
    const forged = future("v1");
    await sql(raw, "INSERT INTO meta (k, v) VALUES ('session', ?)", forged);
    await runInDurableObject(raw, (_i, state) => state.storage.setAlarm(Date.now() + 3600_000));
    expect(await api.open("agent:a")).toBeNull();
    expect(await api.begin("agent:a", "1", "up")).toBeNull();
    expect(await api.update("agent:a", { logLevel: "debug" })).toBeNull();
    expect(await api.end("agent:a")).toBeNull();
    expect(await api.create(rec("v1"))).toBe(false);
    expect(await api.claimRun("agent:a", "v1-run-id", 3600)).toBe(false);
    await api.appendEvents("s", [{ seq: 1, data: "x" }], false);
    expect(await api.readEvents("agent:a", "s", 0)).toBeNull();
    expect(await api.awaitAnswer("agent:a", "pc-1", 50)).toBeNull();
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    expect((await sql(raw, "SELECT v FROM meta WHERE k = 'session'"))[0]!.v).toBe(forged);
    expect(await counts(raw)).toEqual({ ...EMPTY, meta: 1 });
    expect(await alarmOf(raw)).toBeGreaterThan(Date.now() + 86_000_000);
  });

  it("a run record of an unknown version is not claimed by anyone", async () => {
    const { api, raw } = stub("run:v2");
    await sql(
      raw,
      "INSERT INTO meta (k, v) VALUES ('session', ?)",
      JSON.stringify({ v: 2, id: "v2-run-id", principal: "agent:a", protocolVersion: "2026-07-28" }),
    );
    expect(await api.claimRun("agent:a", "v2-run-id", 3600)).toBe(false);
    expect(await api.claimRun("agent:b", "v2-run-id", 3600)).toBe(false);
  });

  it("a leg of an unknown version is not read and not replaced", async () => {
    const { api, raw } = stub("leg:v3");
    const forged = JSON.stringify({ v: 2, principal: "agent:a", rec: { leg: { era: "legacy", protocolVersion: "2025-11-25", sessionId: "x" } } });
    await sql(raw, "INSERT INTO meta (k, v) VALUES ('leg', ?)", forged);
    expect(await api.getLeg("agent:a")).toBeNull();
    expect(await api.putLeg("agent:a", {})).toBe(false);
    expect((await sql(raw, "SELECT v FROM meta WHERE k = 'leg'"))[0]!.v).toBe(forged);
  });

  it("an unreadable record (not JSON, or no object) counts as foreign too", async () => {
    const { api, raw } = stub("v4");
    await sql(raw, "INSERT INTO meta (k, v) VALUES ('session', ?)", "{not json");
    expect(await api.open("agent:a")).toBeNull();
    expect(await api.create(rec("v4"))).toBe(false);
    const { api: legApi, raw: legRaw } = stub("leg:v4");
    await sql(legRaw, "INSERT INTO meta (k, v) VALUES ('leg', ?)", "null");
    expect(await legApi.getLeg("agent:a")).toBeNull();
    expect(await legApi.putLeg("agent:a", {})).toBe(false);
  });

  it("writes the current version, and refuses to create a record of a version it could not read", async () => {
    const { api, raw } = stub("v5");
    expect(await api.create({ ...rec("v5"), v: 2 })).toBe(false);
    // Refused before anything was stored: the object has not even its tables.
    expect(await sql(raw, "SELECT name FROM sqlite_master")).toEqual([]);
    expect(await api.create(rec("v5"))).toBe(true);
    expect(JSON.parse((await sql(raw, "SELECT v FROM meta WHERE k = 'session'"))[0]!.v as string).v).toBe(1);
  });
});

describe("SessionDO: unknown ids", () => {
  it("looking up an object nobody created (every read, the alarm) stores nothing: no table, no alarm", async () => {
    const { api, raw } = stub("session:never-created");
    expect(await api.open("agent:a")).toBeNull();
    expect(await api.begin("agent:a", "1", "up")).toBeNull();
    expect(await api.lookupRequest("agent:a", "1")).toBeNull();
    expect(await api.readEvents("agent:a", "s", 0)).toBeNull();
    expect(await api.takePending("agent:a", "pc-1")).toBeNull();
    await api.putAnswer("agent:a", "pc-1", { jsonrpc: "2.0", id: "pc-1", result: {} });
    expect(await api.awaitAnswer("agent:a", "pc-1", 10)).toBeNull();
    await api.appendEvents("s", [{ seq: 1, data: "x" }], false);
    expect(await api.update("agent:a", { logLevel: "debug" })).toBeNull();
    expect(await api.end("agent:a")).toBeNull();
    expect(await api.getLeg("agent:a")).toBeNull();
    await runDurableObjectAlarm(raw);
    expect(await sql(raw, "SELECT name FROM sqlite_master")).toEqual([]);
    expect(await alarmOf(raw)).toBeNull();
    // The first write that stores a record creates the tables.
    expect(await api.create(rec("never-created"))).toBe(true);
    expect((await sql(raw, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf%' ORDER BY name")).map((r) => r.name)).toEqual([
      "answers",
      "events",
      "idmap",
      "meta",
      "pending",
      "streams",
    ]);
  });
});

describe("CredentialsDO rows", () => {
  const creds = (name: string) => {
    const id = env.CREDENTIALS.idFromName(name);
    return { api: env.CREDENTIALS.get(id) as unknown as CredentialsApi, raw: env.CREDENTIALS.get(id) };
  };

  it("stores each sealed credential with its version, and answers a row of an unknown version as not registered", async () => {
    const { api, raw } = creds("principal:c1");
    await api.put("alpha", { iv: "aXY=", ct: "Y3Q=" });
    expect(await api.get("alpha")).toMatchObject({ v: 1, iv: "aXY=", ct: "Y3Q=" });
    await sql(raw, "UPDATE creds SET v = 2 WHERE upstream = 'alpha'");
    expect(await api.get("alpha")).toBeNull();
    expect(await api.remove("alpha")).toBe(true);
    expect(await sql(raw, "SELECT * FROM creds")).toEqual([]);
  });

  it("reads rows of a table created before the version column as version 1", async () => {
    const { api, raw } = creds("principal:c2");
    await api.get("alpha");
    await sql(raw, "DROP TABLE creds");
    await sql(raw, "CREATE TABLE creds (upstream TEXT PRIMARY KEY, iv TEXT NOT NULL, ct TEXT NOT NULL, at INTEGER NOT NULL)");
    await sql(raw, "INSERT INTO creds (upstream, iv, ct, at) VALUES ('alpha', 'aXY=', 'Y3Q=', 5)");
    await evictDurableObject(raw);
    expect(await api.get("alpha")).toEqual({ v: 1, iv: "aXY=", ct: "Y3Q=", at: 5 });
  });
});

describe("RevocationsDO retention", () => {
  const shard = (name: string) => {
    const id = env.REVOCATIONS.idFromName(name);
    return { api: env.REVOCATIONS.get(id) as unknown as RevocationsApi, raw: env.REVOCATIONS.get(id) };
  };

  it("keeps a revocation until its grant's exp (+120 s skew); revoking again only extends it", async () => {
    const { api, raw } = shard("shard-test-1");
    const now = Math.floor(Date.now() / 1000);
    await api.revoke("jti-long-0001", now + 7200, "admin:a");
    await api.revoke("jti-long-0001", now + 60, "admin:b");
    expect((await sql(raw, "SELECT exp, by FROM revoked WHERE jti = 'jti-long-0001'"))[0]).toEqual({ exp: now + 7200, by: "admin:a" });
    await api.revoke("jti-long-0001", now + 9000, "admin:b");
    expect((await sql(raw, "SELECT exp FROM revoked WHERE jti = 'jti-long-0001'"))[0]!.exp).toBe(now + 9000);
    await api.revoke("jti-gone-0001", now - 600, "admin:a");
    await runDurableObjectAlarm(raw);
    expect(await api.isRevoked("jti-gone-0001")).toBe(false);
    expect(await api.isRevoked("jti-long-0001")).toBe(true);
    expect(await alarmOf(raw)).toBe((now + 9000 + 120) * 1000);
  });
});
