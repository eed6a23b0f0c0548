/**
 * The web console in workerd: every page rendered with hostile agent- and upstream-supplied
 * strings stays inert (no element, attribute or script comes out of a value; the inline style is
 * exactly the one the CSP names by hash); hold pages disable the decision form with the reason
 * when the hold is not resolvable; run pages show steps newest first, the plan in order with what
 * needs approval and what cannot be undone, and the Roll back form to operators only; and through the Worker: the security headers on every console
 * answer, sign-in by pasting a grant (the `__Host-` cookie's attributes, no token in any page or
 * redirect), revocation signing the session out, and POSTs refused without the gateway's own
 * Origin or the session's CSRF token.
 */
import { env, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import type { HoldRecord } from "../../durable-objects/contract-holds.ts";
import { CONSOLE_CSP, CONSOLE_CSS, SECURITY_HEADERS, STYLE_HASH } from "../../src/console/headers.ts";
import { HoldPage, HoldsPage } from "../../src/console/holds-page.tsx";
import { KillSwitchPage } from "../../src/console/killswitch-page.tsx";
import { ErrorPage, LoginPage, type Viewer } from "../../src/console/layout.tsx";
import { LedgerPage, TracePage } from "../../src/console/ledger-page.tsx";
import { RunPage, RunsPage, runPath } from "../../src/console/runs-page.tsx";
import { htmlResponse } from "../../src/console/render.ts";
import { csrfToken, csrfValid, originProblem, readCookie } from "../../src/console/cookie-session.ts";
import { ToolsPage } from "../../src/console/tools.tsx";
import { OverviewPage, overviewOf } from "../../src/console/overview-page.tsx";
import { rollupOf, sumRows } from "../../src/ledger/metrics.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import type { RunDetail } from "../../src/services/run-records.ts";
import type { RunStep } from "../../src/governance/rollback.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { type KeySet, parseKeySet } from "../../src/identity/keys.ts";
import ledgerSchema from "../../migrations/0001_ledger.sql?raw";

const GW = "http://127.0.0.1";
const EVIL = `</script><img src=x onerror=alert(1)><script>alert(2)</script>"'><svg onload=alert(3)>`;
const NOW = Date.UTC(2026, 11, 1, 12, 0, 0);

const viewer = (over: Partial<Viewer> = {}): Viewer => ({
  sub: `human:${EVIL}`,
  team: `t${EVIL}`,
  roles: ["approver"],
  via: "grant",
  csrf: `c"${EVIL}`,
  ...over,
});

function hold(over: Partial<HoldRecord> = {}): HoldRecord {
  const action = JSON.stringify({ arguments: { note: EVIL, n: 1 }, principal: `agent:${EVIL}`, tool: `tool${EVIL}`, upstream: `up${EVIL}` });
  return {
    v: 1,
    id: `t1~${"ab".repeat(12)}`,
    team: "t1",
    actionHash: "f".repeat(64),
    action,
    principal: `agent:${EVIL}`,
    jti: "j".repeat(22),
    upstream: `up${EVIL}`,
    tool: `tool${EVIL}`,
    exposedName: `up__tool${EVIL}`,
    rule: `rule${EVIL}`,
    reason: `reason${EVIL}`,
    classification: { effect: `write${EVIL}`, blast_radius: { scope: EVIL }, source: "mapping" },
    createdAt: NOW - 5 * 60_000,
    expiresAt: NOW + 4 * 3600_000,
    state: "pending",
    approver: null,
    resolvedAt: null,
    resolveReason: null,
    consumedAt: null,
    result: null,
    notForwarded: null,
    ...over,
  };
}

const entry = (over: Partial<LedgerEntry> = {}): LedgerEntry => ({
  v: 1,
  chain: "t1",
  seq: 7,
  prev: "0".repeat(64),
  kind: "decision",
  id: "d".repeat(26),
  at: "2026-12-01T12:00:00Z",
  body: { principal: `agent:${EVIL}`, tool: `tool${EVIL}`, decision: `allow${EVIL}`, args: { x: EVIL } },
  hash: "1".repeat(64),
  ...over,
});

async function html(page: Parameters<typeof htmlResponse>[0]): Promise<string> {
  return (await htmlResponse(page)).text();
}

/** No markup came out of a value: no img/svg/script element, no tag with an event handler, no raw payload. */
function inert(text: string) {
  expect(text).not.toMatch(/<img/i);
  expect(text).not.toMatch(/<svg/i);
  expect(text).not.toMatch(/<script/i);
  // Escaped text has no "<": every tag in the page is one the components wrote.
  // Attribute values are quoted with every inner quote escaped: drop them, and no handler is left.
  for (const tag of text.match(/<[A-Za-z][^>]*>/g) ?? []) expect(tag.replace(/"[^"]*"/g, '""')).not.toMatch(/\son[a-z]+\s*=/i);
  expect(text).not.toContain(EVIL);
  expect(text).toContain("&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;");
}

const base64 = (bytes: ArrayBuffer) => btoa(String.fromCharCode(...new Uint8Array(bytes)));

describe("pages render hostile strings inert", () => {
  it("the overview: numbers from the rollups, SVG charts (bars per minute by decision, top tools, error rate), hostile tool names inert, a meta refresh", async () => {
    const minute = Math.floor(NOW / 60_000);
    const at = (m: number) => new Date(m * 60_000 + 5000).toISOString();
    const evil = '"><script>alert(1)</script>';
    const rows = sumRows(
      rollupOf("t1", [
        { kind: "decision", id: "d1", at: at(minute - 2), body: { team: "t1", upstream: "up", tool: evil, decision: "allow", mode: "enforce" } },
        { kind: "decision", id: "d2", at: at(minute), body: { team: "t1", upstream: "up", tool: "read", decision: "allow", mode: "enforce" } },
        { kind: "decision", id: "d3", at: at(minute), body: { team: "t1", upstream: "up", tool: "read", decision: "allow", mode: "enforce" } },
        { kind: "blocked", id: "b1", at: at(minute), body: { team: "t1", tool: "up__drop", check: "rule" } },
        { kind: "outcome", id: "o1", at: at(minute), body: { status: "failed", duration_ms: 12 }, metrics: { upstream: "up", tool: "read" } },
        { kind: "outcome", id: "o2", at: at(minute), body: { status: "succeeded", duration_ms: 12 }, metrics: { upstream: "up", tool: "read" } },
        { kind: "hold.approved", id: "h1", at: at(minute), body: { team: "t1" }, metrics: { wait_ms: 40_000 } },
      ]),
    ).filter((r) => r.minute !== 0);
    const o = overviewOf(rows, minute - 59, minute);
    expect(o.minutes).toHaveLength(60);
    expect(o.minutes.at(-1)!.byDecision).toEqual({ allow: 2, blocked: 1 });
    expect(o.totals).toEqual({ calls: 3, blocked: 1, held: 0 });
    expect(o.topTools[0]).toEqual({ upstream: "up", tool: "read", calls: 2 });
    expect(o.upstreams).toEqual([{ upstream: "up", total: 2, failed: 1 }]);
    expect(o.holdWait).toEqual({ decided: 1, p50: 60000, p90: 60000 });
    const t = await html(
      OverviewPage({ viewer: viewer(), overview: o, unavailable: [], pending: { count: 2, oldest: NOW - 300_000 }, halts: { count: 0, scopes: [] }, now: NOW }),
    );
    // The page's own charts are its only SVG (three), and the hostile tool name is text in them.
    expect((t.match(/<svg/g) ?? []).length).toBe(3);
    expect(t).not.toMatch(/<script/i);
    expect(t).not.toContain(evil);
    expect(t).toContain("&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;");
    for (const tag of t.match(/<[A-Za-z][^>]*>/g) ?? []) expect(tag.replace(/"[^"]*"/g, '""')).not.toMatch(/\son[a-z]+\s*=/i);
    expect(t).toContain('<meta http-equiv="refresh" content="15"/>');
    expect(t).toContain('<svg class="chart" id="chart-calls"');
    expect((t.match(/data-decision="allow"/g) ?? []).length).toBe(2);
    expect((t.match(/data-decision="blocked"/g) ?? []).length).toBe(1);
    expect(t).toContain('id="chart-tools"');
    expect(t).toContain("50% of 2");
    expect(t).toContain("oldest 5m 0s ago");
    expect(t).toContain("running");
    // A viewer without a metrics role sees why, and no chart.
    const plain = await html(
      OverviewPage({ viewer: viewer(), overview: null, metricsNote: "Charts need an auditor", unavailable: [], pending: null, halts: null, now: NOW }),
    );
    expect(plain).toContain("Charts need an auditor");
    expect(plain).not.toContain("<svg");
  });

  it("the pending holds list", async () => {
    const t = await html(HoldsPage({ viewer: viewer(), holds: [{ hold: hold(), resolvable: true, url: "x" }], state: "pending", now: NOW }));
    inert(t);
    expect(t).toMatch(/^<!doctype html>/);
    expect(t).toContain(`href="/console/holds/t1~${"ab".repeat(12)}"`);
    expect(t).toContain("5m 0s ago");
    expect(t).toContain("in 4h 0m");
    // Every column of the brief is there.
    for (const c of ["Tool", "Upstream", "Requester", "Rule", "Reason", "Classification", "Age", "Expiry"]) expect(t).toContain(`<th>${c}</th>`);
  });

  it("a hold's detail: the exact action pretty-printed and verbatim, its hash, an enabled form", async () => {
    const h = hold({ id: `t1~"><img src=x>` });
    const t = await html(HoldPage({ viewer: viewer(), view: { hold: h, resolvable: true, url: "x" }, now: NOW }));
    inert(t);
    expect(t).not.toContain('"><img src=x>');
    expect(t).toContain(`action="/console/holds/t1~%22%3E%3Cimg%20src%3Dx%3E/resolve"`);
    // Pretty-printed JSON of the canonical action, escaped.
    const pretty = JSON.stringify(JSON.parse(h.action), null, 2)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
    expect(t).toContain(`<pre id="action">${pretty}</pre>`);
    expect(t).toContain(`<code id="action-hash">${"f".repeat(64)}</code>`);
    expect(t).toContain(`name="action_hash" value="${"f".repeat(64)}"`);
    expect(t).toMatch(/<button type="submit" name="decision" value="approve">/);
    expect(t).not.toMatch(/disabled=""/);
    // The CSRF token is an attribute value, escaped.
    expect(t).toContain('name="csrf" value="c&quot;&lt;/script&gt;');
  });

  it("a decided hold shows what became of it and no decision form (no stale 'cannot approve' warning); a consumed one says how its call ended", async () => {
    const approved = await html(
      HoldPage({
        viewer: viewer(),
        view: { hold: hold({ state: "approved", approver: "human:bo", resolvedAt: NOW }), resolvable: false, why: "it is approved", url: "x" },
        now: NOW,
      }),
    );
    expect(approved).toContain('id="outcome"');
    expect(approved).toContain("approved by human:bo");
    expect(approved).not.toContain('id="not-resolvable"');
    expect(approved).not.toContain('<form class="resolve"');
    const consumed = (answered?: "succeeded" | "tool_error" | "error") =>
      html(
        HoldPage({
          viewer: viewer(),
          view: {
            hold: hold({ state: "consumed", approver: "human:bo", resolvedAt: NOW, consumedAt: NOW + 1000 }),
            resolvable: false,
            url: "x",
            ...(answered ? { answered } : {}),
          },
          now: NOW,
        }),
      );
    expect(await consumed("succeeded")).toContain("the call ran once at 2026-12-01T12:00:01Z: it succeeded");
    expect(await consumed("tool_error")).toContain("the tool reported an error");
    expect(await consumed("error")).toContain("it answered with a JSON-RPC error");
    const running = await consumed();
    expect(running).toContain("the ledger&#39;s outcome record says which");
    expect(running).not.toContain("not recorded yet");
    const expired = await html(
      HoldPage({ viewer: viewer(), view: { hold: hold({ state: "expired", expiresAt: NOW - 1000 }), resolvable: false, why: "expired", url: "x" }, now: NOW }),
    );
    expect(expired).toContain("without a decision");
    expect(expired).not.toContain('<form class="resolve"');
  });

  it("a pending hold the viewer cannot resolve: buttons disabled, and the note says why; a refused rejection keeps the typed reason", async () => {
    const kept = await html(HoldPage({ viewer: viewer(), view: { hold: hold(), resolvable: true, url: "x" }, now: NOW, reason: `my reason ${EVIL}` }));
    expect(kept).toContain(`<textarea id="reason" name="reason" maxlength="500">my reason`);
    expect(kept).not.toContain(EVIL);
    for (const [h, why] of [
      [hold({ principal: "human:me" }), "you raised this hold: the requester never resolves its own hold"],
      [hold({ expiresAt: NOW - 1000 }), `expired ${EVIL}`],
    ] as const) {
      const t = await html(HoldPage({ viewer: viewer(), view: { hold: h, resolvable: false, why, url: "x" }, now: NOW }));
      expect(t).toMatch(/<button type="submit" name="decision" value="approve" disabled="">/);
      expect(t).toMatch(/<button type="submit" name="decision" value="reject" disabled="">/);
      expect(t).toMatch(/<textarea id="reason" name="reason" maxlength="500" disabled="">/);
      expect(t).toContain('id="not-resolvable"');
      expect(t).toContain("You cannot approve or reject this hold: ");
      expect(t).not.toContain(EVIL);
    }
  });

  it("an approved hold says by whom, from the record", async () => {
    const h = hold({ state: "approved", approver: `human:${EVIL}`, resolvedAt: NOW - 1000, resolveReason: `ok ${EVIL}` });
    const t = await html(HoldPage({ viewer: viewer(), view: { hold: h, resolvable: false, why: "it is approved", url: "x" }, now: NOW }));
    inert(t);
    expect(t).toMatch(/id="outcome">approved by human:&lt;\/script&gt;/);
  });

  it("ledger, trace, kill switch, tools, sign-in and error pages", async () => {
    const pages = [
      LedgerPage({
        viewer: viewer({ roles: ["auditor"] }),
        entries: [entry(), entry({ kind: "outcome", body: { decision_id: `x${EVIL}`, status: EVIL } })],
        kind: null,
        tool: EVIL,
        next: `t1:${EVIL}`,
      }),
      TracePage({ viewer: viewer(), chain: `c${EVIL}`, id: `i${EVIL}`, status: EVIL, records: [entry()] }),
      KillSwitchPage({
        viewer: viewer({ roles: ["admin"] }),
        snapshot: { version: 3, halts: [{ v: 1, scope: "tool", target: `t${EVIL}`, reason: `r${EVIL}`, by: `human:${EVIL}`, at: NOW }] },
        admin: true,
      }),
      ToolsPage({
        viewer: viewer(),
        mode: "enforce",
        rows: [
          {
            upstream: `u${EVIL}`,
            tool: `t${EVIL}`,
            exposedName: `e${EVIL}`,
            level: "WARN",
            why: `w${EVIL}`,
            policy: { decision: "deny", rule: `r${EVIL}`, hidden: true, sometimes: [`s${EVIL}`] },
          },
        ],
        totals: { OK: 0, NOTE: 0, WARN: 1, BLOCK: 0 },
        unlisted: [{ upstream: `u${EVIL}`, why: `w${EVIL}` }],
      }),
      LoginPage({ access: true, problem: `not signed in: ${EVIL}` }),
      ErrorPage({ viewer: viewer(), status: 409, title: `T${EVIL}`, message: EVIL, back: { href: "/console", label: EVIL } }),
    ];
    for (const p of pages) inert(await html(p));
    // Links built from values stay console links with encoded parameters.
    const ledger = await html(pages[0]!);
    expect(ledger).toContain(`href="/console/ledger/${encodeURIComponent(`x${EVIL}`).replace(/'/g, "&#39;")}"`);
    expect(ledger).toMatch(/href="\/console\/ledger\?tool=%3C%2Fscript%3E/);
  });

  it("the Tools page shows what the policy makes of each tool: its decision, rule, whether agents see it, and the rules that apply sometimes", async () => {
    const page = await html(
      ToolsPage({
        viewer: viewer(),
        mode: "enforce",
        rows: [
          {
            upstream: "everything",
            tool: "get-env",
            exposedName: "get-env",
            level: "OK",
            why: "mapped: read_only",
            policy: { decision: "deny", rule: "demo-no-env", hidden: true, sometimes: [] },
          },
          {
            upstream: "everything",
            tool: "get-sum",
            exposedName: "get-sum",
            level: "OK",
            why: "mapped: read_only",
            policy: { decision: "allow", rule: null, hidden: false, sometimes: ["require_approval when args.a + args.b &gt; 100 (rule demo-big-sums)"] },
          },
        ],
        totals: { OK: 2, NOTE: 0, WARN: 0, BLOCK: 0 },
        unlisted: [],
      }),
    );
    expect(page).toContain("<th>Policy</th>");
    expect(page).toContain("deny (rule demo-no-env) · hidden from agents");
    expect(page).toContain("allow (the baseline: no rule decides it)");
    expect(page).toContain("(rule demo-big-sums)");
  });

  it("the Tools page names each upstream whose tools could not be listed, with why, instead of listing nothing for it", async () => {
    const page = await html(
      ToolsPage({
        viewer: viewer(),
        mode: "enforce",
        rows: [],
        totals: { OK: 0, NOTE: 0, WARN: 0, BLOCK: 0 },
        unlisted: [
          { upstream: "gone", why: "unreachable: unreachable (Network connection lost.)" },
          { upstream: "slow", why: "timeout: no answer within 4000 ms" },
        ],
      }),
    );
    expect(page).toContain("Could not list the tools of 2 upstreams; their tools are missing below:");
    expect(page).toContain("<li><strong>gone</strong> — unreachable: unreachable (Network connection lost.)</li>");
    expect(page).toContain("<li><strong>slow</strong> — timeout: no answer within 4000 ms</li>");
    expect(page).toContain("No tools could be listed for your grant.");
    expect(page).not.toContain("Your grant reaches no tools.");
    const none = await html(ToolsPage({ viewer: viewer(), mode: "enforce", rows: [], totals: { OK: 0, NOTE: 0, WARN: 0, BLOCK: 0 }, unlisted: [] }));
    expect(none).not.toContain("Could not list");
    expect(none).toContain("Your grant reaches no tools.");
  });

  it("the kill switch offers halt and resume to an admin only", async () => {
    const snapshot = { version: 1, halts: [{ v: 1, scope: "global" as const, target: null, reason: "drill", by: "human:root", at: NOW }] };
    const admin = await html(KillSwitchPage({ viewer: viewer({ roles: ["admin"] }), snapshot, admin: true }));
    expect(admin).toContain('value="halt"');
    expect(admin).toContain('value="resume"');
    const approver = await html(KillSwitchPage({ viewer: viewer(), snapshot, admin: false }));
    expect(approver).not.toContain('action="/console/killswitch"');
    expect(approver).toContain("1 halt in force (version 1)");
  });

  it("the one inline style is exactly what the CSP's hash allows, and the CSP allows no script", async () => {
    const t = await html(LoginPage({ access: false }));
    const style = /<style>([\s\S]*?)<\/style>/.exec(t)![1]!;
    expect(style).toBe(CONSOLE_CSS);
    expect(`sha256-${base64(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(style)))}`).toBe(STYLE_HASH);
    expect(CONSOLE_CSP).toBe(`default-src 'none'; style-src '${STYLE_HASH}'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`);
    expect(CONSOLE_CSP).not.toMatch(/script-src|unsafe/);
    expect(t.match(/<style/g)).toHaveLength(1);
  });
});

// ---- run pages ----------------------------------------------------------------------------------

const step = (seq: number, over: Partial<RunStep> = {}): RunStep => ({
  decision_id: `dec-${seq}-${"0".repeat(20)}`,
  seq,
  at: `2026-12-01T12:00:0${seq}Z`,
  upstream: `notes${EVIL}`,
  tool: `create_note${EVIL}`,
  effect: "reversible",
  status: "succeeded",
  compensation: { v: 1, status: "planned", tool: `delete_note${EVIL}`, arguments: { id: `n${seq}${EVIL}` }, approval: "none", verification: null },
  rollback: null,
  ...over,
});

function runDetailOf(steps: RunStep[]): RunDetail {
  const planned = [...steps].sort((a, b) => b.seq - a.seq).filter((s) => s.compensation?.status === "planned" && s.rollback?.state !== "compensated");
  return {
    run: { run: "run-1", team: `t${EVIL}`, principal: `agent:${EVIL}`, started_at: steps[0]!.at, last_at: steps.at(-1)!.at, steps },
    plan: {
      run: "run-1",
      principal: `agent:${EVIL}`,
      team: `t${EVIL}`,
      compensations: planned.map((s) => {
        const c = s.compensation as Extract<NonNullable<RunStep["compensation"]>, { status: "planned" }>;
        return {
          decision_id: s.decision_id,
          seq: s.seq,
          upstream: s.upstream,
          step_tool: s.tool,
          tool: c.tool,
          arguments: c.arguments,
          verification: c.verification,
          needs_approval: c.approval === "required",
          key_id: null,
          retried: false,
        };
      }),
      not_reversible: steps
        .filter((s) => s.compensation?.status === "unavailable")
        .map((s) => ({ decision_id: s.decision_id, upstream: s.upstream, tool: s.tool, reason: `broke its outputSchema ${EVIL}` })),
      already_compensated: steps.filter((s) => s.rollback?.state === "compensated").map((s) => s.decision_id),
      nothing_to_undo: [],
    },
  };
}

describe("run pages", () => {
  const steps = [
    step(1),
    step(2, {
      compensation: {
        v: 1,
        status: "planned",
        tool: "delete_note",
        arguments: { id: "n2" },
        approval: "required",
        verification: { tool: "read_note", arguments: { id: "n2" }, expect: { exists: false } },
      },
    }),
    step(3, { tool: "create_draft", compensation: { v: 1, status: "unavailable", reason: `the result broke the tool's outputSchema ${EVIL}` } }),
    step(4, {
      tool: "update_note",
      rollback: { state: "compensated", attempts: 2, verification: "verified", reason: null, at: "2026-12-01T12:05:00Z", by: `human:${EVIL}`, key_id: null },
    }),
  ];
  const detail = runDetailOf(steps);

  it("the runs list: hostile strings inert, links carry the run's principal", async () => {
    const t = await html(
      RunsPage({
        viewer: viewer({ roles: ["operator"], team: "t1" }),
        runs: [
          {
            run: "run-1",
            principal: `agent:${EVIL}`,
            steps: 4,
            started_at: "a",
            last_at: `b${EVIL}`,
            touched: ["notes/create_note", `notes/update${EVIL}`],
            touched_more: 2,
          },
        ],
        team: "t1",
        admin: false,
      }),
    );
    inert(t);
    for (const c of ["Run", "Who", "Steps", "Touched", "Started", "Last activity"]) expect(t).toContain(`<th>${c}</th>`);
    expect(t).toContain("notes/create_note, notes/update&lt;/script&gt;");
    expect(t).toContain("and 2 more");
    expect(t).toContain(`href="${runPath("run-1", { principal: `agent:${EVIL}` })}"`);
    expect(t).toMatch(/href="\/console\/runs\/run-1\?principal=agent%3A%3C%2Fscript%3E/);
    expect(t).not.toContain('name="team"');
    expect(t).toContain('<a href="/console/runs">Runs</a>');
    const admin = await html(RunsPage({ viewer: viewer({ roles: ["admin"], team: "t1" }), runs: [], team: "t2", admin: true }));
    expect(admin).toContain('name="team" value="t2"');
    expect(admin).toContain("No runs.");
  });

  it("a run: steps newest first, the plan in order with approvals and what cannot be undone, and the Roll back form for an operator", async () => {
    const t = await html(RunPage({ viewer: viewer({ roles: ["operator"] }), detail, scope: { principal: `agent:${EVIL}` }, operator: true }));
    inert(t);
    // Steps newest first.
    const order = [...t.matchAll(/<tr data-decision="dec-(\d)-/g)].map((m) => m[1]);
    expect(order.slice(0, 4)).toEqual(["4", "3", "2", "1"]);
    // The step undone earlier says so, with its verification.
    expect(t).toMatch(/<td class="rollback"><span class="state ok">compensated<\/span> \(2 attempts\) · by human:&lt;\/script&gt;/);
    expect(t).toContain('<td class="verification"><span class="state ok">verified</span></td>');
    // The plan: the two planned compensations, newest first; the one needing approval marked.
    const plan = /<table class="plan">([\s\S]*?)<\/table>/.exec(t)![1]!;
    expect([...plan.matchAll(/<tr data-decision="dec-(\d)-/g)].map((m) => m[1])).toEqual(["2", "1"]);
    expect(plan).toContain("needs approval");
    expect(plan).toContain("read_note {&quot;id&quot;:&quot;n2&quot;} expect {&quot;exists&quot;:false}");
    expect(t).toContain('id="not-reversible"');
    expect(t).toContain("broke its outputSchema &lt;/script&gt;");
    expect(t).toContain("Already undone: 1 · nothing to undo (read-only or failed): 0 · cannot be undone: 1");
    // The forms: both carry the CSRF token and the run's principal; confirm is required.
    expect(t).toContain('action="/console/runs/run-1/dry-run"');
    expect(t).toContain('action="/console/runs/run-1/rollback"');
    expect(t.match(/name="csrf" value="c&quot;&lt;\/script&gt;/g)?.length).toBe(3); // sign-out, dry run, roll back
    expect(t).toMatch(/<input type="checkbox" id="confirm" name="confirm" value="yes" required=""\/>/);
    expect(t).toContain('name="approve_compensations" value="yes"');
    expect(t).toMatch(/<button type="submit" id="rollback-button">Roll back<\/button>/);
  });

  it("without the operator role: the plan and the dry run, no Roll back form; a dry run's result is shown", async () => {
    const dryRun = {
      run: "run-1",
      principal: "agent:x",
      dry_run: true,
      rollback_id: null,
      steps: detail.plan.compensations.map((c) => ({
        decision_id: c.decision_id,
        upstream: c.upstream,
        tool: c.tool,
        idempotency_key_sha256: null,
        state: c.needs_approval ? ("skipped" as const) : ("would_run" as const),
        attempts: 0,
        verification: null,
        reason: c.needs_approval ? `needs approval ${EVIL}` : null,
        errors: [],
      })),
      remaining: [],
      plan: detail.plan,
      complete: false,
    };
    const t = await html(
      RunPage({ viewer: viewer({ roles: ["auditor"] }), detail, scope: {}, operator: false, dryRun, notice: { kind: "info", text: `Dry run ${EVIL}` } }),
    );
    inert(t);
    expect(t).not.toContain('action="/console/runs/run-1/rollback"');
    expect(t).toContain('id="no-rollback"');
    expect(t).toContain('action="/console/runs/run-1/dry-run"');
    const dry = /<section id="dry-run">([\s\S]*?)<\/section>/.exec(t)![1]!;
    expect([...dry.matchAll(/<span class="state [a-z]*">([a-z_]+)<\/span>/g)].map((m) => m[1])).toEqual(["skipped", "would_run"]);
    // Nothing left to undo: the Roll back controls are disabled.
    const done = runDetailOf([
      step(1, { rollback: { state: "compensated", attempts: 1, verification: "verified", reason: null, at: "x", by: "human:o", key_id: null } }),
    ]);
    const d = await html(RunPage({ viewer: viewer({ roles: ["operator"] }), detail: done, scope: {}, operator: true }));
    expect(d).toContain('id="plan-empty"');
    expect(d).toMatch(/<button type="submit" id="rollback-button" disabled="">/);
  });
});

describe("session helpers", () => {
  it("CSRF tokens are bound to the session and the key", () => {
    const t = csrfToken("secret-a", "grant:j1");
    expect(csrfValid("secret-a", "grant:j1", t)).toBe(true);
    expect(csrfValid("secret-a", "grant:j2", t)).toBe(false);
    expect(csrfValid("secret-b", "grant:j1", t)).toBe(false);
    expect(csrfValid("secret-a", "grant:j1", `${t.slice(0, -1)}A`)).toBe(t.endsWith("A"));
    expect(csrfValid("secret-a", "grant:j1", "")).toBe(false);
    expect(csrfValid("secret-a", "grant:j1", null)).toBe(false);
  });

  it("the Origin of a POST must be present and be this gateway", () => {
    const req = (origin: string | null, host = "127.0.0.1:8787") =>
      new Request("http://127.0.0.1:8787/console/login", { method: "POST", headers: { host, ...(origin === null ? {} : { origin }) } });
    expect(originProblem(req("http://127.0.0.1:8787"), null)).toBeNull();
    expect(originProblem(req("http://localhost:8787", "localhost:8787"), null)).toBeNull();
    expect(originProblem(req("https://gw.example.com"), "https://gw.example.com")).toBeNull();
    for (const o of [null, "null", "http://127.0.0.1:8788", "http://localhost:8787", "https://127.0.0.1:8787", "http://evil.example"])
      expect(originProblem(req(o), null), String(o)).not.toBeNull();
  });

  it("reads one cookie among several", () => {
    const r = new Request(GW, { headers: { cookie: "a=1; __Host-portcullis=tok.en.x; __Host-portcullisX=no" } });
    expect(readCookie(r, "__Host-portcullis")).toBe("tok.en.x");
    expect(readCookie(r, "b")).toBeNull();
  });
});

// ---- through the Worker ------------------------------------------------------------------------

let keys: KeySet;
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
});

async function grant(roles: string[], sub = "human:ana", ttl = 600) {
  return mintGrant(keys, { iss: GW, aud: GW, sub, team: "t1", roles: roles as never, tools: ["alpha__*"], ttlSeconds: ttl }, { maxLifetimeSeconds: 86400 });
}

const FORM = { "content-type": "application/x-www-form-urlencoded" };
const cookieOf = (token: string) => ({ cookie: `__Host-portcullis=${token}` });

function secured(r: Response, what: string) {
  for (const [k, v] of Object.entries(SECURITY_HEADERS)) expect(r.headers.get(k), `${what}: ${k}`).toBe(v);
  expect(r.headers.get("x-frame-options"), what).toBe("DENY");
  expect(r.headers.get("cache-control"), what).toBe("no-store");
  expect(r.headers.get("content-security-policy"), what).toContain("frame-ancestors 'none'");
}

async function signIn(token: string): Promise<Response> {
  return SELF.fetch(`${GW}/console/login`, {
    method: "POST",
    redirect: "manual",
    headers: { ...FORM, origin: GW },
    body: new URLSearchParams({ token }).toString(),
  });
}

describe("the console through the Worker", () => {
  it("carries the security headers on every answer: pages, redirects, errors, unknown paths", async () => {
    const answers = {
      "login page": await SELF.fetch(`${GW}/console/login`),
      "signed-out redirect": await SELF.fetch(`${GW}/console`, { redirect: "manual" }),
      "signed-out hold": await SELF.fetch(`${GW}/console/holds/t1~abc`, { redirect: "manual" }),
      "unknown page": await SELF.fetch(`${GW}/console/nope`, { redirect: "manual" }),
      "cross-origin post": await SELF.fetch(`${GW}/console/login`, { method: "POST", headers: { ...FORM, origin: "http://127.0.0.1:9999" }, body: "token=x" }),
      // Refused by the app-wide Host/Origin check before the console runs: still framed-proof and uncached.
      "foreign-origin post": await SELF.fetch(`${GW}/console/login`, { method: "POST", headers: { ...FORM, origin: "http://evil.example" }, body: "token=x" }),
      "foreign host": await SELF.fetch(`${GW}/console/login`, { headers: { host: "evil.example" } }),
    };
    for (const [what, r] of Object.entries(answers)) secured(r, what);
    expect(answers["login page"].status).toBe(200);
    expect(answers["login page"].headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(answers["signed-out redirect"].status).toBe(303);
    expect(answers["signed-out redirect"].headers.get("location")).toBe("/console/login");
    expect(answers["signed-out hold"].status).toBe(303);
    expect(answers["unknown page"].status).toBe(404);
    expect(answers["cross-origin post"].status).toBe(403);
    expect(answers["foreign-origin post"].status).toBe(403);
    expect(answers["foreign host"].status).toBe(403);
  });

  it("signs in by pasting a grant: a __Host- cookie for the grant's lifetime, the token in no page or redirect", async () => {
    const g = await grant(["approver"], "human:ana", 600);
    const r = await signIn(g.token);
    expect(r.status).toBe(303);
    expect(r.headers.get("location")).toBe("/console");
    const set = r.headers.get("set-cookie")!;
    expect(set).toMatch(/^__Host-portcullis=[^;]+; Path=\/; HttpOnly; Secure; SameSite=Strict; Max-Age=(\d+)$/);
    const maxAge = Number(/Max-Age=(\d+)/.exec(set)![1]);
    expect(maxAge).toBeGreaterThan(590);
    expect(maxAge).toBeLessThanOrEqual(600);
    expect(await r.text()).not.toContain(g.token);
    const page = await SELF.fetch(`${GW}/console/tools`, { headers: cookieOf(g.token) });
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toContain("human:ana");
    expect(text).not.toContain(g.token);
    // The page's forms carry the session's CSRF token: HMAC of the grant's jti.
    expect(text).toContain(`name="csrf" value="${csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${g.jti}`)}"`);
  });

  it("the Tools page names the upstream that did not answer (the unit config's point at a closed port) and why", async () => {
    const g = await grant(["approver"], "human:cy", 600);
    const page = await SELF.fetch(`${GW}/console/tools`, { headers: cookieOf(g.token) });
    expect(page.status).toBe(200);
    const text = await page.text();
    // An approver looks beyond its grant's upstream (alpha): every upstream whose holds it may decide is listed, so both gaps show.
    expect(text).toContain("Could not list the tools of 2 upstreams; their tools are missing below:");
    expect(text).toMatch(/<li><strong>alpha<\/strong> — unreachable: unreachable \([^)]+\)<\/li>/);
    expect(text).toMatch(/<li><strong>beta<\/strong> — unreachable: unreachable \([^)]+\)<\/li>/);
    expect(text).toContain("No tools could be listed for your grant.");
  });

  it("refuses to sign in an agent grant, a forged token, garbage, and a login posted from another origin", async () => {
    const agent = await grant(["agent"]);
    const r1 = await signIn(agent.token);
    expect(r1.status).toBe(403);
    expect(r1.headers.get("set-cookie")).toBeNull();
    const t1 = await r1.text();
    expect(t1).toContain("no console role");
    expect(t1).not.toContain(agent.token);
    const approver = await grant(["approver"]);
    const forged = `${approver.token.slice(0, -4)}AAAA`;
    const r2 = await signIn(forged);
    expect(r2.status).toBe(401);
    expect(await r2.text()).not.toContain(forged);
    expect((await signIn("<img src=x onerror=alert(1)>")).status).toBe(400);
    for (const origin of [null, "http://127.0.0.1:9999", "http://localhost"]) {
      const r = await SELF.fetch(`${GW}/console/login`, {
        method: "POST",
        redirect: "manual",
        headers: { ...FORM, ...(origin ? { origin } : {}) },
        body: new URLSearchParams({ token: approver.token }).toString(),
      });
      expect(r.status, String(origin)).toBe(403);
      expect(r.headers.get("set-cookie"), String(origin)).toBeNull();
    }
  });

  it("re-verifies the cookie on every request: a revoked grant is signed out and its cookie cleared", async () => {
    const g = await grant(["approver"], "human:bo");
    expect((await SELF.fetch(`${GW}/console/tools`, { headers: cookieOf(g.token), redirect: "manual" })).status).toBe(200);
    const admin = await grant(["admin"], "human:root");
    const revoke = await SELF.fetch(`${GW}/v1/grants/${g.jti}/revoke`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${admin.token}` },
      body: JSON.stringify({ exp: g.exp }),
    });
    expect(revoke.status).toBe(200);
    const after = await SELF.fetch(`${GW}/console/tools`, { headers: cookieOf(g.token), redirect: "manual" });
    expect(after.status).toBe(303);
    // The sign-in page returns to the page asked for (a console path only).
    expect(after.headers.get("location")).toBe("/console/login?next=%2Fconsole%2Ftools");
    expect(after.headers.get("set-cookie")).toMatch(/^__Host-portcullis=; .*Max-Age=0$/);
  });

  it("refuses a POST without the session's CSRF token or the gateway's own Origin", async () => {
    const g = await grant(["admin"], "human:cy");
    const other = await grant(["admin"], "human:cy");
    const good = csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${g.jti}`);
    const post = (path: string, fields: Record<string, string>, origin: string | null = GW) =>
      SELF.fetch(`${GW}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: { ...FORM, ...cookieOf(g.token), ...(origin ? { origin } : {}) },
        body: new URLSearchParams(fields).toString(),
      });
    const resolve = { decision: "approve", reason: "ok", action_hash: "a".repeat(64) };
    const halt = { action: "halt", scope: "tool", target: "alpha__x", reason: "drill" };
    for (const [path, fields] of [
      ["/console/holds/t1~0123456789abcdef01234567/resolve", resolve],
      ["/console/killswitch", halt],
      ["/console/runs/run-1/rollback", { confirm: "yes" }],
      ["/console/runs/run-1/dry-run", {}],
      ["/console/logout", {}],
    ] as const) {
      const refusals = {
        "no csrf": await post(path, fields),
        "another session's csrf": await post(path, { ...fields, csrf: csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${other.jti}`) }),
        "a made-up csrf": await post(path, { ...fields, csrf: "A".repeat(43) }),
        "no Origin": await post(path, { ...fields, csrf: good }, null),
        "another loopback port": await post(path, { ...fields, csrf: good }, "http://127.0.0.1:9999"),
        "localhost without the port": await post(path, { ...fields, csrf: good }, "http://localhost"),
      };
      for (const [what, r] of Object.entries(refusals)) {
        expect(r.status, `${path}: ${what}`).toBe(403);
        secured(r, `${path}: ${what}`);
      }
      // A foreign Origin never reaches the console: the app-wide DNS-rebinding check refuses it first (JSON).
      const foreign = await post(path, { ...fields, csrf: good }, "http://evil.example");
      expect(foreign.status).toBe(403);
      expect(((await foreign.json()) as { error: { message: string } }).error.message).toMatch(/Origin is not allowed/);
      expect(await refusals["no csrf"].text()).toContain("CSRF");
    }
    // With both, sign-out works and clears the cookie.
    const out = await post("/console/logout", { csrf: good });
    expect(out.status).toBe(303);
    expect(out.headers.get("location")).toBe("/console/login");
    expect(out.headers.get("set-cookie")).toMatch(/^__Host-portcullis=; .*Max-Age=0$/);
  });

  it("the kill switch asks for confirmation: a halt without it changes nothing and says so; with it, it halts; the page shows the ledger's history", async () => {
    const admin = await grant(["admin"], "human:ks-admin");
    const csrf = csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${admin.jti}`);
    const target = `confirm_${Date.now().toString(36)}__tool`;
    const post = (fields: Record<string, string>) =>
      SELF.fetch(`${GW}/console/killswitch`, {
        method: "POST",
        redirect: "manual",
        headers: { ...FORM, ...cookieOf(admin.token), origin: GW },
        body: new URLSearchParams({ csrf, action: "halt", scope: "tool", target, reason: "drill", ...fields }).toString(),
      });
    const page = await SELF.fetch(`${GW}/console/killswitch`, { headers: cookieOf(admin.token) });
    const text = await page.text();
    expect(text).toMatch(/<input type="checkbox" id="halt-confirm" name="confirm" value="yes" required=""\/>/);
    expect(text).toContain("<h2>History</h2>");
    const unconfirmed = await post({});
    expect(unconfirmed.status).toBe(400);
    expect(await unconfirmed.text()).toContain(`Nothing changed: tick the confirmation to halt tool ${target}`);
    const state = async () => (await (await SELF.fetch(`${GW}/console/killswitch`, { headers: cookieOf(admin.token) })).text()).includes(target);
    expect(await state()).toBe(false);
    const confirmed = await post({ confirm: "yes" });
    expect(confirmed.status).toBe(303);
    expect(confirmed.headers.get("location")).toBe("/console/killswitch?changed=halt");
    expect(await state()).toBe(true);
    // Resume it again (confirmed), so other tests see nothing halted.
    expect((await post({ action: "resume", confirm: "yes" })).status).toBe(303);
    // The history table, from rows as the ledger keeps them, escaped.
    const rendered = await html(
      KillSwitchPage({
        viewer: viewer(),
        snapshot: { version: 3, halts: [] },
        admin: true,
        history: [
          { at: "2026-12-01T12:00:00.000Z", action: "resume", scope: "tool", target: `t${EVIL}`, reason: "done", by: "human:ks-admin", version: 3 },
          { at: "2026-12-01T11:00:00.000Z", action: "halt", scope: "global", target: null, reason: "incident", by: "human:ks-admin", version: 2 },
        ],
      }),
    );
    inert(rendered);
    expect((rendered.match(/<tr>/g) ?? []).length).toBe(3);
    expect(rendered).toContain("(everything)");
    expect(await html(KillSwitchPage({ viewer: viewer(), snapshot: { version: 0, halts: [] }, admin: false, history: null }))).toContain(
      "The history could not be read from the ledger just now.",
    );
  });

  it("keeps the ledger to auditors and admins, and the kill-switch controls to admins", async () => {
    const approver = await grant(["approver"], "human:di");
    const r = await SELF.fetch(`${GW}/console/ledger`, { headers: cookieOf(approver.token) });
    expect(r.status).toBe(403);
    expect(await r.text()).toContain("auditor");
    const ks = await SELF.fetch(`${GW}/console/killswitch`, {
      method: "POST",
      redirect: "manual",
      headers: { ...FORM, ...cookieOf(approver.token), origin: GW },
      body: new URLSearchParams({
        csrf: csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${approver.jti}`),
        action: "halt",
        scope: "global",
        reason: "x",
      }).toString(),
    });
    expect(ks.status).toBe(403);
    // The runs pages: every console role sees the list; a rollback POST without the operator role is refused (403), CSRF and all right.
    const runs = await SELF.fetch(`${GW}/console/runs`, { headers: cookieOf(approver.token) });
    expect(runs.status).toBe(200);
    expect(await runs.text()).toContain("<h1>Runs · team t1</h1>");
    const forged = await SELF.fetch(`${GW}/console/runs/run-1/rollback`, {
      method: "POST",
      redirect: "manual",
      headers: { ...FORM, ...cookieOf(approver.token), origin: GW },
      body: new URLSearchParams({ csrf: csrfToken(env.PORTCULLIS_SIGNING_KEY as string, `grant:${approver.jti}`), confirm: "yes" }).toString(),
    });
    expect(forged.status).toBe(403);
    expect(await forged.text()).toContain("needs the operator role");
    // A run the ledger does not hold for this team: the 404 page.
    const missing = await SELF.fetch(`${GW}/console/runs/no-such-run`, { headers: cookieOf(approver.token) });
    expect(missing.status).toBe(404);
    expect(await missing.text()).toContain("Run not found");
    // The shared store, with one hostile row of the auditor's team and one of another team.
    await env.LEDGER_DB.batch(
      ledgerSchema
        .replace(/^\s*--.*$/gm, "")
        .split(";")
        .map((q) => q.trim())
        .filter(Boolean)
        .map((q) => env.LEDGER_DB.prepare(q)),
    );
    const row = (chain: string, id: string) =>
      env.LEDGER_DB.prepare(
        "INSERT OR REPLACE INTO ledger_entries (chain, seq, v, id, kind, at, prev, hash, body, team, principal, tool, status) VALUES (?, 1, 1, ?, 'decision', ?, ?, ?, ?, ?, ?, ?, ?)",
      ).bind(
        chain,
        id,
        new Date().toISOString(),
        "0".repeat(64),
        "1".repeat(64),
        JSON.stringify({ principal: `agent:${EVIL}`, tool: `tool${EVIL}`, decision: "allow" }),
        chain,
        `agent:${EVIL}`,
        `tool${EVIL}`,
        "ok",
      );
    await row("t1", "console-view-row-t1").run();
    await row("t9", "console-view-row-t9").run();
    const auditor = await grant(["auditor"], "human:ed");
    const page = await SELF.fetch(`${GW}/console/ledger?kind=decision`, { headers: cookieOf(auditor.token) });
    expect(page.status).toBe(200);
    const text = await page.text();
    expect(text).toContain("<h1>Ledger</h1>");
    expect(text).toContain('href="/console/ledger/console-view-row-t1"');
    expect(text).not.toContain("console-view-row-t9");
    inert(text);
    expect((await SELF.fetch(`${GW}/console/ledger?kind=%3Cimg%3E`, { headers: cookieOf(auditor.token) })).status).toBe(400);
  });
});
