/**
 * The governed tools/call: one function that reads top to bottom in the request-path order of
 * DESIGN.md — resolve → kill switch → classify → validate → decide → hold → write-ahead →
 * forward → obligations → outcome → answer — and `governedPassThrough`, its documented
 * equivalent for requests that reach a tool without naming it (tasks/* that deliver a tool's
 * result, unknown methods forwarded verbatim to a transparent upstream). Storage, clock and the
 * upstream are handed in (`GovernanceDeps`). Owns the fail-closed rule: a step that throws
 * refuses the call, and nothing after a refusal runs — the upstream sees nothing unless every
 * step before `forward` answered.
 * Must never: forward a call a step refused or could not answer, or let the agent see a result
 * whose outcome was not recorded.
 */
import { ErrorCode, errorResponse, type JsonObject, type JsonRpcRequest, type JsonRpcResponse } from "../wire/jsonrpc.ts";
import type { ToolCatalog } from "./catalog.ts";
import { classifyTool } from "./classify.ts";
import { grantAllowsTool, toolAllowed } from "./grant-scope.ts";
import { applyResultObligations, checkBeforeDispatch, fullAudit, obligationProblems, obligationQueries, pushDownMeta } from "./obligations.ts";
import {
  CatalogUnreadable,
  type Classification,
  type Decision,
  haltFor,
  type HistorySnapshot,
  type HistoryStore,
  holdFor,
  type KillSwitchReader,
  type LedgerWriter,
  type LegResult,
  type Mappings,
  outcomeOf,
  type Policy,
  type HoldStore,
  type Receipt,
  type Refusal,
  type Target,
  type ToolCall,
  type ToolMapping,
  type UpstreamLeg,
} from "./steps.ts";
import { validateCall, validateOutput } from "./validate.ts";

export interface GovernanceDeps {
  catalog: ToolCatalog;
  killSwitch: KillSwitchReader;
  mappings: Mappings;
  policy: Policy;
  holds: HoldStore;
  ledger: LedgerWriter;
  history: HistoryStore;
  upstream: UpstreamLeg;
  clock: () => number;
}

/** A JSON-RPC answer and the HTTP status that carries it. */
export interface Answer {
  response: JsonRpcResponse;
  status: number;
}

/** The `_meta` key under which an answer carries its ledger receipt. */
export const RECEIPT_META = "portcullis/receipt";

class StepFailed extends Error {
  readonly step: string;
  constructor(step: string, cause: unknown) {
    super(`the ${step} step could not answer (${cause instanceof Error ? cause.message : String(cause)})`);
    this.step = step;
  }
}

/** Runs one step; a throw becomes StepFailed, which refuses the call (fail closed). */
async function step<T>(name: string, run: () => T | Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (e) {
    throw new StepFailed(name, e);
  }
}

const result = (call: ToolCall, r: JsonObject): Answer => ({ response: { jsonrpc: "2.0", id: call.request.id, result: r }, status: 200 });
const unknownTool = (call: ToolCall): Answer => ({
  response: errorResponse(call.request.id, ErrorCode.InvalidParams, `Unknown tool: ${call.exposedName}`),
  status: 200,
});
/** A refusal is a tool result the model can read (isError), never a protocol error: what refused, by which rule, the record, who to ask. */
function refused(call: ToolCall, r: Refusal, blockedId?: string | null): Answer {
  const refs = [`check: ${r.check}`, ...(r.rule ? [`rule: ${r.rule}`] : []), ...(blockedId ? [`decision: ${blockedId}`] : [])];
  const ask = r.owner ? `; ask ${r.owner}` : call.principal.authenticated ? "; ask the issuer of your grant" : "";
  return result(call, { content: [{ type: "text", text: `Blocked by Portcullis: ${r.reason} (${refs.join(", ")})${ask}` }], isError: true });
}
/** A leg that did not answer: auth problems are readable isError results; the rest JSON-RPC errors naming the upstream. */
function notAnswered(call: ToolCall, leg: Exclude<LegResult, { kind: "answered" }>): Answer {
  if (leg.kind === "failed" && leg.auth) return result(call, { content: [{ type: "text", text: leg.reason }], isError: true });
  const text = leg.kind === "uncertain" ? `${leg.reason}; the call may or may not have run upstream` : leg.reason;
  return { response: errorResponse(call.request.id, ErrorCode.InternalError, text), status: 200 };
}

/** The client's request with the upstream's own tool name, and the obligations a server can push down. */
function upstreamRequest(call: ToolCall, toolName: string, decision: Decision): JsonRpcRequest {
  const params: JsonObject = { ...(call.request.params ?? {}), name: toolName };
  const push = pushDownMeta(decision.obligations);
  if (push) params._meta = { ...((params._meta as JsonObject | undefined) ?? {}), ...push };
  return { ...call.request, params };
}

