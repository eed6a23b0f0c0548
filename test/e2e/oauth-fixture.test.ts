/**
 * [H] The OAuth upstream fixture (test/fixtures/oauth-upstream.ts) used as an MCP OAuth client
 * (2025-11-25 authorization spec) uses it, without the gateway: the 401's challenge leads to the
 * protected-resource metadata and the AS's RFC 8414 metadata; a client registers by DCR with a
 * loopback redirect_uri (a small local server catches the redirect); Chromium opens the
 * authorization URL (PKCE S256, resource, scope) and consentInBrowser signs in as alice; the code
 * becomes access + refresh tokens; an SDK v2 client lists tools and calls whoami (sub=alice). A
 * token for another resource, or signed by another key, gets 401; an expired one (3 s TTL) gets
 * 401 invalid_token; refreshes work repeatedly (rotating); the revocation endpoint spends a refresh
 * token; revokeGrantsOf spends every grant of an account; refusing consent redirects with
 * access_denied. Skipped, saying so, only when /usr/bin/chromium is absent and no browser is
 * required (browser.ts). Owns the fixture, callback server and browser it starts. Must never: leave
 * them running, or reach beyond loopback.
 */
import { createHash, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { generateKeyPair, SignJWT } from "jose";
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { consentInBrowser, type OAuthUpstream, startOAuthUpstream } from "../fixtures/oauth-upstream.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

if (skipBrowser) console.warn(`oauth-fixture.test.ts: skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const TTL = 3;
let up: OAuthUpstream;
let browser: Browser;
let cb: Server;
let redirectUri = "";
let meta: Any;
let clientId = "";
/** The query of each redirect the callback server caught, by state. */
const caught = new Map<string, (q: URLSearchParams) => void>();

const b64url = (b: Buffer) => b.toString("base64url");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function token(params: Record<string, string>): Promise<{ status: number; body: Any }> {
  const r = await fetch(meta.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: clientId, ...params }),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: r.status, body: await r.json() };
}

/** One authorization in a fresh browser context: the redirect's query and the PKCE verifier. */
async function authorize(login: string, opts: { resource?: string; refuse?: boolean; scope?: string } = {}) {
  const verifier = b64url(randomBytes(32));
  const state = b64url(randomBytes(12));
  const url = new URL(meta.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: clientId,
    redirect_uri: redirectUri,
    scope: opts.scope ?? "mcp:tools",
    state,
    code_challenge: b64url(createHash("sha256").update(verifier).digest()),
    code_challenge_method: "S256",
    resource: opts.resource ?? up.mcpUrl,
  }).toString();
  const query = new Promise<URLSearchParams>((resolve) => caught.set(state, resolve));
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(url.href);
    await consentInBrowser(page, { login, refuse: opts.refuse });
    expect(new URL(page.url()).origin).toBe(new URL(redirectUri).origin);
  } finally {
    await context.close();
  }
  return { query: await query, verifier };
}

/** `resource` goes on the authorization request, and on the token request unless `resource: null` (the grant's resource is then used). */
async function codeFor(login: string, resource?: string | null, scope?: string) {
  const { query, verifier } = await authorize(login, { resource: resource ?? undefined, scope });
  const code = query.get("code");
  expect(code, query.toString()).toBeTruthy();
  const r = await token({
    grant_type: "authorization_code",
    code: code as string,
    redirect_uri: redirectUri,
    code_verifier: verifier,
    ...(resource === null ? {} : { resource: resource ?? up.mcpUrl }),
  });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body as { access_token: string; refresh_token: string; expires_in: number; scope: string; token_type: string };
}

async function whoami(accessToken: string): Promise<string> {
  const client = new Client({ name: "oauth-fixture-test", version: "1" });
  const transport = new StreamableHTTPClientTransport(new URL(up.mcpUrl), { requestInit: { headers: { authorization: `Bearer ${accessToken}` } } });
  await client.connect(transport);
  try {
    const tools = await client.listTools();
    expect(tools.tools.map((t) => t.name).sort()).toEqual(["echo", "whoami"]);
    const echo: Any = await client.callTool({ name: "echo", arguments: { message: "hi" } });
    expect(echo.content[0].text).toBe("hi");
    const r: Any = await client.callTool({ name: "whoami", arguments: {} });
    return r.content[0].text;
  } finally {
    await transport.terminateSession().catch(() => undefined);
    await client.close().catch(() => undefined);
  }
}

/** A raw tools/list POST with `bearer`: the status and WWW-Authenticate. */
async function raw(bearer?: string) {
  const r = await fetch(up.mcpUrl, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
    }),
    signal: AbortSignal.timeout(10_000),
  });
  await r.body?.cancel();
  return { status: r.status, challenge: r.headers.get("www-authenticate") ?? "" };
}

describe.skipIf(skipBrowser)("the OAuth upstream fixture, used as an MCP OAuth client would", () => {
  beforeAll(async () => {
    up = await startOAuthUpstream({ accessTokenTtlSeconds: TTL });
    cb = createServer((req, res) => {
      const q = new URL(req.url ?? "/", "http://127.0.0.1").searchParams;
      caught.get(q.get("state") ?? "")?.(q);
      res.writeHead(200, { "content-type": "text/html" });
      res.end("<!doctype html><title>done</title>caught");
    });
    await new Promise<void>((r) => cb.listen(0, "127.0.0.1", r));
    const addr = cb.address();
    redirectUri = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}/cb`;
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await up?.close();
    cb?.closeAllConnections();
    await new Promise((r) => (cb ? cb.close(r) : r(undefined)));
  });

  it("discovery: the 401's challenge → protected-resource metadata → RFC 8414 AS metadata", async () => {
    const { status, challenge } = await raw();
    expect(status).toBe(401);
    const prmUrl = /resource_metadata="([^"]+)"/.exec(challenge)?.[1];
    expect(prmUrl).toBe(`${new URL(up.mcpUrl).origin}/.well-known/oauth-protected-resource/mcp`);
    expect(challenge).not.toContain("error=");
    const prm: Any = await (await fetch(prmUrl as string)).json();
    expect(prm).toEqual({ resource: up.mcpUrl, authorization_servers: [up.issuer], scopes_supported: ["mcp:tools"], bearer_methods_supported: ["header"] });
    expect(await (await fetch(`${new URL(up.mcpUrl).origin}/.well-known/oauth-protected-resource`)).json()).toEqual(prm);
    meta = await (await fetch(`${up.issuer}/.well-known/oauth-authorization-server`)).json();
    expect(meta.issuer).toBe(up.issuer);
    expect(meta.code_challenge_methods_supported).toContain("S256");
    for (const k of ["authorization_endpoint", "token_endpoint", "registration_endpoint", "revocation_endpoint", "jwks_uri"]) {
      expect(meta[k], k).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);
    }
    expect(meta.token_endpoint_auth_methods_supported).toEqual(expect.arrayContaining(["none", "client_secret_basic", "client_secret_post"]));
  });

  it("registers clients by DCR (public and confidential), listed by clients()", async () => {
    const register = async (body: Record<string, unknown>) => {
      const r = await fetch(meta.registration_endpoint, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, body: (await r.json()) as Any };
    };
    const common = { redirect_uris: [redirectUri], grant_types: ["authorization_code", "refresh_token"], response_types: ["code"], client_name: "test" };
    const pub = await register({ ...common, token_endpoint_auth_method: "none" });
    expect(pub.status, JSON.stringify(pub.body)).toBe(201);
    expect(pub.body.client_secret).toBeUndefined();
    clientId = pub.body.client_id;
    const conf = await register({ ...common, token_endpoint_auth_method: "client_secret_post" });
    expect(conf.status).toBe(201);
    expect(typeof conf.body.client_secret).toBe("string");
    expect(await up.clients()).toEqual(
      expect.arrayContaining([
        { clientId, redirectUris: [redirectUri], authMethod: "none" },
        { clientId: conf.body.client_id, redirectUris: [redirectUri], authMethod: "client_secret_post" },
      ]),
    );
  });

  it("signs alice in with Chromium; the tokens call whoami; expiry → 401 invalid_token; refreshes rotate; revokeGrantsOf → invalid_grant", async () => {
    const t = await codeFor("alice", null); // no resource on the token request: the granted one
    expect(t.token_type).toBe("Bearer");
    expect(t.expires_in).toBe(TTL);
    expect(t.scope).toBe("mcp:tools");
    expect(t.refresh_token).toBeTruthy();
    const issuedAt = Date.now();
    expect(await whoami(t.access_token)).toBe("sub=alice scope=mcp:tools");
    const seen = up.requests.filter((r) => r.authorized);
    expect(seen.some((r) => r.rpc.includes("tools/call") && r.sub === "alice" && r.aud === up.mcpUrl && r.scope === "mcp:tools")).toBe(true);
    expect(JSON.stringify(up.requests)).not.toContain(t.access_token);

    await sleep(Math.max(0, issuedAt + TTL * 1000 + 300 - Date.now()));
    const expired = await raw(t.access_token);
    expect(expired.status).toBe(401);
    expect(expired.challenge).toContain('error="invalid_token"');

    let refresh = t.refresh_token;
    for (let i = 0; i < 2; i++) {
      const r = await token({ grant_type: "refresh_token", refresh_token: refresh });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.refresh_token).not.toBe(refresh); // rotated
      refresh = r.body.refresh_token;
      expect(await whoami(r.body.access_token)).toBe("sub=alice scope=mcp:tools");
    }
    await up.revokeGrantsOf("alice");
    const dead = await token({ grant_type: "refresh_token", refresh_token: refresh });
    expect(dead.status).toBe(400);
    expect(dead.body.error).toBe("invalid_grant");
    expect(up.tokenRequests.map((r) => `${r.grantType}:${r.ok ? "ok" : r.error}`)).toEqual([
      "authorization_code:ok",
      "refresh_token:ok",
      "refresh_token:ok",
      "refresh_token:invalid_grant",
    ]);
  });

  it("refuses tokens for another resource or signed by another key; the revocation endpoint spends a refresh token", async () => {
    const other = `${new URL(up.mcpUrl).origin}/other`;
    const t = await codeFor("bob", other);
    const wrongAud = await raw(t.access_token);
    expect(wrongAud.status).toBe(401);
    expect(wrongAud.challenge).toContain('error="invalid_token"');

    const { privateKey } = await generateKeyPair("RS256");
    const now = Math.floor(Date.now() / 1000);
    const forged = await new SignJWT({ scope: "mcp:tools", client_id: clientId })
      .setProtectedHeader({ alg: "RS256", typ: "at+jwt" })
      .setIssuer(up.issuer)
      .setAudience(up.mcpUrl)
      .setSubject("mallory")
      .setIssuedAt(now)
      .setExpirationTime(now + 60)
      .sign(privateKey);
    expect((await raw(forged)).status).toBe(401);
    expect((await raw("not-a-jwt")).status).toBe(401);

    const revoked = await fetch(meta.revocation_endpoint, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ client_id: clientId, token: t.refresh_token, token_type_hint: "refresh_token" }),
    });
    expect(revoked.status).toBe(200);
    expect(up.revocations).toEqual([{ hint: "refresh_token", ok: true }]);
    const after = await token({ grant_type: "refresh_token", refresh_token: t.refresh_token });
    expect(after.body.error).toBe("invalid_grant");
  });

  it("a token without the required scope gets 403 insufficient_scope", async () => {
    const narrow = await startOAuthUpstream({ scopes: ["mcp:read"], requiredScope: "mcp:tools" });
    try {
      const saved = { up, meta, clientId };
      up = narrow;
      meta = await (await fetch(`${narrow.issuer}/.well-known/oauth-authorization-server`)).json();
      const reg: Any = await (
        await fetch(meta.registration_endpoint, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ redirect_uris: [redirectUri], token_endpoint_auth_method: "none", grant_types: ["authorization_code", "refresh_token"] }),
        })
      ).json();
      clientId = reg.client_id;
      try {
        const t = await codeFor("dave", undefined, "mcp:read");
        expect(t.scope).toBe("mcp:read");
        const r = await raw(t.access_token);
        expect(r.status).toBe(403);
        expect(r.challenge).toContain('error="insufficient_scope"');
        expect(narrow.requests.at(-1)).toMatchObject({ authorized: false, sub: "dave", status: 403 });
      } finally {
        ({ up, meta, clientId } = saved);
      }
    } finally {
      await narrow.close();
    }
  });

  it("refusing consent redirects with error=access_denied", async () => {
    const { query } = await authorize("carol", { refuse: true });
    expect(query.get("error")).toBe("access_denied");
    expect(query.get("code")).toBeNull();
  });
});
