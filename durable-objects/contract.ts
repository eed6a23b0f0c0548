/**
 * The storage contract of the session side and the small objects: the record shapes (each with a
 * version field) and RPC surfaces of SessionDO and its legs, CredentialsDO, SseDO, RevocationsDO,
 * TasksDO and ConfigDO. The other objects' contracts are the files split from this one, each
 * declaring its own: contract-ledger.ts (LedgerDO, and the LedgerSigning every recording object
 * is handed), contract-history.ts, contract-holds.ts and contract-killswitch.ts. Owns only types;
 * must never hold logic. docs/storage.md documents the same shapes for operators.
 */
import type { JsonObject, JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

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

/** Version of the SealedConnection shape (the `v` column of CredentialsDO's `connections` table). */
export const SEALED_CONNECTION_VERSION = 1;

/** What a writer hands CredentialsDO for one OAuth connection: the tokens sealed, the facts that are not secret beside them. */
export interface NewConnection {
  /** The sealing key's version (a fingerprint of the key), so a row sealed under another key is told apart, not misread. */
  kv: string;
  /** The upstream's authorization server (its issuer): the tokens are bound to it. */
  issuer: string;
  iv: string;
  /** AES-256-GCM of the token set (access, refresh, type): never plaintext. */
  ct: string;
  /** When the access token expires (ms), null when the server did not say. */
  expiresAt: number | null;
  /** The scopes granted, space-separated. */
  scope: string;
  /** Who connected it (a principal's `sub`). */
  by: string;
}

/** One OAuth connection of a principal (or a team) to one upstream, as stored. */
export interface SealedConnection extends NewConnection {
  /** Record shape version (SEALED_CONNECTION_VERSION). */
  v: number;
  upstream: string;
  /** When the tokens were stored (connected or last refreshed, ms). */
  at: number;
  /** When it was first connected (ms). */
  connectedAt: number;
}

/** The answer to a refresh lease: this caller refreshes (`lease`), another is refreshing (`busy`), or there is no connection. */
export type ConnectionLease = { lease: string; row: SealedConnection } | { busy: SealedConnection } | null;

/**
 * The CredentialsDO RPC surface. One class, three kinds of object (durable-objects/object-names.ts):
 * a principal's or a team's credentials (the token rows and OAuth connections), a shard of pending
 * OAuth authorizations (by state), and the gateway's OAuth client registrations.
 */
export interface CredentialsApi {
  put(upstream: string, sealed: { iv: string; ct: string }): Promise<void>;
  get(upstream: string): Promise<SealedCredential | null>;
  remove(upstream: string): Promise<boolean>;
  connectionPut(upstream: string, c: NewConnection): Promise<void>;
  connectionGet(upstream: string): Promise<SealedConnection | null>;
  connectionList(): Promise<SealedConnection[]>;
  /** Deletes the connection and returns what it was (for the revocation at the upstream). */
  connectionRemove(upstream: string): Promise<SealedConnection | null>;
  /** One refresh in flight per connection: the lease is this caller's until `now + ms`, or another holds it. */
  connectionLease(upstream: string, now: number, ms: number): Promise<ConnectionLease>;
  /**
   * Stores a refreshed token set under the lease (false: the lease was lost or the connection is
   * gone) and counts the refresh; `record` is the number of refreshes to put on one coalesced
   * ledger record now (null: not due yet, the count rides the next one).
   */
  connectionRefreshed(
    upstream: string,
    lease: string,
    c: NewConnection,
    now: number,
    recordEveryMs: number,
  ): Promise<{ stored: boolean; record: number | null }>;
  /** Drops the lease (a refresh that failed without refusing the connection). */
  connectionRelease(upstream: string, lease: string): Promise<void>;
  /** Deletes the connection if `lease` still holds it (a refused refresh); what it was, else null. */
  connectionDrop(upstream: string, lease: string): Promise<SealedConnection | null>;
  /** A pending authorization by its state (sealed), until `exp` (ms); expired ones are swept. */
  pendingPut(state: string, sealed: { iv: string; ct: string }, exp: number, now: number): Promise<void>;
  /** Takes a pending authorization once: null when unknown, taken or expired. */
  pendingTake(state: string, now: number): Promise<{ iv: string; ct: string } | null>;
  clientGet(key: string): Promise<{ iv: string; ct: string } | null>;
  clientPut(key: string, sealed: { iv: string; ct: string }): Promise<void>;
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
  /** Revokes `jti` until `exp`; `known`: the shard had minted it (noteMinted, unexpired) or revoked it before. */
  revoke(jti: string, exp: number, by: string): Promise<{ known: boolean }>;
  /** Records a jti this gateway minted (POST /v1/grants), until its grant's `exp`. */
  noteMinted(jti: string, exp: number): Promise<void>;
  /** One-time markers: true only for the first claim of `key` before `exp`. */
  claimOnce(key: string, exp: number): Promise<boolean>;
  /** One-time data: stored once (false if the key exists), read while unused, taken at most once. */
  putOnce(key: string, data: string, exp: number): Promise<boolean>;
  readOnce(key: string, take: boolean): Promise<string | null>;
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
