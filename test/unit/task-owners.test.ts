/**
 * Task ownership in workerd: the TasksDO itself (own/owns/owned, expiry before and by the alarm,
 * repeated alarms, entries that only ever grow, rows of an unknown version), and dispatch with the
 * network replaced by a recording fake upstream (globalThis.fetch) and each principal's store
 * either its real TasksDO or an in-memory fake: a task a tools/call creates is recorded as the
 * caller's before the answer is returned; another principal's tasks/get, tasks/update,
 * tasks/cancel (and legacy tasks/result) get exactly the answer of a task that does not exist and
 * reach no upstream; a legacy tasks/list shows only the caller's tasks; a store that cannot answer
 * refuses (nothing forwarded); a result that is not a task never touches the store.
 */
import { NO_HALTS } from "../../src/governance/halts.ts";
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import type { CallContext, Outcome } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import { createdTasks, ownTaskNotification, retainUntil, TASK_OWNERSHIP_MAX_MS, TASK_OWNERSHIP_MIN_MS } from "../../src/ports/task-owners.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { taskObject } from "../../durable-objects/object-names.ts";
import { TASK_OWNERSHIP_VERSION, type TasksApi } from "../../durable-objects/contract.ts";
import { nextAlarm, TASKS_SCHEMA, UNKNOWN_RECHECK_MS } from "../../durable-objects/tasks.ts";
import { testUpstream, testConfig } from "./fixtures.ts";

const TASKS_EXT = "io.modelcontextprotocol/tasks";
const HOUR = 3600_000;

// ---- the TasksDO --------------------------------------------------------------------------

type Row = Record<string, SqlStorageValue>;
const raw = (sub: string) => taskObject(env, sub) as unknown as DurableObjectStub;
function sql(sub: string, q: string, ...binds: SqlStorageValue[]): Promise<Row[]> {
  return runInDurableObject(raw(sub), (_i, state) => {
    state.storage.sql.exec(TASKS_SCHEMA);
    return state.storage.sql.exec(q, ...binds).toArray();
  });
}
const alarmOf = (sub: string) => runInDurableObject(raw(sub), (_i, state) => state.storage.getAlarm());

