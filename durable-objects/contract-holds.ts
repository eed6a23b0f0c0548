/**
 * The HoldsDO's storage contract (one object per team): what the governed path asks to hold, the
 * HoldRecord the object keeps (each with a version field), what a claim finds, how a resolution
 * goes, and the RPC surface. Owns only types and the record version. Must never: hold logic or
 * state; the transitions are durable-objects/holds-machine.ts's.
 */
import type { JsonObject, JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/** Version of the HoldRecord shape (the `v` column of HoldsDO's `holds` table). */
export const HOLD_RECORD_VERSION = 1;
export type HoldState = "pending" | "approved" | "rejected" | "expired" | "consumed";

/** What the governed path asks a HoldsDO to hold: one exact canonical action of one principal. */
export interface NewHold {
  /** `<team>~<24 hex>` (holdId() in object-names.ts): the team is part of the id, so an id names its object. */
  id: string;
  team: string;
  /** SHA-256 (hex) of `action`. */
  actionHash: string;
  /** The canonical action that is hashed: RFC 8785 JSON of {principal, upstream, tool, arguments}. */
  action: string;
  principal: string;
  /** The requesting grant's jti (null for the loopback actor). */
  jti: string | null;
  upstream: string;
  /** The upstream's own tool name (the one in `action`). */
  tool: string;
  /** The name the agent called (what the console shows first). */
  exposedName: string;
  /** The policy rule that asked for approval (null: the mapping's `approval`). */
  rule: string | null;
  reason: string;
  /** The call's classification as the ledger keeps it ({effect, blast_radius, source}). */
  classification: JsonObject;
  createdAt: number;
  expiresAt: number;
}

/** One hold as HoldsDO keeps it. */
export interface HoldRecord extends NewHold {
  /** Record shape version (HOLD_RECORD_VERSION). */
  v: number;
  state: HoldState;
  /** Who approved or rejected it (from the approver's own token), and why. */
  approver: string | null;
  resolvedAt: number | null;
  resolveReason: string | null;
  consumedAt: number | null;
  /** The answer the consumed call got, replayed to identical retries; null while it runs. */
  result: JsonRpcResponse | null;
  /** Set when a consumed call was never forwarded (its write-ahead failed): an approver may approve it again. */
  notForwarded: string | null;
}

/** What `HoldsApi.claim` found for an action. Only `consumed` lets the call run, and only one caller ever gets it per approval. */
export type HoldClaim =
  | { kind: "consumed"; hold: HoldRecord }
  | { kind: "created"; hold: HoldRecord }
  | { kind: "pending"; hold: HoldRecord }
  | { kind: "rejected"; hold: HoldRecord }
  | { kind: "in_flight"; hold: HoldRecord }
  | { kind: "replay"; hold: HoldRecord };

export type HoldResolution =
  | { ok: true; hold: HoldRecord }
  | {
      ok: false;
      /** not_found → 404, expired / not_pending / hash_mismatch → 409, self → 403, unrecorded → 503 (the ledger did not take the record; nothing changed). */
      code: "not_found" | "expired" | "not_pending" | "self" | "hash_mismatch" | "unrecorded";
      message: string;
      hold: HoldRecord | null;
    };

/**
 * The HoldsDO RPC surface: one object per team (`team:<team>` in the HOLDS namespace). Expiry is
 * checked inside every transition (`now` is the caller's clock, ms since epoch); an alarm marks
 * holds expired and records `hold.expired` on the team's chain.
 */
export interface HoldsApi {
  /**
   * For the governed path, atomically: the live hold of `hold.actionHash` for `hold.principal`
   * (any session or run of it) is consumed if approved, reported if pending / rejected / in
   * flight / answered; with none (or only expired ones) `hold` is stored as a new pending hold.
   */
  claim(hold: NewHold, signing: LedgerSigning, now: number): Promise<HoldClaim>;
  /** The consumed hold's answer (replayed from now on); false when `id` is not a consumed hold. */
  complete(id: string, result: JsonRpcResponse, now: number): Promise<boolean>;
  /** A consumed hold whose call was not forwarded: marked so, and pending again until it expires (an approver may approve it again). */
  release(id: string, reason: string, now: number): Promise<boolean>;
  get(id: string, now: number): Promise<HoldRecord | null>;
  /** Newest first; `state` null: every state. */
  list(state: HoldState | null, now: number, limit: number): Promise<HoldRecord[]>;
  /**
   * Approves or rejects a pending, unexpired hold. The `hold.approved` / `hold.rejected` record is
   * durable on the team's chain before this answers ok; a late approval is refused (and recorded
   * as ignored). `expectHash`, when given, must equal the hold's action hash (the page showed that
   * action). The requester can never resolve its own hold (`self`).
   */
  resolve(
    id: string,
    decision: "approve" | "reject",
    approver: string,
    reason: string,
    expectHash: string | null,
    signing: LedgerSigning,
    now: number,
  ): Promise<HoldResolution>;
  /** Resolves when the hold leaves `pending` (or after `timeoutMs`): the hold as it is then. */
  awaitChange(id: string, timeoutMs: number): Promise<HoldRecord | null>;
}
