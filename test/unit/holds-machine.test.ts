/**
 * The HoldsDO state machine (durable-objects/holds-machine.ts) over an in-memory HoldStore and a
 * fake ledger: a model-based fast-check test whose `fc.scheduler()` interleaves approve, claim
 * (consume), expire (the clock moves on and the alarm runs), complete and release on one action
 * — with ledger appends that resolve in scheduler order and sometimes fail — and checks "at most
 * one consume per approval", "no consume at or after expiry", "no approval without its record"
 * and "one expiry record per hold"; then one example test per transition, self-approval, hash
 * mismatch, late approval, release → re-approve → consume once more, the alarm (repeats, failed
 * appends retried with backoff, retention), kept answers too large to keep, and input checks.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { claimHold, completeHold, releaseHold, resolveHold, type ResolveRequest } from "../../durable-objects/holds-machine.ts";
import {
  type AppendDrafts,
  EXPIRED_UNRESOLVED,
  getHold,
  HOLD_LIST_MAX,
  HOLD_RESULT_MAX_BYTES,
  HOLD_RETENTION_MS,
  HOLD_UNKNOWN_RECHECK_MS,
  type HoldStore,
  listHolds,
  nextAlarm,
  recordBackoff,
  runAlarm,
  type StoredHold,
} from "../../durable-objects/holds-expiry.ts";
import { HOLD_RECORD_VERSION, type HoldState, type NewHold } from "../../durable-objects/contract-holds.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { EntryDraft } from "../../src/ledger/records.ts";
import { canonicalJson, sha256Hex } from "../../src/wire/canonical.ts";
import type { JsonRpcResponse } from "../../src/wire/jsonrpc.ts";

const TEAM = "t1";
const ALICE = "agent:alice";
const BOB = "human:bob";
const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "https://gw.example.com" };
const T0 = 1_800_000_000_000;
const LIFE = 10_000;

/** An in-memory HoldStore with the SQL store's semantics (rows of another version are invisible; an atomic step that throws leaves nothing). */
function memoryStore() {
  type Slot = { s: StoredHold; seq: number; v: number };
  let rows = new Map<string, Slot>();
  let signing: LedgerSigning | null = null;
  let seq = 0;
  const V = HOLD_RECORD_VERSION;
  const copy = <T>(x: T): T => structuredClone(x);
  const known = () => [...rows.values()].filter((r) => r.v === V);
  const newestFirst = (a: Slot, b: Slot) => b.s.rec.createdAt - a.s.rec.createdAt || b.seq - a.seq;
  const byExpiry = (a: Slot, b: Slot) => a.s.rec.expiresAt - b.s.rec.expiresAt;
  const live = (st: HoldState) => st === "pending" || st === "approved";
  const owesNothing = (s: StoredHold) => s.rec.state === "rejected" || s.rec.state === "consumed" || (s.rec.state === "expired" && s.expiryRecorded);
  const owed = (s: StoredHold) => s.rec.state === "expired" && !s.expiryRecorded;
  const min = (xs: number[]) => (xs.length === 0 ? null : Math.min(...xs));
  let writes = 0;
  const store: HoldStore = {
    atomically<T>(fn: () => T): T {
      const before = new Map([...rows].map(([k, v]) => [k, copy(v)]));
      const sg = signing;
      try {
        return fn();
      } catch (e) {
        rows = before;
        signing = sg;
        throw e;
      }
    },
    has: (id) => rows.has(id),
    get: (id) => {
      const r = rows.get(id);
      return r && r.v === V ? copy(r.s) : null;
    },
    insert(row) {
      if (rows.has(row.rec.id)) throw new Error("UNIQUE constraint failed: holds.id");
      rows.set(row.rec.id, { s: copy(row), seq: seq++, v: V });
      writes++;
    },
    update(row) {
      const r = rows.get(row.rec.id);
      if (r && r.v === V) r.s = copy(row);
      writes++;
    },
    ofAction: (p, h, now) =>
      known()
        .filter((r) => r.s.rec.principal === p && r.s.rec.actionHash === h && (r.s.rec.expiresAt > now || live(r.s.rec.state)))
        .sort(newestFirst)
        .map((r) => copy(r.s)),
    list: (state, limit) =>
      known()
        .filter((r) => state === null || r.s.rec.state === state)
        .sort(newestFirst)
        .slice(0, limit)
        .map((r) => copy(r.s)),
    overdue: (now, limit) =>
      known()
        .filter((r) => live(r.s.rec.state) && r.s.rec.expiresAt <= now)
        .sort(byExpiry)
        .slice(0, limit)
        .map((r) => copy(r.s)),
    owed: (now, limit) =>
      known()
        .filter((r) => owed(r.s) && (r.s.recordRetryAt === null || r.s.recordRetryAt <= now))
        .sort(byExpiry)
        .slice(0, limit)
        .map((r) => copy(r.s)),
    purge(before) {
      for (const r of known()) if (r.s.rec.expiresAt < before && owesNothing(r.s)) rows.delete(r.s.rec.id);
    },
    schedule: () => ({
      expiry: min(
        known()
          .filter((r) => live(r.s.rec.state))
          .map((r) => r.s.rec.expiresAt),
      ),
      retry: min(
        known()
          .filter((r) => owed(r.s))
          .map((r) => r.s.recordRetryAt ?? 0),
      ),
      oldest: min(
        known()
          .filter((r) => owesNothing(r.s))
          .map((r) => r.s.rec.expiresAt),
      ),
      unknown: [...rows.values()].filter((r) => r.v !== V).length,
    }),
    signing: () => signing,
    setSigning(s) {
      signing = { ...s };
    },
  };
  return {
    store,
    raw: (id: string) => rows.get(id),
    size: () => rows.size,
    writes: () => writes,
    /** A row written by a release this code does not know (another `v`). */
    addUnknown(row: StoredHold, v: number) {
      rows.set(row.rec.id, { s: copy(row), seq: seq++, v });
    },
  };
}

