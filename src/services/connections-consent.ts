/**
 * The console's side of OAuth connections: the Connections list a person sees, connecting (the
 * authorization code flow run for them: discovery, the gateway's client at the authorization
 * server, PKCE, `resource`, a pending authorization bound to state, verifier and browser nonce),
 * the authorization server's return (tokens sealed for their owner and recorded), disconnecting
 * (revoked at the server where it offers RFC 7009, then deleted), and the gateway's client ID
 * metadata document. Whose connection an upstream uses, the sealed payload and refresh are
 * ./connections.ts's. Must never: let a token reach a log, a record or a page, or complete an
 * authorization for a browser or principal that did not start it.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import {
  type AuthorizationServer,
  authorizationUrl,
  clientMetadata,
  exchangeCode,
  type Fetcher,
  type OAuthClient,
  OAuthFlowError,
  pkce,
  registerClient,
  revokeToken,
} from "../egress/oauth-client.ts";
import { discover } from "../egress/oauth-discovery.ts";
import { keyVersion, seal, unseal } from "../egress/sealing.ts";
import type { Env } from "../env.ts";
import { canonicalOrigin } from "../identity/metadata.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { oauthClientsObject, pendingConnectObject } from "../../durable-objects/object-names.ts";

import { CALLBACK_PATH, CLIENT_METADATA_PATH, fetcherFor, openTokens, ownerObject, ownerOf, PENDING_MS, record, scopesOf, sealTokens } from "./connections.ts";

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
