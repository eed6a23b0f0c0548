/**
 * The LedgerDO's read queries, as plain functions over its SQLite handle: a page of entries after
 * a seq, one call's entries, signed checkpoints after a size, and the status an operator sees
 * (head, checkpoint, flush and anchor progress and problems, counters). The object answers its
 * read RPCs with these, after waiting briefly for a checkpoint being signed. Must never: write,
 * return more than MAX_PAGE rows, or put any part of a secret in a status.
 */
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { LedgerEntry } from "../src/ledger/records.ts";
import { MAX_PAGE } from "./ledger-drafts.ts";
import { type CheckpointSqlRow, type EntrySqlRow, toCheckpoint, toEntry } from "./ledger-rows.ts";
import { headOf, lastCheckpointOf, readMeta, type Trouble } from "./ledger-state.ts";
import type { LedgerStatus } from "./contract-ledger.ts";

/** Up to `limit` (≤ MAX_PAGE) entries after `afterSeq`, in order; `chain` names the object's chain. */
export function readEntries(sql: SqlStorage, chain: () => string, afterSeq: number, limit: number): LedgerEntry[] {
  const n = Math.max(0, Math.min(MAX_PAGE, Math.floor(Number(limit) || 0)));
  if (n === 0) return [];
  return sql
    .exec<EntrySqlRow>("SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?", Math.floor(Number(afterSeq) || 0), n)
    .toArray()
    .map((r) => toEntry(chain(), r));
}

/** One call's entries: the entry `id` and every entry whose decision it is, in order (≤ MAX_PAGE). */
export function traceEntries(sql: SqlStorage, chain: () => string, id: string): LedgerEntry[] {
  return sql
    .exec<EntrySqlRow>("SELECT * FROM entries WHERE id = ? OR decision_id = ? ORDER BY seq LIMIT ?", id, id, MAX_PAGE)
    .toArray()
    .map((r) => toEntry(chain(), r));
}

/** Signed checkpoints after `afterSize`, in order (≤ MAX_PAGE; none before the first append stored the chain). */
export function checkpointsAfter(sql: SqlStorage, afterSize: number): Checkpoint[] {
  const chain = readMeta<string>(sql, "chain");
  if (chain === undefined) return [];
  return sql
    .exec<CheckpointSqlRow>("SELECT * FROM checkpoints WHERE size > ? ORDER BY size LIMIT ?", Math.floor(Number(afterSize) || 0), MAX_PAGE)
    .toArray()
    .map((c) => toCheckpoint(chain, c));
}

/** The chain's status as stored; `rpcs` is the object's count of append RPCs since it started. */
export function statusOf(sql: SqlStorage, rpcs: number): LedgerStatus {
  const head = headOf(sql);
  const cp = lastCheckpointOf(sql);
  const flush = readMeta<Trouble>(sql, "flush_trouble");
  const anchor = readMeta<Trouble>(sql, "anchor_trouble");
  return {
    chain: readMeta<string>(sql, "chain") ?? null,
    head,
    checkpointSize: cp.size,
    unanchored: head.seq - cp.size,
    checkpointProblem: readMeta<string>(sql, "checkpoint_problem") ?? null,
    flushedSeq: readMeta<number>(sql, "flushed_seq") ?? 0,
    flushProblem: flush?.error ?? null,
    flushFailures: flush?.failures ?? 0,
    anchoredSize: readMeta<number>(sql, "anchored") ?? 0,
    anchorProblem: anchor?.error ?? null,
    transactions: readMeta<number>(sql, "transactions") ?? 0,
    appends: readMeta<number>(sql, "appends") ?? 0,
    rpcs,
  };
}