/** A fake team chain: every draft appended, or a failure while `down`. */
function fakeLedger() {
  const entries: Array<EntryDraft & { team: string }> = [];
  const state = { down: false, calls: 0 };
  const append: AppendDrafts = async (team, drafts) => {
    state.calls++;
    if (state.down) throw new Error("ledger unavailable");
    for (const d of drafts) entries.push({ ...d, team });
  };
  return { entries, state, append, of: (kind: string, holdId: string) => entries.filter((e) => e.kind === kind && e.body.hold_id === holdId) };
}

function actionOf(principal: string, args: Record<string, unknown> = { to: "ops@example.com" }) {
  const action = canonicalJson({ principal, upstream: "alpha", tool: "send", arguments: args });
  return { action, actionHash: sha256Hex(action) };
}
let ids = 0;
const holdId = () => `${TEAM}~${(ids++).toString(16).padStart(24, "0")}`;
function fresh(now: number, over: Partial<NewHold> = {}, life = LIFE): NewHold {
  const principal = over.principal ?? ALICE;
  return {
    id: holdId(),
    team: TEAM,
    ...actionOf(principal),
    principal,
    jti: "jti-1",
    upstream: "alpha",
    tool: "send",
    exposedName: "alpha__send",
    rule: "mail-needs-approval",
    reason: "sends mail",
    classification: { effect: "write", blast_radius: "external", source: "mapping" },
    createdAt: now,
    expiresAt: now + life,
    ...over,
  };
}
const answer = (text: string): JsonRpcResponse => ({ jsonrpc: "2.0", id: 7, result: { content: [{ type: "text", text }] } });
let entryIds = 0;
const newEntryId = () => `entry-${entryIds++}`;
const req = (id: string, now: number, over: Partial<ResolveRequest> = {}): ResolveRequest => ({
  id,
  decision: "approve",
  approver: BOB,
  reason: "looks right",
  expectHash: null,
  signing: SIGNING,
  now,
  ...over,
});

