/**
 * HoldsDO (durable-objects/holds.ts) through real stubs (env.HOLDS, `team:<team>`) with its
 * records read back from the team's LedgerDO (env.LEDGER): 100 concurrent claims of one approved
 * hold → exactly one consumed and 99 in flight, then every retry replays the stored answer; the
 * hold.approved record is on the team chain when resolve answers, and a double click approves
 * once; self-approval and a hash the approver was not shown are refused; a late approval is
 * refused and recorded; the alarm marks holds expired and records hold.expired exactly once
 * however often it runs; awaitChange wakes on resolve, on expiry and on complete, and times out;
 * rows of an unknown version are never consumed or resolved; holds of another team, or whose hash
 * is not their action's, are refused. Alarms run with runDurableObjectAlarm.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { holdsObject, ledgerObject, newHoldId } from "../../durable-objects/object-names.ts";
import { HOLD_RECORD_VERSION, type HoldsApi, type NewHold } from "../../durable-objects/contract-holds.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { canonicalJson, sha256Hex } from "../../src/wire/canonical.ts";
import type { JsonRpcResponse } from "../../src/wire/jsonrpc.ts";

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "https://gw.example.com" };
const ALICE = "agent:alice";
const BOB = "human:bob";
/** Calls a stub method inside an async function, so a refusal is one rejected promise. */
const rpc = async <T>(f: () => Promise<T>): Promise<T> => await f();

