/**
 * The steps of a governed tools/call (docs/architecture.md, request path 5–13), each with the signature it
 * keeps, and the collaborators each is handed (kill-switch state, mappings, policy, hold store,
 * ledger, history, upstream leg). Steps whose issue has not landed yet are explicit pass-throughs
 * — `NO_HOLDS` here, `NO_HALTS` in halts.ts — for tests and routes without those stores; `NO_MAPPINGS`,
 * `OPEN_POLICY` and `NO_HISTORY` are what a gateway without mappings or policy runs (classify.ts,
 * validate.ts, policy.ts, obligations.ts own the logic of steps 6, 7, 8 and 12). The ledger is src/ports/ledger-writer.ts;
 * `NO_LEDGER` remains for tests that exercise the path without one. Step 5, the kill switch, is
 * halts.ts's (its shapes, NO_HALTS and haltFor). The history and receipt shapes here are declared
 * again by the storage contract (durable-objects/contract-history.ts) and the ledger's records,
 * which governance may not import (nor they it): test/unit/mirrors.test.ts proves each pair stays
 * in step. Mode, Effect and Axes are config's.
 * Must never: reach for storage, a clock or the network itself (all are handed in), or turn a
 * failure into "allow": a step that cannot answer throws, and call.ts refuses the call.
 */
import type { GatewayMode, UpstreamConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { MappingEffect, ToolMapping } from "../config/mapping-schema.ts";
import type { JsonObject, JsonRpcRequest, JsonRpcResponse } from "../wire/jsonrpc.ts";
import type { TraceContext } from "../wire/trace-context.ts";
import type { CatalogTool } from "./catalog-entry.ts";

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
  /** The client declared URL-mode elicitation (at initialize, or in this request's capabilities). */
  urlElicitation?: boolean;
  /** The request's W3C trace: its ids go on the call's records and log line, its traceparent to the upstream. */
  trace?: TraceContext;
  /** When the governed path took the call (epoch ms): the gateway's own time is measured from here. */
  receivedAt?: number;
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
  /** The policy rule that refused, when one did. */
  rule?: string | null;
  /** Who to ask about it (the rule's owner). */
  owner?: string;
  /** What a step that could not answer threw (never written or shown: the ledger tells its own timeout by it). */
  cause?: unknown;
}

// ---- 5 kill switch: governance/halts.ts (HaltScope, Halt, KillSwitchState, KillSwitchReader, haltFor) ----

// ---- 6 classify ---------------------------------------------------------------------------

/** A tool's effect: the mapping's (config/mapping-schema.ts declares the names). */
export type Effect = MappingEffect;
/** Every axis of a classification: the mapping's optional axes, each one settled. */
export type Axes = Required<NonNullable<ToolMapping["axes"]>>;
export type BlastRadius = Axes["blastRadius"];
export interface Classification {
  effect: Effect;
  blastRadius: BlastRadius;
  axes: Axes;
  verb?: string;
  /**
   * Where the classification came from: the operator's mapping, the name/annotation heuristic
   * (`heuristic:<bucket>`, e.g. `heuristic:read`), or the conservative default (irreversible, systemic).
   */
  source: "mapping" | `heuristic:${string}` | "default";
}

export interface Mappings {
  /** Whether any mapping is loaded at all (the default mode depends on it). */
  readonly loaded: boolean;
  get(upstream: string, tool: string): ToolMapping | undefined;
}
export const NO_MAPPINGS: Mappings = { loaded: false, get: () => undefined };

// ---- 7 validate: governance/validate.ts (inputSchema, drift) ------------------------------

// ---- 8 decide -----------------------------------------------------------------------------

