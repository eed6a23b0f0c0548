/**
 * The LedgerDO's stored state, as plain functions over its DO SQLite handle: the `meta` rows it
 * reads and writes (JSON values by key), the head and newest checkpoint as the tables hold them,
 * the in-memory `ChainState` the append path runs on (loaded here once per instance), the two
 * meta setters that keep that memory in step with the row they write, and the `Trouble` record a
 * background failure (D1 flush, anchoring) is kept as. Every function takes the `SqlStorage` (and
 * the state object) it works on; the object decides when each runs. Must never: open a
 * transaction of its own, change memory before or without the row it mirrors, run any query but
 * the ones named here, or touch D1, the alarm or the signing secret.
 */
import { EMPTY_HEAD, type Head } from "../src/ledger/chain.ts";
import type { LedgerEntry } from "../src/ledger/records.ts";
import { type EntrySqlRow, toEntry } from "./ledger-rows.ts";

/** A background failure with its retry time (D1 flush, anchoring). */
export interface Trouble {
  failures: number;
  error: string;
  retryAt: number;
}

/**
 * What the append path reads, kept in memory: loaded from SQLite when the instance starts (the
 * object is single-threaded and the only writer of its tables), and changed only once the
 * transaction that stores the change has committed, so it never runs ahead of the tables.
 */
export interface ChainState {
  /** `meta.chain` (null before the first commit stores it). */
  storedChain: string | null;
  head: Head;
  /** Size of the newest checkpoint (0: none). */
  checkpointSize: number;
  /** `meta.transactions` and `meta.appends`. */
  transactions: number;
  appends: number;
  /** `meta.signing` as stored (its JSON text): rewritten only when an append names other settings. */
  signing: string | undefined;
  /** `meta.checkpoint_due` as this instance last wrote or read it (the alarm reads the row itself). */
  checkpointDue: number | undefined;
  /** `meta.checkpoint_problem` as stored: rewritten only when it changes. */
  checkpointProblem: string | undefined;
}

/** The chain's state as stored (see ChainState): a handful of reads, once per instance. */
export function loadState(sql: SqlStorage): ChainState {
  const rows = sql
    .exec<{ k: string; v: string }>("SELECT k, v FROM meta WHERE k IN ('chain', 'transactions', 'appends', 'signing', 'checkpoint_due', 'checkpoint_problem')")
    .toArray();
  const meta = new Map(rows.map((r) => [r.k, r.v]));
  const parsed = <T>(k: string): T | undefined => {
    const v = meta.get(k);
    return v === undefined ? undefined : (JSON.parse(v) as T);
  };
  return {
    storedChain: parsed<string>("chain") ?? null,
    head: headOf(sql),
    checkpointSize: lastCheckpointOf(sql).size,
    transactions: parsed<number>("transactions") ?? 0,
    appends: parsed<number>("appends") ?? 0,
    signing: meta.get("signing"),
    checkpointDue: parsed<number>("checkpoint_due"),
    checkpointProblem: parsed<string>("checkpoint_problem"),
  };
}

/** `meta.<k>` parsed from its JSON text (undefined: no row). */
export function readMeta<T>(sql: SqlStorage, k: string): T | undefined {
  const row = sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", k).toArray()[0];
  return row ? (JSON.parse(row.v) as T) : undefined;
}

/** Writes `meta.<k>` as JSON (undefined: removes the row). */
export function writeMeta(sql: SqlStorage, k: string, v: unknown): void {
  if (v === undefined) sql.exec("DELETE FROM meta WHERE k = ?", k);
  else sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", k, JSON.stringify(v));
}

/** Writes `meta.checkpoint_due` (undefined: removes it) and remembers it. */
export function setDue(sql: SqlStorage, state: ChainState, at: number | undefined): void {
  writeMeta(sql, "checkpoint_due", at);
  state.checkpointDue = at;
}

/** Writes `meta.checkpoint_problem` (undefined: removes it) unless it already says that. */
export function setProblem(sql: SqlStorage, state: ChainState, problem: string | undefined): void {
  if (problem === state.checkpointProblem) return;
  writeMeta(sql, "checkpoint_problem", problem);
  state.checkpointProblem = problem;
}

/** The newest entry's seq and hash as stored (EMPTY_HEAD: none). */
export function headOf(sql: SqlStorage): Head {
  const row = sql.exec<{ seq: number; hash: string }>("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").toArray()[0];
  return row ? { seq: row.seq, hash: row.hash } : EMPTY_HEAD;
}

/** The newest checkpoint's size and hash as stored (size 0: none). */
export function lastCheckpointOf(sql: SqlStorage): { size: number; hash: string } {
  const row = sql.exec<{ size: number; hash: string }>("SELECT size, hash FROM checkpoints ORDER BY size DESC LIMIT 1").toArray()[0];
  return row ?? { size: 0, hash: "" };
}

/** The first stored entry of kind `kind` with id `id`, if any (an idempotent append finds its earlier entry). */
export function entryById(sql: SqlStorage, chain: string, id: string, kind: string): LedgerEntry | undefined {
  const row = sql.exec<EntrySqlRow>("SELECT * FROM entries WHERE id = ? AND kind = ? ORDER BY seq LIMIT 1", id, kind).toArray()[0];
  return row ? toEntry(chain, row) : undefined;
}
