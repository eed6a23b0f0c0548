/**
 * HistoryDO: one per principal (`principal:<sub>` in the HISTORY namespace), holding that
 * principal's recent tools/calls — (call id, grant jti, run id, exposed name, upstream and its own
 * tool name, numeric arguments, time, status) rows — and its budget counters (calls per grant, calls per run), so policy history
 * rules and budgets see every call of the principal whichever isolate, session or connection it
 * came through. A thin state machine: the logic is the plain exported functions below over a
 * tiny SQL interface (`HistorySql`), which the class runs inside one synchronous block each, so a
 * budget check and the insert it allows are one atomic step (the object is single-threaded).
 * Retention by alarm (docs/storage.md): call rows 25 h, counters and run successes 8 days after
 * their last use. Must never: create state on a read (an unknown principal's object stays empty),
 * record a call a budget refused, count another principal's calls (the object refuses a call whose
 * principal is not the one it is named for), or answer a window longer than it keeps rows for.
 */
import { DurableObject } from "cloudflare:workers";
import { toolGlobMatch } from "../src/wire/glob.ts";
import {
  HISTORY_BUDGET_RETENTION_MS,
  HISTORY_CALL_RETENTION_MS,
  HISTORY_CALL_VERSION,
  HISTORY_WINDOW_MAX_MS,
  type HistoryAdmission,
  type HistoryApi,
  type HistoryBudget,
  type HistoryCall,
  type HistoryCallStatus,
  type HistoryQuerySpec,
} from "./contract-history.ts";

/** Every table of the object. Created by the first admitted call (ensureTables), never by a read. */
export const HISTORY_SCHEMA = `
CREATE TABLE IF NOT EXISTS calls (call_id TEXT PRIMARY KEY, jti TEXT, run_id TEXT, exposed_name TEXT NOT NULL, numbers TEXT NOT NULL, at INTEGER NOT NULL, status TEXT NOT NULL, v INTEGER NOT NULL, upstream TEXT, tool TEXT);
CREATE INDEX IF NOT EXISTS calls_at ON calls (at);
CREATE INDEX IF NOT EXISTS calls_run ON calls (run_id, at);
CREATE INDEX IF NOT EXISTS calls_jti ON calls (jti, at);
CREATE TABLE IF NOT EXISTS budgets (scope TEXT NOT NULL, key TEXT NOT NULL, calls INTEGER NOT NULL, last_at INTEGER NOT NULL, PRIMARY KEY (scope, key));
CREATE TABLE IF NOT EXISTS successes (run_id TEXT NOT NULL, exposed_name TEXT NOT NULL, at INTEGER NOT NULL, upstream TEXT, tool TEXT, PRIMARY KEY (run_id, exposed_name));
`;

/**
 * Columns added after the first schema, for objects whose tables predate them (SQLite adds a
 * column in place; rows written before read NULL there and match only exposed-name queries).
 */
const ADDED_COLUMNS: ReadonlyArray<readonly [table: string, column: string]> = [
  ["calls", "upstream"],
  ["calls", "tool"],
  ["successes", "upstream"],
  ["successes", "tool"],
];

/** The alarm runs at most this often: a row lives between its horizon and its horizon plus this. */
export const HISTORY_SWEEP_MS = 3_600_000;
/** Most queries one snapshot answers. */
export const MAX_QUERIES = 256;
/** Most numeric arguments one call keeps, and the longest path of one. */
export const MAX_NUMBERS = 1024;
export const MAX_PATH_CHARS = 512;
/** Longest call id, exposed name or glob accepted. */
const MAX_ID_CHARS = 512;

export type SqlValue = string | number | null;
/** The SQL this module needs: run one statement, get its rows. */
export interface HistorySql {
  exec(query: string, ...binds: SqlValue[]): Array<Record<string, SqlValue>>;
}
/** The object's own SQLite storage as a HistorySql. */
export function sqlOf(storage: SqlStorage): HistorySql {
  return { exec: (q, ...b) => storage.exec(q, ...b).toArray() as Array<Record<string, SqlValue>> };
}

