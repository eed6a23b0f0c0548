/**
 * The execution of a run's rollback plan (src/governance/rollback.ts):
 * `rollbackRun` calls each compensation on the upstream that exposes it, newest first, at most 3
 * attempts with backoff, with `_meta["portcullis/idempotency_key"]` (an HMAC of run and step
 * under a key derived from the gateway's signing secret, src/governance/idempotency.ts), then its
 * read-back with backoff (`verified | verification_failed | unverified`), each step recorded on
 * the run's team chain before and after it runs (with the key's SHA-256, never the key).
 * Compensations bypass grant globs and upstream allow/deny (an operator is deliberately undoing),
 * need the operator (or admin) role, and respect the kill switch. Also `upstreamToolNames`, an
 * upstream's whole tools/list. Must never: run a compensation without the operator role or under a
 * halt covering it, run one without a secret-derived key (no signing secret fails the step), call a
 * step's compensation twice under different keys, put a key in a report, a record or a log, or
 * call anything on a dry run.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import {
  COMPENSATION_ATTEMPTS,
  type PlannedCompensation,
  planRollback,
  type RollbackPlan,
  ROLLBACK_STEP_KIND,
  rollbackStepBody,
  type RunView,
  type VerificationStatus,
} from "../governance/rollback.ts";
import { IDEMPOTENCY_META, idempotencyKey, idempotencyKeyHash, idempotencySecretFrom } from "../governance/idempotency.ts";
import { resultValue, verificationMet } from "../governance/compensation.ts";
import { haltFor } from "../governance/halts.ts";
import type { LegResult, ToolCall } from "../governance/steps.ts";
import type { EntryKind } from "../ledger/records.ts";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { callLeg } from "../upstream/forward.ts";
import { killSwitchReader } from "../ports/killswitch-client.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import { exposeName } from "../protocol/exposed-names.ts";
import { modernMeta } from "../upstream/client.ts";
import { type RunsResult, visibleRun } from "./run-records.ts";

/** Backoff before attempt n+1 of a compensation, and before read-back n+1. */
const ATTEMPT_BACKOFF_MS = [250, 500];
const VERIFY_BACKOFF_MS = [200, 400];

export interface StepReport {
  decision_id: string;
  upstream: string;
  tool: string;
  /** SHA-256 of the idempotency key the compensation was sent with (never the key); null when none was derived (a dry run, a step not run). */
  idempotency_key_sha256: string | null;
  state: "compensated" | "failed" | "skipped" | "would_run" | "not_run";
  attempts: number;
  verification: VerificationStatus | null;
  reason: string | null;
  errors: string[];
}

export interface RollbackReport {
  run: string;
  principal: string;
  dry_run: boolean;
  rollback_id: string | null;
  /** Every step the plan would (or did) compensate, newest first. */
  steps: StepReport[];
  /** Steps still not undone after this execution (failed, skipped, not reached), newest first. */
  remaining: string[];
  plan: RollbackPlan;
  complete: boolean;
}

export interface RollbackOptions {
  confirm: boolean;
  approveCompensations: boolean;
  principal?: string;
  team?: string;
}

/**
 * Where a rollback runs: the gateway's env and config, the caller, and a 2026-07-28 call context
 * of the caller (its upstream legs; the route builds it: src/routes/runs-api.ts rollbackContext).
 */
export interface RollbackContext {
  env: Env;
  cfg: GatewayConfig;
  caller: Principal;
  callContext(): CallContext;
}

const MAX_LIST_PAGES = 20;

