/**
 * HistoryDO (durable-objects/history.ts) through real stubs (env.HISTORY) and the governed
 * path's adapter (src/ports/history-store.ts): counts within windows and scopes (principal, run,
 * grant), totals of a numeric argument, succeeded-in-run, budgets admitted atomically under
 * concurrency (exactly `limit` of 50 concurrent admits succeed, per grant and per run; a refused
 * call leaves no trace), isolation between principals (two principals make the same calls, with
 * the same ids: each sees only its own), retention by alarm (rows aged by rewriting their
 * timestamps, as session-do.test.ts does), and an unknown principal's object left without state.
 * docs/storage.md documents what is asserted here.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { historyObject } from "../../durable-objects/object-names.ts";
import { HISTORY_BUDGET_RETENTION_MS, HISTORY_CALL_RETENTION_MS, HISTORY_WINDOW_MAX_MS, type HistoryApi } from "../../durable-objects/contract-history.ts";
import { HISTORY_SWEEP_MS } from "../../durable-objects/history.ts";
import { type HistoryEntry, type HistoryQuery, historyKey } from "../../src/governance/steps.ts";
import { historyStore } from "../../src/ports/history-store.ts";

const store = historyStore(env);
/** Calls an RPC method of a stub as the adapter does (inside an async function), so a refusal is one rejected promise. */
const rpc = async <T>(f: () => Promise<T>): Promise<T> => await f();
const MIN = 60_000;
const HOUR = 3_600_000;

