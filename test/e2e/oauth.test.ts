/**
 * [O] OAuth for hosted clients, end to end on the production build: an MCP SDK v2 client with its
 * OAuth client provider connects to a gateway from nothing — reads the 401, discovers the RFC 9728
 * and RFC 8414 metadata, registers itself (RFC 7591), and runs authorization code + PKCE while
 * playwright-core drives Debian's chromium through the sign-in page (an enrollment code an admin
 * minted) and the consent page (client name escaped, redirect host, the template's tools and
 * roles); then it lists exactly the template's tools, calls one on server-everything, refreshes
 * its token, and the refreshed grant still works. Revoking the grant ends its access and refresh
 * tokens on the next request, and a refresh token presented twice revokes its whole grant. The
 * ledger holds grant.minted (with the client id), grant.refreshed and grant.revoked. Skipped,
 * saying so, only when /usr/bin/chromium is absent. Screenshots go to test-artifacts/oauth/.
 * Owns the browser, gateway, upstream and callback server it starts; must never leave them
 * running or reach beyond loopback.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  Client,
  type OAuthClientInformationMixed,
  type OAuthClientMetadata,
  type OAuthClientProvider,
  type OAuthDiscoveryState,
  type OAuthTokens,
  StreamableHTTPClientTransport,
  refreshAuthorization,
  UnauthorizedError,
} from "@modelcontextprotocol/client";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";
import { type Proc, root } from "./harness.ts";
import { api, grantFor, ledgerKinds, texts } from "./mcp.ts";
import {
  awaitLanding,
  type CallbackServer,
  collectDialogs,
  initializeWith,
  jwtPart,
  publicClientMetadata,
  registerClient,
  startCallbackServer,
  startEnrollmentGateway,
  tokenRequest as tokenRequestAt,
} from "./oauth-flow.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

if (skipBrowser) console.warn(`oauth.test.ts: skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const ARTIFACTS = join(root, "test-artifacts/oauth");
const HOSTILE_NAME = `Claude <img src=x onerror=alert(1)>`;
const TEMPLATE_TOOLS = ["everything__echo", "everything__get-sum"];

/** An OAuth client provider kept in memory, as a hosted client keeps its own. */
class MemoryProvider implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = "";
  authUrl: URL | null = null;
  readonly redirect: string;
  constructor(redirect: string) {
    this.redirect = redirect;
  }
  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata(): OAuthClientMetadata {
    return publicClientMetadata(HOSTILE_NAME, [this.redirect]);
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(i: OAuthClientInformationMixed) {
    this.info = i;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(t: OAuthTokens) {
    this.saved = t;
  }
  redirectToAuthorization(u: URL) {
    this.authUrl = u;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
  discovery: OAuthDiscoveryState | undefined;
  saveDiscoveryState(d: OAuthDiscoveryState) {
    this.discovery = d;
  }
  discoveryState() {
    return this.discovery;
  }
}

let jwk = "";
let gw: Proc & { url: string };
let everything: Proc;
let origin = "";
let mcpUrl = "";
let browser: Browser;
let callback: CallbackServer | undefined;
let callbackUrl = "";
let admin = "";
let redirects: URL[] = [];
const shots: string[] = [];

async function shot(page: Page, name: string): Promise<void> {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  shots.push(path);
}

async function enrollmentCode(sub: string): Promise<string> {
  const r = await api(origin, admin, "/v1/grants/enroll", { method: "POST", body: { sub, tools: TEMPLATE_TOOLS, roles: ["agent"], ttl_seconds: 3600 } });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.code;
}

/** Drives the sign-in and consent pages in Chromium; returns the callback the browser landed on. */
async function signInAndAllow(authUrl: URL, code: string, name: string): Promise<URL> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const dialogs = collectDialogs(page);
  try {
    await page.goto(authUrl.href);
    expect(new URL(page.url()).pathname).toBe("/oauth/authorize");
    await shot(page, `${name}-1-sign-in`);
    await page.fill("#code", code);
    await Promise.all([page.waitForLoadState("load"), page.click('form.box button[type="submit"]')]);
    await shot(page, `${name}-2-consent`);
    const body = await page.textContent("body");
    // The consent page: the client's (hostile) name as text, where the grant goes, what it carries.
    expect(body).toContain(HOSTILE_NAME);
    expect(await page.locator("img").count()).toBe(0);
    expect(body).toContain(new URL(callbackUrl).hostname);
    expect(body).toContain("app on your computer");
    for (const t of TEMPLATE_TOOLS) expect(body).toContain(t);
    expect(body).toMatch(/Roles\s*agent/);
    expect(body).toMatch(/Team\s*connectors/);
    const before = redirects.length;
    await page.click('button[value="approve"]');
    await awaitLanding(redirects, before, 100);
    expect(redirects.length).toBe(before + 1);
    expect(dialogs).toEqual([]);
    return redirects.at(-1)!;
  } finally {
    await context.close();
  }
}

const callsOf = async (token: string) => {
  const client = new Client({ name: "oauth-e2e-bearer", version: "1" });
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  return { client, close: () => client.close() };
};

const tokenRequest = (fields: Record<string, string>) => tokenRequestAt(origin, fields);

describe.skipIf(skipBrowser)("OAuth for hosted clients, from nothing, in Chromium", () => {
  const provider = () => new MemoryProvider(callbackUrl);
  let p: MemoryProvider;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    jwk = JSON.stringify((await generateSigningKey("oauth-e2e")).privateJwk);
    // (Chromium also asks this origin for /favicon.ico: only /callback is kept.)
    callback = await startCallbackServer();
    callbackUrl = callback.url;
    redirects = callback.landings;
    ({ everything, gw, origin, mcpUrl } = await startEnrollmentGateway(jwk, TEMPLATE_TOOLS));
    admin = (await grantFor(jwk, origin, { sub: "human:admin", team: "connectors", roles: ["admin", "auditor"], tools: [], ttlSeconds: 3600 })).token;
    browser = await launchChromium();
    p = provider();
  }, 240_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await gw?.stop();
    await everything?.stop();
    await callback?.close();
    if (shots.length) console.log(`oauth.test.ts: screenshots:\n  ${shots.join("\n  ")}`);
  });

  it("the SDK client reads the 401, discovers, registers, authorizes with PKCE in the browser, lists exactly the template's tools and calls one", async () => {
    const client = new Client({ name: "oauth-e2e", version: "1" });
    const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: p });
    await expect(client.connect(first)).rejects.toBeInstanceOf(UnauthorizedError);
    // It registered itself and was sent to this gateway's authorization endpoint with PKCE S256 and this gateway's resource.
    expect(p.info?.client_id).toBeTruthy();
    const authUrl = p.authUrl!;
    expect(`${authUrl.origin}${authUrl.pathname}`).toBe(`${origin}/oauth/authorize`);
    expect(authUrl.searchParams.get("code_challenge_method")).toBe("S256");
    expect(authUrl.searchParams.get("resource")).toBe(mcpUrl);
    const landed = await signInAndAllow(authUrl, await enrollmentCode("person:dana"), "first");
    expect(landed.searchParams.get("iss")).toBe(origin);
    expect(landed.searchParams.get("state")).toBe(authUrl.searchParams.get("state"));
    await first.finishAuth(landed.searchParams);
    // The access token is a Portcullis grant (an EdDSA JWT), not the library's opaque token.
    const access = p.saved!.access_token;
    expect(jwtPart(access, 0).typ).toBe("portcullis-grant+jwt");
    const c2 = new Client({ name: "oauth-e2e", version: "1" });
    await c2.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: p }));
    try {
      const names = (await c2.listTools()).tools.map((t) => t.name).sort();
      expect(names).toEqual([...TEMPLATE_TOOLS].sort());
      const r = await c2.callTool({ name: "everything__get-sum", arguments: { a: 2, b: 3 } });
      expect(r.isError ?? false).toBe(false);
      expect(texts(r)).toContain("5");
      const outside = await c2.callTool({ name: "everything__get-env", arguments: {} });
      expect(outside.isError).toBe(true);
    } finally {
      await c2.close();
    }
    const minted = await ledgerKinds(origin, admin, "grant.minted", (e) => e.some((x: Any) => x.body.sub === "person:dana"));
    const m = minted.find((x: Any) => x.body.sub === "person:dana");
    expect(m.body).toMatchObject({ client_id: p.info!.client_id, source: "enrollment", team: "connectors", roles: ["agent"], tools: TEMPLATE_TOOLS });
    expect(JSON.stringify(minted)).not.toContain(access);
  }, 120_000);

  it("the SDK refreshes its token (refreshAuthorization); the new grant works and carries the same jti; the old refresh token presented again revokes the family", async () => {
    const before = p.saved!;
    // What the SDK's transport does when the access token has expired: refresh with the stored refresh token and resource.
    const metadata = await (await fetch(`${origin}/.well-known/oauth-authorization-server`)).json();
    expect(metadata).toMatchObject({
      issuer: origin,
      token_endpoint: `${origin}/oauth/token`,
      code_challenge_methods_supported: ["S256"],
      authorization_response_iss_parameter_supported: true,
    });
    // A grant is a JWT with the same jti and second-resolution times: one re-minted within the second it was minted in is the
    // same text. Refresh in a later second, so the new grant is told apart by its iat (it is re-minted either way).
    const mintedAt = Number(jwtPart(before.access_token, 1).iat);
    while (Math.floor(Date.now() / 1000) <= mintedAt) await new Promise((r) => setTimeout(r, 100));
    p.saveTokens(await refreshAuthorization(origin, { metadata, clientInformation: p.info!, refreshToken: before.refresh_token!, resource: mcpUrl }));
    const after = p.saved!;
    expect(after.access_token).not.toBe(before.access_token);
    expect(after.refresh_token).toBeTruthy();
    expect(after.refresh_token).not.toBe(before.refresh_token);
    const jti = (t: string) => jwtPart(t, 1).jti;
    expect(jti(after.access_token)).toBe(jti(before.access_token));
    const s = await callsOf(after.access_token);
    try {
      expect(texts(await s.client.callTool({ name: "everything__echo", arguments: { message: "refreshed" } }))).toContain("refreshed");
    } finally {
      await s.close();
    }
    const refreshed = await ledgerKinds(origin, admin, "grant.refreshed", (e) => e.filter((x: Any) => x.body.jti === jti(after.access_token)).length >= 2);
    expect(refreshed.filter((x: Any) => x.body.jti === jti(after.access_token)).length).toBeGreaterThanOrEqual(2);
    // Reuse: the first refresh token again → invalid_grant, and the whole grant (the new refresh and access tokens too) is revoked.
    const reuse = await tokenRequest({ grant_type: "refresh_token", refresh_token: before.refresh_token!, client_id: p.info!.client_id });
    expect(reuse.status).toBe(400);
    expect(reuse.json.error).toBe("invalid_grant");
    const again = await tokenRequest({ grant_type: "refresh_token", refresh_token: after.refresh_token!, client_id: p.info!.client_id });
    expect(again.json.error).toBe("invalid_grant");
    const r = await initializeWith(mcpUrl, after.access_token, "x");
    expect(r.status).toBe(401);
    expect(r.challenge).toContain("resource_metadata=");
    const revoked = await ledgerKinds(origin, admin, "grant.revoked", (e) => e.some((x: Any) => x.body.jti === jti(after.access_token)));
    expect(revoked.find((x: Any) => x.body.jti === jti(after.access_token)).body.reason).toBe("refresh token reuse");
  }, 120_000);

  it("isolation: another registered client can neither redeem this client's code nor use its refresh token", async () => {
    const reg = await registerClient(origin, "other client", [callbackUrl]);
    expect(reg.status).toBe(201);
    const other = reg.json as { client_id: string };
    const q = provider();
    const t = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: q });
    await expect(new Client({ name: "oauth-e2e-3", version: "1" }).connect(t)).rejects.toBeInstanceOf(UnauthorizedError);
    const landed = await signInAndAllow(q.authUrl!, await enrollmentCode("person:fay"), "third");
    const code = landed.searchParams.get("code")!;
    const stolen = await tokenRequest({
      grant_type: "authorization_code",
      code,
      code_verifier: q.verifier,
      redirect_uri: callbackUrl,
      client_id: other.client_id,
      resource: mcpUrl,
    });
    expect(stolen.status).toBeGreaterThanOrEqual(400);
    expect(["invalid_grant", "invalid_client"]).toContain(stolen.json.error);
    expect(stolen.json.access_token).toBeUndefined();
    // The refused attempt did not spend the code: its own client redeems it, and its refresh token is its own alone.
    await t.finishAuth(landed.searchParams);
    expect(q.saved?.refresh_token).toBeTruthy();
    const r = await tokenRequest({ grant_type: "refresh_token", refresh_token: q.saved!.refresh_token!, client_id: other.client_id });
    expect(r.status).toBe(400);
    expect(r.json.error).toBe("invalid_grant");
    expect(r.json.access_token).toBeUndefined();
  }, 120_000);

  it("revoking the grant (portcullis token revoke / POST /v1/grants/:jti/revoke) ends both its access token and its refresh token on the next request", async () => {
    const q = provider();
    const client = new Client({ name: "oauth-e2e-2", version: "1" });
    const t = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: q });
    await expect(client.connect(t)).rejects.toBeInstanceOf(UnauthorizedError);
    await t.finishAuth((await signInAndAllow(q.authUrl!, await enrollmentCode("person:erin"), "second")).searchParams);
    const tokens = q.saved!;
    const jti = jwtPart(tokens.access_token, 1).jti as string;
    const s = await callsOf(tokens.access_token);
    await s.close();
    const rv = await api(origin, admin, `/v1/grants/${jti}/revoke`, { method: "POST", body: {} });
    expect(rv.status).toBe(200);
    const r = await initializeWith(mcpUrl, tokens.access_token, "x");
    expect(r.status).toBe(401);
    expect(r.challenge).toContain("revoked");
    const refresh = await tokenRequest({ grant_type: "refresh_token", refresh_token: tokens.refresh_token!, client_id: q.info!.client_id });
    expect(refresh.status).toBe(400);
    expect(refresh.json.error).toBe("invalid_grant");
  }, 120_000);
});
