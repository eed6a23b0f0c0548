/**
 * The storage contract: every record shape a Durable Object keeps (each with a version field)
 * and the RPC surface each object class offers the Worker. Owns only types; must never hold
 * logic. docs/storage.md documents the same shapes for operators.
 */
import type { Head } from "../src/ledger/chain.ts";
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../src/ledger/records.ts";
import type { JsonObject, JsonRpcResponse } from "../src/wire/jsonrpc.ts";

/** The protocol era of one side of a connection. */
export type Era = "legacy" | "modern";

/** How the gateway talks to one upstream for one client context. */
export type Leg = { era: "legacy"; sessionId?: string; protocolVersion: string } | { era: "modern"; meta: JsonObject };

/** Version of the SessionRecord shape (bumped when a field changes meaning). */
export const SESSION_RECORD_VERSION = 1;

export interface UpstreamLegRecord {
  /** The leg this session uses with that upstream; absent when the upstream was unavailable. */
  leg?: Leg;
  /** Capabilities the upstream declared (initialize result or server/discover). */
  capabilities?: JsonObject;
  instructions?: string;
  serverInfo?: JsonObject;
}

export interface SessionRecord {
  /** Record shape version (SESSION_RECORD_VERSION). */
  v: number;
  id: string;
  principal: string;
  protocolVersion: string;
  clientCapabilities: JsonObject;
  clientInfo?: JsonObject;
  logLevel?: string;
  /** The `/mcp/<upstream>` route that opened the session (absent: /mcp); it is served on that route only. */
  route?: string;
  upstreams: Record<string, UpstreamLegRecord>;
  /** Resource subscriptions held by the gateway for upstreams reached in 2026-07-28 (upstream URIs). */
  subscriptions?: Record<string, string[]>;
  createdAt: number;
  touchedAt: number;
  ttlS: number;
  ended?: boolean;
}

export interface StoredEvent {
  seq: number;
  data: string;
}

/** The SessionDO RPC surface the fronts use (kept explicit: the generated RPC types are too deep for tsc). */
export interface SessionApi {
  create(rec: SessionRecord): Promise<boolean>;
  claimRun(principal: string, id: string, ttlS: number): Promise<boolean>;
  getLeg(principal: string): Promise<UpstreamLegRecord | null>;
  putLeg(principal: string, rec: UpstreamLegRecord): Promise<boolean>;
  /** Stores `rec` unless a live leg is kept already: the kept leg and whether it is `rec`; null when another principal's or unreadable. */
  keepLeg(principal: string, rec: UpstreamLegRecord): Promise<{ rec: UpstreamLegRecord; stored: boolean } | null>;
  open(principal: string): Promise<SessionRecord | null>;
  /** Opens, and records that client request `downId` went to `upstream` under (gateway-made) id `upId` there. */
  begin(principal: string, downId: string | null, upstream: string | null, upId?: string | null): Promise<SessionRecord | null>;
  /** Where client request `downId` went; `upstreamId` is null for requests recorded without one. */
  lookupRequest(principal: string, downId: string): Promise<{ upstream: string; upstreamId: string | null } | null>;
  update(principal: string, patch: Partial<Pick<SessionRecord, "logLevel" | "upstreams" | "subscriptions">>): Promise<SessionRecord | null>;
  /** Stores `leg` as the leg to `upstream` unless the session has one already (the first stored wins); the leg kept and whether it is `leg`; null when the session is gone. */
  adoptLeg(principal: string, upstream: string, leg: UpstreamLegRecord): Promise<{ rec: UpstreamLegRecord; stored: boolean } | null>;
  end(principal: string): Promise<SessionRecord | null>;
  addPending(principal: string, p: PendingRelay): Promise<void>;
  takePending(principal: string, id: string): Promise<PendingRelay | null>;
  putAnswer(principal: string, id: string, msg: JsonRpcResponse): Promise<void>;
  awaitAnswer(principal: string, id: string, timeoutMs: number): Promise<JsonRpcResponse | null>;
  appendEvents(stream: string, events: StoredEvent[], done: boolean): Promise<void>;
  readEvents(principal: string, stream: string, afterSeq: number): Promise<{ events: StoredEvent[]; done: boolean } | null>;
}

export interface PendingRelay {
  id: string;
  upstream: string;
  upId: string | number;
}

/** Version of the StoredLeg shape. */
export const STORED_LEG_VERSION = 1;
/** Idle lifetime of a StoredLeg: a leg no isolate read or replaced for this long is deleted (an isolate still caching it keeps using it; the next one opens a new upstream session). */
export const LEG_IDLE_TTL_S = 86_400;

