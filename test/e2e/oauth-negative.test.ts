/**
 * [O] OAuth negative matrix, end to end on the production build, without a browser: the sign-in
 * and consent pages are driven with fetch (cookies kept by hand, Origin set, redirects read from
 * Location). Each refusal is checked for its status, its OAuth `error` code (in the JSON answer,
 * or in the `error` query parameter of the redirect to the client — or, where the redirect URI is
 * not the client's, a page rendered with 400 and no redirect) and for issuing nothing: missing or
 * plain PKCE, a wrong code_verifier, a reused authorization code, an unregistered redirect URI (a
 * different path, a different port of an https URI) beside a loopback one accepted on any port
 * (RFC 8252 §7.3), the `resource` of another gateway (authorize and token requests), a grant for
 * another audience at /mcp beside an OAuth token that works there, a refresh token used twice (the
 * family revoked, the ledger saying why), a client metadata document URL outside the egress rules
 * (a second gateway; a loopback document server shows nothing was fetched) or with documents
 * off, a denied consent, and an enrollment code used twice. And four cases that once were bugs of
 * src/routes/oauth-token.ts: a replayed code also ends the first redemption's access token; a
 * refused refresh does not use up the refresh token; a forged refresh token (the code's
 * userId:grantId prefix) presented twice, or once to RFC 7009 revocation, revokes nothing.
 * And, with OAuth on, the discovery a client starts from as it always was: the gateway's origin
 * as authorization server in the RFC 9728 metadata, and the plain no-token challenge.
 * Owns the two gateways, the upstream and the document server it starts; must never leave them
 * running or reach beyond loopback.
 */
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { api, grantFor, ledgerKinds } from "./mcp.ts";
import {
  closeServer,
  enrollmentSignIn,
  formPost,
  hiddenField,
  initializeWith,
  jwtPart,
  listenLoopback,
  pkce,
  registerClient,
  startEnrollmentGateway,
  tokenRequest as tokenRequestAt,
  unescapeHtml,
} from "./oauth-flow.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const TEMPLATE_TOOLS = ["everything__echo", "everything__get-sum"];

/** A second gateway: client metadata documents on, egress limited to one public host (no loopback). */
const cimdConfig = `
auth:
  required: true
  oauth:
    enabled: true
    client_metadata_documents: true
${enrollmentSignIn(TEMPLATE_TOOLS)}
egress:
  allow_loopback: false
  hosts: [allowed.example]
gateway:
  agent_tools: false
upstreams:
  - name: unused
    url: https://allowed.example/mcp
    timeout: 5s
`;

let jwk = "";
let gw: Proc | undefined;
let gw2: Proc | undefined;
let everything: Proc | undefined;
let docServer: Server | undefined;
const docHits: string[] = [];
let docUrl = "";
let origin = "";
let origin2 = "";
let mcpUrl = "";
/** Another gateway's origin: a port nothing of this test listens on. */
let otherOrigin = "";
let admin = "";

function hidden(html: string, name: string): string {
  const v = hiddenField(html, name);
  if (v === undefined) throw new Error(`no hidden field ${name} on the page:\n${html.slice(0, 2000)}`);
  return v;
}

/** The `name=value` parts of a response's Set-Cookie headers, as a Cookie header. */
const cookiesOf = (r: Response) =>
  r.headers
    .getSetCookie()
    .map((c) => c.split(";")[0]!)
    .join("; ");

async function register(o: string, redirectUris: string[], name = "negative-matrix"): Promise<string> {
  const r = await registerClient(o, name, redirectUris);
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.client_id as string;
}

async function enrollmentCode(sub: string): Promise<string> {
  const r = await api(origin, admin, "/v1/grants/enroll", { method: "POST", body: { sub, tools: TEMPLATE_TOOLS, roles: ["agent"], ttl_seconds: 3600 } });
  expect(r.status, JSON.stringify(r.json)).toBe(201);
  return r.json.code;
}

interface AuthParams {
  clientId: string;
  redirectUri: string;
  state?: string;
  /** null: no code_challenge at all. */
  challenge?: string | null;
  /** null: no code_challenge_method. */
  method?: string | null;
  /** null: no resource parameter. */
  resource?: string | null;
}

