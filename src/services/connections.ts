/**
 * OAuth connections to upstreams: a person connects an OAuth upstream in the console (the
 * authorization code flow run for them: discovery, the gateway's client registration, PKCE,
 * `resource`), the gateway keeps the tokens sealed in the owner's CredentialsDO (the principal's,
 * or the team's for a `shared` upstream), refreshes them before expiry with one refresh in flight
 * per connection, drops them when the server refuses the refresh, and revokes them on disconnect.
 * Every change is a `credential.*` record on the owner's team chain. Each request's upstreams get
 * the connection's token here (`withConnections`), or a problem naming where to connect.
 * Owns: whose connection an upstream uses, the sealed token payload and its binding, the pending
 * authorization (state, verifier, browser nonce) and the connect URL. Must never: let a token
 * reach a log, a record, a page or another owner's request; send a request to an upstream
 * without its token; or complete an authorization for a browser or principal that did not start it.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import {
  type AuthorizationServer,
  authorizationUrl,
  clientMetadata,
  discover,
  exchangeCode,
  type Fetcher,
  type OAuthClient,
  OAuthFlowError,
  pkce,
  refreshTokens,
  registerClient,
  revokeToken,
  type TokenSet,
} from "../egress/oauth-client.ts";
import { keyVersion, seal, unseal } from "../egress/sealing.ts";
import type { Env } from "../env.ts";
import { canonicalOrigin } from "../identity/metadata.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import type { CredentialBody } from "../ledger/records.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import type { CredentialsApi, NewConnection, SealedConnection } from "../../durable-objects/contract.ts";
import { credentialsObject, oauthClientsObject, pendingConnectObject, teamCredentialsObject } from "../../durable-objects/object-names.ts";

/** The console paths of the flow (src/routes/console-connections.ts serves them). */
export const CONNECTIONS_PATH = "/console/connections";
export const CALLBACK_PATH = "/console/connections/callback";
/** The gateway's client ID metadata document (registration: metadata_document). */
export const CLIENT_METADATA_PATH = "/oauth/upstream-client.json";

/** A pending authorization lives this long: the person has ten minutes to consent. */
const PENDING_MS = 10 * 60_000;
/** One refresh holds its lease at most this long; a caller that finds it held waits at most WAIT_MS. */
const LEASE_MS = 15_000;
const WAIT_MS = 5_000;
/** Refreshes are recorded coalesced: at most one `credential.refreshed` per connection per hour. */
const RECORD_REFRESH_EVERY_MS = 60 * 60_000;

/** Whose connection an upstream uses for a principal: its own, or its team's (`shared`). */
export interface Owner {
  kind: "principal" | "team";
  id: string;
  /** The team chain its records go to. */
  team: string;
}

export function ownerOf(up: UpstreamConfig, p: Principal): Owner {
  return up.oauth?.connection === "shared" ? { kind: "team", id: p.team, team: p.team } : { kind: "principal", id: p.sub, team: p.team };
}

const ownerName = (o: Owner) => `${o.kind}:${o.id}`;

function ownerObject(env: Env, o: Owner): CredentialsApi {
  if (o.kind === "principal") return credentialsObject(env, o.id);
  const t = teamCredentialsObject(env, o.id);
  if (!t) throw new Error("the team name cannot hold shared connections");
  return t;
}

/** What a connection's ciphertext holds: the tokens and everything a refresh or revocation needs. */
interface Sealed {
  access: string;
  refresh?: string;
  server: AuthorizationServer;
  client: OAuthClient;
  resource: string;
}

/** Bound to owner, upstream name and URL, and the authorization server: tokens never unseal for another. */
const tokenAad = (o: Owner, up: UpstreamConfig, issuer: string) => `portcullis-oauth-tokens\u0000${ownerName(o)}\u0000${up.name}\u0000${up.url}\u0000${issuer}`;

function fetcherFor(cfg: GatewayConfig, onLoopback: boolean): Fetcher {
  return (url, init) => guardedFetch(url, init, { rules: cfg.egress, gatewayOnLoopback: onLoopback, timeoutMs: 10_000, maxBytes: 256 * 1024 });
}

/** Where a person connects `up`: the console's Connections page for it. */
export function connectUrl(cfg: GatewayConfig, up: UpstreamConfig): string {
  return `${canonicalOrigin(cfg)}${CONNECTIONS_PATH}?upstream=${encodeURIComponent(up.name)}`;
}

function record(env: Env, cfg: GatewayConfig, kind: "connected" | "refreshed" | "refused" | "revoked", o: Owner, body: Omit<CredentialBody, "owner">) {
  return appendRecord(env, ledgerSigning(cfg), o.team, `credential.${kind}`, {
    owner: ownerName(o),
    ...body,
  } satisfies CredentialBody as unknown as JsonObject);
}

