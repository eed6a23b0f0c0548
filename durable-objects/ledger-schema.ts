/**
 * The D1 schema of the shared ledger store, in one place: `LEDGER_D1_SCHEMA` is the exact text of
 * migrations/0001_ledger.sql (a unit test checks they are identical), and the LedgerDO runs the
 * same statements (`CREATE … IF NOT EXISTS`) before its first flush, because `wrangler dev` and
 * vitest do not apply migrations by themselves. Also owns how an entry becomes a D1 row (which
 * body fields fill the queryable columns). Must never: hold a statement that is not idempotent,
 * or diverge from the migration file.
 */

/** migrations/0001_ledger.sql, verbatim. */
export const LEDGER_D1_SCHEMA = `-- Portcullis ledger: the shared store every team's auditors query (docs/storage.md, "D1").
-- Written only by the LedgerDO of each chain, in idempotent batches keyed (chain, seq).
-- durable-objects/ledger-schema.ts holds this same text; keep the two identical.

CREATE TABLE IF NOT EXISTS ledger_entries (
  chain TEXT NOT NULL,
  seq INTEGER NOT NULL,
  v INTEGER NOT NULL,
  id TEXT NOT NULL,
  kind TEXT NOT NULL,
  at TEXT NOT NULL,
  prev TEXT NOT NULL,
  hash TEXT NOT NULL,
  body TEXT NOT NULL,
  team TEXT,
  principal TEXT,
  upstream TEXT,
  tool TEXT,
  status TEXT,
  decision_id TEXT,
  PRIMARY KEY (chain, seq)
);
CREATE INDEX IF NOT EXISTS ledger_entries_team ON ledger_entries (team, chain, seq);
CREATE INDEX IF NOT EXISTS ledger_entries_principal ON ledger_entries (principal, at);
CREATE INDEX IF NOT EXISTS ledger_entries_tool ON ledger_entries (tool, at);
CREATE INDEX IF NOT EXISTS ledger_entries_kind ON ledger_entries (kind, at);
CREATE INDEX IF NOT EXISTS ledger_entries_status ON ledger_entries (status, at);
CREATE INDEX IF NOT EXISTS ledger_entries_at ON ledger_entries (at);
CREATE INDEX IF NOT EXISTS ledger_entries_decision ON ledger_entries (decision_id);

CREATE TABLE IF NOT EXISTS ledger_checkpoints (
  chain TEXT NOT NULL,
  size INTEGER NOT NULL,
  hash TEXT NOT NULL,
  at TEXT NOT NULL,
  note TEXT NOT NULL,
  PRIMARY KEY (chain, size)
);
`;

/** The schema as separate statements (comment lines dropped), for `D1Database.batch`. */
export function schemaStatements(schema: string = LEDGER_D1_SCHEMA): string[] {
  return schema
    .split("\n")
    .filter((line) => !line.startsWith("--"))
    .join("\n")
    .split(";")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

/** The columns of `ledger_entries`, in insert order. */
export const ENTRY_COLUMNS = [
  "chain",
  "seq",
  "v",
  "id",
  "kind",
  "at",
  "prev",
  "hash",
  "body",
  "team",
  "principal",
  "upstream",
  "tool",
  "status",
  "decision_id",
] as const;
/** One row of `ledger_entries`, in ENTRY_COLUMNS order. */
export type EntryRow = (string | number | null)[];

/** The indexed fields an entry contributes: from its own body, and for an outcome (whose body has no principal or tool) from its decision's. */
export interface RowFacts {
  team: string | null;
  principal: string | null;
  upstream: string | null;
  tool: string | null;
  status: string | null;
  decision_id: string | null;
}

const str = (v: unknown): string | null => (typeof v === "string" ? v : null);

/**
 * The queryable facts of one entry. `status` is the outcome's status (`succeeded | failed |
 * uncertain`), `blocked` for a denial, null otherwise. `decision_id` is the entry's own id for a
 * decision, else its body's `decision_id`. `decision` is the body of the call's decision entry,
 * when the entry is not one itself (fills principal, team, upstream and tool of an outcome).
 */
export function rowFacts(chain: string, kind: string, id: string, body: Record<string, unknown>, decision?: Record<string, unknown> | null): RowFacts {
  const src = decision ?? body;
  const status = kind === "outcome" ? str(body.status) : kind === "blocked" ? "blocked" : null;
  return {
    team: str(body.team) ?? str(src.team) ?? (chain.startsWith("_") ? null : chain),
    principal: str(body.principal) ?? str(src.principal),
    upstream: str(body.upstream) ?? str(src.upstream),
    tool: str(body.tool) ?? str(src.tool),
    status,
    decision_id: kind === "decision" ? id : str(body.decision_id),
  };
}
