/**
 * The LedgerDO's copy to D1 (`LEDGER_DB`), as plain functions over its SQLite handle, the D1
 * binding and a clock: `flush` sends entries after `meta.flushed_seq` and checkpoints after
 * `meta.flushed_cp` in idempotent batches, advancing each mark only after its batch succeeded;
 * `flushStep` is the background pass's turn at it (skipped while a failure's backoff runs,
 * failures recorded in `meta.flush_trouble`); `flushPendingAt` says when the next flush is owed.
 * The object runs these from its alarm only. Must never: advance a mark past rows D1 has not
 * taken, send a statement that is not INSERT OR IGNORE, touch the append path's memory, or let a
 * D1 failure escape `flushStep`.
 */
import { backoff, FLUSH_DELAY_MS, FLUSH_MAX_ROWS, message } from "./ledger-drafts.ts";
import { type CheckpointSqlRow, checkpointInserts, d1Row, type EntrySqlRow, entryInserts, FLUSH_BATCH_ROWS } from "./ledger-rows.ts";
import { schemaStatements } from "./ledger-schema.ts";
import { type ChainState, headOf, readMeta, type Trouble, writeMeta } from "./ledger-state.ts";

/** Whether the D1 tables are known to exist (checked once per object instance, which holds this). */
export interface D1Schema {
  ready: boolean;
}

/** The stored body text of the decision entry `id`, if any (fills an outcome's D1 row). */
function decisionBody(sql: SqlStorage, id: string): string | undefined {
  return sql.exec<{ body: string }>("SELECT body FROM entries WHERE id = ? AND kind = 'decision' LIMIT 1", id).toArray()[0]?.body;
}

/**
 * Copies entries after `flushed_seq` and checkpoints after `flushed_cp` to D1, 100 rows per
 * `batch()` (atomic), advancing the marks only after each batch succeeded. Idempotent: rows
 * are keyed (chain, seq) / (chain, size) and inserted with INSERT OR IGNORE. True when rows
 * remain for another run.
 */
export async function flush(sql: SqlStorage, db: D1Database | undefined, schema: D1Schema): Promise<boolean> {
  if (!db) throw new Error("no D1 binding LEDGER_DB");
  const chain = readMeta<string>(sql, "chain");
  if (chain === undefined) return false;
  if (!schema.ready) {
    await db.batch(schemaStatements().map((s) => db.prepare(s)));
    schema.ready = true;
  }
  let done = 0;
  while (done < FLUSH_MAX_ROWS) {
    const after = readMeta<number>(sql, "flushed_seq") ?? 0;
    const rows = sql.exec<EntrySqlRow>("SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?", after, FLUSH_BATCH_ROWS).toArray();
    if (rows.length === 0) break;
    await db.batch(
      entryInserts(
        db,
        rows.map((r) => d1Row(chain, r, (id) => decisionBody(sql, id))),
      ),
    );
    writeMeta(sql, "flushed_seq", rows[rows.length - 1]!.seq);
    done += rows.length;
  }
  const afterCp = readMeta<number>(sql, "flushed_cp") ?? 0;
  const cps = sql.exec<CheckpointSqlRow>("SELECT * FROM checkpoints WHERE size > ? ORDER BY size LIMIT ?", afterCp, FLUSH_BATCH_ROWS).toArray();
  if (cps.length > 0) {
    await db.batch(checkpointInserts(db, chain, cps));
    writeMeta(sql, "flushed_cp", cps[cps.length - 1]!.size);
  }
  const head = headOf(sql);
  return head.seq > (readMeta<number>(sql, "flushed_seq") ?? 0) || cps.length === FLUSH_BATCH_ROWS;
}

/**
 * The background pass's flush: runs `flush` unless a failure's backoff is still running, clears
 * or records (`meta.flush_trouble`, backing off) the outcome, and adds to `next` when the next
 * flush should run: at once when rows remain, at the retry time while or after a failure.
 */
export async function flushStep(sql: SqlStorage, db: D1Database | undefined, schema: D1Schema, now: () => number, next: number[]): Promise<void> {
  const started = now();
  const trouble = readMeta<Trouble>(sql, "flush_trouble");
  if (trouble && trouble.retryAt > started) next.push(trouble.retryAt);
  else {
    try {
      if (await flush(sql, db, schema)) next.push(now());
      writeMeta(sql, "flush_trouble", undefined);
    } catch (err) {
      const failures = (trouble?.failures ?? 0) + 1;
      const retryAt = now() + backoff(failures);
      writeMeta(sql, "flush_trouble", { failures, error: message(err), retryAt } satisfies Trouble);
      next.push(retryAt);
    }
  }
}

/** When a flush is owed for what is stored but not yet in D1 (undefined: nothing, or a failure's backoff decides). */
export function flushPendingAt(sql: SqlStorage, state: ChainState, now: () => number): number | undefined {
  const unflushed = state.head.seq > (readMeta<number>(sql, "flushed_seq") ?? 0) || state.checkpointSize > (readMeta<number>(sql, "flushed_cp") ?? 0);
  return unflushed && !readMeta<Trouble>(sql, "flush_trouble") ? now() + FLUSH_DELAY_MS : undefined;
}
