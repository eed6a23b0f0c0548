/**
 * The LedgerDO through direct stubs (env.LEDGER) and the local D1 database (env.LEDGER_DB):
 * group commit under 500 concurrent appends (contiguous seq, one prev per entry, the chain
 * verifies, fewer transactions than appends), the D1 flush from the alarm (one row per entry,
 * idempotent when run again, failures retried without touching appends), signed checkpoints
 * (at 256 unanchored entries and by the 10 s alarm, verifying against the public key, each team
 * checkpoint committed to `_global`), traceCall, and fail-closed appends (a draft that cannot be
 * hashed is refused alone; a failed transaction refuses every append in it and leaves the
 * chain as it was). Alarms run with runDurableObjectAlarm; due times are aged by rewriting meta.
 */
import { env, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LedgerDO } from "../../durable-objects/ledger.ts";
import { LEDGER_D1_SCHEMA, schemaStatements } from "../../durable-objects/ledger-schema.ts";
import { GLOBAL_CHAIN } from "../../src/ledger/records.ts";
import type { LedgerApi, LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { Env } from "../../src/env.ts";
import { verifyChain } from "../../src/ledger/chain.ts";
import { checkpointOrigin, verifyCheckpoint } from "../../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import { batchedAppend, MAX_RPC_APPENDS } from "../../src/ports/ledger-batch.ts";

const migration = Object.values(import.meta.glob("../../migrations/0001_ledger.sql", { query: "?raw", import: "default", eager: true }))[0] as string;

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "https://gw.example.com" };
const privateJwk = JSON.parse(env.PORTCULLIS_SIGNING_KEY as string) as JsonWebKey & { kid: string };
const { d: _d, ...publicJwk } = privateJwk;
const JWKS = { keys: [publicJwk] };

let n = 0;
/** A fresh chain (team) per test: its stub as the API and as a raw stub for the test helpers. */
function chain(prefix: string) {
  const name = `${prefix}-${Date.now().toString(36)}-${n++}`;
  const raw = env.LEDGER.get(env.LEDGER.idFromName(`chain:${name}`));
  return { name, api: raw as unknown as LedgerApi, raw: raw as DurableObjectStub<LedgerDO> };
}
function globalChain() {
  const raw = env.LEDGER.get(env.LEDGER.idFromName(`chain:${GLOBAL_CHAIN}`));
  return { api: raw as unknown as LedgerApi, raw: raw as DurableObjectStub<LedgerDO> };
}

const now = () => new Date().toISOString();
function decision(team: string, id: string, i = 0): EntryDraft {
  return {
    kind: "decision",
    id,
    at: now(),
    body: {
      principal: `agent:${i % 3}`,
      team,
      run: null,
      upstream: "alpha",
      tool: `alpha__t${i % 5}`,
      arguments: { i },
      arguments_mode: "full",
      classification: { level: "read", source: "mapping" },
      decision: "allow",
      rule: null,
      reason: "allowed",
      mode: "enforce",
      policy_version: "p1",
      obligations: [],
      hold_id: null,
    },
  };
}
function outcome(id: string, decisionId: string, status: "succeeded" | "failed" | "uncertain" = "succeeded"): EntryDraft {
  return {
    kind: "outcome",
    id,
    at: now(),
    body: { decision_id: decisionId, status, result_hash: "ab".repeat(32), duration_ms: 3, obligations_applied: [], reason: null },
  };
}

async function readAll(api: LedgerApi): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  for (let i = 0; i < 100; i++) {
    const page = await api.read(out.length === 0 ? 0 : out[out.length - 1]!.seq, 1000);
    if (page.length === 0) break;
    out.push(...page);
  }
  return out;
}
async function d1Rows(name: string) {
  const r = await env.LEDGER_DB.prepare("SELECT * FROM ledger_entries WHERE chain = ? ORDER BY seq").bind(name).all<Record<string, string | number | null>>();
  return r.results;
}
/** Runs the alarm code once more, as a second delivery of the same alarm would. */
const alarmAgain = (raw: DurableObjectStub<LedgerDO>) => runInDurableObject(raw, (o: LedgerDO) => o.alarm());
/** Makes the pending 10 s checkpoint due now. */
const ageCheckpoint = (raw: DurableObjectStub<LedgerDO>) =>
  runInDurableObject(raw, (_o: LedgerDO, state) => {
    state.storage.sql.exec("UPDATE meta SET v = ? WHERE k = 'checkpoint_due'", JSON.stringify(Date.now() - 1));
  });

