/**
 * The holds' store contract and clock, beneath the transitions of ./holds-machine.ts: the storage interface a HoldsDO supplies (`HoldStore`, rows as
 * `StoredHold`), the limits, the argument checks every operation shares, the expiry rule (a
 * pending or approved hold whose `expiresAt` ≤ now is expired whatever its row says, and is marked
 * so whenever a function touches it), the reads (get / list, and a waiter's phase), the ledger
 * drafts of hold events, and the alarm's work (mark overdue holds expired, record each expiry
 * once, retry unrecorded ones with bounded backoff, delete rows 7 days past expiry) with the time
 * it must fire next. Every read-then-write runs inside one `store.atomically` block with no await
 * in it. No Durable Object or Cloudflare import. Must never: change a hold's state other than to
 * expired, delete a row whose expiry record is still owed, or touch a row of a record version this
 * code does not know (the store never hands one out).
 */
import { type EntryDraft, type EntryKind, holdBody } from "../src/ledger/records.ts";
import { sha256Hex } from "../src/wire/canonical.ts";
import type { MeteredDraft } from "../src/ledger/metrics.ts";
import { HOLD_ID } from "./object-names.ts";
import type { HoldRecord, HoldState, NewHold } from "./contract-holds.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/** A kept answer whose JSON is larger than this (bytes, UTF-8) is replaced by an isError answer saying so. */
export const HOLD_RESULT_MAX_BYTES = 512 * 1024;
/** Rows are deleted once their `expiresAt` is more than this far past (7 days). */
export const HOLD_RETENTION_MS = 7 * 86_400_000;
/** Longest `awaitChange` wait. */
export const HOLD_AWAIT_MAX_MS = 30_000;
/** Most holds one `list` answers. */
export const HOLD_LIST_MAX = 500;
/** Rows one alarm step marks expired, or records as expired, at a time. */
export const HOLD_ALARM_BATCH = 200;
/** An object that still holds rows of an unknown version looks at them again this often (it never touches them). */
export const HOLD_UNKNOWN_RECHECK_MS = 86_400_000;
/** Longest approver, reason or release note kept (longer reasons are refused; release notes are cut). */
export const HOLD_TEXT_MAX = 4096;
/** How long an alarm run holds the expiry records it is appending: another run (or a retry after a crash) takes them again only after this. */
export const HOLD_RECORD_LEASE_MS = 300_000;
/** The `hold.expired` reason the alarm records. */
export const EXPIRED_UNRESOLVED = "expired unresolved";
/** Retry delay of an expiry record the ledger did not take: 30 s, 1 min, 2 min … at most 1 h. */
export const recordBackoff = (failures: number): number => Math.min(30_000 * 2 ** Math.max(0, failures - 1), 3_600_000);

/** One row as the store keeps it: the record and the bookkeeping of its `hold.expired` record. */
export interface StoredHold {
  rec: HoldRecord;
  /** Whether the alarm's `hold.expired` record of this hold is on the chain (only an expired hold owes one). */
  expiryRecorded: boolean;
  /** Failed attempts to append that record, and when the next may run (null: at once). */
  recordFailures: number;
  recordRetryAt: number | null;
}

/** What the alarm must serve: earliest expiry of a live hold, earliest owed record, oldest deletable row, rows of unknown versions. */
export interface HoldSchedule {
  /** Earliest `expiresAt` of a pending or approved hold. */
  expiry: number | null;
  /** Earliest retry time of an owed expiry record (0: due now). */
  retry: number | null;
  /** Earliest `expiresAt` of a row that owes nothing (rejected, consumed, expired and recorded). */
  oldest: number | null;
  unknown: number;
}

/**
 * The storage a HoldsDO offers this module. Every method but `has` and `schedule().unknown`
 * sees only rows of HOLD_RECORD_VERSION: a row of another version is absent to the machine.
 */
export interface HoldStore {
  /** Runs `fn` as one atomic step (no await inside); what it returns. */
  atomically<T>(fn: () => T): T;
  /** Whether any row (any version) has this id. */
  has(id: string): boolean;
  get(id: string): StoredHold | null;
  /** Throws when the id exists. */
  insert(row: StoredHold): void;
  /** Replaces the row of `row.rec.id`. */
  update(row: StoredHold): void;
  /** Rows of one principal's action that are live (`expiresAt` > now) or overdue (pending / approved): newest first (createdAt, then insertion order). */
  ofAction(principal: string, actionHash: string, now: number): StoredHold[];
  /** Newest first (createdAt, then insertion order), in `state` (null: every state), at most `limit`. */
  list(state: HoldState | null, limit: number): StoredHold[];
  /** Pending or approved rows with `expiresAt` ≤ now, earliest expiry first, at most `limit`. */
  overdue(now: number, limit: number): StoredHold[];
  /** Expired rows whose expiry record is owed and due (`recordRetryAt` null or ≤ now), earliest expiry first, at most `limit`. */
  owed(now: number, limit: number): StoredHold[];
  /** Deletes rows that owe nothing (rejected, consumed, expired and recorded) whose `expiresAt` < `before`. */
  purge(before: number): void;
  schedule(): HoldSchedule;
  /** The ledger signing settings last handed to this object (meta), for the alarm's records. */
  signing(): LedgerSigning | null;
  setSigning(s: LedgerSigning): void;
}

