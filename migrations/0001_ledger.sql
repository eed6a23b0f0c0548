-- Portcullis ledger: the shared store every team's auditors query (docs/storage.md, "D1").
-- Written only by the LedgerDO of each chain, in idempotent batches keyed (chain, seq).
-- The one home of this schema: durable-objects/ledger-schema.ts imports this file as text for the LedgerDO.

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
