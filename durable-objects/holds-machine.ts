/**
 * The HoldsDO state machine as plain functions over a small storage interface (`HoldStore`):
 * claim (consume an approved hold once, report a pending / rejected / in-flight / answered one,
 * or store a new pending hold), complete, release, resolve (the `hold.approved` / `hold.rejected`
 * record is appended to the team's chain before the state changes), get / list, and the alarm's
 * work (mark overdue holds expired, record each expiry once, retry unrecorded ones with bounded
 * backoff, delete rows 7 days past expiry) with the time it must fire next. States: pending →
 * approved | rejected | expired → consumed (and consumed → pending again on release); a pending
 * or approved hold whose `expiresAt` ≤ now is expired whatever its row says, and is marked so
 * whenever a function touches it. Every read-then-write runs inside one `store.atomically` block
 * with no await in it. No Durable Object or Cloudflare import: the HoldsDO (./holds.ts) supplies a
 * SQLite store and the ledger append, and tests an in-memory fake. Must never: consume a hold at
 * or after its expiry, consume one approval twice, change a hold's state when its resolution
 * could not be recorded, let the requester resolve its own hold, or touch a row of a record
 * version this code does not know (the store never hands one out).
 */
import type { EntryDraft, EntryKind, HoldBody } from "../src/ledger/records.ts";
import { sha256Hex } from "../src/wire/canonical.ts";
import type { JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import { HOLD_ID, newHoldId } from "./names.ts";
import { HOLD_RECORD_VERSION, type HoldClaim, type HoldRecord, type HoldResolution, type HoldState, type LedgerSigning, type NewHold } from "./records.ts";

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

const fail = (why: string): never => {
  throw new Error(`holds: ${why}`);
};
const isText = (v: unknown, max = 1024): v is string => typeof v === "string" && v.length > 0 && v.length <= max;
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const STATES = new Set<HoldState>(["pending", "approved", "rejected", "expired", "consumed"]);
const HEX64 = /^[0-9a-f]{64}$/;

function checkNow(now: unknown): asserts now is number {
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
function markExpired(store: HoldStore, row: StoredHold, now: number): StoredHold {
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

function recordOf(hold: NewHold, id: string): HoldRecord {
  return {
    v: HOLD_RECORD_VERSION,
    id,
    team: hold.team,
    actionHash: hold.actionHash,
    action: hold.action,
    principal: hold.principal,
    jti: hold.jti ?? null,
    upstream: hold.upstream,
    tool: hold.tool,
    exposedName: hold.exposedName,
    rule: hold.rule ?? null,
    reason: hold.reason,
    classification: hold.classification,
    createdAt: hold.createdAt,
    expiresAt: hold.expiresAt,
    state: "pending",
    approver: null,
    resolvedAt: null,
    resolveReason: null,
    consumedAt: null,
    result: null,
    notForwarded: null,
  };
}

/**
 * HoldsApi.claim, in one atomic step: marks the action's overdue holds expired, then takes the
 * newest live one (`expiresAt` > now, not expired) — approved → consumed (the one caller that may
 * run the call), pending / rejected reported, consumed → in flight (no result yet) or replay —
 * and with none stores `hold` as a new pending hold (under a fresh id when its id is taken).
 * Remembers `signing` for the alarm's records.
 */
export function claimHold(store: HoldStore, hold: NewHold, signing: LedgerSigning, team: string | undefined, now: number): HoldClaim {
  checkNow(now);
  checkSigning(signing);
  checkNewHold(hold, team, now);
  return store.atomically((): HoldClaim => {
    store.setSigning({ secret: signing.secret, gateway: signing.gateway });
    let live: StoredHold | null = null;
    for (const row of store.ofAction(hold.principal, hold.actionHash, now)) {
      const r = markExpired(store, row, now);
      if (live === null && r.rec.state !== "expired" && r.rec.expiresAt > now) live = r;
    }
    if (live !== null) {
      const rec = live.rec;
      if (rec.state === "approved") {
        const consumed: HoldRecord = { ...rec, state: "consumed", consumedAt: now, notForwarded: null };
        store.update({ ...live, rec: consumed });
        return { kind: "consumed", hold: consumed };
      }
      if (rec.state === "pending") return { kind: "pending", hold: rec };
      if (rec.state === "rejected") return { kind: "rejected", hold: rec };
      return rec.result === null ? { kind: "in_flight", hold: rec } : { kind: "replay", hold: rec };
    }
    const rec = recordOf(hold, store.has(hold.id) ? newHoldId(hold.team) : hold.id);
    store.insert({ rec, expiryRecorded: false, recordFailures: 0, recordRetryAt: null });
    return { kind: "created", hold: rec };
  });
}

/** The answer as kept: `result`, or, when its JSON is over HOLD_RESULT_MAX_BYTES, an isError answer saying it was too large to keep. */
export function keptResult(result: JsonRpcResponse): JsonRpcResponse {
  const bytes = new TextEncoder().encode(JSON.stringify(result)).length;
  if (bytes <= HOLD_RESULT_MAX_BYTES) return result;
  const text = `The approved call ran once, but its answer (${bytes} bytes) was too large to keep (at most ${HOLD_RESULT_MAX_BYTES}), so it cannot be replayed; the call will not run again for this approval.`;
  return { jsonrpc: "2.0", id: result.id ?? null, result: { content: [{ type: "text", text }], isError: true } };
}

/** HoldsApi.complete: only a consumed hold without a result takes one (once). */
export function completeHold(store: HoldStore, id: string, result: JsonRpcResponse, now: number): boolean {
  checkNow(now);
  if (typeof id !== "string") fail("a hold id must be a string");
  if (!isObject(result)) fail("a result must be a JSON-RPC response object");
  const kept = keptResult(result);
  return store.atomically(() => {
    const row = store.get(id);
    if (!row || row.rec.state !== "consumed" || row.rec.result !== null) return false;
    store.update({ ...row, rec: { ...row.rec, result: kept } });
    return true;
  });
}

/** HoldsApi.release: a consumed hold without a result (its call never went upstream) is pending again, marked not forwarded (and expired if it is past its expiry). */
export function releaseHold(store: HoldStore, id: string, reason: string, now: number): boolean {
  checkNow(now);
  if (typeof id !== "string") fail("a hold id must be a string");
  const note = typeof reason === "string" && reason !== "" ? reason.slice(0, HOLD_TEXT_MAX) : "not forwarded";
  return store.atomically(() => {
    const row = store.get(id);
    if (!row || row.rec.state !== "consumed" || row.rec.result !== null) return false;
    const pending: StoredHold = { ...row, rec: { ...row.rec, state: "pending", consumedAt: null, notForwarded: note } };
    store.update(pending);
    markExpired(store, pending, now);
    return true;
  });
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
export function holdDraft(kind: EntryKind, rec: HoldRecord, approver: string | null, reason: string | null, id: string, now: number): EntryDraft {
  const body: HoldBody = {
    hold_id: rec.id,
    decision_id: null,
    principal: rec.principal,
    team: rec.team,
    tool: rec.exposedName,
    action_hash: rec.actionHash,
    approver,
    reason,
  };
  return { kind, id, at: new Date(now).toISOString(), body };
}

/** The alarm's `hold.expired` draft of one hold: its id names the hold, so it is the same draft however often it is tried. */
export function expiryDraft(rec: HoldRecord, now: number): EntryDraft {
  return holdDraft("hold.expired", rec, null, EXPIRED_UNRESOLVED, `hold.expired:${rec.id}`, now);
}

export interface ResolveRequest {
  id: string;
  decision: "approve" | "reject";
  approver: string;
  reason: string;
  expectHash: string | null;
  signing: LedgerSigning;
  now: number;
}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));
const iso = (ms: number): string => new Date(ms).toISOString();

/** Throws unless the request is well-formed (what the caller must check before anything runs). */
export function checkResolve(r: ResolveRequest): void {
  checkNow(r.now);
  checkSigning(r.signing);
  if (typeof r.id !== "string") fail("a hold id must be a string");
  if (r.decision !== "approve" && r.decision !== "reject") fail('decision must be "approve" or "reject"');
  if (!isText(r.approver, HOLD_TEXT_MAX)) fail("an approver (from the approver's own token) is required");
  if (typeof r.reason !== "string" || r.reason.length > HOLD_TEXT_MAX) fail(`a reason must be a string of at most ${HOLD_TEXT_MAX} characters`);
  if (r.expectHash !== null && typeof r.expectHash !== "string") fail("expectHash must be a string or null");
}

/**
 * HoldsApi.resolve. The caller runs it with nothing else touching the object meanwhile
 * (blockConcurrencyWhile). Not found → not_found; expired (by the clock or the row) → marked
 * expired, a `hold.expired` record "late <decision> by <approver> ignored" appended (best
 * effort), code expired; not pending → not_pending; approver = requester → self; `expectHash`
 * given and different → hash_mismatch. Otherwise the `hold.approved` / `hold.rejected` record is
 * appended first — if the ledger does not take it, code unrecorded and nothing changes — and only
 * then is the state committed.
 */
export async function resolveHold(store: HoldStore, r: ResolveRequest, append: AppendDrafts, newEntryId: () => string): Promise<HoldResolution> {
  checkResolve(r);
  const { id, decision, approver, reason, expectHash, now } = r;
  const row = store.atomically(() => {
    store.setSigning({ secret: r.signing.secret, gateway: r.signing.gateway });
    return store.get(id);
  });
  if (!row) return { ok: false, code: "not_found", message: `no hold ${id}`, hold: null };
  if (row.rec.state === "expired" || isOverdue(row.rec, now)) {
    const expired = store.atomically(() => {
      const cur = store.get(id);
      return cur ? markExpired(store, cur, now).rec : row.rec;
    });
    const late = holdDraft("hold.expired", expired, null, `late ${decision} by ${approver} ignored`, newEntryId(), now);
    let noted = "recorded as ignored";
    try {
      await append(expired.team, [late]);
    } catch (e) {
      noted = `not recorded: ${message(e)}`;
    }
    return {
      ok: false,
      code: "expired",
      message: `hold ${id} expired at ${iso(expired.expiresAt)}; the late ${decision} was refused (${noted})`,
      hold: expired,
    };
  }
  const rec = row.rec;
  if (rec.state !== "pending") return { ok: false, code: "not_pending", message: `hold ${id} is ${rec.state}, not pending`, hold: rec };
  if (approver === rec.principal) return { ok: false, code: "self", message: "the principal that raised a hold can never resolve it", hold: rec };
  if (expectHash !== null && expectHash !== rec.actionHash)
    return { ok: false, code: "hash_mismatch", message: `hold ${id} binds action ${rec.actionHash}, not ${expectHash}`, hold: rec };
  const kind: EntryKind = decision === "approve" ? "hold.approved" : "hold.rejected";
  try {
    await append(rec.team, [holdDraft(kind, rec, approver, reason, newEntryId(), now)]);
  } catch (e) {
    return { ok: false, code: "unrecorded", message: `the ledger did not take the ${kind} record (${message(e)}); nothing changed`, hold: rec };
  }
  return store.atomically((): HoldResolution => {
    // Nothing runs between the check and here (blockConcurrencyWhile); this only guards a caller that broke that rule.
    const cur = store.get(id);
    if (!cur || cur.rec.state !== "pending" || isOverdue(cur.rec, now))
      return { ok: false, code: "not_pending", message: `hold ${id} changed while its ${kind} record was written`, hold: cur?.rec ?? null };
    const next: HoldRecord = { ...cur.rec, state: decision === "approve" ? "approved" : "rejected", approver, resolvedAt: now, resolveReason: reason };
    store.update({ ...cur, rec: next });
    return { ok: true, hold: next };
  });
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
