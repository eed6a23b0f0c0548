/**
 * The HoldsDO state machine's transitions as plain functions over a small storage interface
 * (`HoldStore`): claim (consume an approved hold once, report a pending / rejected / in-flight /
 * answered one, or store a new pending hold), complete, release, and resolve (the `hold.approved`
 * / `hold.rejected` record is appended to the team's chain before the state changes). States:
 * pending → approved | rejected | expired → consumed (and consumed → pending again on release).
 * The store contract, limits, checks, expiry, reads (get / list) and the alarm's work live in
 * ./holds-expiry.ts, which the HoldsDO (./holds.ts) and tests import directly. Every read-then-write runs inside one `store.atomically` block with no
 * await in it. No Durable Object or Cloudflare import: the HoldsDO supplies a SQLite store and the
 * ledger append, and tests an in-memory fake. Must never: consume a hold at or after its expiry,
 * consume one approval twice, change a hold's state when its resolution could not be recorded, or
 * let the requester resolve its own hold.
 */
import type { EntryKind } from "../src/ledger/records.ts";
import type { JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import {
  type AppendDrafts,
  checkNewHold,
  checkNow,
  checkSigning,
  fail,
  HOLD_RESULT_MAX_BYTES,
  HOLD_TEXT_MAX,
  holdDraft,
  type HoldStore,
  isObject,
  isOverdue,
  isText,
  markExpired,
  type StoredHold,
} from "./holds-expiry.ts";
import { newHoldId } from "./object-names.ts";
import { HOLD_RECORD_VERSION, type HoldClaim, type HoldRecord, type HoldResolution, type NewHold } from "./contract-holds.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

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