describe("model: interleavings of approve / claim / expire (clock and alarm) / complete / release on one action", () => {
  type Cmd = { op: "approve" } | { op: "claim" } | { op: "expire"; ms: number; alarm: boolean } | { op: "alarm" } | { op: "complete" } | { op: "release" };
  const cmd: fc.Arbitrary<Cmd> = fc.oneof(
    { arbitrary: fc.constant<Cmd>({ op: "approve" }), weight: 3 },
    { arbitrary: fc.constant<Cmd>({ op: "claim" }), weight: 4 },
    // The clock moves on; the alarm may or may not run at once (alarms can be late, so every transition checks expiry itself).
    {
      arbitrary: fc.record({ ms: fc.integer({ min: 1, max: 6_000 }), alarm: fc.boolean() }).map(({ ms, alarm }): Cmd => ({ op: "expire", ms, alarm })),
      weight: 3,
    },
    { arbitrary: fc.constant<Cmd>({ op: "alarm" }), weight: 1 },
    { arbitrary: fc.constant<Cmd>({ op: "complete" }), weight: 2 },
    { arbitrary: fc.constant<Cmd>({ op: "release" }), weight: 2 },
  );
  type Ev =
    | { kind: "approved"; id: string; at: number }
    | { kind: "consumed"; id: string; at: number; expiresAt: number }
    | { kind: "released"; id: string }
    | { kind: "completed"; id: string };

  it("keeps at most one consume per approval, none at or after expiry, and every approval and expiry on the record", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.scheduler(),
        fc.array(cmd, { minLength: 1, maxLength: 16 }),
        fc.array(fc.boolean(), { minLength: 1, maxLength: 24 }),
        async (s, cmds, ledgerUp) => {
          const { store } = memoryStore();
          const ledger = fakeLedger();
          const clock = { t: T0 };
          // The fake ledger answers in scheduler order, and is down when the generated pattern says so.
          let appends = 0;
          const append: AppendDrafts = async (team, drafts) => {
            ledger.state.down = !ledgerUp[appends++ % ledgerUp.length]!;
            await s.schedule(Promise.resolve(), `append ${drafts.map((d) => d.kind).join(",")}`);
            await ledger.append(team, drafts);
          };
          // The object's blockConcurrencyWhile: while a resolve runs, no other event starts.
          let gate: Promise<void> | null = null;
          // Each caller waits inline and acts in the same synchronous continuation (an extra await in between would let a resolve slip in).
          const exclusive = async <T>(fn: () => Promise<T>): Promise<T> => {
            for (let i = 0; gate !== null && i < 1000; i++) await gate;
            expect(gate).toBeNull();
            let open!: () => void;
            gate = new Promise<void>((r) => (open = r));
            try {
              return await fn();
            } finally {
              gate = null;
              open();
            }
          };

          const events: Ev[] = [];
          const first = claimHold(store, fresh(clock.t), SIGNING, TEAM, clock.t);
          expect(first.kind).toBe("created");
          let current = first.hold.id;
          let lastConsumed: string | null = null;
          const hash = first.hold.actionHash;

          const run = async (c: Cmd): Promise<void> => {
            if (c.op === "expire" || c.op === "alarm") {
              if (c.op === "expire") clock.t += c.ms; // time passes whatever the object is doing; the alarm is an event like any other
              if (c.op === "expire" && !c.alarm) return;
              for (let i = 0; gate !== null && i < 1000; i++) await gate;
              await runAlarm(store, append, clock.t);
              return;
            }
            if (c.op === "approve") {
              await exclusive(async () => {
                const id = current;
                const before = ledger.entries.length;
                const r = await resolveHold(store, req(id, clock.t, { expectHash: hash }), append, newEntryId);
                if (r.ok) {
                  events.push({ kind: "approved", id, at: r.hold.resolvedAt! });
                  // The approval's record is on the chain before the state says approved.
                  expect(ledger.entries.slice(before).some((e) => e.kind === "hold.approved" && e.body.hold_id === id)).toBe(true);
                } else if (r.code === "unrecorded") {
                  expect(store.get(id)!.rec.state).toBe("pending");
                  expect(ledger.entries.slice(before).some((e) => e.kind === "hold.approved")).toBe(false);
                } else expect(["expired", "not_pending"]).toContain(r.code);
              });
              return;
            }
            for (let i = 0; gate !== null && i < 1000; i++) await gate;
            expect(gate).toBeNull();
            const now = clock.t;
            if (c.op === "claim") {
              const r = claimHold(store, fresh(now), SIGNING, TEAM, now);
              if (r.kind === "created") current = r.hold.id;
              if (r.kind === "consumed") {
                events.push({ kind: "consumed", id: r.hold.id, at: now, expiresAt: r.hold.expiresAt });
                lastConsumed = r.hold.id;
              }
              if (r.kind === "replay") expect(r.hold.result).not.toBeNull();
              if (r.kind !== "created") expect(r.hold.expiresAt).toBeGreaterThan(now);
            } else if (c.op === "complete" && lastConsumed !== null) {
              if (completeHold(store, lastConsumed, answer(`done ${lastConsumed}`), now)) events.push({ kind: "completed", id: lastConsumed });
            } else if (c.op === "release" && lastConsumed !== null) {
              if (releaseHold(store, lastConsumed, "write-ahead failed", now)) events.push({ kind: "released", id: lastConsumed });
            }
          };

          const done = cmds.map((c) => s.schedule(Promise.resolve(c.op), c.op).then(() => run(c)));
          // Release scheduled tasks (command starts and ledger answers) until every command has finished.
          await s.waitFor(Promise.all(done));
          await s.waitIdle();

          // At most one consume per approval: per hold, approvals and consumes alternate, starting with an approval.
          const holdIds = new Set(events.map((e) => e.id));
          for (const id of holdIds) {
            let credit = 0;
            let running = false;
            for (const e of events.filter((x) => x.id === id)) {
              if (e.kind === "approved") {
                expect(credit).toBe(0);
                credit = 1;
              } else if (e.kind === "consumed") {
                expect(credit).toBe(1);
                credit = 0;
                running = true;
                // No consume at or after expiry.
                expect(e.at).toBeLessThan(e.expiresAt);
              } else {
                // complete and release only ever act on a consumed call still running, once.
                expect(running).toBe(true);
                running = false;
              }
            }
            const approvals = events.filter((e) => e.id === id && e.kind === "approved").length;
            expect(events.filter((e) => e.id === id && e.kind === "consumed").length).toBeLessThanOrEqual(approvals);
            // Every approval is on the record exactly once (failed appends left no approval behind).
            expect(ledger.of("hold.approved", id).length).toBe(approvals);
          }

          // Drain: far past every expiry, with the ledger up, the alarm records each expired hold exactly once.
          ledger.state.down = false;
          for (let i = 0; i < 12 && store.owed(Number.MAX_SAFE_INTEGER, 1).length > 0; i++) {
            clock.t += 3_600_000;
            await runAlarm(store, ledger.append, clock.t);
          }
          for (const row of store.list(null, 1000)) {
            const recs = ledger.entries.filter((e) => e.id === `hold.expired:${row.rec.id}`);
            expect(recs.length).toBe(row.rec.state === "expired" ? 1 : 0);
            if (row.rec.state === "expired") expect(row.expiryRecorded).toBe(true);
          }
          for (const e of ledger.entries.filter((x) => x.id.startsWith("hold.expired:"))) expect(e.body.reason).toBe(EXPIRED_UNRESOLVED);
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe("claim", () => {
  it("stores a new pending hold, and reports the same hold to an identical retry (any session: a new hold id each time)", () => {
    const { store, size } = memoryStore();
    const a = claimHold(store, fresh(T0), SIGNING, TEAM, T0);
    expect(a.kind).toBe("created");
    expect(a.hold).toMatchObject({ v: HOLD_RECORD_VERSION, state: "pending", approver: null, consumedAt: null, result: null, notForwarded: null });
    const b = claimHold(store, fresh(T0 + 1), SIGNING, TEAM, T0 + 1);
    expect(b).toEqual({ kind: "pending", hold: a.hold });
    expect(size()).toBe(1);
    expect(store.signing()).toEqual(SIGNING);
  });

  it("keeps actions apart: another principal or any changed argument is a different action", () => {
    const { store } = memoryStore();
    const a = claimHold(store, fresh(T0), SIGNING, TEAM, T0);
    const other = claimHold(store, fresh(T0, { principal: "agent:carol" }), SIGNING, TEAM, T0);
    const changed = claimHold(store, fresh(T0, actionOf(ALICE, { to: "ops@example.org" })), SIGNING, TEAM, T0);
    expect([other.kind, changed.kind]).toEqual(["created", "created"]);
    expect(new Set([a.hold.id, other.hold.id, changed.hold.id]).size).toBe(3);
  });

  it("consumes an approved hold once: then in flight, then the recorded answer replayed", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    expect((await resolveHold(store, req(h.id, T0 + 10), ledger.append, newEntryId)).ok).toBe(true);
    const c = claimHold(store, fresh(T0 + 20), SIGNING, TEAM, T0 + 20);
    expect(c.kind).toBe("consumed");
    expect(c.hold).toMatchObject({ id: h.id, state: "consumed", consumedAt: T0 + 20, approver: BOB });
    expect(claimHold(store, fresh(T0 + 30), SIGNING, TEAM, T0 + 30).kind).toBe("in_flight");
    expect(completeHold(store, h.id, answer("sent"), T0 + 40)).toBe(true);
    const r = claimHold(store, fresh(T0 + 50), SIGNING, TEAM, T0 + 50);
    expect(r.kind).toBe("replay");
    expect(r.hold.result).toEqual(answer("sent"));
    // The answer is kept once: a second complete changes nothing.
    expect(completeHold(store, h.id, answer("other"), T0 + 60)).toBe(false);
    expect(getHold(store, h.id, T0 + 70)!.result).toEqual(answer("sent"));
  });

  it("reports a rejected hold with the approver's reason", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    const r = await resolveHold(store, req(h.id, T0 + 1, { decision: "reject", reason: "not today" }), ledger.append, newEntryId);
    expect(r).toMatchObject({ ok: true, hold: { state: "rejected", approver: BOB, resolveReason: "not today", resolvedAt: T0 + 1 } });
    expect(ledger.of("hold.rejected", h.id)).toHaveLength(1);
    const c = claimHold(store, fresh(T0 + 2), SIGNING, TEAM, T0 + 2);
    expect(c).toMatchObject({ kind: "rejected", hold: { id: h.id, resolveReason: "not today" } });
  });

  it("never consumes at or after expiry: an approved hold past its expiry is marked expired and the retry gets a new pending hold", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    await resolveHold(store, req(h.id, T0 + 1), ledger.append, newEntryId);
    const at = h.expiresAt; // expiresAt ≤ now: expired
    const c = claimHold(store, fresh(at), SIGNING, TEAM, at);
    expect(c.kind).toBe("created");
    expect(c.hold.id).not.toBe(h.id);
    expect(store.get(h.id)).toMatchObject({ rec: { state: "expired" }, expiryRecorded: false });
    // One millisecond before expiry it would have been consumed.
    const { store: s2 } = memoryStore();
    const h2 = claimHold(s2, fresh(T0), SIGNING, TEAM, T0).hold;
    await resolveHold(s2, req(h2.id, T0 + 1), ledger.append, newEntryId);
    expect(claimHold(s2, fresh(h2.expiresAt - 1), SIGNING, TEAM, h2.expiresAt - 1).kind).toBe("consumed");
  });

  it("stores a retried hold under a fresh id when its id is taken by an expired hold", () => {
    const { store } = memoryStore();
    const first = fresh(T0);
    claimHold(store, first, SIGNING, TEAM, T0);
    const again = claimHold(store, { ...first, expiresAt: T0 + 3 * LIFE }, SIGNING, TEAM, T0 + LIFE);
    expect(again.kind).toBe("created");
    expect(again.hold.id).not.toBe(first.id);
    expect(again.hold.id.startsWith(`${TEAM}~`)).toBe(true);
  });

  it("refuses malformed holds and leaves nothing behind", () => {
    const { store, size } = memoryStore();
    expect(() => claimHold(store, fresh(T0, { team: "t2", id: `t2~${"0".repeat(24)}` }), SIGNING, TEAM, T0)).toThrow(/team/);
    expect(() => claimHold(store, fresh(T0), SIGNING, undefined, T0)).toThrow(/addressed by team name/);
    expect(() => claimHold(store, fresh(T0, { id: "t1-not-an-id" }), SIGNING, TEAM, T0)).toThrow(/hold id/);
    expect(() => claimHold(store, fresh(T0, { actionHash: "0".repeat(64) }), SIGNING, TEAM, T0)).toThrow(/SHA-256 of action/);
    expect(() => claimHold(store, fresh(T0, {}, 0), SIGNING, TEAM, T0)).toThrow(/expire after now/);
    expect(() => claimHold(store, fresh(T0), { secret: "", gateway: "x" }, TEAM, T0)).toThrow(/signing/);
    expect(() => claimHold(store, fresh(T0), SIGNING, TEAM, Number.NaN)).toThrow(/now/);
    expect(size()).toBe(0);
  });

  it("never sees a row of an unknown record version: an approved one is not consumed (fail closed)", () => {
    const { store, addUnknown } = memoryStore();
    const h = fresh(T0);
    const rec = {
      ...h,
      v: 2,
      state: "approved" as const,
      approver: BOB,
      resolvedAt: T0,
      resolveReason: "ok",
      consumedAt: null,
      result: null,
      notForwarded: null,
    };
    addUnknown({ rec, expiryRecorded: false, recordFailures: 0, recordRetryAt: null }, 2);
    const c = claimHold(store, fresh(T0 + 1), SIGNING, TEAM, T0 + 1);
    expect(c.kind).toBe("created");
    expect(getHold(store, h.id, T0 + 1)).toBeNull();
    expect(nextAlarm(store, T0 + 1)).toBe(c.hold.expiresAt);
    const { store: only } = memoryStore();
    only.setSigning(SIGNING);
    expect(nextAlarm(only, T0)).toBeNull();
  });
});

describe("resolve", () => {
  it("appends the hold.approved record first (HoldBody with the action hash), then commits", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    const r = await resolveHold(store, req(h.id, T0 + 5, { expectHash: h.actionHash }), ledger.append, () => "approval-1");
    expect(r).toMatchObject({ ok: true, hold: { state: "approved", approver: BOB, resolvedAt: T0 + 5, resolveReason: "looks right" } });
    expect(ledger.entries).toEqual([
      {
        team: TEAM,
        kind: "hold.approved",
        id: "approval-1",
        at: new Date(T0 + 5).toISOString(),
        body: {
          hold_id: h.id,
          decision_id: null,
          principal: ALICE,
          team: TEAM,
          tool: "alpha__send",
          upstream: "alpha",
          upstream_tool: "send",
          action_hash: h.actionHash,
          approver: BOB,
          reason: "looks right",
        },
        // Beside the record, for the ledger's metric rollups only: how long the hold waited.
        metrics: { wait_ms: 5 },
      },
    ]);
  });

  it("changes nothing when the ledger does not take the record (unrecorded)", async () => {
    const { store, writes } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    const w = writes();
    ledger.state.down = true;
    const r = await resolveHold(store, req(h.id, T0 + 1), ledger.append, newEntryId);
    expect(r).toMatchObject({ ok: false, code: "unrecorded", hold: { state: "pending" } });
    expect(writes()).toBe(w);
    expect(store.get(h.id)!.rec).toEqual(h);
    expect(claimHold(store, fresh(T0 + 2), SIGNING, TEAM, T0 + 2).kind).toBe("pending");
  });

  it("refuses self-approval, a hash the page did not show, an unknown id and a hold that is not pending", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    expect(await resolveHold(store, req(h.id, T0 + 1, { approver: ALICE }), ledger.append, newEntryId)).toMatchObject({ ok: false, code: "self" });
    expect(await resolveHold(store, req(h.id, T0 + 1, { approver: ALICE, decision: "reject" }), ledger.append, newEntryId)).toMatchObject({ code: "self" });
    expect(await resolveHold(store, req(h.id, T0 + 1, { expectHash: "f".repeat(64) }), ledger.append, newEntryId)).toMatchObject({ code: "hash_mismatch" });
    expect(await resolveHold(store, req(`${TEAM}~${"e".repeat(24)}`, T0 + 1), ledger.append, newEntryId)).toMatchObject({ code: "not_found", hold: null });
    expect(ledger.entries).toHaveLength(0);
    expect(store.get(h.id)!.rec.state).toBe("pending");
    expect((await resolveHold(store, req(h.id, T0 + 2), ledger.append, newEntryId)).ok).toBe(true);
    // A double click: the second approval finds the hold approved.
    expect(await resolveHold(store, req(h.id, T0 + 3), ledger.append, newEntryId)).toMatchObject({ code: "not_pending", hold: { state: "approved" } });
    expect(ledger.of("hold.approved", h.id)).toHaveLength(1);
  });

  it("refuses a late approval: the hold is marked expired and the ignored approval is recorded", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    const r = await resolveHold(store, req(h.id, h.expiresAt), ledger.append, () => "late-1");
    expect(r).toMatchObject({ ok: false, code: "expired", hold: { state: "expired", approver: null } });
    expect(store.get(h.id)!.rec.state).toBe("expired");
    expect(ledger.entries).toHaveLength(1);
    expect(ledger.entries[0]).toMatchObject({
      kind: "hold.expired",
      id: "late-1",
      body: { hold_id: h.id, approver: null, reason: `late approve by ${BOB} ignored` },
    });
    // A late rejection of the already expired hold is refused and recorded too.
    const again = await resolveHold(store, req(h.id, h.expiresAt + 5, { decision: "reject" }), ledger.append, () => "late-2");
    expect(again).toMatchObject({ code: "expired" });
    expect(ledger.entries[1]).toMatchObject({ id: "late-2", body: { reason: `late reject by ${BOB} ignored` } });
    // Refused even when the late record cannot be written.
    ledger.state.down = true;
    expect(await resolveHold(store, req(h.id, h.expiresAt + 6), ledger.append, newEntryId)).toMatchObject({
      code: "expired",
      message: expect.stringContaining("not recorded"),
    });
  });

  it("refuses malformed requests before anything runs", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    await expect(resolveHold(store, req(h.id, T0, { approver: "" }), ledger.append, newEntryId)).rejects.toThrow(/approver/);
    await expect(resolveHold(store, req(h.id, T0, { decision: "maybe" as "approve" }), ledger.append, newEntryId)).rejects.toThrow(/decision/);
    await expect(resolveHold(store, req(h.id, T0, { reason: "x".repeat(5000) }), ledger.append, newEntryId)).rejects.toThrow(/reason/);
    expect(ledger.state.calls).toBe(0);
  });
});

