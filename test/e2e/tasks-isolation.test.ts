/**
 * Tasks belong to the principal that created them, on the production build: a gateway fronting
 * the conformance upstream (as `dual`, namespaced) with two grants — D may start tasks, C may only
 * greet. D starts `slow_compute` and `confirm_delete` tasks; C's tasks/get, tasks/update and
 * tasks/cancel on D's task ids get exactly the answer of a task id that does not exist, the
 * upstream (recording every message it receives) gets none of them, and D's tasks are untouched:
 * its own tasks/get, tasks/update and tasks/cancel still work. Concurrent requests of both
 * principals each get their own answer.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";

const TASKS = "io.modelcontextprotocol/tasks";

/** What the upstream received: method, task id and which upstream request id (all of it, in order). */
const received: { method: string; taskId?: string; body: string }[] = [];
let upstream: ConformanceUpstream;
let gateway: Proc & { url: string };
const tokens: Record<"C" | "D", string> = { C: "", D: "" };

beforeAll(async () => {
  upstream = await startConformanceUpstream({
    port: 0,
    host: "127.0.0.1",
    onMessage: (m) => {
      const p = (m.params ?? {}) as Record<string, unknown>;
      received.push({ method: String(m.method), ...(typeof p.taskId === "string" ? { taskId: p.taskId } : {}), body: JSON.stringify(m) });
    },
  });
  const signingKey = JSON.stringify((await generateSigningKey("tasks-e2e")).privateJwk);
  gateway = await startPortcullis(
    `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: dual
    url: ${upstream.url}
    namespace: true
    timeout: 30s
`,
    await freePort(),
    { PORTCULLIS_SIGNING_KEY: signingKey },
  );
  const origin = new URL(gateway.url).origin;
  const keys = await parseKeySet(signingKey);
  const grant = async (sub: string, tools: string[]) =>
    (await mintGrant(keys, { iss: origin, aud: origin, sub, team: "e2e", roles: ["agent"], tools, ttlSeconds: 900 }, { maxLifetimeSeconds: 86400 })).token;
  tokens.D = await grant("agent:tasks-d", ["dual__*"]);
  tokens.C = await grant("agent:tasks-c", ["dual__greet"]);
}, 180_000);
afterAll(async () => {
  await Promise.all([gateway?.stop(), upstream?.close()]);
});

// biome-ignore lint/suspicious/noExplicitAny: answers are read loosely
type Answer = { status: number; body: any };

/** One 2026-07-28 request with the SEP-2243 headers and the tasks extension declared; the JSON-RPC answer (JSON or the response event of an SSE body). */
async function post(who: "C" | "D", method: string, params: Record<string, unknown>, id: number | string): Promise<Answer> {
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS]: {} } } };
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": method,
    authorization: `Bearer ${tokens[who]}`,
  };
  const name = method === "tools/call" ? params.name : params.taskId;
  if (typeof name === "string") headers["mcp-name"] = name;
  const r = await fetch(gateway.url, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id, method, params: { ...params, _meta: meta } }),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await r.text();
  if (!(r.headers.get("content-type") ?? "").includes("text/event-stream")) return { status: r.status, body: JSON.parse(text) };
  const events = text
    .split("\n")
    .filter((l) => l.startsWith("data:"))
    .map((l) => JSON.parse(l.slice(5)));
  return { status: r.status, body: events.find((e) => e.id === id && ("result" in e || "error" in e)) };
}

/** D's task in `want` (or a terminal state) by polling tasks/get, at most `ms`. */
async function until(taskId: string, want: string[], ms = 20_000): Promise<Answer> {
  const deadline = Date.now() + ms;
  let last: Answer | undefined;
  for (let i = 0; Date.now() < deadline; i++) {
    last = await post("D", "tasks/get", { taskId }, `poll-${i}`);
    if ([...want, "completed", "failed", "cancelled"].includes(last.body?.result?.status)) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`task ${taskId} never reached ${want.join("/")}: ${JSON.stringify(last?.body)}`);
}

async function startTask(name: string, args: Record<string, unknown>, id: string): Promise<string> {
  const r = await post("D", "tools/call", { name, arguments: args }, id);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  expect(r.body.result.resultType, JSON.stringify(r.body)).toBe("task");
  expect(r.body.result.taskId).toMatch(/^dual__/);
  return r.body.result.taskId as string;
}

/** The answer with the task id it names replaced, so a refusal for one id compares with a refusal for another. */
const sameBut = (a: Answer, id: string) => JSON.parse(JSON.stringify(a).split(id).join("<id>")) as unknown;
const upstreamId = (exposed: string) => exposed.slice("dual__".length);

