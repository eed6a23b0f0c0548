/**
 * [H] Held calls end to end on the production build (wrangler dev, workerd, no eval): a policy
 * rule `require_approval` in front of a recording upstream (whose request log proves what ran)
 * and server-everything. Shows the universal round trip in both eras — held (isError naming the
 * hold id, its expiry and console page), self-approval refused, approved through the JSON API,
 * the identical retry runs exactly once, later retries get the recorded answer back — 100
 * concurrent retries of one approved hold reaching the upstream once with one `hold.consumed`
 * record, rejection, a changed argument being a different action, the CLI (`holds list`,
 * `holds approve`), `holds.wait` completing a call in the same call in both eras, and tasks for
 * held calls in both eras (completed after approval without a retry; failed after rejection).
 * Owns the gateways and upstreams it starts. Must never: leave them running, or reach beyond 127.0.0.1.
 */
import { execFile } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import type { Role } from "../../src/config/roles.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";
import { closeSessions, grantFor, api as sharedApi, ledgerKinds as sharedLedgerKinds, modernRaw as sharedModernRaw, sessionClient, texts } from "./mcp.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
type Gateway = Proc & { url: string; origin: string };
// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

let jwk = "";
let rec: Upstream;
let recWait: Upstream;
let gw: Gateway;
let waiting: Gateway;

const config = (upstreamUrl: string, wait: string) => `
actor: local:holds
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
  wait: ${wait}
upstreams:
  - name: rec
    url: ${upstreamUrl}
    timeout: 30s
  - name: ev
    url: ${inject("everythingUrl")}
    timeout: 30s
mappings:
  rec:
    tools:
      bump: { effect: idempotent }
  ev:
    tools:
      get-sum: { effect: read_only }
      echo: { effect: read_only }
policy:
  rules:
    - id: bumps-need-a-human
      match: { tool: rec__bump }
      decision: require_approval
      reason: bumps change shared state
    - id: sums-need-a-human
      match: { tool: ev__get-sum }
      decision: require_approval
      reason: sums are audited
`;

const grant = async (g: Gateway, sub: string, roles: Role[] = ["agent"], team = "ops"): Promise<string> =>
  (await grantFor(jwk, g.origin, { sub, team, roles, tools: ["*"], ttlSeconds: 900 })).token;

/** One 2026-07-28 request; the JSON-RPC answer (from JSON or SSE) and every message the stream carried. */
const modernRaw = (g: Gateway, bearer: string, method: string, params: Record<string, unknown>, meta: Record<string, unknown> = {}) =>
  sharedModernRaw(g.url, bearer, method, params, { meta, timeoutMs: 90_000 });
const modern = async (g: Gateway, bearer: string, method: string, params: Record<string, unknown>, meta: Record<string, unknown> = {}) =>
  (await modernRaw(g, bearer, method, params, meta)).answer;
const callModern = async (g: Gateway, bearer: string, name: string, args: Record<string, unknown> = {}) =>
  (await modern(g, bearer, "tools/call", { name, arguments: args })).result;

const legacyClient = (g: Gateway, bearer: string): Promise<Client> => sessionClient("holds-e2e", g.url, bearer);
afterEach(closeSessions);

const bumps = (u: Upstream) => u.log.filter((s) => s.method === "tools/call").length;
/** The hold id a held call's refusal names. */
function heldAs(r: Any): string {
  expect(r?.isError, JSON.stringify(r)).toBe(true);
  const m = /held as (\S+~[0-9a-f]{24})/.exec(texts(r));
  expect(m, texts(r)).not.toBeNull();
  return m![1]!;
}

const api = (g: Gateway, bearer: string, path: string, init: { method?: string; body?: unknown } = {}) => sharedApi(g.origin, bearer, path, init);
const resolveHold = (g: Gateway, bearer: string, id: string, decision: "approve" | "reject", reason = "looked at it") =>
  api(g, bearer, `/v1/holds/${encodeURIComponent(id)}/resolve`, { method: "POST", body: { decision, reason } });

