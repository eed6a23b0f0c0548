/**
 * The governed tools/call: one function that reads top to bottom in the request-path order of
 * docs/architecture.md — resolve → kill switch → classify → validate → decide (steps 4–8, side-effect free,
 * in call-decide.ts) → budget → hold → write-ahead → forward → obligations → outcome → answer
 * (the last three, or the next input round, in call-settle.ts; answer shapes in call-answers.ts; a
 * later input round of a parked call goes on in call-rounds.ts) — and `governedPassThrough`, its documented
 * equivalent for requests that reach a tool without naming it (tasks/* that deliver a tool's
 * result, unknown methods forwarded verbatim to a transparent upstream). Storage, clock and the
 * upstream are handed in (`GovernanceDeps`). Owns the fail-closed rule: a step that throws
 * refuses the call, and nothing after a refusal runs — the upstream sees nothing unless every
 * step before `forward` answered.
 * Must never: forward a call a step refused or could not answer, or let the agent see a result
 * whose outcome was not recorded.
 */
import { ErrorCode, errorResponse, type JsonObject, type JsonRpcRequest } from "../wire/jsonrpc.ts";
import { type Answer, gatewayMetaKeys, refused, StepFailed, step, upstreamRequest } from "./call-answers.ts";
import { decideCall, type GovernanceDeps, violation } from "./call-decide.ts";
import { continueRounds } from "./call-rounds.ts";
import { block, settle } from "./call-settle.ts";
import { fullAudit } from "./obligations.ts";
import { type Classification, type Decision, holdFor, type LegResult, type Refusal, type Target, type ToolCall } from "./steps.ts";
import type { RoundState } from "./round-steps.ts";
import { haltFor } from "./halts.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";

/** Steps 4–14 for one tools/call. */
export async function governToolCall(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  try {
    return await governedSteps(deps, call);
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    return stepRefused(deps, call, e);
  }
}

/** A step that could not answer refuses the call (fail closed), on the record when the ledger takes it. */
async function stepRefused(deps: GovernanceDeps, call: ToolCall, e: StepFailed): Promise<Answer> {
  const refusal: Refusal = { check: e.step, reason: `${e.message}; the call was refused to fail closed`, cause: e.cause };
  const id = await deps.ledger.blocked(call, refusal).catch(() => null);
  return refused(call, refusal, id);
}

async function governedSteps(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  // A later round of a call on a legacy upstream: decided in its first round, it goes on from there.
  if (deps.rounds?.carries(call)) return continueRounds(deps, deps.rounds, call);
  const verdict = await decideCall(deps, call);
  if (verdict.kind === "answer") return verdict.answer;
  if (verdict.kind === "refused") return block(deps, call, verdict.refusal);
  const { target } = verdict;
  let decision = verdict.decision;

  // 8 (end) budgets: admitted into history atomically, so no reconnect or new session escapes a limit.
  const callId = crypto.randomUUID();
  const limits = deps.policy.limits(call);
  const recorded = deps.policy.recordsCall ? deps.policy.recordsCall(call.exposedName, target.upstream.name, target.tool.name) : deps.policy.usesHistory;
  const admitted = recorded || limits.grantCalls !== undefined || limits.runCalls !== undefined;
  if (admitted) {
    const entry = {
      callId,
      principal: call.principal.sub,
      ...(call.principal.jti ? { jti: call.principal.jti } : {}),
      runId: call.runId,
      exposedName: call.exposedName,
      upstream: target.upstream.name,
      tool: target.tool.name,
      numbers: numbersOf(call.arguments),
      at: deps.clock(),
    };
    const admission = await step("budget", () => deps.history.admit(entry, decision.mode === "enforce" ? limits : {}));
    if (!admission.ok) {
      return block(deps, call, { check: "budget", reason: `the ${admission.budget} budget is spent: ${admission.used} of ${admission.limit} calls` });
    }
    if (decision.mode !== "enforce" && !decision.wouldBlock) {
      const over = await step("budget", () => overBudget(deps, call, limits));
      if (over) decision = violation(decision, over);
    }
  }

  // The gateway's own time so far (the metrics' overhead): the hold step may wait for a person, which is not the gateway's.
  const beforeHoldMs = call.receivedAt !== undefined ? Math.max(0, deps.clock() - call.receivedAt) : undefined;

  // 9 hold: an approved hold for this exact action is consumed once; otherwise the hold answers
  // (created or still pending, rejected, expired, in flight — or the consumed call's recorded answer, replayed).
  const hold = await step("hold", () => holdFor(deps.holds, call, target, decision, verdict.classification));
  if (!hold.proceed) {
    if ("answer" in hold) return { response: { ...hold.answer, id: call.request.id }, status: 200 };
    return hold.recorded ? refused(call, hold.refusal, hold.recorded) : block(deps, call, hold.refusal);
  }
  const history = { admitted, recorded, beforeHoldMs };
  if (!hold.holdId) return executeCall(deps, call, verdict, decision, callId, history, undefined);
  // A consumed hold keeps the answer its call got: identical retries get it back instead of a second run.
  const holdId = hold.holdId;
  let answer: Answer;
  try {
    answer = await executeCall(deps, call, verdict, decision, callId, history, holdId);
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    answer = await stepRefused(deps, call, e);
  }
  await deps.holds.complete(holdId, answer.response).catch((e) => console.error("portcullis: hold answer not kept", holdId, String(e)));
  return answer;
}

