/**
 * [R] The console's run page in a real browser: playwright-core driving Debian's chromium
 * (headless, --no-sandbox) against a gateway on the production build (wrangler dev, workerd) in
 * front of the notes upstream (test/e2e/notes-upstream.ts, which counts every tools/call), with
 * mappings that declare compensations and read-backs. Shows: an agent's run (an SDK v2 client's
 * session: three creates and an update) is listed on /console/runs; its page shows the steps and
 * a plan of four compensations newest first; Dry run shows what would run and the upstream's count
 * stays the same; an auditor sees the plan but no Roll back form, and its forged POST is refused
 * (403), as is a POST without the session's CSRF token; another team's operator gets the 404 page;
 * the operator confirms Roll back and every step turns compensated and verified (the notes are
 * gone). Screenshots of the run page before and after go to test-artifacts/console/. Skipped,
 * saying so, only when /usr/bin/chromium is absent. Owns the browser, gateway and upstream it
 * starts. Must never: leave them running, or reach beyond loopback.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { CHROMIUM, launchChromium, skipBrowser } from "./browser.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";
import { grantFor } from "./mcp.ts";
import { notesGatewayConfig, type NotesUpstream, startNotesUpstream } from "./notes-upstream.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

if (skipBrowser) console.warn(`console-runs.test.ts: skipped — ${CHROMIUM} is absent (apt-get install chromium; .ci/run installs it)`);

const ARTIFACTS = join(root, "test-artifacts/console");

const config = (url: string) => notesGatewayConfig(url, "local:console-runs");

let notes: NotesUpstream;
let gw: Proc & { url: string };
let origin = "";
let jwk = "";
let browser: Browser;
const shots: string[] = [];
const str = (t: string | null): string => t ?? "";

const grant = (sub: string, team: string, roles: Role[], tools: string[] = []) => grantFor(jwk, origin, { sub, team, roles, tools, ttlSeconds: 900 });

async function shot(page: Page, name: string): Promise<void> {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  shots.push(path);
}

/** A fresh browser context signed in with `token` (pasted into the login form); its page and session cookie. */
async function signedIn(token: string): Promise<{ context: BrowserContext; page: Page; cookie: string }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.on("dialog", (d) => void d.dismiss());
  await page.goto(`${origin}/console`);
  expect(new URL(page.url()).pathname).toBe("/console/login");
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(`${origin}/console`), page.click('form.box button[type="submit"]')]);
  const cookie = (await context.cookies(origin)).find((k) => k.name === "__Host-portcullis")?.value;
  expect(cookie).toBeTruthy();
  return { context, page, cookie: cookie! };
}

/** A console form POST from Node (not a browser): the given cookie, fields and Origin. */
async function postForm(path: string, cookie: string, fields: Record<string, string>): Promise<{ status: number; text: string }> {
  const r = await fetch(`${origin}${path}`, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie: `__Host-portcullis=${cookie}`, origin },
    body: new URLSearchParams(fields).toString(),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: r.status, text: await r.text() };
}

const cells = (page: Page, selector: string): Promise<string[]> => page.locator(selector).allTextContents();