/** The upstream session a modern principal keeps with one legacy-only upstream. */
export interface StoredLeg {
  /** Record shape version (STORED_LEG_VERSION). */
  v: number;
  principal: string;
  rec: UpstreamLegRecord;
  /** Last put or read (ms since epoch, minute granularity); absent in legs written before retention existed. */
  touchedAt?: number;
}

/** Version of the SealedCredential shape (the `v` column of CredentialsDO's `creds` table). */
export const SEALED_CREDENTIAL_VERSION = 1;

/** One per-principal upstream credential, sealed with AES-256-GCM (never plaintext). */
export interface SealedCredential {
  /** Record shape version (SEALED_CREDENTIAL_VERSION). */
  v: number;
  iv: string;
  ct: string;
  at: number;
}

/** The CredentialsDO RPC surface. */
export interface CredentialsApi {
  put(upstream: string, sealed: { iv: string; ct: string }): Promise<void>;
  get(upstream: string): Promise<SealedCredential | null>;
  remove(upstream: string): Promise<boolean>;
}

/** Who opened a legacy HTTP+SSE session (GET /sse): the principal's `sub` and its grant's `jti` (null for the loopback actor). */
export interface SseOwner {
  sub: string;
  jti: string | null;
}

/** What the front asks SseDO to open (its fetch, `POST /open` with this JSON): the stream's owner, the endpoint event's URL, the keep-alive period. */
export interface SseOpenRequest {
  owner: SseOwner;
  endpoint: string;
  keepAliveMs: number;
}

/** How binding the initialized legacy session to an SSE session went: bound, already bound (a second initialize), or the stream is gone. */
export type SseBind = "bound" | "already" | "gone";

/**
 * The SseDO surface: one object per legacy HTTP+SSE session, holding its open stream in memory.
 * Every call names the owner; a call from anyone else, or after the stream closed, is refused
 * (null / false / "gone") and changes nothing.
 */
export interface SseApi {
  /** `POST /open` with an SseOpenRequest: the stream (endpoint event first); 409 when this object was opened before. */
  fetch(req: Request): Promise<Response>;
  /** The open session's wrapped Mcp-Session-Id (null before initialize); null when not open or not the owner's. */
  session(owner: SseOwner): Promise<{ sid: string | null } | null>;
  /** Binds the legacy session `sid` and writes `answer` (the initialize response) to the stream, before anything pushed later. */
  bind(owner: SseOwner, sid: string, answer: string): Promise<SseBind>;
  /** Resolves with the bound session id once initialize bound one; null when the stream closes first or for anyone but the owner. */
  waitBound(owner: SseOwner): Promise<string | null>;
  /** Writes one `message` event (a JSON-RPC message as text); false when the stream is gone or the caller is not the owner. */
  push(owner: SseOwner, data: string): Promise<boolean>;
  /** Ends the stream (idempotent for the owner); the bound session id, so the caller can end it too. */
  close(owner: SseOwner): Promise<string | null>;
}

/** The RevocationsDO RPC surface. */
export interface RevocationsApi {
  isRevoked(jti: string): Promise<boolean>;
  revoke(jti: string, exp: number, by: string): Promise<void>;
  /** One-time markers: true only for the first claim of `key` before `exp`. */
  claimOnce(key: string, exp: number): Promise<boolean>;
  /** One-time data: stored once (false if the key exists), read while unused, taken at most once. */
  putOnce(key: string, data: string, exp: number): Promise<boolean>;
  readOnce(key: string, take: boolean): Promise<string | null>;
}

/** What a LedgerDO needs to sign checkpoints: the Worker secret holding the key, and the origin prefix. */
export interface LedgerSigning {
  /** Name of the Worker secret with the Ed25519 signing key (a private JWK or a key set). */
  secret: string;
  /** The gateway's canonical URL: checkpoint origins are `<gateway>/ledger/<chain>`. */
  gateway: string;
}