/** The receipt rides in the result's `_meta`; everything else is the upstream's, unchanged. */
function withReceipt(response: JsonRpcResponse, receipt: Receipt | null): JsonRpcResponse {
  if (!receipt || !response.result) return response;
  const meta = { ...((response.result._meta as JsonObject | undefined) ?? {}), [RECEIPT_META]: { ...receipt } };
  return { ...response, result: { ...response.result, _meta: meta } };
}

/** advise: the result gets one extra text block naming what enforce would have done. */
function withAdvisory(response: JsonRpcResponse, decision: Decision): JsonRpcResponse {
  if (decision.mode !== "advise" || !decision.wouldBlock || !response.result) return response;
  const content = Array.isArray(response.result.content) ? response.result.content : [];
  const text = `Portcullis advisory (nothing was blocked): enforce would ${decision.wouldBlock.decision === "deny" ? "block" : "hold"} this call — ${decision.wouldBlock.reason}`;
  return { ...response, result: { ...response.result, content: [...content, { type: "text", text }] } };
}

const NO_HISTORY_ANSWERS: HistorySnapshot = { answers: {} };

/** Steps 4–8 decided a call: it may go on (to hold, write-ahead and forward), or it was refused, or it gets a fixed answer. */
export type Verdict =
  | { kind: "answer"; answer: Answer }
  | { kind: "refused"; refusal: Refusal }
  | { kind: "proceed"; target: Target; classification: Classification; mapping: ToolMapping | undefined; decision: Decision };

/** A violation that enforce refuses; in observe and advise it only joins the decision as what enforce would have done. */
function violation(decision: Decision, r: Refusal): Decision {
  if (decision.mode === "enforce" || decision.wouldBlock) return decision;
  return { ...decision, wouldBlock: { rule: r.rule ?? null, reason: `${r.check}: ${r.reason}`, decision: "deny" } };
}

/**
 * Steps 4–8 for one tools/call: resolve → kill switch → classify → validate → decide (history,
 * policy, obligations that must hold before dispatch). Side-effect free (no ledger, no history
 * write): `governToolCall` goes on from here, and `previewToolCall` reports it.
 */
async function decideCall(deps: GovernanceDeps, call: ToolCall): Promise<Verdict> {
  // 4 resolve: the grant first (same answer whether or not the tool exists), then the catalog.
  if (call.exposedName.startsWith("portcullis.")) return { kind: "answer", answer: unknownTool(call) }; // the gateway's own tools are answered before this path
  if (!grantAllowsTool(call.principal, call.exposedName)) {
    return {
      kind: "refused",
      refusal: {
        check: "grant",
        reason: `tool "${call.exposedName}" is outside the grant of ${call.principal.sub}; it cannot be listed or called with this grant`,
      },
    };
  }
  let target: Awaited<ReturnType<ToolCatalog["resolve"]>>;
  try {
    target = await deps.catalog.resolve(call.exposedName);
  } catch (e) {
    // An upstream that cannot even list its tools answers as it would to the call itself.
    if (e instanceof CatalogUnreadable) return { kind: "answer", answer: notAnswered(call, e.leg) };
    throw new StepFailed("resolve", e);
  }
  if (!target || !toolAllowed(target.upstream, target.tool.name)) return { kind: "answer", answer: unknownTool(call) };
  const t = target;

  // 5 kill switch
  const halted = haltFor(await step("kill_switch", () => deps.killSwitch.read()), call, t.upstream);
  if (halted) return { kind: "refused", refusal: halted };

  // 6 classify: mapping → name/annotation heuristic → conservative default.
  const mapping = await step("classify", () => deps.mappings.get(t.upstream.name, t.tool.name));
  const classification = await step("classify", () => classifyTool(t, deps.mappings));

  // 7 validate: arguments against inputSchema; drift against the mapping's pinned schema hash.
  const invalid = await step("validate", () => validateCall(t, call.arguments, mapping));
  if (invalid && deps.policy.mode === "enforce") return { kind: "refused", refusal: invalid };

  // 8 decide: the history the policy needs, then the policy (pure), then what must hold before dispatch.
  const now = deps.clock();
  const facts = { call, target: t, classification, mapping, now };
  const queries = await step("policy", () => deps.policy.queries(facts));
  const history = queries.length
    ? await step("history", () => deps.history.snapshot(call.principal.sub, call.principal.jti, call.runId, queries, now))
    : NO_HISTORY_ANSWERS;
  let decision = await step("policy", () => deps.policy.decide({ ...facts, history }));
  if (invalid) decision = violation(decision, invalid);
  if (decision.decision === "deny") {
    return {
      kind: "refused",
      // The check that refused: a policy rule, or the baseline (no rule matched: an unclassified tool).
      refusal: {
        check: decision.rule ? "rule" : "baseline",
        reason: decision.reason,
        rule: decision.rule,
        ...(decision.owner ? { owner: decision.owner } : {}),
      },
    };
  }
  const rateQueries = obligationQueries(decision.obligations, call.exposedName);
  const rates = rateQueries.length
    ? await step("history", () => deps.history.snapshot(call.principal.sub, call.principal.jti, call.runId, rateQueries, now))
    : NO_HISTORY_ANSWERS;
  const dispatchFacts = { exposedName: call.exposedName, history: rates };
  const unmet = checkBeforeDispatch(decision.obligations, decision.mode, dispatchFacts);
  if (unmet) return { kind: "refused", refusal: unmet };
  const problems = obligationProblems(decision.obligations, dispatchFacts);
  if (problems.length) {
    // observe/advise: an obligation that cannot be met is recorded, and not applied.
    // (each problem's reason quotes its obligation's spec).
    decision = violation(decision, problems[0]!);
    decision = { ...decision, obligations: decision.obligations.filter((o) => !problems.some((p) => p.reason.includes(`"${o.spec}"`))) };
  }
  return { kind: "proceed", target: t, classification, mapping, decision };
}

