/**
 * OAuth resource-server surface (RFC 9728, RFC 6750): the protected resource metadata
 * documents and the WWW-Authenticate challenges of 401/403 answers (with auth.oauth off, the
 * no-token 401 says how to get a grant). Owns the gateway's canonical URL and audience rules
 * (configured, or the loopback origin the CLI started it on) and which authorization servers the
 * metadata names. Must never: take the gateway's URL from a request's Host, echo a presented
 * token, put `offline_access` in a challenge, or name the gateway's own origin or issuer as an
 * authorization server while auth.oauth is off (no RFC 8414 metadata answers there).
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import { ROLES } from "../config/roles.ts";
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

/**
 * The authorization servers a client may get a token for this resource from. With auth.oauth on:
 * the gateway's own (at its origin; first, as hosted clients pick the first), its grants' issuer,
 * then the external issuers. With it off the gateway is no authorization server — no RFC 8414
 * metadata, no /oauth/* endpoints (404) — and its issuer only signs grants an operator mints, so
 * naming either would send a client into an OAuth flow that cannot start: only the external OIDC
 * issuers remain, whose tokens the gateway accepts directly (auth.ts verify). None: the member is
 * left out (RFC 9728 §2: OPTIONAL), and a client needs a minted grant (the 401 says how).
 */
export function authorizationServers(cfg: GatewayConfig): string[] {
  const external = cfg.auth.externalIssuers.map((e) => e.issuer);
  const servers = cfg.auth.oauth.enabled ? [canonicalOrigin(cfg), issuerOf(cfg), ...external] : external;
  return [...new Set(servers)];
}

export function protectedResourceMetadata(cfg: GatewayConfig, path: string): Record<string, unknown> {
  const origin = canonicalOrigin(cfg);
  const servers = authorizationServers(cfg);
  return {
    resource: path === "/" ? canonicalUrl(cfg) : `${origin}${resourcePath(path)}`,
    ...(servers.length > 0 ? { authorization_servers: servers } : {}),
    bearer_methods_supported: ["header"],
    scopes_supported: [...ROLES],
    resource_name: "Portcullis MCP gateway",
    resource_documentation: `${origin}/summary`,
  };
}

/** The `portcullis token mint` flags that name this gateway as its grants' issuer and audience. */
function mintTargetFlags(cfg: GatewayConfig): string {
  const iss = issuerOf(cfg);
  const aud = canonicalUrl(cfg);
  return iss === aud ? `--gateway ${aud}` : `--iss ${iss} --aud ${aud}`;
}

/**
 * How a client without a token gets one while auth.oauth is off (no OAuth flow to run): an
 * operator mints a grant for the route's principal kind (an agent's tools on /mcp, a role on
 * /operator/mcp and the /v1 API), or — with external issuers — a token from one of them.
 */
function grantHint(cfg: GatewayConfig, path: string): string {
  const target = mintTargetFlags(cfg);
  const mint =
    path === "/mcp"
      ? `portcullis token mint ${target} --sub agent:<name> --tools '<globs>'`
      : path === "/operator/mcp"
        ? `portcullis token mint ${target} --sub human:<name> --role auditor|approver|operator`
        : `portcullis token mint ${target} --sub <principal> --role <role>`;
  const external = cfg.auth.externalIssuers.map((e) => e.issuer);
  const alt = external.length > 0 ? `, or use a token from ${external.join(" or ")}` : "";
  const send =
    path === "/mcp"
      ? "send it as Authorization: Bearer <grant> (the client entries portcullis import writes read it from PORTCULLIS_AGENT_TOKEN)"
      : "send it as Authorization: Bearer <grant>";
  return `a grant token is required: ask an operator for a grant (${mint})${alt}, then ${send}`;
}

/**
 * 401: no token (no error code) or a bad one (`invalid_token`). `resource_metadata` stays in every
 * challenge (RFC 9728 §5.1: the document is served whatever auth.oauth says), but with auth.oauth
 * off it names no authorization server of the gateway's, so a client has no OAuth flow to start;
 * then the no-token challenge carries an `error_description` saying how to get a grant — against
 * RFC 6750 §3's SHOULD NOT for a request without credentials, on purpose: with no authorization
 * server advertised, the challenge is where a client (and the person reading its log) learns it.
 * With auth.oauth on, the no-token challenge is the plain RFC 6750 one.
 */
export function unauthorized(cfg: GatewayConfig, path: string, reason?: string): Response {
  const parts = [`resource_metadata=${quoteParam(metadataUrl(cfg, path))}`, `scope=${quoteParam("agent")}`];
  if (reason !== undefined) {
    parts.push(`error="invalid_token"`, `error_description=${quoteParam(reason)}`);
    return bearerChallenge(401, parts, "invalid_token", reason);
  }
  if (cfg.auth.oauth.enabled) return bearerChallenge(401, parts, "unauthorized", "a grant token is required (Authorization: Bearer <token>)");
  const hint = grantHint(cfg, path);
  parts.push(`error_description=${quoteParam(hint)}`);
  return bearerChallenge(401, parts, "unauthorized", hint);
}

/** 403: authenticated, but the grant lacks the role this route needs. */
export function forbidden(cfg: GatewayConfig, path: string, role: string): Response {
  const parts = [`error="insufficient_scope"`, `scope=${quoteParam(role)}`, `resource_metadata=${quoteParam(metadataUrl(cfg, path))}`];
  return bearerChallenge(403, parts, "insufficient_scope", `this route needs the ${role} role`);
}
