/**
 * Authentication at the edge of every protected route: the bearer grant (or an external OIDC
 * token) → Principal, revocation, role checks, and the loopback-only unauthenticated mode (a
 * loopback Host/URL and, where the runtime reports one, a loopback peer address). A grant's `sub`
 * outside every identity provider's principal space must have the gateway's one spelling
 * (src/config/principal.ts), so a grant for `Agent:x` minted before that rule verifies no more.
 * Must never: trust anything about a request before its token verified, let a token reach a log
 * or an upstream, or answer "allowed" when the key set or revocation list cannot be read.
 */
import { decodeJwt } from "jose";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { principalSpaces } from "../config/principal-spaces.ts";
import type { Env } from "../env.ts";
import { acceptedAudiences, acceptedIssuers, canonicalUrl, forbidden, issuerOf, ownUrlProblem, unauthorized } from "./metadata.ts";
import { verifyExternal } from "./oidc.ts";
import { isLoopbackAddress, isLoopbackHost } from "../wire/hosts.ts";
import { principalHas, principalNameProblem, type Principal } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import { revocationObject } from "../../durable-objects/object-names.ts";
import { verifyGrant } from "./tokens.ts";
import { parseKeySet, type KeySet } from "./keys.ts";
import { isRevokedCached } from "./revocation-cache.ts";
import { jsonResponse } from "../wire/http.ts";

/**
 * The address of the client the runtime reports, or null when it reports none. Cloudflare's edge
 * sets `CF-Connecting-IP` to the connecting client (replacing any the client sent); `wrangler dev`
 * (miniflare's entry worker) sets it from the socket's peer address, but keeps a value the client
 * sent itself. `request.cf` carries no address in either. So a non-loopback value proves the
 * request came from off the machine; a loopback one is only as good as the runtime in front.
 */
function peerAddress(req: Request): string | null {
  return req.headers.get("cf-connecting-ip");
}

/**
 * A request is on loopback when its Host/URL names loopback and, if the runtime reports a peer
 * address, that address is loopback too: a dev server exposed beyond loopback is not driven
 * without a grant by a client that forges `Host: 127.0.0.1`.
 */
export function isLoopbackRequest(req: Request): boolean {
  if (!isLoopbackHost(new URL(req.url).hostname)) return false;
  const peer = peerAddress(req);
  return peer === null || isLoopbackAddress(peer);
}

/** Why the unauthenticated mode refuses this (non-loopback) request. */
function offLoopbackReason(req: Request): string {
  const base = "refusing to serve: auth.required is false, which is only allowed while the gateway listens on loopback";
  const peer = peerAddress(req);
  if (!isLoopbackHost(new URL(req.url).hostname) || peer === null) return base;
  return `${base}, and this request came from ${JSON.stringify(peer.slice(0, 64))} (CF-Connecting-IP), not a loopback address`;
}

/**
 * The readable end of a refusal for a grant minted for another gateway: how to mint one for this
 * one (the issuer and audience this request expects). Never echoes the token.
 */
function mintHint(cfg: GatewayConfig): string {
  const iss = issuerOf(cfg);
  const aud = canonicalUrl(cfg);
  if (iss !== aud) return `mint with: npx portcullis token mint --iss ${iss} --aud ${aud}`;
  let u: URL | null = null;
  try {
    u = new URL(aud);
  } catch {
    u = null;
  }
  if (u && u.protocol === "http:" && u.port && isLoopbackHost(u.hostname)) return `mint with: npx portcullis token mint --port ${u.port} (or --gateway ${aud})`;
  return `mint with: npx portcullis token mint --gateway ${aud}`;
}

let keyCache: { text: string; keys: Promise<KeySet> } | null = null;

/** The gateway's signing key set from its Worker secret; null when the secret is not set. */
export function signingKeys(env: Env, cfg: GatewayConfig): Promise<KeySet> | null {
  const text = env[cfg.auth.signingKeySecret];
  if (typeof text !== "string" || text.trim() === "") return null;
  if (!keyCache || keyCache.text !== text) keyCache = { text, keys: parseKeySet(text) };
  return keyCache.keys;
}

export type AuthResult = { ok: true; principal: Principal } | { ok: false; response: Response };

export interface AuthOptions {
  /** The resource path, for the metadata URL in challenges (`/mcp` or `/`). */
  path: string;
  /** Role(s) the route accepts: any one of them will do. */
  role: Role | Role[];
  /** Whether the loopback-only unauthenticated actor may use this route. */
  allowActor: boolean;
  /** Fetch used for external issuers' JWKS (egress-checked by the caller). */
  fetcher?: (url: string, init: RequestInit) => Promise<Response>;
}