/** Steps 4–14 for one tools/call. */
export async function governToolCall(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  try {
    return await governedSteps(deps, call);
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    const refusal: Refusal = { check: e.step, reason: `${e.message}; the call was refused to fail closed` };
    const id = await deps.ledger.blocked(call, refusal).catch(() => null);
    return refused(call, refusal, id);
  }
}

async function governedSteps(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  const verdict = await decideCall(deps, call);
  if (verdict.kind === "answer") return verdict.answer;
  if (verdict.kind === "refused") return block(deps, call, verdict.refusal);
  const { target, classification, mapping } = verdict;
  let decision = verdict.decision;

  // 8 (end) budgets: admitted into history atomically, so no reconnect or new session escapes a limit.
  const callId = crypto.randomUUID();
  const limits = deps.policy.limits(call);
  if (deps.policy.usesHistory || limits.grantCalls !== undefined || limits.runCalls !== undefined) {
    const entry = {
      callId,
      principal: call.principal.sub,
      ...(call.principal.jti ? { jti: call.principal.jti } : {}),
      runId: call.runId,
      exposedName: call.exposedName,
      numbers: numbersOf(call.arguments),
      at: deps.clock(),
    };
    const admitted = await step("budget", () => deps.history.admit(entry, decision.mode === "enforce" ? limits : {}));
    if (!admitted.ok) {
      return block(deps, call, { check: "budget", reason: `the ${admitted.budget} budget is spent: ${admitted.used} of ${admitted.limit} calls` });
    }
    if (decision.mode !== "enforce" && !decision.wouldBlock) {
      const over = await step("budget", () => overBudget(deps, call, limits));
      if (over) decision = violation(decision, over);
    }
  }

  // 9 hold
  const hold = await step("hold", () => holdFor(deps.holds, call, target, decision));
  if (!hold.proceed) return block(deps, call, hold.refusal);

  // 10 write-ahead: the decision is durable before anything reaches the upstream.
  const receipt = await step("ledger", () =>
    deps.ledger.decision({
      principal: call.principal.sub,
      team: call.principal.team,
      runId: call.runId,
      upstream: target.upstream.name,
      tool: target.tool.name,
      arguments: call.arguments,
      argumentsKept: fullAudit(decision.obligations) ? "full" : (mapping?.arguments ?? "hashed"),
      classification,
      decision,
      ...(hold.holdId ? { holdId: hold.holdId } : {}),
    }),
  );

  // 11 forward: the leg never throws; the mapping's timeout and (safe effects only) retries apply.
  const started = deps.clock();
  const leg = await forwardWithRetry(deps, target, mapping, upstreamRequest(call, target.tool.name, decision));
  const durationMs = deps.clock() - started;
  if (leg.kind !== "answered") {
    await step("ledger", () =>
      deps.ledger.outcome({
        decision: receipt,
        status: leg.kind === "failed" ? "failed" : "uncertain",
        answer: null,
        durationMs,
        obligationsApplied: [],
        reason: leg.reason,
      }),
    );
    await deps.history.settle(call.principal.sub, callId, leg.kind === "failed" ? "failed" : "uncertain").catch(() => undefined);
    return notAnswered(call, leg);
  }

  // 12 obligations
  const shaped = await step("obligations", () => applyResultObligations(decision.obligations, leg.response));

  // 13 outcome: durable before the agent sees the result (with where it broke its outputSchema, if it did).
  const status = shaped.ok ? outcomeOf(leg.response) : "failed";
  const outputProblems = leg.response.result && !leg.response.result.isError ? validateOutput(target, leg.response.result.structuredContent) : [];
  const outcome = await step("ledger", () =>
    deps.ledger.outcome({
      decision: receipt,
      status,
      answer: leg.response,
      durationMs,
      obligationsApplied: shaped.ok ? shaped.applied : [],
      ...(outputProblems.length ? { outputProblems } : {}),
      ...(shaped.ok ? {} : { reason: shaped.refusal.reason }),
    }),
  );
  if (deps.policy.usesHistory) await deps.history.settle(call.principal.sub, callId, status).catch(() => undefined);
  if (!shaped.ok) return refused(call, shaped.refusal);

  // 14 answer: the upstream's result, changed only by obligations (and advise's advisory), plus the receipt.
  return { response: withReceipt(withAdvisory(shaped.response, decision), outcome ?? receipt), status: leg.status };
}

