/**
 * OAuth upstreams end to end, on the production build: a real authorization server (oidc-provider,
 * test/fixtures/oauth-upstream-as.ts) in front of an SDK v2 MCP server that checks the token's
 * signature, audience (its own URL) and scope (test/fixtures/oauth-upstream.ts), and the gateway as
 * their OAuth client. An agent's call before connecting gets the connect URL and reaches nothing
 * (a legacy client that declares URL elicitation gets -32042, a modern one input_required); the
 * person connects in Chromium (console sign-in with the agent's grant, Connections, the
 * authorization server's login and consent, back); the identical call then runs with the person's
 * token; a second principal still gets the connect URL; the token is refreshed after expiry, once
 * for many concurrent calls; a refused refresh asks to connect again; disconnect revokes at the
 * server; a refused consent, a forged state and another browser's return are refused; every step
 * is a credential.* record; no token or grant reaches the gateway's output.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { consentInBrowser, type OAuthUpstream, startOAuthUpstream } from "../fixtures/oauth-upstream.ts";
import { browserRequired, hasChromium, launchChromium } from "./browser.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { closeSessions, grantFor, ledgerKinds, modern, sessionClient, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers of the gateway and the fixture
type Any = any;
const skip = !hasChromium && !browserRequired;
const TTL_S = 4;

let up: OAuthUpstream;
/** An upstream whose protected-resource metadata names an authorization server the egress rules refuse (a metadata address). */
let rogue: Server;
let gw: Proc & { url: string; logs: () => string };
let origin = "";
let browser: Browser;
const tokens: Record<string, string> = {};
let dir = "";
/** The session that was told to connect: it must work once the person connected. */
let firstSession: Awaited<ReturnType<typeof sessionClient>>;

beforeAll(async () => {
  if (skip) return;
  up = await startOAuthUpstream({ accessTokenTtlSeconds: TTL_S });
  rogue = createServer((req, res) => {
    const base = `http://127.0.0.1:${(rogue.address() as { port: number }).port}`;
    if (req.url?.startsWith("/.well-known/oauth-protected-resource")) {
      res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify({ resource: `${base}/mcp`, authorization_servers: ["http://169.254.169.254"] }));
      return;
    }
    res.writeHead(401, { "www-authenticate": `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"` }).end();
  });
  await new Promise<void>((r) => rogue.listen(0, "127.0.0.1", r));
  const jwk = JSON.stringify((await generateSigningKey("oauth-up-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  dir = mkdtempSync(join(tmpdir(), "portcullis-oauth-up-"));
  const config = `actor: local:e2e
auth:
  required: true
  audience: ${origin}
egress:
  allow_loopback: true
upstreams:
  - name: tracker
    url: ${up.mcpUrl}
    namespace: false
    auth: {type: oauth}
  - name: shared-tracker
    url: ${up.mcpUrl}
    auth: {type: oauth, connection: shared}
  - name: rogue
    url: http://127.0.0.1:${(rogue.address() as { port: number }).port}/mcp
    auth: {type: oauth}
`;
  gw = await startPortcullis(config, port, {
    PORTCULLIS_SIGNING_KEY: jwk,
    PORTCULLIS_CREDENTIALS_KEY: btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32)))),
  });
  for (const [who, roles, team] of [
    ["alice", ["agent"], "e2e"],
    ["bob", ["agent"], "e2e"],
    ["dan", ["agent"], "other"],
    ["ops", ["operator"], "e2e"],
    ["audit", ["auditor"], "e2e"],
  ] as const) {
    const human = who === "audit" || who === "ops";
    tokens[who] = (await grantFor(jwk, origin, { sub: `${human ? "human" : "agent"}:${who}`, team, roles: [...roles], tools: ["*"], ttlSeconds: 1800 })).token;
  }
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
}, 180_000);

