/**
 * A later round of a governed tools/call parked on a legacy upstream (its requestState is a round
 * token of the gateway's, src/upstream/rounds.ts): decided, admitted and held in its first round,
 * it is not again; the grant, the catalog and the kill switch are checked again, the token must
 * hold for this caller and call, and then the leg resumes the parked call and the call settles
 * (call-settle.ts). Must never: forward a continuation whose token does not hold, or one a halt
 * covers (that halt ends the parked call upstream and on the record).
 */
import { ErrorCode, errorResponse } from "../wire/jsonrpc.ts";
import { type Answer, step, unknownTool, upstreamRequest } from "./call-answers.ts";
import type { GovernanceDeps } from "./call-decide.ts";
import { block, settle } from "./call-settle.ts";
import { grantAllowsTool, toolAllowed } from "./grant-scope.ts";
import { haltFor } from "./halts.ts";
import type { Refusal, ToolCall } from "./steps.ts";
import type { CallRounds } from "./round-steps.ts";

/**
 * A call that continues a parked one (its requestState is a round token of the gateway's): the
 * decision was made in its first round, so it is neither decided, admitted nor held again. The
 * tool is resolved again (the catalog may have changed), the token must hold for this caller and
 * call and name the current round, and the kill switch is read again; then the leg resumes the
 * parked call with the client's answers, and the call settles as any other.
 */
export async function continueRounds(deps: GovernanceDeps, rounds: CallRounds, call: ToolCall): Promise<Answer> {
  // 4 resolve: the grant, then the catalog as it is now.
  if (!grantAllowsTool(call.principal, call.exposedName)) {
    return block(deps, call, { check: "grant", reason: `tool "${call.exposedName}" is outside the grant of ${call.principal.sub}` });
  }
  const target = await step("resolve", () => deps.catalog.resolve(call.exposedName));
  if (!target || !toolAllowed(target.upstream, target.tool.name)) return unknownTool(call);
  // The round: its token holds for this caller and call, and its call is still parked at that round.
  const cont = await step("round", () => rounds.continuation(call, target));
  if (!cont.ok) {
    const refusal: Refusal = { check: "round", reason: `requestState ${cont.reason}` };
    const id = await deps.ledger.blocked(call, refusal).catch(() => null);
    const data = id ? { "portcullis/blocked": id } : undefined;
    return {
      response: errorResponse(call.request.id, ErrorCode.InvalidParams, `Invalid params: ${refusal.reason}; nothing was sent upstream`, data),
      status: call.era === "modern" ? 400 : 200,
    };
  }
  // 5 kill switch: a halt that landed between rounds ends the call here, and upstream.
  const halted = haltFor(await step("kill_switch", () => deps.killSwitch.read()), call, target.upstream, target.tool.name);
  if (halted) {
    await rounds.cancel(cont.ref, halted.reason).catch(() => undefined);
    await step("ledger", () =>
      deps.ledger.outcome({
        decision: cont.state.receipt,
        status: "uncertain",
        answer: null,
        durationMs: deps.clock() - cont.state.startedAt,
        obligationsApplied: [],
        reason: `halted between input rounds (${halted.reason}); the upstream request was cancelled`,
        ...(call.trace ? { traceId: call.trace.traceId } : {}),
      }),
    );
    return block(deps, call, halted);
  }
  // 11 forward: the parked call goes on with the client's answers.
  const executing = deps.clock();
  const leg = await deps.upstream.call(target, upstreamRequest(call, target.tool.name, cont.state.decision), call);
  return settle(deps, call, target, cont.state, executing, leg, undefined);
}
