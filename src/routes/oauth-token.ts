/**
 * The OAuth token endpoint (`POST /oauth/token`), around the library that owns the protocol
 * (code redemption with PKCE, refresh rotation, RFC 7009 revocation). Around it: replay
 * detection — a code or refresh token the library redeemed is remembered by hash with its grant,
 * and the same one presented again revokes that whole grant (OAuth 2.1 §4.1.2, §4.3.1), while a
 * forged or refused one changes nothing; and the access token the client receives is a
 * Portcullis grant (an EdDSA JWT from the gateway's key, jti = the OAuth grant's id), its
 * `grant.refreshed` record durable in the grant team's chain first. A client revoking its
 * refresh token (RFC 7009) revokes the grant's jti too, once the library confirms it did. Must
 * never: hand out the library's own opaque access token, issue a token whose ledger record is not
 * durable, let anyone but a token's holder revoke its grant, or log a token.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import { signingKeys } from "../identity/auth.ts";
import { canonicalUrl, issuerOf } from "../identity/metadata.ts";
import { defaultResource, oauthApi, oauthIssuer, oauthServer, readProps } from "../identity/oauth-server.ts";
import { mintGrant } from "../identity/tokens.ts";
import { revocationObject } from "../../durable-objects/object-names.ts";
import { noteRevoked } from "../identity/revocation-cache.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import { readBodyText } from "../wire/body.ts";
import { sha256Hex } from "../wire/canonical.ts";
import { jsonResponse } from "../wire/http.ts";
import { revocationUntil } from "./grants.ts";

/** The library's tokens and codes: `<userId>:<grantId>:<secret>`. */
const TOKEN_SHAPE = /^(u_[A-Za-z0-9_-]+):([A-Za-z0-9_-]{16}):[A-Za-z0-9_-]{32,}$/;

function oauthError(code: string, description: string, status = 400): Response {
  return jsonResponse({ error: code, error_description: description }, status, {
    "cache-control": "no-store",
    ...(status === 503 ? { "retry-after": "1" } : {}),
  });
}

/** The same request, addressed to the canonical origin (the library compares endpoints exactly), with `body`. */
export function canonicalRequest(cfg: GatewayConfig, req: Request, body?: string): Request {
  const u = new URL(req.url);
  const init: RequestInit = { method: req.method, headers: req.headers };
  if (body !== undefined) init.body = body;
  return new Request(`${oauthIssuer(cfg)}${u.pathname}${u.search}`, init);
}

/** What the one-time store keeps about a code or refresh token once the library redeemed it: never the token. */
interface Redeemed {
  jti: string;
  team: string;
  client_id: string;
  user: string;
  grant: string;
}

/**
 * Revokes OAuth grant `r`: the library's record (no more refreshes) and its jti (no more access on
 * the next request), with its `grant.revoked` record.
 */
async function revokeRedeemed(env: Env, cfg: GatewayConfig, r: Redeemed, reason: string): Promise<void> {
  await oauthApi(cfg, env)?.revokeGrant(r.grant, r.user);
  const until = revocationUntil(cfg, undefined);
  const by = `oauth:${r.client_id}`;
  await revocationObject(env, r.jti).revoke(r.jti, until, by);
  noteRevoked(r.jti);
  await appendRecord(env, ledgerSigning(cfg), r.team, "grant.revoked", { jti: r.jti, until, by, reason, client_id: r.client_id });
}

/** The grant a library token names, while the library still holds it (its jti and team from the grant's metadata). */
async function grantNamed(env: Env, cfg: GatewayConfig, user: string, grant: string): Promise<Redeemed | null> {
  const g = (await oauthApi(cfg, env)!.listUserGrants(user)).items.find((x) => x.id === grant);
  const meta = g?.metadata as { jti?: unknown; team?: unknown } | undefined;
  if (!g || typeof meta?.jti !== "string") return null;
  return { jti: meta.jti, team: typeof meta.team === "string" ? meta.team : "default", client_id: g.clientId, user, grant };
}

/**
 * `POST /oauth/token`. Only what the library accepted counts: a code or refresh token it redeemed is
 * remembered (by hash, in the one-time store) with the grant it belongs to, so the same genuine
 * code or refresh token presented again — whether the library would accept it (its retry window
 * for the previous refresh token) or not — revokes that grant, access tokens included. A forged
 * or refused token changes nothing.
 */
export async function tokenRoute(req: Request, env: Env, cfg: GatewayConfig, ctx: ExecutionContext): Promise<Response> {
  const server = oauthServer(cfg);
  if (!server) return oauthError("invalid_request", "OAuth is not enabled on this gateway (auth.oauth.enabled)", 404);
  const read = await readBodyText(req, 64 * 1024);
  if (!read.ok)
    return oauthError(
      "invalid_request",
      read.reason === "timeout" ? "the request body did not arrive in time" : "the request body is too large",
      read.reason === "timeout" ? 408 : 413,
    );
  const form = new URLSearchParams(read.text);
  const grantType = form.get("grant_type");
  if (grantType === null && form.get("token") !== null) return revocation(env, cfg, ctx, req, read.text, form.get("token")!);
  const res = await server.fetch(canonicalRequest(cfg, req, read.text), env, ctx);
  if (grantType !== "authorization_code" && grantType !== "refresh_token") return res;
  const presented = grantType === "refresh_token" ? form.get("refresh_token") : form.get("code");
  const key = presented && TOKEN_SHAPE.test(presented) ? `${grantType === "refresh_token" ? "rt" : "code"}:${sha256Hex(presented)}` : null;
  if (res.status !== 200) {
    if (key) {
      // Refused: if this exact code or refresh token was redeemed before, it is being replayed.
      let seen: string | null = null;
      try {
        seen = await revocationObject(env, key).readOnce(key, true);
      } catch {
        seen = null;
      }
      if (seen) {
        try {
          await revokeRedeemed(env, cfg, JSON.parse(seen) as Redeemed, grantType === "refresh_token" ? "refresh token reuse" : "authorization code replay");
        } catch {
          return oauthError("temporarily_unavailable", "this token was already used, and its grant could not be revoked yet; try again", 503);
        }
      }
    }
    return res;
  }
  return asGrant(res, env, cfg, key, grantType);
}