describe("complete and release", () => {
  async function consumed() {
    const m = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(m.store, fresh(T0), SIGNING, TEAM, T0).hold;
    await resolveHold(m.store, req(h.id, T0 + 1), ledger.append, newEntryId);
    expect(claimHold(m.store, fresh(T0 + 2), SIGNING, TEAM, T0 + 2).kind).toBe("consumed");
    return { ...m, ledger, h };
  }

  it("release → pending, not forwarded; re-approve → consumed once more, exactly once", async () => {
    const { store, ledger, h } = await consumed();
    expect(releaseHold(store, h.id, "the decision could not be recorded", T0 + 3)).toBe(true);
    const p = getHold(store, h.id, T0 + 4)!;
    expect(p).toMatchObject({ state: "pending", consumedAt: null, notForwarded: "the decision could not be recorded", result: null });
    const retry = claimHold(store, fresh(T0 + 5), SIGNING, TEAM, T0 + 5);
    expect(retry).toMatchObject({ kind: "pending", hold: { id: h.id, notForwarded: "the decision could not be recorded" } });
    expect((await resolveHold(store, req(h.id, T0 + 6, { approver: "human:dana" }), ledger.append, newEntryId)).ok).toBe(true);
    const kinds = [7, 8, 9].map((d) => claimHold(store, fresh(T0 + d), SIGNING, TEAM, T0 + d).kind);
    expect(kinds).toEqual(["consumed", "in_flight", "in_flight"]);
    expect(ledger.of("hold.approved", h.id)).toHaveLength(2);
  });

  it("takes a result, or a release, only from a consumed hold still running", async () => {
    const { store, h } = await consumed();
    expect(completeHold(store, `${TEAM}~${"a".repeat(24)}`, answer("x"), T0 + 3)).toBe(false);
    expect(completeHold(store, h.id, answer("ok"), T0 + 3)).toBe(true);
    expect(releaseHold(store, h.id, "late failure", T0 + 4)).toBe(false);
    expect(getHold(store, h.id, T0 + 5)).toMatchObject({ state: "consumed", result: answer("ok"), notForwarded: null });
    const { store: s2 } = memoryStore();
    const pending = claimHold(s2, fresh(T0), SIGNING, TEAM, T0).hold;
    expect(completeHold(s2, pending.id, answer("x"), T0 + 1)).toBe(false);
    expect(releaseHold(s2, pending.id, "x", T0 + 1)).toBe(false);
  });

  it("a release past the hold's expiry leaves it expired (it owes its expiry record)", async () => {
    const { store, h } = await consumed();
    expect(releaseHold(store, h.id, "not forwarded", h.expiresAt + 1)).toBe(true);
    expect(store.get(h.id)).toMatchObject({ rec: { state: "expired", notForwarded: "not forwarded" }, expiryRecorded: false });
  });

  it("keeps an answer too large to keep as an isError answer, so replays still never re-run", async () => {
    const { store, h } = await consumed();
    const big = answer("x".repeat(HOLD_RESULT_MAX_BYTES));
    expect(completeHold(store, h.id, big, T0 + 3)).toBe(true);
    const r = claimHold(store, fresh(T0 + 4), SIGNING, TEAM, T0 + 4);
    expect(r.kind).toBe("replay");
    expect(r.hold.result).toMatchObject({ jsonrpc: "2.0", id: 7, result: { isError: true } });
    const text = (r.hold.result!.result!.content as Array<{ text: string }>)[0]!.text;
    expect(text).toMatch(/too large to keep/);
    expect(JSON.stringify(r.hold.result).length).toBeLessThan(1000);
  });
});