/** The LedgerDO RPC surface: one object per chain (a team, or the global checkpoint chain). */
export interface LedgerApi {
  /**
   * Chains `drafts` after the head and stores them durably in one transaction together with
   * every append that arrived at the same time (group commit); the entries as chained.
   */
  append(drafts: EntryDraft[], signing: LedgerSigning): Promise<LedgerEntry[]>;
  /**
   * Several callers' appends in one RPC (src/ports/ledger-batch.ts): each is checked, chained and
   * refused on its own, exactly as if it had come in its own `append`; answers in the same order.
   */
  appendEach(calls: EntryDraft[][], signing: LedgerSigning): Promise<AppendOutcome[]>;
  head(): Promise<Head>;
  /** Entries with seq > `afterSeq`, oldest first, at most `limit`. */
  read(afterSeq: number, limit: number): Promise<LedgerEntry[]>;
  /**
   * Entries whose id or `body.decision_id` is `id` (one call's decision, outcome and hold events).
   * Not named `trace`: that is a reserved handler name, which Workers RPC refuses to call.
   */
  traceCall(id: string): Promise<LedgerEntry[]>;
  /** Signed checkpoints with size > `afterSize`, oldest first (at most 1000 per call: page with the last size). */
  checkpoints(afterSize: number): Promise<Checkpoint[]>;
  /**
   * A checkpoint signed over exactly `size` entries (stored, or signed now when the chain has moved
   * on), or null when the chain holds fewer or has no signing key: what an export ends a chain with.
   */
  checkpointAt(size: number): Promise<Checkpoint | null>;
  /** The object's own account: head, checkpoint, D1 flush and global anchoring state, group-commit counters. */
  status(): Promise<LedgerStatus>;
}

/** One caller's answer inside `appendEach`: its entries as stored, or why it was refused. */
export type AppendOutcome = { entries: LedgerEntry[] } | { error: string };

/** What a LedgerDO reports about itself (`LedgerApi.status`), for operators and tests. */
export interface LedgerStatus {
  /** The chain this object holds (null before its first append). */
  chain: string | null;
  head: Head;
  /** Size of the newest signed checkpoint (0: none yet), and the entries after it. */
  checkpointSize: number;
  unanchored: number;
  /** Why the last checkpoint attempt signed nothing (no signing key configured, unusable key, signing failed); null after a success. */
  checkpointProblem: string | null;
  /** Entries up to this seq are in D1 (`ledger_entries`). */
  flushedSeq: number;
  /** The last D1 flush error and how many flushes in a row failed (0 after a success). */
  flushProblem: string | null;
  flushFailures: number;
  /** Newest checkpoint size committed to the `_global` chain (always 0 for `_global` itself). */
  anchoredSize: number;
  anchorProblem: string | null;
  /** Storage transactions that committed appends, and the append calls they held (group commit: transactions ≤ appends). */
  transactions: number;
  appends: number;
  /** RPCs (`append`, `appendEach`) that brought appends to this instance since it started; not stored (appends ÷ rpcs: the Worker side's group commit). */
  rpcs: number;
}

/** Version of the TaskOwnership shape (the `v` column of TasksDO's `owned` table). */
export const TASK_OWNERSHIP_VERSION = 1;
/** `TasksApi.owned` answers at most this many task ids (newest first). */
export const OWNED_TASKS_MAX = 10_000;

/** One task a principal created through the gateway: which upstream holds it, under which upstream task id. */
export interface TaskOwnership {
  /** Record shape version (TASK_OWNERSHIP_VERSION). */
  v: number;
  upstream: string;
  taskId: string;
  /** When the gateway saw the task created (ms since epoch). */
  at: number;
  /** After this (ms since epoch) the entry is gone and the task is nobody's. */
  expiresAt: number;
}

/**
 * The TasksDO RPC surface: one object per principal (`principal:<sub>`), holding the tasks that
 * principal created. An entry past `expiresAt`, or of a version this code does not know, is not owned.
 */
export interface TasksApi {
  /** Records that this principal owns `taskId` on `upstream` until `expiresAt`; idempotent, only ever extends the entry. */
  own(upstream: string, taskId: string, expiresAt: number): Promise<void>;
  owns(upstream: string, taskId: string): Promise<boolean>;
  /** The task ids this principal owns on `upstream`, newest first, at most OWNED_TASKS_MAX. */
  owned(upstream: string): Promise<string[]>;
}

/** Longest window a history query may ask about (ms): 24 h. A query over a longer window is refused (the rows are not kept). */
export const HISTORY_WINDOW_MAX_MS = 24 * 3_600_000;
/** How long HistoryDO keeps a call's row: the longest window plus one hour, so a late outcome still finds its call. */
export const HISTORY_CALL_RETENTION_MS = 25 * 3_600_000;
/**
 * How long HistoryDO keeps a budget counter after the last call it counted, and a run's record that
 * a tool succeeded: 8 days. A run ends after at most 7 days idle (`gateway.session_ttl_s`), and a
 * grant budget stays exact for grants that live at most this long (`auth.max_token_lifetime`).
 */