/** The mode a decision is applied in: the gateway's modes (config/gateway-config.ts). */
export type Mode = GatewayMode;
/** One obligation of a decision, parsed from its spec string (`mask:email`, `redact:$.token`, `rate_limit:5/1m`). */
export interface Obligation {
  kind: string;
  /** What follows the first `:` of the spec, if anything. */
  arg?: string;
  /** The spec as the policy wrote it. */
  spec: string;
}
export interface Decision {
  decision: "allow" | "deny" | "require_approval";
  /** The rule that decided, or null for the baseline. */
  rule: string | null;
  reason: string;
  obligations: Obligation[];
  /** The mode this decision is applied in (the gateway's, or `observe` for a shadowing rule). */
  mode: Mode;
  policyVersion: string;
  /** In observe/advise (or a shadowing rule): what enforce would have done, when it differs from allow. */
  wouldBlock?: { rule: string | null; reason: string; decision: "deny" | "require_approval" };
  /** Who to ask about a denial: the rule's owner, or the grant's issuer. */
  owner?: string;
  /** An unmapped tool run because its annotations say read-only (`unclassified_reads: observe`). */
  unverifiedRead?: boolean;
}
export interface DecisionInput {
  call: ToolCall;
  target: Target;
  classification: Classification;
  /** The operator's mapping of the tool, if any. */
  mapping: ToolMapping | undefined;
  /** Decision time, ms since the epoch (the deps' clock). */
  now: number;
  /** Answers to `Policy.queries` for this call (empty when it needed none). */
  history: HistorySnapshot;
}
/** The operator's policy (governance/engine.ts over policy.ts: rules, CEL conditions, history, budgets). */
export interface Policy {
  version: string;
  /** The gateway's mode; decisions come back already adjusted to it (observe/advise never deny). */
  mode: Mode;
  /** History the decision of this call needs (none: history is not read). */
  queries(input: Omit<DecisionInput, "history">): HistoryQuery[];
  /** Pure: the same input gives the same decision (a promise only for test doubles). */
  decide(input: DecisionInput): Decision | Promise<Decision>;
  /** Budgets that apply to this call (the grant's claim and the policy's). */
  limits(call: ToolCall): BudgetLimits;
  /** Whether admitted calls must be kept in history (history rules or rate limits exist). */
  readonly usesHistory: boolean;
  /**
   * Whether a call to `exposedName` must be kept in history: some history query could count it,
   * or some rule with a rate limit could match it. Absent: `usesHistory` answers for every call.
   */
  recordsCall?(exposedName: string, upstream: string, tool: string): boolean;
  /** Whether any rule could hide a tool from a list (an unconditional deny in enforce): lists skip classifying otherwise. */
  readonly mayHide: boolean;
  /** Whether tools/list shows this tool to this principal (false only for an unconditional deny). */
  listed(principal: Principal, target: Target, classification: Classification): boolean;
}
/** No policy configured: every call the grant and the upstream's allow/deny let through is allowed. */
export const OPEN_POLICY: Policy = {
  version: "none",
  mode: "enforce",
  queries: () => [],
  decide: () => ({ decision: "allow", rule: null, reason: "no policy is configured", obligations: [], mode: "enforce", policyVersion: "none" }),
  limits: () => ({}),
  usesHistory: false,
  mayHide: false,
  listed: () => true,
};

// ---- history (read by 8 decide, written after it) -----------------------------------------

/** Which of the caller's calls a history query counts: all of its principal's, its run's, or its grant's (jti). */
export type HistoryScope = "principal" | "run" | "grant";
export type HistoryQuery =
  /**
   * How many admitted calls whose exposed name matches the glob `tool`, within the last `withinMs`;
   * with `upstream` (a glob over upstream names), the calls to a matching upstream whose own tool
   * name or exposed name matches `tool` (the stable identity: wire/glob.ts toolGlobMatch).
   */
  | { kind: "count"; tool: string; upstream?: string; withinMs: number; scope: HistoryScope }
  /** The sum of numeric argument `arg` (dotted path) over those calls. */
  | { kind: "total"; tool: string; upstream?: string; arg: string; withinMs: number; scope: HistoryScope }
  /** Whether a call matching `tool` succeeded earlier in this run. */
  | { kind: "succeeded"; tool: string; upstream?: string; scope: "run" };