function authQuery(p: AuthParams): string {
  const q = new URLSearchParams({ response_type: "code", client_id: p.clientId, redirect_uri: p.redirectUri, state: p.state ?? "st-1" });
  if (p.challenge !== null) q.set("code_challenge", p.challenge ?? pkce().challenge);
  if (p.method !== null) q.set("code_challenge_method", p.method ?? "S256");
  if (p.resource !== null) q.set("resource", p.resource ?? mcpUrl);
  return q.toString();
}

async function getAuthorize(o: string, query: string): Promise<Response> {
  return fetch(`${o}/oauth/authorize?${query}`, { redirect: "manual", signal: AbortSignal.timeout(30_000) });
}

async function postForm(o: string, fields: Record<string, string>, cookie = ""): Promise<Response> {
  return fetch(`${o}/oauth/authorize`, {
    method: "POST",
    redirect: "manual",
    headers: { origin: o, "content-type": "application/x-www-form-urlencoded", ...(cookie ? { cookie } : {}) },
    body: new URLSearchParams(fields).toString(),
    signal: AbortSignal.timeout(30_000),
  });
}

/** Sign-in with an enrollment code: the consent page's response and the handle, offer and cookie it carries. */
async function enroll(query: string, code: string): Promise<{ res: Response; html: string; handle: string; offer: string; cookie: string }> {
  const res = await postForm(origin, { action: "enroll", q: query, code });
  const html = await res.text();
  expect(res.status, html.slice(0, 2000)).toBe(200);
  const cookie = cookiesOf(res);
  expect(cookie).toMatch(/^__Host-oauth-consent-/);
  return { res, html, handle: hidden(html, "handle"), offer: hidden(html, "offer"), cookie };
}

/** authorize → sign in with a fresh enrollment code → consent (`decision`) → the redirect back to the client. */
async function authorizeFlow(p: AuthParams, sub: string, decision: "approve" | "deny" = "approve"): Promise<URL> {
  const query = authQuery(p);
  const first = await getAuthorize(origin, query);
  const page = await first.text();
  expect(first.status, page.slice(0, 2000)).toBe(200);
  expect(page).toContain("Enrollment code");
  const c = await enroll(query, await enrollmentCode(sub));
  const done = await postForm(origin, { action: "consent", handle: c.handle, offer: c.offer, decision }, c.cookie);
  expect(done.status, await done.clone().text()).toBe(302);
  return new URL(done.headers.get("location")!);
}

/** A full flow up to the code: what the token request needs. */
async function codeFor(sub: string, p: Partial<AuthParams> = {}): Promise<{ code: string; verifier: string; clientId: string; redirectUri: string }> {
  const redirectUri = p.redirectUri ?? "http://127.0.0.1:7/cb";
  const clientId = p.clientId ?? (await register(origin, [redirectUri]));
  const { verifier, challenge } = pkce();
  const landed = await authorizeFlow({ clientId, redirectUri, challenge, ...p }, sub);
  expect(`${landed.origin}${landed.pathname}`).toBe(new URL(redirectUri).href.replace(/\?.*$/, ""));
  expect(landed.searchParams.get("iss")).toBe(origin);
  const code = landed.searchParams.get("code");
  expect(code).toBeTruthy();
  return { code: code!, verifier, clientId, redirectUri };
}

const tokenRequest = (fields: Record<string, string>) => tokenRequestAt(origin, fields);

const redeem = (c: { code: string; verifier: string; clientId: string; redirectUri: string }, extra: Record<string, string> = {}) =>
  tokenRequest({
    grant_type: "authorization_code",
    code: c.code,
    redirect_uri: c.redirectUri,
    client_id: c.clientId,
    code_verifier: c.verifier,
    resource: mcpUrl,
    ...extra,
  });

/** An initialize at /mcp with `token`: the HTTP status and the challenge. */
const mcpWith = (token: string) => initializeWith(mcpUrl, token, "negative");

const jtiOf = (t: string) => jwtPart(t, 1).jti as string;