/**
 * Steps 10–14 for a call that may run (and, when `holdId` is set, consumed its approval);
 * `history.admitted`: the call was admitted into history (step 8), so a failed or uncertain outcome
 * is settled there; `history.recorded`: a history query could count it, so every outcome is — a
 * call that was not admitted is never settled (the object would ignore it: a round trip for nothing).
 */
async function executeCall(
  deps: GovernanceDeps,
  call: ToolCall,
  verdict: { target: Target; classification: Classification; mapping: ToolMapping | undefined },
  decision: Decision,
  callId: string,
  history: { admitted: boolean; recorded: boolean; beforeHoldMs: number | undefined },
  holdId: string | undefined,
): Promise<Answer> {
  const { target, classification, mapping } = verdict;
  const executing = deps.clock();
  // 10 write-ahead: the decision is durable before anything reaches the upstream (a consumed hold
  // whose decision could not be recorded is released: its call never ran, and it may be approved again).
  // It names the client's `portcullis/` `_meta` keys the forward drops (upstreamRequest), never their values.
  const strippedMeta = gatewayMetaKeys(call.request.params);
  const receipt = await step("ledger", () =>
    deps.ledger.decision({
      principal: call.principal.sub,
      team: call.principal.team,
      runId: call.runId,
      upstream: target.upstream.name,
      tool: target.tool.name,
      exposed: call.exposedName,
      arguments: call.arguments,
      argumentsKept: fullAudit(decision.obligations) ? "full" : (mapping?.arguments ?? "hashed"),
      classification,
      decision,
      ...(holdId ? { holdId } : {}),
      ...(strippedMeta.length ? { strippedMeta } : {}),
      ...(call.trace ? { trace: call.trace } : {}),
    }),
  ).catch(async (e: unknown) => {
    if (holdId) await deps.holds.release(holdId, (e as Error).message).catch(() => undefined);
    throw e;
  });

  // 11 forward: the leg never throws; the mapping's timeout and (safe effects only) retries apply,
  // and a safe call whose connection was lost before any answer is sent once more.
  const started = deps.clock();
  const { leg, lostConnection } = await forwardWithRetry(deps, target, mapping, classification, upstreamRequest(call, target.tool.name, decision), call);
  const state: RoundState = { receipt, decision, callId, admitted: history.admitted, recorded: history.recorded, startedAt: started };
  if (history.beforeHoldMs !== undefined) state.beforeHoldMs = history.beforeHoldMs;
  return settle(deps, call, target, state, executing, leg, lostConnection);
}

/** Numeric arguments by dotted path (what history totals read; nothing else is kept). */
function numbersOf(args: JsonObject | undefined, prefix = "", out: Record<string, number> = {}, depth = 0): Record<string, number> {
  if (!args || depth > 4) return out;
  for (const [k, v] of Object.entries(args)) {
    const path = prefix ? `${prefix}.${k}` : k;
    if (typeof v === "number" && Number.isFinite(v)) out[path] = v;
    else if (v && typeof v === "object" && !Array.isArray(v)) numbersOf(v as JsonObject, path, out, depth + 1);
    if (Object.keys(out).length >= 32) break;
  }
  return out;
}

