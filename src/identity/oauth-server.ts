/**
 * The gateway as OAuth 2.1 authorization server for its own resource, on
 * `@cloudflare/workers-oauth-provider` (which owns the protocol: RFC 8414 metadata, RFC 7591
 * registration, client ID metadata documents, PKCE S256, RFC 8707 resources, RFC 9207 `iss`,
 * refresh rotation, every token and code stored hashed in OAUTH_KV). This module owns its
 * options for one config (built once per config object), the props an OAuth grant carries (the
 * Portcullis grant it stands for), the `userId` spelling, and the check at every code and refresh
 * exchange: the grant is not revoked and not past its lifetime. Must never: issue a token for a
 * revoked or expired grant, answer "not revoked" when the revocation list cannot be read, or let
 * the library log or return a token.
 */
import { OAuthAuthorizationServer, OAuthError, type OAuthHelpers } from "@cloudflare/workers-oauth-provider";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Role } from "../config/roles.ts";
import { ROLES, isRole } from "../config/roles.ts";
import type { Env } from "../env.ts";
import { isRevoked } from "./auth.ts";
import { encode } from "./base64url.ts";
import { acceptedAudiences, canonicalOrigin, canonicalUrl } from "./metadata.ts";

/** Where the flow lives (paths on the gateway's canonical origin). */
export const OAUTH_PATHS = {
  authorize: "/oauth/authorize",
  token: "/oauth/token",
  register: "/oauth/register",
  callback: "/oauth/callback",
} as const;

/** How a person signed in to the flow. */
export type SignInSource = "access" | "oidc" | "enrollment";

/** What an OAuth grant carries (encrypted by the library in OAUTH_KV): the Portcullis grant it stands for. */
export interface OAuthGrantProps {
  /** The grant's id: every access token of this OAuth grant carries it, so revoking it ends them all. */
  jti: string;
  sub: string;
  team: string;
  roles: Role[];
  tools: string[];
  budget?: { calls: number };
  /** When the whole grant ends, refreshes included (seconds since the epoch). */
  exp: number;
  client_id: string;
  source: SignInSource;
}

/** The grant's props, if `v` has their shape; anything else is refused (fail closed). */
export function readProps(v: unknown): OAuthGrantProps | null {
  if (typeof v !== "object" || v === null) return null;
  const p = v as Record<string, unknown>;
  const strings = (x: unknown) => Array.isArray(x) && x.every((s) => typeof s === "string");
  if (typeof p.jti !== "string" || typeof p.sub !== "string" || typeof p.team !== "string" || typeof p.client_id !== "string") return null;
  if (!strings(p.roles) || !(p.roles as string[]).every(isRole) || !strings(p.tools) || typeof p.exp !== "number") return null;
  if (p.source !== "access" && p.source !== "oidc" && p.source !== "enrollment") return null;
  const out: OAuthGrantProps = {
    jti: p.jti,
    sub: p.sub,
    team: p.team,
    roles: [...(p.roles as Role[])],
    tools: [...(p.tools as string[])],
    exp: p.exp,
    client_id: p.client_id,
    source: p.source,
  };
  const b = p.budget as { calls?: unknown } | undefined;
  if (b !== undefined) {
    if (typeof b !== "object" || b === null || typeof b.calls !== "number") return null;
    out.budget = { calls: b.calls };
  }
  return out;
}

/** A fresh grant id for an OAuth grant (`oa_` + 128 random bits): the jti of all its access tokens. */
export function newGrantJti(): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return `oa_${encode(bytes)}`;
}

/** The library's `userId` for a principal (it refuses `:`, which principals contain): base64url of the sub. */
export function userIdOf(sub: string): string {
  return `u_${encode(new TextEncoder().encode(sub))}`;
}

/** The canonical issuer of the authorization server: the gateway's origin (its metadata is at the root). */
export function oauthIssuer(cfg: GatewayConfig): string {
  return canonicalOrigin(cfg);
}

/**
 * The resources tokens may be issued for: each accepted audience (the canonical URL and its /mcp
 * endpoint, in every loopback spelling of a dev gateway) and the operator endpoint. Another
 * gateway's URL is none of them (`invalid_target`).
 */
export function oauthResources(cfg: GatewayConfig): string[] {
  return [...new Set(acceptedAudiences(cfg))];
}

/** The resource chosen when an authorization request names none: the /mcp endpoint. */
export function defaultResource(cfg: GatewayConfig): string {
  return `${canonicalUrl(cfg)}/mcp`;
}

const servers = new WeakMap<object, OAuthAuthorizationServer<Env>>();

/** The authorization server for this config (null while auth.oauth is off), built once per config. */
export function oauthServer(cfg: GatewayConfig): OAuthAuthorizationServer<Env> | null {
  const o = cfg.auth.oauth;
  if (!o.enabled) return null;
  const hit = servers.get(cfg.auth);
  if (hit) return hit;
  const origin = oauthIssuer(cfg);
  const server = new OAuthAuthorizationServer<Env>({
    issuer: origin,
    resources: oauthResources(cfg),
    defaultResource: defaultResource(cfg),
    authorizeEndpoint: `${origin}${OAUTH_PATHS.authorize}`,
    tokenEndpoint: `${origin}${OAUTH_PATHS.token}`,
    ...(o.dynamicRegistration ? { clientRegistrationEndpoint: `${origin}${OAUTH_PATHS.register}` } : {}),
    clientIdMetadataDocumentEnabled: o.clientMetadataDocuments,
    scopesSupported: [...ROLES],
    accessTokenTTL: o.accessTokenTtlS,
    // A grant's own lifetime (its template's, at most auth.max_token_lifetime) bounds its refresh token: set per grant below.
    refreshTokenTTL: cfg.auth.maxTokenLifetimeS,
    tokenExchangeCallback: async ({ grantType, props, env }) => {
      const p = readProps(props);
      if (!p) throw new OAuthError("invalid_grant", { description: "this grant carries no Portcullis grant; authorize again" });
      const revoked = await isRevoked(env, p.jti);
      if (revoked === null)
        throw new OAuthError("temporarily_unavailable", {
          description: "the revocation list could not be read; try again",
          statusCode: 503,
          headers: { "retry-after": "1" },
        });
      if (revoked) throw new OAuthError("invalid_grant", { description: "this grant was revoked" });
      const remaining = p.exp - Math.floor(Date.now() / 1000);
      if (remaining < 60) throw new OAuthError("invalid_grant", { description: "this grant has expired; authorize again" });
      return {
        accessTokenTTL: Math.min(o.accessTokenTtlS, remaining),
        ...(grantType === "authorization_code" ? { refreshTokenTTL: remaining } : {}),
      };
    },
    // The library's default logs a warning per error: the gateway logs nothing per request an operator did not ask for.
    onError: () => undefined,
  });
  servers.set(cfg.auth, server);
  return server;
}

/** The library's helpers for this request's env (parse, consent, complete, grants). */
export function oauthApi(cfg: GatewayConfig, env: Env): OAuthHelpers | null {
  return oauthServer(cfg)?.getOAuthApi(env) ?? null;
}
