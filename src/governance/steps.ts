/**
 * The steps of a governed tools/call (DESIGN.md, request path 5–13), each with the signature it
 * keeps, and the collaborators each is handed (kill-switch state, mappings, policy, hold store,
 * ledger, upstream leg). Steps whose issue has not landed yet are explicit pass-throughs here —
 * `NO_HALTS`, `NO_MAPPINGS`, `OPEN_POLICY`, `NO_HOLDS` and `validateArguments` — which [G] and
 * [H] replace with the real thing behind the same signatures. The ledger is src/mcp/ledger-writer.ts;
 * `NO_LEDGER` remains for tests that exercise the path without one.
 * Must never: reach for storage, a clock or the network itself (all are handed in), or turn a
 * failure into "allow": a step that cannot answer throws, and call.ts refuses the call.
 */
import type { UpstreamConfig } from "../config/load.ts";
import type { Principal } from "../config/principal.ts";
import type { JsonObject, JsonRpcRequest, JsonRpcResponse } from "../wire/jsonrpc.ts";
import type { CatalogTool } from "./catalog.ts";

/** What the agent asked for, as the front received it. */
export interface ToolCall {
  principal: Principal;
  /** The client's era: protocol errors are 400 for modern clients. */
  era: "legacy" | "modern";
  /** The client's own JSON-RPC request (name as exposed; params, `_meta` and all). */
  request: JsonRpcRequest;
  exposedName: string;
  /** `params.arguments` when it is an object. */
  arguments: JsonObject | undefined;
  /** The run the call belongs to: the legacy session id or the modern Portcullis-Run-Id. */
  runId: string | null;
}

/** The resolved target: the upstream and the catalog's entry for the tool. */
export interface Target {
  upstream: UpstreamConfig;
  tool: CatalogTool;
}

/** A refusal the model can read; `check` names the step that refused (the ledger's "blocked" record). */
export interface Refusal {
  check: string;
  reason: string;
}

// ---- 5 kill switch ------------------------------------------------------------------------

export type HaltScope = "global" | "team" | "upstream" | "tool" | "principal" | "grant";
export interface Halt {
  scope: HaltScope;
  /** The team, upstream, exposed tool name, principal or grant jti; absent for global. */
  target?: string;
  reason: string;
}
export interface KillSwitchState {
  version: number;
  halts: Halt[];
}
/** Reads the current halts (KillSwitchDO in [H], cached per isolate for at most a second). */
export interface KillSwitchReader {
  read(): Promise<KillSwitchState>;
}
export const NO_HALTS: KillSwitchReader = { read: async () => ({ version: 0, halts: [] }) };

/** The first halt that covers this call, as a refusal; null when nothing is halted for it. */
export function haltFor(state: KillSwitchState, call: ToolCall, upstream: UpstreamConfig): Refusal | null {
  const p = call.principal;
  const covers = (h: Halt): boolean => {
    switch (h.scope) {
      case "global":
        return true;
      case "team":
        return h.target === p.team;
      case "upstream":
        return h.target === upstream.name;
      case "tool":
        return h.target === call.exposedName;
      case "principal":
        return h.target === p.sub;
      case "grant":
        return p.jti !== undefined && h.target === p.jti;
    }
  };
  const h = state.halts.find(covers);
  return h ? { check: "kill_switch", reason: `halted (${h.scope}${h.target ? ` ${h.target}` : ""}): ${h.reason}` } : null;
}

// ---- 6 classify ---------------------------------------------------------------------------

export type Effect = "read_only" | "idempotent" | "reversible" | "irreversible";
export interface Classification {
  effect: Effect;
  blastRadius: "single" | "scoped" | "systemic";
  /** Where the classification came from: a mapping, the name/annotation heuristic, or the default. */
  source: "mapping" | "heuristic" | "default";
}
/** An operator's mapping for one tool (mappings/<upstream>.yaml in [G]). */
export interface ToolMapping {
  effect: Effect;
  blastRadius?: Classification["blastRadius"];
}
export interface Mappings {
  get(upstream: string, tool: string): ToolMapping | undefined;
}
export const NO_MAPPINGS: Mappings = { get: () => undefined };

/** Mapping first; the heuristic comes with [G]; otherwise the conservative default (irreversible, systemic). */
export function classify(target: Target, mappings: Mappings): Classification {
  const m = mappings.get(target.upstream.name, target.tool.name);
  if (m) return { effect: m.effect, blastRadius: m.blastRadius ?? "systemic", source: "mapping" };
  return { effect: "irreversible", blastRadius: "systemic", source: "default" };
}

// ---- 7 validate ---------------------------------------------------------------------------

/** Arguments against the catalog's inputSchema, and schema drift against the mapping's pin. Pass-through until [G]. */
export function validateArguments(_target: Target, _args: JsonObject | undefined, _mappings: Mappings): Refusal | null {
  return null;
}

// ---- 8 decide -----------------------------------------------------------------------------