function unavailable(reason: string): Response {
  return jsonResponse({ error: "temporarily_unavailable", error_description: reason }, 503, { "retry-after": "1" });
}

export async function authenticate(req: Request, env: Env, cfg: GatewayConfig, opts: AuthOptions): Promise<AuthResult> {
  // Without its own URL the gateway cannot tell its grants from another gateway's: serve nothing.
  const ownUrl = ownUrlProblem(cfg);
  if (ownUrl) return { ok: false, response: unavailable(`refusing to serve: ${ownUrl}`) };
  const loopback = isLoopbackRequest(req);
  if (!cfg.auth.required && !loopback) {
    return { ok: false, response: unavailable(offLoopbackReason(req)) };
  }
  const header = req.headers.get("authorization");
  if (header === null) {
    if (!cfg.auth.required && loopback && opts.allowActor) {
      return { ok: true, principal: { sub: cfg.actor, team: "local", roles: ["agent"], tools: null, authenticated: false } };
    }
    return { ok: false, response: unauthorized(cfg, opts.path) };
  }
  const m = /^Bearer ([A-Za-z0-9\-._~+/]+=*)$/.exec(header.trim());
  if (!m) return { ok: false, response: unauthorized(cfg, opts.path, "Authorization must be `Bearer <token>`") };
  const token = m[1]!;
  const principal = await verify(token, env, cfg, opts);
  if (typeof principal === "string") return { ok: false, response: unauthorized(cfg, opts.path, principal) };
  if (principal instanceof Response) return { ok: false, response: principal };
  const roles = Array.isArray(opts.role) ? opts.role : [opts.role];
  if (!roles.some((r) => principalHas(principal, r))) return { ok: false, response: forbidden(cfg, opts.path, roles.join(" ")) };
  return { ok: true, principal };
}

async function verify(token: string, env: Env, cfg: GatewayConfig, opts: AuthOptions): Promise<Principal | string | Response> {
  // Only when external issuers are configured is the (unverified) iss worth reading to pick one.
  let claimedIss: unknown;
  if (cfg.auth.externalIssuers.length > 0 && token.length <= 8192) {
    try {
      claimedIss = decodeJwt(token).iss;
    } catch {
      claimedIss = undefined;
    }
  }
  const external = claimedIss === undefined ? undefined : cfg.auth.externalIssuers.find((e) => e.issuer === claimedIss);
  if (external) {
    if (!opts.fetcher) return "external issuers are not available on this route";
    const p = await verifyExternal(token, external, opts.fetcher, cfg.auth.maxTokenLifetimeS);
    if (typeof p !== "string" && p.jti && (await isRevokedCached(env, p.jti)) !== false) return "token has been revoked";
    return p;
  }
  const keysP = signingKeys(env, cfg);
  if (!keysP) return `no signing key is configured (set the ${cfg.auth.signingKeySecret} secret)`;
  let keys: KeySet;
  try {
    keys = await keysP;
  } catch {
    return unavailable(`the ${cfg.auth.signingKeySecret} secret does not hold a usable key set`);
  }
  let storeFailed = false;
  const v = await verifyGrant(token, keys, {
    issuer: acceptedIssuers(cfg),
    audience: acceptedAudiences(cfg),
    maxLifetimeSeconds: cfg.auth.maxTokenLifetimeS,
    // Per request: "not revoked" may be up to 1 s old (the design's bound), "revoked" is final (revocation-cache.ts).
    isRevoked: async (jti) => {
      const r = await isRevokedCached(env, jti);
      if (r === null) storeFailed = true;
      return r !== false;
    },
  });
  if (storeFailed) return unavailable("the revocation list could not be read; denied to fail closed");
  // A grant for another gateway (verifyGrant names its iss/aud and the expected one): say how to mint for this one.
  if (!v.ok) return v.foreign ? `${v.reason}; ${mintHint(cfg)}` : v.reason;
  const g = v.grant;
  // One person, one name: a grant the gateway gave speaks for its canonical spelling only (reasons name no claim value).
  const badSub = principalNameProblem(g.sub, principalSpaces(cfg.auth));
  if (badSub) return `sub refused: ${badSub}`;
  const p: Principal = { sub: g.sub, team: g.team, roles: g.roles as Role[], tools: g.tools, authenticated: true, jti: g.jti, exp: g.exp };
  if (g.budget) p.budget = g.budget;
  return p;
}

/**
 * Whether `jti` is revoked, read from the revocation list now (no cache: for refreshes and
 * checks that must not be stale): true / false, or null when the store could not answer (callers fail closed).
 */
export async function isRevoked(env: Env, jti: string): Promise<boolean | null> {
  try {
    return await revocationObject(env, jti).isRevoked(jti);
  } catch {
    return null;
  }
}