/** Whether the tables exist (looked up, never created). */
export function hasTables(sql: HistorySql): boolean {
  return sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'calls'").length > 0;
}
/** Creates the tables, or adds the columns a table made by an earlier schema lacks (once per object: `migrated`). */
export function ensureTables(sql: HistorySql, migrated?: { done: boolean }): void {
  sql.exec(HISTORY_SCHEMA);
  if (migrated?.done) return;
  for (const [table, column] of ADDED_COLUMNS) {
    const has = sql.exec(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = ?`, column).length > 0;
    if (!has) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} TEXT`);
  }
  if (migrated) migrated.done = true;
}

const fail = (why: string): never => {
  throw new Error(`history: ${why}`);
};
const isText = (v: unknown, max = MAX_ID_CHARS): v is string => typeof v === "string" && v.length > 0 && v.length <= max;
const SCOPES = new Set(["principal", "run", "grant"]);

/** Throws unless `q` is a query this object can answer exactly (a window it keeps rows for). */
export function checkQuery(q: HistoryQuerySpec): void {
  if (q === null || typeof q !== "object") fail("a query must be an object");
  if (!isText(q.tool)) fail("a query needs a tool glob of 1–512 characters");
  if (q.upstream !== undefined && !isText(q.upstream, 64)) fail("a query's upstream glob must be 1–64 characters");
  if (q.kind === "succeeded") {
    if (q.scope !== "run") fail('a "succeeded" query is about the run (scope "run")');
    return;
  }
  if (q.kind !== "count" && q.kind !== "total") fail(`unknown query kind ${JSON.stringify((q as { kind: unknown }).kind)}`);
  if (!SCOPES.has(q.scope)) fail(`unknown scope ${JSON.stringify(q.scope)}`);
  if (!Number.isSafeInteger(q.withinMs) || q.withinMs <= 0 || q.withinMs > HISTORY_WINDOW_MAX_MS)
    fail(`a window must be 1 ms to ${HISTORY_WINDOW_MAX_MS} ms (24 h); got ${q.withinMs}`);
  if (q.kind === "total" && !isText(q.arg, MAX_PATH_CHARS)) fail("a total needs an argument path of 1–512 characters");
}

/** The WHERE clause (after the window) and binds that restrict calls to a scope; null when the scope holds nothing (no run). */
function scopeFilter(scope: HistoryQuerySpec["scope"], jti: string | null, runId: string | null): { where: string; binds: SqlValue[] } | null {
  if (scope === "principal") return { where: "", binds: [] };
  if (scope === "grant") return { where: " AND jti IS ?", binds: [jti] };
  return runId === null ? null : { where: " AND run_id = ?", binds: [runId] };
}

/** A row's names as toolGlobMatch reads them (upstream and tool NULL on rows written before they were kept). */
function identityOf(r: Record<string, SqlValue>): { exposed: string; upstream: string | null; tool: string | null } {
  return { exposed: String(r.name), upstream: typeof r.upstream === "string" ? r.upstream : null, tool: typeof r.tool === "string" ? r.tool : null };
}

function parseNumbers(text: SqlValue): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(String(text));
  } catch {
    v = null;
  }
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : fail("a stored call's numeric arguments are unreadable");
}

/**
 * The answers to `queries` for a call of grant `jti` (null: a principal without a grant — its
 * grantless calls are one grant scope) in run `runId` (null: no run — run queries answer 0 and
 * false), at `now`. A window holds the calls with `at > now - withinMs`. Counts and totals cover
 * every admitted call, whatever its outcome; `succeeded` asks whether a call of the run matching
 * the glob settled as succeeded. Reads only: an object without tables answers zeros.
 */
