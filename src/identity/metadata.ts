/**
 * OAuth resource-server surface (RFC 9728, RFC 6750): the protected resource metadata
 * documents and the WWW-Authenticate challenges of 401/403 answers. Owns the gateway's
 * canonical URL and audience rules. Must never: echo a presented token, or put
 * `offline_access` in a challenge.
 */
import type { GatewayConfig } from "../config/load.ts";
import { ROLES } from "../config/schema.ts";
import { isLoopbackHost, LOOPBACK_HOSTS } from "../wire/hosts.ts";
import { bearerChallenge, quoteParam } from "../wire/http.ts";

/** The gateway's canonical URL (the `aud` of its grants): configured, else the request origin. */
export function canonicalUrl(cfg: GatewayConfig, req: Request): string {
  return cfg.auth.audience ?? new URL(req.url).origin;
}

/**
 * Without a configured audience on loopback, the loopback spellings of the same port are one
 * gateway (a grant minted for 127.0.0.1:8787 works at localhost:8787).
 */
function canonicalForms(cfg: GatewayConfig, req: Request): string[] {
  const c = canonicalUrl(cfg, req);
  if (cfg.auth.audience) return [c];
  const u = new URL(req.url);
  if (!isLoopbackHost(u.hostname)) return [c];
  const port = u.port ? `:${u.port}` : "";
  return [...new Set([c, ...LOOPBACK_HOSTS.map((h) => `${u.protocol}//${h}${port}`)])];
}

/** Audiences a grant may carry: the canonical URL, or its MCP endpoint (what RFC 8707 clients send). */
export function acceptedAudiences(cfg: GatewayConfig, req: Request): string[] {
  return canonicalForms(cfg, req).flatMap((c) => [c, `${c}/mcp`]);
}

export function issuerOf(cfg: GatewayConfig, req: Request): string {
  return cfg.auth.issuer ?? canonicalUrl(cfg, req);
}

export function acceptedIssuers(cfg: GatewayConfig, req: Request): string[] {
  return cfg.auth.issuer ? [cfg.auth.issuer] : canonicalForms(cfg, req);
}

/** The metadata URL for the resource at `path` (`/mcp` → the path-suffixed document). */
function metadataUrl(req: Request, path: string): string {
  const origin = new URL(req.url).origin;
  return path === "/" ? `${origin}/.well-known/oauth-protected-resource` : `${origin}/.well-known/oauth-protected-resource${path}`;
}

export function protectedResourceMetadata(cfg: GatewayConfig, req: Request, path: string): Record<string, unknown> {
  const origin = new URL(req.url).origin;
  const servers = [issuerOf(cfg, req), ...cfg.auth.externalIssuers.map((e) => e.issuer)];
  return {
    resource: path === "/" ? canonicalUrl(cfg, req) : `${origin}${path}`,
    authorization_servers: [...new Set(servers)],
    bearer_methods_supported: ["header"],
    scopes_supported: [...ROLES],
    resource_name: "Portcullis MCP gateway",
    resource_documentation: `${origin}/summary`,
  };
}

/** 401: no token (no error code) or a bad one (`invalid_token`). */
export function unauthorized(req: Request, path: string, reason?: string): Response {
  const parts = [`resource_metadata=${quoteParam(metadataUrl(req, path))}`, `scope=${quoteParam("agent")}`];
  if (reason !== undefined) parts.push(`error="invalid_token"`, `error_description=${quoteParam(reason)}`);
  return bearerChallenge(
    401,
    parts,
    reason === undefined ? "unauthorized" : "invalid_token",
    reason ?? "a grant token is required (Authorization: Bearer <token>)",
  );
}

/** 403: authenticated, but the grant lacks the role this route needs. */
export function forbidden(req: Request, path: string, role: string): Response {
  const parts = [`error="insufficient_scope"`, `scope=${quoteParam(role)}`, `resource_metadata=${quoteParam(metadataUrl(req, path))}`];
  return bearerChallenge(403, parts, "insufficient_scope", `this route needs the ${role} role`);
}