describe("get and list", () => {
  it("list: newest first, by state, expiry applied and marked, limit capped at 500", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const a = claimHold(store, fresh(T0, {}, 1_000), SIGNING, TEAM, T0).hold;
    const b = claimHold(store, fresh(T0 + 1, actionOf(ALICE, { n: 2 })), SIGNING, TEAM, T0 + 1).hold;
    const c = claimHold(store, fresh(T0 + 2, actionOf(ALICE, { n: 3 })), SIGNING, TEAM, T0 + 2).hold;
    await resolveHold(store, req(c.id, T0 + 3, { decision: "reject" }), ledger.append, newEntryId);
    const now = T0 + 1_000; // a has expired
    expect(listHolds(store, null, now, 10).map((h) => [h.id, h.state])).toEqual([
      [c.id, "rejected"],
      [b.id, "pending"],
      [a.id, "expired"],
    ]);
    expect(store.get(a.id)!.rec.state).toBe("expired");
    expect(listHolds(store, "pending", now, 10).map((h) => h.id)).toEqual([b.id]);
    expect(listHolds(store, "expired", now, 10).map((h) => h.id)).toEqual([a.id]);
    expect(listHolds(store, null, now, 1).map((h) => h.id)).toEqual([c.id]);
    expect(() => listHolds(store, "bogus" as HoldState, now, 10)).toThrow(/state/);
    expect(() => listHolds(store, null, now, 0)).toThrow(/limit/);
    const { store: many } = memoryStore();
    for (let i = 0; i < HOLD_LIST_MAX + 5; i++) claimHold(many, fresh(T0, actionOf(ALICE, { i })), SIGNING, TEAM, T0);
    expect(listHolds(many, null, T0, 10_000)).toHaveLength(HOLD_LIST_MAX);
  });

  it("get marks an overdue hold expired; an unknown id is null", () => {
    const { store } = memoryStore();
    const h = claimHold(store, fresh(T0), SIGNING, TEAM, T0).hold;
    expect(getHold(store, h.id, T0 + 1)!.state).toBe("pending");
    expect(getHold(store, h.id, h.expiresAt)!.state).toBe("expired");
    expect(store.get(h.id)!.rec.state).toBe("expired");
    expect(getHold(store, "nope", T0)).toBeNull();
  });
});

