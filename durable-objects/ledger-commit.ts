/**
 * One group commit of the LedgerDO, as a plain function: `commitBatch` chains every waiting call
 * of a batch in order after the head (entry hashes by `entrySha256`, node:crypto's SHA-256 when
 * it agrees with the portable one), inserts the entries several rows per statement and the
 * transaction's meta rows in one statement and the metric rollups the new entries add
 * (./ledger-metrics.ts, one upsert per 25 series), all inside one `transactionSync`, and only then moves
 * the in-memory ChainState to the new head and counters. It is the hot path, moved here intact
 * from the object, with the `Waiting` record of a queued append: the object owns the queue, the
 * pump and the durability wait around it. Must never: await, read anything in the transaction
 * but an idempotent kind's earlier entry, run a statement more than the rows need, renumber or
 * rewrite an entry, or change memory before the transaction committed.
 */
// @ts-expect-error node:crypto comes from nodejs_compat, whose types the Workers tsconfig leaves out; the one function used is typed below.
import { createHash as nodeCreateHash } from "node:crypto";
import { nextEntry } from "../src/ledger/chain.ts";
import type { LedgerEntry } from "../src/ledger/records.ts";
import { type MeteredDraft, rollupOf } from "../src/ledger/metrics.ts";
import { addRollup } from "./ledger-metrics.ts";
import { sha256Hex } from "../src/wire/canonical.ts";
import { CHECKPOINT_WITHIN_MS, IDEMPOTENT_KINDS } from "./ledger-drafts.ts";
import { metaUpsert, OBJECT_INSERT_CHARS, OBJECT_INSERT_ROWS, objectEntryInsert } from "./ledger-rows.ts";
import { rowFacts } from "./ledger-schema.ts";
import { type ChainState, entryById } from "./ledger-state.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/**
 * SHA-256 (lowercase hex of the UTF-8 text) for entry hashes: node:crypto's, native and about three
 * times as fast as the portable sha256Hex, when the two agree on a probe text; sha256Hex otherwise.
 */
const createHash = nodeCreateHash as (algorithm: "sha256") => { update(text: string, encoding: "utf8"): { digest(encoding: "hex"): string } };
export const entrySha256: (text: string) => string = (() => {
  const native = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");
  try {
    const probe = `{"at":"2026-01-01T00:00:00.000Z","body":{"é":"中 😀"},"chain":"t","id":"x","kind":"decision","prev":"${"0".repeat(64)}","seq":1,"v":1}`;
    return native(probe) === sha256Hex(probe) ? native : sha256Hex;
  } catch {
    return sha256Hex;
  }
})();

/** An append waiting for its group commit. */
export interface Waiting {
  drafts: MeteredDraft[];
  /** Each draft's body as RFC 8785 JSON: what is stored. */
  bodies: string[];
  signing: LedgerSigning;
  resolve: (entries: LedgerEntry[]) => void;
  reject: (err: Error) => void;
}

/**
 * One transaction: chain every waiting call in order after the head, insert the entries
 * (several rows per statement) and the transaction's meta rows (one statement). All or
 * nothing: the in-memory state takes the new head and counters only after it committed.
 * `chain` is the object's chain name; `storage` runs the transaction and `sql` its statements.
 */
export function commitBatch(storage: DurableObjectStorage, sql: SqlStorage, s: ChainState, chain: string, batch: Waiting[]): LedgerEntry[][] {
  const signing = JSON.stringify(batch[batch.length - 1]!.signing);
  const out: LedgerEntry[][] = [];
  let head = s.head;
  let due = s.checkpointDue;
  storage.transactionSync(() => {
    const seen = new Map<string, LedgerEntry>();
    // The drafts this transaction chains (not an idempotent one found again): what the rollups count.
    const counted: MeteredDraft[] = [];
    const params: SqlStorageValue[] = [];
    let rows = 0;
    let chars = 0;
    const insert = () => {
      if (rows === 0) return;
      sql.exec(objectEntryInsert(rows), ...params);
      params.length = 0;
      rows = 0;
      chars = 0;
    };
    for (const w of batch) {
      const entries: LedgerEntry[] = [];
      for (const [i, d] of w.drafts.entries()) {
        // A checkpoint entry is named by its chain and size, a config record by the config's hash:
        // committing one again (a retried anchor, another isolate seeing the same config) returns the first.
        const idempotent = IDEMPOTENT_KINDS.has(d.kind);
        const again = idempotent ? (seen.get(d.id) ?? entryById(sql, chain, d.id, d.kind)) : undefined;
        if (again) {
          entries.push(again);
          continue;
        }
        const body = w.bodies[i]!;
        const e = nextEntry(chain, head, d, body, entrySha256);
        if (rows > 0 && chars + body.length > OBJECT_INSERT_CHARS) insert();
        params.push(e.seq, e.v, e.id, e.kind, e.at, body, e.prev, e.hash, rowFacts(chain, e.kind, e.id, e.body).decision_id);
        rows++;
        chars += body.length;
        if (rows === OBJECT_INSERT_ROWS) insert();
        if (idempotent) seen.set(e.id, e);
        counted.push(d);
        head = { seq: e.seq, hash: e.hash };
        entries.push(e);
      }
      out.push(entries);
    }
    insert();
    // The metric rollups, in the same transaction (src/ledger/metrics.ts: what each draft adds); a failed rollup never fails the commit.
    addRollup(sql, rollupOf(chain, counted));
    const meta: SqlStorageValue[] = ["transactions", JSON.stringify(s.transactions + 1), "appends", JSON.stringify(s.appends + batch.length)];
    if (s.storedChain === null) meta.push("chain", JSON.stringify(chain));
    if (signing !== s.signing) meta.push("signing", signing);
    if (head.seq > s.checkpointSize && due === undefined) {
      due = Date.now() + CHECKPOINT_WITHIN_MS;
      meta.push("checkpoint_due", JSON.stringify(due));
    }
    sql.exec(metaUpsert(meta.length / 2), ...meta);
  });
  // Committed: memory follows the tables.
  s.head = head;
  s.transactions += 1;
  s.appends += batch.length;
  s.storedChain = chain;
  s.signing = signing;
  s.checkpointDue = due;
  return out;
}