export function answerQueries(
  sql: HistorySql,
  jti: string | null,
  runId: string | null,
  queries: HistoryQuerySpec[],
  now: number,
  migrated?: { done: boolean },
): Array<number | boolean> {
  if (!Array.isArray(queries) || queries.length > MAX_QUERIES) fail(`a snapshot takes at most ${MAX_QUERIES} queries`);
  if (!Number.isFinite(now)) fail("now must be a time in ms");
  if (jti !== null && typeof jti !== "string") fail("jti must be a string or null");
  if (runId !== null && typeof runId !== "string") fail("runId must be a string or null");
  for (const q of queries) checkQuery(q);
  const ready = hasTables(sql);
  // Tables an earlier schema made get its new columns first (nothing is created for an object without tables).
  if (ready) ensureTables(sql, migrated);
  // One scan per (what, scope, window), however many queries share it.
  const scans = new Map<string, Array<Record<string, SqlValue>>>();
  const scan = (key: string, run: () => Array<Record<string, SqlValue>>) => {
    let rows = scans.get(key);
    if (!rows) {
      rows = run();
      scans.set(key, rows);
    }
    return rows;
  };
  return queries.map((q): number | boolean => {
    const filter = scopeFilter(q.scope, jti, runId);
    if (q.kind === "succeeded") {
      if (!ready || filter === null) return false;
      const rows = scan("succeeded", () => sql.exec("SELECT exposed_name AS name, upstream, tool FROM successes WHERE run_id = ?", runId));
      return rows.some((r) => toolGlobMatch(q, identityOf(r)));
    }
    if (!ready || filter === null) return 0;
    const since = now - q.withinMs;
    if (q.kind === "count") {
      const rows = scan(`count|${q.scope}|${q.withinMs}`, () =>
        sql.exec(
          `SELECT exposed_name AS name, upstream, tool, COUNT(*) AS n FROM calls WHERE at > ?${filter.where} GROUP BY exposed_name, upstream, tool`,
          since,
          ...filter.binds,
        ),
      );
      let n = 0;
      for (const r of rows) if (toolGlobMatch(q, identityOf(r))) n += Number(r.n);
      return n;
    }
    const rows = scan(`total|${q.scope}|${q.withinMs}`, () =>
      sql.exec(`SELECT exposed_name AS name, upstream, tool, numbers FROM calls WHERE at > ?${filter.where}`, since, ...filter.binds),
    );
    let t = 0;
    for (const r of rows) {
      if (!toolGlobMatch(q, identityOf(r))) continue;
      const x = parseNumbers(r.numbers ?? null)[q.arg];
      if (typeof x === "number" && Number.isFinite(x)) t += x;
    }
    return t;
  });
}

/** Throws unless `call` is a well-formed call of the principal this object is named for (`principal:<sub>`). */
export function checkCall(call: HistoryCall, objectName: string | undefined): void {
  if (call === null || typeof call !== "object") fail("a call must be an object");
  if (typeof call.principal !== "string" || objectName !== `principal:${call.principal}`)
    fail("this object holds another principal's history (or was not addressed by principal name); nothing was recorded");
  if (!isText(call.callId, 256)) fail("a call needs an id of 1–256 characters");
  if (call.jti !== undefined && call.jti !== null && typeof call.jti !== "string") fail("jti must be a string");
  if (call.runId !== null && typeof call.runId !== "string") fail("runId must be a string or null");
  if (!isText(call.exposedName)) fail("a call needs an exposed tool name of 1–512 characters");
  if (call.upstream !== undefined && !isText(call.upstream, 64)) fail("a call's upstream must be a name of 1–64 characters");
  if (call.tool !== undefined && !isText(call.tool)) fail("a call's own tool name must be 1–512 characters");
  if (!Number.isFinite(call.at)) fail("a call needs its time in ms");
  const nums = call.numbers;
  if (nums === null || typeof nums !== "object" || Array.isArray(nums)) fail("numbers must be an object of numeric arguments by path");
  const entries = Object.entries(nums);
  if (entries.length > MAX_NUMBERS) fail(`a call keeps at most ${MAX_NUMBERS} numeric arguments`);
  for (const [k, v] of entries) {
    if (!isText(k, MAX_PATH_CHARS)) fail("a numeric argument's path must be 1–512 characters");
    if (typeof v !== "number" || !Number.isFinite(v)) fail(`numeric argument ${JSON.stringify(k)} is not a finite number`);
  }
}

