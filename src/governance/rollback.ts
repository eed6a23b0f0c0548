/**
 * Runs and rollback ([R]), the pure part: resolving a mapping's compensation against one call's
 * arguments and result (`$args.<path>`, `$result.<path>` — the result read from
 * `structuredContent`, or from a single text block holding JSON) into the plan the call's outcome
 * record keeps; rebuilding a run's steps from its ledger records alone (decisions, outcomes and
 * `rollback.step` records); the rollback plan (newest first, which compensations need approval,
 * which steps cannot be undone and why, which are already undone); the idempotency key of one
 * step (an HMAC-SHA256 of run and step under a key derived from the gateway's signing secret, the
 * same for every retry of a rollback and computable by no agent), the signing key it is derived
 * from, read from the secret's text; and checking a verification read-back against its `expect`.
 * Must never: do I/O, read a clock it is not handed, build a compensation from a result that broke
 * its output schema, keep anything of a call but the values its compensation references, derive an
 * idempotency key from anything an agent can know alone, or put a key (or its secret) in a plan or
 * a record — records keep only the key's SHA-256 and the id of the signing key it came from.
 */
import { type CompensationSpec, referencesIn, REFERENCE } from "../config/mapping-schema.ts";
import { canonicalJson, sha256Hex } from "../wire/canonical.ts";
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

/** What the HMAC key of idempotency keys is derived from: SHA-256(this ‖ the signing key's private `d`). */
export const IDEMPOTENCY_KEY_CONTEXT = "portcullis rollback idempotency v1\n";

/** The signing key idempotency keys are derived from: its id, and the private scalar (`d`, base64url) only the gateway holds. */
export interface IdempotencySecret {
  kid: string;
  d: string;
}

/**
 * The signing key in a signing secret's text (a private Ed25519 JWK, or a key set `{keys, active}`)
 * that a step's idempotency key is derived from: the one named `kid` (a step a previous execution
 * started keeps the key it started with, whatever key is active now), else the active key.
 * A reason (never the secret's text) when there is none.
 */
export function idempotencySecretFrom(secretText: unknown, kid: string | null): IdempotencySecret | { problem: string } {
  if (typeof secretText !== "string" || secretText.trim() === "") return { problem: "the signing secret is not set" };
  let parsed: unknown;
  try {
    parsed = JSON.parse(secretText);
  } catch {
    return { problem: "the signing secret is not JSON" };
  }
  if (!isObject(parsed)) return { problem: "the signing secret holds no Ed25519 private key" };
  const usable = (k: unknown): k is JsonObject & { d: string } =>
    isObject(k) && k.kty === "OKP" && k.crv === "Ed25519" && typeof k.d === "string" && k.d.length > 0;
  const keys = Array.isArray(parsed.keys) ? parsed.keys.filter(usable) : usable(parsed) ? [parsed] : [];
  const kidOf = (k: JsonObject) => (typeof k.kid === "string" ? k.kid : "key");
  if (keys.length === 0) return { problem: "the signing secret holds no Ed25519 private key" };
  if (kid !== null) {
    const k = keys.find((x) => kidOf(x) === kid);
    if (!k)
      return {
        problem: `the signing key ${kid} that this step's earlier execution derived its idempotency key from is no longer in the signing secret; a key derived from another could apply the compensation twice`,
      };
    return { kid, d: k.d };
  }
  const active = Array.isArray(parsed.keys) ? (keys.find((x) => kidOf(x) === parsed.active) ?? keys[0]!) : keys[0]!;
  return { kid: kidOf(active), d: active.d };
}

/**
 * The idempotency key of one step of a run's rollback: HMAC-SHA256, under SHA-256(context ‖ d),
 * of the canonical JSON of `{run, step}` — the same for every execution and every attempt, and
 * unpredictable to anyone without the signing secret (an agent knows its run and its decision ids).
 */
export async function idempotencyKey(secret: IdempotencySecret, run: string, step: string): Promise<string> {
  const material = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(IDEMPOTENCY_KEY_CONTEXT + secret.d));
  const key = await crypto.subtle.importKey("raw", material, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(canonicalJson({ run, step })));
  return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** What records and reports keep of an idempotency key: its SHA-256 (an auditor can match an upstream's log), never the key. */
export const idempotencyKeyHash = (key: string): string => sha256Hex(key);

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