/** Answers to a call's history queries, by `historyKey(query)`. */
export interface HistorySnapshot {
  answers: Record<string, number | boolean>;
}
/** The stable key of a query (the snapshot's index). */
export function historyKey(q: HistoryQuery): string {
  // The upstream leads (it contains no "|"): a tool glob may contain anything.
  const up = q.upstream === undefined ? "" : `@${q.upstream}|`;
  return q.kind === "succeeded"
    ? `succeeded|${q.scope}|${up}${q.tool}`
    : q.kind === "count"
      ? `count|${q.scope}|${q.withinMs}|${up}${q.tool}`
      : `total|${q.scope}|${q.withinMs}|${q.arg}|${up}${q.tool}`;
}
/** One call as history keeps it. Keyed by the grant's principal and the gateway's run — never by anything the client chooses. */
export interface HistoryEntry {
  /** A unique id of this call (the decision's id), so its outcome can settle it. */
  callId: string;
  principal: string;
  jti?: string;
  runId: string | null;
  exposedName: string;
  /** The stable identity: the upstream's name and its own name for the tool (what `upstream`-scoped queries count). */
  upstream: string;
  tool: string;
  /** Numeric arguments by dotted path (only these are kept: totals need nothing else). */
  numbers: Record<string, number>;
  at: number;
}
/** Budget limits that apply to one call: calls per grant (its `budget.calls` claim or the policy's), calls per run. */
export interface BudgetLimits {
  grantCalls?: number;
  runCalls?: number;
}
export type Admission = { ok: true } | { ok: false; budget: "grant" | "run"; used: number; limit: number };
/** HistoryDO, sharded by principal. A step that cannot reach it refuses the call (fail closed). */
export interface HistoryStore {
  snapshot(principal: string, jti: string | undefined, runId: string | null, queries: HistoryQuery[], now: number): Promise<HistorySnapshot>;
  /** Atomically: if admitting `entry` keeps every limit, records it and says ok; otherwise records nothing. */
  admit(entry: HistoryEntry, limits: BudgetLimits): Promise<Admission>;
  /** The call's outcome (for `succeeded` queries). */
  settle(principal: string, callId: string, status: OutcomeStatus): Promise<void>;
}
export const NO_HISTORY: HistoryStore = {
  snapshot: async () => ({ answers: {} }),
  admit: async () => ({ ok: true }),
  settle: async () => undefined,
};

// ---- 9 hold -------------------------------------------------------------------------------

/**
 * What the hold step says about a call that needs approval: proceed (an approved hold for this
 * exact action was consumed, once), refused (a hold was created — `recorded` names its
 * `hold.created` entry — or it is pending, rejected, expired or its call is in flight), or
 * answered by the hold itself (`answer`: the recorded answer of the consumed call, replayed; or
 * a task standing for the held call, for a client that negotiated tasks).
 */
export type HoldVerdict =
  | { proceed: true; holdId?: string }
  | { proceed: false; refusal: Refusal; holdId?: string; recorded?: string }
  | { proceed: false; answer: JsonRpcResponse; holdId: string };
/** HoldsDO behind the governed path (src/ports/hold-store.ts): binds an approval to the exact canonical action and consumes it once. */
export interface HoldStore {
  /** An approved, unconsumed hold for this action is consumed (proceed); otherwise one is created or reported. */
  settle(call: ToolCall, target: Target, decision: Decision, classification: Classification): Promise<HoldVerdict>;
  /** The consumed hold's call was answered: identical retries get this answer back (replayed, not run again). */
  complete(holdId: string, answer: JsonRpcResponse): Promise<void>;
  /** The consumed hold's call was not forwarded (its write-ahead failed): marked so, approvable again. */
  release(holdId: string, reason: string): Promise<void>;
}
/** No hold store: there is no approver to ask, so a call that needs approval is refused. */
export const NO_HOLDS: HoldStore = {
  settle: async () => ({ proceed: false, refusal: { check: "hold", reason: "this call needs approval and no hold store is available on this route" } }),
  complete: async () => undefined,
  release: async () => undefined,
};

export async function holdFor(holds: HoldStore, call: ToolCall, target: Target, decision: Decision, classification: Classification): Promise<HoldVerdict> {
  if (decision.decision !== "require_approval") return { proceed: true };
  return holds.settle(call, target, decision, classification);
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
  /** The upstream's own tool name: with `upstream`, the tool's stable identity. */
  tool: string;
  /** The name the client called it by (as exposed; it moves when namespacing changes). */
  exposed: string;
  /** The call's arguments; the ledger keeps them as the mapping says (canonical, hashed or redacted). */
  arguments: JsonObject | undefined;
  /** How the ledger keeps them: the mapping's `arguments` (default hashed), or full under `audit:full`. */
  argumentsKept: ToolMapping["arguments"];
  classification: Classification;
  decision: Decision;
  holdId?: string;
  /** The client's `_meta` keys under `portcullis/` dropped before forwarding (names only, never values); absent when none. */
  strippedMeta?: string[];
  /** The call's trace, when it has one: recorded as `trace` so a ledger entry and a trace name each other. */
  trace?: TraceContext;
}
export type OutcomeStatus = "succeeded" | "failed" | "uncertain";
export interface OutcomeRecord {
  decision: Receipt | null;
  status: OutcomeStatus;
  /** What the upstream answered (its hash is recorded, never the content); null when nothing came back. */
  answer: JsonRpcResponse | null;
  durationMs: number;
  obligationsApplied: string[];
  /** Where the result's structuredContent breaks the tool's outputSchema (recorded: the call already happened). */
  outputProblems?: string[];
  reason?: string;
  /** The call's trace id, when it has one (the outcome's `trace_id`). */
  traceId?: string;
  /** For the metric rollups only (never in the record): the call's upstream, its own tool name, and the gateway's own time so far, upstream time excluded. */
  metrics?: { upstream: string; tool: string; gatewayMs?: number };
}
/** One input round of a parked call (src/upstream/rounds.ts): the object, the round number, the binding its token covers, what it asks by key. */
export interface RoundRef {
  id: string;
  n: number;
  digest: string;
  asks: Record<string, string>;
}