const raw = (principal: string) => historyObject(env, principal) as unknown as DurableObjectStub;
function sql(principal: string, q: string, ...binds: SqlStorageValue[]): Promise<Array<Record<string, SqlStorageValue>>> {
  return runInDurableObject(raw(principal), (_i, state) => state.storage.sql.exec(q, ...binds).toArray());
}
const tables = (principal: string) =>
  sql(principal, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '_cf%' ORDER BY name").then((r) => r.map((x) => x.name));
const alarmOf = (principal: string) => runInDurableObject(raw(principal), (_i, state) => state.storage.getAlarm());

const entry = (principal: string, callId: string, over: Partial<HistoryEntry>): HistoryEntry => ({
  callId,
  principal,
  runId: null,
  exposedName: "alpha__send",
  upstream: "alpha",
  tool: "send",
  numbers: {},
  at: Date.now(),
  ...over,
});

/** The same four calls for any principal: two grants, two runs, two tools, spread over three hours. */
async function seed(principal: string, now: number): Promise<void> {
  const calls: HistoryEntry[] = [
    entry(principal, "c1", { jti: "J1", runId: "R1", exposedName: "alpha__send", numbers: { amount: 5 }, at: now - 10 * MIN }),
    entry(principal, "c2", { jti: "J1", runId: "R2", exposedName: "alpha__send", numbers: { amount: 7 }, at: now - 2 * MIN }),
    entry(principal, "c3", { jti: "J2", runId: "R1", exposedName: "alpha__read", tool: "read", at: now - 30_000 }),
    entry(principal, "c4", {
      jti: "J2",
      runId: "R2",
      exposedName: "beta__send",
      upstream: "beta",
      numbers: { amount: 100, "order.total": 3 },
      at: now - 3 * HOUR,
    }),
  ];
  for (const c of calls) expect(await store.admit(c, {})).toEqual({ ok: true });
  await store.settle(principal, "c1", "succeeded");
  await store.settle(principal, "c2", "failed");
}

const count = (tool: string, withinMs: number, scope: "principal" | "run" | "grant"): HistoryQuery => ({ kind: "count", tool, withinMs, scope });
const total = (tool: string, arg: string, withinMs: number, scope: "principal" | "run" | "grant"): HistoryQuery => ({
  kind: "total",
  tool,
  arg,
  withinMs,
  scope,
});
const succeeded = (tool: string): HistoryQuery => ({ kind: "succeeded", tool, scope: "run" });

/** Asks `queries` as a call of (jti, run) would, and answers them in order. */
async function ask(principal: string, jti: string | undefined, runId: string | null, now: number, ...queries: HistoryQuery[]) {
  const snap = await store.snapshot(principal, jti, runId, queries, now);
  expect(Object.keys(snap.answers).sort()).toEqual([...new Set(queries.map(historyKey))].sort());
  return queries.map((q) => snap.answers[historyKey(q)]);
}

describe("HistoryDO snapshots", () => {
  it("counts calls matching a glob within a window, per principal, run and grant; totals a numeric argument; knows what succeeded in the run — for each of two principals alone", async () => {
    const now = Date.now();
    // Two principals make the same calls, with the same call ids, jtis and run ids: neither ever sees the other's.
    for (const p of ["agent:hist-a", "agent:hist-b"]) await seed(p, now);
    for (const p of ["agent:hist-a", "agent:hist-b"]) {
      // Principal scope: every call of the principal, whatever its grant or run.
      expect(
        await ask(
          p,
          "J1",
          "R1",
          now,
          count("*__send", HOUR, "principal"),
          count("*__send", 24 * HOUR, "principal"),
          count("*", 5 * MIN, "principal"),
          count("gamma__*", 24 * HOUR, "principal"),
        ),
      ).toEqual([2, 3, 2, 0]);
      // Run scope: R1 holds c1 and c3, R2 holds c2 and c4.
      expect(await ask(p, "J1", "R1", now, count("alpha__*", HOUR, "run"), count("*", 24 * HOUR, "run"))).toEqual([2, 2]);
      expect(await ask(p, "J1", "R2", now, count("alpha__*", HOUR, "run"), count("*", HOUR, "run"), count("*", 24 * HOUR, "run"))).toEqual([1, 1, 2]);
      // Grant scope: J1 made c1 and c2, J2 made c3 and c4.
      expect(await ask(p, "J1", "R1", now, count("*", 24 * HOUR, "grant"), count("alpha__read", 24 * HOUR, "grant"))).toEqual([2, 0]);
      expect(await ask(p, "J2", "R1", now, count("*", 24 * HOUR, "grant"), count("alpha__read", 24 * HOUR, "grant"), count("*", HOUR, "grant"))).toEqual([
        2, 1, 1,
      ]);
      // A grant nobody used, and a principal without a grant, count nothing.
      expect(await ask(p, "J9", "R1", now, count("*", 24 * HOUR, "grant"))).toEqual([0]);
      expect(await ask(p, undefined, "R1", now, count("*", 24 * HOUR, "grant"))).toEqual([0]);
      // Totals of a numeric argument (dotted paths are keys), over calls that lack it too.
      expect(
        await ask(
          p,
          "J1",
          "R2",
          now,
          total("*__send", "amount", 24 * HOUR, "principal"),
          total("*", "amount", HOUR, "principal"),
          total("*", "amount", 24 * HOUR, "run"),
          total("*", "order.total", 24 * HOUR, "principal"),
          total("alpha__read", "amount", 24 * HOUR, "principal"),
          total("*", "amount", 24 * HOUR, "grant"),
        ),
      ).toEqual([112, 12, 107, 3, 0, 12]);
      // Succeeded in this run: c1 succeeded in R1; c2 (R2) failed; c4 (R2) has no outcome yet.
      expect(await ask(p, "J1", "R1", now, succeeded("alpha__send"), succeeded("*"), succeeded("beta__*"))).toEqual([true, true, false]);
      expect(await ask(p, "J1", "R2", now, succeeded("alpha__send"), succeeded("beta__*"))).toEqual([false, false]);
      // No run: run queries see nothing (a call without a run is a run of its own).
      expect(await ask(p, "J1", null, now, succeeded("*"), count("*", 24 * HOUR, "run"), total("*", "amount", 24 * HOUR, "run"))).toEqual([false, 0, 0]);
    }
    // An outcome settles once, for its own principal only.
    await store.settle("agent:hist-a", "c4", "succeeded");
    await store.settle("agent:hist-a", "c2", "succeeded");
    expect(await ask("agent:hist-a", "J1", "R2", now, succeeded("beta__*"), succeeded("alpha__send"))).toEqual([true, false]);
    expect(await ask("agent:hist-b", "J1", "R2", now, succeeded("beta__*"))).toEqual([false]);
    expect((await sql("agent:hist-a", "SELECT call_id, status FROM calls ORDER BY call_id")).map((r) => `${r.call_id}:${r.status}`)).toEqual([
      "c1:succeeded",
      "c2:failed",
      "c3:admitted",
      "c4:succeeded",
    ]);
  });

  it("a query with an upstream counts by the stable identity: calls to that upstream's own tool under any exposed name, never another upstream's", async () => {
    const p = "agent:hist-identity";
    const now = Date.now();
    // The same tool of alpha, exposed as `send` and then (after a rename) as `alpha__send`; beta's own `send` beside it.
    await store.admit(entry(p, "i1", { exposedName: "send", numbers: { amount: 2 }, at: now - 3 * MIN }), {});
    await store.admit(entry(p, "i2", { runId: "RI", exposedName: "alpha__send", numbers: { amount: 3 }, at: now - 2 * MIN }), {});
    await store.admit(entry(p, "i3", { exposedName: "beta__send", upstream: "beta", numbers: { amount: 100 }, at: now - MIN }), {});
    await store.settle(p, "i2", "succeeded");
    const on = (upstream: string, q: HistoryQuery): HistoryQuery => ({ ...q, upstream });
    expect(
      await ask(
        p,
        undefined,
        "RI",
        now,
        on("alpha", count("send", HOUR, "principal")),
        on("alpha", total("send", "amount", HOUR, "principal")),
        on("beta", count("send", HOUR, "principal")),
        on("*", count("send", HOUR, "principal")),
        on("alpha", succeeded("send")),
        on("beta", succeeded("send")),
        // Without an upstream a glob names exposed names only, as before.
        count("send", HOUR, "principal"),
        count("*send", HOUR, "principal"),
      ),
    ).toEqual([2, 5, 1, 3, true, false, 1, 3]);
    // The two forms are distinct queries of one snapshot.
    expect(historyKey(on("alpha", count("send", HOUR, "principal")))).not.toBe(historyKey(count("send", HOUR, "principal")));
  });

  it("an object whose tables predate the identity columns gets them on its next read or admit; its old rows match exposed-name queries only", async () => {
    const p = "agent:hist-old-schema";
    const now = Date.now();
    await runInDurableObject(raw(p), (_i, state) => {
      state.storage.sql.exec(
        "CREATE TABLE calls (call_id TEXT PRIMARY KEY, jti TEXT, run_id TEXT, exposed_name TEXT NOT NULL, numbers TEXT NOT NULL, at INTEGER NOT NULL, status TEXT NOT NULL, v INTEGER NOT NULL)",
      );
      state.storage.sql.exec(
        "CREATE TABLE successes (run_id TEXT NOT NULL, exposed_name TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (run_id, exposed_name))",
      );
      state.storage.sql.exec("INSERT INTO calls VALUES ('old1', NULL, NULL, 'send', '{}', ?, 'admitted', 1)", now - MIN);
    });
    expect(await ask(p, undefined, null, now, count("send", HOUR, "principal"), { ...count("send", HOUR, "principal"), upstream: "alpha" })).toEqual([1, 0]);
    const cols = await sql(p, "SELECT name FROM pragma_table_info('calls') WHERE name IN ('upstream', 'tool') ORDER BY name");
    expect(cols.map((c) => c.name)).toEqual(["tool", "upstream"]);
    expect(await store.admit(entry(p, "new1", { exposedName: "alpha__send", at: now - 30_000 }), {})).toEqual({ ok: true });
    expect(await ask(p, undefined, null, now, count("*send", HOUR, "principal"), { ...count("send", HOUR, "principal"), upstream: "alpha" })).toEqual([2, 1]);
  });

  it("a window holds the calls after now - withinMs; windows past 24 h and malformed queries are refused (the caller fails closed)", async () => {
    const p = "agent:hist-window";
    const now = Date.now();
    await store.admit(entry(p, "w1", { at: now - MIN }), {});
    expect(await ask(p, undefined, null, now, count("*", MIN, "principal"), count("*", MIN + 1, "principal"))).toEqual([0, 1]);
    // A later `now` moves the window.
    expect(
      await ask(p, undefined, null, now + 58 * MIN, count("*", HOUR, "principal"), count("*", 58 * MIN, "principal"), count("*", 59 * MIN, "principal")),
    ).toEqual([1, 0, 0]);
    const api: HistoryApi = historyObject(env, p);
    await expect(rpc(() => api.snapshot(null, null, [count("*", HISTORY_WINDOW_MAX_MS + 1, "principal")], now))).rejects.toThrow(/window/);
    await expect(rpc(() => api.snapshot(null, null, [count("*", 0, "principal")], now))).rejects.toThrow(/window/);
    await expect(rpc(() => api.snapshot(null, null, [{ kind: "count", tool: "*", withinMs: MIN, scope: "team" } as never], now))).rejects.toThrow(/scope/);
    await expect(rpc(() => api.snapshot(null, null, [{ kind: "succeeded", tool: "*", scope: "principal" } as never], now))).rejects.toThrow(/run/);
    await expect(rpc(() => api.snapshot(null, null, [{ kind: "median", tool: "*" } as never], now))).rejects.toThrow(/kind/);
    await expect(rpc(() => api.snapshot(null, null, [count("", MIN, "principal")], now))).rejects.toThrow(/glob/);
    expect(await api.snapshot(null, null, [count("*", HISTORY_WINDOW_MAX_MS, "principal")], now)).toEqual([1]);
  });
});

describe("HistoryDO budgets", () => {
  it("admits exactly `limit` of 50 concurrent calls of one grant, across runs; the refused ones leave nothing; a new run does not reset the grant", async () => {
    const p = "agent:budget-grant";
    const verdicts = await Promise.all(
      Array.from({ length: 50 }, (_, i) => store.admit(entry(p, `g${i}`, { jti: "JG", runId: `run-${i % 5}` }), { grantCalls: 10 })),
    );
    expect(verdicts.filter((v) => v.ok)).toHaveLength(10);
    for (const v of verdicts.filter((v) => !v.ok)) expect(v).toEqual({ ok: false, budget: "grant", used: 10, limit: 10 });
    expect((await sql(p, "SELECT COUNT(*) AS n FROM calls"))[0]!.n).toBe(10);
    expect(await ask(p, "JG", "run-0", Date.now(), count("*", HOUR, "grant"), count("*", HOUR, "principal"))).toEqual([10, 10]);
    // A fresh run (a new session) of the same grant is still over budget; another grant is not.
    expect(await store.admit(entry(p, "g-new-run", { jti: "JG", runId: "run-fresh" }), { grantCalls: 10 })).toEqual({
      ok: false,
      budget: "grant",
      used: 10,
      limit: 10,
    });
    expect(await store.admit(entry(p, "g-other", { jti: "JH", runId: "run-fresh" }), { grantCalls: 10 })).toEqual({ ok: true });
    // A larger limit (the policy's, say) admits again, and counts on from 10.
    expect(await store.admit(entry(p, "g-more", { jti: "JG" }), { grantCalls: 11 })).toEqual({ ok: true });
    expect(await store.admit(entry(p, "g-more2", { jti: "JG" }), { grantCalls: 11 })).toEqual({ ok: false, budget: "grant", used: 11, limit: 11 });
  });

  it("admits exactly `limit` of 50 concurrent calls of one run, across grants; the grant budget is checked first", async () => {
    const p = "agent:budget-run";
    const verdicts = await Promise.all(
      Array.from({ length: 50 }, (_, i) => store.admit(entry(p, `r${i}`, { jti: `J${i % 7}`, runId: "RUN-1" }), { runCalls: 10 })),
    );
    expect(verdicts.filter((v) => v.ok)).toHaveLength(10);
    for (const v of verdicts.filter((v) => !v.ok)) expect(v).toEqual({ ok: false, budget: "run", used: 10, limit: 10 });
    expect(await ask(p, "J0", "RUN-1", Date.now(), count("*", HOUR, "run"), count("*", HOUR, "principal"))).toEqual([10, 10]);
    expect(await store.admit(entry(p, "r-other-run", { jti: "J0", runId: "RUN-2" }), { runCalls: 10 })).toEqual({ ok: true });
    // Both exhausted: the grant is named.
    const used = Number((await sql(p, "SELECT calls FROM budgets WHERE scope = 'grant' AND key = 'J0'"))[0]!.calls);
    expect(await store.admit(entry(p, "r-both", { jti: "J0", runId: "RUN-1" }), { grantCalls: used, runCalls: 10 })).toEqual({
      ok: false,
      budget: "grant",
      used,
      limit: used,
    });
  });

  it("a call without a run is a run of one; a grantless principal's calls share one grant budget; limit 0 admits nothing; a retried admit counts once", async () => {
    const p = "agent:budget-edges";
    expect(await store.admit(entry(p, "n1", {}), { runCalls: 1 })).toEqual({ ok: true });
    expect(await store.admit(entry(p, "n2", {}), { runCalls: 1 })).toEqual({ ok: true });
    expect(await store.admit(entry(p, "n3", {}), { runCalls: 0 })).toEqual({ ok: false, budget: "run", used: 0, limit: 0 });
    expect(await store.admit(entry(p, "n4", {}), { grantCalls: 2 })).toEqual({ ok: false, budget: "grant", used: 2, limit: 2 });
    expect(await store.admit(entry(p, "n5", { jti: "JX" }), { grantCalls: 0 })).toEqual({ ok: false, budget: "grant", used: 0, limit: 0 });
    expect(await store.admit(entry(p, "n1", {}), { grantCalls: 2 })).toEqual({ ok: true });
    expect((await sql(p, "SELECT call_id FROM calls ORDER BY call_id")).map((r) => r.call_id)).toEqual(["n1", "n2"]);
    expect(await sql(p, "SELECT scope, key, calls FROM budgets")).toEqual([{ scope: "grant", key: "", calls: 2 }]);
    await expect(store.admit(entry(p, "n6", {}), { grantCalls: -1 })).rejects.toThrow(/grantCalls/);
    await expect(store.admit(entry(p, "n7", { numbers: { x: Number.NaN } }), {})).rejects.toThrow(/finite/);
  });

  it("an object refuses a call of another principal (nothing is recorded)", async () => {
    const api: HistoryApi = historyObject(env, "agent:owner");
    await expect(rpc(() => api.admit(entry("agent:intruder", "x1", {}), {}))).rejects.toThrow(/another principal/);
    expect(await tables("agent:owner")).toEqual([]);
  });
});

describe("HistoryDO retention", () => {
  it("the alarm deletes calls older than 25 h and counters unused for 8 days, keeps the rest, re-arms, and is idempotent", async () => {
    const p = "agent:retention";
    const now = Date.now();
    for (const [id, run] of [
      ["old", "R-old"],
      ["new", "R-new"],
    ] as const)
      expect(await store.admit(entry(p, id, { jti: `J-${id}`, runId: run, at: now }), {})).toEqual({ ok: true });
    await store.settle(p, "old", "succeeded");
    await store.settle(p, "new", "succeeded");
    const armed = await alarmOf(p);
    expect(armed).toBeGreaterThanOrEqual(now + HISTORY_CALL_RETENTION_MS);
    // Age "old": its call past the 25 h horizon, its counters and run success past 8 days.
    await sql(p, "UPDATE calls SET at = ? WHERE call_id = 'old'", now - HISTORY_CALL_RETENTION_MS - MIN);
    await sql(p, "UPDATE budgets SET last_at = ? WHERE key IN ('J-old', 'R-old')", now - HISTORY_BUDGET_RETENTION_MS - MIN);
    await sql(p, "UPDATE successes SET at = ? WHERE run_id = 'R-old'", now - HISTORY_BUDGET_RETENTION_MS - MIN);
    const before = await ask(p, "J-new", "R-new", now, count("*", 24 * HOUR, "principal"), count("*", 24 * HOUR, "grant"), succeeded("*"));
    expect(before).toEqual([1, 1, true]);
    for (let i = 0; i < 2; i++) {
      expect(await runDurableObjectAlarm(raw(p))).toBe(true);
      expect((await sql(p, "SELECT call_id FROM calls")).map((r) => r.call_id)).toEqual(["new"]);
      expect((await sql(p, "SELECT key FROM budgets ORDER BY key")).map((r) => r.key)).toEqual(["J-new", "R-new"]);
      expect((await sql(p, "SELECT run_id FROM successes")).map((r) => r.run_id)).toEqual(["R-new"]);
      expect(await ask(p, "J-new", "R-new", now, count("*", 24 * HOUR, "principal"), count("*", 24 * HOUR, "grant"), succeeded("*"))).toEqual(before);
      const next = (await alarmOf(p))!;
      expect(next).toBeGreaterThanOrEqual(Date.now() + HISTORY_SWEEP_MS - 5_000);
      expect(next).toBeLessThanOrEqual(Date.now() + HISTORY_CALL_RETENTION_MS);
    }
    // A call row past its horizon goes, but its budget counter stays (the grant budget outlives the history window).
    await sql(p, "UPDATE calls SET at = ?", now - HISTORY_CALL_RETENTION_MS - MIN);
    expect(await runDurableObjectAlarm(raw(p))).toBe(true);
    expect(await sql(p, "SELECT call_id FROM calls")).toEqual([]);
    expect(await store.admit(entry(p, "again", { jti: "J-new" }), { grantCalls: 1 })).toEqual({ ok: false, budget: "grant", used: 1, limit: 1 });
    const next = (await alarmOf(p))!;
    expect(next).toBeGreaterThan(Date.now() + HISTORY_BUDGET_RETENTION_MS - HOUR);
    // Everything past its horizon: nothing is left, and no alarm remains.
    await sql(p, "UPDATE budgets SET last_at = ?", now - HISTORY_BUDGET_RETENTION_MS - MIN);
    await sql(p, "UPDATE successes SET at = ?", now - HISTORY_BUDGET_RETENTION_MS - MIN);
    expect(await runDurableObjectAlarm(raw(p))).toBe(true);
    for (const t of ["calls", "budgets", "successes"]) expect(await sql(p, `SELECT * FROM ${t}`), t).toEqual([]);
    expect(await alarmOf(p)).toBeNull();
  });
});

describe("HistoryDO: unknown principals", () => {
  it("a snapshot (and a settle) of a principal that never called anything stores nothing: no table, no alarm", async () => {
    const p = "agent:never-called";
    expect(await ask(p, "J1", "R1", Date.now(), count("*", HOUR, "principal"), total("*", "n", HOUR, "grant"), succeeded("*"))).toEqual([0, 0, false]);
    await store.settle(p, "nope", "succeeded");
    expect(await tables(p)).toEqual([]);
    expect(await sql(p, "SELECT name FROM sqlite_master")).toEqual([]);
    expect(await alarmOf(p)).toBeNull();
    // The first admitted call creates the tables.
    expect(await store.admit(entry(p, "first", {}), {})).toEqual({ ok: true });
    expect(await tables(p)).toEqual(["budgets", "calls", "successes"]);
  });

  it("no queries give an empty snapshot, and an unknown outcome is refused", async () => {
    expect(await store.snapshot("agent:no-queries", undefined, null, [], Date.now())).toEqual({ answers: {} });
    expect(await tables("agent:no-queries")).toEqual([]);
    await expect(store.settle("agent:no-queries", "x", "maybe" as never)).rejects.toThrow(/outcome/);
  });
});
