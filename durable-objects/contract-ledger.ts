/**
 * The LedgerDO's storage contract: what an object needs to sign checkpoints (LedgerSigning, which
 * every object that records on a chain is handed), its RPC surface (append with group commit,
 * batched appends, reads, traces, checkpoints) and the status it reports. Owns only types. Must
 * never: hold logic or state; the chain rules themselves are src/ledger's.
 */
import type { Head } from "../src/ledger/chain.ts";
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../src/ledger/records.ts";
import type { MetricRow } from "../src/ledger/metrics.ts";

/** What a LedgerDO needs to sign checkpoints: the Worker secret holding the key, and the origin prefix. */
export interface LedgerSigning {
  /** Name of the Worker secret with the Ed25519 signing key (a private JWK or a key set). */
  secret: string;
  /** The gateway's canonical URL: checkpoint origins are `<gateway>/ledger/<chain>`. */
  gateway: string;
}

/** The LedgerDO RPC surface: one object per chain (a team, or the global checkpoint chain). */
export interface LedgerApi {
  /**
   * Chains `drafts` after the head and stores them durably in one transaction together with
   * every append that arrived at the same time (group commit); the entries as chained.
   */
  append(drafts: EntryDraft[], signing: LedgerSigning): Promise<LedgerEntry[]>;
  /**
   * Several callers' appends in one RPC (src/ports/ledger-batch.ts): each is checked, chained and
   * refused on its own, exactly as if it had come in its own `append`; answers in the same order.
   */
  appendEach(calls: EntryDraft[][], signing: LedgerSigning): Promise<AppendOutcome[]>;
  head(): Promise<Head>;
  /** Entries with seq > `afterSeq`, oldest first, at most `limit`. */
  read(afterSeq: number, limit: number): Promise<LedgerEntry[]>;
  /**
   * Entries whose id or `body.decision_id` is `id` (one call's decision, outcome and hold events).
   * Not named `trace`: that is a reserved handler name, which Workers RPC refuses to call.
   */
  traceCall(id: string): Promise<LedgerEntry[]>;
  /** Signed checkpoints with size > `afterSize`, oldest first (at most 1000 per call: page with the last size). */
  checkpoints(afterSize: number): Promise<Checkpoint[]>;
  /**
   * A checkpoint signed over exactly `size` entries (stored, or signed now when the chain has moved
   * on), or null when the chain holds fewer or has no signing key: what an export ends a chain with.
   */
  checkpointAt(size: number): Promise<Checkpoint | null>;
  /** The object's own account: head, checkpoint, D1 flush and global anchoring state, group-commit counters. */
  status(): Promise<LedgerStatus>;
  /**
   * The chain's metric rollups (src/ledger/metrics.ts): per-minute rows with `fromMinute <= minute
   * <= toMinute` (epoch minutes), or the all-time totals when both are 0.
   */
  metrics(fromMinute: number, toMinute: number): Promise<MetricRow[]>;
}

/** One caller's answer inside `appendEach`: its entries as stored, or why it was refused. */
export type AppendOutcome = { entries: LedgerEntry[] } | { error: string };

/** What a LedgerDO reports about itself (`LedgerApi.status`), for operators and tests. */
export interface LedgerStatus {
  /** The chain this object holds (null before its first append). */
  chain: string | null;
  head: Head;
  /** Size of the newest signed checkpoint (0: none yet), and the entries after it. */
  checkpointSize: number;
  unanchored: number;
  /** Why the last checkpoint attempt signed nothing (no signing key configured, unusable key, signing failed); null after a success. */
  checkpointProblem: string | null;
  /** Entries up to this seq are in D1 (`ledger_entries`). */
  flushedSeq: number;
  /** The last D1 flush error and how many flushes in a row failed (0 after a success). */
  flushProblem: string | null;
  flushFailures: number;
  /** Newest checkpoint size committed to the `_global` chain (always 0 for `_global` itself). */
  anchoredSize: number;
  anchorProblem: string | null;
  /** Storage transactions that committed appends, and the append calls they held (group commit: transactions ≤ appends). */
  transactions: number;
  appends: number;
  /** RPCs (`append`, `appendEach`) that brought appends to this instance since it started; not stored (appends ÷ rpcs: the Worker side's group commit). */
  rpcs: number;
}
