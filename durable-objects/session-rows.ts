/**
 * SessionDO's storage rows as plain code: the tables (SESSION_SCHEMA) and their migrations
 * (addColumn), how a stored record's text is read (parseRecord, readable: a version this code
 * does not know is FOREIGN), and the event-buffer, retention and clearing statements the object
 * runs. Must never: decide who may read a record (the object checks its principal first) or
 * create a table from a read.
 */
import type { StoredEvent } from "./contract.ts";

/** A record of a version this code does not know (a newer release wrote it). */
export const FOREIGN = Symbol("foreign record");

/** A version this code reads: its own, or none (records written before versioning have the v1 shape). */
export function readable(v: unknown, current: number): boolean {
  return v === undefined || v === current;
}

/** A stored record's text parsed: FOREIGN when it is not JSON or not an object. */
export function parseRecord(text: string): { v?: unknown } | typeof FOREIGN {
  try {
    const rec = JSON.parse(text) as unknown;
    return rec !== null && typeof rec === "object" ? (rec as { v?: unknown }) : FOREIGN;
  } catch {
    return FOREIGN;
  }
}

/** Adds a column a table gained after it first shipped (CREATE TABLE IF NOT EXISTS leaves old tables as they were). */
export function addColumn(sql: SqlStorage, table: string, column: string, decl: string, backfill: number | null): void {
  if (
    sql
      .exec<{ name: string }>(`PRAGMA table_info(${table})`)
      .toArray()
      .some((c) => c.name === column)
  )
    return;
  sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${decl}`);
  sql.exec(`UPDATE ${table} SET ${column} = ?`, backfill);
}

/** Every table of the object. Created by the first write that stores a record (ensureSchema), never by a read. */
export const SESSION_SCHEMA = `
  CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS events (stream TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (stream, seq));
  CREATE TABLE IF NOT EXISTS streams (stream TEXT PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0, at INTEGER NOT NULL DEFAULT 0);
  CREATE TABLE IF NOT EXISTS idmap (down_id TEXT PRIMARY KEY, upstream TEXT NOT NULL, at INTEGER NOT NULL, up_id TEXT);
  CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY, upstream TEXT NOT NULL, up_id TEXT NOT NULL, at INTEGER NOT NULL);
  CREATE TABLE IF NOT EXISTS answers (id TEXT PRIMARY KEY, msg TEXT NOT NULL, at INTEGER NOT NULL DEFAULT 0);
`;

/** Buffers events of `stream` (and whether it is done) at `now`. */
export function appendEventRows(sql: SqlStorage, stream: string, events: StoredEvent[], done: boolean, now: number): void {
  for (const e of events) sql.exec("INSERT OR REPLACE INTO events (stream, seq, data) VALUES (?, ?, ?)", stream, e.seq, e.data);
  sql.exec(
    "INSERT INTO streams (stream, done, at) VALUES (?, ?, ?) ON CONFLICT(stream) DO UPDATE SET done = MAX(done, excluded.done), at = excluded.at",
    stream,
    done ? 1 : 0,
    now,
  );
}

/** Events of `stream` after `afterSeq` and whether it finished; null for a stream never buffered. */
export function readEventRows(sql: SqlStorage, stream: string, afterSeq: number): { events: StoredEvent[]; done: boolean } | null {
  const s = sql.exec<{ done: number }>("SELECT done FROM streams WHERE stream = ?", stream).toArray()[0];
  if (!s) return null;
  const events = sql
    .exec<{ seq: number; data: string }>("SELECT seq, data FROM events WHERE stream = ? AND seq > ? ORDER BY seq", stream, afterSeq)
    .toArray()
    .map((r) => ({ seq: r.seq, data: r.data }));
  return { events, done: s.done === 1 };
}

/** Drops buffer rows (events, streams, id map, pending relays, answers) older than `horizon`. */
export function pruneBufferRows(sql: SqlStorage, horizon: number): void {
  sql.exec("DELETE FROM events WHERE stream IN (SELECT stream FROM streams WHERE at < ?)", horizon);
  sql.exec("DELETE FROM streams WHERE at < ?", horizon);
  sql.exec("DELETE FROM idmap WHERE at < ?", horizon);
  sql.exec("DELETE FROM pending WHERE at < ?", horizon);
  sql.exec("DELETE FROM answers WHERE at < ?", horizon);
}
