/**
 * The LedgerDO's rows, as pure code: the DDL and row shapes of its own SQLite tables (`meta`,
 * `entries`, `checkpoints`), the multi-row statements one commit writes them with (entries, and
 * the meta rows of the transaction, within DO SQLite's 100 bound parameters), how a stored row
 * becomes a LedgerEntry or a Checkpoint, how an entry becomes its `ledger_entries` row in D1
 * (facts from ./ledger-schema.ts `rowFacts`), and the D1 INSERT OR IGNORE statements of one flush
 * batch, within D1's bounds on parameters and text. Takes every input as arguments (the object
 * looks rows up and runs the statements). Must never: run a query, hold state, build a D1
 * statement that is not idempotent, or reorder an entry's columns away from ENTRY_COLUMNS /
 * OBJECT_ENTRY_COLUMNS.
 */
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { EntryKind, LedgerEntry } from "../src/ledger/records.ts";
import type { JsonObject } from "../src/wire/jsonrpc.ts";
import { ENTRY_COLUMNS, type EntryRow, rowFacts } from "./ledger-schema.ts";

/** The object's own SQLite tables (created on every start; `IF NOT EXISTS`). */
export const OBJECT_SCHEMA = `
      CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS entries (seq INTEGER PRIMARY KEY, v INTEGER NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL, at TEXT NOT NULL, body TEXT NOT NULL, prev TEXT NOT NULL, hash TEXT NOT NULL, decision_id TEXT);
      CREATE INDEX IF NOT EXISTS entries_id ON entries (id);
      CREATE INDEX IF NOT EXISTS entries_decision ON entries (decision_id);
      CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, hash TEXT NOT NULL, at TEXT NOT NULL, note TEXT NOT NULL);
    `;

/** The columns of the object's `entries` table, in the order a commit binds them. */
export const OBJECT_ENTRY_COLUMNS = ["seq", "v", "id", "kind", "at", "body", "prev", "hash", "decision_id"] as const;
/** Entry rows one INSERT into the object's `entries` carries at most (DO SQLite binds ≤ 100 parameters per statement). */
export const OBJECT_INSERT_ROWS = Math.floor(100 / OBJECT_ENTRY_COLUMNS.length);
/** Body text one such INSERT carries at most (a larger body goes alone): bounds one statement's size. */
export const OBJECT_INSERT_CHARS = 1024 * 1024;
const objectRow = `(${OBJECT_ENTRY_COLUMNS.map(() => "?").join(", ")})`;
const OBJECT_INSERTS = Array.from(
  { length: OBJECT_INSERT_ROWS + 1 },
  (_, n) => `INSERT INTO entries (${OBJECT_ENTRY_COLUMNS.join(", ")}) VALUES ${Array.from({ length: n }, () => objectRow).join(", ")}`,
);
/** The INSERT of `rows` (1..OBJECT_INSERT_ROWS) entry rows into the object's `entries`, OBJECT_ENTRY_COLUMNS per row (a plain INSERT: a seq already there aborts the transaction). */
export function objectEntryInsert(rows: number): string {
  const sql = rows >= 1 ? OBJECT_INSERTS[rows] : undefined;
  if (sql === undefined) throw new Error(`ledger: an entries INSERT holds 1..${OBJECT_INSERT_ROWS} rows, not ${rows}`);
  return sql;
}
/** Meta rows one transaction writes at most in one statement (k, v per row; 100 bound parameters). */
export const META_UPSERT_ROWS = 50;
const META_UPSERTS = Array.from(
  { length: META_UPSERT_ROWS + 1 },
  (_, n) => `INSERT OR REPLACE INTO meta (k, v) VALUES ${Array.from({ length: n }, () => "(?, ?)").join(", ")}`,
);
/** The INSERT OR REPLACE of `rows` (1..META_UPSERT_ROWS) meta rows, k and v per row. */
export function metaUpsert(rows: number): string {
  const sql = rows >= 1 ? META_UPSERTS[rows] : undefined;
  if (sql === undefined) throw new Error(`ledger: a meta upsert holds 1..${META_UPSERT_ROWS} rows, not ${rows}`);
  return sql;
}