/** A refusal that issued nothing: an OAuth error answer with no token in it. */
function refused(r: { status: number; json: Any }, error: string, status = 400): void {
  expect(r.status, JSON.stringify(r.json)).toBe(status);
  expect(r.json.error, JSON.stringify(r.json)).toBe(error);
  expect(r.json.access_token).toBeUndefined();
  expect(r.json.refresh_token).toBeUndefined();
}

/** A redirect to the client carrying `error` (and state and iss), no code. */
function errorRedirect(res: Response, redirectUri: string, error: string, state = "st-1"): URL {
  expect(res.status).toBe(302);
  const to = new URL(res.headers.get("location")!);
  expect(`${to.origin}${to.pathname}`).toBe(redirectUri);
  expect(to.searchParams.get("error")).toBe(error);
  expect(to.searchParams.get("state")).toBe(state);
  expect(to.searchParams.get("iss")).toBe(origin);
  expect(to.searchParams.get("code")).toBeNull();
  return to;
}

/** A page rendered with `status` (never a redirect) whose text contains `text`. */
async function renderedPage(res: Response, status: number, text: string | RegExp): Promise<string> {
  const html = await res.text();
  expect(res.status, html.slice(0, 2000)).toBe(status);
  expect(res.headers.get("location")).toBeNull();
  expect(res.headers.get("content-type")).toContain("text/html");
  const plain = unescapeHtml(html.replace(/<[^>]+>/g, " ")).replace(/\s+/g, " ");
  if (typeof text === "string") expect(plain).toContain(text);
  else expect(plain).toMatch(text);
  return plain;
}

