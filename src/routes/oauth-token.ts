/**
 * The OAuth token endpoint (`POST /oauth/token`), around the library that owns the protocol
 * (code redemption with PKCE, refresh rotation, RFC 7009 revocation): before it, refresh-token
 * reuse detection — a refresh token is good once, and presenting it a second time revokes its
 * whole grant (OAuth 2.1 §4.3.1) — and after it, the access token the client receives is a
 * Portcullis grant (an EdDSA JWT from the gateway's key, jti = the OAuth grant's id), its
 * `grant.refreshed` record durable in the grant team's chain first. Revoking a refresh token
 * through RFC 7009 revokes the grant too. Must never: hand out the library's own opaque access
 * token, issue a token whose ledger record is not durable, or log a token.
 */
import type { GatewayConfig } from "../config/load.ts";
import type { Env } from "../env.ts";
import { isRevoked, signingKeys } from "../identity/auth.ts";
import { canonicalUrl, issuerOf } from "../identity/metadata.ts";
import { defaultResource, oauthApi, oauthIssuer, oauthServer, readProps } from "../identity/oauth-server.ts";
import { mintGrant } from "../identity/tokens.ts";
import { revocationObject } from "../../durable-objects/names.ts";
import { appendRecord, ledgerSigning } from "../mcp/ledger-writer.ts";
import { readBodyText } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import { revocationUntil } from "./grants.ts";

/** The library's refresh tokens: `<userId>:<grantId>:<secret>`. */
const REFRESH_SHAPE = /^(u_[A-Za-z0-9_-]+):([A-Za-z0-9_-]{16}):[A-Za-z0-9_-]{32}$/;

function oauthError(code: string, description: string, status = 400): Response {
  return jsonResponse({ error: code, error_description: description }, status, {
    "cache-control": "no-store",
    ...(status === 503 ? { "retry-after": "1" } : {}),
  });
}

async function sha256Hex(text: string): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return [...d].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** The same request, addressed to the canonical origin (the library compares endpoints exactly), with `body`. */
export function canonicalRequest(cfg: GatewayConfig, req: Request, body?: string): Request {
  const u = new URL(req.url);
  const init: RequestInit = { method: req.method, headers: req.headers };
  if (body !== undefined) init.body = body;
  return new Request(`${oauthIssuer(cfg)}${u.pathname}${u.search}`, init);
}

/** Revokes OAuth grant `grantId` of `userId`: the library's record (no more refreshes) and its jti (no more access). */
async function revokeFamily(env: Env, cfg: GatewayConfig, userId: string, grantId: string, reason: string): Promise<void> {
  const api = oauthApi(cfg, env);
  if (!api) return;
  const grants = await api.listUserGrants(userId);
  const g = grants.items.find((x) => x.id === grantId);
  await api.revokeGrant(grantId, userId);
  const meta = g?.metadata as { jti?: unknown; team?: unknown } | undefined;
  if (typeof meta?.jti !== "string") return;
  const until = revocationUntil(cfg, undefined);
  await revocationObject(env, meta.jti).revoke(meta.jti, until, `oauth:${g!.clientId}`);
  const team = typeof meta.team === "string" ? meta.team : "default";
  await appendRecord(env, ledgerSigning(cfg), team, "grant.revoked", { jti: meta.jti, until, by: `oauth:${g!.clientId}`, reason, client_id: g!.clientId });
}

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
  const refresh = form.get("refresh_token");
  if (grantType === "refresh_token" && refresh !== null) {
    const m = REFRESH_SHAPE.exec(refresh);
    if (m) {
      const key = `rt:${await sha256Hex(refresh)}`;
      let first: boolean;
      try {
        first = await revocationObject(env, key).claimOnce(key, revocationUntil(cfg, undefined));
      } catch {
        return oauthError("temporarily_unavailable", "the token store could not be read; try again", 503);
      }
      if (!first) {
        try {
          await revokeFamily(env, cfg, m[1]!, m[2]!, "refresh token reuse");
        } catch {
          return oauthError("temporarily_unavailable", "this refresh token was already used, and its grant could not be revoked yet; try again", 503);
        }
        return oauthError("invalid_grant", "this refresh token was already used: its grant is revoked, authorize again");
      }
    }
  }
  // RFC 7009: a refresh token revoked by its client ends the grant, access tokens included.
  const revoking = grantType === null && form.get("token") !== null ? REFRESH_SHAPE.exec(form.get("token")!) : null;
  let grantOfRevoked: { jti: string; team: string; clientId: string } | null = null;
  if (revoking) {
    const api = oauthApi(cfg, env)!;
    const g = (await api.listUserGrants(revoking[1]!)).items.find((x) => x.id === revoking[2]);
    const meta = g?.metadata as { jti?: unknown; team?: unknown } | undefined;
    if (g && typeof meta?.jti === "string")
      grantOfRevoked = { jti: meta.jti, team: typeof meta.team === "string" ? meta.team : "default", clientId: g.clientId };
  }
  const res = await server.fetch(canonicalRequest(cfg, req, read.text), env, ctx);
  if (grantOfRevoked && res.ok) {
    const until = revocationUntil(cfg, undefined);
    await revocationObject(env, grantOfRevoked.jti).revoke(grantOfRevoked.jti, until, `oauth:${grantOfRevoked.clientId}`);
    await appendRecord(env, ledgerSigning(cfg), grantOfRevoked.team, "grant.revoked", {
      jti: grantOfRevoked.jti,
      until,
      by: `oauth:${grantOfRevoked.clientId}`,
      reason: "the client revoked its refresh token",
      client_id: grantOfRevoked.clientId,
    });
  }
  if (res.status !== 200 || (grantType !== "authorization_code" && grantType !== "refresh_token")) return res;
  return asGrant(res, env, cfg);
}

/** The library's token answer with its access token replaced by the Portcullis grant it stands for. */
async function asGrant(res: Response, env: Env, cfg: GatewayConfig): Promise<Response> {
  const server = oauthServer(cfg)!;
  const body = (await res.json()) as Record<string, unknown>;
  const opaque = body.access_token;
  const resource = typeof body.resource === "string" ? body.resource : defaultResource(cfg);
  if (typeof opaque !== "string") return oauthError("server_error", "the authorization server issued no access token", 500);
  const v = await server.validateToken(resource, opaque, env);
  const p = readProps(v?.props);
  if (!v || !p) return oauthError("invalid_grant", "this grant carries no Portcullis grant; authorize again");
  // The library checked revocation in its exchange callback; check again here, just before the grant leaves.
  const revoked = await isRevoked(env, p.jti);
  if (revoked !== false)
    return revoked === null
      ? oauthError("temporarily_unavailable", "the revocation list could not be read; try again", 503)
      : oauthError("invalid_grant", "this grant was revoked");
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
