/**
 * Runs and rollback ([R]), the pure part: rebuilding a run's steps from its ledger records alone
 * (decisions, outcomes with the compensation each keeps — compensation.ts resolves them — and
 * `rollback.step` records); the rollback plan (newest first, which compensations need approval,
 * which steps cannot be undone and why, which are already undone); and the body of a
 * `rollback.step` record (the step's idempotency key, idempotency.ts's, only by its hash).
 * Must never: do I/O, read a clock it is not handed, or put an idempotency key (or its secret) in
 * a plan or a record — records keep only the key's SHA-256 and the id of the signing key it came from.
 */
import { COMPENSATION_VERSION, type CompensationRecord, type ResolvedCompensation } from "./compensation.ts";
import { idempotencyKeyHash } from "./idempotency.ts";
import { isObject, type Json, type JsonObject } from "../wire/jsonrpc.ts";

/** The ledger kind of one rollback step's record (written before and after its compensation runs). */
export const ROLLBACK_STEP_KIND = "rollback.step";
/** Attempts of one compensation before it is recorded failed. */
export const COMPENSATION_ATTEMPTS = 3;
/** A decision older than this without an outcome counts as uncertain (as GET /v1/ledger/:id/trace says). */
const OUTCOME_GRACE_MS = 15 * 60_000;

// ---- runs from the ledger ----------------------------------------------------------------

/** An entry as the run view reads it (LedgerEntry, without needing the chain fields). */
export interface RunEntry {
  kind: string;
  id: string;
  seq: number;
  at: string;
  body: JsonObject;
}

export type VerificationStatus = "verified" | "verification_failed" | "unverified";

/** What the ledger says about one step's compensation. */
export interface StepRollback {
  state: "started" | "compensated" | "failed" | "skipped";
  attempts: number;
  verification: VerificationStatus | null;
  reason: string | null;
  at: string;
  by: string | null;
  /** The signing key a previous execution derived this step's idempotency key from (its first record naming one); null if none did. */
  key_id: string | null;
}

export interface RunStep {
  decision_id: string;
  seq: number;
  at: string;
  upstream: string;
  tool: string;
  effect: string | null;
  status: "succeeded" | "failed" | "uncertain" | "pending";
  compensation: CompensationRecord | null;
  rollback: StepRollback | null;
}

export interface RunView {
  run: string;
  team: string;
  principal: string;
  started_at: string;
  last_at: string;
  /** Oldest first. */
  steps: RunStep[];
}

const str = (v: Json | undefined): string | null => (typeof v === "string" ? v : null);

/** Rebuilds run `run` of `principal` from its records (any order, duplicates allowed); null when it has no step. */
export function runView(run: string, principal: string, entries: readonly RunEntry[], now: number): RunView | null {
  const bySeq = new Map<number, RunEntry>();
  for (const e of entries) bySeq.set(e.seq, e);
  const sorted = [...bySeq.values()].sort((a, b) => a.seq - b.seq);
  const steps = new Map<string, RunStep>();
  let team = "";
  for (const e of sorted) {
    if (e.kind !== "decision" || e.body.run !== run || e.body.principal !== principal) continue;
    team = str(e.body.team) ?? team;
    const classification = isObject(e.body.classification) ? e.body.classification : {};
    steps.set(e.id, {
      decision_id: e.id,
      seq: e.seq,
      at: e.at,
      upstream: str(e.body.upstream) ?? "",
      tool: str(e.body.tool) ?? "",
      effect: str(classification.effect),
      status: now - Date.parse(e.at) > OUTCOME_GRACE_MS ? "uncertain" : "pending",
      compensation: null,
      rollback: null,
    });
  }
  if (steps.size === 0) return null;
  for (const e of sorted) {
    const step = steps.get(str(e.body.decision_id) ?? "");
    if (!step) continue;
    if (e.kind === "outcome") {
      const s = e.body.status;
      if (s === "succeeded" || s === "failed" || s === "uncertain") step.status = s;
      if (isObject(e.body.compensation)) step.compensation = e.body.compensation as unknown as CompensationRecord;
    } else if (e.kind === ROLLBACK_STEP_KIND) {
      const state = e.body.state;
      if (state !== "started" && state !== "compensated" && state !== "failed" && state !== "skipped") continue;
      // Once compensated, a step stays compensated (a later record of it cannot make it undone again).
      if (step.rollback?.state === "compensated") continue;
      const verification = e.body.verification;
      // Every retry keeps the signing key the first execution derived its idempotency key from.
      const keyId = step.rollback?.key_id ?? str(e.body.idempotency_key_id);
      step.rollback = {
        state,
        attempts: typeof e.body.attempts === "number" ? e.body.attempts : 0,
        verification: verification === "verified" || verification === "verification_failed" || verification === "unverified" ? verification : null,
        reason: str(e.body.reason),
        at: e.at,
        by: str(e.body.by),
        key_id: keyId,
      };
    }
  }
  const list = [...steps.values()];
  return { run, team, principal, started_at: list[0]!.at, last_at: sorted.at(-1)!.at, steps: list };
}

