/**
 * The LedgerDO's metric rollups in its own SQLite, as plain functions: one `metrics` table of
 * (minute, series name, labels, value), where minute 0 holds each series' all-time total; the
 * rows a commit adds are upserted inside that commit's transaction (no second write on the
 * request path: the same durable write as the entries), per-minute rows older than the retention
 * are pruned by the alarm, and reads serve a window or the totals. What a draft adds is
 * src/ledger/metrics.ts's. Must never: throw out of a commit (a rollup that fails is dropped, the
 * entries stay committed), or hold anything but counts and sums.
 */
import { ALL_TIME, labelsJson, labelsOf, type MetricRow } from "../src/ledger/metrics.ts";

export const METRICS_SCHEMA = `
      CREATE TABLE IF NOT EXISTS metrics (minute INTEGER NOT NULL, name TEXT NOT NULL, labels TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (minute, name, labels));
    `;

/** Rows one upsert carries at most (4 bound parameters a row; DO SQLite binds at most 100). */
const UPSERT_ROWS = 25;
const upserts = Array.from(
  { length: UPSERT_ROWS + 1 },
  (_, n) =>
    `INSERT INTO metrics (minute, name, labels, value) VALUES ${Array.from({ length: n }, () => "(?, ?, ?, ?)").join(", ")} ON CONFLICT (minute, name, labels) DO UPDATE SET value = value + excluded.value`,
);

/** Adds `rows` to the table (inside the caller's transaction); false when a statement failed (the rollup is then partial, the caller's write stands). */
export function addRollup(sql: SqlStorage, rows: MetricRow[]): boolean {
  try {
    for (let i = 0; i < rows.length; i += UPSERT_ROWS) {
      const chunk = rows.slice(i, i + UPSERT_ROWS);
      const params: SqlStorageValue[] = [];
      for (const r of chunk) params.push(r.minute, r.name, labelsJson(r.labels), r.value);
      sql.exec(upserts[chunk.length]!, ...params);
    }
    return true;
  } catch {
    return false;
  }
}

/** The per-minute rows with `from <= minute <= to` (epoch minutes), or the all-time totals when both are 0; at most `limit` rows. */
export function readRollup(sql: SqlStorage, from: number, to: number, limit = 50_000): MetricRow[] {
  const cursor =
    from === ALL_TIME && to === ALL_TIME
      ? sql.exec<{ minute: number; name: string; labels: string; value: number }>(
          "SELECT minute, name, labels, value FROM metrics WHERE minute = 0 LIMIT ?",
          limit,
        )
      : sql.exec<{ minute: number; name: string; labels: string; value: number }>(
          "SELECT minute, name, labels, value FROM metrics WHERE minute >= ? AND minute <= ? AND minute != 0 ORDER BY minute LIMIT ?",
          from,
          to,
          limit,
        );
  return cursor.toArray().map((r) => ({ minute: r.minute, name: r.name, labels: labelsOf(r.labels), value: r.value }));
}

/** Deletes per-minute rows before `beforeMinute` (the totals stay); how many went. */
export function pruneRollup(sql: SqlStorage, beforeMinute: number): number {
  return sql.exec("DELETE FROM metrics WHERE minute != 0 AND minute < ?", beforeMinute).rowsWritten;
}