afterAll(async () => {
  await closeSessions();
  await browser?.close().catch(() => undefined);
  await Promise.all([gw?.stop(), up?.close(), new Promise((r) => (rogue ? rogue.close(r) : r(undefined)))]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const ARTIFACTS = join(import.meta.dirname, "../../test-artifacts/console");
/** A full-page screenshot of what the person sees, kept with the console's others. */
const shot = (p: Page, name: string) => p.screenshot({ path: join(ARTIFACTS, `connections-${name}.png`), fullPage: true });

const connectUrl = () => `${origin}/console/connections?upstream=tracker`;
const mcp = () => `${origin}/mcp`;

/** A 2025-11-25 session by raw HTTP with the capabilities given (the SDK would answer elicitations itself). */
async function rawLegacy(bearer: string, capabilities: Any) {
  const post = async (body: Any, session?: string) => {
    const r = await fetch(mcp(), {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${bearer}`,
        ...(session ? { "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" } : {}),
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await r.text();
    const msgs = (r.headers.get("content-type") ?? "").includes("text/event-stream")
      ? text
          .split("\n")
          .filter((l) => l.startsWith("data:") && l.length > 6)
          .map((l) => JSON.parse(l.slice(5)))
      : [JSON.parse(text)];
    return { r, answer: msgs.find((m) => m.id === body.id) };
  };
  const init = await post({
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-11-25", capabilities, clientInfo: { name: "raw", version: "1" } },
  });
  const session = init.r.headers.get("mcp-session-id")!;
  await fetch(mcp(), {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${bearer}`,
      "mcp-session-id": session,
      "mcp-protocol-version": "2025-11-25",
    },
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
  });
  let id = 2;
  return {
    call: (name: string, args: Any = {}) =>
      post({ jsonrpc: "2.0", id: id++, method: "tools/call", params: { name, arguments: args } }, session).then((x) => x.answer),
  };
}

/** The person signs in to the console with `grant` in `page` (from the connect URL), connects tracker and consents as `login`. */
async function connectInBrowser(page: Page, grant: string, login: string): Promise<string> {
  await page.goto(connectUrl());
  expect(new URL(page.url()).pathname).toBe("/console/login");
  await page.fill("#token", grant);
  await Promise.all([page.waitForURL((u) => u.pathname === "/console/connections"), page.click('form.box button[type="submit"]')]);
  expect(new URL(page.url()).searchParams.get("upstream")).toBe("tracker");
  await shot(page, "before");
  await page.click('section[data-upstream="tracker"] button[type="submit"]');
  await page.waitForSelector("#continue");
  await shot(page, "continue");
  expect(await page.textContent("#continue")).toContain(new URL(up.issuer).host);
  await page.click("#continue");
  await consentInBrowser(page, { login });
  await page.waitForURL((u) => u.pathname === "/console/connections/callback");
  await shot(page, "connected");
  return (await page.textContent("main")) ?? "";
}

const ledger = (kind: string, want: (e: Any[]) => boolean) => ledgerKinds(origin, tokens.audit!, kind, want);
const authorizedBy = (sub: string) => up.requests.filter((r) => r.authorized && r.sub === sub).length;

describe.skipIf(skip)("an OAuth upstream", () => {
  let context: BrowserContext;
  let page: Page;

  it("before connecting: the agent is told where to connect, in each era's way, and nothing reaches the upstream", async () => {
    const alice = await sessionClient("oauth-alice", mcp(), tokens.alice);
    firstSession = alice;
    const r = await alice.callTool({ name: "whoami", arguments: {} });
    expect(r.isError).toBe(true);
    expect(texts(r)).toContain("you have not connected upstream tracker");
    expect(texts(r)).toContain(connectUrl());
    const legacy = await rawLegacy(tokens.alice!, { elicitation: { url: {} } });
    const elicit = await legacy.call("whoami");
    expect(elicit.error?.code).toBe(-32042);
    expect(elicit.error.data.elicitations[0]).toMatchObject({ mode: "url", url: connectUrl() });
    const irr = await modern(
      mcp(),
      tokens.alice!,
      "tools/call",
      { name: "whoami", arguments: {} },
      { meta: { "io.modelcontextprotocol/clientCapabilities": { elicitation: { url: {} } } } },
    );
    expect(irr.result?.resultType).toBe("input_required");
    expect(irr.result.inputRequests["portcullis/connect"]).toMatchObject({ method: "elicitation/create", params: { mode: "url", url: connectUrl() } });
    const plainModern = await modern(mcp(), tokens.alice!, "tools/call", { name: "whoami", arguments: {} });
    expect(plainModern.result?.isError).toBe(true);
    expect(up.requests).toEqual([]);
  });

  it("the person connects in Chromium; the identical call then runs with the person's token; another principal is still asked to connect", async () => {
    context = await browser.newContext();
    page = await context.newPage();
    const landed = await connectInBrowser(page, tokens.alice!, "alice");
    expect(landed).toContain("Connected tracker");
    const alice = await sessionClient("oauth-alice-2", mcp(), tokens.alice);
    const r = await alice.callTool({ name: "whoami", arguments: {} });
    expect(r.isError, texts(r)).toBeFalsy();
    expect(texts(r)).toContain("sub=alice");
    expect(texts(r)).toContain("mcp:tools");
    // The modern era's call, with the client's answer to the gateway's input request: it is not forwarded.
    const again = await modern(mcp(), tokens.alice!, "tools/call", {
      name: "echo",
      arguments: { message: "hi" },
      inputResponses: { "portcullis/connect": { action: "accept" } },
    });
    expect(JSON.stringify(again.result?.content)).toContain("hi");
    // The session that was told to connect before now works too (its leg opens on first use).
    expect(texts(await firstSession.callTool({ name: "whoami", arguments: {} }))).toContain("sub=alice");
    const bob = await sessionClient("oauth-bob", mcp(), tokens.bob);
    const refusedBob = await bob.callTool({ name: "whoami", arguments: {} });
    expect(refusedBob.isError).toBe(true);
    expect(texts(refusedBob)).toContain(connectUrl());
    // Without a token, the upstream only ever saw the discovery probe (an initialize) of connecting.
    expect(up.requests.filter((q) => !q.authorized).every((q) => q.rpc.join() === "initialize")).toBe(true);
    expect(up.requests.filter((q) => q.rpc.includes("tools/call")).every((q) => q.authorized && q.sub === "alice")).toBe(true);
    expect(up.requests.some((q) => q.sub === "bob")).toBe(false);
    const clients = await up.clients();
    expect(clients).toHaveLength(1);
    expect(clients[0]!.redirectUris).toEqual([`${origin}/console/connections/callback`]);
    const connected = await ledger("credential.connected", (e) => e.length >= 1);
    expect(connected[0]!.body).toMatchObject({
      owner: "principal:agent:alice",
      principal: "agent:alice",
      upstream: "tracker",
      authorization_server: up.issuer,
    });
    expect(JSON.stringify(connected)).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\./);
  });

  it("refreshes an expired token once for many concurrent calls, and records it coalesced", async () => {
    await new Promise((r) => setTimeout(r, TTL_S * 1000 + 500));
    const refreshesBefore = up.tokenRequests.filter((t) => t.grantType === "refresh_token").length;
    // Six 2026-07-28 requests at once, each its own request to the gateway: all meet the expired token together.
    const results = await Promise.all(Array.from({ length: 6 }, () => modern(mcp(), tokens.alice!, "tools/call", { name: "whoami", arguments: {} })));
    for (const r of results) expect(JSON.stringify(r.result?.content)).toContain("sub=alice");
    const refreshes = up.tokenRequests.filter((t) => t.grantType === "refresh_token").slice(refreshesBefore);
    expect(refreshes).toEqual([{ grantType: "refresh_token", ok: true }]);
    const rec = await ledger("credential.refreshed", (e) => e.length >= 1);
    expect(rec[0]!.body).toMatchObject({ upstream: "tracker", refreshes: 1 });
  });

  it("a refused refresh drops the connection and asks to connect again; the Connections page says so", async () => {
    await up.revokeGrantsOf("alice");
    await new Promise((r) => setTimeout(r, TTL_S * 1000 + 500));
    const before = authorizedBy("alice");
    const alice = await sessionClient("oauth-alice-4", mcp(), tokens.alice);
    const r = await alice.callTool({ name: "whoami", arguments: {} });
    expect(r.isError).toBe(true);
    // The session's first request (its initialize) met the expired token: its refresh was refused and the connection dropped.
    expect(texts(r)).toContain(connectUrl());
    expect(authorizedBy("alice")).toBe(before);
    const refused = await ledger("credential.refused", (e) => e.some((x) => x.body.reason?.startsWith("refresh refused")));
    expect(refused.find((x) => x.body.reason.startsWith("refresh refused"))!.body.reason).toContain("invalid_grant");
    await page.goto(`${origin}/console/connections`);
    expect(await page.getAttribute('section[data-upstream="tracker"]', "data-connected")).toBe("no");
    await shot(page, "refused-refresh");
  });

  it("reconnects, then disconnect revokes at the authorization server and deletes the tokens", async () => {
    await page.goto(`${origin}/console/connections`);
    await page.click('section[data-upstream="tracker"] button[type="submit"]');
    await page.click("#continue");
    await consentInBrowser(page, { login: "alice" });
    await page.waitForURL((u) => u.pathname === "/console/connections/callback");
    const alice = await sessionClient("oauth-alice-5", mcp(), tokens.alice);
    expect(texts(await alice.callTool({ name: "whoami", arguments: {} }))).toContain("sub=alice");
    await page.goto(`${origin}/console/connections`);
    const revocationsBefore = up.revocations.length;
    await Promise.all([page.waitForURL((u) => u.searchParams.get("changed") === "disconnected"), page.click('section[data-upstream="tracker"] button.danger')]);
    expect(await page.getAttribute('section[data-upstream="tracker"]', "data-connected")).toBe("no");
    expect(up.revocations.slice(revocationsBefore).some((x) => x.ok)).toBe(true);
    const revoked = await ledger("credential.revoked", (e) => e.length >= 1);
    expect(revoked[0]!.body).toMatchObject({ upstream: "tracker", reason: "disconnected", revoked_upstream: true });
    const after = await alice.callTool({ name: "whoami", arguments: {} });
    expect(texts(after)).toContain(connectUrl());
  });

  it("refuses a refused consent, a forged state, and a return in a browser that did not start the attempt — keeping nothing", async () => {
    // Consent refused at the authorization server: the page says so, and it is recorded.
    await page.goto(`${origin}/console/connections`);
    await page.click('section[data-upstream="tracker"] button[type="submit"]');
    await page.click("#continue");
    await consentInBrowser(page, { login: "alice", refuse: true });
    await page.waitForURL((u) => u.pathname === "/console/connections/callback");
    expect(await page.textContent("main")).toContain("consent was refused");
    await ledger("credential.refused", (e) => e.some((x) => x.body.reason === "consent: access_denied"));
    // A state the gateway never issued.
    const forged = await fetch(`${origin}/console/connections/callback?state=${"A".repeat(43)}&code=x`);
    expect(forged.status).toBe(400);
    expect(await forged.text()).toContain("unknown, already used or expired");
    // Started in one browser, returned in another: the other browser has no connect cookie.
    await page.goto(`${origin}/console/connections`);
    await page.click('section[data-upstream="tracker"] button[type="submit"]');
    const authorize = (await page.getAttribute("#continue", "href"))!;
    const other = await browser.newContext();
    const stranger = await other.newPage();
    await stranger.goto(authorize);
    await consentInBrowser(stranger, { login: "mallory" });
    await stranger.waitForURL((u) => u.pathname === "/console/connections/callback");
    expect(await stranger.textContent("main")).toContain("started in another browser");
    await other.close();
    const alice = await sessionClient("oauth-alice-6", mcp(), tokens.alice);
    expect(texts(await alice.callTool({ name: "whoami", arguments: {} }))).toContain(connectUrl());
    expect(up.requests.some((q) => q.sub === "mallory")).toBe(false);
  });

  it("a shared connection is made by an operator and used by every principal of that team, and by no other team", async () => {
    const bob = await sessionClient("oauth-bob-shared", mcp(), tokens.bob);
    const before = await bob.callTool({ name: "shared-tracker__whoami", arguments: {} });
    expect(texts(before)).toContain("team e2e has not connected upstream shared-tracker");
    expect(texts(before)).toContain("an operator of your team connects it");
    // An agent sees the shared upstream in Connections but cannot connect it.
    const agentCtx = await browser.newContext();
    const agentPage = await agentCtx.newPage();
    await agentPage.goto(`${origin}/console/login?next=${encodeURIComponent("/console/connections")}`);
    await agentPage.fill("#token", tokens.bob!);
    await Promise.all([agentPage.waitForURL((u) => u.pathname === "/console/connections"), agentPage.click('form.box button[type="submit"]')]);
    expect(await agentPage.textContent('section[data-upstream="shared-tracker"]')).toContain("An operator or admin of your team connects");
    expect(await agentPage.$('section[data-upstream="shared-tracker"] button')).toBeNull();
    // Nor open the other pages: an agent grant is for Connections alone.
    await agentPage.goto(`${origin}/console/ledger`);
    expect(await agentPage.textContent("main")).toContain("signs in only to connect its OAuth upstreams");
    await agentCtx.close();
    // The operator connects it for the team.
    const opsCtx = await browser.newContext();
    const opsPage = await opsCtx.newPage();
    await opsPage.goto(`${origin}/console/login?next=${encodeURIComponent("/console/connections")}`);
    await opsPage.fill("#token", tokens.ops!);
    await Promise.all([opsPage.waitForURL((u) => u.pathname === "/console/connections"), opsPage.click('form.box button[type="submit"]')]);
    await opsPage.click('section[data-upstream="shared-tracker"] button[type="submit"]');
    await opsPage.click("#continue");
    await consentInBrowser(opsPage, { login: "team-e2e" });
    await opsPage.waitForURL((u) => u.pathname === "/console/connections/callback");
    expect(await opsPage.textContent("main")).toContain("Connected shared-tracker");
    await opsCtx.close();
    expect(texts(await bob.callTool({ name: "shared-tracker__whoami", arguments: {} }))).toContain("sub=team-e2e");
    const alice = await sessionClient("oauth-alice-shared", mcp(), tokens.alice);
    expect(texts(await alice.callTool({ name: "shared-tracker__whoami", arguments: {} }))).toContain("sub=team-e2e");
    const dan = await sessionClient("oauth-dan", mcp(), tokens.dan);
    expect(texts(await dan.callTool({ name: "shared-tracker__whoami", arguments: {} }))).toContain("team other has not connected upstream shared-tracker");
    const rec = await ledger("credential.connected", (e) => e.some((x) => x.body.owner === "team:e2e"));
    expect(rec.find((x) => x.body.owner === "team:e2e")!.body).toMatchObject({ principal: "human:ops", upstream: "shared-tracker" });
  });

  it("an authorization server outside the egress rules is refused with a reason, and nothing is kept", async () => {
    await page.goto(`${origin}/console/connections`);
    await page.click('section[data-upstream="rogue"] button[type="submit"]');
    const text = (await page.textContent("main")) ?? "";
    expect(text).toContain("upstream rogue cannot be connected");
    expect(text).toMatch(/could not be reached \(.*(metadata|not allowed|refused).*\)/i);
    await page.goto(`${origin}/console/connections`);
    expect(await page.getAttribute('section[data-upstream="rogue"]', "data-connected")).toBe("no");
  });

  it("printed no token, code or grant", async () => {
    await context?.close();
    const logs = gw.logs();
    expect(logs).not.toMatch(/eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\./);
    for (const t of Object.values(tokens)) expect(logs).not.toContain(t.slice(-30));
  });
});