/** observe/advise: would the budget have refused this call (it was admitted without limits)? */
async function overBudget(deps: GovernanceDeps, call: ToolCall, limits: { grantCalls?: number; runCalls?: number }): Promise<Refusal | null> {
  if (limits.grantCalls === undefined && limits.runCalls === undefined) return null;
  const now = deps.clock();
  const queries = [
    ...(limits.grantCalls !== undefined ? [{ kind: "count" as const, tool: "*", withinMs: 86_400_000, scope: "grant" as const }] : []),
    ...(limits.runCalls !== undefined && call.runId !== null ? [{ kind: "count" as const, tool: "*", withinMs: 86_400_000, scope: "run" as const }] : []),
  ];
  const snap = await deps.history.snapshot(call.principal.sub, call.principal.jti, call.runId, queries, now);
  const used = Object.values(snap.answers).map(Number);
  const grantUsed = limits.grantCalls !== undefined ? (used[0] ?? 0) : 0;
  if (limits.grantCalls !== undefined && grantUsed > limits.grantCalls)
    return { check: "budget", reason: `the grant budget is spent: ${grantUsed} of ${limits.grantCalls} calls` };
  const runUsed = limits.runCalls !== undefined ? (used[limits.grantCalls !== undefined ? 1 : 0] ?? 0) : 0;
  if (limits.runCalls !== undefined && runUsed > limits.runCalls)
    return { check: "budget", reason: `the run budget is spent: ${runUsed} of ${limits.runCalls} calls` };
  return null;
}

/**
 * The leg with the mapping's timeout. Failures of read_only / idempotent tools whose mapping sets
 * `retry` are retried with exponential backoff, exactly as the mapping says. Otherwise, a call whose
 * classification effect is read_only or idempotent and whose leg failed with `connection` (fetch
 * failed before any response header: typically a pooled keep-alive connection the upstream closed
 * while idle) is sent once more at once, as HTTP clients do for idempotent requests (RFC 9110
 * §9.2.2); `lostConnection` then names the first attempt's failure. A tool of any other effect
 * (reversible — a write —, irreversible, or the conservative default) is never retried this way,
 * nor is an auth failure, nor a call the mapping's retries already sent again.
 * Every attempt goes through `deps.upstream.call`, which re-checks the kill switch before sending.
 */
async function forwardWithRetry(
  deps: GovernanceDeps,
  target: Target,
  mapping: ToolMapping | undefined,
  classification: Classification,
  request: JsonRpcRequest,
  call: ToolCall,
): Promise<{ leg: LegResult; lostConnection?: string }> {
  const t = mapping?.timeoutMs ? { ...target, upstream: { ...target.upstream, timeoutMs: mapping.timeoutMs } } : target;
  const retryable = mapping?.retry && (mapping.effect === "read_only" || mapping.effect === "idempotent") ? mapping.retry : null;
  let leg = await deps.upstream.call(t, request, call);
  let retries = 0;
  for (let attempt = 1; retryable && attempt <= retryable.attempts && leg.kind !== "answered" && !(leg.kind === "failed" && leg.auth); attempt++) {
    await new Promise((r) => setTimeout(r, Math.min(retryable.backoffMs * 2 ** (attempt - 1), 30_000)));
    leg = await deps.upstream.call(t, request, call);
    retries++;
  }
  const safe = classification.effect === "read_only" || classification.effect === "idempotent";
  if (retries === 0 && safe && leg.kind === "failed" && leg.connection && !leg.auth) {
    const lostConnection = leg.reason;
    return { leg: await deps.upstream.call(t, request, call), lostConnection };
  }
  return { leg };
}

/** A request that reaches a tool without naming one: tasks/* delivering a result, or an unknown method forwarded verbatim. */
export interface PassThrough {
  call: ToolCall;
  /** The upstream it goes to (already routed by task id, or the one transparent upstream). */
  upstream: import("../config/gateway-config.ts").UpstreamConfig;
}

/**
 * The documented equivalent of governToolCall for pass-through requests: the kill switch
 * (a halt stops task results and unknown methods too), then forward and answer. The ledger keeps
 * the tools/call that created a task (its decision and outcome); tasks/* requests themselves are
 * not recorded yet. Failures become JSON-RPC errors, since the request is not a tools/call.
 */
export async function governedPassThrough(deps: GovernanceDeps, p: PassThrough, forward: () => Promise<LegResult>): Promise<Answer> {
  let halted: Refusal | null;
  try {
    halted = haltFor(await deps.killSwitch.read(), p.call, p.upstream);
  } catch (e) {
    halted = { check: "kill_switch", reason: `the kill switch could not answer (${(e as Error).message}); refused to fail closed` };
  }
  if (halted)
    return {
      response: errorResponse(p.call.request.id, ErrorCode.InvalidRequest, `Portcullis refused this request: ${halted.reason}`),
      status: p.call.era === "modern" ? 403 : 200,
    };
  const leg = await forward();
  if (leg.kind === "answered") return { response: leg.response, status: leg.status };
  return {
    response: errorResponse(
      p.call.request.id,
      ErrorCode.InternalError,
      leg.kind === "uncertain" ? `${leg.reason}; the request may or may not have run upstream` : leg.reason,
    ),
    status: 200,
  };
}
