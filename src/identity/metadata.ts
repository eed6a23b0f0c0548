/**
 * OAuth resource-server surface (RFC 9728, RFC 6750): the protected resource metadata
 * documents and the WWW-Authenticate challenges of 401/403 answers. Owns the gateway's
 * canonical URL and audience rules (configured, or the loopback origin the CLI started it on).
 * Must never: take the gateway's URL from a request's Host, echo a presented token, or put
 * `offline_access` in a challenge.
 */
import type { GatewayConfig } from "../config/load.ts";
import { ROLES } from "../config/schema.ts";
import { isLoopbackHost, LOOPBACK_HOSTS } from "../wire/hosts.ts";
import { bearerChallenge, quoteParam } from "../wire/http.ts";

/** What the config says about the gateway's own URL, worked out once per config (every request asks). */
interface OwnUrl {
  problem: string | null;
  url: string | undefined;
  origin: string | undefined;
  /** Loopback spellings of the started origin, same port. */
  loopback: string[];
  /** Hosts (`host[:port]`) that name this gateway: the canonical URL's, then the loopback spellings'. */
  hosts: string[];
}
const ownUrls = new WeakMap<object, OwnUrl>();

function ownUrlOf(cfg: GatewayConfig): OwnUrl {
  const hit = ownUrls.get(cfg.auth);
  if (hit) return hit;
  const a = cfg.auth;
  const o = a.origin;
  const started = o ? new URL(o) : null;
  const onLoopback = started !== null && isLoopbackHost(started.hostname);
  let problem: string | null = null;
  if (!a.audience && !onLoopback) {
    problem = o
      ? `the gateway listens on ${o}, beyond loopback: set auth.audience to the URL clients use (its grants' audience)`
      : "auth.audience is not set: set it to the URL clients use (its grants' audience), or start the gateway with `portcullis dev`, which supplies its loopback origin";
  }
  const url = a.audience ?? (problem === null ? o : undefined);
  const port = started?.port ? `:${started.port}` : "";
  const loopback = started && onLoopback ? [...new Set([started.origin, ...LOOPBACK_HOSTS.map((h) => `${started.protocol}//${h}${port}`)])] : [];
  const hosts = [...new Set([...(url ? [new URL(url).host] : []), ...loopback.map((f) => new URL(f).host)])];
  const own: OwnUrl = { problem, url, origin: url ? new URL(url).origin : undefined, loopback, hosts };
  ownUrls.set(cfg.auth, own);
  return own;
}

/**
 * Why this gateway does not know its own URL, or null when it does: `auth.audience`, else the
 * loopback origin `portcullis dev` started it on. A request's Host never decides it — a client
 * could name any gateway's origin there and have that gateway's grants accepted.
 */
export function ownUrlProblem(cfg: GatewayConfig): string | null {
  return ownUrlOf(cfg).problem;
}

/** The gateway's canonical URL (the `aud` of its grants). Serving code runs only once ownUrlProblem is null. */
export function canonicalUrl(cfg: GatewayConfig): string {
  const own = ownUrlOf(cfg);
  if (own.url === undefined) throw new Error(own.problem ?? "the gateway's URL is unknown");
  return own.url;
}

/** The origin of the canonical URL (metadata documents live there). */
export function canonicalOrigin(cfg: GatewayConfig): string {
  canonicalUrl(cfg);
  return ownUrlOf(cfg).origin!;
}

/**
 * The loopback spellings of the origin `portcullis dev` started the gateway on, same port
 * (a grant minted for 127.0.0.1:8787 works at localhost:8787); none without one.
 */
export function loopbackForms(cfg: GatewayConfig): string[] {
  return ownUrlOf(cfg).loopback;
}

/** The Host values (`host[:port]`, default port dropped) that name this gateway itself. */
export function ownHosts(cfg: GatewayConfig): string[] {
  return ownUrlOf(cfg).hosts;
}