/** The team's ledger entries of `kind` (D1 is filled by the LedgerDO's flush: poll, bounded). */
const ledgerKinds = (g: Gateway, auditor: string, kind: string, want: (n: Any[]) => boolean) => sharedLedgerKinds(g.origin, auditor, kind, want);

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("holds-e2e")).privateJwk);
  rec = await startModernOnlyUpstream();
  recWait = await startModernOnlyUpstream();
  const start = async (u: Upstream, wait: string): Promise<Gateway> => {
    const port = await freePort();
    const g = await startPortcullis(config(u.url, wait), port, { PORTCULLIS_SIGNING_KEY: jwk });
    return { ...g, origin: `http://127.0.0.1:${port}` };
  };
  const started = await Promise.allSettled([start(rec, "0"), start(recWait, "20s")]);
  const ok = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  if (ok.length < started.length) {
    await Promise.all(ok.map((g) => g.stop()));
    throw (started.find((s) => s.status === "rejected") as PromiseRejectedResult).reason;
  }
  [gw, waiting] = ok as [Gateway, Gateway];
}, 240_000);
afterAll(async () => {
  await Promise.all([gw, waiting].map((g) => g?.stop()));
  await Promise.all([rec, recWait].map((u) => u?.close()));
});

describe("the universal round trip", () => {
  it("held → self-approval refused → approved → the identical retry runs once → later retries replay (both eras)", async () => {
    const agent = await grant(gw, "agent:roundtrip");
    const approver = await grant(gw, "human:approver-1", ["approver"]);
    const before = bumps(rec);
    const client = await legacyClient(gw, agent);
    const held = await client.callTool({ name: "rec__bump", arguments: {} });
    const id = heldAs(held);
    const t = texts(held);
    expect(t).toContain("bumps change shared state");
    expect(t).toContain(`${gw.origin}/console/holds/${encodeURIComponent(id)}`);
    expect(t).toMatch(/until \d{4}-\d\d-\d\dT/);
    expect(t).toContain("rule: bumps-need-a-human");
    // A retry while pending names the same hold; nothing ran.
    expect(heldAs(await callModern(gw, agent, "rec__bump"))).toBe(id);
    expect(bumps(rec)).toBe(before);

    // The requester can never resolve its own hold, whatever roles its grant carries.
    const self = await grant(gw, "agent:roundtrip", ["agent", "approver"]);
    expect((await resolveHold(gw, self, id, "approve")).status).toBe(403);
    // Another team's approver does not even see it.
    const stranger = await grant(gw, "human:stranger", ["approver"], "elsewhere");
    expect((await api(gw, stranger, `/v1/holds/${encodeURIComponent(id)}`)).status).toBe(404);
    expect((await resolveHold(gw, stranger, id, "approve")).status).toBe(404);

    const shown = await api(gw, approver, `/v1/holds/${encodeURIComponent(id)}`);
    expect(shown.status).toBe(200);
    expect(shown.json.hold.state).toBe("pending");
    expect(shown.json.hold.principal).toBe("agent:roundtrip");
    const ok = await resolveHold(gw, approver, id, "approve", "fine by me");
    expect(ok.status, JSON.stringify(ok.json)).toBe(200);
    expect(ok.json.hold.state).toBe("approved");
    // A second resolution (a double click) is refused: one approval.
    expect((await resolveHold(gw, approver, id, "approve")).status).toBe(409);

    // The identical retry from the other era runs, once.
    const ran = await callModern(gw, agent, "rec__bump");
    expect(ran.isError, JSON.stringify(ran)).not.toBe(true);
    expect(bumps(rec)).toBe(before + 1);
    expect(ran._meta?.["portcullis/receipt"]?.decision_id).toEqual(expect.any(String));
    // Later identical retries get the recorded answer back: not run again.
    const again = await client.callTool({ name: "rec__bump", arguments: {} });
    expect(again.isError).not.toBe(true);
    expect(texts(again)).toBe(texts(ran));
    expect((again as Any)._meta?.["portcullis/receipt"]).toEqual(ran._meta["portcullis/receipt"]);
    expect(bumps(rec)).toBe(before + 1);
    const after = await api(gw, approver, `/v1/holds/${encodeURIComponent(id)}`);
    expect(after.json.hold.state).toBe("consumed");
    expect(after.json.hold.approver).toBe("human:approver-1");
  });

  it("100 concurrent retries of one approved hold reach the upstream once, with one hold.consumed record", async () => {
    const agent = await grant(gw, "agent:crowd");
    const approver = await grant(gw, "human:approver-2", ["approver"]);
    const auditor = await grant(gw, "human:auditor", ["auditor"]);
    const id = heldAs(await callModern(gw, agent, "rec__bump"));
    expect((await resolveHold(gw, approver, id, "approve")).status).toBe(200);
    const before = bumps(rec);
    const answers = await Promise.all(Array.from({ length: 100 }, () => callModern(gw, agent, "rec__bump")));
    expect(bumps(rec)).toBe(before + 1);
    const ran = answers.filter((a) => a?.isError !== true);
    const inFlight = answers.filter((a) => a?.isError === true);
    expect(ran.length).toBeGreaterThanOrEqual(1);
    for (const a of inFlight) expect(texts(a)).toMatch(/is running now/);
    // Every successful answer is the one execution's answer (same receipt).
    const receipts = new Set(ran.map((a) => JSON.stringify(a._meta?.["portcullis/receipt"])));
    expect(receipts.size).toBe(1);
    console.log(`100 concurrent retries: ${ran.length} got the result (1 run + replays), ${inFlight.length} were told it is in flight; upstream calls: 1`);
    const consumed = await ledgerKinds(gw, auditor, "hold.consumed", (e) => e.some((x) => x.body?.hold_id === id));
    expect(consumed.filter((x) => x.body?.hold_id === id)).toHaveLength(1);
  });

  it("a rejection denies with the approver's reason; a changed argument is a different action", async () => {
    const agent = await grant(gw, "agent:rejected");
    const approver = await grant(gw, "human:approver-3", ["approver"]);
    const a = heldAs(await callModern(gw, agent, "ev__get-sum", { a: 1, b: 2 }));
    const b = heldAs(await callModern(gw, agent, "ev__get-sum", { a: 1, b: 3 }));
    expect(b).not.toBe(a);
    expect((await resolveHold(gw, approver, a, "reject", "not today")).status).toBe(200);
    const denied = await callModern(gw, agent, "ev__get-sum", { a: 1, b: 2 });
    expect(denied.isError).toBe(true);
    expect(texts(denied)).toContain("rejected by human:approver-3: not today");
    // Approving one action never lets the other run.
    expect((await resolveHold(gw, approver, b, "approve")).status).toBe(200);
    const other = await callModern(gw, agent, "ev__get-sum", { a: 1, b: 3 });
    expect(texts(other)).toContain("4");
    expect(heldAs(await callModern(gw, agent, "ev__get-sum", { a: 2, b: 3 }))).not.toBe(b);
    // Another principal's identical call is its own action.
    const twin = await grant(gw, "agent:twin");
    expect(heldAs(await callModern(gw, twin, "ev__get-sum", { a: 1, b: 3 }))).not.toBe(b);
  });

  it("the CLI lists pending holds and approves one", async () => {
    const agent = await grant(gw, "agent:cli");
    const approver = await grant(gw, "human:approver-cli", ["approver"]);
    const id = heldAs(await callModern(gw, agent, "ev__get-sum", { a: 20, b: 22 }));
    const run = (args: string[]) =>
      promisify(execFile)(process.execPath, [resolve(root, "bin/portcullis.mjs"), ...args], {
        env: { ...process.env, PORTCULLIS_TOKEN: approver },
        timeout: 60_000,
      });
    const listed = await run(["holds", "list", "--url", gw.origin, "--json"]);
    expect(listed.stdout).toContain(id);
    expect(listed.stdout).not.toContain(approver);
    const approved = await run(["holds", "approve", id, "--reason", "via the CLI", "--url", gw.origin]);
    expect(approved.stdout + approved.stderr).toMatch(/approved/i);
    const r = await callModern(gw, agent, "ev__get-sum", { a: 20, b: 22 });
    expect(r.isError).not.toBe(true);
    expect(texts(r)).toContain("42");
  });
});

