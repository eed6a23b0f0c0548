/**
 * Ledger record shapes: every governed event the gateway writes, each kind with its body and a
 * version, and the entry envelope that chains them (team chain, contiguous seq, previous hash,
 * own hash). Shared by the gateway, the LedgerDO and the offline verifier (`portcullis ledger
 * verify`), so it imports nothing but `wire/`. Must never: carry a secret or a token in any
 * body (arguments are kept as the mapping says: canonical, hashed or redacted).
 */
import type { Json, JsonObject } from "../wire/jsonrpc.ts";

/** Version of the entry envelope and of every body shape below. */
export const ENTRY_VERSION = 1;

/** The previous hash of a chain's first entry (seq 1), and the hash of an empty chain. */
export const GENESIS = "0".repeat(64);

/** The global checkpoint chain: its entries commit each team chain's newest signed checkpoint. */
export const GLOBAL_CHAIN = "_global";

export type EntryKind =
  | "decision"
  | "outcome"
  | "call.round"
  | "blocked"
  | "tools.listed"
  | "policy.unmatched"
  | "hold.created"
  | "hold.approved"
  | "hold.rejected"
  | "hold.expired"
  | "hold.consumed"
  | "killswitch.changed"
  | "grant.minted"
  | "grant.refreshed"
  | "grant.enrolled"
  | "grant.revoked"
  | "credential.connected"
  | "credential.refreshed"
  | "credential.refused"
  | "credential.revoked"
  | "config.changed"
  | "rollback.step"
  | "checkpoint";

/** Every kind above, in documentation order. */
export const ENTRY_KINDS: readonly EntryKind[] = [
  "decision",
  "outcome",
  "call.round",
  "blocked",
  "tools.listed",
  "policy.unmatched",
  "hold.created",
  "hold.approved",
  "hold.rejected",
  "hold.expired",
  "hold.consumed",
  "killswitch.changed",
  "grant.minted",
  "grant.refreshed",
  "grant.enrolled",
  "grant.revoked",
  "credential.connected",
  "credential.refreshed",
  "credential.refused",
  "credential.revoked",
  "config.changed",
  "rollback.step",
  "checkpoint",
];

/** What a writer hands the chain: the kind, its body, when and who; seq, prev and hash are the chain's. */
export interface EntryDraft {
  kind: EntryKind;
  /** Unique id of this entry (decision ids are the decision entry's id). */
  id: string;
  /** ISO 8601 time the gateway observed the event. */
  at: string;
  body: JsonObject;
}

/** One entry as chained and stored: hash = SHA-256 over the RFC 8785 JSON of every other field. */
export interface LedgerEntry extends EntryDraft {
  v: number;
  chain: string;
  seq: number;
  prev: string;
  hash: string;
}

/** The place of an entry in its chain, as the agent receives it in `_meta["portcullis/receipt"]`. */
export interface ChainReceipt {
  chain: string;
  seq: number;
  hash: string;
  /** The decision entry's id this call is recorded under. */
  decision_id: string;
}

/** How a tool's arguments are kept in the ledger (the mapping's `arguments`). */
export type ArgumentsMode = "full" | "hashed" | "redacted";

export interface DecisionBody extends JsonObject {
  principal: string;
  team: string;
  run: string | null;
  upstream: string;
  /** The upstream's own tool name: with `upstream`, the stable identity of the tool. */
  tool: string;
  /** The arguments as kept: the value (full), `{sha256}` (hashed) or null (redacted). */
  arguments: Json;
  arguments_mode: ArgumentsMode;
  classification: JsonObject;
  decision: string;
  rule: string | null;
  reason: string;
  mode: string;
  policy_version: string;
  obligations: Json[];
  hold_id: string | null;
  /** observe / advise: `{rule, reason, decision}` enforce would have applied; null when nothing would block. */
  would_block: Json;
  /** An unmapped tool run because its annotations say read-only (`unclassified_reads: observe`). */
  unverified_read: boolean;
  // `exposed`: the name the agent called the tool by; it moves when namespacing
  // changes, `upstream` + `tool` do not. Absent in records written before it was kept.
  // `stripped_meta` (only when any were dropped): the names of the client's `_meta` keys under
  // `portcullis/` (the gateway's namespace) dropped before forwarding — names only, never values.
  // `trace` (when the call had one, always since traces were added): `{trace_id, span_id,
  // parent_span_id}`, the W3C trace, the gateway's span and the agent's (null when started here).
}

export interface OutcomeBody extends JsonObject {
  decision_id: string | null;
  status: "succeeded" | "failed" | "uncertain";
  /** SHA-256 of the RFC 8785 JSON of the result (or error) the upstream returned; null when none came. */
  result_hash: string | null;
  duration_ms: number;
  obligations_applied: string[];
  /** Where the result's structuredContent broke the tool's outputSchema (empty when it did not; absent before [G]). */
  output_problems: string[];
  reason: string | null;
  // `compensation` (only when the tool's mapping declares one; [R], src/governance/compensation.ts):
  // the compensation resolved against this call — `{v, status: "planned", tool, arguments, approval,
  // verification}`, only the values its references name — or `{v, status: "unavailable" | "not_needed", reason}`.
  // `trace_id` (when the call had a trace): its W3C trace id, as on the decision.
}

