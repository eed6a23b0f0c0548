/**
 * Signing a person in at an OIDC issuer for the OAuth authorization endpoint (auth.oauth.oidc):
 * after consent, the redirect to the issuer (authorization code with PKCE S256 and a nonce, the
 * state the library binds to this browser), and the issuer's redirect back — the code exchanged
 * through the egress rules, the id_token verified (issuer, audience = our client id, lifetime,
 * nonce) — before the authorization completes (oauth-complete.ts). Must never: complete a sign-in
 * whose id_token does not verify, or let the code, the verifier or a client secret reach a page
 * or a log.
 */
import { AuthorizationError, type AuthRequest, authorizationErrorRedirect } from "@cloudflare/workers-oauth-provider";
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import { decodeJwt } from "jose";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { EgressError } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { encode } from "../identity/base64url.ts";
import type { GrantOffer } from "../identity/oauth-grant.ts";
import { OAUTH_PATHS, oauthApi, oauthIssuer } from "../identity/oauth-server.ts";
import { verifyExternal } from "../identity/oidc.ts";
import { complete, egressFetch, page } from "./oauth-complete.ts";
import { canonicalRequest } from "./oauth-token.ts";

/** PKCE S256 (RFC 7636): base64url of the verifier's SHA-256. */
const s256 = (verifier: string): string => encode(sha256(utf8ToBytes(verifier)));

/** 256 random bits, base64url: a PKCE verifier or a nonce. */
function randomToken(): string {
  return encode(crypto.getRandomValues(new Uint8Array(32)));
}

interface OidcData {
  verifier: string;
  nonce: string;
  issuer: string;
  offer: GrantOffer;
}

/** After consent: to the issuer's authorization endpoint (state from the library, bound to this browser). */
export async function startOidc(cfg: GatewayConfig, env: Env, areq: AuthRequest, offer: GrantOffer, headers: Headers): Promise<Response> {
  const o = cfg.auth.oauth.oidc.find((x) => x.issuer === offer.issuer);
  if (!o) return page(400, "Refused", "that identity provider is no longer configured");
  const data: OidcData = { verifier: randomToken(), nonce: randomToken(), issuer: o.issuer, offer };
  const tx = await oauthApi(cfg, env)!.beginUpstream(areq, { data, headers });
  const u = new URL(o.authorizationEndpoint);
  u.searchParams.set("response_type", "code");
  u.searchParams.set("client_id", o.clientId);
  u.searchParams.set("redirect_uri", `${oauthIssuer(cfg)}${OAUTH_PATHS.callback}`);
  u.searchParams.set("scope", o.scopes.join(" "));
  u.searchParams.set("state", tx.state);
  u.searchParams.set("nonce", data.nonce);
  u.searchParams.set("code_challenge", s256(data.verifier));
  u.searchParams.set("code_challenge_method", "S256");
  tx.headers.set("location", u.href);
  return new Response(null, { status: 302, headers: tx.headers });
}

/** The issuer's redirect back (OAUTH_PATHS.callback): the code exchanged (PKCE), the id_token verified (its nonce too), then the authorization completed. */
export async function oidcCallback(cfg: GatewayConfig, env: Env, req: Request): Promise<Response> {
  const api = oauthApi(cfg, env)!;
  let resumed: { request: AuthRequest; data: OidcData; headers: Headers };
  try {
    resumed = await api.finishUpstream<OidcData>(canonicalRequest(cfg, req));
  } catch (e) {
    if (e instanceof AuthorizationError) return page(400, "This sign-in has expired", `${e.description}. Start connecting again from your client.`);
    throw e;
  }
  const { request: areq, data, headers } = resumed;
  const q = new URL(req.url).searchParams;
  const deny = (why: string) => {
    headers.set("location", authorizationErrorRedirect(areq, "access_denied", why));
    return new Response(null, { status: 302, headers });
  };
  if (q.get("error") || !q.get("code")) return deny("the identity provider did not sign you in");
  const o = cfg.auth.oauth.oidc.find((x) => x.issuer === data.issuer);
  const ext = cfg.auth.externalIssuers.find((x) => x.issuer === data.issuer);
  if (!o || !ext) return deny("that identity provider is no longer configured");
  const body = new URLSearchParams({
    grant_type: "authorization_code",
    code: q.get("code")!,
    redirect_uri: `${oauthIssuer(cfg)}${OAUTH_PATHS.callback}`,
    client_id: o.clientId,
    code_verifier: data.verifier,
  });
  if (o.clientSecret) {
    const secret = env[o.clientSecret];
    if (typeof secret !== "string" || secret === "") return page(503, "Temporarily unavailable", `the ${o.clientSecret} secret is not set`);
    body.set("client_secret", secret);
  }
  const fetcher = egressFetch(cfg, req);
  let idToken: unknown;
  try {
    const r = await fetcher(o.tokenEndpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
      body: body.toString(),
    });
    idToken = ((await r.json()) as { id_token?: unknown }).id_token;
  } catch (e) {
    return deny(
      e instanceof EgressError
        ? `the identity provider's token endpoint is refused by the egress rules (${e.reason})`
        : "the identity provider's token endpoint did not answer",
    );
  }
  if (typeof idToken !== "string") return deny("the identity provider returned no id_token");
  // The id_token is for this gateway's client at the issuer: its aud is the client id.
  const principal = await verifyExternal(idToken, { ...ext, audience: o.clientId }, fetcher, cfg.auth.maxTokenLifetimeS);
  if (typeof principal === "string") return deny(principal);
  if (decodeJwt(idToken).nonce !== data.nonce) return deny("the id_token's nonce does not match this sign-in");
  return complete(cfg, env, areq, { ...data.offer, sub: principal.sub }, headers);
}
