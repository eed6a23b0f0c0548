/**
 * The gateway as an OAuth client of an upstream MCP server, as the MCP authorization spec has a
 * client do it (discovery — the upstream's 401, RFC 9728 and RFC 8414 metadata — is
 * ./oauth-discovery.ts, on the shared requests and checks here): PKCE S256 required, `resource`
 * (RFC 8707) on every authorization and token request; client registration
 * (RFC 7591), the code exchange, the refresh and the revocation (RFC 7009). Every request goes
 * through the caller's fetcher, which applies the egress rules. Owns the protocol and its
 * checks, and `OAuthFlowError` (a readable reason and a kind, never a token). Must never: put a
 * token, a secret, a code or a verifier into an error, a log or a URL other than the token and
 * revocation endpoints' bodies, or accept an authorization server that does not offer S256.
 */
import type { UpstreamOAuth } from "../config/gateway-config.ts";
import { base64url as b64url } from "jose";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";

export type OAuthFailure = "discovery" | "registration" | "refused" | "invalid_answer" | "unreachable";

/** A step of the OAuth exchange that did not work; `reason` is safe to show to the person and the agent. */
export class OAuthFlowError extends Error {
  readonly kind: OAuthFailure;
  readonly reason: string;
  constructor(kind: OAuthFailure, reason: string) {
    super(reason);
    this.name = "OAuthFlowError";
    this.kind = kind;
    this.reason = reason;
  }
}

/** A fetch under the egress rules (guarded-fetch.ts bound to the gateway's rules). */
export type Fetcher = (url: string, init: RequestInit) => Promise<Response>;

/** What discovery found: the resource to ask tokens for, and its authorization server. */
export interface Discovered {
  resource: string;
  /** The protected resource's `scopes_supported` (or the 401's `scope`), when it names any. */
  scopes: string[];
  server: AuthorizationServer;
}

export interface AuthorizationServer {
  issuer: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  registrationEndpoint?: string;
  revocationEndpoint?: string;
  authMethods: string[];
  clientIdMetadataDocument: boolean;
}

/** How the gateway authenticates at the token endpoint. */
export interface OAuthClient {
  clientId: string;
  clientSecret?: string;
  /** `none`, `client_secret_basic` or `client_secret_post`. */
  authMethod: string;
}

export interface TokenSet {
  accessToken: string;
  refreshToken?: string;
  /** When the access token expires (ms), null when the server did not say. */
  expiresAt: number | null;
  scope: string;
}

const MAX_JSON = 256 * 1024;

export function host(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return "(not a URL)";
  }
}

/** A URL an OAuth document names: https, or http to a loopback host (a local test server). */
export function endpoint(value: unknown, what: string, issuer: string): string {
  if (typeof value !== "string") throw new OAuthFlowError("discovery", `the authorization server ${host(issuer)} names no ${what}`);
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw new OAuthFlowError("discovery", `the authorization server ${host(issuer)} names a ${what} that is not a URL`);
  }
  const loopback = u.hostname === "127.0.0.1" || u.hostname === "localhost" || u.hostname === "[::1]";
  if (u.protocol !== "https:" && !(u.protocol === "http:" && loopback))
    throw new OAuthFlowError("discovery", `the authorization server ${host(issuer)} names a ${what} that is not https`);
  return u.toString();
}

export async function call(fetcher: Fetcher, url: string, init: RequestInit, what: string): Promise<Response> {
  try {
    return await fetcher(url, init);
  } catch (e) {
    const reason = (e as { reason?: unknown }).reason;
    throw new OAuthFlowError("unreachable", `${what} at ${host(url)} could not be reached (${typeof reason === "string" ? reason : (e as Error).message})`);
  }
}

export async function jsonOf(r: Response, what: string, url: string): Promise<JsonObject> {
  const text = await r.text().catch(() => "");
  if (text.length > MAX_JSON) throw new OAuthFlowError("invalid_answer", `${what} at ${host(url)} answered more than ${MAX_JSON} bytes`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new OAuthFlowError("invalid_answer", `${what} at ${host(url)} answered HTTP ${r.status} that is not JSON`);
  }
  if (!isObject(body)) throw new OAuthFlowError("invalid_answer", `${what} at ${host(url)} answered JSON that is not an object`);
  return body;
}