describe("OAuth negative matrix (fetch-driven sign-in and consent)", () => {
  beforeAll(async () => {
    jwk = JSON.stringify((await generateSigningKey("oauth-negative")).privateJwk);
    docServer = createServer((req, res) => {
      docHits.push(req.url ?? "/");
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ client_id: docUrl, client_name: "fetched", redirect_uris: ["http://127.0.0.1:7/cb"], token_endpoint_auth_method: "none" }));
    });
    docUrl = `http://127.0.0.1:${await listenLoopback(docServer)}/client.json`;
    // The gateway under test: OAuth on, client metadata documents off (the default).
    const started = await startEnrollmentGateway(jwk, TEMPLATE_TOOLS);
    ({ everything, gw, origin, mcpUrl } = started);
    const port = started.port;
    const port2 = await freePort();
    origin2 = `http://127.0.0.1:${port2}`;
    gw2 = await startPortcullis(cimdConfig, port2, { PORTCULLIS_SIGNING_KEY: jwk });
    let other = await freePort();
    while (other === port || other === port2) other = await freePort();
    otherOrigin = `http://127.0.0.1:${other}`;
    admin = (await grantFor(jwk, origin, { sub: "human:admin", team: "connectors", roles: ["admin", "auditor"], tools: [], ttlSeconds: 3600 })).token;
  }, 240_000);

  afterAll(async () => {
    await gw?.stop();
    await gw2?.stop();
    await everything?.stop();
    await closeServer(docServer);
  });

  it("with auth.oauth on, as before: the metadata names the gateway's origin as authorization server, its RFC 8414 metadata answers, and the no-token 401 is the plain challenge", async () => {
    for (const path of ["", "/mcp", "/operator/mcp"]) {
      const doc = await (await fetch(`${origin}/.well-known/oauth-protected-resource${path}`)).json();
      expect(doc.authorization_servers, path).toEqual([origin]);
    }
    const as = await fetch(`${origin}/.well-known/oauth-authorization-server`);
    expect(as.status).toBe(200);
    expect(((await as.json()) as Any).issuer).toBe(origin);
    const r = await fetch(mcpUrl, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: "{}",
    });
    expect(r.status).toBe(401);
    expect(r.headers.get("www-authenticate")).toBe(`Bearer resource_metadata="${origin}/.well-known/oauth-protected-resource/mcp", scope="agent"`);
    expect(await r.json()).toEqual({ error: "unauthorized", error_description: "a grant token is required (Authorization: Bearer <token>)" });
  });

  it("missing PKCE → invalid_request on a redirect to the client; plain PKCE (and a challenge with no method, RFC 7636's plain default) → refused the same way; a form posting such a request uses no enrollment code", async () => {
    const redirectUri = "http://127.0.0.1:7/cb";
    const clientId = await register(origin, [redirectUri]);
    const none = errorRedirect(await getAuthorize(origin, authQuery({ clientId, redirectUri, challenge: null, method: null })), redirectUri, "invalid_request");
    expect(none.searchParams.get("error_description")).toMatch(/PKCE/);
    const plainQuery = authQuery({ clientId, redirectUri, challenge: pkce().verifier, method: "plain" });
    const plain = errorRedirect(await getAuthorize(origin, plainQuery), redirectUri, "invalid_request");
    expect(plain.searchParams.get("error_description")).toMatch(/S256/);
    errorRedirect(await getAuthorize(origin, authQuery({ clientId, redirectUri, method: null })), redirectUri, "invalid_request");
    // The sign-in form with a plain-PKCE request is refused before the code is looked at: the code still works afterwards.
    const code = await enrollmentCode("person:pkce");
    errorRedirect(await postForm(origin, { action: "enroll", q: plainQuery, code }), redirectUri, "invalid_request");
    const good = authQuery({ clientId, redirectUri });
    const c = await enroll(good, code);
    expect(c.html).toContain("person:pkce");
  });

  it("a wrong code_verifier → invalid_grant, and nothing is issued", async () => {
    const c = await codeFor("person:verifier");
    refused(await redeem(c, { code_verifier: pkce().verifier }), "invalid_grant");
    refused(await redeem(c, { code_verifier: "" }), "invalid_request");
  });

  it("a reused authorization code: the second redemption → invalid_grant, and the library revokes its grant — the first redemption's refresh token is dead", async () => {
    const c = await codeFor("person:replay");
    const first = await redeem(c);
    expect(first.status, JSON.stringify(first.json)).toBe(200);
    expect(first.json.refresh_token).toBeTruthy();
    expect((await mcpWith(first.json.access_token)).status).toBe(200);
    refused(await redeem(c), "invalid_grant");
    refused(await tokenRequest({ grant_type: "refresh_token", refresh_token: first.json.refresh_token, client_id: c.clientId }), "invalid_grant");
  });

  // Was a bug (src/routes/oauth-token.ts): on a replayed code the library revokes only its own
  // grant record (refresh tokens); the Portcullis grant JWT handed out by the first redemption keeps
  // working at /mcp until it expires, since its jti never reaches the revocation list and no
  // grant.revoked is recorded (OAuth 2.1 §4.1.2: tokens issued from a replayed code SHOULD be revoked).
  it("a reused authorization code also ends the first redemption's access token (its grant's jti is revoked)", async () => {
    const c = await codeFor("person:replay2");
    const first = await redeem(c);
    expect(first.status).toBe(200);
    refused(await redeem(c), "invalid_grant");
    const after = await mcpWith(first.json.access_token);
    expect(after.status).toBe(401);
    expect(after.challenge).toContain("revoked");
  });

  it("redirect URIs: a different path or a different port of a registered https URI is refused with a 400 page, never a redirect; a loopback URI registered without a port is accepted on any port (RFC 8252 §7.3)", async () => {
    const clientId = await register(origin, ["https://client.example/cb", "http://127.0.0.1/cb"]);
    for (const redirectUri of [
      "https://client.example/other",
      "https://client.example:8443/cb",
      "https://client.example/cb/",
      "http://127.0.0.1/elsewhere",
      "http://localhost/cb",
    ]) {
      const plain = await renderedPage(await getAuthorize(origin, authQuery({ clientId, redirectUri })), 400, "invalid_request");
      expect(plain).toContain("Invalid redirect URI");
    }
    // Also through the sign-in form: the code is not used.
    const code = await enrollmentCode("person:redirects");
    await renderedPage(
      await postForm(origin, { action: "enroll", q: authQuery({ clientId, redirectUri: "https://client.example:8443/cb" }), code }),
      400,
      "Invalid redirect URI",
    );
    // The exact https URI and the loopback one on an arbitrary port are accepted...
    const exact = await getAuthorize(origin, authQuery({ clientId, redirectUri: "https://client.example/cb" }));
    expect(exact.status).toBe(200);
    await exact.body?.cancel();
    const loopback = "http://127.0.0.1:54321/cb";
    const shown = await getAuthorize(origin, authQuery({ clientId, redirectUri: loopback }));
    expect(await shown.text()).toContain("127.0.0.1");
    expect(shown.status).toBe(200);
    // ...and the loopback one carries the code back to that port, which the token endpoint redeems.
    const c = await enroll(authQuery({ clientId, redirectUri: loopback, challenge: pkce().challenge }), code);
    expect(c.html).toContain("person:redirects");
    const { verifier, challenge } = pkce();
    const landed = await authorizeFlow({ clientId, redirectUri: loopback, challenge }, "person:redirects2");
    expect(`${landed.origin}${landed.pathname}`).toBe(loopback);
    expect(landed.searchParams.get("code")).toBeTruthy();
    const t = await redeem({ code: landed.searchParams.get("code")!, verifier, clientId, redirectUri: loopback });
    expect(t.status, JSON.stringify(t.json)).toBe(200);
  });

  it("the `resource` of another gateway → invalid_target, in the authorization request (redirect to the client) and in the token request (code and refresh)", async () => {
    const redirectUri = "http://127.0.0.1:7/cb";
    const clientId = await register(origin, [redirectUri]);
    for (const resource of [`${otherOrigin}/mcp`, otherOrigin, "https://gateway.example/mcp"]) {
      errorRedirect(await getAuthorize(origin, authQuery({ clientId, redirectUri, resource })), redirectUri, "invalid_target");
    }
    const c = await codeFor("person:resource", { clientId, redirectUri });
    refused(await redeem(c, { resource: `${otherOrigin}/mcp` }), "invalid_target");
    const c2 = await codeFor("person:resource2", { clientId, redirectUri });
    const ok = await redeem(c2);
    expect(ok.status, JSON.stringify(ok.json)).toBe(200);
    refused(
      await tokenRequest({ grant_type: "refresh_token", refresh_token: ok.json.refresh_token, client_id: clientId, resource: `${otherOrigin}/mcp` }),
      "invalid_target",
    );
  });

  it("a grant for another gateway's audience → 401 invalid_token at /mcp with the reason; a token from this gateway's OAuth flow for <origin>/mcp works there", async () => {
    const foreign = await grantFor(jwk, otherOrigin, { sub: "agent:elsewhere", team: "connectors", roles: ["agent"], tools: TEMPLATE_TOOLS, ttlSeconds: 600 });
    const r = await mcpWith(foreign.token);
    expect(r.status).toBe(401);
    expect(r.challenge).toContain('error="invalid_token"');
    expect(r.challenge).toMatch(/error_description="[^"]*token (iss|aud) /);
    expect(r.challenge).toContain("resource_metadata=");
    // Only the audience differs: this gateway's issuer, another gateway's aud.
    const audOnly = await mintGrant(
      await parseKeySet(jwk),
      { iss: origin, aud: `${otherOrigin}/mcp`, sub: "agent:elsewhere", team: "connectors", roles: ["agent"], tools: TEMPLATE_TOOLS, ttlSeconds: 600 },
      { maxLifetimeSeconds: 3600 },
    );
    const r2 = await mcpWith(audOnly.token);
    expect(r2.status).toBe(401);
    expect(r2.challenge).toContain('error="invalid_token"');
    expect(r2.challenge).toMatch(/error_description="[^"]*token aud /);
    // Positive control.
    const c = await codeFor("person:audience");
    const t = await redeem(c);
    expect(t.status, JSON.stringify(t.json)).toBe(200);
    expect(jwtPart(t.json.access_token, 1).aud).toBe(mcpUrl);
    expect((await mcpWith(t.json.access_token)).status).toBe(200);
  });

  it('a refresh token used twice → invalid_grant; the family (the newer refresh token and its access token) is revoked and grant.revoked says "refresh token reuse"', async () => {
    const c = await codeFor("person:refresh");
    const t0 = await redeem(c);
    expect(t0.status, JSON.stringify(t0.json)).toBe(200);
    const t1 = await tokenRequest({ grant_type: "refresh_token", refresh_token: t0.json.refresh_token, client_id: c.clientId, resource: mcpUrl });
    expect(t1.status, JSON.stringify(t1.json)).toBe(200);
    expect(t1.json.refresh_token).not.toBe(t0.json.refresh_token);
    expect((await mcpWith(t1.json.access_token)).status).toBe(200);
    refused(await tokenRequest({ grant_type: "refresh_token", refresh_token: t0.json.refresh_token, client_id: c.clientId }), "invalid_grant");
    refused(await tokenRequest({ grant_type: "refresh_token", refresh_token: t1.json.refresh_token, client_id: c.clientId }), "invalid_grant");
    const after = await mcpWith(t1.json.access_token);
    expect(after.status).toBe(401);
    expect(after.challenge).toContain("revoked");
    const jti = jtiOf(t1.json.access_token);
    expect(jtiOf(t0.json.access_token)).toBe(jti);
    const revoked = await ledgerKinds(origin, admin, "grant.revoked", (e) => e.some((x: Any) => x.body.jti === jti));
    const rec = revoked.find((x: Any) => x.body.jti === jti);
    expect(rec, "a grant.revoked record for the family").toBeTruthy();
    expect(rec.body).toMatchObject({ reason: "refresh token reuse", client_id: c.clientId });
  });

  // Was a bug (src/routes/oauth-token.ts): reuse detection claims a refresh token (claimOnce) BEFORE
  // the library has accepted the request, so a refresh the library refuses (here invalid_target; also
  // "Client ID mismatch", or any other refusal) still counts as the token's one use: the client's correct
  // retry is then taken for reuse and the whole grant is revoked. Only a refresh that rotated the token
  // should make a second presentation "reuse".
  it("a refresh refused with invalid_target does not use up the refresh token: the corrected retry succeeds and the grant stays alive", async () => {
    const c = await codeFor("person:retry");
    const t = await redeem(c);
    expect(t.status, JSON.stringify(t.json)).toBe(200);
    refused(
      await tokenRequest({ grant_type: "refresh_token", refresh_token: t.json.refresh_token, client_id: c.clientId, resource: `${otherOrigin}/mcp` }),
      "invalid_target",
    );
    const retry = await tokenRequest({ grant_type: "refresh_token", refresh_token: t.json.refresh_token, client_id: c.clientId, resource: mcpUrl });
    expect(retry.status, JSON.stringify(retry.json)).toBe(200);
    expect((await mcpWith(t.json.access_token)).status).toBe(200);
  });

  // Was a bug (src/routes/oauth-token.ts): reuse detection keys on the whole string
  // but revokes by the `<userId>:<grantId>` prefix the string claims, without checking the secret part
  // first. That prefix is also the prefix of the grant's authorization code, which travels in the
  // redirect URL. Anyone who saw the code can present `<userId>:<grantId>:<any 32 chars>` twice: the
  // first is refused by the library, the second is "reuse", and the victim's grant is revoked.
  it("a forged refresh token (the code's userId:grantId prefix, a made-up secret) presented twice does not revoke the real grant", async () => {
    const c = await codeFor("person:forged");
    const t = await redeem(c);
    expect(t.status, JSON.stringify(t.json)).toBe(200);
    const [userId, grantId] = c.code.split(":");
    const forged = `${userId}:${grantId}:${"A".repeat(32)}`;
    refused(await tokenRequest({ grant_type: "refresh_token", refresh_token: forged, client_id: c.clientId }), "invalid_grant");
    refused(await tokenRequest({ grant_type: "refresh_token", refresh_token: forged, client_id: c.clientId }), "invalid_grant");
    expect((await mcpWith(t.json.access_token)).status).toBe(200);
    const real = await tokenRequest({ grant_type: "refresh_token", refresh_token: t.json.refresh_token, client_id: c.clientId, resource: mcpUrl });
    expect(real.status, JSON.stringify(real.json)).toBe(200);
  });

  // Was a bug (src/routes/oauth-token.ts): a revocation request whose token has
  // the refresh-token shape is mapped to its grant by the `<userId>:<grantId>` prefix alone, and the jti is
  // revoked whenever the library answers 200 — which RFC 7009 makes it do for a token it does not know or
  // that belongs to another client. One request from any registered client with a made-up secret (the
  // prefix is the authorization code's) revokes another client's grant.
  it("an RFC 7009 revocation of a forged refresh token, from another client, does not revoke the real grant", async () => {
    const c = await codeFor("person:revoke-forged");
    const t = await redeem(c);
    expect(t.status, JSON.stringify(t.json)).toBe(200);
    const attacker = await register(origin, ["http://127.0.0.1:9/cb"], "attacker");
    const [userId, grantId] = c.code.split(":");
    const r = await formPost(`${origin}/oauth/token`, {
      token: `${userId}:${grantId}:${"A".repeat(32)}`,
      token_type_hint: "refresh_token",
      client_id: attacker,
    });
    await r.body?.cancel();
    expect(r.status).toBe(200); // RFC 7009 §2.2: an invalid token is answered 200 too
    expect((await mcpWith(t.json.access_token)).status).toBe(200);
    const real = await tokenRequest({ grant_type: "refresh_token", refresh_token: t.json.refresh_token, client_id: c.clientId, resource: mcpUrl });
    expect(real.status, JSON.stringify(real.json)).toBe(200);
  });

  it("a client metadata document URL outside the egress rules → 400 page naming them, and nothing is fetched; with documents off → 400 saying they are not enabled", async () => {
    const q = (o: string, clientId: string) =>
      new URLSearchParams({
        response_type: "code",
        client_id: clientId,
        redirect_uri: "http://127.0.0.1:7/cb",
        state: "st-1",
        code_challenge: pkce().challenge,
        code_challenge_method: "S256",
        resource: `${o}/mcp`,
      }).toString();
    const evil = await renderedPage(await getAuthorize(origin2, q(origin2, "https://evil.example/client.json")), 400, "outside this gateway's egress rules");
    expect(evil).toContain("invalid_client");
    expect(evil).toContain("evil.example");
    // A document on loopback (which this gateway's egress rules do not allow): refused, and its server saw no request.
    const local = await renderedPage(await getAuthorize(origin2, q(origin2, docUrl)), 400, "outside this gateway's egress rules");
    expect(local).toContain("allow_loopback");
    // Through the sign-in form too.
    await renderedPage(await postForm(origin2, { action: "enroll", q: q(origin2, docUrl), code: "pce_unused" }), 400, "outside this gateway's egress rules");
    expect(docHits).toEqual([]);
    // The first gateway has documents off: refused before anything is fetched, saying so.
    const off = await renderedPage(
      await getAuthorize(origin, q(origin, "https://evil.example/client.json")),
      400,
      "client ID metadata documents are not enabled",
    );
    expect(off).toContain("client_metadata_documents");
    await renderedPage(await getAuthorize(origin, q(origin, docUrl)), 400, "not enabled");
    expect(docHits).toEqual([]);
  });

  it("Deny on the consent page → redirect to the client with error=access_denied, state and iss, and no code", async () => {
    const redirectUri = "http://127.0.0.1:7/cb";
    const clientId = await register(origin, [redirectUri]);
    const landed = await authorizeFlow({ clientId, redirectUri, state: "deny-state" }, "person:deny", "deny");
    expect(`${landed.origin}${landed.pathname}`).toBe(redirectUri);
    expect(landed.searchParams.get("error")).toBe("access_denied");
    expect(landed.searchParams.get("state")).toBe("deny-state");
    expect(landed.searchParams.get("iss")).toBe(origin);
    expect(landed.searchParams.get("code")).toBeNull();
  });

  it('an enrollment code used twice: the second sign-in shows "unknown, already used or expired" (400) and no consent form', async () => {
    const redirectUri = "http://127.0.0.1:7/cb";
    const clientId = await register(origin, [redirectUri]);
    const query = authQuery({ clientId, redirectUri });
    const code = await enrollmentCode("person:twice");
    await enroll(query, code);
    const again = await postForm(origin, { action: "enroll", q: query, code });
    expect(again.headers.getSetCookie().filter((c) => c.startsWith("__Host-oauth-consent-"))).toEqual([]);
    const html = await again.clone().text();
    expect(html).not.toContain('value="consent"');
    await renderedPage(again, 400, "unknown, already used or expired");
  });
});
