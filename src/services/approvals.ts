/**
 * The hold operations approvers use — from the JSON API (/v1/holds), the operator tools, the
 * console and the CLI — over the team HoldsDOs: listing and reading the holds a principal may
 * see, and resolving one with separation of duties (src/governance/approvers.ts decides; the
 * approver's identity comes only from its own verified principal, never a request body; the
 * requester never resolves its own hold; `holds.resolvers` / `holds.unresolvable` say who may
 * resolve which rule), then the `resolved` webhooks. A hold of a team the viewer may not see is
 * answered exactly like a hold that does not exist (404), so ids reveal nothing across teams.
 * Views carry the hold record without its stored result (the upstream's answer to the agent is
 * replayed to that agent only, never shown to approvers): only how it ended (`answered`). Must never: resolve for a principal the
 * config does not allow, take the approver's identity from a request body, or say "approved"
 * before the `hold.approved` record is durable (HoldsApi.resolve answers ok only after it is).
 */
import { ledgerSigning } from "../ports/ledger-writer.ts";
import type { HoldRecord, HoldsApi, HoldState } from "../../durable-objects/contract-holds.ts";
import type { LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import { holdsObject, holdTeam } from "../../durable-objects/object-names.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { mayResolve, maySeeTeam } from "../governance/approvers.ts";
import { holdPageUrl, notifyHold } from "../ports/hold-webhooks.ts";

/** A hold as approvers see it (the record, plus what the viewer may do with it). */
export interface HoldView {
  hold: HoldRecord;
  /** Whether this viewer may approve or reject it now (pending, unexpired, allowed, not its own). */
  resolvable: boolean;
  /** Why not, when not resolvable. */
  why?: string;
  /** The console page of the hold. */
  url: string;
  /**
   * How a consumed hold's call ended, as a status only (the answer itself stays with the agent):
   * `succeeded`, `tool_error` (an isError result), `error` (a JSON-RPC error); absent while it runs
   * or when the hold was not consumed.
   */
  answered?: "succeeded" | "tool_error" | "error";
}

export type HoldsResult<T> = { ok: true; value: T } | { ok: false; status: 400 | 403 | 404 | 409 | 503; message: string };

export const HOLD_STATES: readonly HoldState[] = ["pending", "approved", "rejected", "expired", "consumed"];
/** Longest approver reason. */
export const MAX_RESOLVE_REASON = 500;
const DEFAULT_LIST_LIMIT = 100;
const MAX_LIST_LIMIT = 500;

/** A `status` / `state` filter as given (absent or `all`: every state); the readable refusal for anything else. */
export function holdStateFilter(v: string | null | undefined): { ok: true; state: HoldState | null } | { ok: false; message: string } {
  if (v === undefined || v === null || v === "" || v === "all") return { ok: true, state: null };
  if ((HOLD_STATES as readonly string[]).includes(v)) return { ok: true, state: v as HoldState };
  return { ok: false, message: `status must be one of ${HOLD_STATES.join(", ")} or all, not ${JSON.stringify(v.slice(0, 40))}` };
}

/** Where the holds live and what time it is; tests hand in a fake store. */
export interface HoldsDeps {
  holdsOf(team: string): HoldsApi | null;
  now(): number;
}

const live = (env: Env): HoldsDeps => ({ holdsOf: (team) => holdsObject(env, team), now: () => Date.now() });

type Failure<S extends 400 | 403 | 404 | 409 | 503> = { ok: false; status: S; message: string };
const fail = <S extends 400 | 403 | 404 | 409 | 503>(status: S, message: string): Failure<S> => ({ ok: false, status, message });
const noSuchHold = (id: string) => fail(404, `no hold ${JSON.stringify(id.slice(0, 160))}`);
const unavailable = (e: unknown) => fail(503, `the hold store did not answer (${String((e as Error)?.message ?? e).slice(0, 200)}); try again`);

/** The viewer's view of one hold: the record without its stored answer, whether it may resolve it now, and its console page. */
function viewOf(cfg: GatewayConfig, viewer: Principal, hold: HoldRecord, now: number): HoldView {
  let why: string | undefined;
  if (hold.state !== "pending") why = `the hold is ${hold.state}, not pending`;
  else if (now >= hold.expiresAt) why = `the hold expired at ${new Date(hold.expiresAt).toISOString()}`;
  else {
    const may = mayResolve(cfg.holds, viewer, hold);
    if (!may.ok) why = may.why;
    else if (!viewer.authenticated) why = "only a principal signed in with its own grant may resolve holds";
  }
  const r = hold.result;
  const answered = r ? (r.error ? "error" : (r.result as { isError?: unknown } | undefined)?.isError === true ? "tool_error" : "succeeded") : undefined;
  return {
    hold: { ...hold, result: null },
    resolvable: why === undefined,
    ...(why !== undefined ? { why } : {}),
    url: holdPageUrl(cfg, hold.id),
    ...(answered ? { answered } : {}),
  };
}

/** Internal (tests): listHolds over `deps`. */
export async function listHoldsVia(
  deps: HoldsDeps,
  cfg: GatewayConfig,
  viewer: Principal,
  opts: { state: HoldState | null; team?: string; limit?: number },
): Promise<HoldsResult<HoldView[]>> {
  const team = opts.team ?? viewer.team;
  if (!maySeeTeam(cfg.holds, viewer, team)) {
    return fail(
      403,
      team === viewer.team
        ? `${viewer.sub} holds no role that reads holds (approver, auditor, operator, admin)`
        : `${viewer.sub} (team ${viewer.team}) may not see team ${team}'s holds`,
    );
  }
  const api = deps.holdsOf(team);
  if (!api) return fail(400, `not a team name: ${JSON.stringify(team.slice(0, 130))}`);
  const asked = Number.isFinite(opts.limit) ? Math.trunc(opts.limit as number) : DEFAULT_LIST_LIMIT;
  const limit = Math.min(Math.max(asked, 1), MAX_LIST_LIMIT);
  const now = deps.now();
  try {
    const holds = await api.list(opts.state, now, limit);
    return { ok: true, value: holds.map((h) => viewOf(cfg, viewer, h, now)) };
  } catch (e) {
    return unavailable(e);
  }
}

/** The hold `id` if it exists and `viewer` may see it; 404 otherwise (the same answer either way). */
async function visibleHold(
  deps: HoldsDeps,
  cfg: GatewayConfig,
  viewer: Principal,
  id: string,
): Promise<{ ok: true; api: HoldsApi; hold: HoldRecord } | Failure<404 | 503>> {
  const team = holdTeam(id);
  if (team === null || !maySeeTeam(cfg.holds, viewer, team)) return noSuchHold(id);
  const api = deps.holdsOf(team);
  if (!api) return noSuchHold(id);
  let hold: HoldRecord | null;
  try {
    hold = await api.get(id, deps.now());
  } catch (e) {
    return unavailable(e);
  }
  if (!hold || hold.team !== team) return noSuchHold(id);
  return { ok: true, api, hold };
}

/** Internal (tests): getHold over `deps`. */
export async function getHoldVia(deps: HoldsDeps, cfg: GatewayConfig, viewer: Principal, id: string): Promise<HoldsResult<HoldView>> {
  const found = await visibleHold(deps, cfg, viewer, id);
  if (!found.ok) return found;
  return { ok: true, value: viewOf(cfg, viewer, found.hold, deps.now()) };
}

/** Internal (tests): resolveHold over `deps`. */
export async function resolveHoldVia(
  deps: HoldsDeps,
  env: Env,
  cfg: GatewayConfig,
  approver: Principal,
  id: string,
  decision: "approve" | "reject",
  reason: string,
  expectHash: string | null,
  waitUntil: (p: Promise<unknown>) => void,
): Promise<HoldsResult<HoldView>> {
  if (decision !== "approve" && decision !== "reject")
    return fail(400, `decision must be "approve" or "reject", not ${JSON.stringify(String(decision).slice(0, 40))}`);
  if (typeof reason !== "string") return fail(400, "reason must be a string");
  const why = reason.trim();
  if (decision === "reject" && why === "") return fail(400, "a rejection needs a reason (the agent is told it)");
  if (why.length > MAX_RESOLVE_REASON) return fail(400, `reason is ${why.length} characters; at most ${MAX_RESOLVE_REASON}`);
  if (expectHash !== null && !/^[0-9a-f]{64}$/.test(expectHash)) return fail(400, "action_hash must be the 64 lowercase hex digits of the hold's action hash");
  if (!approver.authenticated) return fail(403, "only a principal signed in with its own grant may resolve holds");
  const found = await visibleHold(deps, cfg, approver, id);
  if (!found.ok) return found;
  const may = mayResolve(cfg.holds, approver, found.hold);
  if (!may.ok) return fail(403, may.why);
  const signing: LedgerSigning = ledgerSigning(cfg);
  let res: Awaited<ReturnType<HoldsApi["resolve"]>>;
  try {
    res = await found.api.resolve(id, decision, approver.sub, why, expectHash, signing, deps.now());
  } catch (e) {
    return unavailable(e);
  }
  if (!res.ok) {
    switch (res.code) {
      case "not_found":
        return noSuchHold(id);
      case "self":
        return fail(403, res.message);
      case "expired":
      case "not_pending":
      case "hash_mismatch":
        return fail(409, res.message);
      case "unrecorded":
        return fail(503, res.message);
    }
    return fail(503, String((res as { message?: unknown }).message ?? "the hold was not resolved"));
  }
  notifyHold(env, cfg, "resolved", res.hold, waitUntil);
  return { ok: true, value: viewOf(cfg, approver, res.hold, deps.now()) };
}

/** The parameters of a `…Via` function after its HoldsDeps: those of the public operation over the live HoldsDOs. */
type AfterDeps<F> = F extends (deps: HoldsDeps, ...rest: infer R) => unknown ? R : never;

/** Holds the viewer may see: its own team's (approver, auditor, operator, admin), or `team` for an admin or a resolver of that team; newest first. */
export async function listHolds(env: Env, ...args: AfterDeps<typeof listHoldsVia>): Promise<HoldsResult<HoldView[]>> {
  return listHoldsVia(live(env), ...args);
}

/** One hold by id (`<team>~<hex>`), if the viewer may see it. */
export async function getHold(env: Env, ...args: AfterDeps<typeof getHoldVia>): Promise<HoldsResult<HoldView>> {
  return getHoldVia(live(env), ...args);
}

/**
 * Approves or rejects a hold as `approver` (from its verified token). `expectHash`: the action hash
 * the approver was shown (the console sends it; mismatch → 409). 403 for self-approval or a
 * principal the config does not allow; 409 when not pending or expired; 503 when the ledger did not take the record.
 */
export async function resolveHold(...args: AfterDeps<typeof resolveHoldVia>): Promise<HoldsResult<HoldView>> {
  const [env] = args;
  return resolveHoldVia(live(env), ...args);
}
