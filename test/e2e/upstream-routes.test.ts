/**
 * Per-upstream routes `/mcp/<upstream>` end to end on the production build (wrangler dev,
 * workerd, no eval): one gateway in enforce with two upstreams — server-everything (`ev`,
 * legacy-only) and the dual-era conformance fixture (`conf`) — shared by /mcp and the routes.
 * Shows: SDK v2 clients of both eras on a route see that upstream's own names only and call its
 * tools while /mcp shows both prefixed; a grant limited to `ev__*` gets the same 404 JSON-RPC
 * answer for /mcp/conf as for an upstream that does not exist, and a narrower grant lists only
 * its tools; policy, rate limits, holds and the ledger see /mcp's names (a deny refuses on the
 * route exactly as on /mcp, with the same record; a rate limit and a hold are one action on both
 * paths); a legacy session lives only on the route and with the principal that opened it; a task
 * made on a route is its creator's on both paths and nobody else's; the protected-resource
 * metadata of any route names /mcp. Owns the gateway it starts (the upstreams are the shared
 * ones of global-setup.ts). Must never: leave it running, or reach beyond 127.0.0.1.
 */
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { api, closeSessions, type Era, grantFor, ledgerKinds, modernRaw, sessionClient, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const TASKS = "io.modelcontextprotocol/tasks";
let jwk = "";
let gw: Proc & { url: string };
let origin = "";

const config = () => `
actor: local:routes
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
  wait: 0
upstreams:
  - name: ev
    url: ${inject("everythingUrl")}
    timeout: 30s
  - name: conf
    url: ${inject("conformanceUrl")}
    timeout: 30s
mappings:
  ev:
    tools:
      echo: { effect: read_only }
      get-sum: { effect: read_only }
      get-tiny-image: { effect: read_only }
policy:
  rules:
    - id: conf-runs
      match: { upstream: conf }
      decision: allow
      reason: the conformance fixture is harmless
    - id: no-env
      match: { tool: ev__get-env }
      decision: deny
      reason: the environment is off limits
    - id: big-sums
      match: { tool: ev__get-sum }
      when: "args.a > 100"
      decision: deny
      reason: sums over 100 are refused
    - id: mid-sums
      match: { tool: ev__get-sum }
      when: "args.a > 50"
      decision: require_approval
      reason: sums over 50 are audited
    - id: few-images
      match: { tool: ev__get-tiny-image }
      decision: allow
      reason: a few images
      obligations: ["rate_limit:2/1m"]
`;

const grant = async (sub: string, tools: string[] = ["*"], roles: Role[] = ["agent"]) =>
  (await grantFor(jwk, origin, { sub, team: "routes", roles, tools, ttlSeconds: 900 })).token;
const route = (name: string) => `${origin}/mcp/${name}`;
const mcp = () => `${origin}/mcp`;

/** One 2026-07-28 request; its JSON-RPC answer. */
const modern = async (url: string, bearer: string, method: string, params: Record<string, unknown>, meta: Record<string, unknown> = {}): Promise<Any> =>
  (await modernRaw(url, bearer, method, params, { meta, timeoutMs: 60_000 })).answer;
const call = async (url: string, bearer: string, name: string, args: Record<string, unknown> = {}): Promise<Any> =>
  (await modern(url, bearer, "tools/call", { name, arguments: args })).result;

/**
 * One POST (or other method) with exact headers; status, headers and the answer: the body parsed
 * as JSON, the JSON-RPC response of an SSE body (its last `data:` message with a result or an
 * error), or `{ text }`. Never used for a stream that stays open.
 */
async function http(url: string, bearer: string | null, init: { method?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const r = await fetch(url, {
    method: init.method ?? "POST",
    headers: {
      ...(init.body !== undefined ? { "content-type": "application/json" } : {}),
      accept: "application/json, text/event-stream",
      ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
      ...(init.headers ?? {}),
    },
    ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await r.text();
  let json: Any = { text };
  if (r.headers.get("content-type")?.includes("text/event-stream")) {
    const messages = text
      .split("\n")
      .filter((l) => l.startsWith("data:") && l.slice(5).trim() !== "")
      .map((l) => JSON.parse(l.slice(5)));
    json = messages.filter((m) => "result" in m || "error" in m).at(-1) ?? json;
  } else {
    try {
      json = JSON.parse(text);
    } catch {
      /* not JSON: { text } */
    }
  }
  return { status: r.status, headers: r.headers, json };
}

const INIT = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "routes-e2e", version: "1" } },
};
/** A legacy session opened with raw HTTP at `url`; its id. */
async function openSession(url: string, bearer: string): Promise<string> {
  const r = await http(url, bearer, { body: INIT });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  const sid = r.headers.get("mcp-session-id")!;
  expect(sid).toMatch(/^[0-9a-f]{48}$/);
  const ack = await http(url, bearer, {
    body: { jsonrpc: "2.0", method: "notifications/initialized" },
    headers: { "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" },
  });
  expect(ack.status).toBe(202);
  return sid;
}
const onSession = (url: string, bearer: string, sid: string, method = "tools/list", id = 2) =>
  http(url, bearer, { body: { jsonrpc: "2.0", id, method, params: {} }, headers: { "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" } });

const toolNames = async (url: string, bearer: string, era: Era): Promise<string[]> => {
  const client = await sessionClient("routes-e2e", url, bearer, era);
  return (await client.listTools()).tools.map((t) => t.name).sort();
};
/** The decision id a refusal's text names. */
const decisionOf = (r: Any): string => /decision: ([^,)\s]+)/.exec(texts(r))?.[1] ?? "";
/** The hold id a held call's text names. */
const heldAs = (r: Any): string => /held as (\S+~[0-9a-f]{24})/.exec(texts(r))?.[1] ?? "";

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("routes-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(config(), port, { PORTCULLIS_SIGNING_KEY: jwk });
}, 180_000);
afterAll(async () => {
  await gw?.stop();
});
afterEach(closeSessions);