describe.skipIf(skipBrowser)("the run page in Chromium", () => {
  let run = "";
  let created: Any[] = [];
  let operator: { token: string; jti: string };
  let page: Page;
  let runUrl = "";

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    jwk = JSON.stringify((await generateSigningKey("console-runs-e2e")).privateJwk);
    notes = await startNotesUpstream();
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    gw = await startPortcullis(config(notes.url), port, { PORTCULLIS_SIGNING_KEY: jwk });
    browser = await launchChromium();
    operator = await grant("human:olga", "runs", ["operator"]);
  }, 240_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await gw?.stop();
    await notes?.close();
    if (shots.length) console.log(`console-runs.test.ts: screenshots:\n  ${shots.join("\n  ")}`);
  });

  it("an agent's run through an SDK v2 client: three notes created, one updated", async () => {
    const agent = await grant("agent:writer", "runs", ["agent"], ["*"]);
    // A legacy session of an SDK v2 client: its session id is the run id.
    const client = new Client({ name: "console-runs-agent", version: "1" }, { versionNegotiation: { mode: "legacy" } });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url), { requestInit: { headers: { authorization: `Bearer ${agent.token}` } } });
    await client.connect(transport);
    try {
      run = transport.sessionId ?? "";
      const call = async (name: string, args: Record<string, unknown>): Promise<Any> => {
        const r: Any = await client.callTool({ name, arguments: args });
        expect(r.isError, JSON.stringify(r)).not.toBe(true);
        return r.structuredContent;
      };
      created = [await call("create_note", { title: "alpha" }), await call("create_note", { title: "beta" }), await call("create_note", { title: "gamma" })];
      await call("update_note", { id: created[1].id, title: "beta (edited)" });
    } finally {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    }
    expect(run).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(notes.notes.get(created[1].id)).toBe("beta (edited)");
    expect(notes.notes.size).toBe(3);
  });

  it("the operator opens the run from the runs list: four steps and a plan of four compensations, newest first", async () => {
    ({ page } = await signedIn(operator.token));
    await page.click('nav a[href="/console/runs"]');
    await page.waitForURL(`${origin}/console/runs`);
    // The run's records reach the ledger as each call answers; the list is read from it (bounded wait).
    const link = page.locator("table.runs a", { hasText: run });
    for (let i = 0; i < 20 && (await link.count()) === 0; i++) {
      await new Promise((r) => setTimeout(r, 500));
      await page.reload();
    }
    expect(await link.count()).toBe(1);
    const row = page.locator("table.runs tbody tr", { has: page.locator("a", { hasText: run }) });
    expect(await row.textContent().then(str)).toContain("agent:writer");
    // Who, how many steps and what the run touched, in the list itself.
    expect(await row.locator("td.touched").textContent().then(str)).toBe("notes/create_note, notes/update_note");
    expect((await row.locator("td").allTextContents())[2]).toBe("4");
    await Promise.all([page.waitForURL(/\/console\/runs\/[^/]+\?principal=/), link.click()]);
    runUrl = page.url();
    for (let i = 0; i < 20 && (await page.locator("table.plan tbody tr").count()) < 4; i++) {
      await new Promise((r) => setTimeout(r, 500));
      await page.reload();
    }
    expect(await cells(page, "table.steps td.tool")).toEqual(["notes / update_note", "notes / create_note", "notes / create_note", "notes / create_note"]);
    expect(await cells(page, "table.steps td.outcome")).toEqual(["succeeded", "succeeded", "succeeded", "succeeded"]);
    expect(await cells(page, "table.steps td.verification")).toEqual(["—", "—", "—", "—"]);
    const [a, b, c] = created;
    expect(await cells(page, "table.plan td.compensation")).toEqual([
      `update_note {"id":"${b.id}","title":"beta"}`,
      `delete_note {"id":"${c.id}"}`,
      `delete_note {"id":"${b.id}"}`,
      `delete_note {"id":"${a.id}"}`,
    ]);
    expect(await cells(page, "table.plan td.approval")).toEqual(["not needed", "not needed", "not needed", "not needed"]);
    expect(await cells(page, "table.plan td.readback")).toEqual([
      `read_note {"id":"${b.id}"} expect {"exists":true,"title":"beta"}`,
      `read_note {"id":"${c.id}"} expect {"exists":false}`,
      `read_note {"id":"${b.id}"} expect {"exists":false}`,
      `read_note {"id":"${a.id}"} expect {"exists":false}`,
    ]);
    expect(await page.locator("#not-reversible").count()).toBe(0);
    expect(await page.locator("form.rollback").count()).toBe(1);
    expect(await page.locator("script").count()).toBe(0);
    await shot(page, "runs-01-run-before");
  });

  it("Dry run shows the four compensations it would call, and the upstream is not called", async () => {
    const before = notes.total();
    await Promise.all([page.waitForURL(/\/dry-run$/), page.click("#dry-run-button")]);
    expect(await page.locator(".notice").first().textContent().then(str)).toMatch(/^Dry run: nothing was called\. The rollback would call 4 compensations/);
    expect(await cells(page, "section#dry-run td.state-cell")).toEqual(["would_run", "would_run", "would_run", "would_run"]);
    expect(notes.total()).toBe(before);
    expect(notes.notes.size).toBe(3);
    await shot(page, "runs-02-dry-run");
  });

  it("without the operator role: the plan but no Roll back form, and a forged POST is refused (403); so is one without CSRF; another team gets 404", async () => {
    const before = notes.total();
    const auditor = await grant("human:audrey", "runs", ["auditor"]);
    const a = await signedIn(auditor.token);
    try {
      await a.page.goto(runUrl);
      expect(await a.page.locator("table.plan tbody tr").count()).toBe(4);
      expect(await a.page.locator("form.rollback").count()).toBe(0);
      expect(await a.page.locator("#no-rollback").textContent().then(str)).toMatch(/needs the operator role/);
      const csrf = await a.page.locator('form.dry-run input[name="csrf"]').inputValue();
      const path = new URL(runUrl).pathname;
      const forged = await postForm(`${path}/rollback`, a.cookie, { csrf, principal: "agent:writer", confirm: "yes", approve_compensations: "yes" });
      expect(forged.status).toBe(403);
      expect(forged.text).toContain("needs the operator role");
    } finally {
      await a.context.close();
    }
    // The operator's own session, without the CSRF token: refused.
    const op = await page.context().cookies(origin);
    const opCookie = op.find((k) => k.name === "__Host-portcullis")!.value;
    const noCsrf = await postForm(`${new URL(runUrl).pathname}/rollback`, opCookie, { principal: "agent:writer", confirm: "yes" });
    expect(noCsrf.status).toBe(403);
    expect(noCsrf.text).toContain("CSRF");
    // Another team's operator: the run is not in its team's ledger.
    const elsewhere = await grant("human:otto", "elsewhere", ["operator"]);
    const o = await signedIn(elsewhere.token);
    try {
      const r = await o.page.goto(runUrl);
      expect(r!.status()).toBe(404);
      expect(await o.page.locator("h1").textContent().then(str)).toBe("Run not found");
      expect(await o.page.content()).not.toContain("agent:writer");
    } finally {
      await o.context.close();
    }
    expect(notes.total()).toBe(before);
    expect(notes.notes.size).toBe(3);
  });

  it("the operator confirms Roll back: every step turns compensated and verified, and the notes are gone", async () => {
    const before = notes.total();
    await page.goto(runUrl);
    await page.check("#confirm");
    await Promise.all([page.waitForURL(/rolled_back=/, { timeout: 60_000 }), page.click("#rollback-button")]);
    expect(new URL(page.url()).searchParams.get("rolled_back"), JSON.stringify(await cells(page, "table.steps td.rollback"))).toBe("4");
    expect(new URL(page.url()).searchParams.get("remaining")).toBe("0");
    expect(await page.locator(".notice").first().textContent().then(str)).toMatch(/^Rollback executed: 4 steps compensated; nothing remains/);
    expect(await cells(page, "table.steps td.verification")).toEqual(["verified", "verified", "verified", "verified"]);
    const states = await cells(page, "table.steps td.rollback");
    expect(states).toHaveLength(4);
    for (const s of states) expect(s).toMatch(/^compensated \(1 attempt\) · by human:olga at /);
    expect(await page.locator("#plan-empty").count()).toBe(1);
    expect(await page.locator("#plan-counts").textContent().then(str)).toContain("Already undone: 4");
    expect(await page.locator("#rollback-button").isDisabled()).toBe(true);
    // Four compensations and four read-backs reached the upstream; nothing else.
    expect(notes.total() - before).toBe(8);
    expect(notes.notes.size).toBe(0);
    await shot(page, "runs-03-run-after");
  });
});
