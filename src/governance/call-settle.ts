/**
 * How a governed tools/call settles once its upstream leg has come back (steps 12–14 of
 * docs/architecture.md, after call.ts's forward): the next input round of a call parked on a legacy
 * upstream (on the record as `call.round`, its state kept with the parked call), or the outcome —
 * failed or uncertain as the leg says, else obligations on the result, the outcome record, and the
 * answer with its receipt — and the blocked record of a refusal. Shared by the first round
 * (call.ts) and later ones (call-rounds.ts). Must never: answer before the outcome (or the round)
 * is recorded, or leave a round parked that governance could not keep.
 */
import { applyResultObligations } from "./obligations-shape.ts";
import { type Answer, notAnswered, refused, step, withAdvisory, withReceipt } from "./call-answers.ts";
import type { GovernanceDeps } from "./call-decide.ts";
import { type LegResult, type OutcomeRecord, outcomeOf, type Refusal, type Target, type ToolCall } from "./steps.ts";
import type { RoundState } from "./round-steps.ts";
import { validateOutput } from "./validate.ts";

/**
 * Steps 12–14 (or the next input round) for a call whose leg has answered or failed: `state` is
 * the call's one decision and what settling it needs (kept between rounds), `executing` when the
 * gateway took up this request's part of it.
 */
export async function settle(
  deps: GovernanceDeps,
  call: ToolCall,
  target: Target,
  state: RoundState,
  executing: number,
  leg: LegResult,
  lostConnection: string | undefined,
): Promise<Answer> {
  const { receipt, decision } = state;
  const durationMs = deps.clock() - state.startedAt;
  const metricsOf = (upstreamMs: number): NonNullable<OutcomeRecord["metrics"]> => gatewayMetrics(deps, target, state.beforeHoldMs, executing, upstreamMs);
  // An input round: the upstream asked the client something; the call goes on when the client
  // answers. The round is on the record before the client sees it; no outcome yet.
  if (leg.kind === "answered" && leg.round && deps.rounds) {
    const answered = Object.keys(
      call.request.params?.inputResponses && typeof call.request.params.inputResponses === "object" ? call.request.params.inputResponses : {},
    );
    await step("ledger", async () => {
      await deps.ledger.round?.({
        decision: receipt,
        round: leg.round!.n,
        asks: leg.round!.asks,
        answered,
        ...(call.trace ? { traceId: call.trace.traceId } : {}),
      });
    });
    const abandoned: OutcomeRecord = {
      decision: receipt,
      status: "uncertain",
      answer: null,
      durationMs,
      obligationsApplied: [],
      reason: "the client did not complete an input round in time; the upstream request was cancelled",
      ...(call.trace ? { traceId: call.trace.traceId } : {}),
      metrics: metricsOf(durationMs),
    };
    const rounds = deps.rounds;
    const ref = leg.round;
    // A round whose state cannot be kept is ended upstream too: nothing is left parked unrecorded.
    await step("round", () => rounds.park(ref, state, abandoned)).catch(async (e: unknown) => {
      await rounds.cancel(ref, "the gateway could not keep the input round").catch(() => undefined);
      throw e;
    });
    return { response: withReceipt(leg.response, receipt), status: leg.status };
  }
  // The outcome says so when the answer (or failure) came from that one extra attempt.
  const retried = lostConnection === undefined ? undefined : `after one retry: the first attempt's connection was lost (${lostConnection})`;
  if (leg.kind !== "answered") {
    await step("ledger", () =>
      deps.ledger.outcome({
        decision: receipt,
        status: leg.kind === "failed" ? "failed" : "uncertain",
        answer: null,
        durationMs,
        obligationsApplied: [],
        reason: retried ? `${leg.reason} (${retried})` : leg.reason,
        ...(call.trace ? { traceId: call.trace.traceId } : {}),
        metrics: metricsOf(durationMs),
      }),
    );
    if (state.admitted) await deps.history.settle(call.principal.sub, state.callId, leg.kind === "failed" ? "failed" : "uncertain").catch(() => undefined);
    return notAnswered(call, leg);
  }

  // 12 obligations
  const shaped = await step("obligations", () => applyResultObligations(decision.obligations, leg.response));

  // 13 outcome: durable before the agent sees the result (with where it broke its outputSchema, if it did).
  const status = shaped.ok ? outcomeOf(leg.response) : "failed";
  const reason = shaped.ok ? (retried ? `answered ${retried}` : undefined) : retried ? `${shaped.refusal.reason} (answered ${retried})` : shaped.refusal.reason;
  const outputProblems = leg.response.result && !leg.response.result.isError ? validateOutput(target, leg.response.result.structuredContent) : [];
  const outcome = await step("ledger", () =>
    deps.ledger.outcome({
      decision: receipt,
      status,
      answer: leg.response,
      durationMs,
      obligationsApplied: shaped.ok ? shaped.applied : [],
      ...(outputProblems.length ? { outputProblems } : {}),
      ...(reason !== undefined ? { reason } : {}),
      ...(call.trace ? { traceId: call.trace.traceId } : {}),
      metrics: metricsOf(durationMs),
    }),
  );
  // A success matters to history queries (`succeeded`), not to budgets, which count every admitted call.
  if (state.recorded) await deps.history.settle(call.principal.sub, state.callId, status).catch(() => undefined);
  if (!shaped.ok) return refused(call, shaped.refusal);

  // 14 answer: the upstream's result, changed only by obligations (and advise's advisory), plus the receipt.
  return { response: withReceipt(withAdvisory(shaped.response, decision), outcome ?? receipt), status: leg.status };
}

/**
 * What the outcome's metric rollups need: the upstream and its tool, and the gateway's own time —
 * its steps before the hold, then from the write-ahead to now less the upstream's time (a hold's
 * wait for a person is not the gateway's).
 */
function gatewayMetrics(
  deps: GovernanceDeps,
  target: Target,
  beforeHoldMs: number | undefined,
  executing: number,
  upstreamMs: number,
): NonNullable<OutcomeRecord["metrics"]> {
  const m: NonNullable<OutcomeRecord["metrics"]> = { upstream: target.upstream.name, tool: target.tool.name };
  if (beforeHoldMs !== undefined) m.gatewayMs = beforeHoldMs + Math.max(0, deps.clock() - executing - upstreamMs);
  return m;
}

export async function block(deps: GovernanceDeps, call: ToolCall, refusal: Refusal): Promise<Answer> {
  const id = await step("ledger", () => deps.ledger.blocked(call, refusal));
  return refused(call, refusal, id);
}
