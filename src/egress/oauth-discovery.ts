/**
 * Discovery of an upstream's authorization server, as an MCP client does it: the upstream's 401
 * and its `WWW-Authenticate: Bearer resource_metadata=…` challenge, the protected-resource
 * metadata (RFC 9728, path-inserted URL first), whose `resource` must name the upstream, then the
 * authorization server's metadata (RFC 8414, OpenID discovery as the fallback), which must offer
 * PKCE S256. Every request goes through the caller's fetcher (the egress rules), with the checks
 * and errors of ./oauth-client.ts. Must never: follow a metadata URL the upstream's own answer did
 * not name or derive, or accept a resource that is not the upstream.
 */
import type { JsonObject } from "../wire/jsonrpc.ts";
import { type AuthorizationServer, call, type Discovered, endpoint, type Fetcher, host, jsonOf, OAuthFlowError } from "./oauth-client.ts";

/** The `resource_metadata` (and `scope`) parameters of a `WWW-Authenticate: Bearer …` header. */
export function bearerChallenge(header: string | null): { resourceMetadata?: string; scope?: string } {
  if (!header) return {};
  const out: { resourceMetadata?: string; scope?: string } = {};
  for (const m of header.matchAll(/([A-Za-z_]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))/g)) {
    const v = (m[2] ?? m[3] ?? "").replace(/\\(.)/g, "$1");
    if (m[1]!.toLowerCase() === "resource_metadata") out.resourceMetadata = v;
    if (m[1]!.toLowerCase() === "scope") out.scope = v;
  }
  return out;
}

/** The well-known URLs of a protected resource's metadata for `upstream`, path form first (RFC 9728 §3.1). */
function resourceMetadataUrls(upstream: string): string[] {
  const u = new URL(upstream);
  const path = u.pathname === "/" ? "" : u.pathname.replace(/\/$/, "");
  const out = path ? [`${u.origin}/.well-known/oauth-protected-resource${path}`] : [];
  out.push(`${u.origin}/.well-known/oauth-protected-resource`);
  return out;
}

/** The well-known URLs of an authorization server's metadata, in the order the MCP spec gives. */
function serverMetadataUrls(issuer: string): string[] {
  const u = new URL(issuer);
  const path = u.pathname === "/" ? "" : u.pathname.replace(/\/$/, "");
  if (!path) return [`${u.origin}/.well-known/oauth-authorization-server`, `${u.origin}/.well-known/openid-configuration`];
  return [
    `${u.origin}/.well-known/oauth-authorization-server${path}`,
    `${u.origin}/.well-known/openid-configuration${path}`,
    `${u.origin}${path}/.well-known/openid-configuration`,
  ];
}

const strip = (s: string) => s.replace(/\/+$/, "");

/** The protected resource's `resource` may be the upstream's URL or a parent of it on the same origin (as the MCP SDK allows). */
function resourceAllowed(resource: string, upstream: string): boolean {
  try {
    const r = new URL(resource);
    const u = new URL(upstream);
    if (r.origin !== u.origin) return false;
    const rp = strip(r.pathname);
    const up = strip(u.pathname);
    return up === rp || up.startsWith(`${rp}/`);
  } catch {
    return false;
  }
}

async function firstJson(fetcher: Fetcher, urls: string[], what: string): Promise<{ url: string; body: JsonObject } | null> {
  for (const url of urls) {
    const r = await call(fetcher, url, { method: "GET", headers: { accept: "application/json", "mcp-protocol-version": "2025-11-25" } }, what);
    if (r.status === 404 || r.status === 405 || (r.status >= 400 && r.status < 500)) {
      await r.body?.cancel();
      continue;
    }
    if (!r.ok) {
      await r.body?.cancel();
      throw new OAuthFlowError("discovery", `${what} at ${host(url)} answered HTTP ${r.status}`);
    }
    return { url, body: await jsonOf(r, what, url) };
  }
  return null;
}

/**
 * Discovery for `upstream`: an unauthenticated initialize to read its 401 challenge, then its
 * protected-resource metadata (the challenge's URL, else the well-known ones), then its first
 * authorization server's metadata.
 */
export async function discover(fetcher: Fetcher, upstream: string): Promise<Discovered> {
  const probe = await call(
    fetcher,
    upstream,
    {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: "portcullis-oauth-discovery",
        method: "initialize",
        params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "portcullis", version: "1" } },
      }),
    },
    "the upstream",
  );
  await probe.body?.cancel();
  const challenge = probe.status === 401 ? bearerChallenge(probe.headers.get("www-authenticate")) : {};
  const urls = challenge.resourceMetadata ? [challenge.resourceMetadata] : resourceMetadataUrls(upstream);
  const prm = await firstJson(fetcher, urls, "the upstream's protected-resource metadata");
  if (!prm)
    throw new OAuthFlowError(
      "discovery",
      probe.status === 401
        ? `the upstream at ${host(upstream)} asks for a token but publishes no protected-resource metadata (RFC 9728)`
        : `the upstream at ${host(upstream)} did not ask for OAuth (HTTP ${probe.status} without a token) and publishes no protected-resource metadata`,
    );
  const resource = typeof prm.body.resource === "string" ? prm.body.resource : upstream;
  if (!resourceAllowed(resource, upstream))
    throw new OAuthFlowError("discovery", `the protected-resource metadata names a resource other than the upstream at ${host(upstream)}`);
  const servers = Array.isArray(prm.body.authorization_servers) ? prm.body.authorization_servers.filter((s) => typeof s === "string") : [];
  if (servers.length === 0) throw new OAuthFlowError("discovery", `the upstream at ${host(upstream)} names no authorization server`);
  const issuer = servers[0] as string;
  const asm = await firstJson(fetcher, serverMetadataUrls(issuer), "the authorization server's metadata");
  if (!asm) throw new OAuthFlowError("discovery", `the authorization server ${host(issuer)} publishes no metadata (RFC 8414)`);
  const b = asm.body;
  if (typeof b.issuer !== "string" || strip(b.issuer) !== strip(issuer))
    throw new OAuthFlowError("discovery", `the authorization server's metadata at ${host(issuer)} names another issuer`);
  const methods = Array.isArray(b.code_challenge_methods_supported) ? b.code_challenge_methods_supported : [];
  if (!methods.includes("S256"))
    throw new OAuthFlowError("discovery", `the authorization server ${host(issuer)} does not offer PKCE S256, which the gateway requires`);
  const server: AuthorizationServer = {
    issuer: b.issuer,
    authorizationEndpoint: endpoint(b.authorization_endpoint, "authorization endpoint", issuer),
    tokenEndpoint: endpoint(b.token_endpoint, "token endpoint", issuer),
    authMethods: Array.isArray(b.token_endpoint_auth_methods_supported)
      ? b.token_endpoint_auth_methods_supported.filter((m): m is string => typeof m === "string")
      : ["client_secret_basic"],
    clientIdMetadataDocument: b.client_id_metadata_document_supported === true,
  };
  if (b.registration_endpoint !== undefined) server.registrationEndpoint = endpoint(b.registration_endpoint, "registration endpoint", issuer);
  if (b.revocation_endpoint !== undefined) server.revocationEndpoint = endpoint(b.revocation_endpoint, "revocation endpoint", issuer);
  const scopes =
    challenge.scope?.split(" ").filter(Boolean) ??
    (Array.isArray(prm.body.scopes_supported) ? prm.body.scopes_supported.filter((s): s is string => typeof s === "string") : []);
  return { resource, scopes, server };
}