/** Appends drafts to a team's chain (durable when it resolves); throws when the ledger did not take them. */
export type AppendDrafts = (team: string, drafts: EntryDraft[]) => Promise<void>;

export const fail = (why: string): never => {
  throw new Error(`holds: ${why}`);
};
export const isText = (v: unknown, max = 1024): v is string => typeof v === "string" && v.length > 0 && v.length <= max;
export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const STATES = new Set<HoldState>(["pending", "approved", "rejected", "expired", "consumed"]);
const HEX64 = /^[0-9a-f]{64}$/;

export function checkNow(now: unknown): asserts now is number {
  if (typeof now !== "number" || !Number.isFinite(now)) fail("now must be a time in ms");
}

export function checkSigning(s: unknown): asserts s is LedgerSigning {
  if (!isObject(s) || !isText(s.secret) || !isText(s.gateway, 2048)) fail("signing settings {secret, gateway} are required");
}

/** Throws unless `hold` is a well-formed new hold of `team` (the object's own) that lives after `now`, and `actionHash` is the SHA-256 of `action`. */
export function checkNewHold(hold: NewHold, team: string | undefined, now: number): void {
  if (!isObject(hold)) fail("a hold must be an object");
  if (team === undefined) fail("this object was not addressed by team name (team:<team>); nothing was stored");
  if (hold.team !== team) fail(`this object holds the holds of team ${JSON.stringify(team)}, not ${JSON.stringify(hold.team)}`);
  const m = typeof hold.id === "string" ? HOLD_ID.exec(hold.id) : null;
  if (!m || m[1] !== team) fail("a hold id must be <team>~<24 hex> of the hold's team");
  if (typeof hold.action !== "string" || typeof hold.actionHash !== "string" || !HEX64.test(hold.actionHash))
    fail("a hold needs its canonical action and its SHA-256 (64 lowercase hex)");
  if (sha256Hex(hold.action) !== hold.actionHash) fail("actionHash is not the SHA-256 of action");
  if (!isText(hold.principal) || !isText(hold.upstream) || !isText(hold.tool) || !isText(hold.exposedName))
    fail("a hold needs its principal, upstream, tool and exposed name");
  if (hold.jti !== null && hold.jti !== undefined && typeof hold.jti !== "string") fail("jti must be a string or null");
  if (hold.rule !== null && hold.rule !== undefined && typeof hold.rule !== "string") fail("rule must be a string or null");
  if (typeof hold.reason !== "string") fail("a hold needs its reason");
  if (!isObject(hold.classification)) fail("classification must be an object");
  if (!Number.isSafeInteger(hold.createdAt) || !Number.isSafeInteger(hold.expiresAt)) fail("createdAt and expiresAt must be integer times in ms");
  if (hold.expiresAt <= now) fail("a new hold must expire after now");
}

/** Whether the hold is expired by the clock although its row still says pending or approved. */
export function isOverdue(rec: HoldRecord, now: number): boolean {
  return (rec.state === "pending" || rec.state === "approved") && rec.expiresAt <= now;
}

/** The record as it is at `now` (expiry applied). */
export function viewOf(rec: HoldRecord, now: number): HoldRecord {
  return isOverdue(rec, now) ? { ...rec, state: "expired" } : rec;
}

/** Marks an overdue row expired (owing its expiry record); the row as it is now. */
export function markExpired(store: HoldStore, row: StoredHold, now: number): StoredHold {
  if (!isOverdue(row.rec, now)) return row;
  const next: StoredHold = { rec: { ...row.rec, state: "expired" }, expiryRecorded: false, recordFailures: 0, recordRetryAt: null };
  store.update(next);
  return next;
}

/** Marks overdue rows expired, `HOLD_ALARM_BATCH` at a time, at most `batches` batches (inside an atomic step). */
function expireOverdue(store: HoldStore, now: number, batches: number): void {
  for (let i = 0; i < batches; i++) {
    const due = store.overdue(now, HOLD_ALARM_BATCH);
    for (const row of due) markExpired(store, row, now);
    if (due.length < HOLD_ALARM_BATCH) return;
  }
}

/** HoldsApi.get: the hold (marked expired when it is overdue), or null (also for a row of an unknown version). */
export function getHold(store: HoldStore, id: string, now: number): HoldRecord | null {
  checkNow(now);
  if (typeof id !== "string") fail("a hold id must be a string");
  return store.atomically(() => {
    const row = store.get(id);
    return row ? markExpired(store, row, now).rec : null;
  });
}