describe("TasksDO", () => {
  it("owns exactly what was recorded, per upstream, newest first", async () => {
    const api = taskObject(env, "agent:do-1");
    const until = Date.now() + HOUR;
    await api.own("alpha", "t-1", until);
    await api.own("alpha", "t-2", until);
    await api.own("beta", "t-1", until);
    expect(await api.owns("alpha", "t-1")).toBe(true);
    expect(await api.owns("beta", "t-1")).toBe(true);
    expect(await api.owns("beta", "t-2")).toBe(false);
    expect(await api.owns("alpha", "t-3")).toBe(false);
    expect(new Set(await api.owned("alpha"))).toEqual(new Set(["t-1", "t-2"]));
    expect(await api.owned("beta")).toEqual(["t-1"]);
    expect(await api.owned("gamma")).toEqual([]);
    // Another principal's object holds none of it.
    const other = taskObject(env, "agent:do-1-other");
    expect(await other.owns("alpha", "t-1")).toBe(false);
    expect(await other.owned("alpha")).toEqual([]);
  });

  it("refuses malformed entries", async () => {
    // Called on the instance (not over RPC, where the plugin reports the object's throw as unhandled).
    await runInDurableObject(raw("agent:do-2"), async (obj) => {
      const instance = obj as unknown as TasksApi;
      await expect(instance.own("alpha", "", Date.now() + HOUR)).rejects.toThrow(/task id/);
      await expect(instance.own("alpha", "x".repeat(1025), Date.now() + HOUR)).rejects.toThrow(/task id/);
      await expect(instance.own("alpha", "t", Number.NaN)).rejects.toThrow(/expiresAt/);
    });
    expect(await sql("agent:do-2", "SELECT * FROM owned")).toEqual([]);
  });

  it("an entry only ever grows: recording again keeps the later expiry, and the alarm is set for the earliest", async () => {
    const sub = "agent:do-3";
    const api = taskObject(env, sub);
    const later = Date.now() + 48 * HOUR;
    await api.own("alpha", "t", later);
    expect(await alarmOf(sub)).toBe(later);
    await api.own("alpha", "t", Date.now() + HOUR);
    expect((await sql(sub, "SELECT expires_at FROM owned"))[0]!.expires_at).toBe(later);
    const sooner = Date.now() + 2 * HOUR;
    await api.own("alpha", "u", sooner);
    expect(await alarmOf(sub)).toBe(sooner);
  });

  it("an expired entry is not owned even before the alarm; the alarm deletes it, re-arms for the next, and running again changes nothing", async () => {
    const sub = "agent:do-4";
    const api = taskObject(env, sub);
    const keep = Date.now() + 5 * HOUR;
    await api.own("alpha", "old", Date.now() + HOUR);
    await api.own("alpha", "new", keep);
    await sql(sub, "UPDATE owned SET expires_at = ? WHERE task_id = 'old'", Date.now() - 1);
    expect(await api.owns("alpha", "old")).toBe(false);
    expect(await api.owned("alpha")).toEqual(["new"]);
    expect(await runDurableObjectAlarm(raw(sub))).toBe(true);
    expect((await sql(sub, "SELECT task_id FROM owned")).map((r) => r.task_id)).toEqual(["new"]);
    expect(await alarmOf(sub)).toBe(keep);
    // A repeated alarm (at-least-once delivery): same rows, same next alarm.
    await runInDurableObject(raw(sub), (_i, state) => state.storage.setAlarm(Date.now() - 1));
    expect(await runDurableObjectAlarm(raw(sub))).toBe(true);
    expect((await sql(sub, "SELECT task_id FROM owned")).map((r) => r.task_id)).toEqual(["new"]);
    expect(await alarmOf(sub)).toBe(keep);
    // Once everything expired: empty, and no alarm remains.
    await sql(sub, "UPDATE owned SET expires_at = ?", Date.now() - 1);
    await runInDurableObject(raw(sub), (_i, state) => state.storage.setAlarm(Date.now() - 1));
    expect(await runDurableObjectAlarm(raw(sub))).toBe(true);
    expect(await sql(sub, "SELECT * FROM owned")).toEqual([]);
    expect(await alarmOf(sub)).toBeNull();
  });

  it("a row of an unknown version is not owned, never overwritten and never deleted; the alarm looks again in 24 h", async () => {
    const sub = "agent:do-5";
    const api = taskObject(env, sub);
    await sql(
      sub,
      "INSERT INTO owned (upstream, task_id, at, expires_at, v) VALUES ('alpha', 'future', ?, ?, ?)",
      Date.now(),
      Date.now() - 1,
      TASK_OWNERSHIP_VERSION + 1,
    );
    expect(await api.owns("alpha", "future")).toBe(false);
    expect(await api.owned("alpha")).toEqual([]);
    await api.own("alpha", "future", Date.now() + HOUR);
    expect(await sql(sub, "SELECT v FROM owned WHERE task_id = 'future'")).toEqual([{ v: TASK_OWNERSHIP_VERSION + 1 }]);
    expect(await api.owns("alpha", "future")).toBe(false);
    await runInDurableObject(raw(sub), (_i, state) => state.storage.setAlarm(Date.now() - 1));
    const before = Date.now();
    expect(await runDurableObjectAlarm(raw(sub))).toBe(true);
    expect(await sql(sub, "SELECT task_id FROM owned")).toEqual([{ task_id: "future" }]);
    const next = (await alarmOf(sub))!;
    expect(next).toBeGreaterThanOrEqual(before + UNKNOWN_RECHECK_MS);
  });

  it("nextAlarm: the earliest known expiry, a 24 h recheck while unknown rows remain, none when empty", () => {
    expect(nextAlarm(null, 0, 1000)).toBeNull();
    expect(nextAlarm(5000, 0, 1000)).toBe(5000);
    expect(nextAlarm(null, 2, 1000)).toBe(1000 + UNKNOWN_RECHECK_MS);
    expect(nextAlarm(1000 + UNKNOWN_RECHECK_MS * 2, 1, 1000)).toBe(1000 + UNKNOWN_RECHECK_MS);
    expect(nextAlarm(5000, 1, 1000)).toBe(5000);
  });
});