export const HISTORY_BUDGET_RETENTION_MS = 8 * 86_400_000;
/** Version of the HistoryCall row shape (the `v` column of HistoryDO's `calls` table). */
export const HISTORY_CALL_VERSION = 1;

/** Which of a principal's calls a history query counts: all of them, one run's, or one grant's (jti). */
export type HistoryQueryScope = "principal" | "run" | "grant";
/** One history question (the same shape as governance's HistoryQuery, declared here because the store layer cannot import governance). */
export type HistoryQuerySpec =
  | { kind: "count"; tool: string; upstream?: string; withinMs: number; scope: HistoryQueryScope }
  | { kind: "total"; tool: string; upstream?: string; arg: string; withinMs: number; scope: HistoryQueryScope }
  | { kind: "succeeded"; tool: string; upstream?: string; scope: "run" };
/** One admitted call as HistoryDO keeps it (governance's HistoryEntry). */
export interface HistoryCall {
  callId: string;
  /** The principal whose object this is: an object refuses a call of another principal. */
  principal: string;
  jti?: string;
  runId: string | null;
  exposedName: string;
  /** The stable identity: the upstream and its own name for the tool (absent on calls recorded before it was kept). */
  upstream?: string;
  tool?: string;
  /** Numeric arguments by dotted path. */
  numbers: Record<string, number>;
  /** When the call was admitted (ms since epoch). */
  at: number;
}
export type HistoryCallStatus = "admitted" | "succeeded" | "failed" | "uncertain";
/** Budget limits of one call (governance's BudgetLimits). */
export interface HistoryBudget {
  grantCalls?: number;
  runCalls?: number;
}
export type HistoryAdmission = { ok: true } | { ok: false; budget: "grant" | "run"; used: number; limit: number };

/**
 * The HistoryDO RPC surface: one object per principal (`principal:<sub>` in the HISTORY
 * namespace), holding that principal's recent calls and its grant and run budget counters.
 */
export interface HistoryApi {
  /** The answer to each query, in query order (a count or total is a number, `succeeded` a boolean). Reads never create state. */
  snapshot(jti: string | null, runId: string | null, queries: HistoryQuerySpec[], now: number): Promise<Array<number | boolean>>;
  /** Atomically: if admitting `call` keeps both limits, records it and answers ok; otherwise records nothing and names the budget. */
  admit(call: HistoryCall, limits: HistoryBudget): Promise<HistoryAdmission>;
  /** The call's outcome; only an admitted, unsettled call changes. */
  settle(callId: string, status: Exclude<HistoryCallStatus, "admitted">): Promise<void>;
}

// ---- holds (HoldsDO, one per team) ----------------------------------------------------------

/** Version of the HoldRecord shape (the `v` column of HoldsDO's `holds` table). */
export const HOLD_RECORD_VERSION = 1;
export type HoldState = "pending" | "approved" | "rejected" | "expired" | "consumed";

/** What the governed path asks a HoldsDO to hold: one exact canonical action of one principal. */
export interface NewHold {
  /** `<team>~<24 hex>` (holdId() in object-names.ts): the team is part of the id, so an id names its object. */
  id: string;
  team: string;
  /** SHA-256 (hex) of `action`. */
  actionHash: string;
  /** The canonical action that is hashed: RFC 8785 JSON of {principal, upstream, tool, arguments}. */
  action: string;
  principal: string;
  /** The requesting grant's jti (null for the loopback actor). */
  jti: string | null;
  upstream: string;
  /** The upstream's own tool name (the one in `action`). */
  tool: string;
  /** The name the agent called (what the console shows first). */
  exposedName: string;
  /** The policy rule that asked for approval (null: the mapping's `approval`). */
  rule: string | null;
  reason: string;
  /** The call's classification as the ledger keeps it ({effect, blast_radius, source}). */
  classification: JsonObject;
  createdAt: number;
  expiresAt: number;
}

/** One hold as HoldsDO keeps it. */
export interface HoldRecord extends NewHold {
  /** Record shape version (HOLD_RECORD_VERSION). */
  v: number;
  state: HoldState;
  /** Who approved or rejected it (from the approver's own token), and why. */
  approver: string | null;
  resolvedAt: number | null;
  resolveReason: string | null;
  consumedAt: number | null;
  /** The answer the consumed call got, replayed to identical retries; null while it runs. */
  result: JsonRpcResponse | null;
  /** Set when a consumed call was never forwarded (its write-ahead failed): an approver may approve it again. */
  notForwarded: string | null;
}