describe("holds.wait: the call stays open and completes when approved in time", () => {
  /** Approves the first pending hold of `agent` as soon as it appears (polls the API, bounded). */
  async function approveWhenSeen(g: Gateway, approver: string, principal: string): Promise<string> {
    for (let i = 0; i < 100; i++) {
      const r = await api(g, approver, "/v1/holds?status=pending");
      const h = (r.json?.holds ?? []).find((x: Any) => x.hold?.principal === principal);
      if (h) {
        await new Promise((res) => setTimeout(res, 1500));
        const ok = await resolveHold(g, approver, h.hold.id, "approve");
        expect(ok.status).toBe(200);
        return h.hold.id;
      }
      await new Promise((res) => setTimeout(res, 200));
    }
    throw new Error("no pending hold appeared");
  }

  it("legacy: progress notifications while held, then the result in the same call", async () => {
    const agent = await grant(waiting, "agent:waits-legacy");
    const approver = await grant(waiting, "human:approver-w1", ["approver"]);
    const client = await legacyClient(waiting, agent);
    const before = bumps(recWait);
    const progress: Any[] = [];
    const [r] = await Promise.all([
      client.callTool({ name: "rec__bump", arguments: {} }, { onprogress: (p: Any) => progress.push(p), timeout: 60_000 }),
      approveWhenSeen(waiting, approver, "agent:waits-legacy"),
    ]);
    expect(r.isError, JSON.stringify(r)).not.toBe(true);
    expect(bumps(recWait)).toBe(before + 1);
    expect(progress.length).toBeGreaterThanOrEqual(1);
    expect(String(progress[0].message)).toMatch(/waiting for an approver/);
  });

  it("modern: the held call answers on the same request once approved", async () => {
    const agent = await grant(waiting, "agent:waits-modern");
    const approver = await grant(waiting, "human:approver-w2", ["approver"]);
    const before = bumps(recWait);
    const started = Date.now();
    const [out] = await Promise.all([
      modernRaw(waiting, agent, "tools/call", { name: "rec__bump", arguments: {} }, { progressToken: "wait-1" }),
      approveWhenSeen(waiting, approver, "agent:waits-modern"),
    ]);
    expect(out.answer.result?.isError, JSON.stringify(out.answer)).not.toBe(true);
    expect(bumps(recWait)).toBe(before + 1);
    expect(out.messages.some((m) => m.method === "notifications/progress" && m.params?.progressToken === "wait-1")).toBe(true);
    console.log(`modern held call answered in the same request after ${Date.now() - started} ms`);
  });

  it("not approved within the wait: the call answers with the hold, and nothing ran", async () => {
    const agent = await grant(waiting, "agent:waits-out");
    const before = bumps(recWait);
    const started = Date.now();
    const r = await callModern(waiting, agent, "ev__get-sum", { a: 5, b: 6 });
    heldAs(r);
    expect(Date.now() - started).toBeGreaterThanOrEqual(19_000);
    expect(bumps(recWait)).toBe(before);
  }, 60_000);
});