describe("what counts as a task, and how long ownership is kept", () => {
  it("both shapes, and nothing else", () => {
    expect(createdTasks({ resultType: "task", taskId: "a", status: "working", ttlMs: 600_000 })).toEqual([{ taskId: "a", ttlMs: 600_000 }]);
    expect(createdTasks({ task: { taskId: "b", status: "working", ttl: 7_200_000 } })).toEqual([{ taskId: "b", ttlMs: 7_200_000 }]);
    expect(createdTasks({ task: { taskId: "c", ttl: null } })).toEqual([{ taskId: "c", ttlMs: null }]);
    expect(createdTasks({ content: [{ type: "text", text: "taskId" }] })).toEqual([]);
    expect(createdTasks({ resultType: "input_required", inputRequests: {} })).toEqual([]);
    expect(createdTasks({ taskId: 7 })).toEqual([]);
    expect(createdTasks(null)).toEqual([]);
  });
  it("24 h past creation, or the task's ttl if longer, at most 30 days", () => {
    expect(retainUntil(1000, 600_000)).toBe(1000 + TASK_OWNERSHIP_MIN_MS);
    expect(retainUntil(1000, null)).toBe(1000 + TASK_OWNERSHIP_MIN_MS);
    expect(retainUntil(1000, 48 * HOUR)).toBe(1000 + 48 * HOUR);
    expect(retainUntil(1000, 365 * 24 * HOUR)).toBe(1000 + TASK_OWNERSHIP_MAX_MS);
  });
});

// ---- dispatch: the fake upstream ----------------------------------------------------------

const mk = (name: string, url: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig =>
  testUpstream(name, url, { timeoutMs: 2000, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true }, ...extra });
const alpha = mk("alpha", "http://127.0.0.1:9101/alpha");
const beta = mk("beta", "http://127.0.0.1:9102/beta");
const solo = mk("solo", "http://127.0.0.1:9103/solo", { namespaced: false });

interface Seen {
  url: string;
  body: JsonRpcRequest;
}
let seen: Seen[] = [];
let taskSeq = 0;
/** What the fake upstream's tasks hold: taskId → the secret result it returns on tasks/get. */
let upstreamTasks: Map<string, string>;

beforeEach(() => {
  seen = [];
  taskSeq = 0;
  upstreamTasks = new Map();
  clearCatalog();
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    seen.push({ url, body });
    const reply = (result: JsonObject) =>
      new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
    const error = (code: number, message: string) =>
      new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, error: { code, message } }), { headers: { "content-type": "application/json" } });
    const p = body.params ?? {};
    switch (body.method) {
      case "tools/list":
        return reply({ tools: ["greet", "slow_compute", "legacy_job", "confirm_delete"].map((name) => ({ name, inputSchema: { type: "object" } })) });
      case "tools/call": {
        const args = (p.arguments ?? {}) as JsonObject;
        if (p.name === "greet") return reply({ content: [{ type: "text", text: `Hello, ${String(args.name)}!` }] });
        const taskId = `up-${++taskSeq}`;
        upstreamTasks.set(taskId, `${String(p.name)} result for ${String(args.label)}`);
        if (p.name === "legacy_job") return reply({ task: { taskId, status: "working", ttl: Number(args.ttl ?? 60_000) } });
        return reply({ resultType: "task", taskId, status: "working", ttlMs: Number(args.ttl ?? 60_000), pollIntervalMs: 100 });
      }
      case "tasks/get": {
        const secret = upstreamTasks.get(String(p.taskId));
        if (secret === undefined) return error(-32602, `Unknown taskId: ${String(p.taskId)}`);
        return reply({ taskId: String(p.taskId), status: "completed", result: { content: [{ type: "text", text: secret }] } });
      }
      case "tasks/result": {
        const secret = upstreamTasks.get(String(p.taskId));
        return secret === undefined ? error(-32602, "Unknown task") : reply({ content: [{ type: "text", text: secret }] });
      }
      case "tasks/update":
      case "tasks/cancel":
        return upstreamTasks.has(String(p.taskId)) ? reply({}) : error(-32602, "Unknown task");
      case "tasks/list":
        return reply({ tasks: [...upstreamTasks.keys()].map((taskId) => ({ taskId, status: "working" })), nextCursor: "page-2" });
    }
    return error(-32601, "Method not found");
  });
});
afterEach(() => vi.restoreAllMocks());