const scopesOf = (s: string) => s.split(" ").filter(Boolean);

async function sealTokens(
  env: Env,
  cfg: GatewayConfig,
  o: Owner,
  up: UpstreamConfig,
  by: string,
  t: TokenSet,
  s: Omit<Sealed, "access" | "refresh">,
): Promise<NewConnection> {
  const payload: Sealed = { access: t.accessToken, server: s.server, client: s.client, resource: s.resource };
  if (t.refreshToken !== undefined) payload.refresh = t.refreshToken;
  const sealed = await seal(env, cfg, tokenAad(o, up, s.server.issuer), JSON.stringify(payload));
  return { kv: await keyVersion(env, cfg), issuer: s.server.issuer, iv: sealed.iv, ct: sealed.ct, expiresAt: t.expiresAt, scope: t.scope, by };
}

async function openTokens(env: Env, cfg: GatewayConfig, o: Owner, up: UpstreamConfig, row: SealedConnection): Promise<Sealed | string> {
  if (row.kv !== (await keyVersion(env, cfg))) return "its tokens were sealed under another credentials key";
  try {
    return JSON.parse(await unseal(env, cfg, tokenAad(o, up, row.issuer), row)) as Sealed;
  } catch {
    return "its tokens could not be read (the upstream's URL or the credentials key changed)";
  }
}

/** Refresh this long before expiry: a tenth of the token's life, at most a minute. */
function dueForRefresh(row: SealedConnection, now: number): boolean {
  if (row.expiresAt === null) return false;
  const margin = Math.min(60_000, Math.max(0, (row.expiresAt - row.at) / 10));
  return now >= row.expiresAt - margin;
}

type Resolved = { token: string } | { problem: string; connect: boolean };

/**
 * The access token of `o`'s connection to `up`, refreshed first when due (one refresh in flight:
 * the others wait for it, bounded, or use the token while it is still valid).
 */
async function tokenFor(
  env: Env,
  cfg: GatewayConfig,
  o: Owner,
  p: Principal,
  up: UpstreamConfig,
  onLoopback: boolean,
  waitUntil: (x: Promise<unknown>) => void,
): Promise<Resolved> {
  const obj = ownerObject(env, o);
  let row = await obj.connectionGet(up.name);
  const notConnected = (why: string): Resolved => ({ problem: why, connect: true });
  if (!row) return notConnected(o.kind === "team" ? `team ${o.id} has not connected upstream ${up.name}` : `you have not connected upstream ${up.name}`);
  const now = Date.now();
  const opened = await openTokens(env, cfg, o, up, row);
  if (typeof opened === "string") return notConnected(`the connection to upstream ${up.name} cannot be used: ${opened}`);
  if (!dueForRefresh(row, now)) return { token: opened.access };
  const valid = row.expiresAt !== null && now < row.expiresAt;
  if (opened.refresh === undefined)
    return valid ? { token: opened.access } : notConnected(`the connection to upstream ${up.name} expired and cannot be refreshed`);
  const lease = await obj.connectionLease(up.name, now, LEASE_MS);
  if (lease === null) return notConnected(`you have not connected upstream ${up.name}`);
  if ("busy" in lease) {
    if (valid) return { token: opened.access };
    for (const until = now + WAIT_MS; Date.now() < until; ) {
      await new Promise((r) => setTimeout(r, 200));
      row = await obj.connectionGet(up.name);
      if (!row) return notConnected(`the connection to upstream ${up.name} was refused by its authorization server; connect again`);
      if (row.at !== lease.busy.at) {
        const fresh = await openTokens(env, cfg, o, up, row);
        return typeof fresh === "string" ? notConnected(fresh) : { token: fresh.access };
      }
    }
    return { problem: `the connection to upstream ${up.name} is being refreshed; try again in a moment`, connect: false };
  }
  const fetcher = fetcherFor(cfg, onLoopback);
  try {
    const t = await refreshTokens(fetcher, opened.server, opened.client, { refreshToken: opened.refresh, resource: opened.resource, scope: row.scope });
    const next = await sealTokens(env, cfg, o, up, row.by, t, opened);
    const r = await obj.connectionRefreshed(up.name, lease.lease, next, Date.now(), RECORD_REFRESH_EVERY_MS);
    if (r.record !== null)
      waitUntil(
        record(env, cfg, "refreshed", o, {
          principal: p.sub,
          upstream: up.name,
          authorization_server: row.issuer,
          scopes: scopesOf(t.scope),
          refreshes: r.record,
        }),
      );
    return { token: t.accessToken };
  } catch (e) {
    if (e instanceof OAuthFlowError && e.kind === "refused") {
      const dropped = await obj.connectionDrop(up.name, lease.lease);
      if (dropped)
        waitUntil(
          record(env, cfg, "refused", o, {
            principal: p.sub,
            upstream: up.name,
            authorization_server: row.issuer,
            scopes: scopesOf(row.scope),
            reason: `refresh refused: ${e.reason}`,
          }),
        );
      return notConnected(`the authorization server refused to refresh the connection to upstream ${up.name} (${e.reason}); connect again`);
    }
    await obj.connectionRelease(up.name, lease.lease);
    if (valid) return { token: opened.access };
    return { problem: `the connection to upstream ${up.name} could not be refreshed: ${(e as Error).message}`, connect: false };
  }
}