describe("alarm", () => {
  it("fires at the earliest expiry; marks holds expired and records each once (id hold.expired:<id>), however often it runs", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const a = claimHold(store, fresh(T0, {}, 1_000), SIGNING, TEAM, T0).hold;
    const b = claimHold(store, fresh(T0, actionOf(ALICE, { n: 2 }), 5_000), SIGNING, TEAM, T0).hold;
    expect(nextAlarm(store, T0)).toBe(a.expiresAt);
    const next = await runAlarm(store, ledger.append, a.expiresAt);
    expect(store.get(a.id)).toMatchObject({ rec: { state: "expired" }, expiryRecorded: true });
    expect(store.get(b.id)!.rec.state).toBe("pending");
    expect(next).toBe(b.expiresAt);
    await runAlarm(store, ledger.append, a.expiresAt);
    await runAlarm(store, ledger.append, a.expiresAt + 100);
    expect(ledger.entries.map((e) => e.id)).toEqual([`hold.expired:${a.id}`]);
    expect(ledger.entries[0]).toMatchObject({
      kind: "hold.expired",
      body: { hold_id: a.id, approver: null, reason: EXPIRED_UNRESOLVED, action_hash: a.actionHash },
    });
  });

  it("a failed append (or no signing known) still marks the hold expired; the record is retried with bounded backoff", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0, {}, 1_000), SIGNING, TEAM, T0).hold;
    const at = h.expiresAt;
    ledger.state.down = true;
    const n1 = await runAlarm(store, ledger.append, at);
    expect(store.get(h.id)).toMatchObject({ rec: { state: "expired" }, expiryRecorded: false, recordFailures: 1, recordRetryAt: at + recordBackoff(1) });
    expect(n1).toBe(at + recordBackoff(1));
    // Not due yet: nothing is tried.
    const calls = ledger.state.calls;
    await runAlarm(store, ledger.append, at + 1);
    expect(ledger.state.calls).toBe(calls);
    // No signing known: no append at all, still counted as a failure.
    const n2 = await runAlarm(store, null, at + recordBackoff(1));
    expect(store.get(h.id)!.recordFailures).toBe(2);
    expect(n2).toBe(at + recordBackoff(1) + recordBackoff(2));
    expect(recordBackoff(50)).toBe(3_600_000);
    ledger.state.down = false;
    await runAlarm(store, ledger.append, n2!);
    expect(store.get(h.id)).toMatchObject({ expiryRecorded: true, recordFailures: 0, recordRetryAt: null });
    expect(ledger.entries.map((e) => e.id)).toEqual([`hold.expired:${h.id}`]);
  });

  it("a hold marked expired by a read owes its record, and the alarm is due at once", async () => {
    const { store } = memoryStore();
    const ledger = fakeLedger();
    const h = claimHold(store, fresh(T0, {}, 1_000), SIGNING, TEAM, T0).hold;
    getHold(store, h.id, h.expiresAt + 10);
    expect(nextAlarm(store, h.expiresAt + 20)).toBe(h.expiresAt + 20);
    await runAlarm(store, ledger.append, h.expiresAt + 20);
    expect(ledger.of("hold.expired", h.id)).toHaveLength(1);
  });

  it("deletes rows more than 7 days past their expiry, but never one whose expiry record is still owed", async () => {
    const { store, size } = memoryStore();
    const ledger = fakeLedger();
    const done = claimHold(store, fresh(T0, {}, 1_000), SIGNING, TEAM, T0).hold;
    await runAlarm(store, ledger.append, done.expiresAt);
    const owed = claimHold(store, fresh(T0, actionOf(ALICE, { n: 2 }), 1_000), SIGNING, TEAM, T0).hold;
    ledger.state.down = true;
    await runAlarm(store, ledger.append, owed.expiresAt);
    expect(nextAlarm(store, owed.expiresAt)).toBe(owed.expiresAt + recordBackoff(1));
    const late = done.expiresAt + HOLD_RETENTION_MS + 1;
    await runAlarm(store, ledger.append, late);
    expect(store.get(done.id)).toBeNull();
    expect(store.get(owed.id)).not.toBeNull();
    expect(size()).toBe(1);
    // Tried again at `late` (down): the second failure waits recordBackoff(2).
    expect(store.get(owed.id)).toMatchObject({ recordFailures: 2, recordRetryAt: late + recordBackoff(2) });
    ledger.state.down = false;
    await runAlarm(store, ledger.append, late + recordBackoff(2));
    expect(store.get(owed.id)!.expiryRecorded).toBe(true);
    expect(nextAlarm(store, late + recordBackoff(2))).toBe(owed.expiresAt + HOLD_RETENTION_MS + 1);
    expect(await runAlarm(store, ledger.append, owed.expiresAt + HOLD_RETENTION_MS + 1)).toBeNull();
    expect(size()).toBe(0);
  });

  it("leaves rows of an unknown version alone and looks again daily", async () => {
    const { store, addUnknown, size } = memoryStore();
    const ledger = fakeLedger();
    const h = fresh(T0, {}, 1_000);
    addUnknown(
      {
        rec: { ...h, v: 9, state: "pending", approver: null, resolvedAt: null, resolveReason: null, consumedAt: null, result: null, notForwarded: null },
        expiryRecorded: false,
        recordFailures: 0,
        recordRetryAt: null,
      },
      9,
    );
    const late = T0 + HOLD_RETENTION_MS * 2;
    expect(await runAlarm(store, ledger.append, late)).toBe(late + HOLD_UNKNOWN_RECHECK_MS);
    expect(size()).toBe(1);
    expect(ledger.entries).toHaveLength(0);
  });
});