/** The tool names `up` offers (every page of its tools/list); null when the list could not be read whole. */
export async function upstreamToolNames(ctx: CallContext, up: UpstreamConfig): Promise<Set<string> | null> {
  const names = new Set<string>();
  let cursor: string | undefined;
  for (let i = 0; i < MAX_LIST_PAGES; i++) {
    const leg = await callLeg(ctx, up, {
      jsonrpc: "2.0",
      id: `portcullis-tools-${crypto.randomUUID()}`,
      method: "tools/list",
      // A 2026-07-28 context's legs take the request's own protocol metadata; a legacy session's legs need none.
      params: { ...(cursor !== undefined ? { cursor } : {}), ...(ctx.era === "modern" ? { _meta: modernMeta({}) } : {}) },
    });
    if (leg.kind !== "answered" || !leg.response.result || !Array.isArray(leg.response.result.tools)) return null;
    for (const t of leg.response.result.tools) if (isObject(t) && typeof t.name === "string") names.add(t.name);
    const next = leg.response.result.nextCursor;
    if (typeof next !== "string" || next === "") return names;
    cursor = next;
  }
  return null;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function legProblem(leg: LegResult): string | null {
  if (leg.kind !== "answered") return leg.reason;
  if (leg.response.error) return `error ${leg.response.error.code}: ${leg.response.error.message}`;
  if (leg.response.result?.isError === true) {
    const text = Array.isArray(leg.response.result.content)
      ? leg.response.result.content
          .filter((c) => isObject(c) && c.type === "text")
          .map((c) => String((c as JsonObject).text))
          .join(" ")
      : "";
    return `the tool answered isError${text ? `: ${text.slice(0, 300)}` : ""}`;
  }
  return null;
}

/**
 * POST /v1/runs/:id/rollback: a dry run (the plan, nothing called) unless `confirm`; executing
 * needs the operator (or admin) role, and compensations that need approval run only with
 * `approveCompensations`. Stops at the first compensation that fails: older steps stay
 * (remaining), since they may depend on it being undone first.
 */
export async function rollbackRun(ctx: RollbackContext, run: string, opts: RollbackOptions): Promise<RunsResult<RollbackReport>> {
  const { env, cfg, caller } = ctx;
  const operator = principalHas(caller, "operator") || principalHas(caller, "admin");
  if (opts.confirm && !operator)
    return { ok: false, status: 403, message: "executing a rollback needs the operator role; without confirm: true it is a dry run" };
  if (opts.approveCompensations && !operator) return { ok: false, status: 403, message: "approving compensations needs the operator role" };
  const q = { ...(opts.principal !== undefined ? { principal: opts.principal } : {}), ...(opts.team !== undefined ? { team: opts.team } : {}) };
  const v = await visibleRun(env, caller, run, q);
  if (!v.ok) return v;
  const view = v.value;
  const plan = planRollback(view);
  const base = (c: PlannedCompensation): Omit<StepReport, "state"> => ({
    decision_id: c.decision_id,
    upstream: c.upstream,
    tool: c.tool,
    idempotency_key_sha256: null,
    attempts: 0,
    verification: null,
    reason: null,
    errors: [],
  });
  if (!opts.confirm) {
    const steps = plan.compensations.map((c) => ({
      ...base(c),
      state: c.needs_approval && !opts.approveCompensations ? ("skipped" as const) : ("would_run" as const),
      reason: c.needs_approval && !opts.approveCompensations ? "needs approval (approve_compensations: true)" : null,
    }));
    return {
      ok: true,
      value: {
        run,
        principal: view.principal,
        dry_run: true,
        rollback_id: null,
        steps,
        remaining: plan.compensations.map((c) => c.decision_id),
        plan,
        complete: false,
      },
    };
  }

  const rollbackId = crypto.randomUUID();
  const signing = ledgerSigning(cfg);
  const record = (c: PlannedCompensation, state: "started" | "compensated" | "failed" | "skipped", detail: Parameters<typeof rollbackStepBody>[5] = {}) =>
    appendRecord(env, signing, view.team, ROLLBACK_STEP_KIND as EntryKind, rollbackStepBody(view, c, state, caller.sub, rollbackId, detail));
  const callCtx = ctx.callContext();
  const offered = new Map<string, Set<string> | null>();
  const toolsOf = async (up: UpstreamConfig): Promise<Set<string> | null> => {
    if (!offered.has(up.name)) offered.set(up.name, await upstreamToolNames(callCtx, up).catch(() => null));
    return offered.get(up.name) ?? null;
  };
  // Compensations carry their step's key; read-backs none (each must read afresh).
  const call = async (up: UpstreamConfig, tool: string, args: JsonObject, key: string | null): Promise<LegResult> =>
    callLeg(callCtx, up, {
      jsonrpc: "2.0",
      id: `portcullis-rollback-${crypto.randomUUID()}`,
      method: "tools/call",
      params: { name: tool, arguments: args, _meta: modernMeta({}, key === null ? {} : { [IDEMPOTENCY_META]: key }) },
    });

  const steps: StepReport[] = [];
  const remaining: string[] = [];
  let stopped = false;
  for (const c of plan.compensations) {
    if (stopped) {
      steps.push({ ...base(c), state: "not_run", reason: "an earlier (newer) compensation failed" });
      remaining.push(c.decision_id);
      continue;
    }
    if (c.needs_approval && !opts.approveCompensations) {
      const reason = "needs approval (approve_compensations: true)";
      await record(c, "skipped", { reason });
      steps.push({ ...base(c), state: "skipped", reason });
      remaining.push(c.decision_id);
      continue;
    }
    const up = cfg.upstreams.find((u) => u.name === c.upstream);
    const refusal = up ? await haltOf(env, caller, view, up, c) : `upstream ${c.upstream} is no longer configured`;
    const tools = up && !refusal ? await toolsOf(up) : null;
    const missing = tools && (!tools.has(c.tool) ? c.tool : c.verification && !tools.has(c.verification.tool) ? c.verification.tool : null);
    // The step's key, derived only now (an agent reads its own plans) from the secret only the gateway holds.
    const key = refusal || missing ? null : await stepKey(env, cfg, view, c);
    const problem = refusal ?? (missing ? `upstream ${c.upstream} offers no tool ${missing}` : key && "problem" in key ? key.problem : null);
    if (problem || !up || !key || "problem" in key) {
      const reason = problem ?? "no upstream";
      await record(c, "failed", { reason });
      steps.push({ ...base(c), state: "failed", reason });
      remaining.push(c.decision_id);
      stopped = true;
      continue;
    }
    const keyed = { ...base(c), idempotency_key_sha256: idempotencyKeyHash(key.value) };
    // Write-ahead: the step is on the record before the upstream sees the compensation.
    await record(c, "started", { key });
    const errors: string[] = [];
    let attempts = 0;
    let done = false;
    while (attempts < COMPENSATION_ATTEMPTS && !done) {
      if (attempts > 0) await sleep(ATTEMPT_BACKOFF_MS[attempts - 1] ?? 500);
      attempts++;
      const p = legProblem(await call(up, c.tool, c.arguments, key.value));
      if (p === null) done = true;
      else errors.push(`attempt ${attempts}: ${p}`);
    }
    if (!done) {
      const reason = `the compensation failed ${attempts} times`;
      await record(c, "failed", { attempts, reason, errors, key });
      steps.push({ ...keyed, state: "failed", attempts, reason, errors });
      remaining.push(c.decision_id);
      stopped = true;
      continue;
    }
    let verification: VerificationStatus = "unverified";
    let reason: string | null = c.verification ? null : "no read-back is declared";
    if (c.verification) {
      verification = "verification_failed";
      for (let i = 0; i < VERIFY_BACKOFF_MS.length + 1; i++) {
        if (i > 0) await sleep(VERIFY_BACKOFF_MS[i - 1]!);
        const leg = await call(up, c.verification.tool, c.verification.arguments, null);
        const p = legProblem(leg);
        if (p !== null) {
          reason = `read-back: ${p}`;
          continue;
        }
        const met = verificationMet(c.verification.expect, leg.kind === "answered" ? resultValue(leg.response.result) : undefined);
        if (met.ok) {
          verification = "verified";
          reason = null;
          break;
        }
        reason = `read-back: ${met.reason}`;
      }
    }
    await record(c, "compensated", { attempts, verification, reason, errors, key });
    steps.push({ ...keyed, state: "compensated", attempts, verification, reason, errors });
  }
  return {
    ok: true,
    value: {
      run,
      principal: view.principal,
      dry_run: false,
      rollback_id: rollbackId,
      steps,
      remaining,
      plan,
      complete: remaining.length === 0 && plan.not_reversible.length === 0,
    },
  };
}

/**
 * The idempotency key of step `c`, from the signing key in the gateway's signing secret (the one a
 * previous execution of the step used, else the active one) — or why there is none: without the
 * secret the step fails rather than run under a key an agent could compute.
 */
async function stepKey(env: Env, cfg: GatewayConfig, view: RunView, c: PlannedCompensation): Promise<{ value: string; kid: string } | { problem: string }> {
  const name = cfg.auth.signingKeySecret;
  const secret = idempotencySecretFrom(env[name], c.key_id);
  if ("problem" in secret)
    return {
      problem: `no idempotency key can be derived (${secret.problem}: the Worker secret ${name}); refused rather than send a key an agent could compute`,
    };
  return { value: await idempotencyKey(secret, view.run, c.decision_id), kid: secret.kid };
}

/** The halt covering this compensation — for the operator running it or for the run's principal — or null; an unreadable kill switch refuses it. */
async function haltOf(env: Env, caller: Principal, view: RunView, up: UpstreamConfig, c: PlannedCompensation): Promise<string | null> {
  let state: Awaited<ReturnType<ReturnType<typeof killSwitchReader>["read"]>>;
  try {
    state = await killSwitchReader(env).read();
  } catch (e) {
    return `the kill switch could not answer (${(e as Error).message}): refused to fail closed`;
  }
  const as = (p: Principal): ToolCall => ({
    principal: p,
    era: "modern",
    request: { jsonrpc: "2.0", id: "portcullis-rollback", method: "tools/call", params: { name: c.tool } },
    exposedName: exposeName(up, c.tool),
    arguments: c.arguments,
    runId: view.run,
  });
  const owner: Principal = { sub: view.principal, team: view.team, roles: [], tools: [], authenticated: true };
  const h = haltFor(state, as(caller), up, c.tool) ?? haltFor(state, as(owner), up, c.tool);
  return h ? h.reason : null;
}