/** One input round of a governed call (src/upstream/rounds.ts): durable before the client sees it. */
export interface RoundRecord {
  decision: Receipt | null;
  round: number;
  /** What the round asks, by key: the methods (never the questions). */
  asks: Record<string, string>;
  /** The keys this request answered (never the answers). */
  answered: string[];
  traceId?: string;
}

/** LedgerDO in [L]: a decision is durable before forwarding, an outcome before the agent sees it. */
export interface LedgerWriter {
  decision(record: DecisionRecord): Promise<Receipt | null>;
  outcome(record: OutcomeRecord): Promise<Receipt | null>;
  /** An input round of a call (absent in test fakes: a round is then not recorded). */
  round?(record: RoundRecord): Promise<Receipt | null>;
  /** Records a refusal; resolves to the record's id (named in the refusal the agent reads), or null. */
  blocked(call: ToolCall, refusal: Refusal): Promise<string | null>;
}
/** A ledger that records nothing and gives no receipt (tests of the path without storage). */
export const NO_LEDGER: LedgerWriter = { decision: async () => null, outcome: async () => null, blocked: async () => null };

// ---- 11 forward ---------------------------------------------------------------------------

/**
 * What the upstream leg reports; it never throws. `answered`: the upstream sent a response (a
 * result, an isError result or a JSON-RPC error). `failed`: the upstream gave no answer and, as far
 * as the gateway can tell, did not run it (refused by egress, unreachable, credential refused —
 * `auth`; with `connection`, the connection failed before any response header, which for a request
 * already written may still have reached the upstream: only safe effects are sent again).
 * `uncertain`: it may have run (timed out, the stream closed before the response).
 */
export type LegResult =
  | {
      kind: "answered";
      response: JsonRpcResponse;
      status: number;
      /** The answer is an input round of the gateway's, not the call's result: the call goes on when the client answers (src/upstream/rounds.ts). */
      round?: RoundRef;
    }
  | {
      kind: "failed";
      reason: string;
      auth: boolean;
      /**
       * The request got no answer because the connection failed before any response header — it
       * may have been refused, reset, or lost (a pooled keep-alive connection the upstream closed).
       */
      connection?: true;
      /** Nothing was sent: the caller has not connected this OAuth upstream; a person connects it at `url`. */
      connect?: { upstream: string; url: string };
    }
  | { kind: "uncertain"; reason: string };

export interface UpstreamLeg {
  /** Sends the call; while it runs, a kill-switch halt covering `call` cancels it upstream (the leg reports it uncertain). */
  call(target: Target, request: JsonRpcRequest, call?: ToolCall): Promise<LegResult>;
}

/** The catalog could not be read because the upstream leg did not answer: the call gets that leg's answer. */
export class CatalogUnreadable extends Error {
  readonly upstream: string;
  readonly leg: Exclude<LegResult, { kind: "answered" }>;
  constructor(upstream: string, leg: Exclude<LegResult, { kind: "answered" }>) {
    super(leg.reason);
    this.upstream = upstream;
    this.leg = leg;
  }
}

// ---- 12 obligations -----------------------------------------------------------------------

/** What applying a decision's result obligations gave (governance/obligations.ts applyResultObligations). */
export type Obligated = { ok: true; response: JsonRpcResponse; applied: string[] } | { ok: false; refusal: Refusal };

/** The outcome status of an answered call: an error or an isError result is a failure. */
export function outcomeOf(response: JsonRpcResponse): OutcomeStatus {
  if (response.error) return "failed";
  return response.result?.isError === true ? "failed" : "succeeded";
}