function canonicalForms(cfg: GatewayConfig): string[] {
  return cfg.auth.audience ? [cfg.auth.audience] : loopbackForms(cfg);
}

/**
 * Audiences a grant may carry: the canonical URL, or its MCP endpoint or operator endpoint (what
 * RFC 8707 clients send as `resource`, and what OAuth-issued grants carry as `aud`).
 */
export function acceptedAudiences(cfg: GatewayConfig): string[] {
  return canonicalForms(cfg).flatMap((c) => [c, `${c}/mcp`, `${c}/operator/mcp`]);
}

export function issuerOf(cfg: GatewayConfig): string {
  return cfg.auth.issuer ?? canonicalUrl(cfg);
}

export function acceptedIssuers(cfg: GatewayConfig): string[] {
  return cfg.auth.issuer ? [cfg.auth.issuer] : canonicalForms(cfg);
}

/** The metadata URL for the resource at `path` (`/mcp` → the path-suffixed document), at the configured origin. */
function metadataUrl(cfg: GatewayConfig, path: string): string {
  const origin = canonicalOrigin(cfg);
  return path === "/" ? `${origin}/.well-known/oauth-protected-resource` : `${origin}/.well-known/oauth-protected-resource${path}`;
}

/**
 * The resource a metadata document names for `path`. `/mcp/<upstream>` (any name, the route
 * pattern included: the unauthenticated document must not tell which upstreams exist) names /mcp
 * itself. A per-upstream route is a view of the one resource server /mcp is, not a resource server
 * of its own: grants are audience-bound to the gateway (acceptedAudiences: its canonical URL or its
 * /mcp endpoint), one grant reaches every route and its tool globs decide what each route shows,
 * and the same gate (and WWW-Authenticate challenge, which points at /mcp's document) guards both.
 * Naming `/mcp/<upstream>` here would lead RFC 8707 clients to ask for tokens with an audience no
 * grant carries; /mcp is a path prefix of every route, which MCP clients accept as the resource of
 * a server URL below it (the SDK's checkResourceAllowed).
 */
function resourcePath(path: string): string {
  return path.startsWith("/mcp/") ? "/mcp" : path;
}

export function protectedResourceMetadata(cfg: GatewayConfig, path: string): Record<string, unknown> {
  const origin = canonicalOrigin(cfg);
  // With auth.oauth on, the gateway's own authorization server (at its origin) comes first: hosted clients pick the first.
  const servers = [...(cfg.auth.oauth.enabled ? [origin] : []), issuerOf(cfg), ...cfg.auth.externalIssuers.map((e) => e.issuer)];
  return {
    resource: path === "/" ? canonicalUrl(cfg) : `${origin}${resourcePath(path)}`,
    authorization_servers: [...new Set(servers)],
    bearer_methods_supported: ["header"],
    scopes_supported: [...ROLES],
    resource_name: "Portcullis MCP gateway",
    resource_documentation: `${origin}/summary`,
  };
}

/** 401: no token (no error code) or a bad one (`invalid_token`). */
export function unauthorized(cfg: GatewayConfig, path: string, reason?: string): Response {
  const parts = [`resource_metadata=${quoteParam(metadataUrl(cfg, path))}`, `scope=${quoteParam("agent")}`];
  if (reason !== undefined) parts.push(`error="invalid_token"`, `error_description=${quoteParam(reason)}`);
  return bearerChallenge(
    401,
    parts,
    reason === undefined ? "unauthorized" : "invalid_token",
    reason ?? "a grant token is required (Authorization: Bearer <token>)",
  );
}

/** 403: authenticated, but the grant lacks the role this route needs. */
export function forbidden(cfg: GatewayConfig, path: string, role: string): Response {
  const parts = [`error="insufficient_scope"`, `scope=${quoteParam(role)}`, `resource_metadata=${quoteParam(metadataUrl(cfg, path))}`];
  return bearerChallenge(403, parts, "insufficient_scope", `this route needs the ${role} role`);
}