export type Mode = "enforce" | "advise" | "observe";
export interface Obligation {
  kind: string;
  [k: string]: unknown;
}
export interface Decision {
  decision: "allow" | "deny" | "require_approval";
  /** The rule that decided, or null for the default. */
  rule: string | null;
  reason: string;
  obligations: Obligation[];
  mode: Mode;
  policyVersion: string;
}
export interface DecisionInput {
  call: ToolCall;
  target: Target;
  classification: Classification;
}
/** The operator's policy ([G]: rules, CEL conditions, history, budgets). */
export interface Policy {
  version: string;
  decide(input: DecisionInput): Promise<Decision>;
}
/** No policy configured: every call the grant and the upstream's allow/deny let through is allowed. */
export const OPEN_POLICY: Policy = {
  version: "none",
  decide: async () => ({ decision: "allow", rule: null, reason: "no policy is configured", obligations: [], mode: "enforce", policyVersion: "none" }),
};

// ---- 9 hold -------------------------------------------------------------------------------

export type HoldVerdict = { proceed: true; holdId?: string } | { proceed: false; refusal: Refusal };
/** HoldsDO in [H]: binds an approval to the exact canonical action and consumes it once. */
export interface HoldStore {
  /** An approved, unconsumed hold for this action is consumed (proceed); otherwise one is created or reported. */
  settle(call: ToolCall, target: Target, decision: Decision): Promise<HoldVerdict>;
}
/** Before [H]: there is no approver to ask, so a call that needs approval is refused. */
export const NO_HOLDS: HoldStore = {
  settle: async () => ({ proceed: false, refusal: { check: "hold", reason: "this call needs approval and approvals are not available on this gateway yet" } }),
};

export async function holdFor(holds: HoldStore, call: ToolCall, target: Target, decision: Decision): Promise<HoldVerdict> {
  if (decision.decision !== "require_approval") return { proceed: true };
  return holds.settle(call, target, decision);
}

// ---- 10 write-ahead, 13 outcome -----------------------------------------------------------

/** Where a record landed in the team's chain: goes back to the agent in `_meta`. */
export interface Receipt {
  chain: string;
  seq: number;
  hash: string;
  /** The id of the call's decision record (wire name: it travels as is in `_meta`). */
  decision_id: string;
}
export interface DecisionRecord {
  principal: string;
  team: string;
  runId: string | null;
  upstream: string;
  tool: string;
  /** The call's arguments; the ledger keeps them as the mapping says (canonical, hashed or redacted). */
  arguments: JsonObject | undefined;
  classification: Classification;
  decision: Decision;
  holdId?: string;
}
export type OutcomeStatus = "succeeded" | "failed" | "uncertain";
export interface OutcomeRecord {
  decision: Receipt | null;
  status: OutcomeStatus;
  /** What the upstream answered (its hash is recorded, never the content); null when nothing came back. */
  answer: JsonRpcResponse | null;
  durationMs: number;
  obligationsApplied: string[];
  reason?: string;
}
/** LedgerDO in [L]: a decision is durable before forwarding, an outcome before the agent sees it. */
export interface LedgerWriter {
  decision(record: DecisionRecord): Promise<Receipt | null>;
  outcome(record: OutcomeRecord): Promise<Receipt | null>;
  blocked(call: ToolCall, refusal: Refusal): Promise<void>;
}
/** A ledger that records nothing and gives no receipt (tests of the path without storage). */
export const NO_LEDGER: LedgerWriter = { decision: async () => null, outcome: async () => null, blocked: async () => undefined };

// ---- 11 forward ---------------------------------------------------------------------------

/**
 * What the upstream leg reports; it never throws. `answered`: the upstream sent a response (a
 * result, an isError result or a JSON-RPC error). `failed`: the call certainly did not run
 * (refused by egress, unreachable, credential refused — `auth`). `uncertain`: it may have run
 * (timed out, the stream closed before the response).
 */
export type LegResult =
  | { kind: "answered"; response: JsonRpcResponse; status: number }
  | { kind: "failed"; reason: string; auth: boolean }
  | { kind: "uncertain"; reason: string };

export interface UpstreamLeg {
  call(target: Target, request: JsonRpcRequest): Promise<LegResult>;
}

/** The catalog could not be read because the upstream leg did not answer: the call gets that leg's answer. */
export class CatalogUnreadable extends Error {
  constructor(
    readonly upstream: string,
    readonly leg: Exclude<LegResult, { kind: "answered" }>,
  ) {
    super(leg.reason);
  }
}

// ---- 12 obligations -----------------------------------------------------------------------

/** Obligation kinds this gateway can apply (masks, row filters, redaction come with [G]). */
const KNOWN_OBLIGATIONS = new Set<string>();

export type Obligated = { ok: true; response: JsonRpcResponse; applied: string[] } | { ok: false; refusal: Refusal };

/** Applies the decision's obligations to the upstream's response; an unknown obligation holds the result back. */
export function applyObligations(obligations: Obligation[], response: JsonRpcResponse): Obligated {
  const unknown = obligations.find((o) => !KNOWN_OBLIGATIONS.has(o.kind));
  if (unknown)
    return { ok: false, refusal: { check: "obligations", reason: `the result was held back: this gateway cannot apply the obligation "${unknown.kind}"` } };
  return { ok: true, response, applied: [] };
}

/** The outcome status of an answered call: an error or an isError result is a failure. */
export function outcomeOf(response: JsonRpcResponse): OutcomeStatus {
  if (response.error) return "failed";
  return response.result?.isError === true ? "failed" : "succeeded";
}
