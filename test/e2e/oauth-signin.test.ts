/**
 * [O] Who signs in to the OAuth flow, end to end on the production build: an external OIDC
 * issuer (a fake one on loopback, test/e2e/fake-oidc.ts, that signs its person in at once) by
 * authorization-code redirect with state, nonce and PKCE S256, and Cloudflare Access (an Access
 * JWT signed against a loopback key server). A registered (RFC 7591) client's authorization
 * request reaches the sign-in page, which lists "Sign in with <label>"; the consent page shows
 * the OIDC template's tools, roles and team; Allow sends the browser to the issuer, back to
 * /oauth/callback (the gateway exchanges the code at the issuer's token endpoint with its client
 * secret — a Worker secret — and verifies the id_token against the issuer's JWKS, audience =
 * client id, and its nonce) and on to the client with code, state and iss; the code exchanged with
 * the PKCE verifier is a Portcullis grant whose sub is the issuer's sub_prefix + sub and which
 * lists exactly the template's tools on /mcp. Negative: an id_token for another nonce, an issuer
 * that answers error=access_denied and an issuer whose token endpoint is outside the egress rules
 * all send the client error=access_denied. Access: a valid Cf-Access-Jwt-Assertion goes straight
 * to the consent page, and its grant's sub is access:<email>; without it the sign-in page shows.
 * The happy path runs in Chromium (playwright-core, skipped saying so when /usr/bin/chromium is
 * absent) and by fetch with cookies carried by hand. Owns the gateway, upstream, fake issuers, key
 * server, callback server and browser it starts; must never leave them running or reach beyond
 * loopback (the out-of-rules token endpoint is refused before anything connects).
 */
import { randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import type { Browser, Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type FakeOidc, startFakeOidc } from "./fake-oidc.ts";
import { freePort, type Proc, root, startEverything, startPortcullis } from "./harness.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";
import { connect, grantFor, ledgerKinds } from "./mcp.ts";
import {
  awaitLanding,
  b64url,
  type CallbackServer,
  closeServer,
  collectDialogs,
  hiddenField,
  jwtPart,
  listenLoopback,
  loopbackEverything,
  pkce,
  registerClient,
  startCallbackServer,
  tokenRequest as tokenRequestAt,
  unescapeHtml,
} from "./oauth-flow.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

if (skipBrowser) console.warn(`oauth-signin.test.ts: the browser test is skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const ARTIFACTS = join(root, "test-artifacts/oauth-signin");
const OIDC_TOOLS = ["everything__echo", "everything__get-sum"];
const ACCESS_TOOLS = ["everything__echo"];
const OIDC_TEAM = "idp-people";
const ACCESS_TEAM_NAME = "access-people";
const IDP_SUB = "pat-42";
const IDP_CLIENT_ID = "portcullis-gw";
const IDP_SECRET = `idp-secret-${randomBytes(8).toString("hex")}`;
const ACCESS_TEAM = "https://acme.cloudflareaccess.com";
const ACCESS_AUD = "a".repeat(64);
const ACCESS_EMAIL = "alice@example.com";
/** An address every egress rule refuses (cloud metadata): the gateway never connects to it. */
const OUTSIDE_EGRESS = "http://169.254.169.254/token";

const config = (o: { upstream: string; idp: FakeOidc; idp2: FakeOidc; certsUrl: string }) => `
auth:
  required: true
  max_token_lifetime: 24h
  external_issuers:
    - issuer: ${o.idp.issuer}
      jwks_url: ${o.idp.jwksUrl}
      audience: unused-by-sign-in
      sub_prefix: "idp:"
    - issuer: ${o.idp2.issuer}
      jwks_url: ${o.idp2.jwksUrl}
      audience: unused-by-sign-in
      sub_prefix: "idp2:"
  access:
    team_domain: ${ACCESS_TEAM}
    audience: "${ACCESS_AUD}"
    certs_url: ${o.certsUrl}
    roles: [approver]
    team: ops
  oauth:
    enabled: true
    access_token_ttl: 5m
    sign_in:
      access:
        template:
          tools: [${ACCESS_TOOLS.join(", ")}]
          roles: [agent]
          team: ${ACCESS_TEAM_NAME}
          lifetime: 1h
      oidc:
        - issuer: ${o.idp.issuer}
          authorization_endpoint: ${o.idp.authorizationEndpoint}
          token_endpoint: ${o.idp.tokenEndpoint}
          client_id: ${IDP_CLIENT_ID}
          client_secret: FAKE_IDP_CLIENT_SECRET
          label: Fake IdP
          template:
            tools: [${OIDC_TOOLS.join(", ")}]
            roles: [agent]
            team: ${OIDC_TEAM}
            lifetime: 2h
        - issuer: ${o.idp2.issuer}
          authorization_endpoint: ${o.idp2.authorizationEndpoint}
          token_endpoint: ${OUTSIDE_EGRESS}
          client_id: portcullis-gw2
          label: Walled IdP
          template:
            tools: [${OIDC_TOOLS.join(", ")}]
            roles: [agent]
            team: ${OIDC_TEAM}
            lifetime: 2h
${loopbackEverything(o.upstream)}`;

let jwk = "";
let gw: Proc & { url: string; logs: () => string };
let everything: Proc;
let idp: FakeOidc;
let idp2: FakeOidc;
let keyServer: Server;
let accessKey: Awaited<ReturnType<typeof generateKeyPair>>;
let callback: CallbackServer | undefined;
let callbackUrl = "";
let origin = "";
let mcpUrl = "";
let clientId = "";
let auditor = "";
let landings: URL[] = [];
/** OIDC sign-ins that ended in a code (each mints one grant). */
let successes = 0;

/** A fresh authorization request of the registered client: its query, state and PKCE verifier. */
function authorizationRequest(): { query: string; state: string; verifier: string } {
  const { verifier, challenge } = pkce();
  const state = b64url(randomBytes(16));
  const q = new URLSearchParams({
    response_type: "code",
    client_id: clientId,
    redirect_uri: callbackUrl,
    state,
    code_challenge: challenge,
    code_challenge_method: "S256",
    resource: mcpUrl,
  });
  return { query: q.toString(), state, verifier };
}

/** Cookies carried by hand for one browser-like sign-in (only to the gateway's origin). */
class Jar {
  readonly cookies = new Map<string, string>();
  take(r: Response): void {
    for (const c of r.headers.getSetCookie()) {
      const [pair] = c.split(";");
      const i = pair!.indexOf("=");
      const name = pair!.slice(0, i).trim();
      const value = pair!.slice(i + 1).trim();
      if (value === "" || /;\s*max-age=0/i.test(c)) this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }
  header(): Record<string, string> {
    return this.cookies.size ? { cookie: [...this.cookies].map(([k, v]) => `${k}=${v}`).join("; ") } : {};
  }
}

/** A request as a browser makes it: cookies for the gateway only, Origin on POSTs, no redirects followed. */
async function step(
  jar: Jar,
  url: string,
  init: { form?: Record<string, string>; headers?: Record<string, string> } = {},
): Promise<{ r: Response; text: string }> {
  const toGateway = new URL(url).origin === origin;
  const r = await fetch(url, {
    method: init.form ? "POST" : "GET",
    redirect: "manual",
    headers: {
      ...(toGateway ? jar.header() : {}),
      ...(init.form ? { "content-type": "application/x-www-form-urlencoded", origin } : {}),
      ...(init.headers ?? {}),
    },
    ...(init.form ? { body: new URLSearchParams(init.form).toString() } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  if (toGateway) jar.take(r);
  return { r, text: await r.text() };
}

function hidden(html: string, name: string): string {
  const v = hiddenField(html, name);
  expect(v, `the page has a hidden ${name}`).toBeDefined();
  return v!;
}

/** The text of a page with its tags dropped (what a person reads). */
const readable = (html: string) =>
  unescapeHtml(
    html
      .replace(/<style[\s\S]*?<\/style>/g, "")
      .replace(/<[^>]+>/g, " ")
      .replace(/\s+/g, " "),
  );

/**
 * The OIDC sign-in by fetch: sign-in page → "Sign in with <label>" → consent → Allow → the issuer
 * → /oauth/callback → the client's redirect URI (returned, with the consent page's text).
 */
async function oidcByFetch(
  issuer: string,
  label: string,
  idpOrigin: string,
  callbackJar?: Jar,
): Promise<{ landed: URL; consentText: string; req: ReturnType<typeof authorizationRequest>; callback: { r: Response; text: string } }> {
  const jar = new Jar();
  const req = authorizationRequest();
  const signIn = await step(jar, `${origin}/oauth/authorize?${req.query}`);
  expect(signIn.r.status, signIn.text.slice(0, 500)).toBe(200);
  expect(readable(signIn.text)).toContain(`Sign in with ${label}`);
  const consentPage = await step(jar, `${origin}/oauth/authorize`, { form: { action: "oidc", q: req.query, issuer } });
  expect(consentPage.r.status, consentPage.text.slice(0, 500)).toBe(200);
  const allow = await step(jar, `${origin}/oauth/authorize`, {
    form: { action: "consent", handle: hidden(consentPage.text, "handle"), offer: hidden(consentPage.text, "offer"), decision: "approve" },
  });
  expect(allow.r.status, allow.text.slice(0, 500)).toBe(302);
  const toIdp = new URL(allow.r.headers.get("location")!);
  expect(toIdp.origin).toBe(idpOrigin);
  const atIdp = await step(jar, toIdp.href);
  expect(atIdp.r.status, atIdp.text).toBe(302);
  const back = new URL(atIdp.r.headers.get("location")!);
  expect(`${back.origin}${back.pathname}`).toBe(`${origin}/oauth/callback`);
  const done = await step(callbackJar ?? jar, back.href);
  if (callbackJar) return { landed: new URL("about:blank"), consentText: readable(consentPage.text), req, callback: done };
  expect(done.r.status, done.text.slice(0, 500)).toBe(302);
  return { landed: new URL(done.r.headers.get("location")!), consentText: readable(consentPage.text), req, callback: done };
}

const tokenRequest = (fields: Record<string, string>) => tokenRequestAt(origin, fields);

/** The code at `landed` exchanged with the PKCE verifier: the access token. */
async function exchange(landed: URL, verifier: string): Promise<string> {
  const t = await tokenRequest({
    grant_type: "authorization_code",
    code: landed.searchParams.get("code")!,
    redirect_uri: callbackUrl,
    client_id: clientId,
    code_verifier: verifier,
    resource: mcpUrl,
  });
  expect(t.status, JSON.stringify(t.json)).toBe(200);
  expect(t.json.token_type.toLowerCase()).toBe("bearer");
  return t.json.access_token as string;
}

const toolsOf = async (token: string): Promise<string[]> => {
  const s = await connect("oauth-signin-e2e", mcpUrl, token);
  try {
    return (await s.client.listTools()).tools.map((t) => t.name).sort();
  } finally {
    await s.close();
  }
};

/** The redirect the client received is the success of its own request: back to its redirect URI with code, state and iss. */
function expectCode(landed: URL, state: string): void {
  expect(`${landed.origin}${landed.pathname}`).toBe(callbackUrl);
  expect(landed.searchParams.get("error"), landed.href).toBeNull();
  expect(landed.searchParams.get("code")).toBeTruthy();
  expect(landed.searchParams.get("state")).toBe(state);
  expect(landed.searchParams.get("iss")).toBe(origin);
}

function expectDenied(landed: URL, state: string): void {
  expect(`${landed.origin}${landed.pathname}`).toBe(callbackUrl);
  expect(landed.searchParams.get("error"), landed.href).toBe("access_denied");
  expect(landed.searchParams.get("state")).toBe(state);
  expect(landed.searchParams.get("code")).toBeNull();
}

/** The access token is a Portcullis grant (an EdDSA JWT of this gateway) for `sub`, carrying exactly `tools`. */
function expectGrant(token: string, sub: string, tools: string[]): void {
  expect(jwtPart(token, 0).typ).toBe("portcullis-grant+jwt");
  const claims = jwtPart(token, 1);
  expect(claims.sub).toBe(sub);
  expect(claims.iss).toBe(origin);
  expect(claims.tools).toEqual(tools);
  expect(claims.roles).toEqual(["agent"]);
}

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  jwk = JSON.stringify((await generateSigningKey("oauth-signin-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  mcpUrl = `${origin}/mcp`;
  idp = await startFakeOidc({ clientId: IDP_CLIENT_ID, clientSecret: IDP_SECRET, redirectUri: `${origin}/oauth/callback`, sub: IDP_SUB });
  idp2 = await startFakeOidc({ clientId: "portcullis-gw2", redirectUri: `${origin}/oauth/callback`, sub: "walled-1" });
  accessKey = await generateKeyPair("RS256", { extractable: true });
  const jwks = { keys: [{ ...(await exportJWK(accessKey.publicKey)), kid: "access-1", alg: "RS256", use: "sig" }] };
  keyServer = createServer((req, res) => {
    res.writeHead(req.url === "/cdn-cgi/access/certs" ? 200 : 404, { "content-type": "application/json" });
    res.end(JSON.stringify(req.url === "/cdn-cgi/access/certs" ? jwks : {}));
  });
  const certsUrl = `http://127.0.0.1:${await listenLoopback(keyServer)}/cdn-cgi/access/certs`;
  callback = await startCallbackServer();
  callbackUrl = callback.url;
  landings = callback.landings;
  const upPort = await freePort();
  everything = await startEverything(upPort);
  gw = await startPortcullis(config({ upstream: `http://127.0.0.1:${upPort}/mcp`, idp, idp2, certsUrl }), port, {
    PORTCULLIS_SIGNING_KEY: jwk,
    FAKE_IDP_CLIENT_SECRET: IDP_SECRET,
  });
  auditor = (await grantFor(jwk, origin, { sub: "human:auditor", team: OIDC_TEAM, roles: ["auditor"], tools: [], ttlSeconds: 3600 })).token;
  const reg = await registerClient(origin, "Sign-in e2e client", [callbackUrl]);
  expect(reg.status, JSON.stringify(reg.json)).toBe(201);
  clientId = reg.json.client_id;
}, 240_000);