/**
 * The upstreams as one principal's requests see them: each OAuth upstream carries the token of
 * the connection it uses, or a `credentialProblem` (with `connect`, where to connect) that makes
 * every request to it fail before anything is sent.
 */
export async function withConnections(
  env: Env,
  cfg: GatewayConfig,
  p: Principal,
  upstreams: UpstreamConfig[],
  onLoopback: boolean,
  waitUntil: (x: Promise<unknown>) => void,
): Promise<UpstreamConfig[]> {
  if (!upstreams.some((u) => u.oauth)) return upstreams;
  return Promise.all(
    upstreams.map(async (up): Promise<UpstreamConfig> => {
      if (!up.oauth) return up;
      let r: Resolved;
      try {
        r = await tokenFor(env, cfg, ownerOf(up, p), p, up, onLoopback, waitUntil);
      } catch (e) {
        r = { problem: `the connection to upstream ${up.name} could not be read (${(e as Error).message})`, connect: false };
      }
      if ("token" in r) return { ...up, headers: { ...up.headers, authorization: `Bearer ${r.token}` } };
      if (!r.connect) return { ...up, credentialProblem: r.problem };
      const url = connectUrl(cfg, up);
      return {
        ...up,
        credentialProblem: `${r.problem}. Upstream ${up.name} signs in with OAuth: ${up.oauth.connection === "shared" ? "an operator of your team" : "the person this grant belongs to"} connects it at ${url} (sign in to the console with this grant), then the call can be retried`,
        connect: { url },
      };
    }),
  );
}

// ---- the console's side: list, connect, callback, disconnect -------------------------------------

export type Result<T> = { ok: true; value: T } | { ok: false; status: number; message: string };

export interface ConnectionView {
  upstream: string;
  description?: string;
  connection: "per_principal" | "shared";
  /** Whether this viewer may connect or disconnect it (a shared one needs operator or admin). */
  canChange: boolean;
  connected: null | { by: string; at: number; expiresAt: number | null; scopes: string[]; authorizationServer: string; usable: boolean };
}

/** Each OAuth upstream the principal's grant reaches, with its connection. */
export async function listConnections(env: Env, cfg: GatewayConfig, p: Principal): Promise<ConnectionView[]> {
  const ups = cfg.upstreams.filter((u) => u.oauth && grantReachesUpstream(p, u));
  const kv = ups.length > 0 ? await keyVersion(env, cfg).catch(() => null) : null;
  return Promise.all(
    ups.map(async (up): Promise<ConnectionView> => {
      const o = ownerOf(up, p);
      const row = await ownerObject(env, o).connectionGet(up.name);
      const v: ConnectionView = {
        upstream: up.name,
        connection: up.oauth!.connection,
        canChange: o.kind === "principal" || principalHas(p, "operator"),
        connected: row
          ? { by: row.by, at: row.connectedAt, expiresAt: row.expiresAt, scopes: scopesOf(row.scope), authorizationServer: row.issuer, usable: row.kv === kv }
          : null,
      };
      if (up.description !== undefined) v.description = up.description;
      return v;
    }),
  );
}

function target(cfg: GatewayConfig, p: Principal, name: string): Result<UpstreamConfig> {
  const up = cfg.upstreams.find((u) => u.name === name && u.oauth && grantReachesUpstream(p, u));
  if (!up) return { ok: false, status: 404, message: `no OAuth upstream named ${name} is reachable with this grant` };
  if (up.oauth!.connection === "shared" && !principalHas(p, "operator"))
    return { ok: false, status: 403, message: `upstream ${name} has one connection for team ${p.team}; an operator or admin connects it` };
  return { ok: true, value: up };
}

