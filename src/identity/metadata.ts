/**
 * OAuth resource-server surface (RFC 9728, RFC 6750): the protected resource metadata
 * documents and the WWW-Authenticate challenges of 401/403 answers. Owns the gateway's
 * canonical URL and audience rules. Must never: echo a presented token, or put
 * `offline_access` in a challenge.
 */
import type { GatewayConfig } from "../config/load.ts";
import { ROLES } from "../config/schema.ts";
import { isLoopbackHost, LOOPBACK_HOSTS } from "../wire/hosts.ts";

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
export function metadataUrl(req: Request, path: string): string {
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

/**
 * A quoted-string for a challenge. RFC 6750 allows only printable ASCII without `"` and `\` in
 * error_description: double quotes become single ones (reasons quote claim values), anything else
 * outside that set becomes a space.
 */
function quote(v: string): string {
  return `"${v.replace(/"/g, "'").replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, " ")}"`;
}

/** 401: no token (no error code) or a bad one (`invalid_token`). */
export function unauthorized(req: Request, path: string, reason?: string): Response {
  const parts = [`resource_metadata=${quote(metadataUrl(req, path))}`, `scope=${quote("agent")}`];
  if (reason !== undefined) parts.push(`error="invalid_token"`, `error_description=${quote(reason)}`);
  const body = { error: reason === undefined ? "unauthorized" : "invalid_token", error_description: reason ?? "a grant token is required (Authorization: Bearer <token>)" };
  return new Response(JSON.stringify(body), {
    status: 401,
    headers: { "content-type": "application/json", "www-authenticate": `Bearer ${parts.join(", ")}` },
  });
}

/** 403: authenticated, but the grant lacks the role this route needs. */
export function forbidden(req: Request, path: string, role: string): Response {
  const challenge = `Bearer error="insufficient_scope", scope=${quote(role)}, resource_metadata=${quote(metadataUrl(req, path))}`;
  return new Response(JSON.stringify({ error: "insufficient_scope", error_description: `this route needs the ${role} role` }), {
    status: 403,
    headers: { "content-type": "application/json", "www-authenticate": challenge },
  });
}