afterAll(async () => {
  await gw?.stop();
  await everything?.stop();
  await idp?.close();
  await idp2?.close();
  await closeServer(keyServer);
  await callback?.close();
});

afterEach(() => {
  idp.mode = "ok";
  idp2.mode = "ok";
});

describe("OAuth sign-in through an external OIDC issuer", () => {
  describe.skipIf(skipBrowser)("in Chromium", () => {
    let browser: Browser;
    beforeAll(async () => {
      browser = await launchChromium();
    }, 60_000);
    afterAll(async () => {
      await browser?.close().catch(() => undefined);
    });

    it("sign-in page → Sign in with Fake IdP → consent (the template's tools, roles, team) → Allow → the issuer → back → the client gets code, state, iss; the code is a grant for idp:<sub> listing exactly the template's tools", async () => {
      const req = authorizationRequest();
      const context = await browser.newContext();
      const page: Page = await context.newPage();
      const dialogs = collectDialogs(page);
      const before = { landings: landings.length, authorize: idp.authorizeQueries.length, token: idp.tokenForms.length };
      try {
        await page.goto(`${origin}/oauth/authorize?${req.query}`);
        expect(new URL(page.url()).pathname).toBe("/oauth/authorize");
        await page.screenshot({ path: join(ARTIFACTS, "1-sign-in.png"), fullPage: true });
        const button = page.getByRole("button", { name: "Sign in with Fake IdP" });
        expect(await button.count()).toBe(1);
        expect(await page.getByRole("button", { name: "Sign in with Walled IdP" }).count()).toBe(1);
        await Promise.all([page.waitForLoadState("load"), button.click()]);
        await page.screenshot({ path: join(ARTIFACTS, "2-consent.png"), fullPage: true });
        const body = (await page.textContent("body")) ?? "";
        expect(body).toContain("Sign-in e2e client");
        expect(body).toContain("Fake IdP");
        for (const t of OIDC_TOOLS) expect(body).toContain(t);
        expect(body).toMatch(/Tools\s*everything__echo, everything__get-sum/);
        expect(body).toMatch(/Roles\s*agent/);
        expect(body).toMatch(/Team\s*idp-people/);
        expect(body).toMatch(/Lifetime\s*2h/);
        await page.click('button[value="approve"]');
        await awaitLanding(landings, before.landings, 150);
        expect(landings.length, `the browser is at ${page.url()}`).toBe(before.landings + 1);
        expect(dialogs).toEqual([]);
      } finally {
        await context.close();
      }
      const landed = landings.at(-1)!;
      expectCode(landed, req.state);
      successes++;
      // The issuer saw one authorization request as the gateway must send it, and one token request with the client secret and the verifier.
      expect(idp.authorizeQueries.length).toBe(before.authorize + 1);
      const aq = idp.authorizeQueries.at(-1)!;
      expect(Object.fromEntries(["response_type", "client_id", "redirect_uri", "code_challenge_method"].map((k) => [k, aq.get(k)]))).toEqual({
        response_type: "code",
        client_id: IDP_CLIENT_ID,
        redirect_uri: `${origin}/oauth/callback`,
        code_challenge_method: "S256",
      });
      expect(aq.get("state")).toBeTruthy();
      expect(aq.get("state")).not.toBe(req.state);
      expect(aq.get("nonce")).toBeTruthy();
      expect(idp.tokenForms.length).toBe(before.token + 1);
      expect(idp.tokenForms.at(-1)!.get("client_secret")).toBe(IDP_SECRET);
      expect(idp.problems).toEqual([]);
      const token = await exchange(landed, req.verifier);
      expectGrant(token, `idp:${IDP_SUB}`, OIDC_TOOLS);
      expect(await toolsOf(token)).toEqual([...OIDC_TOOLS].sort());
      const minted = await ledgerKinds(origin, auditor, "grant.minted", (e) => e.some((x: Any) => x.body.jti === jwtPart(token, 1).jti));
      const m = minted.find((x: Any) => x.body.jti === jwtPart(token, 1).jti);
      expect(m?.body).toMatchObject({ sub: `idp:${IDP_SUB}`, source: "oidc", client_id: clientId, team: OIDC_TEAM, roles: ["agent"], tools: OIDC_TOOLS });
      // Nothing the issuer or the gateway handed out reached the ledger.
      const all = JSON.stringify(minted);
      for (const secret of [token, IDP_SECRET, idp.idTokens.at(-1)!, landed.searchParams.get("code")!]) expect(all).not.toContain(secret);
    }, 120_000);
  });

  it("by fetch with cookies by hand: the same flow ends in a grant for idp:<sub> that lists exactly the template's tools; the code works once", async () => {
    const { landed, consentText, req } = await oidcByFetch(idp.issuer, "Fake IdP", idp.issuer);
    expect(consentText).toMatch(/Tools everything__echo, everything__get-sum/);
    expect(consentText).toMatch(/Roles agent/);
    expectCode(landed, req.state);
    successes++;
    expect(idp.problems).toEqual([]);
    const token = await exchange(landed, req.verifier);
    expectGrant(token, `idp:${IDP_SUB}`, OIDC_TOOLS);
    expect(await toolsOf(token)).toEqual([...OIDC_TOOLS].sort());
    const again = await tokenRequest({
      grant_type: "authorization_code",
      code: landed.searchParams.get("code")!,
      redirect_uri: callbackUrl,
      client_id: clientId,
      code_verifier: req.verifier,
      resource: mcpUrl,
    });
    expect(again.json.error).toBe("invalid_grant");
  }, 120_000);

  it("an id_token for another nonce: the client is sent error=access_denied", async () => {
    idp.mode = "wrong-nonce";
    const tokens = idp.idTokens.length;
    const { landed, req } = await oidcByFetch(idp.issuer, "Fake IdP", idp.issuer);
    // The issuer did sign an id_token (valid but for another nonce): the gateway refused it.
    expect(idp.idTokens.length).toBe(tokens + 1);
    expect(jwtPart(idp.idTokens.at(-1)!, 1).nonce).toMatch(/-not$/);
    expectDenied(landed, req.state);
    expect(landed.searchParams.get("error_description") ?? "").toMatch(/nonce/);
    expect(idp.problems).toEqual([]);
  }, 120_000);

  it("an issuer that answers error=access_denied: the client is sent error=access_denied, and the gateway asks the issuer for no token", async () => {
    idp.mode = "deny";
    const tokens = idp.tokenForms.length;
    const { landed, req } = await oidcByFetch(idp.issuer, "Fake IdP", idp.issuer);
    expectDenied(landed, req.state);
    expect(idp.tokenForms.length).toBe(tokens);
    expect(idp.problems).toEqual([]);
  }, 120_000);

  it("an issuer whose token endpoint is outside the egress rules: the client is sent error=access_denied", async () => {
    const { landed, req } = await oidcByFetch(idp2.issuer, "Walled IdP", idp2.issuer);
    expect(idp2.authorizeQueries.length).toBeGreaterThanOrEqual(1);
    expect(idp2.tokenForms.length).toBe(0);
    expectDenied(landed, req.state);
    expect(landed.searchParams.get("error_description") ?? "").toMatch(/token endpoint/);
    expect(idp2.problems).toEqual([]);
  }, 120_000);

  it("the issuer's redirect back, opened in another browser (without the cookies consent set), is refused with a page: no code reaches anyone", async () => {
    const tokens = idp.tokenForms.length;
    const { callback: cb } = await oidcByFetch(idp.issuer, "Fake IdP", idp.issuer, new Jar());
    expect(cb.r.status, cb.text.slice(0, 300)).toBe(400);
    expect(cb.r.headers.get("location")).toBeNull();
    // The gateway did not redeem the issuer's code either.
    expect(idp.tokenForms.length).toBe(tokens);
  }, 120_000);

  it("the ledger holds a grant.minted for each successful sign-in only: none for the refused ones", async () => {
    // One more successful sign-in, after every refused one: once its record is there, any record a refused sign-in wrote would be too.
    const { landed, req } = await oidcByFetch(idp.issuer, "Fake IdP", idp.issuer);
    expectCode(landed, req.state);
    const last = jwtPart(await exchange(landed, req.verifier), 1).jti;
    successes++;
    const minted = await ledgerKinds(origin, auditor, "grant.minted", (e) => e.some((x: Any) => x.body.jti === last));
    expect(minted.some((x: Any) => x.body.jti === last)).toBe(true);
    expect(minted.filter((x: Any) => x.body.source === "oidc" && x.body.sub === `idp:${IDP_SUB}`).length).toBe(successes);
    expect(minted.filter((x: Any) => String(x.body.sub).startsWith("idp2:")).length).toBe(0);
  }, 120_000);

  it("a callback with a state the gateway never issued is refused with a page, not a redirect", async () => {
    const r = await fetch(`${origin}/oauth/callback?code=x&state=${b64url(randomBytes(16))}`, { redirect: "manual", signal: AbortSignal.timeout(30_000) });
    expect(r.status).toBe(400);
    expect(r.headers.get("location")).toBeNull();
  });
});

