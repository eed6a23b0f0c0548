/**
 * The D1 schema of the shared ledger store, in one place: migrations/0001_ledger.sql is its one
 * home, and `LEDGER_D1_SCHEMA` is that file imported as text (wrangler's and the vitest plugin's
 * default module rules load `**\/*.sql` as a Text module; ./sql-text.d.ts types it). The LedgerDO
 * runs its statements (`CREATE … IF NOT EXISTS`) before its first flush, because `wrangler dev`
 * and vitest do not apply migrations by themselves. Also owns how an entry becomes a D1 row (which
 * body fields fill the queryable columns). Must never: hold a statement that is not idempotent,
 * or a copy of the schema (`wrangler d1 migrations apply` runs the file itself).
 */
import migration from "../migrations/0001_ledger.sql";

/** migrations/0001_ledger.sql, verbatim: the Worker imports the migration file as text (a Text module). */
export const LEDGER_D1_SCHEMA: string = migration;

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