/** One compensation the rollback would call. */
export interface PlannedCompensation {
  decision_id: string;
  seq: number;
  upstream: string;
  /** The step's own tool (at the upstream). */
  step_tool: string;
  tool: string;
  arguments: JsonObject;
  verification: ResolvedCompensation["verification"];
  needs_approval: boolean;
  /**
   * The signing key this step's idempotency key is derived from when a previous execution already
   * derived one (a retry keeps it); null: the active key. The key itself is not in the plan (an
   * agent reads its own plans): it is derived only when the compensation runs.
   */
  key_id: string | null;
  /** A previous execution started it without recording how it ended (the key keeps a repeat from applying twice). */
  retried: boolean;
}

export interface RollbackPlan {
  run: string;
  principal: string;
  team: string;
  /** Newest first: the order execution calls them in. */
  compensations: PlannedCompensation[];
  /** Steps that changed something and cannot be undone automatically, newest first, with why. */
  not_reversible: { decision_id: string; upstream: string; tool: string; reason: string }[];
  /** Steps a previous rollback already undid. */
  already_compensated: string[];
  /** Steps with nothing to undo (read-only, failed). */
  nothing_to_undo: string[];
}

/**
 * What rolling run `view` back would do. `toolsOf(upstream)`, when given, names the tools the
 * upstream offers now: a compensation (or read-back) naming another tool cannot run.
 */
export function planRollback(view: RunView, toolsOf?: (upstream: string) => ReadonlySet<string> | null): RollbackPlan {
  const plan: RollbackPlan = {
    run: view.run,
    principal: view.principal,
    team: view.team,
    compensations: [],
    not_reversible: [],
    already_compensated: [],
    nothing_to_undo: [],
  };
  for (const s of [...view.steps].sort((a, b) => b.seq - a.seq)) {
    const c = s.compensation;
    const refuse = (reason: string) => plan.not_reversible.push({ decision_id: s.decision_id, upstream: s.upstream, tool: s.tool, reason });
    if (s.rollback?.state === "compensated") {
      plan.already_compensated.push(s.decision_id);
      continue;
    }
    if (s.status === "failed" || c?.status === "not_needed") {
      plan.nothing_to_undo.push(s.decision_id);
      continue;
    }
    if (!c) {
      if (s.effect === "read_only" && s.status === "succeeded") plan.nothing_to_undo.push(s.decision_id);
      else if (s.status !== "succeeded") refuse(`the call's outcome is ${s.status}: it may or may not have run, and no compensation was recorded`);
      else refuse("its mapping declares no compensation: it cannot be rolled back automatically");
      continue;
    }
    if (c.status === "unavailable") {
      refuse(c.reason);
      continue;
    }
    const offered = toolsOf?.(s.upstream) ?? null;
    if (offered && !offered.has(c.tool)) {
      refuse(`upstream ${s.upstream} offers no tool ${c.tool} (the compensation's tool)`);
      continue;
    }
    if (offered && c.verification && !offered.has(c.verification.tool)) {
      refuse(`upstream ${s.upstream} offers no tool ${c.verification.tool} (the compensation's read-back)`);
      continue;
    }
    plan.compensations.push({
      decision_id: s.decision_id,
      seq: s.seq,
      upstream: s.upstream,
      step_tool: s.tool,
      tool: c.tool,
      arguments: c.arguments,
      verification: c.verification,
      needs_approval: c.approval === "required",
      key_id: s.rollback?.key_id ?? null,
      retried: s.rollback !== null,
    });
  }
  return plan;
}

/**
 * The body of a `rollback.step` record. `detail.key`: the step's idempotency key when one was
 * derived — only its SHA-256 and its signing key's id are recorded (null without one).
 */
export function rollbackStepBody(
  view: RunView,
  step: PlannedCompensation,
  state: StepRollback["state"],
  by: string,
  rollbackId: string,
  detail: {
    attempts?: number;
    verification?: VerificationStatus | null;
    reason?: string | null;
    errors?: string[];
    key?: { value: string; kid: string } | null;
  } = {},
): JsonObject {
  return {
    v: COMPENSATION_VERSION,
    rollback_id: rollbackId,
    run: view.run,
    principal: view.principal,
    team: view.team,
    decision_id: step.decision_id,
    upstream: step.upstream,
    tool: step.tool,
    idempotency_key_sha256: detail.key ? idempotencyKeyHash(detail.key.value) : null,
    idempotency_key_id: detail.key?.kid ?? null,
    state,
    attempts: detail.attempts ?? 0,
    verification: detail.verification ?? null,
    reason: detail.reason ?? null,
    errors: detail.errors ?? [],
    by,
  };
}
