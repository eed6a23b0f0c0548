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
import { grantAllowsTool, toolAllowed } from "./grant-scope.ts";
import {
  applyObligations,
  CatalogUnreadable,
  classify,
  haltFor,
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
  type ToolCall,
  type UpstreamLeg,
  validateArguments,
} from "./steps.ts";

export interface GovernanceDeps {
  catalog: ToolCatalog;
  killSwitch: KillSwitchReader;
  mappings: Mappings;
  policy: Policy;
  holds: HoldStore;
  ledger: LedgerWriter;
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
  constructor(
    readonly step: string,
    cause: unknown,
  ) {
    super(`the ${step} step could not answer (${cause instanceof Error ? cause.message : String(cause)})`);
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
/** A refusal is a tool result the model can read (isError), never a protocol error. */
const refused = (call: ToolCall, r: Refusal): Answer =>
  result(call, { content: [{ type: "text", text: `Portcullis denied this call: ${r.reason}` }], isError: true });
/** A leg that did not answer: auth problems are readable isError results; the rest JSON-RPC errors naming the upstream. */
function notAnswered(call: ToolCall, leg: Exclude<LegResult, { kind: "answered" }>): Answer {
  if (leg.kind === "failed" && leg.auth) return result(call, { content: [{ type: "text", text: leg.reason }], isError: true });
  const text = leg.kind === "uncertain" ? `${leg.reason}; the call may or may not have run upstream` : leg.reason;
  return { response: errorResponse(call.request.id, ErrorCode.InternalError, text), status: 200 };
}

/** The client's request with the upstream's own tool name. */
function upstreamRequest(call: ToolCall, toolName: string): JsonRpcRequest {
  return { ...call.request, params: { ...(call.request.params ?? {}), name: toolName } };
}

/** The receipt rides in the result's `_meta`; everything else is the upstream's, unchanged. */
function withReceipt(response: JsonRpcResponse, receipt: Receipt | null): JsonRpcResponse {
  if (!receipt || !response.result) return response;
  const meta = { ...((response.result._meta as JsonObject | undefined) ?? {}), [RECEIPT_META]: { ...receipt } };
  return { ...response, result: { ...response.result, _meta: meta } };
}

/** Steps 4–14 for one tools/call. */
export async function governToolCall(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  try {
    return await governedSteps(deps, call);
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    const refusal: Refusal = { check: e.step, reason: `${e.message}; the call was refused to fail closed` };
    await deps.ledger.blocked(call, refusal).catch(() => undefined);
    return refused(call, refusal);
  }
}

async function governedSteps(deps: GovernanceDeps, call: ToolCall): Promise<Answer> {
  // 4 resolve: the grant first (same answer whether or not the tool exists), then the catalog.
  if (call.exposedName.startsWith("portcullis.")) return unknownTool(call); // operator tools live on /operator/mcp only
  if (!grantAllowsTool(call.principal, call.exposedName)) {
    const refusal = {
      check: "grant",
      reason: `tool "${call.exposedName}" is outside the grant of ${call.principal.sub}; it cannot be listed or called with this grant`,
    };
    await step("ledger", () => deps.ledger.blocked(call, refusal));
    return refused(call, refusal);
  }
  let target: Awaited<ReturnType<ToolCatalog["resolve"]>>;
  try {
    target = await deps.catalog.resolve(call.exposedName);
  } catch (e) {
    // An upstream that cannot even list its tools answers as it would to the call itself.
    if (e instanceof CatalogUnreadable) return notAnswered(call, e.leg);
    throw new StepFailed("resolve", e);
  }
  if (!target || !toolAllowed(target.upstream, target.tool.name)) return unknownTool(call);

  // 5 kill switch
  const halted = haltFor(await step("kill_switch", () => deps.killSwitch.read()), call, target.upstream);
  if (halted) return block(deps, call, halted);

  // 6 classify
  const classification = await step("classify", () => classify(target, deps.mappings));

  // 7 validate
  const invalid = await step("validate", () => validateArguments(target, call.arguments, deps.mappings));
  if (invalid) return block(deps, call, invalid);

  // 8 decide
  const decision = await step("policy", () => deps.policy.decide({ call, target, classification }));
  if (decision.decision === "deny" && decision.mode === "enforce") return block(deps, call, { check: "policy", reason: decision.reason });

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
      classification,
      decision,
      ...(hold.holdId ? { holdId: hold.holdId } : {}),
    }),
  );

  // 11 forward: the leg never throws.
  const started = deps.clock();
  const leg = await deps.upstream.call(target, upstreamRequest(call, target.tool.name));
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
    return notAnswered(call, leg);
  }

  // 12 obligations
  const shaped = await step("obligations", () => applyObligations(decision.obligations, leg.response));

  // 13 outcome: durable before the agent sees the result.
  const status = shaped.ok ? outcomeOf(leg.response) : "failed";
  const outcome = await step("ledger", () =>
    deps.ledger.outcome({
      decision: receipt,
      status,
      answer: leg.response,
      durationMs,
      obligationsApplied: shaped.ok ? shaped.applied : [],
      ...(shaped.ok ? {} : { reason: shaped.refusal.reason }),
    }),
  );
  if (!shaped.ok) return refused(call, shaped.refusal);

  // 14 answer: the upstream's result, changed only by obligations, plus the receipt.
  return { response: withReceipt(shaped.response, outcome ?? receipt), status: leg.status };
}

async function block(deps: GovernanceDeps, call: ToolCall, refusal: Refusal): Promise<Answer> {
  await step("ledger", () => deps.ledger.blocked(call, refusal));
  return refused(call, refusal);
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