/**
 * One input round of a governed call (a 2025-11-25 upstream asked the 2026-07-28 client something
 * mid-call, src/upstream/rounds.ts): the call's decision, the round's number, what it asked by key
 * (methods only, never the questions) and which keys this request answered (never the answers).
 * The call's one outcome follows its last round.
 */
export interface RoundBody extends JsonObject {
  decision_id: string | null;
  principal: string;
  team: string;
  round: number;
  asks: Record<string, string>;
  answered: string[];
}

export interface BlockedBody extends JsonObject {
  principal: string;
  team: string;
  run: string | null;
  tool: string;
  /** The check that refused: grant, kill_switch, schema, drift, policy, budget, hold, obligations, or a step that could not answer. */
  check: string;
  reason: string;
  /** The policy rule that refused, when one did. */
  rule: string | null;
  // `trace_id` (when the call had a trace): its W3C trace id.
}

/** One tools/list answer: the names this caller was shown and those hidden from it. */
export interface ToolsListedBody extends JsonObject {
  principal: string;
  team: string;
  shown: string[];
  hidden: string[];
}

/** A hold event (`hold.created | approved | rejected | expired | consumed`) of one call. */
export interface HoldBody extends JsonObject {
  hold_id: string;
  /** The decision the hold belongs to, when known. */
  decision_id: string | null;
  principal: string;
  team: string;
  /** The name the agent called the tool by (it moves when namespacing changes). */
  tool: string;
  /** The stable identity: the upstream and its own tool name (what the action hash covers). */
  upstream: string;
  upstream_tool: string;
  /** The hold's action hash: SHA-256 of the RFC 8785 JSON of {principal, upstream, tool, arguments}. */
  action_hash: string;
  /** Who approved or rejected (null for created, expired, consumed). */
  approver: string | null;
  reason: string | null;
}

/** What a hold event says of its hold (HoldsDO's HoldRecord has these fields). */
export interface HoldFacts {
  id: string;
  principal: string;
  team: string;
  exposedName: string;
  upstream: string;
  tool: string;
  actionHash: string;
}

/** The body of a hold event: the name the agent called (`tool`) beside the stable identity (`upstream`, `upstream_tool`). */
export function holdBody(h: HoldFacts, approver: string | null, reason: string | null): HoldBody {
  return {
    hold_id: h.id,
    decision_id: null,
    principal: h.principal,
    team: h.team,
    tool: h.exposedName,
    upstream: h.upstream,
    upstream_tool: h.tool,
    action_hash: h.actionHash,
    approver,
    reason,
  };
}

/** A kill-switch change: a halt set or lifted. */
export interface KillSwitchBody extends JsonObject {
  action: "halt" | "resume";
  scope: "global" | "team" | "upstream" | "tool" | "principal" | "grant";
  /** The team, upstream, tool, principal or grant jti; null for global. */
  target: string | null;
  reason: string;
  by: string;
  /** The kill switch's version after the change. */
  version: number;
}

/** A grant minted (never the token itself). */
export interface GrantMintedBody extends JsonObject {
  jti: string;
  sub: string;
  team: string;
  roles: string[];
  tools: string[];
  exp: number;
  by: string;
}

/** An OAuth-issued grant handed its client a new access token (a refresh); never a token. */
export interface GrantRefreshedBody extends JsonObject {
  jti: string;
  sub: string;
  client_id: string;
  /** The new access token's expiry. */
  exp: number;
}

/** An enrollment code minted (its id is a prefix of the code's SHA-256; never the code). */
export interface GrantEnrolledBody extends JsonObject {
  enrollment: string;
  sub: string;
  roles: string[];
  tools: string[];
  ttl_seconds: number;
  expires: number;
  by: string;
}

/** A grant revoked, effective until `until` (the grant's own expiry). */
export interface GrantRevokedBody extends JsonObject {
  jti: string;
  until: number;
  by: string;
}

/**
 * An OAuth upstream connection changed: connected, refreshed (coalesced: `refreshes` since the
 * last such record), refused (a refresh or a consent the authorization server refused) or revoked
 * (disconnected). Who and what, never a token.
 */
export interface CredentialBody {
  /** Whose connection: `principal:<sub>` or `team:<team>` (a shared one). */
  owner: string;
  /** Who acted (connected, disconnected) or whose call refreshed it. */
  principal: string;
  upstream: string;
  /** The upstream's authorization server (its issuer). */
  authorization_server: string;
  scopes: string[];
  refreshes?: number;
  /** Why it was refused or revoked (the server's error code, "disconnected", …). */
  reason?: string;
  /** Whether the authorization server confirmed the revocation (RFC 7009); false when it offers none. */
  revoked_upstream?: boolean;
}

/** A mode, configuration or policy change: what changed, from and to which version (or hash). */

export interface ConfigChangedBody extends JsonObject {
  what: "mode" | "config" | "policy";
  from: string | null;
  to: string;
  by: string;
}

/** An entry of the global chain: a team chain's newest signed checkpoint, committed. */
export interface CheckpointBody extends JsonObject {
  chain: string;
  size: number;
  hash: string;
  /** The team chain's signed note (checkpoint.ts). */
  note: string;
}
