/**
 * The console's overview and its self-updating holds list in Chromium, on the production build:
 * after allowed, refused and held calls, the overview draws its charts (bars per minute by
 * decision, the top tools, the error rate per upstream) and its tiles (held calls waiting, the
 * kill switch), and fits a phone's width; the pending holds list, left open, shows a hold created
 * meanwhile and drops one resolved meanwhile, with no reload by the person (the page refreshes
 * itself: the console allows no script); the Tools page shows an approver the tools whose holds it
 * may decide; a notification's signed approve link asks for sign-in, proposes that decision for
 * that exact hold, is told apart when altered, and decides nothing until the person confirms.
 * Screenshots in test-artifacts/console/overview-*.png.
 * Owns its gateway, upstreams and browser; everything on loopback.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";
import { api, grantFor, modern, texts } from "./mcp.ts";
import { holdLink } from "../../src/ports/hold-links.ts";

if (skipBrowser) console.warn(`console-overview.test.ts: skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const ARTIFACTS = join(root, "test-artifacts/console");
const TEAM = "ops";
let rec: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let many: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let gw: Proc & { url: string };
let origin = "";
let jwk = "";
let browser: Browser;
const shots: string[] = [];

const grant = async (sub: string, roles: Role[], tools: string[] = ["*"]) =>
  (await grantFor(jwk, origin, { sub, team: TEAM, roles, tools, ttlSeconds: 900 })).token;
const call = (bearer: string, name: string) => modern(`${origin}/mcp`, bearer, "tools/call", { name, arguments: {} }, { timeoutMs: 60_000 });
const heldId = (a: { result?: unknown }) => /held as (\S+~[0-9a-f]{24})/.exec(texts(a.result))?.[1];

async function shot(page: Page, name: string): Promise<void> {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  shots.push(path);
}

describe.skipIf(skipBrowser)("the overview and the self-updating holds list in Chromium", () => {
  let page: Page;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    jwk = JSON.stringify((await generateSigningKey("console-overview-e2e")).privateJwk);
    [rec, many] = await Promise.all([startModernOnlyUpstream(), startModernOnlyUpstream({ manyTools: 6 })]);
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    gw = await startPortcullis(
      `
actor: local:console-overview
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
  wait: 0
upstreams:
  - name: rec
    url: ${rec.url}
    timeout: 10s
  - name: many
    url: ${many.url}
    timeout: 10s
mappings:
  rec:
    tools:
      bump: { effect: idempotent }
policy:
  rules:
    - id: bumps-need-a-human
      match: { tool: rec__bump }
      decision: require_approval
      reason: bumps change shared state
    - id: bulk-is-fine
      match: { tool: "many__*" }
      decision: allow
      reason: bulk reads
`,
      port,
      { PORTCULLIS_SIGNING_KEY: jwk },
    );
    browser = await launchChromium();
    const context = await browser.newContext();
    page = await context.newPage();
    await page.goto(`${origin}/console`);
    await page.fill("#token", await grant("human:watcher", ["auditor", "approver"], []));
    await Promise.all([page.waitForURL(`${origin}/console`), page.click('form.box button[type="submit"]')]);
  }, 240_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await Promise.all([gw?.stop(), rec?.close(), many?.close()]);
    if (shots.length) console.log(`console-overview.test.ts: screenshots:\n  ${shots.join("\n  ")}`);
  });

  it("after allowed, refused and held calls the overview draws its charts and tiles, and fits a phone", async () => {
    const agent = await grant("agent:busy", ["agent"]);
    const narrow = await grant("agent:narrow", ["agent"], ["many__*"]);
    for (let i = 0; i < 12; i++) expect((await call(agent, `many__many_${i % 6}`)).result?.isError).not.toBe(true);
    expect((await call(narrow, "rec__bump")).result?.isError ?? true).toBeTruthy();
    expect(heldId(await call(agent, "rec__bump"))).toBeTruthy();

    await page.goto(`${origin}/console/overview`);
    expect(await page.title()).toContain("Overview");
    expect(await page.locator("#chart-calls rect.bar").count()).toBeGreaterThanOrEqual(2);
    expect(await page.locator('#chart-calls rect.bar[data-decision="blocked"]').count()).toBeGreaterThanOrEqual(1);
    expect(await page.locator("#chart-tools rect.bar").count()).toBe(6);
    expect(await page.locator("#chart-errors rect.bar").count()).toBeGreaterThanOrEqual(1);
    expect((await page.locator("#tile-pending .tile-value").textContent())?.trim()).toBe("1");
    expect((await page.locator("#tile-halts .tile-value").textContent())?.trim()).toBe("running");
    // 12 allowed, 1 refused, 1 held.
    expect((await page.locator("#tile-calls .tile-value").textContent())?.trim()).toBe("14");
    expect(await page.locator('#chart-calls rect.bar[data-decision="held"]').count()).toBe(1);
    // The refresh is in the page (no script), and the charts are filled by the stylesheet the CSP allows.
    expect(await page.locator('meta[http-equiv="refresh"]').getAttribute("content")).toBe("15");
    const fill = await page
      .locator('#chart-calls rect.bar[data-decision="allow"]')
      .first()
      .evaluate((el) => getComputedStyle(el).fill);
    expect(fill).not.toBe("rgb(0, 0, 0)");
    await shot(page, "overview-desktop");
    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot(page, "overview-phone");
    await page.setViewportSize({ width: 1280, height: 800 });
  });

  it("the Tools page: an approver with no tools of its own sees the tools whose holds it may decide; an auditor sees every tool", async () => {
    const context = await browser.newContext();
    const p = await context.newPage();
    await p.goto(`${origin}/console`);
    await p.fill("#token", await grant("human:just-approves", ["approver"], []));
    await Promise.all([p.waitForURL(`${origin}/console`), p.click('form.box button[type="submit"]')]);
    await p.goto(`${origin}/console/tools`);
    const approverTable = await p.locator("table.tools").textContent();
    expect(approverTable).toContain("rec / bump");
    expect(approverTable).toContain("require_approval (rule bumps-need-a-human)");
    expect(approverTable).not.toContain("many / many_0");
    await shot(p, "overview-tools-approver");
    await context.close();
    await page.goto(`${origin}/console/tools`);
    const auditorTable = await page.locator("table.tools").textContent();
    expect(auditorTable).toContain("rec / bump");
    expect(auditorTable).toContain("many / many_0");
  });

  it("the pending list, left open, shows a new hold and drops a resolved one within seconds, with no reload by the person", async () => {
    await page.goto(`${origin}/console`);
    const rows = () => page.locator("table.holds tbody tr").count();
    const before = await rows();
    expect(before).toBeGreaterThanOrEqual(1);
    // A new hold, created while the page is open.
    const other = await grant("agent:other", ["agent"]);
    const id = heldId(await call(other, "rec__bump"));
    expect(id).toBeTruthy();
    await page.waitForFunction((n) => document.querySelectorAll("table.holds tbody tr").length === n, before + 1, { timeout: 15_000, polling: 250 });
    expect(await page.locator(`a[href="/console/holds/${encodeURIComponent(id!)}"]`).count()).toBe(1);
    await shot(page, "overview-holds-new");
    // Resolved elsewhere (the API): it leaves the list.
    const approver = await grant("human:approver", ["approver"], []);
    expect(
      (await api(origin, approver, `/v1/holds/${encodeURIComponent(id!)}/resolve`, { method: "POST", body: { decision: "reject", reason: "not now" } })).status,
    ).toBe(200);
    await page.waitForFunction((n) => document.querySelectorAll("table.holds tbody tr").length === n, before, { timeout: 15_000, polling: 250 });
    expect(await page.locator(`a[href="/console/holds/${encodeURIComponent(id!)}"]`).count()).toBe(0);
  });

  it("a notification's signed approve link: signed out it asks for sign-in and comes back; it proposes that decision for that exact hold; an altered link is told apart; the person still confirms", async () => {
    const agent = await grant("agent:linked", ["agent"]);
    const id = heldId(await call(agent, "rec__bump"))!;
    expect(id).toBeTruthy();
    const approver = await grant("human:link-approver", ["approver"], []);
    const { hold } = (await api(origin, approver, `/v1/holds/${encodeURIComponent(id)}`)).json;
    const pageUrl = `${origin}/console/holds/${encodeURIComponent(id)}`;
    // What the webhook would carry (the gateway signs with its signing secret, here the test's key).
    const link = holdLink(jwk, pageUrl, hold, "approve");
    const context = await browser.newContext();
    const p = await context.newPage();
    await p.goto(link);
    expect(new URL(p.url()).pathname).toBe("/console/login");
    await p.fill("#token", approver);
    await Promise.all([p.waitForURL(link), p.click('form.box button[type="submit"]')]);
    expect(await p.locator(".notice").first().textContent()).toContain("You opened the link to approve this exact call");
    expect(await p.locator('button[value="approve"]').getAttribute("class")).toBe("proposed");
    await shot(p, "overview-link-approve");
    // The same MAC for the other decision, or for another hold: told apart, nothing proposed.
    await p.goto(link.replace("decide=approve", "decide=reject"));
    expect(await p.locator('.notice.error[role="alert"]').textContent()).toContain("This link does not match this hold");
    expect(await p.locator("button.proposed").count()).toBe(0);
    // Nothing was decided by opening it; the person confirms on the page.
    expect((await api(origin, approver, `/v1/holds/${encodeURIComponent(id)}`)).json.hold.state).toBe("pending");
    await p.goto(link);
    await Promise.all([p.waitForURL(pageUrl), p.click('button[value="approve"]')]);
    await shot(p, "overview-link-approved");
    expect(await p.locator("#outcome").textContent()).toMatch(/^approved by human:link-approver/);
    // Once decided, the link has nothing left to decide.
    await p.goto(link);
    expect(await p.locator(".notice").first().textContent()).toContain("already approved");
    await context.close();
  });

  it("every console page fits a phone's width (390 px): nothing scrolls sideways", async () => {
    const agent = await grant("agent:phone", ["agent"]);
    const id = heldId(await call(agent, "rec__bump"))!;
    await page.setViewportSize({ width: 390, height: 844 });
    const wide: string[] = [];
    for (const path of [
      "/console/overview",
      "/console",
      `/console/holds/${encodeURIComponent(id)}`,
      "/console/ledger",
      "/console/runs",
      "/console/killswitch",
      "/console/tools",
      "/console/connections",
    ]) {
      await page.goto(`${origin}${path}`);
      const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      if (over > 0) wide.push(`${path}: ${over}px too wide`);
      await shot(page, `phone-${path === "/console" ? "holds" : path.startsWith("/console/holds/") ? "hold" : path.slice("/console/".length)}`);
    }
    await page.setViewportSize({ width: 1280, height: 800 });
    expect(wide).toEqual([]);
  });
});
