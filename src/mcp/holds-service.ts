/**
 * CONTRACT STUB (being implemented): the hold operations approvers use — from the JSON API
 * (/v1/holds), the operator tools, the console and the CLI — over the team HoldsDOs: listing and
 * reading holds a principal may see, and resolving one with separation of duties (the approver's
 * identity only from its own token; never the requester; `holds.resolvers` / `holds.unresolvable`
 * say who may resolve which rule) and the hold's webhooks. Must never: resolve for a principal the
 * config does not allow, take the approver's identity from a request body, or say "approved"
 * before the `hold.approved` record is durable.
 */
import type { HoldRecord, HoldState } from "../../durable-objects/records.ts";
import type { GatewayConfig } from "../config/load.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";

/** A hold as approvers see it (the record, plus what the viewer may do with it). */
export interface HoldView {
  hold: HoldRecord;
  /** Whether this viewer may approve or reject it now (pending, unexpired, allowed, not its own). */
  resolvable: boolean;
  /** Why not, when not resolvable. */
  why?: string;
  /** The console page of the hold. */
  url: string;
}

export type HoldsResult<T> = { ok: true; value: T } | { ok: false; status: 400 | 403 | 404 | 409 | 503; message: string };

/** Holds the viewer may see: its own team's (approver, auditor, admin: `team` names another for admin or a resolver of that team), newest first. */
export async function listHolds(_env: Env, _cfg: GatewayConfig, _viewer: Principal, _opts: { state: HoldState | null; team?: string; limit?: number }): Promise<HoldsResult<HoldView[]>> {
  throw new Error("listHolds: not implemented yet");
}

/** One hold by id (`<team>~<hex>`), if the viewer may see it. */
export async function getHold(_env: Env, _cfg: GatewayConfig, _viewer: Principal, _id: string): Promise<HoldsResult<HoldView>> {
  throw new Error("getHold: not implemented yet");
}

/**
 * Approves or rejects a hold as `approver` (from its verified token). `expectHash`: the action hash
 * the approver was shown (the console sends it; mismatch → 409). 403 for self-approval or a
 * principal the config does not allow; 409 when not pending or expired; 503 when the ledger did not take the record.
 */
export async function resolveHold(
  _env: Env,
  _cfg: GatewayConfig,
  _approver: Principal,
  _id: string,
  _decision: "approve" | "reject",
  _reason: string,
  _expectHash: string | null,
  _waitUntil: (p: Promise<unknown>) => void,
): Promise<HoldsResult<HoldView>> {
  throw new Error("resolveHold: not implemented yet");
}
