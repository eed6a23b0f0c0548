/**
 * Who is signed in to the console, decided afresh on every request: the grant in the
 * `__Host-portcullis` cookie, verified exactly like a bearer token on any other route
 * (`authenticate` on a synthetic request: signature, issuer, audience, lifetime, revocation,
 * role), or else a Cloudflare Access assertion when `auth.access` is configured. Console roles:
 * approver, auditor, operator or admin; a grant with none of them (an agent's) signs in only where
 * it reaches an OAuth upstream, and then to Connections alone (`connectionsOnly`), so the person it
 * belongs to can connect it. External issuers' and Access's keys are fetched under
 * the egress rules. Must never: accept a session whose token no longer verifies (a revoked grant
 * signs out at its next request), accept an unsigned, expired or foreign Access token, or let a
 * token reach a page, a URL, a log or a redirect.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import { type Principal, principalHas } from "../config/principal.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import type { Role } from "../config/roles.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { ACCESS_HEADER, verifyAccess } from "../identity/access.ts";
import { authenticate, isLoopbackRequest } from "../identity/auth.ts";
import { MAX_COOKIE_TOKEN, readCookie, SESSION_COOKIE, TOKEN_SHAPE } from "./cookie-session.ts";

/** The roles that may sign in to the console (each page asks for what it needs on top). */
export const CONSOLE_ROLES: Role[] = ["approver", "auditor", "operator", "admin"];

export interface ConsoleSession {
  principal: Principal;
  via: "grant" | "access";
  /** What the session's CSRF token is bound to: `grant:<jti>` or `access:<sub>:<iat>`. */
  binding: string;
  /** No console role: the session opens only Connections (its grant reaches an OAuth upstream). */
  connectionsOnly: boolean;
}

/** Whether `p` may sign in, and to what: every page with a console role, only Connections without one (when it has any). */
function consoleReach(cfg: GatewayConfig, p: Principal): "console" | "connections" | null {
  if (CONSOLE_ROLES.some((r) => principalHas(p, r))) return "console";
  return cfg.upstreams.some((u) => u.oauth && grantReachesUpstream(p, u)) ? "connections" : null;
}

export type SignInResult = { ok: true; session: ConsoleSession } | { ok: false; status: number; reason: string };

/** Fetch for external issuers' and Access's keys: the egress rules, no redirects, bounded. */
function keyFetcher(cfg: GatewayConfig, req: Request) {
  const onLoopback = isLoopbackRequest(req);
  return (url: string, init: RequestInit) =>
    guardedFetch(url, init, { rules: cfg.egress, gatewayOnLoopback: onLoopback, maxRedirects: 0, timeoutMs: 5000, maxBytes: 1024 * 1024 });
}

async function reasonOf(r: Response): Promise<string> {
  try {
    const body = (await r.json()) as { error_description?: unknown; error?: unknown };
    if (typeof body.error_description === "string") return body.error_description;
    if (typeof body.error === "string") return body.error;
  } catch {
    /* not JSON */
  }
  return `HTTP ${r.status}`;
}

/**
 * Verifies a grant (pasted, or from the cookie) as `Authorization: Bearer` on a request like this
 * one (same URL, Host and reported peer address, so loopback rules read the same).
 */
export async function verifyConsoleGrant(env: Env, cfg: GatewayConfig, req: Request, token: string): Promise<SignInResult> {
  if (token.length > MAX_COOKIE_TOKEN || !TOKEN_SHAPE.test(token))
    return { ok: false, status: 400, reason: "that is not a grant token (a JWT: three base64url parts separated by dots)" };
  const headers = new Headers({ authorization: `Bearer ${token}` });
  for (const name of ["host", "cf-connecting-ip"]) {
    const v = req.headers.get(name);
    if (v !== null) headers.set(name, v);
  }
  const synthetic = new Request(req.url, { method: "GET", headers });
  const auth = await authenticate(synthetic, env, cfg, { path: "/", role: [...CONSOLE_ROLES, "agent"], allowActor: false, fetcher: keyFetcher(cfg, req) });
  if (!auth.ok) {
    const reason = await reasonOf(auth.response);
    return {
      ok: false,
      status: auth.response.status,
      reason: auth.response.status === 403 ? `this grant has no console role (${CONSOLE_ROLES.join(", ")})` : reason,
    };
  }
  const p = auth.principal;
  const reach = consoleReach(cfg, p);
  if (reach === null) return { ok: false, status: 403, reason: `this grant has no console role (${CONSOLE_ROLES.join(", ")})` };
  if (typeof p.exp !== "number") return { ok: false, status: 400, reason: "this token has no expiry; the console takes only tokens that expire" };
  return {
    ok: true,
    session: { principal: p, via: "grant", binding: p.jti ? `grant:${p.jti}` : `token:${p.sub}:${p.exp}`, connectionsOnly: reach === "connections" },
  };
}

/**
 * The console session of a request: the cookie's grant, else an Access assertion.
 * `clearCookie`: the request carried a cookie whose grant no longer verifies (expired, revoked).
 */
export async function consoleSession(env: Env, cfg: GatewayConfig, req: Request): Promise<SignInResult & { clearCookie: boolean }> {
  const token = readCookie(req, SESSION_COOKIE);
  let refused: SignInResult | null = null;
  if (token !== null) {
    const r = await verifyConsoleGrant(env, cfg, req, token);
    if (r.ok || r.status === 503) return { ...r, clearCookie: false };
    refused = r;
  }
  const assertion = req.headers.get(ACCESS_HEADER);
  if (cfg.auth.access && assertion !== null) {
    const a = await verifyAccess(assertion, cfg.auth.access, keyFetcher(cfg, req));
    if (typeof a === "string") return { ok: false, status: 401, reason: a, clearCookie: refused !== null };
    const p = a.principal;
    const reach = consoleReach(cfg, p);
    if (reach === null) return { ok: false, status: 403, reason: "auth.access gives Access users no console role", clearCookie: refused !== null };
    return {
      ok: true,
      session: { principal: p, via: "access", binding: `access:${p.sub}:${a.iat}`, connectionsOnly: reach === "connections" },
      clearCookie: refused !== null,
    };
  }
  return { ...(refused ?? { ok: false, status: 401, reason: "not signed in" }), clearCookie: refused !== null };
}
