/**
 * Durable Object names: the one module that turns an identifier into the object that holds its
 * state. Every name carries its kind (`session:`, `run:`, `leg:`, `shard-`, `principal:`), so
 * no identifier of one kind can address an object of another, and client-supplied ids are
 * format-checked here before they address anything. Must never: address an object from an id
 * that failed its format check, or build a name outside this module.
 */
import type { Env } from "../src/env.ts";
import { GLOBAL_CHAIN } from "../src/ledger/records.ts";
import type { ConfigApi, CredentialsApi, RevocationsApi, SessionApi, SseApi, TasksApi } from "./contract.ts";
import type { HistoryApi } from "./contract-history.ts";
import type { HoldsApi } from "./contract-holds.ts";
import type { LedgerApi } from "./contract-ledger.ts";
import type { KillSwitchApi } from "./contract-killswitch.ts";

/** Legacy session ids the gateway issues: 192 random bits as 48 lowercase hex characters. */
export const SESSION_ID = /^[0-9a-f]{48}$/;
/** Run ids a modern client may choose (`Portcullis-Run-Id`). */
export const RUN_ID = /^[A-Za-z0-9_-]{8,128}$/;
/** Revocation shards: jtis spread over this many RevocationsDO objects. */
export const REVOCATION_SHARDS = 16;

export function newSessionId(): string {
  const b = crypto.getRandomValues(new Uint8Array(24));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function objectFor<T>(ns: DurableObjectNamespace, name: string): T {
  return ns.get(ns.idFromName(name)) as unknown as T;
}

/** A legacy session's object; null when `id` is not a session id this gateway could have issued. */
export function sessionObject(env: Env, id: string): SessionApi | null {
  return SESSION_ID.test(id) ? objectFor<SessionApi>(env.SESSIONS, `session:${id}`) : null;
}

/**
 * A legacy HTTP+SSE session's stream object (SseDO, `sse:<id>`); null when `id` is not an id this
 * gateway could have issued. Ids are made like session ids (newSessionId) but live in their own
 * namespace and kind, so an SSE session id never opens a SessionDO, nor the reverse.
 */
export function sseObject(env: Env, id: string): SseApi | null {
  return SESSION_ID.test(id) ? objectFor<SseApi>(env.SSE, `sse:${id}`) : null;
}

/**
 * The object holding one modern principal's calls parked between input rounds (RoundsDO,
 * `round:<sub>`), by the verified principal's `sub`: a round id (checked with its token by the caller)
 * addresses a call inside it, never an object. Typed by its caller (the surface lives in
 * src/upstream/rounds.ts, above this layer).
 */
export function roundObject<T>(env: Env, principal: string): T {
  return objectFor<T>(env.ROUNDS, `round:${principal}`);
}

/** A modern run's object (`Portcullis-Run-Id`); null when the id is malformed. */
export function runObject(env: Env, id: string): SessionApi | null {
  return RUN_ID.test(id) ? objectFor<SessionApi>(env.SESSIONS, `run:${id}`) : null;
}

/**
 * The object holding one modern principal's legacy session with one upstream (built from config,
 * not client input); `caps` names the client capabilities that session declared ("" for none, the
 * name it always had).
 */
export function legObject(env: Env, principal: string, upstream: string, url: string, caps = ""): SessionApi {
  return objectFor<SessionApi>(env.SESSIONS, `leg:${principal}\u0000${upstream}\u0000${url}${caps ? `\u0000${caps}` : ""}`);
}

function shardOf(jti: string): number {
  let h = 0;
  for (let i = 0; i < jti.length; i++) h = (h * 31 + jti.charCodeAt(i)) >>> 0;
  return h % REVOCATION_SHARDS;
}

/** The revocation shard that holds `jti`. */
export function revocationObject(env: Env, jti: string): RevocationsApi {
  return objectFor<RevocationsApi>(env.REVOCATIONS, `shard-${shardOf(jti)}`);
}

/** One principal's sealed upstream credentials. */
export function credentialsObject(env: Env, principal: string): CredentialsApi {
  return objectFor<CredentialsApi>(env.CREDENTIALS, `principal:${principal}`);
}

/** One team's shared OAuth connections (CredentialsDO `team:<team>`); null when the team is not a valid team name. */
export function teamCredentialsObject(env: Env, team: string): CredentialsApi | null {
  return CHAIN_NAME.test(team) && team !== GLOBAL_CHAIN ? objectFor<CredentialsApi>(env.CREDENTIALS, `team:${team}`) : null;
}

/** OAuth authorization states the gateway issues: 256 random bits, base64url. */
export const CONNECT_STATE = /^[A-Za-z0-9_-]{43}$/;
/** Pending authorizations spread over this many CredentialsDO shards. */
export const CONNECT_SHARDS = 16;

/** The shard holding the pending authorization of `state`; null when `state` is not one the gateway could have issued. */
export function pendingConnectObject(env: Env, state: string): CredentialsApi | null {
  return CONNECT_STATE.test(state) ? objectFor<CredentialsApi>(env.CREDENTIALS, `connect-shard-${shardOf(state) % CONNECT_SHARDS}`) : null;
}

/** The gateway's OAuth client registrations at upstreams' authorization servers (one object). */
export function oauthClientsObject(env: Env): CredentialsApi {
  return objectFor<CredentialsApi>(env.CREDENTIALS, "oauth-clients:global");
}

/** The tasks one principal created (its TasksDO), by the verified principal's `sub`; its own namespace, so it never meets that principal's credentials object. */
export function taskObject(env: Env, principal: string): TasksApi {
  return objectFor<TasksApi>(env.TASKS, `principal:${principal}`);
}

/** One principal's recent calls and budget counters (its HistoryDO), by the verified principal's `sub`; its own namespace, so it never meets that principal's other objects. */
export function historyObject(env: Env, principal: string): HistoryApi {
  return objectFor<HistoryApi>(env.HISTORY, `principal:${principal}`);
}

/** Team names become chain names (the chain is the team); `_global` is reserved. */
export const CHAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$|^_global$/;

/** The LedgerDO holding one chain; null when the name is not a chain name. */
export function ledgerObject(env: Env, chain: string): LedgerApi | null {
  return CHAIN_NAME.test(chain) ? objectFor<LedgerApi>(env.LEDGER, `chain:${chain}`) : null;
}

/** Hold ids: `<team>~<24 hex>`; the team names the HoldsDO that holds it. */
export const HOLD_ID = /^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})~([0-9a-f]{24})$/;

/** A new hold id for `team`. */
export function newHoldId(team: string): string {
  const b = crypto.getRandomValues(new Uint8Array(12));
  return `${team}~${Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")}`;
}

/** The team a hold id belongs to; null when `id` is not a hold id. */
export function holdTeam(id: string): string | null {
  return HOLD_ID.exec(id)?.[1] ?? null;
}

/** One team's holds (its HoldsDO); null when the team is not a valid team name. */
export function holdsObject(env: Env, team: string): HoldsApi | null {
  return CHAIN_NAME.test(team) && team !== GLOBAL_CHAIN ? objectFor<HoldsApi>(env.HOLDS, `team:${team}`) : null;
}

/** The gateway's one kill switch (read through a per-isolate cache of at most one second, src/ports/killswitch-client.ts). */
export function killSwitchObject(env: Env): KillSwitchApi {
  return objectFor<KillSwitchApi>(env.KILLSWITCH, "global");
}

/** The gateway's one stored config (read through a per-isolate cache of at most one second, src/ports/live-config.ts). */
export function configObject(env: Env): ConfigApi {
  return objectFor<ConfigApi>(env.CONFIG, "global");
}