/** HoldsApi.list: newest first, expiry applied (overdue holds are marked expired first), at most HOLD_LIST_MAX. */
export function listHolds(store: HoldStore, state: HoldState | null, now: number, limit: number): HoldRecord[] {
  checkNow(now);
  if (state !== null && !STATES.has(state)) fail(`unknown hold state ${JSON.stringify(state)}`);
  if (typeof limit !== "number" || !Number.isSafeInteger(limit) || limit < 1) fail("limit must be a positive integer");
  const n = Math.min(limit, HOLD_LIST_MAX);
  return store.atomically(() => {
    expireOverdue(store, now, 5);
    return store
      .list(state, n)
      .map((r) => viewOf(r.rec, now))
      .filter((r) => state === null || r.state === state);
  });
}

/** A hold event's draft for the team's chain. */
export function holdDraft(kind: EntryKind, rec: HoldRecord, approver: string | null, reason: string | null, id: string, now: number): MeteredDraft {
  const d: MeteredDraft = { kind, id, at: new Date(now).toISOString(), body: holdBody(rec, approver, reason) };
  // How long the hold waited for this answer: for the metric rollups only, never in the record.
  if (kind === "hold.approved" || kind === "hold.rejected" || kind === "hold.expired") d.metrics = { wait_ms: Math.max(0, now - rec.createdAt) };
  return d;
}

/** The alarm's `hold.expired` draft of one hold: its id names the hold, so it is the same draft however often it is tried. */
export function expiryDraft(rec: HoldRecord, now: number): EntryDraft {
  return holdDraft("hold.expired", rec, null, EXPIRED_UNRESOLVED, `hold.expired:${rec.id}`, now);
}

/** When the alarm must fire next: the earliest live expiry, owed record, or deletion; a daily recheck while unknown rows remain; null when nothing is left. */
export function nextAlarm(store: HoldStore, now: number): number | null {
  const s = store.schedule();
  const due: number[] = [];
  if (s.expiry !== null) due.push(s.expiry);
  if (s.retry !== null) due.push(Math.max(s.retry, now));
  if (s.oldest !== null) due.push(s.oldest + HOLD_RETENTION_MS + 1);
  if (s.unknown > 0) due.push(now + HOLD_UNKNOWN_RECHECK_MS);
  return due.length === 0 ? null : Math.min(...due);
}

/**
 * The alarm's work at `now`: marks overdue holds expired, deletes rows more than
 * HOLD_RETENTION_MS past their expiry (never one whose expiry record is still owed), then
 * appends one `hold.expired` record ("expired unresolved", id `hold.expired:<hold id>`) for each
 * expired hold that owes one, and sets its flag so a repeated alarm never appends it again (while
 * the append runs the rows are leased for HOLD_RECORD_LEASE_MS, so an overlapping run skips them). With
 * no `append` (no signing known) or a failed append the holds stay expired and the records are
 * retried after `recordBackoff`. Answers when the alarm must fire next.
 */
export async function runAlarm(store: HoldStore, append: AppendDrafts | null, now: number): Promise<number | null> {
  checkNow(now);
  const owed = store.atomically(() => {
    expireOverdue(store, now, 10);
    store.purge(now - HOLD_RETENTION_MS);
    // Taken for this run: an overlapping run does not append them too (the lease lapses if this run dies).
    const taken = store.owed(now, HOLD_ALARM_BATCH);
    for (const row of taken) store.update({ ...row, recordRetryAt: now + HOLD_RECORD_LEASE_MS });
    return taken;
  });
  const byTeam = new Map<string, StoredHold[]>();
  for (const row of owed) byTeam.set(row.rec.team, [...(byTeam.get(row.rec.team) ?? []), row]);
  for (const [team, rows] of byTeam) {
    let ok = false;
    if (append !== null) {
      try {
        await append(
          team,
          rows.map((row) => expiryDraft(row.rec, now)),
        );
        ok = true;
      } catch {
        ok = false;
      }
    }
    store.atomically(() => {
      for (const row of rows) {
        const cur = store.get(row.rec.id);
        if (!cur || cur.rec.state !== "expired" || cur.expiryRecorded) continue;
        if (ok) store.update({ ...cur, expiryRecorded: true, recordFailures: 0, recordRetryAt: null });
        else store.update({ ...cur, recordFailures: cur.recordFailures + 1, recordRetryAt: now + recordBackoff(cur.recordFailures + 1) });
      }
    });
  }
  return nextAlarm(store, now);
}

/** What an `awaitChange` waiter waits on: a pending hold leaving pending, an in-flight consumed hold getting its answer (or released); anything else is settled. */
export function phaseOf(rec: HoldRecord): "pending" | "in_flight" | "settled" {
  if (rec.state === "pending") return "pending";
  if (rec.state === "consumed" && rec.result === null) return "in_flight";
  return "settled";
}