/** What a pending authorization holds (sealed in its shard, under its state). */
interface Pending {
  sub: string;
  team: string;
  upstream: string;
  url: string;
  nonceHash: string;
  verifier: string;
  redirectUri: string;
  resource: string;
  server: AuthorizationServer;
  client: OAuthClient;
}

const pendingAad = (state: string) => `portcullis-oauth-pending\u0000${state}`;
const sha256 = async (s: string) =>
  Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s))), (x) => x.toString(16).padStart(2, "0")).join("");
const random = () => {
  const b = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...b))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
};

/** The gateway's client at `server` for `up`: registered once and kept (sealed), or configured. */
async function clientAt(
  env: Env,
  cfg: GatewayConfig,
  fetcher: Fetcher,
  up: UpstreamConfig,
  server: AuthorizationServer,
  redirectUri: string,
): Promise<OAuthClient> {
  const settings = up.oauth!;
  const metadataUrl = `${canonicalOrigin(cfg)}${CLIENT_METADATA_PATH}`;
  if (settings.registration !== "dynamic") return registerClient(fetcher, server, settings, redirectUri, metadataUrl);
  const key = `${up.name}\u0000${up.url}\u0000${server.issuer}\u0000${redirectUri}`;
  const aad = `portcullis-oauth-client\u0000${key}`;
  const store = oauthClientsObject(env);
  const kept = await store.clientGet(key);
  if (kept) {
    try {
      return JSON.parse(await unseal(env, cfg, aad, kept)) as OAuthClient;
    } catch {
      /* sealed under another key: register again */
    }
  }
  const client = await registerClient(fetcher, server, settings, redirectUri, metadataUrl);
  await store.clientPut(key, await seal(env, cfg, aad, JSON.stringify(client)));
  return client;
}

/**
 * Starts connecting `name` for `p`: discovery, the client, PKCE and a pending authorization bound
 * to this browser (`nonce`, kept in a cookie by the route). The authorization URL to send the
 * browser to, or why not.
 */
export async function startConnect(
  env: Env,
  cfg: GatewayConfig,
  p: Principal,
  name: string,
  onLoopback: boolean,
): Promise<Result<{ location: string; nonce: string }>> {
  const t = target(cfg, p, name);
  if (!t.ok) return t;
  const up = t.value;
  const fetcher = fetcherFor(cfg, onLoopback);
  const redirectUri = `${canonicalOrigin(cfg)}${CALLBACK_PATH}`;
  try {
    const found = await discover(fetcher, up.url);
    const client = await clientAt(env, cfg, fetcher, up, found.server, redirectUri);
    const { verifier, challenge } = await pkce();
    const state = random();
    const nonce = random();
    const pending: Pending = {
      sub: p.sub,
      team: p.team,
      upstream: up.name,
      url: up.url,
      nonceHash: await sha256(nonce),
      verifier,
      redirectUri,
      resource: found.resource,
      server: found.server,
      client,
    };
    const shard = pendingConnectObject(env, state)!;
    const now = Date.now();
    await shard.pendingPut(state, await seal(env, cfg, pendingAad(state), JSON.stringify(pending)), now + PENDING_MS, now);
    const scopes = up.oauth!.scopes ?? found.scopes;
    return {
      ok: true,
      value: { location: authorizationUrl(found.server, client, { redirectUri, state, challenge, resource: found.resource, scopes }), nonce },
    };
  } catch (e) {
    if (e instanceof OAuthFlowError) return { ok: false, status: 502, message: `upstream ${name} cannot be connected: ${e.reason}` };
    throw e;
  }
}

/**
 * The authorization server sent the browser back: the pending authorization of `state` (taken
 * once), checked against this browser's nonce and the signed-in principal when there is one, then
 * the code exchanged for tokens, kept and recorded. A refusal at the server is recorded too.
 */