function checkLimit(v: unknown, name: string): void {
  if (v !== undefined && (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0)) fail(`${name} must be a non-negative integer`);
}

function used(sql: HistorySql, scope: "grant" | "run", key: string): number {
  const r = sql.exec("SELECT calls FROM budgets WHERE scope = ? AND key = ?", scope, key)[0];
  return r ? Number(r.calls) : 0;
}
function bump(sql: HistorySql, scope: "grant" | "run", key: string, at: number): void {
  sql.exec(
    "INSERT INTO budgets (scope, key, calls, last_at) VALUES (?, ?, 1, ?) ON CONFLICT (scope, key) DO UPDATE SET calls = calls + 1, last_at = MAX(last_at, excluded.last_at)",
    scope,
    key,
    at,
  );
}

/**
 * Admits one call: counts the calls its grant (same jti, or the grantless calls when it has none)
 * and its run have had — all of them, as long as the counters are kept (HISTORY_BUDGET_RETENTION_MS
 * after their last call) — and, when either count has reached its limit, records nothing and
 * names the budget (grant first). Otherwise inserts the call (status `admitted`) and counts it.
 * A call without a run has no run budget to spend: it is a run of one call. Admitting the same
 * call id again answers ok and counts nothing (a retried RPC). Run it inside one synchronous
 * block (transactionSync): the check and the insert must not be separated by an await.
 */
export function admitCall(
  sql: HistorySql,
  call: HistoryCall,
  limits: HistoryBudget,
  objectName: string | undefined,
  now: number,
  migrated?: { done: boolean },
): HistoryAdmission {
  checkCall(call, objectName);
  if (limits === null || typeof limits !== "object") fail("limits must be an object");
  checkLimit(limits.grantCalls, "grantCalls");
  checkLimit(limits.runCalls, "runCalls");
  ensureTables(sql, migrated);
  if (sql.exec("SELECT 1 FROM calls WHERE call_id = ?", call.callId).length > 0) return { ok: true };
  const grantKey = call.jti ?? "";
  const grantUsed = used(sql, "grant", grantKey);
  if (limits.grantCalls !== undefined && grantUsed >= limits.grantCalls) return { ok: false, budget: "grant", used: grantUsed, limit: limits.grantCalls };
  const runUsed = call.runId === null ? 0 : used(sql, "run", call.runId);
  if (limits.runCalls !== undefined && runUsed >= limits.runCalls) return { ok: false, budget: "run", used: runUsed, limit: limits.runCalls };
  sql.exec(
    "INSERT INTO calls (call_id, jti, run_id, exposed_name, numbers, at, status, v, upstream, tool) VALUES (?, ?, ?, ?, ?, ?, 'admitted', ?, ?, ?)",
    call.callId,
    call.jti ?? null,
    call.runId,
    call.exposedName,
    JSON.stringify(call.numbers),
    call.at,
    HISTORY_CALL_VERSION,
    call.upstream ?? null,
    call.tool ?? null,
  );
  // Counters age by the object's clock, so a caller's skewed `at` cannot shorten their life.
  bump(sql, "grant", grantKey, Math.max(now, call.at));
  if (call.runId !== null) bump(sql, "run", call.runId, Math.max(now, call.at));
  return { ok: true };
}

const OUTCOMES = new Set<HistoryCallStatus>(["succeeded", "failed", "uncertain"]);