describe("OAuth sign-in through Cloudflare Access", () => {
  const accessJwt = (aud = ACCESS_AUD) =>
    new SignJWT({ email: ACCESS_EMAIL, type: "app" })
      .setProtectedHeader({ alg: "RS256", kid: "access-1" })
      .setIssuer(ACCESS_TEAM)
      .setAudience(aud)
      .setSubject("u-1")
      .setIssuedAt()
      .setExpirationTime("10m")
      .sign(accessKey.privateKey);

  it("with a valid Cf-Access-Jwt-Assertion: the consent page at once (no sign-in page), Allow → code → a grant for access:<email> listing exactly the template's tools", async () => {
    const jar = new Jar();
    const req = authorizationRequest();
    const assertion = { "cf-access-jwt-assertion": await accessJwt() };
    const consentPage = await step(jar, `${origin}/oauth/authorize?${req.query}`, { headers: assertion });
    expect(consentPage.r.status, consentPage.text.slice(0, 500)).toBe(200);
    const text = readable(consentPage.text);
    expect(text).not.toMatch(/Sign in with/);
    expect(text).not.toMatch(/Enrollment code/);
    expect(text).toContain(`Signed in as access:${ACCESS_EMAIL} (Cloudflare Access)`);
    expect(text).toMatch(/Tools everything__echo Roles agent Team access-people/);
    const allow = await step(jar, `${origin}/oauth/authorize`, {
      headers: assertion,
      form: { action: "consent", handle: hidden(consentPage.text, "handle"), offer: hidden(consentPage.text, "offer"), decision: "approve" },
    });
    expect(allow.r.status, allow.text.slice(0, 500)).toBe(302);
    const landed = new URL(allow.r.headers.get("location")!);
    expectCode(landed, req.state);
    const token = await exchange(landed, req.verifier);
    expectGrant(token, `access:${ACCESS_EMAIL}`, ACCESS_TOOLS);
    expect(jwtPart(token, 1).team).toBe(ACCESS_TEAM_NAME);
    expect(await toolsOf(token)).toEqual(ACCESS_TOOLS);
  }, 120_000);

  it("without the header, or with an Access JWT for another application: the sign-in page", async () => {
    const cases: Record<string, string>[] = [{}, { "cf-access-jwt-assertion": await accessJwt("b".repeat(64)) }, { "cf-access-jwt-assertion": "not-a-jwt" }];
    for (const headers of cases) {
      const r = await step(new Jar(), `${origin}/oauth/authorize?${authorizationRequest().query}`, { headers });
      expect(r.r.status).toBe(200);
      const text = readable(r.text);
      expect(text).toContain("Sign in to connect an MCP client");
      expect(text).toContain("Sign in with Fake IdP");
      expect(text).toMatch(/Behind Cloudflare Access/);
      expect(text).not.toContain(`access:${ACCESS_EMAIL}`);
      expect(r.text).not.toContain('name="offer"');
    }
  }, 60_000);

  it("Allow without the Access JWT that consent was asked for is refused (403), and the client gets no code", async () => {
    const jar = new Jar();
    const req = authorizationRequest();
    const consentPage = await step(jar, `${origin}/oauth/authorize?${req.query}`, { headers: { "cf-access-jwt-assertion": await accessJwt() } });
    expect(consentPage.r.status).toBe(200);
    const allow = await step(jar, `${origin}/oauth/authorize`, {
      form: { action: "consent", handle: hidden(consentPage.text, "handle"), offer: hidden(consentPage.text, "offer"), decision: "approve" },
    });
    expect(allow.r.status).toBe(403);
    expect(allow.r.headers.get("location")).toBeNull();
  }, 60_000);
});
