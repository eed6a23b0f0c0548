/**
 * [H] The approver web console in a real browser: playwright-core driving Debian's chromium
 * (headless, --no-sandbox) against a gateway on the production build (wrangler dev, workerd) with
 * `auth.required: true`, a `require_approval` rule on one tool of a recording upstream (its
 * request log proves what ran) and Cloudflare Access configured against a loopback key server.
 * Shows: the agent's call is held (isError naming the hold and its console page); the approver
 * signs in by pasting a grant (the `__Host-` cookie survives on loopback), sees the hold, opens
 * it; arguments containing `</script><img src=x onerror=alert(1)>` render as text (no img
 * element, no dialog); a double-click approves exactly once (one approver, one `hold.approved`
 * record, the identical second POST answered 409 calmly); the agent's retry succeeds and the
 * upstream saw one call; self-approval → 403 with the buttons disabled; a cross-origin POST →
 * 403; an Access JWT signs in without a cookie. Screenshots go to test-artifacts/console/.
 * Skipped, saying so, only when /usr/bin/chromium is absent and no browser is required (browser.ts). Owns the browser, gateway and
 * servers it starts. Must never: leave them running, or reach beyond loopback.
 */
import { mkdirSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { LONG_TOOL, startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";
import { connect, grantFor, ledgerKinds, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;
type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;

if (skipBrowser) console.warn(`console.test.ts: skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const ARTIFACTS = join(root, "test-artifacts/console");
const HOSTILE = "</script><img src=x onerror=alert(1)>";
const ACCESS_TEAM = "https://acme.cloudflareaccess.com";
const ACCESS_AUD = "a".repeat(64);

let jwk = "";
let rec: Upstream;
let other: Upstream;
let gw: Proc & { url: string };
let origin = "";
let browser: Browser;
let keyServer: Server;
let accessKey: Awaited<ReturnType<typeof generateKeyPair>>;
const dialogs: string[] = [];
const shots: string[] = [];

const config = (upstreamUrl: string, otherUrl: string, certsUrl: string) => `
actor: local:console
auth:
  required: true
  access:
    team_domain: ${ACCESS_TEAM}
    audience: "${ACCESS_AUD}"
    certs_url: ${certsUrl}
    roles: [approver]
    team: ops
    sub_prefix: "access:"
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
upstreams:
  - name: rec
    url: ${upstreamUrl}
    timeout: 30s
  - name: other
    url: ${otherUrl}
    timeout: 30s
mappings:
  rec:
    tools:
      ${LONG_TOOL}: { effect: reversible }
      bump: { effect: idempotent }
policy:
  rules:
    - id: attestations-need-a-human
      match: { tool: "rec__record_*" }
      decision: require_approval
      reason: attestations are signed off by a person
`;

const grant = (sub: string, roles: Role[]): Promise<{ token: string; jti: string }> =>
  grantFor(jwk, origin, { sub, team: "ops", roles, tools: ["*"], ttlSeconds: 900 });

const str = (t: string | null): string => t ?? "";
const upstreamCalls = () => rec.log.filter((s) => s.method === "tools/call" && s.name === LONG_TOOL).length;

const agentClient = (token: string): Promise<{ client: Client; close(): Promise<void> }> => connect("console-e2e-agent", gw.url, token);

async function shot(page: Page, name: string): Promise<void> {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  shots.push(path);
}

/** The hold a held call's isError answer names, and the console page it points at. */
function heldAs(r: Any): { id: string; url: string } {
  expect(r?.isError, JSON.stringify(r)).toBe(true);
  const t = texts(r);
  const id = /held as (\S+~[0-9a-f]{24})/.exec(t)?.[1];
  const url = /(http:\/\/\S+\/console\/holds\/\S+?)(?=[\s.,;)]*(\s|$))/.exec(t)?.[1];
  expect(id, t).toBeTruthy();
  expect(url, t).toBe(`${origin}/console/holds/${encodeURIComponent(id!)}`);
  return { id: id!, url: url! };
}

/** A console form POST from Node (not a browser): the given cookie, fields and Origin. */
async function postForm(path: string, cookie: string, fields: Record<string, string>, from: string | null = origin): Promise<{ status: number; text: string }> {
  const r = await fetch(`${origin}${path}`, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie: `__Host-portcullis=${cookie}`, ...(from ? { origin: from } : {}) },
    body: new URLSearchParams(fields).toString(),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: r.status, text: await r.text() };
}

/** Signs a browser page in by pasting `token` into the login form. */
async function signIn(page: Page, base: string, token: string): Promise<void> {
  await page.goto(`${base}/console`);
  expect(new URL(page.url()).pathname).toBe("/console/login");
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(`${base}/console`), page.click('form.box button[type="submit"]')]);
}

/** The team's ledger entries of `kind` (D1 is filled by the LedgerDO's flush: poll, bounded). */
const ledger = (auditor: string, kind: string, want: (e: Any[]) => boolean): Promise<Any[]> => ledgerKinds(origin, auditor, kind, want);

describe.skipIf(skipBrowser)("the approver console in Chromium", () => {
  let agent: { token: string; jti: string };
  let approver: { token: string; jti: string };
  let held: { id: string; url: string };
  let page: Page;
  let cookie = "";
  let csrf = "";

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    jwk = JSON.stringify((await generateSigningKey("console-e2e")).privateJwk);
    accessKey = await generateKeyPair("RS256", { extractable: true });
    const jwks = { keys: [{ ...(await exportJWK(accessKey.publicKey)), kid: "access-1", alg: "RS256", use: "sig" }] };
    keyServer = createServer((req, res) => {
      res.writeHead(req.url === "/cdn-cgi/access/certs" ? 200 : 404, { "content-type": "application/json" });
      res.end(JSON.stringify(req.url === "/cdn-cgi/access/certs" ? jwks : {}));
    });
    await new Promise<void>((r) => keyServer.listen(0, "127.0.0.1", r));
    const keyPort = (keyServer.address() as { port: number }).port;
    rec = await startModernOnlyUpstream({ longTool: true });
    other = await startModernOnlyUpstream();
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    gw = await startPortcullis(config(rec.url, other.url, `http://127.0.0.1:${keyPort}/cdn-cgi/access/certs`), port, { PORTCULLIS_SIGNING_KEY: jwk });
    browser = await launchChromium();
    agent = await grant("agent:attester", ["agent"]);
    approver = await grant("human:approver", ["approver", "auditor"]);
  }, 240_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await gw?.stop();
    await rec?.close();
    await other?.close();
    await new Promise((r) => (keyServer ? keyServer.close(r) : r(undefined)));
    if (shots.length) console.log(`console.test.ts: screenshots:\n  ${shots.join("\n  ")}`);
  });

  it("the agent's call is held: isError naming the hold id and its console page; nothing reached the upstream", async () => {
    const a = await agentClient(agent.token);
    try {
      const tools = await a.client.listTools();
      const name = tools.tools.find((t) => t.name.startsWith("rec__record_"))?.name;
      expect(name).toBeTruthy();
      held = heldAs(await a.client.callTool({ name: name!, arguments: { quarter: `Q4 ${HOSTILE}` } }));
    } finally {
      await a.close();
    }
    expect(upstreamCalls()).toBe(0);
  });

  it("the approver signs in by pasting a grant, sees the hold, and its hostile arguments render as text", async () => {
    const context = await browser.newContext();
    page = await context.newPage();
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await page.goto(`${origin}/console`);
    expect(new URL(page.url()).pathname).toBe("/console/login");
    await shot(page, "01-login");
    await page.fill("#token", approver.token);
    const [signedIn] = await Promise.all([page.waitForURL(`${origin}/console`), page.click('form.box button[type="submit"]')]);
    void signedIn;
    // Chromium keeps the __Host-/Secure cookie on http://127.0.0.1 (loopback counts as a secure context).
    const jar = await context.cookies(origin);
    const c = jar.find((k) => k.name === "__Host-portcullis");
    expect(c, JSON.stringify(jar.map((k) => k.name))).toBeTruthy();
    expect(c).toMatchObject({ httpOnly: true, secure: true, sameSite: "Strict", path: "/" });
    cookie = c!.value;
    expect(page.url()).not.toContain(approver.token);
    expect(await page.content()).not.toContain(approver.token);
    // The pending list shows the hold with its requester and rule.
    const row = page.locator("table.holds tbody tr", { has: page.locator(`a[href="/console/holds/${encodeURIComponent(held.id)}"]`) });
    await expect.poll(() => row.count()).toBe(1);
    const rowText = await row.textContent().then(str);
    expect(rowText).toContain("agent:attester");
    expect(rowText).toContain("attestations-need-a-human");
    expect(rowText).toContain("attestations are signed off by a person");
    expect(rowText).toContain("pending");
    // The arguments, previewed in the list (escaped text, like everything else).
    expect(await row.locator("code.args").textContent().then(str)).toContain(`"quarter":"Q4 ${HOSTILE}`.slice(0, 60));
    await shot(page, "02-pending-holds");
    // Open it (through the link the agent was given).
    const response = await page.goto(held.url);
    const csp = response!.headers()["content-security-policy"] ?? "";
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).not.toMatch(/script-src|unsafe-inline/);
    expect(response!.headers()["x-frame-options"]).toBe("DENY");
    const action = await page.locator("#action").textContent().then(str);
    expect(action).toContain(HOSTILE);
    expect(JSON.parse(action)).toMatchObject({ principal: "agent:attester", upstream: "rec", tool: LONG_TOOL, arguments: { quarter: `Q4 ${HOSTILE}` } });
    expect(await page.locator("#action-hash").textContent().then(str)).toMatch(/^[0-9a-f]{64}$/);
    expect(await page.locator("img").count()).toBe(0);
    expect(await page.locator("script").count()).toBe(0);
    expect(dialogs).toEqual([]);
    csrf = await page.locator('form.resolve input[name="csrf"]').inputValue();
    await shot(page, "03-hold-detail");
  });

  it("a double-click approves exactly once; the identical second POST is answered 409, calmly", async () => {
    const statuses: number[] = [];
    const failed: string[] = [];
    let sent = 0;
    page.on("request", (r) => {
      if (r.method() === "POST" && r.url().endsWith("/resolve")) sent++;
    });
    page.on("response", (r) => {
      if (r.request().method() === "POST" && r.url().endsWith("/resolve")) statuses.push(r.status());
    });
    page.on("requestfailed", (r) => {
      if (r.method() === "POST" && r.url().endsWith("/resolve")) failed.push(r.failure()?.errorText ?? "failed");
    });
    await page.fill("#reason", "checked the quarter");
    await page.dblclick('button[value="approve"]');
    await expect.poll(() => statuses.length, { timeout: 30_000 }).toBeGreaterThanOrEqual(1);
    await page.waitForLoadState("load");
    await new Promise((r) => setTimeout(r, 1000));
    console.log(
      `console.test.ts: double-click → ${sent} resolve POST(s) sent by the browser, answered ${JSON.stringify(statuses)}${failed.length ? `, cancelled by the browser: ${JSON.stringify(failed)}` : ""}`,
    );
    // Chromium sends one or two POSTs (a second submission aborts the first navigation, whose
    // request may already be at the server). Whatever it sent: at most one 303, the rest 409, and
    // the page it shows says the hold is approved — the 409 page calmly, with "Nothing changed".
    expect(sent).toBeGreaterThanOrEqual(1);
    expect(statuses.length + failed.length).toBe(sent);
    expect(statuses.filter((s) => s === 303).length).toBeLessThanOrEqual(1);
    expect(statuses.every((s) => s === 303 || s === 409)).toBe(true);
    expect(await page.locator("#outcome").textContent().then(str)).toMatch(/^approved by human:approver/);
    if (statuses.at(-1) === 409) expect(await page.locator(".notice").first().textContent().then(str)).toMatch(/^Nothing changed: /);
    await shot(page, "04-after-double-click");
    // The same POST once more, byte for byte what the form sends: 409, a calm page, no second approval.
    const hash = await page.locator("#action-hash").textContent().then(str);
    const again = await postForm(`/console/holds/${encodeURIComponent(held.id)}/resolve`, cookie, {
      csrf,
      action_hash: hash,
      reason: "checked the quarter",
      decision: "approve",
    });
    expect(again.status).toBe(409);
    expect(again.text).toContain("Nothing changed");
    expect(again.text).toMatch(/approved by human:approver/);
    expect(again.text).not.toMatch(/<img/);
    // The detail page says who approved, from the record.
    await page.goto(held.url);
    expect(await page.locator("#outcome").textContent().then(str)).toMatch(/^approved by human:approver at .*: checked the quarter/);
    // Decided: no decision form is left, and no warning that it cannot be decided.
    expect(await page.locator('button[value="approve"]').count()).toBe(0);
    expect(await page.locator("#not-resolvable").count()).toBe(0);
    await shot(page, "05-approved");
    // One approval on the hold and on the ledger.
    const view = (await (
      await fetch(`${origin}/v1/holds/${encodeURIComponent(held.id)}`, { headers: { authorization: `Bearer ${approver.token}` } })
    ).json()) as Any;
    expect(view.hold).toMatchObject({ state: "approved", approver: "human:approver", resolveReason: "checked the quarter" });
    const approvals = await ledger(approver.token, "hold.approved", (e) => e.some((x) => x.body?.hold_id === held.id));
    await new Promise((r) => setTimeout(r, 1500));
    const settled = await ledger(approver.token, "hold.approved", () => true);
    expect(approvals.filter((x) => x.body?.hold_id === held.id)).toHaveLength(1);
    expect(settled.filter((x) => x.body?.hold_id === held.id)).toHaveLength(1);
  });

  it("the agent's identical retry succeeds and the upstream saw exactly one call", async () => {
    const a = await agentClient(agent.token);
    try {
      const name = (await a.client.listTools()).tools.find((t) => t.name.startsWith("rec__record_"))!.name;
      const r = await a.client.callTool({ name, arguments: { quarter: `Q4 ${HOSTILE}` } });
      expect(r.isError, JSON.stringify(r)).not.toBe(true);
      expect(texts(r)).toContain("attested");
      expect(upstreamCalls()).toBe(1);
      // Once more: the recorded answer, not a second run.
      const replay = await a.client.callTool({ name, arguments: { quarter: `Q4 ${HOSTILE}` } });
      expect(replay.isError, JSON.stringify(replay)).not.toBe(true);
      expect(upstreamCalls()).toBe(1);
    } finally {
      await a.close();
    }
    await page.goto(held.url);
    expect(await page.locator("#outcome").textContent().then(str)).toMatch(/approved by human:approver .*the call ran once at \S+: it succeeded$/);
    await shot(page, "06-consumed");
  });

  it("the ledger page shows the team's records and one call's trace", async () => {
    await page.goto(`${origin}/console/ledger?kind=hold.approved`);
    const link = page.locator("table.ledger a").first();
    await expect.poll(() => link.count()).toBe(1);
    await shot(page, "07-ledger");
    await Promise.all([page.waitForURL(/\/console\/ledger\/[^?]+$/), link.click()]);
    expect(await page.locator("h2").count()).toBeGreaterThanOrEqual(1);
    expect(await page.locator("img").count()).toBe(0);
    await shot(page, "08-trace");
    // An outcome row names its call's tool and principal (its decision's, as the store indexed them), never "—".
    const outcomeRow = page.locator("table.ledger tbody tr").first();
    // The page reads the shared store, which the ledger fills within a few seconds.
    for (let i = 0; i < 30; i++) {
      await page.goto(`${origin}/console/ledger?kind=outcome`);
      if ((await outcomeRow.count()) === 1) break;
      await new Promise((r) => setTimeout(r, 500));
    }
    expect(await outcomeRow.count()).toBe(1);
    const cellsOf = await outcomeRow.locator("td").allTextContents();
    expect(cellsOf[1]).toBe("outcome");
    expect(cellsOf[2]).toMatch(/^record_quarterly_/);
    expect(cellsOf[3]).toBe("agent:attester");
    await page.goto(`${origin}/console/killswitch`);
    expect(await page.locator("#ks-status").textContent().then(str)).toMatch(/version \d+/);
    await page.goto(`${origin}/console/tools`);
    const toolsTable = await page.locator("table.tools").textContent().then(str);
    expect(toolsTable).toContain("rec / bump");
    // Beside the classification, what the policy makes of each tool.
    expect(toolsTable).toContain("Policy");
    expect(toolsTable).toMatch(/(allow|deny|require_approval) \((rule [\w.:-]+|the baseline: no rule decides it)\)/);
    await shot(page, "09-tools");
  });

  it("self-approval: the requester's own approver grant sees disabled buttons and its POST gets 403", async () => {
    const a = await agentClient(agent.token);
    let second: { id: string; url: string };
    try {
      const name = (await a.client.listTools()).tools.find((t) => t.name.startsWith("rec__record_"))!.name;
      second = heldAs(await a.client.callTool({ name, arguments: { quarter: "Q1 next year" } }));
    } finally {
      await a.close();
    }
    const self = await grant("agent:attester", ["approver"]);
    // Another browser context, at the localhost spelling of the same gateway this time.
    const base = origin.replace("127.0.0.1", "localhost");
    const context = await browser.newContext();
    const p = await context.newPage();
    await signIn(p, base, self.token);
    await p.goto(`${base}/console/holds/${encodeURIComponent(second.id)}`);
    expect(await p.locator('button[value="approve"]').isDisabled()).toBe(true);
    expect(await p.locator("#not-resolvable").textContent().then(str)).toMatch(/cannot approve/);
    await shot(p, "10-self-approval-disabled");
    const selfCookie = (await context.cookies(base)).find((k) => k.name === "__Host-portcullis")!.value;
    const selfCsrf = await p.locator('form.resolve input[name="csrf"]').inputValue();
    const hash = await p.locator("#action-hash").textContent().then(str);
    const r = await postForm(`/console/holds/${encodeURIComponent(second.id)}/resolve`, selfCookie, {
      csrf: selfCsrf,
      action_hash: hash,
      reason: "mine",
      decision: "approve",
    });
    expect(r.status).toBe(403);
    const view = (await (
      await fetch(`${origin}/v1/holds/${encodeURIComponent(second.id)}`, { headers: { authorization: `Bearer ${approver.token}` } })
    ).json()) as Any;
    expect(view.hold.state).toBe("pending");
    await context.close();
  });

  it("a cross-origin POST is refused with 403, and so is a POST without the session's CSRF token", async () => {
    const fresh = await (async () => {
      const a = await agentClient(agent.token);
      try {
        const name = (await a.client.listTools()).tools.find((t) => t.name.startsWith("rec__record_"))!.name;
        return heldAs(await a.client.callTool({ name, arguments: { quarter: "Q2 cross-origin" } }));
      } finally {
        await a.close();
      }
    })();
    await page.goto(fresh.url);
    const hash = await page.locator("#action-hash").textContent().then(str);
    const fields = { csrf, action_hash: hash, reason: "forged", decision: "approve" };
    const path = `/console/holds/${encodeURIComponent(fresh.id)}/resolve`;
    expect((await postForm(path, cookie, fields, "http://evil.example")).status).toBe(403);
    expect((await postForm(path, cookie, fields, "http://127.0.0.1:1")).status).toBe(403);
    expect((await postForm(path, cookie, fields, null)).status).toBe(403);
    expect((await postForm(path, cookie, { ...fields, csrf: "" })).status).toBe(403);
    const view = (await (
      await fetch(`${origin}/v1/holds/${encodeURIComponent(fresh.id)}`, { headers: { authorization: `Bearer ${approver.token}` } })
    ).json()) as Any;
    expect(view.hold.state).toBe("pending");
  });

  it("a rejection without a reason keeps the form, says why inline and rejects nothing; with a reason it rejects", async () => {
    const pending = await (async () => {
      const a = await agentClient(agent.token);
      try {
        const name = (await a.client.listTools()).tools.find((t) => t.name.startsWith("rec__record_"))!.name;
        return heldAs(await a.client.callTool({ name, arguments: { quarter: "Q3 needs a reason" } }));
      } finally {
        await a.close();
      }
    })();
    await page.goto(pending.url);
    await Promise.all([page.waitForLoadState("load"), page.click('button[value="reject"]')]);
    expect(new URL(page.url()).pathname).toBe(`/console/holds/${encodeURIComponent(pending.id)}/resolve`);
    expect(await page.locator('.notice.error[role="alert"]').textContent().then(str)).toMatch(/Not rejected: a rejection needs a reason/);
    expect(await page.locator('button[value="reject"]').isDisabled()).toBe(false);
    await shot(page, "11-reject-needs-a-reason");
    await page.fill("#reason", "wrong quarter");
    await Promise.all([page.waitForURL(pending.url), page.click('button[value="reject"]')]);
    expect(await page.locator("#outcome").textContent().then(str)).toMatch(/^rejected by human:approver at .*: wrong quarter/);
    expect(await page.locator("#not-resolvable").count()).toBe(0);
  });

  it("a Cloudflare Access JWT signs an approver in without a cookie; a foreign one does not", async () => {
    const sign = (aud: string) =>
      new SignJWT({ email: "alice@example.com", type: "app" })
        .setProtectedHeader({ alg: "RS256", kid: "access-1" })
        .setIssuer(ACCESS_TEAM)
        .setAudience(aud)
        .setSubject("u-1")
        .setIssuedAt()
        .setExpirationTime("10m")
        .sign(accessKey.privateKey);
    const ok = await fetch(`${origin}/console`, { redirect: "manual", headers: { "cf-access-jwt-assertion": await sign(ACCESS_AUD) } });
    expect(ok.status).toBe(200);
    const text = await ok.text();
    expect(text).toContain("access:alice@example.com");
    expect(text).toContain("Cloudflare Access");
    const foreign = await fetch(`${origin}/console`, { redirect: "manual", headers: { "cf-access-jwt-assertion": await sign("b".repeat(64)) } });
    expect(foreign.status).toBe(303);
    expect(foreign.headers.get("location")).toBe("/console/login");
  });
});