/** What the gateway registers as (RFC 7591 metadata; also its client ID metadata document's body). */
export function clientMetadata(redirectUri: string, authMethod: string, clientId?: string): JsonObject {
  const m: JsonObject = {
    client_name: "Portcullis gateway",
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code", "refresh_token"],
    response_types: ["code"],
    token_endpoint_auth_method: authMethod,
  };
  if (clientId !== undefined) m.client_id = clientId;
  return m;
}

/** How the gateway is this server's client: configured, its metadata document, or registered now (RFC 7591). */
export async function registerClient(
  fetcher: Fetcher,
  server: AuthorizationServer,
  settings: UpstreamOAuth,
  redirectUri: string,
  metadataDocumentUrl: string,
): Promise<OAuthClient> {
  if (settings.registration === "configured") {
    const secret = settings.clientSecret;
    if (secret === undefined) return { clientId: settings.clientId!, authMethod: "none" };
    const authMethod =
      server.authMethods.includes("client_secret_basic") || !server.authMethods.includes("client_secret_post") ? "client_secret_basic" : "client_secret_post";
    return { clientId: settings.clientId!, clientSecret: secret, authMethod };
  }
  if (settings.registration === "metadata_document") {
    if (!server.clientIdMetadataDocument)
      throw new OAuthFlowError("registration", `the authorization server ${host(server.issuer)} does not accept client ID metadata documents`);
    return { clientId: metadataDocumentUrl, authMethod: "none" };
  }
  if (!server.registrationEndpoint)
    throw new OAuthFlowError(
      "registration",
      `the authorization server ${host(server.issuer)} offers no dynamic client registration; configure auth.registration configured with a client_id`,
    );
  const wanted = ["client_secret_basic", "client_secret_post"].find((m) => server.authMethods.includes(m)) ?? "none";
  const r = await call(
    fetcher,
    server.registrationEndpoint,
    { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify(clientMetadata(redirectUri, wanted)) },
    "client registration",
  );
  const body = await jsonOf(r, "client registration", server.registrationEndpoint);
  if (r.status !== 201 && r.status !== 200) {
    const why = typeof body.error_description === "string" ? body.error_description : typeof body.error === "string" ? body.error : `HTTP ${r.status}`;
    throw new OAuthFlowError("registration", `the authorization server ${host(server.issuer)} refused the gateway's registration: ${why.slice(0, 200)}`);
  }
  if (typeof body.client_id !== "string" || body.client_id === "")
    throw new OAuthFlowError("registration", `the authorization server ${host(server.issuer)} registered the gateway without a client_id`);
  const method = typeof body.token_endpoint_auth_method === "string" ? body.token_endpoint_auth_method : wanted;
  const client: OAuthClient = { clientId: body.client_id, authMethod: method };
  if (typeof body.client_secret === "string") client.clientSecret = body.client_secret;
  else if (method !== "none") client.authMethod = "none";
  return client;
}

/** A PKCE verifier (43 characters) and its S256 challenge. */
export async function pkce(): Promise<{ verifier: string; challenge: string }> {
  const verifier = b64url.encode(crypto.getRandomValues(new Uint8Array(32)));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  return { verifier, challenge: b64url.encode(digest) };
}

/** Where the person's browser goes to consent. */
export function authorizationUrl(
  server: AuthorizationServer,
  client: OAuthClient,
  p: { redirectUri: string; state: string; challenge: string; resource: string; scopes: string[] },
): string {
  const u = new URL(server.authorizationEndpoint);
  u.searchParams.set("response_type", "code");
  u.searchParams.set("client_id", client.clientId);
  u.searchParams.set("redirect_uri", p.redirectUri);
  u.searchParams.set("state", p.state);
  u.searchParams.set("code_challenge", p.challenge);
  u.searchParams.set("code_challenge_method", "S256");
  u.searchParams.set("resource", p.resource);
  if (p.scopes.length > 0) u.searchParams.set("scope", p.scopes.join(" "));
  return u.toString();
}

