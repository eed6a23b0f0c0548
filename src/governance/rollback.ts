/**
 * Runs and rollback ([R]), the pure part: resolving a mapping's compensation against one call's
 * arguments and result (`$args.<path>`, `$result.<path>` — the result read from
 * `structuredContent`, or from a single text block holding JSON) into the plan the call's outcome
 * record keeps; rebuilding a run's steps from its ledger records alone (decisions, outcomes and
 * `rollback.step` records); the rollback plan (newest first, which compensations need approval,
 * which steps cannot be undone and why, which are already undone); the idempotency key of one
 * step (a hash of run and step, the same for every retry of a rollback); and checking a
 * verification read-back against its `expect`. Must never: do I/O, read a clock it is not handed,
 * build a compensation from a result that broke its output schema, or keep anything of a call but
 * the values its compensation references.
 */
import { type CompensationSpec, referencesIn, REFERENCE } from "../config/mapping-schema.ts";
import { canonicalHash, canonicalJson } from "../wire/canonical.ts";
import { isObject, type Json, type JsonObject } from "../wire/jsonrpc.ts";

/** Version of the `compensation` field of outcome bodies and of `rollback.step` bodies. */
export const COMPENSATION_VERSION = 1;
/** The ledger kind of one rollback step's record (written before and after its compensation runs). */
export const ROLLBACK_STEP_KIND = "rollback.step";
/** Attempts of one compensation before it is recorded failed. */
export const COMPENSATION_ATTEMPTS = 3;
/** The `_meta` key that carries a compensation's idempotency key to the upstream. */
export const IDEMPOTENCY_META = "portcullis/idempotency_key";
/** A decision older than this without an outcome counts as uncertain (as GET /v1/ledger/:id/trace says). */
const OUTCOME_GRACE_MS = 15 * 60_000;

/** A compensation resolved for one call: what will be called, with which values, and how it is read back. */
export interface ResolvedCompensation {
  tool: string;
  arguments: JsonObject;
  approval: "none" | "required";
  verification: { tool: string; arguments: JsonObject; expect: JsonObject } | null;
}

/** The `compensation` field of an outcome body (present only when the tool's mapping declares one). */
export type CompensationRecord =
  | ({ v: number; status: "planned" } & ResolvedCompensation)
  | { v: number; status: "unavailable"; reason: string }
  | { v: number; status: "not_needed"; reason: string };

/** The call's result as references read it: `structuredContent`, else the JSON of its one text block. */
export function resultValue(result: JsonObject | undefined | null): Json | undefined {
  if (!result) return undefined;
  if (isObject(result.structuredContent)) return result.structuredContent;
  const content = Array.isArray(result.content) ? result.content : [];
  const textBlocks = content.filter((c) => isObject(c) && c.type === "text");
  if (textBlocks.length !== 1) return undefined;
  const text = (textBlocks[0] as JsonObject).text;
  if (typeof text !== "string") return undefined;
  try {
    const v = JSON.parse(text) as Json;
    return v !== null && typeof v === "object" ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The value at `path` in `root` (own members only; array items by index); undefined when absent. */
export function valueAt(root: Json | undefined, path: readonly string[]): Json | undefined {
  let cur: Json | undefined = root;
  for (const seg of path) {
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(seg)) return undefined;
      cur = cur[Number(seg)];
    } else if (isObject(cur)) {
      cur = Object.hasOwn(cur, seg) ? cur[seg] : undefined;
    } else return undefined;
  }
  return cur;
}

type Resolved = { ok: true; value: Json } | { ok: false; reason: string };

/** `template` with every reference replaced by the value it names; the first reference that names nothing fails it. */
export function resolveTemplate(template: Json, args: JsonObject | undefined, result: Json | undefined): Resolved {
  if (typeof template === "string") {
    if (!REFERENCE.test(template)) return { ok: true, value: template };
    const [head, ...path] = template.slice(1).split(".");
    const root = head === "args" ? args : result;
    const value = valueAt(root, path);
    if (value === undefined) return { ok: false, reason: `${template} names nothing in the call's ${head === "args" ? "arguments" : "result"}` };
    return { ok: true, value };
  }
  if (Array.isArray(template)) {
    const out: Json[] = [];
    for (const x of template) {
      const r = resolveTemplate(x, args, result);
      if (!r.ok) return r;
      out.push(r.value);
    }
    return { ok: true, value: out };
  }
  if (isObject(template)) {
    const out: JsonObject = {};
    for (const [k, x] of Object.entries(template)) {
      const r = resolveTemplate(x, args, result);
      if (!r.ok) return r;
      out[k] = r.value;
    }
    return { ok: true, value: out };
  }
  return { ok: true, value: template };
}