/** Grant D may start tasks; grant C may only greet (the attacker of the report). */
const D: Principal = {
  sub: "agent:d",
  team: "t",
  roles: ["agent"],
  tools: ["alpha__*", "beta__*", "slow_compute", "legacy_job", "greet"],
  authenticated: true,
};
const C: Principal = { sub: "agent:c", team: "t", roles: ["agent"], tools: ["alpha__greet", "greet"], authenticated: true };

/** An in-memory TasksApi with a call log; `fail` makes every call reject, `gate` holds `own` until released. */
function fakeStore() {
  const rows = new Map<string, number>();
  const log: string[] = [];
  const s = {
    rows,
    log,
    fail: null as string | null,
    gate: null as Promise<void> | null,
    api: {
      async own(upstream: string, taskId: string, expiresAt: number) {
        log.push(`own ${upstream} ${taskId}`);
        if (s.fail) throw new Error(s.fail);
        if (s.gate) await s.gate;
        rows.set(`${upstream}\u0000${taskId}`, Math.max(expiresAt, rows.get(`${upstream}\u0000${taskId}`) ?? 0));
      },
      async owns(upstream: string, taskId: string) {
        log.push(`owns ${upstream} ${taskId}`);
        if (s.fail) throw new Error(s.fail);
        return (rows.get(`${upstream}\u0000${taskId}`) ?? 0) > Date.now();
      },
      async owned(upstream: string) {
        log.push(`owned ${upstream}`);
        if (s.fail) throw new Error(s.fail);
        return [...rows.keys()].filter((k) => k.startsWith(`${upstream}\u0000`)).map((k) => k.slice(upstream.length + 1));
      },
    } satisfies TasksApi,
  };
  return s;
}

function ctx(upstreams: UpstreamConfig[], who: Principal, store: (() => TasksApi) | undefined, era: "legacy" | "modern" = "modern"): CallContext {
  return {
    cfg: testConfig(upstreams, { agentTools: true }),
    era,
    principal: who,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: true,
    runId: null,
    legs: {
      leg: async () => (era === "modern" ? { era: "modern", meta: {} } : { era: "legacy", protocolVersion: "2025-11-25" }),
      renew: async () => null,
      capabilities: async () => ({ tools: {} }),
      recordRequest: async () => undefined,
    },
    stores: {
      ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" },
      killSwitch: () => NO_HALTS,
      ...(store ? { tasks: store } : {}),
    },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
  };
}
/** The real TasksDO of `who`, as the fronts wire it. */
const real = (who: Principal) => ctx([alpha, beta], who, () => taskObject(env, who.sub));

const WITH_TASKS = {
  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
  "io.modelcontextprotocol/clientCapabilities": { extensions: { [TASKS_EXT]: {} } },
};
const WITHOUT_TASKS = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const rpc = (method: string, params: JsonObject = {}, id: number | string = 1, meta: JsonObject | null = WITH_TASKS): JsonRpcRequest => ({
  jsonrpc: "2.0",
  id,
  method,
  params: meta ? { ...params, _meta: meta } : params,
});
const taskMethods = (since = 0) => seen.slice(since).filter((s) => s.body.method.startsWith("tasks/"));
/** An answer with the task id it names replaced, so a refusal for one id compares with a refusal for another. */
const sameBut = (o: Outcome, id: string) => JSON.parse(JSON.stringify(o).split(id).join("<id>")) as unknown;

async function startTask(c: CallContext, name = "alpha__slow_compute", label = "d-secret", ttl?: number): Promise<string> {
  const out = await dispatch(c, rpc("tools/call", { name, arguments: { label, ...(ttl ? { ttl } : {}) } }));
  const r = out.response.result!;
  const id = (typeof r.taskId === "string" ? r.taskId : (r.task as JsonObject | undefined)?.taskId) as string;
  expect(id, JSON.stringify(out.response)).toMatch(/__up-\d+$|^up-\d+$/);
  return id;
}

