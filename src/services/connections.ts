/**
 * OAuth connections to upstreams: a person connects an OAuth upstream in the console (the
 * authorization code flow run for them: discovery, the gateway's client registration, PKCE,
 * `resource`), the gateway keeps the tokens sealed in the owner's CredentialsDO (the principal's,
 * or the team's for a `shared` upstream), refreshes them before expiry with one refresh in flight
 * per connection, drops them when the server refuses the refresh, and revokes them on disconnect.
 * Every change is a `credential.*` record on the owner's team chain. Each request's upstreams get
 * the connection's token here (`withConnections`), or a problem naming where to connect.
 * Owns: whose connection an upstream uses, the sealed token payload and its binding, refresh, and
 * the connect URL; the console's side (list, connect, callback, disconnect) is
 * ./connections-consent.ts. Must never: let a token
 * reach a log, a record, a page or another owner's request; send a request to an upstream
 * without its token; or complete an authorization for a browser or principal that did not start it.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import { type AuthorizationServer, type Fetcher, type OAuthClient, OAuthFlowError, refreshTokens, type TokenSet } from "../egress/oauth-client.ts";
import { keyVersion, seal, unseal } from "../egress/sealing.ts";
import type { Env } from "../env.ts";
import { canonicalOrigin } from "../identity/metadata.ts";
import type { CredentialBody } from "../ledger/records.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import type { CredentialsApi, NewConnection, SealedConnection } from "../../durable-objects/contract.ts";
import { credentialsObject, teamCredentialsObject } from "../../durable-objects/object-names.ts";

/** The console paths of the flow (src/routes/console-connections.ts serves them). */
export const CONNECTIONS_PATH = "/console/connections";
export const CALLBACK_PATH = "/console/connections/callback";
/** The gateway's client ID metadata document (registration: metadata_document). */
export const CLIENT_METADATA_PATH = "/oauth/upstream-client.json";

/** A pending authorization lives this long: the person has ten minutes to consent. */
export const PENDING_MS = 10 * 60_000;
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

export function ownerObject(env: Env, o: Owner): CredentialsApi {
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

export function fetcherFor(cfg: GatewayConfig, onLoopback: boolean): Fetcher {
  return (url, init) => guardedFetch(url, init, { rules: cfg.egress, gatewayOnLoopback: onLoopback, timeoutMs: 10_000, maxBytes: 256 * 1024 });
}

/** Where a person connects `up`: the console's Connections page for it. */
export function connectUrl(cfg: GatewayConfig, up: UpstreamConfig): string {
  return `${canonicalOrigin(cfg)}${CONNECTIONS_PATH}?upstream=${encodeURIComponent(up.name)}`;
}

export function record(env: Env, cfg: GatewayConfig, kind: "connected" | "refreshed" | "refused" | "revoked", o: Owner, body: Omit<CredentialBody, "owner">) {
  return appendRecord(env, ledgerSigning(cfg), o.team, `credential.${kind}`, {
    owner: ownerName(o),
    ...body,
  } satisfies CredentialBody as unknown as JsonObject);
}

export const scopesOf = (s: string) => s.split(" ").filter(Boolean);

export async function sealTokens(
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

export async function openTokens(env: Env, cfg: GatewayConfig, o: Owner, up: UpstreamConfig, row: SealedConnection): Promise<Sealed | string> {
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