describe("/mcp/<upstream> shows one upstream under its own names", () => {
  for (const era of ["legacy", { pin: "2026-07-28" }] as Era[]) {
    const label = era === "legacy" ? "2025-11-25" : "2026-07-28";
    it(`an SDK v2 client (${label}) lists and calls each upstream's own names on its route; /mcp shows both prefixed`, async () => {
      const bearer = await grant(`agent:names-${label}`);
      const ev = await sessionClient("routes-e2e", route("ev"), bearer, era);
      const evTools = (await ev.listTools()).tools.map((t) => t.name);
      expect(evTools).toEqual(expect.arrayContaining(["echo", "get-sum", "get-tiny-image"]));
      // Only ev's tools, unprefixed; get-env is denied unconditionally by a rule written for /mcp's name; no gateway tool.
      expect(evTools.filter((n) => n.includes("__") || n.startsWith("test_") || n.startsWith("portcullis."))).toEqual([]);
      expect(evTools).not.toContain("get-env");
      expect(texts(await ev.callTool({ name: "echo", arguments: { message: `hi ${label}` } }))).toContain(`Echo: hi ${label}`);

      const conf = await sessionClient("routes-e2e", route("conf"), bearer, era);
      const confTools = (await conf.listTools()).tools.map((t) => t.name);
      expect(confTools).toEqual(expect.arrayContaining(["test_simple_text", "test_image_content"]));
      expect(confTools.filter((n) => n.includes("__") || n === "echo" || n.startsWith("portcullis."))).toEqual([]);
      expect(texts(await conf.callTool({ name: "test_simple_text", arguments: {} }))).toContain("simple text response");
      // Prompts and resource URIs are the upstream's own too.
      expect((await conf.listPrompts()).prompts.map((p) => p.name)).toContain("test_simple_prompt");
      const read = await conf.readResource({ uri: "test://static-text" });
      expect(read.contents[0]).toMatchObject({ uri: "test://static-text", text: "This is the content of the static text resource." });

      const whole = await sessionClient("routes-e2e", mcp(), bearer, era);
      const all = (await whole.listTools()).tools.map((t) => t.name);
      expect(all).toEqual(expect.arrayContaining(["ev__echo", "conf__test_simple_text", "portcullis.preview_impact"]));
      expect(all.filter((n) => !n.startsWith("ev__") && !n.startsWith("conf__") && !n.startsWith("portcullis."))).toEqual([]);
      expect(all.filter((n) => n.startsWith("ev__")).map((n) => n.slice(4))).toEqual(evTools);
      expect(all.filter((n) => n.startsWith("conf__")).map((n) => n.slice(6))).toEqual(confTools);
      expect(texts(await whole.callTool({ name: "ev__echo", arguments: { message: "whole" } }))).toContain("Echo: whole");
    });
  }
});