describe("LedgerDO", () => {
  it("D1 schema: the migration file and the statements the flush runs are one text", () => {
    expect(migration).toBe(LEDGER_D1_SCHEMA);
    const stmts = schemaStatements(migration);
    expect(stmts.filter((s) => s.startsWith("CREATE TABLE IF NOT EXISTS"))).toHaveLength(2);
    expect(stmts.filter((s) => s.startsWith("CREATE INDEX IF NOT EXISTS"))).toHaveLength(7);
    expect(stmts.every((s) => / IF NOT EXISTS /.test(s))).toBe(true);
  });

  it("D1 schema: after the flush's statements run, D1 holds exactly the tables and indexes the migration names, with their columns", async () => {
    const stmts = schemaStatements();
    await env.LEDGER_DB.batch(stmts.map((s) => env.LEDGER_DB.prepare(s)));
    const named = (kind: "TABLE" | "INDEX") => stmts.flatMap((s) => new RegExp(`^CREATE ${kind} IF NOT EXISTS (\\w+)`).exec(s)?.[1] ?? []).sort();
    const master = await env.LEDGER_DB.prepare("SELECT type, name, sql FROM sqlite_master WHERE name LIKE 'ledger_%' ORDER BY name").all<{
      type: string;
      name: string;
      sql: string | null;
    }>();
    const of = (type: string) => master.results.filter((r) => r.type === type && r.sql !== null).map((r) => r.name);
    expect(of("table").sort()).toEqual(named("TABLE"));
    expect(of("index").sort()).toEqual(named("INDEX"));
    expect(named("INDEX")).toHaveLength(7);
    // Statement by statement: what D1 keeps is the migration's text (whitespace aside, IF NOT EXISTS dropped).
    const norm = (s: string) =>
      s
        .replace(/\s+/g, " ")
        .replace(/ IF NOT EXISTS /, " ")
        .replace(/\( /g, "(")
        .replace(/ \)/g, ")")
        .trim();
    for (const s of stmts) {
      const name = /^CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)/.exec(s)![1]!;
      expect(norm(master.results.find((r) => r.name === name)!.sql!)).toBe(norm(s));
    }
  });

  it("500 concurrent appends: group commit, contiguous seq, every prev the previous hash, the chain verifies; D1 holds them one to one", async () => {
    const { name, api, raw } = chain("team-load");
    const results = await Promise.all(Array.from({ length: 500 }, (_, i) => api.append([decision(name, `d-${i}`, i)], SIGNING)));
    expect(results.every((r) => r.length === 1)).toBe(true);
    const returned = results.map((r) => r[0]!).sort((a, b) => a.seq - b.seq);
    expect(returned.map((e) => e.seq)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));

    const stored = await readAll(api);
    expect(stored).toHaveLength(500);
    expect(stored).toEqual(returned);
    expect(verifyChain(name, stored)).toEqual({ ok: true, head: { seq: 500, hash: stored[499]!.hash }, count: 500 });
    expect(new Set(stored.map((e) => e.prev)).size).toBe(500);
    for (let i = 1; i < stored.length; i++) expect(stored[i]!.prev).toBe(stored[i - 1]!.hash);
    expect(await api.head()).toEqual({ seq: 500, hash: stored[499]!.hash });

    const st = await api.status();
    expect(st.chain).toBe(name);
    expect(st.appends).toBe(500);
    expect(st.transactions).toBeGreaterThan(0);
    expect(st.transactions).toBeLessThan(500);
    // 500 ≥ 256 unanchored: a checkpoint of the head at the time was signed right after the commit.
    expect(st.checkpointSize).toBeGreaterThanOrEqual(256);

    // D1: nothing until the alarm (≤ 1 s after the append); then exactly these 500 rows.
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    let rows = await d1Rows(name);
    expect(rows).toHaveLength(500);
    expect(rows.map((r) => [r.seq, r.hash, r.prev, r.id])).toEqual(stored.map((e) => [e.seq, e.hash, e.prev, e.id]));
    expect(rows[7]).toMatchObject({
      kind: "decision",
      team: name,
      principal: "agent:1",
      upstream: "alpha",
      tool: "alpha__t2",
      decision_id: stored[7]!.id,
      status: null,
      v: 1,
    });
    expect(JSON.parse(rows[7]!.body as string)).toEqual(stored[7]!.body);
    expect((await api.status()).flushedSeq).toBe(500);

    // Flushing the same entries again (a repeated alarm, a lost flush mark) adds nothing.
    await runInDurableObject(raw, (_o: LedgerDO, state) => {
      state.storage.sql.exec("DELETE FROM meta WHERE k = 'flushed_seq'");
    });
    await alarmAgain(raw);
    await alarmAgain(raw);
    rows = await d1Rows(name);
    expect(rows).toHaveLength(500);
    expect(rows.map((r) => r.hash)).toEqual(stored.map((e) => e.hash));
    expect((await api.status()).flushedSeq).toBe(500);

    // Evicted and back: the chain continues where it was.
    await evictDurableObject(raw);
    const [next] = await api.append([decision(name, "d-after")], SIGNING);
    expect(next).toMatchObject({ seq: 501, prev: stored[499]!.hash, chain: name });
  });

  it("signs a checkpoint when 256 entries are unanchored and commits it to the _global chain", async () => {
    const { name, api, raw } = chain("team-cp256");
    await api.append(
      Array.from({ length: 255 }, (_, i) => decision(name, `a-${i}`, i)),
      SIGNING,
    );
    expect(await api.checkpoints(0)).toEqual([]);
    expect((await api.status()).unanchored).toBe(255);
    const [e256] = await api.append([decision(name, "a-255")], SIGNING);
    expect(e256!.seq).toBe(256);

    const cps = await api.checkpoints(0);
    expect(cps).toHaveLength(1);
    expect(cps[0]).toMatchObject({ chain: name, size: 256, hash: e256!.hash });
    const verdict = await verifyCheckpoint(cps[0]!.note, JWKS);
    expect(verdict).toMatchObject({ ok: true, origin: checkpointOrigin(SIGNING.gateway, name), size: 256, hash: e256!.hash });
    expect(verdict.ok && verdict.origin).toBe(`gw.example.com/ledger/${name}`);
    // Another key does not verify it.
    expect((await verifyCheckpoint(cps[0]!.note, { keys: [{ ...publicJwk, x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo" }] })).ok).toBe(false);

    const st = await api.status();
    expect(st).toMatchObject({ checkpointSize: 256, unanchored: 0, checkpointProblem: null, anchoredSize: 256, anchorProblem: null });
    const g = globalChain();
    const inGlobal = await g.api.traceCall(`checkpoint:${name}:256`);
    expect(inGlobal).toHaveLength(1);
    expect(inGlobal[0]).toMatchObject({ chain: GLOBAL_CHAIN, kind: "checkpoint", body: { chain: name, size: 256, hash: e256!.hash, note: cps[0]!.note } });

    // The alarm has nothing more to sign (idempotent), and flushes the checkpoint to D1.
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    await alarmAgain(raw);
    expect(await api.checkpoints(0)).toHaveLength(1);
    const d1cp = await env.LEDGER_DB.prepare("SELECT * FROM ledger_checkpoints WHERE chain = ?").bind(name).all();
    expect(d1cp.results).toEqual([{ chain: name, size: 256, hash: e256!.hash, at: cps[0]!.at, note: cps[0]!.note }]);
    // The same checkpoint committed again (a retried anchor) is not a second global entry.
    await g.api.append(
      [{ kind: "checkpoint", id: `checkpoint:${name}:256`, at: cps[0]!.at, body: { chain: name, size: 256, hash: e256!.hash, note: cps[0]!.note } }],
      SIGNING,
    );
    expect(await g.api.traceCall(`checkpoint:${name}:256`)).toHaveLength(1);
  });

  it("signs a checkpoint from the alarm within 10 s of an unanchored entry; the _global chain signs its own the same way", async () => {
    const { name, api, raw } = chain("team-cp10s");
    const entries = await api.append([decision(name, "b-1"), decision(name, "b-2"), decision(name, "b-3")], SIGNING);
    expect(await runDurableObjectAlarm(raw)).toBe(true); // the D1 flush, 1 s after the append
    expect(await api.checkpoints(0)).toEqual([]);
    expect((await d1Rows(name)).map((r) => r.seq)).toEqual([1, 2, 3]);
    // The alarm stays armed for the checkpoint, due 10 s after the first unanchored entry.
    const due = await runInDurableObject(raw, async (_o: LedgerDO, state) => ({
      alarm: await state.storage.getAlarm(),
      due: JSON.parse(state.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'checkpoint_due'").one().v) as number,
    }));
    expect(due.alarm).toBe(due.due);
    expect(due.due - Date.now()).toBeLessThanOrEqual(10_000);

    await ageCheckpoint(raw);
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    const cps = await api.checkpoints(0);
    expect(cps.map((c) => [c.size, c.hash])).toEqual([[3, entries[2]!.hash]]);
    expect(await verifyCheckpoint(cps[0]!.note, JWKS)).toMatchObject({ ok: true, size: 3, hash: entries[2]!.hash });
    // A second delivery of the alarm signs nothing new.
    await alarmAgain(raw);
    await alarmAgain(raw);
    expect(await api.checkpoints(0)).toHaveLength(1);
    expect((await api.status()).anchoredSize).toBe(3);

    // The global chain holds the team's checkpoint and signs a checkpoint that covers it.
    const g = globalChain();
    const [anchor] = await g.api.traceCall(`checkpoint:${name}:3`);
    expect(anchor).toMatchObject({ kind: "checkpoint", body: { chain: name, size: 3, hash: entries[2]!.hash } });
    await ageCheckpoint(g.raw);
    await alarmAgain(g.raw);
    const gcps = await g.api.checkpoints(0);
    const covering = gcps.find((c) => c.size >= anchor!.seq);
    expect(covering).toBeDefined();
    const gv = await verifyCheckpoint(covering!.note, JWKS);
    expect(gv).toMatchObject({ ok: true, origin: "gw.example.com/ledger/_global", size: covering!.size });
    const gEntries = await readAll(g.api);
    expect(verifyChain(GLOBAL_CHAIN, gEntries).ok).toBe(true);
    expect(gEntries.find((e) => e.seq === covering!.size)!.hash).toBe(covering!.hash);
  });

  it("without a signing key no checkpoint is signed, and status says why", async () => {
    const { name, api, raw } = chain("team-nokey");
    const signing = { secret: "LEDGER_TEST_NO_SUCH_SECRET", gateway: SIGNING.gateway };
    await api.append(
      Array.from({ length: 300 }, (_, i) => decision(name, `c-${i}`, i)),
      signing,
    );
    expect(await api.checkpoints(0)).toEqual([]);
    const st = await api.status();
    expect(st.checkpointProblem).toBe("no signing key configured: the Worker secret LEDGER_TEST_NO_SUCH_SECRET is not set");
    expect(st).toMatchObject({ checkpointSize: 0, unanchored: 300, anchoredSize: 0 });
    // A secret that is not an Ed25519 key is named, its content never shown.
    await api.append([decision(name, "c-300")], { secret: "PORTCULLIS_CONFIG", gateway: SIGNING.gateway });
    const st2 = await api.status();
    expect(st2.checkpointProblem).toBe("the Worker secret PORTCULLIS_CONFIG holds no usable Ed25519 private key");
    // The appends themselves were never affected, and the next append with a key signs.
    await runDurableObjectAlarm(raw);
    await api.append([decision(name, "c-301")], SIGNING);
    expect((await api.checkpoints(0)).map((c) => c.size)).toEqual([302]);
    expect((await api.status()).checkpointProblem).toBeNull();
  });

  it("traceCall returns a call's decision and outcome, in order; D1 rows of the outcome carry the decision's principal and tool", async () => {
    const { name, api, raw } = chain("team-trace");
    await api.append([decision(name, "dec-1", 1)], SIGNING);
    await api.append([decision(name, "dec-2", 2)], SIGNING);
    await api.append([outcome("out-1", "dec-1", "failed")], SIGNING);
    await api.append(
      [{ kind: "blocked", id: "blk-1", at: now(), body: { principal: "agent:z", team: name, run: null, tool: "alpha__x", check: "policy", reason: "denied" } }],
      SIGNING,
    );
    const t = await api.traceCall("dec-1");
    expect(t.map((e) => [e.seq, e.kind, e.id])).toEqual([
      [1, "decision", "dec-1"],
      [3, "outcome", "out-1"],
    ]);
    expect(await api.traceCall("nope")).toEqual([]);
    await runDurableObjectAlarm(raw);
    const rows = await d1Rows(name);
    expect(rows.map((r) => [r.kind, r.principal, r.tool, r.status, r.decision_id])).toEqual([
      ["decision", "agent:1", "alpha__t1", null, "dec-1"],
      ["decision", "agent:2", "alpha__t2", null, "dec-2"],
      ["outcome", "agent:1", "alpha__t1", "failed", "dec-1"],
      ["blocked", "agent:z", "alpha__x", "blocked", null],
    ]);
  });

  it("appendEach: several callers in one RPC, each checked and refused alone, all in one transaction", async () => {
    const { name, api } = chain("team-each");
    await api.append([decision(name, "first")], SIGNING);
    const before = await api.status();
    const bad: EntryDraft = { kind: "decision", id: "bad", at: now(), body: { x: Number.NaN } };
    const out = await api.appendEach([[decision(name, "e-0")], [bad], [decision(name, "e-1"), outcome("o-1", "e-1")], []], SIGNING);
    expect(out).toHaveLength(4);
    expect("entries" in out[0]! && out[0].entries.map((e) => [e.id, e.seq])).toEqual([["e-0", 2]]);
    expect("error" in out[1]! && out[1].error).toMatch(/cannot be canonicalised/);
    expect("entries" in out[2]! && out[2].entries.map((e) => [e.id, e.seq])).toEqual([
      ["e-1", 3],
      ["o-1", 4],
    ]);
    expect(out[3]).toEqual({ entries: [] });
    const after = await api.status();
    expect(after.transactions - before.transactions).toBe(1);
    expect(after.appends - before.appends).toBe(2);
    expect(verifyChain(name, await readAll(api))).toMatchObject({ ok: true, count: 4 });
  });

  it("500 concurrent appends through the Worker's group commit (ledger-batch.ts): each caller gets its own entry, the chain verifies, far fewer RPCs than appends", async () => {
    const { name, api } = chain("team-batch");
    const calls: number[] = [];
    // Count the RPCs the batcher makes by wrapping the namespace's stub.
    const counting = {
      ...env,
      LEDGER: {
        idFromName: (n: string) => env.LEDGER.idFromName(n),
        get: (id: DurableObjectId) => {
          const stub = env.LEDGER.get(id) as unknown as LedgerApi;
          return {
            appendEach: (c: EntryDraft[][], s: LedgerSigning) => {
              calls.push(c.length);
              return stub.appendEach(c, s);
            },
          };
        },
      },
    } as unknown as Env;
    const results = await Promise.all(Array.from({ length: 500 }, (_, i) => batchedAppend(counting, name, SIGNING, [decision(name, `b-${i}`, i)], 5000)));
    for (const [i, r] of results.entries()) expect(r.map((e) => e.id)).toEqual([`b-${i}`]);
    const stored = await readAll(api);
    expect(stored.map((e) => e.seq)).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
    expect(verifyChain(name, stored)).toMatchObject({ ok: true, count: 500 });
    expect(calls.reduce((a, b) => a + b, 0)).toBe(500);
    expect(calls.length).toBeLessThan(50);
    expect(Math.max(...calls)).toBeLessThanOrEqual(MAX_RPC_APPENDS);
  });

  it("a draft that cannot be hashed is refused alone; a failed transaction refuses every append in it and leaves the chain unchanged", async () => {
    const { name, api, raw } = chain("team-fail");
    await api.append([decision(name, "ok-0")], SIGNING);
    const bad: EntryDraft = { kind: "decision", id: "bad", at: now(), body: { x: Number.NaN } };
    const mixed = await Promise.allSettled([
      api.append([decision(name, "ok-1")], SIGNING),
      api.append([bad], SIGNING),
      api.append([decision(name, "ok-2")], SIGNING),
    ]);
    expect(mixed.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(String((mixed[1] as PromiseRejectedResult).reason)).toMatch(/cannot be canonicalised/);
    const huge = await api.append([{ kind: "decision", id: "huge", at: now(), body: { blob: "x".repeat(300_000) } }], SIGNING).then(
      () => null,
      (e: unknown) => e,
    );
    expect(String(huge)).toMatch(/at most 262144 are kept/);
    expect(verifyChain(name, await readAll(api))).toMatchObject({ ok: true, count: 3 });

    const before = { head: await api.head(), status: await api.status() };
    // Inject a storage failure inside the transaction: every insert into entries aborts.
    await runInDurableObject(raw, (_o: LedgerDO, state) => {
      state.storage.sql.exec("CREATE TRIGGER inject_failure BEFORE INSERT ON entries BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
    });
    const failed = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) => api.append([decision(name, `f-${i}`), outcome(`fo-${i}`, `f-${i}`)], SIGNING)),
    );
    expect(failed.every((r) => r.status === "rejected")).toBe(true);
    for (const r of failed) expect(String((r as PromiseRejectedResult).reason)).toMatch(/could not be written.*injected failure.*nothing was appended/);
    expect(await api.head()).toEqual(before.head);
    expect(await readAll(api)).toHaveLength(3);
    expect((await api.status()).transactions).toBe(before.status.transactions);
    expect(await api.traceCall("f-0")).toEqual([]);

    await runInDurableObject(raw, (_o: LedgerDO, state) => {
      state.storage.sql.exec("DROP TRIGGER inject_failure");
    });
    const [after] = await api.append([decision(name, "ok-3")], SIGNING);
    expect(after).toMatchObject({ seq: 4, prev: before.head.hash });
    expect(verifyChain(name, await readAll(api))).toMatchObject({ ok: true, count: 4 });
  });

  it("D1 failures back off and retry, and never affect appends", async () => {
    const { name, api, raw } = chain("team-d1down");
    await api.append([decision(name, "e-1")], SIGNING);
    const real = env.LEDGER_DB;
    const down = {
      prepare: (q: string) => real.prepare(q),
      batch: async () => {
        throw new Error("D1 is unavailable");
      },
    } as unknown as D1Database;
    const setDb = (db: D1Database) =>
      runInDurableObject(raw, (o: LedgerDO) => {
        (o as unknown as { env: Env }).env = { ...env, LEDGER_DB: db };
      });
    await setDb(down);
    expect(await runDurableObjectAlarm(raw)).toBe(true);
    let st = await api.status();
    expect(st).toMatchObject({ flushedSeq: 0, flushFailures: 1, flushProblem: "D1 is unavailable" });
    const retry1 = await runInDurableObject(raw, (_o: LedgerDO, state) => state.storage.getAlarm());
    expect(retry1! - Date.now()).toBeGreaterThan(0);
    expect(retry1! - Date.now()).toBeLessThanOrEqual(1_000);

    // Appends go on while D1 is down.
    const more = await Promise.all([api.append([decision(name, "e-2")], SIGNING), api.append([decision(name, "e-3")], SIGNING)]);
    expect(more.map((r) => r[0]!.seq).sort()).toEqual([2, 3]);

    // The retry waits for its backoff; a second failure doubles it.
    await alarmAgain(raw);
    expect((await api.status()).flushFailures).toBe(1);
    const age = () =>
      runInDurableObject(raw, (_o: LedgerDO, state) => {
        const t = JSON.parse(state.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'flush_trouble'").one().v) as { retryAt: number };
        state.storage.sql.exec("UPDATE meta SET v = ? WHERE k = 'flush_trouble'", JSON.stringify({ ...t, retryAt: Date.now() - 1 }));
      });
    await age();
    await alarmAgain(raw);
    st = await api.status();
    expect(st.flushFailures).toBe(2);
    const retry2 = JSON.parse(
      await runInDurableObject(raw, (_o: LedgerDO, state) => state.storage.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'flush_trouble'").one().v),
    ) as { retryAt: number };
    expect(retry2.retryAt - Date.now()).toBeGreaterThan(1_000);
    expect(retry2.retryAt - Date.now()).toBeLessThanOrEqual(2_000);

    await setDb(real);
    await age();
    await alarmAgain(raw);
    st = await api.status();
    expect(st).toMatchObject({ flushedSeq: 3, flushFailures: 0, flushProblem: null });
    expect((await d1Rows(name)).map((r) => r.id)).toEqual(["e-1", "e-2", "e-3"]);
  });

  it("an object not addressed by a chain name refuses appends", async () => {
    const raw = env.LEDGER.get(env.LEDGER.newUniqueId());
    const api = raw as unknown as LedgerApi;
    const refused = await api.append([decision("x", "z-1")], SIGNING).then(
      () => null,
      (e: unknown) => e,
    );
    expect(String(refused)).toMatch(/not addressed by a chain name/);
    expect(await api.head()).toEqual({ seq: 0, hash: "0".repeat(64) });
  });
});