describe("tasks belong to the principal that created them", () => {
  let computed: string;
  let pendingDelete: string;
  let longRunning: string;

  it("D starts slow_compute and confirm_delete tasks", async () => {
    computed = await startTask("dual__slow_compute", { seconds: 1, label: "d-secret" }, "d-1");
    pendingDelete = await startTask("dual__confirm_delete", { filename: "prod-db.sqlite" }, "d-2");
    longRunning = await startTask("dual__slow_compute", { seconds: 120, label: "d-long" }, "d-3");
    const parked = await until(pendingDelete, ["input_required"]);
    expect(parked.body.result.status).toBe("input_required");
    expect(Object.keys(parked.body.result.inputRequests)).toEqual(["confirm"]);
  }, 60_000);

  it("C's tasks/get, tasks/update and tasks/cancel on D's tasks get the unknown-task answer, and the upstream receives none of them", async () => {
    expect(longRunning, "the first test must run first").toBeDefined();
    const mark = received.length;
    const missing = "dual__00000000-0000-4000-8000-000000000000";
    const accept = { inputResponses: { confirm: { action: "accept", content: { confirm: true } } } };
    const attempts: [string, string, Record<string, unknown>][] = [
      ["tasks/get", computed, {}],
      ["tasks/get", pendingDelete, {}],
      ["tasks/update", pendingDelete, accept],
      ["tasks/cancel", longRunning, {}],
      ["tasks/cancel", computed, {}],
    ];
    for (const [i, [method, victim, extra]] of attempts.entries()) {
      const stolen = await post("C", method, { taskId: victim, ...extra }, `c-${i}`);
      const none = await post("C", method, { taskId: missing, ...extra }, `c-${i}`);
      expect(stolen.status, method).toBe(200);
      expect(stolen.body, method).toEqual({ jsonrpc: "2.0", id: `c-${i}`, error: { code: -32602, message: `Unknown task: ${victim}` } });
      expect(sameBut(stolen, victim), `${method}: a task of D's and a task that does not exist must be indistinguishable to C`).toEqual(sameBut(none, missing));
    }
    const reached = received.slice(mark);
    expect(
      reached.filter((m) => m.method.startsWith("tasks/")),
      "C's task requests reached the upstream",
    ).toEqual([]);
    for (const t of [computed, pendingDelete, longRunning]) expect(reached.some((m) => m.body.includes(upstreamId(t)))).toBe(false);
  }, 60_000);

  it("D's tasks are untouched by C and still answer D: get, update and cancel", async () => {
    const mark = received.length;
    const done = await until(computed, ["completed"]);
    expect(done.body.result).toMatchObject({
      taskId: computed,
      status: "completed",
      result: { content: [{ type: "text", text: "d-secret: computed after 1 s" }] },
    });
    // C's "accept" never arrived: the delete still waits for its owner's answer.
    const parked = await post("D", "tasks/get", { taskId: pendingDelete }, "d-get-2");
    expect(parked.body.result.status).toBe("input_required");
    // C's cancel never arrived: the long task still works.
    const working = await post("D", "tasks/get", { taskId: longRunning }, "d-get-3");
    expect(working.body.result.status).toBe("working");

    const kept = await post("D", "tasks/update", { taskId: pendingDelete, inputResponses: { confirm: { action: "decline", content: {} } } }, "d-upd");
    expect(kept.body.result).toMatchObject({ resultType: "complete" });
    const declined = await until(pendingDelete, ["completed"]);
    expect(declined.body.result.result.content[0].text).toBe("Kept prod-db.sqlite (action=decline)");
    const cancel = await post("D", "tasks/cancel", { taskId: longRunning }, "d-cancel");
    expect(cancel.body.result).toMatchObject({ resultType: "complete" });
    expect((await until(longRunning, ["cancelled"])).body.result.status).toBe("cancelled");
    // Each of D's requests reached the upstream, under the upstream's own task id.
    const forwarded = received.slice(mark).filter((m) => m.method.startsWith("tasks/"));
    expect(forwarded.some((m) => m.method === "tasks/update" && m.taskId === upstreamId(pendingDelete))).toBe(true);
    expect(forwarded.some((m) => m.method === "tasks/cancel" && m.taskId === upstreamId(longRunning))).toBe(true);
  }, 60_000);

  it("concurrent requests of the two principals never get each other's answers", async () => {
    const ids = await Promise.all([0, 1, 2].map((i) => startTask("dual__slow_compute", { seconds: 0.2, label: `d-par-${i}` }, `d-par-${i}`)));
    await Promise.all(ids.map((t) => until(t, ["completed"])));
    const mark = received.length;
    const runs = await Promise.all(
      [0, 1, 2, 3].flatMap((round) =>
        ids.flatMap((t, i) => [
          post("D", "tasks/get", { taskId: t }, `D-${round}-${i}`).then((a) => ({ who: "D", i, id: `D-${round}-${i}`, a })),
          post("C", "tasks/get", { taskId: t }, `C-${round}-${i}`).then((a) => ({ who: "C", i, id: `C-${round}-${i}`, a })),
          post("C", "tools/call", { name: "dual__greet", arguments: { name: `C-${round}-${i}` } }, `G-${round}-${i}`).then((a) => ({
            who: "G",
            i,
            id: `G-${round}-${i}`,
            a,
          })),
        ]),
      ),
    );
    for (const { who, i, id, a } of runs) {
      expect(a.body.id, id).toBe(id);
      if (who === "D") expect(a.body.result.result.content[0].text, id).toBe(`d-par-${i}: computed after 0.2 s`);
      else if (who === "C") expect(a.body.error, id).toEqual({ code: -32602, message: `Unknown task: ${ids[i]}` });
      else expect(a.body.result.content[0].text, id).toBe(`Hello, C-${id.slice(2)}!`);
    }
    // Only D's polls reached the upstream: 4 rounds × 3 tasks.
    expect(received.slice(mark).filter((m) => m.method === "tasks/get")).toHaveLength(12);
  }, 120_000);
});
