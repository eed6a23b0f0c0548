/**
 * What the three OAuth e2e files (oauth.test.ts, oauth-negative.test.ts, oauth-signin.test.ts)
 * share to speak OAuth to a gateway from outside: the enrollment-template gateway config (its
 * `sign_in` block, its loopback-egress `everything` upstream tail) and starting that gateway with
 * server-everything, the loopback callback server a client's redirect URI points at (recording
 * each landing), a loopback listener for small stand-in servers, the public client's RFC 7591
 * metadata and registration, PKCE S256 pairs, form posts and token-endpoint requests, the raw
 * `initialize` at /mcp with a bearer (its status and WWW-Authenticate challenge), the readers of
 * a page's hidden fields and of a JWT's parts, and the Chromium launch and dialog capture of the
 * browser tests. What it starts it hands to the caller, who stops it. It asserts nothing itself
 * (every expectation stays in the test that makes it; it returns what it saw), never waits
 * without a bound (each request carries a timeout, each poll a fixed number of tries), and never
 * listens or connects beyond loopback.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { Page } from "playwright-core";
import { freePort, type Proc, startEverything, startPortcullis } from "./harness.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

/** How long any one request of these helpers may take. */
const REQUEST_TIMEOUT_MS = 30_000;

/** The `sign_in` block of a gateway's `auth.oauth`: enrollment codes minting the template's tools (role agent, team connectors, 2h). */
export const enrollmentSignIn = (tools: string[]) => `
    sign_in:
      enrollment:
        template:
          tools: [${tools.join(", ")}]
          roles: [agent]
          team: connectors
          lifetime: 2h`;

/** The end of a gateway config: loopback egress allowed, no agent tools, one namespaced upstream `everything` at `upstreamUrl`. */
export const loopbackEverything = (upstreamUrl: string) => `egress:
  allow_loopback: true
gateway:
  agent_tools: false
upstreams:
  - name: everything
    url: ${upstreamUrl}
    namespace: true
    timeout: 30s
`;

/** A gateway with OAuth on (5m access tokens, enrollment sign-in for `tools`), loopback egress and one namespaced upstream `everything`. */
export const enrollmentGatewayConfig = (upstreamUrl: string, tools: string[]) => `
auth:
  required: true
  oauth:
    enabled: true
    access_token_ttl: 5m
${enrollmentSignIn(tools)}
${loopbackEverything(upstreamUrl)}`;

/**
 * server-everything and a gateway in front of it (enrollmentGatewayConfig for `tools`, signed with
 * `jwk`), each on a free loopback port; if the gateway fails to start, the upstream is stopped
 * before the error is passed on. The caller owns both and stops them.
 */
export async function startEnrollmentGateway(
  jwk: string,
  tools: string[],
): Promise<{ everything: Proc; gw: Proc & { url: string; logs: () => string }; port: number; origin: string; mcpUrl: string }> {
  const upPort = await freePort();
  const everything = await startEverything(upPort);
  try {
    const port = await freePort();
    const gw = await startPortcullis(enrollmentGatewayConfig(`http://127.0.0.1:${upPort}/mcp`, tools), port, { PORTCULLIS_SIGNING_KEY: jwk });
    const origin = `http://127.0.0.1:${port}`;
    return { everything, gw, port, origin, mcpUrl: `${origin}/mcp` };
  } catch (e) {
    await everything.stop();
    throw e;
  }
}

/** `server` listening on 127.0.0.1 at a port the system picks: that port. */
export async function listenLoopback(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as { port: number }).port;
}

export const closeServer = (server: Server | undefined): Promise<void> => new Promise((r) => (server ? server.close(() => r()) : r()));

export interface CallbackServer {
  /** The client's redirect URI: http://127.0.0.1:<port>/callback. */
  url: string;
  /** Every request to /callback, in order (other paths — a browser's /favicon.ico — are answered but not kept). */
  landings: URL[];
  close(): Promise<void>;
}

/** The loopback server a client's redirect URI points at: it records where each redirect landed and answers a plain page. */
export async function startCallbackServer(): Promise<CallbackServer> {
  const landings: URL[] = [];
  let url = "";
  const server = createServer((req, res) => {
    const u = new URL(req.url ?? "/", url);
    if (u.pathname === "/callback") landings.push(u);
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("signed in; you can close this window");
  });
  url = `http://127.0.0.1:${await listenLoopback(server)}/callback`;
  return { url, landings, close: () => closeServer(server) };
}

/** Polls (every 100 ms, at most `tries` times) until `landings` holds more than `before` entries; the caller asserts the count. */
export async function awaitLanding(landings: URL[], before: number, tries: number): Promise<void> {
  for (let i = 0; i < tries && landings.length === before; i++) await new Promise((r) => setTimeout(r, 100));
}

/** The RFC 7591 metadata of a public client (no secret) using authorization code and refresh tokens. */
export const publicClientMetadata = (clientName: string, redirectUris: string[]) => ({
  client_name: clientName,
  redirect_uris: redirectUris,
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  token_endpoint_auth_method: "none",
});

/** Registers a public client at `origin`/oauth/register: the status and the JSON answer (a client_id on 201). */
export async function registerClient(origin: string, clientName: string, redirectUris: string[]): Promise<{ status: number; json: Any }> {
  const r = await fetch(`${origin}/oauth/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(publicClientMetadata(clientName, redirectUris)),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return { status: r.status, json: await r.json() };
}

export const b64url = (b: Buffer) => b.toString("base64url");

/** A fresh PKCE pair: a random verifier and its S256 challenge. */
export function pkce(): { verifier: string; challenge: string } {
  const verifier = b64url(randomBytes(32));
  return { verifier, challenge: b64url(createHash("sha256").update(verifier).digest()) };
}

/** A form POST (application/x-www-form-urlencoded) to `url`, no redirect followed. */
export function formPost(url: string, fields: Record<string, string>): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams(fields).toString(),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
}

/** A request to `origin`/oauth/token: the status and the JSON answer. */
export async function tokenRequest(origin: string, fields: Record<string, string>): Promise<{ status: number; json: Any }> {
  const r = await formPost(`${origin}/oauth/token`, fields);
  return { status: r.status, json: await r.json() };
}

/** A raw `initialize` at `mcpUrl` with `token` as the bearer: the HTTP status and the WWW-Authenticate challenge ("" when none). */
export async function initializeWith(mcpUrl: string, token: string, clientName: string): Promise<{ status: number; challenge: string }> {
  const r = await fetch(mcpUrl, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: clientName, version: "1" } },
    }),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  await r.body?.cancel();
  return { status: r.status, challenge: r.headers.get("www-authenticate") ?? "" };
}

/** The five entities the gateway's pages escape, undone. */
export const unescapeHtml = (s: string) =>
  s
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&amp;/g, "&");

/** The (unescaped) value of the page's `name="<name>" value="…"` field; undefined when the page has none. */
export function hiddenField(html: string, name: string): string | undefined {
  const m = new RegExp(`name="${name}" value="([^"]*)"`).exec(html);
  return m ? unescapeHtml(m[1]!) : undefined;
}

/** A JWT's header (0) or claims (1), decoded without any check. */
export const jwtPart = (t: string, i: 0 | 1): Any => JSON.parse(Buffer.from(t.split(".")[i]!, "base64url").toString());

/** Dismisses every dialog the page opens and keeps its message (the tests expect none). */
export function collectDialogs(page: Page): string[] {
  const dialogs: string[] = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  return dialogs;
}