describe("the grant decides which routes exist", () => {
  it("a grant limited to ev__* gets for /mcp/conf the same 404 JSON-RPC answer as for an upstream that does not exist", async () => {
    const evOnly = await grant("agent:ev-only", ["ev__*"]);
    const answers: Record<string, Any[]> = {};
    for (const name of ["conf", "nope"]) {
      const legacyInit = await http(route(name), evOnly, { body: INIT });
      const modernList = await http(route(name), evOnly, {
        body: {
          jsonrpc: "2.0",
          id: 3,
          method: "tools/list",
          params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
        },
        headers: { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" },
      });
      const get = await http(route(name), evOnly, { method: "GET", headers: { accept: "text/event-stream" } });
      for (const r of [legacyInit, modernList, get]) {
        expect(r.status, name).toBe(404);
        expect(r.json).toEqual({
          jsonrpc: "2.0",
          id: null,
          error: { code: -32000, message: `Not Found: no upstream named "${name}" is available to this grant (/mcp serves every upstream it reaches)` },
        });
      }
      answers[name] = [legacyInit.json, modernList.json, get.json];
    }
    // Word for word the same but for the name: nothing tells that conf exists.
    expect(JSON.stringify(answers.conf).replaceAll("conf", "X")).toBe(JSON.stringify(answers.nope).replaceAll("nope", "X"));
    // No grant, no answer at all about names: the gate comes first.
    expect((await http(route("nope"), null, { body: INIT })).status).toBe(401);
    expect((await http(route("ev"), evOnly, { method: "PUT", body: INIT })).status).toBe(405);
    // The grant's own upstream is there, in both eras, with every tool /mcp would show it.
    const full = await toolNames(route("ev"), await grant("agent:ev-full"), "legacy");
    expect(await toolNames(route("ev"), evOnly, "legacy")).toEqual(full);
    expect(await toolNames(route("ev"), evOnly, { pin: "2026-07-28" })).toEqual(full);
  });

  it("a grant of two tools lists exactly those on the route, and a call outside it is refused under /mcp's name", async () => {
    const narrow = await grant("agent:narrow", ["ev__echo", "ev__get-sum"]);
    expect(await toolNames(route("ev"), narrow, "legacy")).toEqual(["echo", "get-sum"]);
    expect(await toolNames(route("ev"), narrow, { pin: "2026-07-28" })).toEqual(["echo", "get-sum"]);
    const outside = await call(route("ev"), narrow, "get-tiny-image");
    expect(outside.isError).toBe(true);
    expect(texts(outside)).toContain('tool "ev__get-tiny-image" is outside the grant of agent:narrow');
    expect(texts(outside)).toContain("check: grant");
    // An unknown tool (here /mcp's spelling of echo, which the route does not know) is named as the client sent it.
    const unknown = await modern(route("ev"), await grant("agent:unknown"), "tools/call", { name: "ev__echo", arguments: { message: "x" } });
    expect(unknown.error).toEqual({ code: -32602, message: "Unknown tool: ev__echo" });
  });
});

describe("governance sees /mcp's names on every route", () => {
  it("a policy deny refuses get-sum on /mcp/ev exactly as ev__get-sum on /mcp, with the same ledger record; allowed calls get the same decision record", async () => {
    const p = await grant("agent:policy");
    const auditor = await grant("human:routes-auditor", ["*"], ["auditor"]);
    const onRoute = await call(route("ev"), p, "get-sum", { a: 500, b: 1 });
    const onMcp = await call(mcp(), p, "ev__get-sum", { a: 500, b: 1 });
    for (const r of [onRoute, onMcp]) {
      expect(r.isError, JSON.stringify(r)).toBe(true);
      expect(texts(r)).toMatch(/^Blocked by Portcullis: .*sums over 100 are refused.* \(check: rule, rule: big-sums, decision: /);
    }
    const [routeId, mcpId] = [decisionOf(onRoute), decisionOf(onMcp)];
    expect(texts(onRoute).replace(routeId, "<id>")).toBe(texts(onMcp).replace(mcpId, "<id>"));
    // A legacy client on the route is refused the same way.
    const legacy = await sessionClient("routes-e2e", route("ev"), p);
    const onSessionRoute = await legacy.callTool({ name: "get-sum", arguments: { a: 500, b: 1 } });
    const sessionId = decisionOf(onSessionRoute);
    expect(texts(onSessionRoute).replace(sessionId, "<id>")).toBe(texts(onMcp).replace(mcpId, "<id>"));

    const blocked = await ledgerKinds(origin, auditor, "blocked", (e) => [routeId, mcpId, sessionId].every((id) => e.some((x) => x.id === id)));
    // Each request is its own W3C trace: the records read the same but for their trace ids.
    const traced = (id: string) => blocked.find((x) => x.id === id)?.body;
    expect(new Set([routeId, mcpId, sessionId].map((id) => traced(id)?.trace_id)).size).toBe(3);
    const body = (id: string) => {
      const { trace_id: _t, ...rest } = traced(id) ?? {};
      return rest;
    };
    expect(body(routeId)).toEqual(body(mcpId));
    expect(body(mcpId)).toMatchObject({ principal: "agent:policy", team: "routes", tool: "ev__get-sum", check: "rule", rule: "big-sums", run: null });
    const { run, ...rest } = body(sessionId);
    expect(run).toMatch(/^[0-9a-f]{48}$/); // the legacy session is the run
    expect({ ...rest, run: null }).toEqual(body(mcpId));

    // Allowed: the receipt names a decision record that reads the same on both paths.
    const ranRoute = await call(route("ev"), p, "get-sum", { a: 2, b: 3 });
    const ranMcp = await call(mcp(), p, "ev__get-sum", { a: 2, b: 3 });
    for (const r of [ranRoute, ranMcp]) expect(texts(r)).toContain("5");
    const ids = [ranRoute, ranMcp].map((r) => r._meta?.["portcullis/receipt"]?.decision_id as string);
    expect(ids.every((id) => typeof id === "string" && id.length > 0)).toBe(true);
    const decisions = await ledgerKinds(origin, auditor, "decision", (e) => ids.every((id) => e.some((x) => x.id === id)));
    const [dRoute, dMcp] = ids.map((id) => decisions.find((x) => x.id === id)?.body);
    expect(dRoute.trace.trace_id).not.toBe(dMcp.trace.trace_id);
    const { trace: _r, ...routeRest } = dRoute;
    const { trace: _m, ...mcpRest } = dMcp;
    expect(routeRest).toEqual(mcpRest);
    expect(dRoute).toMatchObject({ principal: "agent:policy", upstream: "ev", tool: "get-sum", decision: "allow" });
  });

  it("a rate limit counts calls on the route and on /mcp together", async () => {
    const r = await grant("agent:rate");
    expect((await call(route("ev"), r, "get-tiny-image")).isError).not.toBe(true);
    expect((await call(mcp(), r, "ev__get-tiny-image")).isError).not.toBe(true);
    const third = await call(route("ev"), r, "get-tiny-image");
    expect(third.isError).toBe(true);
    expect(texts(third)).toContain('rate limit "rate_limit:2/1m" reached: 2 calls of ev__get-tiny-image');
  });

  it("a hold made on the route is the same hold on /mcp: approved once, it runs once, and the route gets the stored answer back", async () => {
    const agent = await grant("agent:held");
    const approver = await grant("human:routes-approver", ["*"], ["approver"]);
    const held = await call(route("ev"), agent, "get-sum", { a: 60, b: 1 });
    const id = heldAs(held);
    expect(id, texts(held)).not.toBe("");
    expect(texts(held)).toContain("rule: mid-sums");
    // The identical action on /mcp names the same pending hold.
    expect(heldAs(await call(mcp(), agent, "ev__get-sum", { a: 60, b: 1 }))).toBe(id);
    const shown = await api(origin, approver, `/v1/holds/${encodeURIComponent(id)}`);
    expect(shown.status).toBe(200);
    expect(shown.json.hold).toMatchObject({ principal: "agent:held", upstream: "ev", tool: "get-sum", exposedName: "ev__get-sum", state: "pending" });
    const ok = await api(origin, approver, `/v1/holds/${encodeURIComponent(id)}/resolve`, { method: "POST", body: { decision: "approve", reason: "fine" } });
    expect(ok.status, JSON.stringify(ok.json)).toBe(200);
    // Approved for one path, consumed on the other: the call runs once, the route gets that answer.
    const ran = await call(mcp(), agent, "ev__get-sum", { a: 60, b: 1 });
    expect(texts(ran)).toContain("61");
    const again = await call(route("ev"), agent, "get-sum", { a: 60, b: 1 });
    expect(again._meta?.["portcullis/receipt"]).toEqual(ran._meta?.["portcullis/receipt"]);
    expect((await api(origin, approver, `/v1/holds/${encodeURIComponent(id)}`)).json.hold.state).toBe("consumed");
  });

  it("a kill switch halt of the tool ev__echo halts echo on the route too, and nothing else", async () => {
    const agent = await grant("agent:halted");
    const admin = await grant("human:routes-admin", ["*"], ["admin"]);
    const halt = await api(origin, admin, "/v1/killswitch/halt", { method: "POST", body: { scope: "tool", target: "ev__echo", reason: "echo drill" } });
    expect(halt.status, JSON.stringify(halt.json)).toBe(200);
    try {
      await new Promise((r) => setTimeout(r, 1200)); // isolates cache the kill switch for at most 1 s
      for (const r of [await call(route("ev"), agent, "echo", { message: "x" }), await call(mcp(), agent, "ev__echo", { message: "x" })]) {
        expect(r.isError, JSON.stringify(r)).toBe(true);
        expect(texts(r)).toMatch(/^Blocked by Portcullis: halted .*echo drill.*check: kill_switch/);
      }
      expect(texts(await call(route("ev"), agent, "get-sum", { a: 1, b: 1 }))).toContain("2");
    } finally {
      const resumed = await api(origin, admin, "/v1/killswitch/resume", { method: "POST", body: { scope: "tool", target: "ev__echo", reason: "drill over" } });
      expect(resumed.status, JSON.stringify(resumed.json)).toBe(200);
    }
  });
});

describe("state stays where it was made", () => {
  it("a legacy session lives only on the route and with the principal that opened it", async () => {
    const p = await grant("agent:session-p");
    const q = await grant("agent:session-q");
    const sid = await openSession(route("ev"), p);
    const mine = await onSession(route("ev"), p, sid);
    expect(mine.status).toBe(200);
    expect(mine.json.result.tools.map((t: Any) => t.name)).toContain("echo");
    for (const [url, who] of [
      [route("conf"), p],
      [mcp(), p],
      [route("ev"), q],
    ] as const) {
      const r = await onSession(url, who, sid, "tools/list", 9);
      expect(r.status, url).toBe(404);
      expect(r.json.error.message).toMatch(/^Session not found/);
      expect(r.json.id).toBe(9);
    }
    // GET and DELETE elsewhere are 404 too, and the DELETE ends nothing.
    const headers = { "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" };
    expect((await http(mcp(), p, { method: "GET", headers: { ...headers, accept: "text/event-stream" } })).status).toBe(404);
    expect((await http(route("conf"), p, { method: "DELETE", headers })).status).toBe(404);
    expect((await http(route("ev"), q, { method: "DELETE", headers })).status).toBe(404);
    expect((await onSession(route("ev"), p, sid)).status).toBe(200);
    // And a /mcp session is not served on a route.
    const whole = await openSession(mcp(), p);
    expect((await onSession(route("ev"), p, whole)).status).toBe(404);
    expect((await onSession(mcp(), p, whole)).status).toBe(200);
    for (const [url, id] of [
      [route("ev"), sid],
      [mcp(), whole],
    ] as const) {
      expect((await http(url, p, { method: "DELETE", headers: { ...headers, "mcp-session-id": id } })).status).toBe(200);
      expect((await onSession(url, p, id)).status).toBe(404);
    }
  });

  it("a task started on /mcp/conf is its creator's on both paths (unprefixed there, prefixed on /mcp) and unknown to anyone else", async () => {
    const d = await grant("agent:tasks-d");
    const c = await grant("agent:tasks-c");
    const withTasks = { "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS]: {} } } };
    const started = await modern(route("conf"), d, "tools/call", { name: "slow_compute", arguments: { seconds: 1 } }, withTasks);
    expect(started.result?.resultType, JSON.stringify(started)).toBe("task");
    const taskId = started.result.taskId as string;
    expect(taskId.startsWith("conf__")).toBe(false);
    const mineOnRoute = await modern(route("conf"), d, "tasks/get", { taskId }, withTasks);
    expect(mineOnRoute.result?.taskId).toBe(taskId);
    const mineOnMcp = await modern(mcp(), d, "tasks/get", { taskId: `conf__${taskId}` }, withTasks);
    expect(mineOnMcp.result?.taskId).toBe(`conf__${taskId}`);
    const theirsOnRoute = await modern(route("conf"), c, "tasks/get", { taskId }, withTasks);
    const theirsOnMcp = await modern(mcp(), c, "tasks/get", { taskId: `conf__${taskId}` }, withTasks);
    const missing = await modern(route("conf"), c, "tasks/get", { taskId: "no-such-task" }, withTasks);
    expect(theirsOnRoute.error).toEqual({ code: -32602, message: `Unknown task: ${taskId}` });
    expect(theirsOnMcp.error).toEqual({ code: -32602, message: `Unknown task: conf__${taskId}` });
    expect(missing.error).toEqual({ code: -32602, message: "Unknown task: no-such-task" });
  });
});

describe("protected resource metadata", () => {
  it("every /mcp/<name> document names /mcp (grants are for the gateway), whether or not the upstream exists; a 401 points at /mcp's", async () => {
    const base = await http(`${origin}/.well-known/oauth-protected-resource/mcp`, null, { method: "GET" });
    expect(base.status).toBe(200);
    expect(base.json.resource).toBe(`${origin}/mcp`);
    for (const name of ["ev", "conf", "nope"]) {
      const r = await http(`${origin}/.well-known/oauth-protected-resource/mcp/${name}`, null, { method: "GET" });
      expect(r.status, name).toBe(200);
      expect(r.json).toEqual(base.json);
    }
    const challenged = await http(route("ev"), null, { body: INIT });
    expect(challenged.status).toBe(401);
    expect(challenged.headers.get("www-authenticate")).toContain(`resource_metadata="${origin}/.well-known/oauth-protected-resource/mcp"`);
  });
});