let n = 0;
const newTeam = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${n++}`;
const holds = (team: string): HoldsApi => holdsObject(env, team)!;
const raw = (team: string) => env.HOLDS.get(env.HOLDS.idFromName(`team:${team}`));
const chain = (team: string): Promise<LedgerEntry[]> => ledgerObject(env, team)!.read(0, 1000);
const sql = (team: string, q: string, ...b: SqlStorageValue[]) => runInDurableObject(raw(team), (_i, state) => state.storage.sql.exec(q, ...b).toArray());
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function fresh(team: string, now: number, life = 60_000, args: Record<string, unknown> = { to: "ops@example.com" }): NewHold {
  const action = canonicalJson({ principal: ALICE, upstream: "alpha", tool: "send", arguments: args });
  return {
    id: newHoldId(team),
    team,
    actionHash: sha256Hex(action),
    action,
    principal: ALICE,
    jti: "jti-1",
    upstream: "alpha",
    tool: "send",
    exposedName: "alpha__send",
    rule: "mail-needs-approval",
    reason: "sends mail",
    classification: { effect: "write", blast_radius: "external", source: "mapping" },
    createdAt: now,
    expiresAt: now + life,
  };
}
const answer: JsonRpcResponse = { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "sent" }] } };

/** A new pending hold on a fresh team, approved by bob. */
async function approvedHold(prefix: string, life = 60_000) {
  const team = newTeam(prefix);
  const t = Date.now();
  const created = await holds(team).claim(fresh(team, t, life), SIGNING, t);
  expect(created.kind).toBe("created");
  const r = await holds(team).resolve(created.hold.id, "approve", BOB, "looks right", created.hold.actionHash, SIGNING, Date.now());
  expect(r.ok).toBe(true);
  return { team, hold: created.hold, t };
}

describe("HoldsDO: exactly once", () => {
  it("100 concurrent claims of one approved hold: exactly 1 consumed, 99 in flight; after complete every claim replays the answer", async () => {
    const { team, hold, t } = await approvedHold("once");
    const claims = await Promise.all(Array.from({ length: 100 }, () => holds(team).claim(fresh(team, t + 1), SIGNING, Date.now())));
    const kinds = claims.map((c) => c.kind);
    expect(kinds.filter((k) => k === "consumed")).toHaveLength(1);
    expect(kinds.filter((k) => k === "in_flight")).toHaveLength(99);
    expect(new Set(claims.map((c) => c.hold.id))).toEqual(new Set([hold.id]));
    expect(claims.find((c) => c.kind === "consumed")!.hold).toMatchObject({ state: "consumed", approver: BOB });

    expect(await holds(team).complete(hold.id, answer, Date.now())).toBe(true);
    expect(await holds(team).complete(hold.id, { ...answer, id: 2 }, Date.now())).toBe(false);
    const replays = await Promise.all(Array.from({ length: 100 }, () => holds(team).claim(fresh(team, t + 2), SIGNING, Date.now())));
    expect(replays.every((c) => c.kind === "replay")).toBe(true);
    for (const c of replays) expect(c.hold.result).toEqual(answer);

    const entries = await chain(team);
    expect(entries.filter((e) => e.kind === "hold.approved")).toHaveLength(1);
    // Still one row: no retry created a second hold.
    expect(await sql(team, "SELECT COUNT(*) AS n FROM holds")).toEqual([{ n: 1 }]);
  });

  it("a released hold is pending again (not forwarded); approved again it is consumed once more", async () => {
    const { team, hold, t } = await approvedHold("release");
    expect((await holds(team).claim(fresh(team, t), SIGNING, Date.now())).kind).toBe("consumed");
    expect(await holds(team).release(hold.id, "decision not recorded", Date.now())).toBe(true);
    expect(await holds(team).get(hold.id, Date.now())).toMatchObject({ state: "pending", notForwarded: "decision not recorded", consumedAt: null });
    expect((await holds(team).resolve(hold.id, "approve", "human:dana", "again", null, SIGNING, Date.now())).ok).toBe(true);
    const claims = await Promise.all(Array.from({ length: 10 }, () => holds(team).claim(fresh(team, t), SIGNING, Date.now())));
    expect(claims.filter((c) => c.kind === "consumed")).toHaveLength(1);
    expect((await chain(team)).filter((e) => e.kind === "hold.approved").map((e) => e.body.approver)).toEqual([BOB, "human:dana"]);
  });
});

describe("HoldsDO: resolve", () => {
  it("the hold.approved record is on the team's chain when resolve answers ok", async () => {
    const team = newTeam("record");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t), SIGNING, t);
    expect(await chain(team)).toEqual([]);
    const r = await holds(team).resolve(hold.id, "approve", BOB, "looks right", hold.actionHash, SIGNING, t + 5);
    expect(r).toMatchObject({ ok: true, hold: { state: "approved", approver: BOB, resolvedAt: t + 5, resolveReason: "looks right" } });
    const entries = await chain(team);
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({
      chain: team,
      seq: 1,
      kind: "hold.approved",
      at: new Date(t + 5).toISOString(),
      body: {
        hold_id: hold.id,
        decision_id: null,
        principal: ALICE,
        team,
        tool: "alpha__send",
        action_hash: hold.actionHash,
        approver: BOB,
        reason: "looks right",
      },
    });
    expect(await holds(team).get(hold.id, Date.now())).toMatchObject({ state: "approved" });
  });

  it("a double click approves once; a rejection is reported to the retry with its reason", async () => {
    const team = newTeam("double");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t), SIGNING, t);
    const [a, b] = await Promise.all([
      holds(team).resolve(hold.id, "approve", BOB, "yes", null, SIGNING, t + 1),
      holds(team).resolve(hold.id, "approve", BOB, "yes", null, SIGNING, t + 1),
    ]);
    expect([a.ok, b.ok].sort()).toEqual([false, true]);
    expect([a, b].find((x) => !x.ok)).toMatchObject({ code: "not_pending" });
    expect((await chain(team)).filter((e) => e.kind === "hold.approved")).toHaveLength(1);

    const other = await holds(team).claim(fresh(team, t, 60_000, { to: "other@example.com" }), SIGNING, t);
    const rej = await holds(team).resolve(other.hold.id, "reject", BOB, "wrong recipient", null, SIGNING, t + 2);
    expect(rej).toMatchObject({ ok: true, hold: { state: "rejected" } });
    const retry = await holds(team).claim(fresh(team, t, 60_000, { to: "other@example.com" }), SIGNING, t + 3);
    expect(retry).toMatchObject({ kind: "rejected", hold: { id: other.hold.id, approver: BOB, resolveReason: "wrong recipient" } });
    expect((await chain(team)).filter((e) => e.kind === "hold.rejected")).toHaveLength(1);
  });

  it("refuses self-approval, a hash the approver was not shown, and an unknown hold; nothing is recorded", async () => {
    const team = newTeam("refuse");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t), SIGNING, t);
    expect(await holds(team).resolve(hold.id, "approve", ALICE, "mine", null, SIGNING, t + 1)).toMatchObject({ ok: false, code: "self" });
    expect(await holds(team).resolve(hold.id, "approve", BOB, "ok", "0".repeat(64), SIGNING, t + 1)).toMatchObject({ ok: false, code: "hash_mismatch" });
    expect(await holds(team).resolve(`${team}~${"a".repeat(24)}`, "approve", BOB, "ok", null, SIGNING, t + 1)).toMatchObject({
      ok: false,
      code: "not_found",
      hold: null,
    });
    expect(await chain(team)).toEqual([]);
    expect(await holds(team).get(hold.id, t + 2)).toMatchObject({ state: "pending", approver: null });
  });

  it("refuses a late approval: the hold is marked expired, the ignored approval is recorded, and the retry never runs on it", async () => {
    const team = newTeam("late");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t, 1_000), SIGNING, t);
    const r = await holds(team).resolve(hold.id, "approve", BOB, "sorry, late", hold.actionHash, SIGNING, t + 1_000);
    expect(r).toMatchObject({ ok: false, code: "expired", hold: { id: hold.id, state: "expired", approver: null } });
    const late = (await chain(team)).filter((e) => e.kind === "hold.expired");
    expect(late).toHaveLength(1);
    expect(late[0]!.body).toMatchObject({ hold_id: hold.id, approver: null, reason: `late approve by ${BOB} ignored` });
    expect(await sql(team, "SELECT state FROM holds WHERE id = ?", hold.id)).toEqual([{ state: "expired" }]);
    // The identical retry after expiry is a new hold, pending.
    const retry = await holds(team).claim(fresh(team, t + 1_000), SIGNING, t + 1_001);
    expect(retry.kind).toBe("created");
    expect(retry.hold.id).not.toBe(hold.id);
  });
});

describe("HoldsDO: alarm", () => {
  it("is armed for the earliest expiry, marks holds expired and records hold.expired exactly once, even when it runs again", async () => {
    const team = newTeam("alarm");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t, 300), SIGNING, t);
    const later = await holds(team).claim(fresh(team, t, 600_000, { n: 2 }), SIGNING, t);
    expect(await runInDurableObject(raw(team), (_i, s) => s.storage.getAlarm())).toBe(hold.expiresAt);
    await sleep(400);
    await runDurableObjectAlarm(raw(team)); // runs it (or, if it already fired by itself, its next run: a repeat)
    // Marked by the alarm (nothing read the hold meanwhile), and recorded.
    expect(await sql(team, "SELECT state, expiry_recorded FROM holds WHERE id = ?", hold.id)).toEqual([{ state: "expired", expiry_recorded: 1 }]);
    expect(await sql(team, "SELECT state FROM holds WHERE id = ?", later.hold.id)).toEqual([{ state: "pending" }]);
    expect(await runInDurableObject(raw(team), (_i, s) => s.storage.getAlarm())).toBe(later.hold.expiresAt);
    // Alarms fire at least once: run it twice more.
    for (let i = 0; i < 2; i++) {
      await runInDurableObject(raw(team), (_i, s) => s.storage.setAlarm(Date.now() + 60_000));
      expect(await runDurableObjectAlarm(raw(team))).toBe(true);
    }
    const expired = (await chain(team)).filter((e) => e.kind === "hold.expired");
    expect(expired.map((e) => e.id)).toEqual([`hold.expired:${hold.id}`]);
    expect(expired[0]!.body).toMatchObject({ hold_id: hold.id, team, action_hash: hold.actionHash, approver: null, reason: "expired unresolved" });
    expect(await holds(team).get(hold.id, Date.now())).toMatchObject({ state: "expired" });
    expect(await holds(team).list("pending", Date.now(), 10)).toMatchObject([{ id: later.hold.id }]);
  });

  it("an approved hold left unused past its expiry is never consumed: expired by the alarm, recorded once", async () => {
    const { team, hold } = await approvedHold("unused", 300);
    await sleep(400);
    await runDurableObjectAlarm(raw(team));
    const c = await holds(team).claim(fresh(team, Date.now()), SIGNING, Date.now());
    expect(c.kind).toBe("created");
    expect(await holds(team).get(hold.id, Date.now())).toMatchObject({ state: "expired", approver: BOB, consumedAt: null });
    expect((await chain(team)).map((e) => e.kind)).toEqual(["hold.approved", "hold.expired"]);
  });
});

describe("HoldsDO: awaitChange", () => {
  it("wakes when the hold is resolved", async () => {
    const team = newTeam("wait");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t), SIGNING, t);
    const started = Date.now();
    const waiting = holds(team).awaitChange(hold.id, 10_000);
    await sleep(50);
    await holds(team).resolve(hold.id, "approve", BOB, "go", null, SIGNING, Date.now());
    const seen = await waiting;
    expect(seen).toMatchObject({ id: hold.id, state: "approved" });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("answers after the timeout with the hold as it is, at once for a settled hold, null for an unknown one", async () => {
    const team = newTeam("timeout");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t), SIGNING, t);
    const started = Date.now();
    expect(await holds(team).awaitChange(hold.id, 150)).toMatchObject({ state: "pending" });
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(await holds(team).awaitChange(`${team}~${"b".repeat(24)}`, 5_000)).toBeNull();
    await holds(team).resolve(hold.id, "reject", BOB, "no", null, SIGNING, Date.now());
    const s2 = Date.now();
    expect(await holds(team).awaitChange(hold.id, 10_000)).toMatchObject({ state: "rejected" });
    expect(Date.now() - s2).toBeLessThan(2_000);
  });

  it("wakes at the hold's expiry, and when a running consumed hold gets its answer", async () => {
    const team = newTeam("expiry");
    const t = Date.now();
    const { hold } = await holds(team).claim(fresh(team, t, 300), SIGNING, t);
    const started = Date.now();
    expect(await holds(team).awaitChange(hold.id, 10_000)).toMatchObject({ state: "expired" });
    expect(Date.now() - started).toBeLessThan(5_000);

    const ok = await approvedHold("inflight");
    expect((await holds(ok.team).claim(fresh(ok.team, ok.t), SIGNING, Date.now())).kind).toBe("consumed");
    const waiting = holds(ok.team).awaitChange(ok.hold.id, 10_000);
    await sleep(50);
    await holds(ok.team).complete(ok.hold.id, answer, Date.now());
    expect(await waiting).toMatchObject({ state: "consumed", result: answer });
  });
});

describe("HoldsDO: fail closed", () => {
  it("a row of an unknown version is never consumed or resolved, and is left alone", async () => {
    const team = newTeam("version");
    const t = Date.now();
    const h = fresh(team, t);
    const rec = { ...h, v: 2, state: "approved", approver: BOB, resolvedAt: t, resolveReason: "ok", consumedAt: null, result: null, notForwarded: null };
    await sql(
      team,
      "INSERT INTO holds (id, principal, action_hash, state, created_at, expires_at, record, v) VALUES (?, ?, ?, 'approved', ?, ?, ?, 2)",
      h.id,
      h.principal,
      h.actionHash,
      t,
      h.expiresAt,
      JSON.stringify(rec),
    );
    const c = await holds(team).claim(fresh(team, t), SIGNING, t + 1);
    expect(c.kind).toBe("created");
    expect(c.hold.id).not.toBe(h.id);
    expect(await holds(team).get(h.id, t + 2)).toBeNull();
    expect(await holds(team).resolve(h.id, "approve", BOB, "ok", null, SIGNING, t + 2)).toMatchObject({ ok: false, code: "not_found" });
    expect((await holds(team).list(null, t + 2, 10)).map((x) => x.id)).toEqual([c.hold.id]);
    expect(await sql(team, "SELECT state, v FROM holds WHERE id = ?", h.id)).toEqual([{ state: "approved", v: 2 }]);
    expect(c.hold.v).toBe(HOLD_RECORD_VERSION);
  });

  it("refuses a hold of another team, or whose hash is not its action's; nothing is stored", async () => {
    const team = newTeam("strict");
    const t = Date.now();
    const other = fresh(newTeam("other"), t);
    await expect(rpc(() => holds(team).claim(other, SIGNING, t))).rejects.toThrow(/holds of team/);
    await expect(rpc(() => holds(team).claim({ ...fresh(team, t), actionHash: "1".repeat(64) }, SIGNING, t))).rejects.toThrow(/SHA-256 of action/);
    await expect(rpc(() => holds(team).claim(fresh(team, t, -1), SIGNING, t))).rejects.toThrow(/expire after now/);
    expect(await sql(team, "SELECT COUNT(*) AS n FROM holds")).toEqual([{ n: 0 }]);
  });
});