function clientAuth(client: OAuthClient, form: URLSearchParams, headers: Record<string, string>): void {
  if (client.authMethod === "client_secret_basic" && client.clientSecret !== undefined) {
    const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, "+");
    headers.authorization = `Basic ${btoa(`${enc(client.clientId)}:${enc(client.clientSecret)}`)}`;
    return;
  }
  form.set("client_id", client.clientId);
  if (client.authMethod === "client_secret_post" && client.clientSecret !== undefined) form.set("client_secret", client.clientSecret);
}

async function tokenRequest(fetcher: Fetcher, server: AuthorizationServer, client: OAuthClient, form: URLSearchParams, now: number): Promise<TokenSet> {
  const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
  clientAuth(client, form, headers);
  const r = await call(fetcher, server.tokenEndpoint, { method: "POST", headers, body: form.toString() }, "the token endpoint");
  const body = await jsonOf(r, "the token endpoint", server.tokenEndpoint);
  if (!r.ok) {
    const code = typeof body.error === "string" ? body.error.slice(0, 60) : `HTTP ${r.status}`;
    const kind: OAuthFailure = code === "invalid_grant" || code === "unauthorized_client" || code === "invalid_client" ? "refused" : "invalid_answer";
    throw new OAuthFlowError(kind, `the authorization server ${host(server.issuer)} refused the token request (${code})`);
  }
  if (typeof body.access_token !== "string" || body.access_token === "" || /[\r\n]/.test(body.access_token))
    throw new OAuthFlowError("invalid_answer", `the token endpoint of ${host(server.issuer)} answered without an access token`);
  if (typeof body.token_type !== "string" || body.token_type.toLowerCase() !== "bearer")
    throw new OAuthFlowError("invalid_answer", `the token endpoint of ${host(server.issuer)} answered a token that is not a bearer token`);
  const out: TokenSet = {
    accessToken: body.access_token,
    expiresAt: typeof body.expires_in === "number" && body.expires_in > 0 ? now + body.expires_in * 1000 : null,
    scope: typeof body.scope === "string" ? body.scope : (form.get("scope") ?? ""),
  };
  if (typeof body.refresh_token === "string" && body.refresh_token !== "") out.refreshToken = body.refresh_token;
  return out;
}

/** The authorization code for tokens (the verifier proves this gateway started the flow). */
export function exchangeCode(
  fetcher: Fetcher,
  server: AuthorizationServer,
  client: OAuthClient,
  p: { code: string; verifier: string; redirectUri: string; resource: string },
  now = Date.now(),
): Promise<TokenSet> {
  const form = new URLSearchParams({
    grant_type: "authorization_code",
    code: p.code,
    code_verifier: p.verifier,
    redirect_uri: p.redirectUri,
    resource: p.resource,
  });
  return tokenRequest(fetcher, server, client, form, now);
}

/** A new token set from the refresh token; one the server does not rotate is kept. */
export async function refreshTokens(
  fetcher: Fetcher,
  server: AuthorizationServer,
  client: OAuthClient,
  p: { refreshToken: string; resource: string; scope: string },
  now = Date.now(),
): Promise<TokenSet> {
  const form = new URLSearchParams({ grant_type: "refresh_token", refresh_token: p.refreshToken, resource: p.resource });
  const t = await tokenRequest(fetcher, server, client, form, now);
  if (t.refreshToken === undefined) t.refreshToken = p.refreshToken;
  if (t.scope === "") t.scope = p.scope;
  return t;
}

/** Revokes a token at the server (RFC 7009); false when the server offers no revocation or did not confirm. */
export async function revokeToken(
  fetcher: Fetcher,
  server: AuthorizationServer,
  client: OAuthClient,
  token: string,
  hint: "refresh_token" | "access_token",
): Promise<boolean> {
  if (!server.revocationEndpoint) return false;
  const form = new URLSearchParams({ token, token_type_hint: hint });
  const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded" };
  clientAuth(client, form, headers);
  try {
    const r = await call(fetcher, server.revocationEndpoint, { method: "POST", headers, body: form.toString() }, "the revocation endpoint");
    await r.body?.cancel();
    return r.ok;
  } catch {
    return false;
  }
}