async function block(deps: GovernanceDeps, call: ToolCall, refusal: Refusal): Promise<Answer> {
  const id = await step("ledger", () => deps.ledger.blocked(call, refusal));
  return refused(call, refusal, id);
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

/** The leg with the mapping's timeout; failures of read_only / idempotent tools retried with exponential backoff. */
async function forwardWithRetry(deps: GovernanceDeps, target: Target, mapping: ToolMapping | undefined, request: JsonRpcRequest): Promise<LegResult> {
  const t = mapping?.timeoutMs ? { ...target, upstream: { ...target.upstream, timeoutMs: mapping.timeoutMs } } : target;
  const retryable = mapping?.retry && (mapping.effect === "read_only" || mapping.effect === "idempotent") ? mapping.retry : null;
  let leg = await deps.upstream.call(t, request);
  for (let attempt = 1; retryable && attempt <= retryable.attempts && leg.kind !== "answered" && !(leg.kind === "failed" && leg.auth); attempt++) {
    await new Promise((r) => setTimeout(r, Math.min(retryable.backoffMs * 2 ** (attempt - 1), 30_000)));
    leg = await deps.upstream.call(t, request);
  }
  return leg;
}

/** What `portcullis.preview_impact` and `POST /v1/preview` report: the verdict of steps 4–9, with nothing executed or recorded. */
export interface Preview {
  outcome: "allowed" | "held" | "blocked" | "unknown_tool";
  check?: string;
  rule: string | null;
  reason: string;
  obligations: string[];
  mode?: string;
  policyVersion?: string;
  classification?: Classification;
  wouldBlock?: Decision["wouldBlock"];
}

/**
 * Would this call be allowed, held or blocked, by which rule, with which obligations? Runs
 * steps 4–8 as the call would (history is read, never written) and executes nothing: no ledger
 * record, no history, no hold, nothing upstream. Budgets are checked when the call is made.
 */
export async function previewToolCall(deps: GovernanceDeps, call: ToolCall): Promise<Preview> {
  let v: Verdict;
  try {
    v = await decideCall(deps, call);
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    return { outcome: "blocked", check: e.step, rule: null, reason: `${e.message}; the call would be refused to fail closed`, obligations: [] };
  }
  if (v.kind === "answer")
    return { outcome: "unknown_tool", rule: null, reason: `no tool named ${call.exposedName} is available to this grant`, obligations: [] };
  if (v.kind === "refused") return { outcome: "blocked", check: v.refusal.check, rule: v.refusal.rule ?? null, reason: v.refusal.reason, obligations: [] };
  const d = v.decision;
  return {
    outcome: d.decision === "require_approval" ? "held" : "allowed",
    rule: d.rule,
    reason: d.reason,
    obligations: d.obligations.map((o) => o.spec),
    mode: d.mode,
    policyVersion: d.policyVersion,
    classification: v.classification,
    ...(d.wouldBlock ? { wouldBlock: d.wouldBlock } : {}),
  };
}

/** A request that reaches a tool without naming one: tasks/* delivering a result, or an unknown method forwarded verbatim. */
export interface PassThrough {
  call: ToolCall;
  /** The upstream it goes to (already routed by task id, or the one transparent upstream). */
  upstream: import("../config/load.ts").UpstreamConfig;
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