/** Rows per D1 `batch()`; each statement of it inserts at most D1_ROWS_PER_STATEMENT rows (D1 binds ≤ 100 parameters per statement). */
export const FLUSH_BATCH_ROWS = 100;
const D1_ROWS_PER_STATEMENT = Math.floor(100 / ENTRY_COLUMNS.length);
/** A D1 statement's rows hold at most this much body text (one large row goes alone). */
const D1_STATEMENT_CHARS = 256 * 1024;

export interface EntrySqlRow extends Record<string, SqlStorageValue> {
  seq: number;
  v: number;
  id: string;
  kind: string;
  at: string;
  body: string;
  prev: string;
  hash: string;
}
export interface CheckpointSqlRow extends Record<string, SqlStorageValue> {
  size: number;
  hash: string;
  at: string;
  note: string;
}

/** A stored entry row of `chain` as the LedgerEntry it is. */
export function toEntry(chain: string, r: EntrySqlRow): LedgerEntry {
  return {
    v: r.v,
    chain,
    seq: r.seq,
    prev: r.prev,
    kind: r.kind as EntryKind,
    id: r.id,
    at: r.at,
    body: JSON.parse(r.body) as JsonObject,
    hash: r.hash,
  };
}

/** A stored checkpoint row of `chain` as the Checkpoint it is. */
export function toCheckpoint(chain: string, c: CheckpointSqlRow): Checkpoint {
  return { chain, size: c.size, hash: c.hash, at: c.at, note: c.note };
}

/**
 * The D1 row of one stored entry (an outcome or hold event takes principal, team, upstream and
 * tool from its decision). `decisionBody` looks up the stored body text of a decision entry by id.
 */
export function d1Row(chain: string, r: EntrySqlRow, decisionBody: (decisionId: string) => string | undefined): EntryRow {
  const body = JSON.parse(r.body) as Record<string, unknown>;
  let decision: Record<string, unknown> | null = null;
  if (r.kind !== "decision" && typeof body.decision_id === "string") {
    const d = decisionBody(body.decision_id);
    decision = d !== undefined ? (JSON.parse(d) as Record<string, unknown>) : null;
  }
  const f = rowFacts(chain, r.kind, r.id, body, decision);
  return [chain, r.seq, r.v, r.id, r.kind, r.at, r.prev, r.hash, r.body, f.team, f.principal, f.upstream, f.tool, f.status, f.decision_id];
}

/**
 * D1 statements inserting `rows` (INSERT OR IGNORE: a row already there stays as it is), several
 * rows per statement within D1's 100 bound parameters and a bound on the body text.
 */
export function entryInserts(db: D1Database, rows: EntryRow[]): D1PreparedStatement[] {
  const bodyAt = ENTRY_COLUMNS.indexOf("body");
  const groups: EntryRow[][] = [];
  let chars = 0;
  for (const row of rows) {
    const len = String(row[bodyAt]).length;
    const last = groups[groups.length - 1];
    if (!last || last.length >= D1_ROWS_PER_STATEMENT || chars + len > D1_STATEMENT_CHARS) {
      groups.push([row]);
      chars = len;
    } else {
      last.push(row);
      chars += len;
    }
  }
  const one = `(${ENTRY_COLUMNS.map(() => "?").join(", ")})`;
  return groups.map((group) =>
    db.prepare(`INSERT OR IGNORE INTO ledger_entries (${ENTRY_COLUMNS.join(", ")}) VALUES ${group.map(() => one).join(", ")}`).bind(...group.flat()),
  );
}

/** D1 statements inserting the checkpoint rows `cps` of `chain` (INSERT OR IGNORE). */
export function checkpointInserts(db: D1Database, chain: string, cps: CheckpointSqlRow[]): D1PreparedStatement[] {
  return cps.map((c) =>
    db.prepare("INSERT OR IGNORE INTO ledger_checkpoints (chain, size, hash, at, note) VALUES (?, ?, ?, ?, ?)").bind(chain, c.size, c.hash, c.at, c.note),
  );
}