describe("tasks for held calls", () => {
  const TASKS = { "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } } };

  it("modern: a task that completes with the result after approval (no retry), and one that fails after rejection", async () => {
    const agent = await grant(gw, "agent:tasks-modern");
    const approver = await grant(gw, "human:approver-t1", ["approver"]);
    const before = bumps(rec);
    const created = (await modern(gw, agent, "tools/call", { name: "rec__bump", arguments: {} }, TASKS)).result;
    expect(created.resultType).toBe("task");
    expect(created.status).toBe("working");
    expect(created.taskId).toMatch(/^portcullis-hold:/);
    expect(Number.isInteger(created.ttlMs) && Number.isInteger(created.pollIntervalMs)).toBe(true);
    const holdId = created.taskId.slice("portcullis-hold:".length);
    expect((await modern(gw, agent, "tasks/get", { taskId: created.taskId }, TASKS)).result.status).toBe("working");
    // Another principal cannot see it: answered like a task that does not exist.
    const other = await grant(gw, "agent:tasks-other");
    expect((await modern(gw, other, "tasks/get", { taskId: created.taskId }, TASKS)).error?.code).toBe(-32602);
    expect((await resolveHold(gw, approver, holdId, "approve")).status).toBe(200);
    const done = (await modern(gw, agent, "tasks/get", { taskId: created.taskId }, TASKS)).result;
    expect(done.status, JSON.stringify(done)).toBe("completed");
    expect(done.result?.isError).not.toBe(true);
    expect(bumps(rec)).toBe(before + 1);
    // Polling again never runs it twice.
    expect((await modern(gw, agent, "tasks/get", { taskId: created.taskId }, TASKS)).result.status).toBe("completed");
    expect(bumps(rec)).toBe(before + 1);

    const second = (await modern(gw, agent, "tools/call", { name: "ev__get-sum", arguments: { a: 7, b: 7 } }, TASKS)).result;
    expect((await resolveHold(gw, approver, second.taskId.slice("portcullis-hold:".length), "reject", "no sevens")).status).toBe(200);
    const failed = (await modern(gw, agent, "tasks/get", { taskId: second.taskId }, TASKS)).result;
    expect(failed.status).toBe("failed");
    expect(failed.error?.message ?? failed.statusMessage).toContain("no sevens");
  });

  it("legacy (2025-11-25): tools/call with params.task gets a task; tasks/result hands out the result after approval", async () => {
    const agent = await grant(gw, "agent:tasks-legacy");
    const approver = await grant(gw, "human:approver-t2", ["approver"]);
    const h = { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${agent}` };
    const post = async (body: unknown, session?: string): Promise<{ res: Response; msg: Any }> => {
      const res = await fetch(gw.url, {
        method: "POST",
        headers: { ...h, ...(session ? { "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" } : {}) },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(90_000),
      });
      const text = await res.text();
      if (res.status === 202 || text === "") return { res, msg: null };
      const line = text.includes("data:")
        ? text
            .split("\n")
            .filter((l) => l.startsWith("data:") && l.length > 6)
            .pop()!
            .slice(5)
        : text;
      return { res, msg: JSON.parse(line) };
    };
    const init = await post({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: { tasks: { requests: { tools: { call: {} } } } }, clientInfo: { name: "raw", version: "1" } },
    });
    const session = init.res.headers.get("mcp-session-id")!;
    expect(session).toBeTruthy();
    await post({ jsonrpc: "2.0", method: "notifications/initialized" }, session);
    const before = bumps(rec);
    const created = (await post({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "rec__bump", arguments: {}, task: { ttl: 60_000 } } }, session))
      .msg.result;
    expect(created.task.status).toBe("working");
    expect(created.task.taskId).toMatch(/^portcullis-hold:/);
    const taskId = created.task.taskId;
    expect((await post({ jsonrpc: "2.0", id: 3, method: "tasks/get", params: { taskId } }, session)).msg.result.status).toBe("working");
    expect((await resolveHold(gw, approver, taskId.slice("portcullis-hold:".length), "approve")).status).toBe(200);
    const result = (await post({ jsonrpc: "2.0", id: 4, method: "tasks/result", params: { taskId } }, session)).msg.result;
    expect(result.isError, JSON.stringify(result)).not.toBe(true);
    expect(result._meta["io.modelcontextprotocol/related-task"].taskId).toBe(taskId);
    expect(bumps(rec)).toBe(before + 1);
    expect((await post({ jsonrpc: "2.0", id: 5, method: "tasks/get", params: { taskId } }, session)).msg.result.status).toBe("completed");
    expect(bumps(rec)).toBe(before + 1);
  });
});