function usesResult(spec: CompensationSpec): boolean {
  const all: Json[] = [spec.arguments, ...(spec.verification ? [spec.verification.arguments, spec.verification.expect] : [])];
  return all.some((v) => referencesIn(v).some((r) => r.source === "result"));
}

/**
 * The compensation one call's outcome record keeps: resolved against its arguments and result
 * (only the referenced values survive), or why it cannot be (an uncertain or failed call, a result
 * that broke its outputSchema, a reference that names nothing).
 */
export function compensationFor(
  spec: CompensationSpec,
  args: JsonObject | undefined,
  status: "succeeded" | "failed" | "uncertain",
  result: JsonObject | undefined | null,
  outputProblems: readonly string[],
): CompensationRecord {
  const v = COMPENSATION_VERSION;
  if (status === "failed") return { v, status: "not_needed", reason: "the call failed: it changed nothing to undo" };
  if (status === "uncertain")
    return {
      v,
      status: "unavailable",
      reason: "the call's outcome is uncertain (it may or may not have run upstream): it cannot be rolled back automatically",
    };
  const needsResult = usesResult(spec);
  if (needsResult && outputProblems.length > 0)
    return {
      v,
      status: "unavailable",
      reason: `the result broke the tool's outputSchema (${outputProblems.slice(0, 3).join("; ")}), so it is not used to build the compensation: this step cannot be rolled back automatically`,
    };
  const value = resultValue(result);
  if (needsResult && value === undefined)
    return {
      v,
      status: "unavailable",
      reason: "the result has no structured value (structuredContent or one text block of JSON) to build the compensation from",
    };
  const a = resolveTemplate(spec.arguments, args, value);
  if (!a.ok) return { v, status: "unavailable", reason: a.reason };
  let verification: ResolvedCompensation["verification"] = null;
  if (spec.verification) {
    const va = resolveTemplate(spec.verification.arguments, args, value);
    if (!va.ok) return { v, status: "unavailable", reason: `verification: ${va.reason}` };
    const ve = resolveTemplate(spec.verification.expect, args, value);
    if (!ve.ok) return { v, status: "unavailable", reason: `verification: ${ve.reason}` };
    verification = { tool: spec.verification.tool, arguments: va.value as JsonObject, expect: ve.value as JsonObject };
  }
  return { v, status: "planned", tool: spec.tool, arguments: a.value as JsonObject, approval: spec.approval, verification };
}

/** The idempotency key of one step of a run's rollback: the same for every execution and every attempt. */
export function idempotencyKey(run: string, step: string): string {
  return canonicalHash({ run, step });
}

/** Whether a read-back's structured result has every expected value (RFC 8785 equality); which path differs if not. */
export function verificationMet(expect: JsonObject, result: Json | undefined): { ok: true } | { ok: false; reason: string } {
  for (const [path, want] of Object.entries(expect)) {
    const got = valueAt(result, path.split("."));
    if (got === undefined || canonicalJson(got) !== canonicalJson(want))
      return {
        ok: false,
        reason: `${path} is ${got === undefined ? "absent" : canonicalJson(got).slice(0, 200)}, expected ${canonicalJson(want).slice(0, 200)}`,
      };
  }
  return { ok: true };
}

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
      step.rollback = {
        state,
        attempts: typeof e.body.attempts === "number" ? e.body.attempts : 0,
        verification: verification === "verified" || verification === "verification_failed" || verification === "unverified" ? verification : null,
        reason: str(e.body.reason),
        at: e.at,
        by: str(e.body.by),
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
  idempotency_key: string;
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
      idempotency_key: idempotencyKey(view.run, s.decision_id),
      retried: s.rollback !== null,
    });
  }
  return plan;
}

/** The body of a `rollback.step` record. */
export function rollbackStepBody(
  view: RunView,
  step: PlannedCompensation,
  state: StepRollback["state"],
  by: string,
  rollbackId: string,
  detail: { attempts?: number; verification?: VerificationStatus | null; reason?: string | null; errors?: string[] } = {},
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
    idempotency_key: step.idempotency_key,
    state,
    attempts: detail.attempts ?? 0,
    verification: detail.verification ?? null,
    reason: detail.reason ?? null,
    errors: detail.errors ?? [],
    by,
  };
}
