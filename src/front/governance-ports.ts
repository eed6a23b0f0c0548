/**
 * The ports the governed path is handed for one caller (src/governance/call.ts GovernanceDeps),
 * built from its CallContext: the tool catalog, the kill switch, mappings and policy, the hold
 * store, the ledger, history and the forward step. Owns how the forward step is composed (the
 * leg, the in-flight halt watch, task ownership). Must never: hand governance another caller's
 * store, or a port that turns "cannot answer" into "allow" (absent stores throw).
 */
import type { GovernanceDeps } from "../governance/call-decide.ts";
import { mappingsOf, policyEngine } from "../governance/engine.ts";
import { type HistoryStore, NO_HOLDS, type UpstreamLeg } from "../governance/steps.ts";
import type { CallRounds, RoundState } from "../governance/round-steps.ts";
import { ledgerSigning, outcomeBody, outcomeMetrics } from "../ports/ledger-writer.ts";
import { bindingDigest, isRoundToken, openRoundToken, type RoundExpiry, type RoundsApi } from "../upstream/rounds.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import type { KillSwitchReader } from "../governance/halts.ts";
import { holdStore } from "../ports/hold-store.ts";
import { haltableLeg } from "../ports/killswitch-client.ts";
import { recordCreatedTasks } from "../ports/task-owners.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { callLeg } from "../upstream/forward.ts";
import { toolCatalog } from "../upstream/tool-catalog.ts";

/** History is reached only when the policy needs it; a context without a store fails those calls closed. */
const NO_HISTORY_STORE: HistoryStore = {
  snapshot: async () => {
    throw new Error("no history store on this route");
  },
  admit: async () => {
    throw new Error("no history store on this route");
  },
  settle: async () => undefined,
};

/** A context without a kill switch refuses every governed call (fail closed). */
const NO_KILL_SWITCH: KillSwitchReader = {
  read: async () => {
    throw new Error("no kill switch on this route");
  },
};

/**
 * What governance is handed for this caller (GovernanceDeps): its catalog, the kill switch, the
 * config's mappings and compiled policy, its team's holds, its ledger chain, its history, and the
 * forward step (`governedUpstream`). Each is this caller's own; a store the context lacks fails
 * closed.
 */
export function governance(ctx: CallContext): GovernanceDeps {
  const killSwitch = ctx.stores.killSwitch?.() ?? NO_KILL_SWITCH;
  const holdsApi = ctx.stores.holds?.();
  return {
    catalog: toolCatalog(ctx),
    killSwitch,
    mappings: mappingsOf(ctx.cfg),
    policy: policyEngine(ctx.cfg),
    holds: holdsApi ? holdStore(ctx, holdsApi) : NO_HOLDS,
    ledger: ctx.stores.ledger,
    history: ctx.stores.history?.() ?? NO_HISTORY_STORE,
    upstream: governedUpstream(ctx, killSwitch),
    clock: Date.now,
    ...(ctx.legs.rounds ? { rounds: callRounds(ctx) } : {}),
  };
}

/**
 * A governed call's input rounds over its RoundsDO (src/upstream/rounds.ts): the token checked
 * against this caller and call, governance's state kept with the parked call between rounds,
 * and the uncertain outcome the object records if the client never completes a round.
 */
function callRounds(ctx: CallContext): CallRounds {
  const secret = ctx.cfg.auth.signingKeySecret;
  const sub = ctx.principal.sub;
  const object = () => ctx.legs.rounds?.<RoundsApi>() ?? null;
  return {
    carries: (call) => isRoundToken(call.request.params?.requestState),
    async continuation(call, target) {
      const digest = await bindingDigest({
        principal: sub,
        upstream: target.upstream.name,
        method: "tools/call",
        name: target.tool.name,
        arguments: call.arguments,
      });
      const opened = openRoundToken(secret, String(call.request.params?.requestState), digest);
      if (!opened) return { ok: false, reason: "is not one Portcullis issued for this call and caller, or it was altered" };
      const state = await object()?.peek(opened.id, sub, digest, opened.n);
      if (!state) return { ok: false, reason: "names an input round that has ended, was answered already, or is not this caller's" };
      return { ok: true, ref: { id: opened.id, n: opened.n, digest, asks: {} }, state: state as unknown as RoundState };
    },
    async park(ref, state, abandoned) {
      const obj = object();
      if (!obj) throw new Error("no object for input rounds here");
      const metrics = outcomeMetrics(abandoned);
      const expiry: RoundExpiry = {
        chain: ctx.principal.team,
        signing: ledgerSigning(ctx.cfg),
        draft: { kind: "outcome", body: outcomeBody(abandoned), ...(metrics ? { metrics: metrics as unknown as JsonObject } : {}) },
      };
      if (!(await obj.keep(ref.id, sub, ref.digest, ref.n, state as unknown as JsonObject, expiry)))
        throw new Error("the input round ended before it was kept");
    },
    async cancel(ref, reason) {
      await object()?.cancel(ref.id, sub, ref.digest, reason);
    },
  };
}

/**
 * Step 11, the forward, as governance calls it: the request goes to the target's upstream on
 * this caller's leg (upstream/forward.ts callLeg), under the kill switch's in-flight watch (a halt
 * that lands while it runs cancels it upstream: ports/killswitch-client.ts haltableLeg), and a
 * task the upstream creates is recorded as this caller's before governance, and so the client,
 * sees the result (ports/task-owners.ts recordCreatedTasks); any other result goes by untouched.
 */
function governedUpstream(ctx: CallContext, killSwitch: KillSwitchReader): UpstreamLeg {
  return {
    call: (target, request, call) => {
      const up = target.upstream;
      const send = async (c: CallContext) => recordCreatedTasks(c, up, request, await callLeg(c, up, request), (r) => callLeg(c, up, r));
      return call ? haltableLeg(ctx, killSwitch, call, up, send, target.tool.name) : send(ctx);
    },
  };
}