/** Settles an admitted call's outcome once (a later settle of the same call changes nothing); an unknown call id is ignored. A success is remembered for its run. */
export function settleCall(sql: HistorySql, callId: string, status: HistoryCallStatus, now: number, migrated?: { done: boolean }): void {
  if (!OUTCOMES.has(status)) fail(`unknown outcome ${JSON.stringify(status)}`);
  if (typeof callId !== "string") fail("a call id must be a string");
  if (!hasTables(sql)) return;
  ensureTables(sql, migrated);
  const row = sql.exec("SELECT run_id, exposed_name, upstream, tool FROM calls WHERE call_id = ? AND status = 'admitted'", callId)[0];
  if (!row) return;
  sql.exec("UPDATE calls SET status = ? WHERE call_id = ?", status, callId);
  if (status === "succeeded" && row.run_id !== null && row.run_id !== undefined)
    sql.exec(
      "INSERT INTO successes (run_id, exposed_name, at, upstream, tool) VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id, exposed_name) DO UPDATE SET at = MAX(at, excluded.at), upstream = excluded.upstream, tool = excluded.tool",
      row.run_id ?? null,
      row.exposed_name ?? null,
      now,
      row.upstream ?? null,
      row.tool ?? null,
    );
}

/**
 * Retention: deletes call rows older than HISTORY_CALL_RETENTION_MS, and budget counters and run
 * successes unused for HISTORY_BUDGET_RETENTION_MS; answers when it must run next (the earliest
 * row's horizon, but not sooner than HISTORY_SWEEP_MS from now), or null when nothing is left.
 * Running it again changes nothing.
 */
export function sweep(sql: HistorySql, now: number): number | null {
  if (!hasTables(sql)) return null;
  sql.exec("DELETE FROM calls WHERE at < ?", now - HISTORY_CALL_RETENTION_MS);
  sql.exec("DELETE FROM budgets WHERE last_at < ?", now - HISTORY_BUDGET_RETENTION_MS);
  sql.exec("DELETE FROM successes WHERE at < ?", now - HISTORY_BUDGET_RETENTION_MS);
  const r = sql.exec("SELECT (SELECT MIN(at) FROM calls) AS c, (SELECT MIN(last_at) FROM budgets) AS b, (SELECT MIN(at) FROM successes) AS s")[0];
  const due: number[] = [];
  if (r?.c !== null && r?.c !== undefined) due.push(Number(r.c) + HISTORY_CALL_RETENTION_MS);
  if (r?.b !== null && r?.b !== undefined) due.push(Number(r.b) + HISTORY_BUDGET_RETENTION_MS);
  if (r?.s !== null && r?.s !== undefined) due.push(Number(r.s) + HISTORY_BUDGET_RETENTION_MS);
  return due.length === 0 ? null : Math.max(Math.min(...due), now + HISTORY_SWEEP_MS);
}

export class HistoryDO extends DurableObject implements HistoryApi {
  private sql: HistorySql;
  /** This instance brought the tables to the current schema (ensureTables). */
  private migrated = { done: false };

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = sqlOf(ctx.storage.sql);
  }

  async snapshot(jti: string | null, runId: string | null, queries: HistoryQuerySpec[], now: number): Promise<Array<number | boolean>> {
    return answerQueries(this.sql, jti ?? null, runId ?? null, queries, now, this.migrated);
  }

  async admit(call: HistoryCall, limits: HistoryBudget): Promise<HistoryAdmission> {
    // Check and insert in one synchronous transaction: no other request runs in between.
    const verdict = this.ctx.storage.transactionSync(() => admitCall(this.sql, call, limits, this.ctx.id.name, Date.now(), this.migrated));
    if (verdict.ok && (await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now() + HISTORY_CALL_RETENTION_MS);
    return verdict;
  }

  async settle(callId: string, status: Exclude<HistoryCallStatus, "admitted">): Promise<void> {
    this.ctx.storage.transactionSync(() => settleCall(this.sql, callId, status, Date.now(), this.migrated));
  }

  override async alarm(): Promise<void> {
    const next = sweep(this.sql, Date.now());
    if (next !== null) await this.ctx.storage.setAlarm(next);
  }
}