export async function finishConnect(
  env: Env,
  cfg: GatewayConfig,
  q: { state: string | null; code: string | null; error: string | null; nonce: string | null; signedIn: Principal | null; onLoopback: boolean },
): Promise<Result<{ upstream: string; scopes: string[] }>> {
  const shard = q.state ? pendingConnectObject(env, q.state) : null;
  if (!shard || !q.state)
    return { ok: false, status: 400, message: "the authorization server sent back no state this gateway issued; start connecting again from Connections" };
  const taken = await shard.pendingTake(q.state, Date.now());
  if (!taken)
    return {
      ok: false,
      status: 400,
      message: "this connection attempt is unknown, already used or expired (ten minutes); start connecting again from Connections",
    };
  let pending: Pending;
  try {
    pending = JSON.parse(await unseal(env, cfg, pendingAad(q.state), taken)) as Pending;
  } catch {
    return { ok: false, status: 400, message: "this connection attempt cannot be read (the credentials key changed); start connecting again" };
  }
  if (q.nonce === null || (await sha256(q.nonce)) !== pending.nonceHash)
    return {
      ok: false,
      status: 403,
      message: "this connection attempt was started in another browser (or a newer attempt replaced it); start connecting again from Connections",
    };
  if (q.signedIn && q.signedIn.sub !== pending.sub)
    return { ok: false, status: 403, message: "this connection attempt belongs to another principal than the one signed in; nothing was connected" };
  const up = cfg.upstreams.find((u) => u.name === pending.upstream && u.url === pending.url && u.oauth);
  if (!up) return { ok: false, status: 409, message: `upstream ${pending.upstream} is no longer an OAuth upstream of this gateway; nothing was connected` };
  // Who started it, as they were then (the cross-site return may carry no console session): the pending row names principal and team.
  const p: Principal = q.signedIn ?? { sub: pending.sub, team: pending.team, roles: [], tools: null, authenticated: true };
  const o = ownerOf(up, { ...p, team: pending.team });
  const scopesAsked = up.oauth!.scopes ?? [];
  if (q.error !== null || q.code === null) {
    const reason = (q.error ?? "no code").replace(/[^A-Za-z0-9_.-]/g, "").slice(0, 60) || "error";
    await record(env, cfg, "refused", o, {
      principal: p.sub,
      upstream: up.name,
      authorization_server: pending.server.issuer,
      scopes: scopesAsked,
      reason: `consent: ${reason}`,
    });
    return {
      ok: false,
      status: 400,
      message: `the authorization server did not connect upstream ${up.name} (${reason === "access_denied" ? "consent was refused" : reason}); nothing was kept`,
    };
  }
  try {
    const t = await exchangeCode(fetcherFor(cfg, q.onLoopback), pending.server, pending.client, {
      code: q.code,
      verifier: pending.verifier,
      redirectUri: pending.redirectUri,
      resource: pending.resource,
    });
    const row = await sealTokens(env, cfg, o, up, p.sub, t, { server: pending.server, client: pending.client, resource: pending.resource });
    const store = ownerObject(env, o);
    await store.connectionPut(up.name, row);
    try {
      await record(env, cfg, "connected", o, { principal: p.sub, upstream: up.name, authorization_server: pending.server.issuer, scopes: scopesOf(t.scope) });
    } catch (e) {
      // A connection the ledger does not know of is not kept.
      await store.connectionRemove(up.name).catch(() => undefined);
      return {
        ok: false,
        status: 503,
        message: `upstream ${up.name} was not connected: the ledger could not record it (${(e as Error).message}); nothing was kept`,
      };
    }
    return { ok: true, value: { upstream: up.name, scopes: scopesOf(t.scope) } };
  } catch (e) {
    if (e instanceof OAuthFlowError) return { ok: false, status: 502, message: `upstream ${up.name} was not connected: ${e.reason}; nothing was kept` };
    throw e;
  }
}

/** Disconnects: the tokens revoked at the server where it offers revocation (RFC 7009), deleted, recorded. */
export async function disconnect(env: Env, cfg: GatewayConfig, p: Principal, name: string, onLoopback: boolean): Promise<Result<{ revokedUpstream: boolean }>> {
  const t = target(cfg, p, name);
  if (!t.ok) return t;
  const up = t.value;
  const o = ownerOf(up, p);
  const row = await ownerObject(env, o).connectionRemove(up.name);
  if (!row) return { ok: false, status: 404, message: `upstream ${name} is not connected` };
  const opened = await openTokens(env, cfg, o, up, row);
  let revoked = false;
  if (typeof opened !== "string") {
    const fetcher = fetcherFor(cfg, onLoopback);
    if (opened.refresh !== undefined) revoked = await revokeToken(fetcher, opened.server, opened.client, opened.refresh, "refresh_token");
    revoked = (await revokeToken(fetcher, opened.server, opened.client, opened.access, "access_token")) || revoked;
  }
  await record(env, cfg, "revoked", o, {
    principal: p.sub,
    upstream: up.name,
    authorization_server: row.issuer,
    scopes: scopesOf(row.scope),
    reason: "disconnected",
    revoked_upstream: revoked,
  });
  return { ok: true, value: { revokedUpstream: revoked } };
}

/** The gateway's client ID metadata document (served at CLIENT_METADATA_PATH). */
export function clientMetadataDocument(cfg: GatewayConfig): Record<string, unknown> {
  const origin = canonicalOrigin(cfg);
  return clientMetadata(`${origin}${CALLBACK_PATH}`, "none", `${origin}${CLIENT_METADATA_PATH}`);
}