/**
 * RFC 7009 revocation: the library revokes a refresh token's grant only when the token is genuine
 * and the requesting client's. Only if that grant is gone afterwards is its jti revoked too.
 */
async function revocation(env: Env, cfg: GatewayConfig, ctx: ExecutionContext, req: Request, body: string, token: string): Promise<Response> {
  const m = TOKEN_SHAPE.exec(token);
  const before = m ? await grantNamed(env, cfg, m[1]!, m[2]!) : null;
  const res = await oauthServer(cfg)!.fetch(canonicalRequest(cfg, req, body), env, ctx);
  if (before && res.ok && (await grantNamed(env, cfg, before.user, before.grant)) === null) {
    const until = revocationUntil(cfg, undefined);
    const by = `oauth:${before.client_id}`;
    await revocationObject(env, before.jti).revoke(before.jti, until, by);
    noteRevoked(before.jti);
    await appendRecord(env, ledgerSigning(cfg), before.team, "grant.revoked", {
      jti: before.jti,
      until,
      by,
      reason: "the client revoked its refresh token",
      client_id: before.client_id,
    });
  }
  return res;
}

/** The library's token answer with its access token replaced by the Portcullis grant it stands for. */
async function asGrant(res: Response, env: Env, cfg: GatewayConfig, key: string | null, grantType: string): Promise<Response> {
  const server = oauthServer(cfg)!;
  const body = (await res.json()) as Record<string, unknown>;
  const opaque = body.access_token;
  const resource = typeof body.resource === "string" ? body.resource : defaultResource(cfg);
  if (typeof opaque !== "string") return oauthError("server_error", "the authorization server issued no access token", 500);
  const v = await server.validateToken(resource, opaque, env);
  const p = readProps(v?.props);
  if (!v || !p) return oauthError("invalid_grant", "this grant carries no Portcullis grant; authorize again");
  // Revocation and the grant's lifetime were checked in the library's exchange callback (oauth-server.ts), from the list itself.
  const ids = TOKEN_SHAPE.exec(opaque);
  if (key && ids) {
    // Remember what the library redeemed; if it was redeemed before (a retry of the previous refresh token, or a race), that is reuse.
    const redeemed: Redeemed = { jti: p.jti, team: p.team, client_id: p.client_id, user: ids[1]!, grant: ids[2]! };
    let first: boolean;
    try {
      first = await revocationObject(env, key).putOnce(key, JSON.stringify(redeemed), revocationUntil(cfg, undefined));
    } catch {
      return oauthError("temporarily_unavailable", "the token store could not be written; no token was issued", 503);
    }
    if (!first) {
      const what = grantType === "refresh_token" ? "refresh token" : "authorization code";
      try {
        await revokeRedeemed(env, cfg, redeemed, grantType === "refresh_token" ? "refresh token reuse" : "authorization code replay");
      } catch {
        return oauthError("temporarily_unavailable", `this ${what} was already used, and its grant could not be revoked yet; try again`, 503);
      }
      return oauthError("invalid_grant", `this ${what} was already used: its grant is revoked, authorize again`);
    }
  }
  const keysP = signingKeys(env, cfg);
  if (!keysP) return oauthError("temporarily_unavailable", `no signing key is configured (set the ${cfg.auth.signingKeySecret} secret)`, 503);
  const now = Math.floor(Date.now() / 1000);
  const ttl = Math.max(1, Math.min(v.expiresAt - now, p.exp - now));
  const minted = await mintGrant(
    await keysP,
    {
      iss: issuerOf(cfg),
      aud: resource || canonicalUrl(cfg),
      sub: p.sub,
      team: p.team,
      roles: p.roles,
      tools: p.tools,
      ttlSeconds: ttl,
      jti: p.jti,
      ...(p.budget ? { budget: p.budget } : {}),
    },
    { maxLifetimeSeconds: cfg.auth.maxTokenLifetimeS, now },
  );
  try {
    await appendRecord(env, ledgerSigning(cfg), p.team, "grant.refreshed", { jti: p.jti, sub: p.sub, client_id: p.client_id, exp: minted.exp });
  } catch (e) {
    return oauthError("temporarily_unavailable", `no token was issued: its ledger record could not be written (${(e as Error).message})`, 503);
  }
  body.access_token = minted.token;
  body.expires_in = minted.exp - now;
  return jsonResponse(body, 200, { "cache-control": "no-store", pragma: "no-cache" });
}