describe("a task belongs to the principal that created it", () => {
  it("another principal's tasks/get, tasks/update and tasks/cancel get the answer of a task that does not exist, and reach no upstream", async () => {
    const d = real(D);
    const c = real(C);
    const dTask = await startTask(d);
    const dPending = await startTask(d, "alpha__confirm_delete", "prod-db.sqlite");
    expect(await taskObject(env, D.sub).owns("alpha", dTask.slice("alpha__".length))).toBe(true);
    expect(await taskObject(env, C.sub).owns("alpha", dTask.slice("alpha__".length))).toBe(false);
    const since = seen.length;
    const missing = "alpha__up-999";
    for (const [method, extra] of [
      ["tasks/get", {}],
      ["tasks/update", { inputResponses: { confirm: { action: "accept", content: { confirm: true } } } }],
      ["tasks/cancel", {}],
    ] as const) {
      for (const victim of [dTask, dPending]) {
        const stolen = await dispatch(c, rpc(method, { taskId: victim, ...extra }, 7));
        const none = await dispatch(c, rpc(method, { taskId: missing, ...extra }, 7));
        expect(stolen.response.error, method).toEqual({ code: -32602, message: `Unknown task: ${victim}` });
        expect(sameBut(stolen, victim), method).toEqual(sameBut(none, missing));
        expect(stolen.status).toBe(none.status);
      }
    }
    expect(taskMethods(since), "C's requests reached the upstream").toEqual([]);
    // The owner's own requests still work, and carry the upstream's answer under the exposed id.
    const mine = await dispatch(d, rpc("tasks/get", { taskId: dTask }));
    expect(mine.response.result).toMatchObject({
      taskId: dTask,
      status: "completed",
      result: { content: [{ type: "text", text: "slow_compute result for d-secret" }] },
    });
    expect(taskMethods(since).map((s) => [s.body.method, s.body.params?.taskId])).toEqual([["tasks/get", dTask.slice("alpha__".length)]]);
    expect((await dispatch(d, rpc("tasks/cancel", { taskId: dPending }))).response.result).toEqual({});
  });

  it("the task is recorded before the answer is returned: the answer waits for the store", async () => {
    const store = fakeStore();
    let release!: () => void;
    store.gate = new Promise<void>((r) => {
      release = r;
    });
    let settled = false;
    const pending = dispatch(
      ctx([alpha, beta], D, () => store.api),
      rpc("tools/call", { name: "alpha__slow_compute", arguments: { label: "x" } }),
    ).then((o) => {
      settled = true;
      return o;
    });
    for (let i = 0; i < 50 && store.log.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(store.log).toEqual(["own alpha up-1"]);
    await new Promise((r) => setTimeout(r, 30));
    expect(settled).toBe(false);
    release();
    const out = await pending;
    expect(out.response.result?.taskId).toBe("alpha__up-1");
    expect(store.rows.get("alpha\u0000up-1")).toBeGreaterThan(Date.now() + TASK_OWNERSHIP_MIN_MS - 60_000);
  });

  it("both task shapes are recorded, the longer of 24 h and the task's ttl", async () => {
    const store = fakeStore();
    const d = ctx([alpha, beta], D, () => store.api);
    const t0 = Date.now();
    await startTask(d, "alpha__slow_compute", "a", 60_000);
    await startTask(d, "beta__legacy_job", "b", 72 * HOUR);
    const a = store.rows.get("alpha\u0000up-1")!;
    const b = store.rows.get("beta\u0000up-2")!;
    expect(a).toBeGreaterThanOrEqual(t0 + TASK_OWNERSHIP_MIN_MS);
    expect(a).toBeLessThanOrEqual(Date.now() + TASK_OWNERSHIP_MIN_MS);
    expect(b).toBeGreaterThanOrEqual(t0 + 72 * HOUR);
    expect(b).toBeLessThanOrEqual(Date.now() + 72 * HOUR);
  });

  it("a tools/call whose result is not a task never touches the store (nor builds it)", async () => {
    let built = 0;
    const d = ctx([alpha, beta], D, () => {
      built++;
      throw new Error("the store must not be reached");
    });
    const out = await dispatch(d, rpc("tools/call", { name: "alpha__greet", arguments: { name: "D" } }));
    expect(out.response.result?.content).toEqual([{ type: "text", text: "Hello, D!" }]);
    expect(built).toBe(0);
  });

  it("a task that cannot be recorded is withheld from the client and cancelled upstream", async () => {
    const store = fakeStore();
    store.fail = "storage offline";
    const out = await dispatch(
      ctx([alpha, beta], D, () => store.api),
      rpc("tools/call", { name: "alpha__slow_compute", arguments: { label: "x" } }, 3),
    );
    expect(JSON.stringify(out.response)).not.toContain("up-1");
    expect(out.response.error?.message).toMatch(/could not record that it is yours \(storage offline\); the task was withheld and cancelled upstream/);
    const cancel = seen.filter((s) => s.body.method === "tasks/cancel");
    expect(cancel.map((s) => s.body.params?.taskId)).toEqual(["up-1"]);
    // The cancel carries the caller's protocol metadata (its tasks extension), so a tasks upstream acts on it.
    const meta = cancel[0]!.body.params!._meta as JsonObject;
    expect(meta["io.modelcontextprotocol/clientCapabilities"]).toEqual({ extensions: { [TASKS_EXT]: {} } });
    // No store in the context at all: the same refusal.
    const none = await dispatch(ctx([alpha, beta], D, undefined), rpc("tools/call", { name: "alpha__slow_compute", arguments: {} }));
    expect(none.response.error?.message).toMatch(/no task ownership store/);
  });

  it("a store that cannot answer refuses tasks/* to fail closed: nothing is forwarded", async () => {
    const store = fakeStore();
    const d = ctx([alpha, beta], D, () => store.api);
    const id = await startTask(d);
    store.fail = "storage offline";
    const since = seen.length;
    for (const method of ["tasks/get", "tasks/update", "tasks/cancel"]) {
      const out = await dispatch(d, rpc(method, { taskId: id, inputResponses: {} }));
      expect(out.response.error?.code, method).toBe(-32603);
      expect(out.response.error?.message).toMatch(/could not read who owns its tasks \(storage offline\)/);
    }
    expect(taskMethods(since)).toEqual([]);
  });

  it("a 2026-07-28 client without the tasks extension gets -32021 for a task it does not own, exactly as for a missing one", async () => {
    const d = real({ ...D, sub: "agent:d-noext" });
    const c = real({ ...C, sub: "agent:c-noext" });
    const id = await startTask(d);
    const since = seen.length;
    const stolen = await dispatch(c, rpc("tasks/get", { taskId: id }, 1, WITHOUT_TASKS));
    const none = await dispatch(c, rpc("tasks/get", { taskId: "alpha__nope" }, 1, WITHOUT_TASKS));
    const badHandle = await dispatch(c, rpc("tasks/get", { taskId: "gate-test" }, 1, WITHOUT_TASKS));
    for (const o of [stolen, none, badHandle]) {
      expect(o.status).toBe(400);
      expect(o.response.error).toEqual({
        code: -32021,
        message: `tasks/get requires the ${TASKS_EXT} extension`,
        data: { requiredCapabilities: { extensions: { [TASKS_EXT]: {} } } },
      });
    }
    expect(taskMethods(since)).toEqual([]);
  });

  it("concurrent requests of two principals never get each other's answers", async () => {
    const d = real({ ...D, sub: "agent:d-conc" });
    const c = real({ ...C, sub: "agent:c-conc" });
    const ids = await Promise.all([0, 1, 2, 3].map((i) => startTask(d, "alpha__slow_compute", `d-${i}`)));
    const since = seen.length;
    const outs = await Promise.all(
      ids.flatMap((id, i) => [
        dispatch(d, rpc("tasks/get", { taskId: id }, `d${i}`)).then((o) => ["d", i, o] as const),
        dispatch(c, rpc("tasks/get", { taskId: id }, `c${i}`)).then((o) => ["c", i, o] as const),
      ]),
    );
    for (const [who, i, o] of outs) {
      expect(o.response.id).toBe(`${who}${i}`);
      if (who === "d") expect(o.response.result?.result).toEqual({ content: [{ type: "text", text: `slow_compute result for d-${i}` }] });
      else expect(o.response.error).toEqual({ code: -32602, message: `Unknown task: ${ids[i]}` });
    }
    expect(taskMethods(since).map((s) => s.body.id)).toHaveLength(4);
  });
});

describe("a single transparent upstream (2025-11-25 clients): tasks/result and tasks/list", () => {
  it("tasks/result is forwarded for the owner only; tasks/list shows only the caller's tasks", async () => {
    const dStore = fakeStore();
    const cStore = fakeStore();
    const d = ctx([solo], D, () => dStore.api, "legacy");
    const c = ctx([solo], C, () => cStore.api, "legacy");
    const dTask = await startTask(d, "legacy_job", "d-secret");
    const cTask = await startTask(
      ctx([solo], { ...C, tools: ["legacy_job"] }, () => cStore.api, "legacy"),
      "legacy_job",
      "c-own",
    );
    expect([dTask, cTask]).toEqual(["up-1", "up-2"]);
    const since = seen.length;

    const stolen = await dispatch(c, rpc("tasks/result", { taskId: dTask }, 5, null));
    const none = await dispatch(c, rpc("tasks/result", { taskId: "up-999" }, 5, null));
    expect(stolen.response.error).toEqual({ code: -32602, message: `Unknown task: ${dTask}` });
    expect(sameBut(stolen, dTask)).toEqual(sameBut(none, "up-999"));
    expect(taskMethods(since)).toEqual([]);
    const mine = await dispatch(d, rpc("tasks/result", { taskId: dTask }, 6, null));
    expect(mine.response.result).toEqual({ content: [{ type: "text", text: "legacy_job result for d-secret" }] });

    const cList = await dispatch(c, rpc("tasks/list", {}, 8, null));
    expect(cList.response.result).toEqual({ tasks: [{ taskId: cTask, status: "working" }], nextCursor: "page-2" });
    const dList = await dispatch(d, rpc("tasks/list", {}, 9, null));
    expect(dList.response.result).toEqual({ tasks: [{ taskId: dTask, status: "working" }], nextCursor: "page-2" });
    // The upstream itself listed both: the cut is the gateway's.
    expect(seen.filter((s) => s.body.method === "tasks/list")).toHaveLength(2);
  });

  it("tasks/list with a store that cannot answer is refused before anything is forwarded", async () => {
    const store = fakeStore();
    store.fail = "storage offline";
    const out = await dispatch(
      ctx([solo], D, () => store.api, "legacy"),
      rpc("tasks/list", {}, 1, null),
    );
    expect(out.response.error?.code).toBe(-32603);
    expect(seen.filter((s) => s.body.method === "tasks/list")).toEqual([]);
  });
});

describe("task status notifications (for a listen stream)", () => {
  it("pass only for the principal's own task, under its exposed id; another's, an id-less one, or an unreadable store: nothing", async () => {
    const store = fakeStore();
    await store.api.own("alpha", "up-7", Date.now() + HOUR);
    const n = (taskId?: string) => ({ jsonrpc: "2.0" as const, method: "notifications/tasks", params: { ...(taskId ? { taskId } : {}), status: "completed" } });
    expect(await ownTaskNotification(store.api, alpha, n("up-7"))).toEqual({
      jsonrpc: "2.0",
      method: "notifications/tasks",
      params: { taskId: "alpha__up-7", status: "completed" },
    });
    expect(await ownTaskNotification(store.api, solo, n("up-7"))).toBeNull();
    expect(await ownTaskNotification(store.api, alpha, n("up-8"))).toBeNull();
    expect(await ownTaskNotification(store.api, alpha, n())).toBeNull();
    expect(await ownTaskNotification(undefined, alpha, n("up-7"))).toBeNull();
    store.fail = "storage offline";
    expect(await ownTaskNotification(store.api, alpha, n("up-7"))).toBeNull();
  });
});
