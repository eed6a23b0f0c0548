/**
 * Steps 4–8 of a governed tools/call — resolve → kill switch → classify → validate → decide
 * (history, policy, obligations that must hold before dispatch) — with no side effect (no ledger
 * record, no history written, nothing upstream), shared by the call itself (call.ts goes on from
 * the verdict) and by `previewToolCall`. Also the collaborators the path is handed
 * (`GovernanceDeps`). Must never: write anything, or turn a step that could not answer into a
 * verdict other than a refusal.
 */
import type { ToolCatalog } from "./catalog-entry.ts";
import { type Answer, notAnswered, StepFailed, step, unknownTool } from "./call-answers.ts";
import { classifyTool } from "./classify.ts";
import { grantAllowsTool, toolAllowed } from "./grant-scope.ts";
import { obligationFailures, obligationQueries } from "./obligations.ts";
import {
  CatalogUnreadable,
  type Classification,
  type Decision,
  type HistorySnapshot,
  type HistoryStore,
  type HoldStore,
  type LedgerWriter,
  type Mappings,
  type Policy,
  type Refusal,
  type Target,
  type ToolCall,
  type UpstreamLeg,
} from "./steps.ts";
import type { CallRounds } from "./round-steps.ts";
import { haltFor, type KillSwitchReader } from "./halts.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";
import { validateCall } from "./validate.ts";

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
  /** Input rounds of calls on legacy upstreams for modern clients (absent: no call is ever continued). */
  rounds?: CallRounds;
}

const NO_HISTORY_ANSWERS: HistorySnapshot = { answers: {} };

/** Steps 4–8 decided a call: it may go on (to hold, write-ahead and forward), or it was refused, or it gets a fixed answer. */
export type Verdict =
  | { kind: "answer"; answer: Answer }
  | { kind: "refused"; refusal: Refusal }
  | { kind: "proceed"; target: Target; classification: Classification; mapping: ToolMapping | undefined; decision: Decision };

/** A violation that enforce refuses; in observe and advise it only joins the decision as what enforce would have done. */
export function violation(decision: Decision, r: Refusal): Decision {
  if (decision.mode === "enforce" || decision.wouldBlock) return decision;
  return { ...decision, wouldBlock: { rule: r.rule ?? null, reason: `${r.check}: ${r.reason}`, decision: "deny" } };
}

/**
 * Steps 4–8 for one tools/call: resolve → kill switch → classify → validate → decide (history,
 * policy, obligations that must hold before dispatch). Side-effect free (no ledger, no history
 * write): `governToolCall` goes on from here, and `previewToolCall` reports it.
 */
export async function decideCall(deps: GovernanceDeps, call: ToolCall): Promise<Verdict> {
  // 4 resolve: the grant first (same answer whether or not the tool exists), then the catalog.
  // A `portcullis.` name outside the grant is refused like any other: the gateway's agent tools are grant-scoped (agent-tools.ts).
  if (!grantAllowsTool(call.principal, call.exposedName)) {
    return {
      kind: "refused",
      refusal: {
        check: "grant",
        reason: `tool "${call.exposedName}" is outside the grant of ${call.principal.sub}; it cannot be listed or called with this grant`,
      },
    };
  }
  if (call.exposedName.startsWith("portcullis.")) return { kind: "answer", answer: unknownTool(call) }; // the gateway's own tools are answered before this path
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
  const halted = haltFor(await step("kill_switch", () => deps.killSwitch.read()), call, t.upstream, t.tool.name);
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
  // Rate limits count calls to this tool by its stable identity: a rename under the agent does not reset them.
  const identity = { upstream: t.upstream.name, tool: t.tool.name };
  const rateQueries = obligationQueries(decision.obligations, identity);
  const rates = rateQueries.length
    ? await step("history", () => deps.history.snapshot(call.principal.sub, call.principal.jti, call.runId, rateQueries, now))
    : NO_HISTORY_ANSWERS;
  const failures = obligationFailures(decision.obligations, { exposedName: call.exposedName, identity, history: rates });
  // enforce: the first failure refuses the call before dispatch.
  if (failures.length && decision.mode === "enforce") return { kind: "refused", refusal: failures[0]!.refusal };
  if (failures.length) {
    // observe/advise: an obligation that cannot be met is recorded, and not applied (that obligation, by identity).
    decision = violation(decision, failures[0]!.refusal);
    const failed = new Set(failures.map((f) => f.obligation));
    decision = { ...decision, obligations: decision.obligations.filter((o) => !failed.has(o)) };
  }
  return { kind: "proceed", target: t, classification, mapping, decision };
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