/** What `HoldsApi.claim` found for an action. Only `consumed` lets the call run, and only one caller ever gets it per approval. */
export type HoldClaim =
  | { kind: "consumed"; hold: HoldRecord }
  | { kind: "created"; hold: HoldRecord }
  | { kind: "pending"; hold: HoldRecord }
  | { kind: "rejected"; hold: HoldRecord }
  | { kind: "in_flight"; hold: HoldRecord }
  | { kind: "replay"; hold: HoldRecord };

export type HoldResolution =
  | { ok: true; hold: HoldRecord }
  | {
      ok: false;
      /** not_found → 404, expired / not_pending / hash_mismatch → 409, self → 403, unrecorded → 503 (the ledger did not take the record; nothing changed). */
      code: "not_found" | "expired" | "not_pending" | "self" | "hash_mismatch" | "unrecorded";
      message: string;
      hold: HoldRecord | null;
    };

/**
 * The HoldsDO RPC surface: one object per team (`team:<team>` in the HOLDS namespace). Expiry is
 * checked inside every transition (`now` is the caller's clock, ms since epoch); an alarm marks
 * holds expired and records `hold.expired` on the team's chain.
 */
export interface HoldsApi {
  /**
   * For the governed path, atomically: the live hold of `hold.actionHash` for `hold.principal`
   * (any session or run of it) is consumed if approved, reported if pending / rejected / in
   * flight / answered; with none (or only expired ones) `hold` is stored as a new pending hold.
   */
  claim(hold: NewHold, signing: LedgerSigning, now: number): Promise<HoldClaim>;
  /** The consumed hold's answer (replayed from now on); false when `id` is not a consumed hold. */
  complete(id: string, result: JsonRpcResponse, now: number): Promise<boolean>;
  /** A consumed hold whose call was not forwarded: marked so, and pending again until it expires (an approver may approve it again). */
  release(id: string, reason: string, now: number): Promise<boolean>;
  get(id: string, now: number): Promise<HoldRecord | null>;
  /** Newest first; `state` null: every state. */
  list(state: HoldState | null, now: number, limit: number): Promise<HoldRecord[]>;
  /**
   * Approves or rejects a pending, unexpired hold. The `hold.approved` / `hold.rejected` record is
   * durable on the team's chain before this answers ok; a late approval is refused (and recorded
   * as ignored). `expectHash`, when given, must equal the hold's action hash (the page showed that
   * action). The requester can never resolve its own hold (`self`).
   */
  resolve(
    id: string,
    decision: "approve" | "reject",
    approver: string,
    reason: string,
    expectHash: string | null,
    signing: LedgerSigning,
    now: number,
  ): Promise<HoldResolution>;
  /** Resolves when the hold leaves `pending` (or after `timeoutMs`): the hold as it is then. */
  awaitChange(id: string, timeoutMs: number): Promise<HoldRecord | null>;
}

// ---- stored config (ConfigDO, one for the gateway) -----------------------------------------

/** Version of the StoredConfig shape. */
export const STORED_CONFIG_VERSION = 1;
/** One stored gateway config: the YAML text (mappings and policy inlined), by version (1, 2, …). */
export interface StoredConfig {
  /** Record shape version (STORED_CONFIG_VERSION). */
  v: number;
  version: number;
  text: string;
  /** SHA-256 (hex) of `text`: what the ledger names (never the text, which may name secrets). */
  sha256: string;
  /** Who stored it (the admin's principal, from its token). */
  by: string;
  /** When it was stored (ms since the epoch). */
  at: number;
  /**
   * SHA-256 of the deployed `PORTCULLIS_CONFIG` var this version was stored over (null: none): a
   * later deploy of a different var supersedes every version stored before it.
   */
  base: string | null;
}
/** The stored config's identity without its text (what readers poll). */
export interface StoredConfigHead {
  version: number;
  sha256: string;
  base: string | null;
}
export type ConfigPut = { ok: true; changed: boolean; stored: StoredConfigHead } | { ok: false; message: string };
/**
 * The ConfigDO RPC surface (one object, `global`). Every change is recorded as `config.changed`
 * on the `_global` chain, durable before the change answers ok (no record, no change).
 */
export interface ConfigApi {
  current(): Promise<StoredConfig | null>;
  head(): Promise<StoredConfigHead | null>;
  /** `detail`: what the record says of the config besides its hash (upstream names, mode, …; never secrets). */
  put(text: string, sha256: string, by: string, signing: LedgerSigning, detail?: JsonObject, base?: string | null): Promise<ConfigPut>;
}
