/**
 * LedgerDO: one hash chain (a team's, or `_global`, the chain of every team's checkpoints) as a
 * thin state machine over DO SQLite. It is the durable write-ahead point of the governed call
 * path: `append` chains drafts after the head and inserts them inside one `transactionSync`,
 * with every append that arrived meanwhile (group commit), and answers only once the write is
 * durable. Behind the chain it signs checkpoints (≥ 256 unanchored entries, or ≤ 10 s after
 * the first one), commits each team checkpoint to `_global`, and flushes entries and
 * checkpoints to D1 (`LEDGER_DB`) in idempotent batches from its alarm. This class owns the
 * state (the queue, the pump, the in-memory ChainState, the signing and background passes in
 * flight, the alarm it set), the storage handles and the RPC surface (LedgerApi); the work is
 * plain functions: the commit transaction in ./ledger-commit.ts, stored state and meta rows in
 * ./ledger-state.ts, signing and anchoring in ./ledger-checkpoints.ts, the D1 flush in
 * ./ledger-flush.ts, read queries in ./ledger-queries.ts, limits and draft checks in
 * ./ledger-drafts.ts, row shapes and statements in ./ledger-rows.ts, the D1 schema in
 * ./ledger-schema.ts, the chain rules in src/ledger. What the append path needs (head, counters,
 * newest checkpoint size, stored signing settings, checkpoint due time) it keeps in memory, read
 * from SQLite once per instance and changed only after the transaction that stores it
 * committed, so one commit runs its INSERTs and one meta statement and reads nothing else. Must
 * never: renumber, rewrite or delete an entry, answer an append before its transaction
 * committed, let memory run ahead of what a transaction committed, let D1 or signing failures
 * reach an append, or put any part of a secret in a status or error.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";
import type { Head } from "../src/ledger/chain.ts";
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../src/ledger/records.ts";
import { type CheckpointHandles, checkpointAt, checkpointNow, retryAnchor } from "./ledger-checkpoints.ts";
import { commitBatch, type Waiting } from "./ledger-commit.ts";
import {
  ALARM_OVERDUE_MS,
  CHECKPOINT_EVERY,
  chainOfObjectName,
  FLUSH_DELAY_MS,
  MAX_CALL_DRAFTS,
  MAX_TRANSACTION_DRAFTS,
  message,
  normaliseDrafts,
  settle,
} from "./ledger-drafts.ts";
import { type D1Schema, flushPendingAt, flushStep } from "./ledger-flush.ts";
import { checkpointsAfter, readEntries, statusOf, traceEntries } from "./ledger-queries.ts";
import { OBJECT_SCHEMA } from "./ledger-rows.ts";
import { METRICS_SCHEMA, pruneRollup, readRollup } from "./ledger-metrics.ts";
import { MINUTE_RETENTION_MS, type MetricRow } from "../src/ledger/metrics.ts";
import { type ChainState, headOf, loadState, readMeta, setDue, setProblem } from "./ledger-state.ts";
import type { AppendOutcome, LedgerApi, LedgerSigning, LedgerStatus } from "./contract-ledger.ts";

export class LedgerDO extends DurableObject<Env> implements LedgerApi {
  private readonly sql: SqlStorage;
  private readonly queue: Waiting[] = [];
  private pumping = false;
  /** RPCs that brought appends since this instance started (status only). */
  private rpcs = 0;
  /** The checkpoint being signed (and anchored), if any: at most one at a time. */
  private signing: Promise<void> | null = null;
  /** The background pass running now (the alarm's, or one an overdue alarm made a commit start), if any: at most one at a time. */
  private background: Promise<void> | null = null;
  /** D1 tables are known to exist (checked once per instance). */
  private readonly d1: D1Schema = { ready: false };
  /** The alarm time this instance last set (undefined: not read yet). */
  private alarmAt: number | null | undefined = undefined;
  private readonly state: ChainState;
  /** What signing and anchoring work on (./ledger-checkpoints.ts). */
  private readonly checkpointing: CheckpointHandles;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(OBJECT_SCHEMA);
    this.sql.exec(METRICS_SCHEMA);
    this.state = loadState(this.sql);
    const currentEnv = () => this.env;
    this.checkpointing = {
      storage: ctx.storage,
      sql: this.sql,
      // Read at each use, as `this.env` is.
      get env() {
        return currentEnv();
      },
      state: this.state,
      chain: () => this.chain(),
      arm: (at) => this.arm(at),
      now: () => Date.now(),
    };
  }

  /**
   * The chain this object holds. Its name comes from the object name (`chain:<name>`, built only
   * by object-names.ts `ledgerObject`) and is stored on the first append, so it never changes after.
   */
  private chain(): string {
    if (this.state.storedChain !== null) return this.state.storedChain;
    const name = chainOfObjectName(this.ctx.id.name);
    if (name === null) throw new Error("ledger: this object was not addressed by a chain name (ledgerObject)");
    return name;
  }

  /** Sets the alarm to `at` unless this instance already has one due sooner. */
  private async arm(at: number): Promise<void> {
    if (this.alarmAt === undefined) this.alarmAt = await this.ctx.storage.getAlarm();
    if (this.alarmAt === null || at < this.alarmAt) {
      this.alarmAt = at;
      await this.ctx.storage.setAlarm(at);
    }
  }

  // ---- append: group commit ----

  /**
   * Chains `drafts` after the head and returns them as stored. Appends that arrive while a
   * commit is being made durable wait and are chained together in the next transaction. A call
   * whose drafts cannot be hashed is refused alone; if the transaction fails, every append in
   * it is refused and the chain is unchanged (the caller refuses the governed call).
   */
  async append(drafts: EntryDraft[], signing: LedgerSigning): Promise<LedgerEntry[]> {
    this.rpcs++;
    const answer = this.enqueue(drafts, signing);
    this.startPump();
    return answer;
  }

  /** Each call as its own `append` (refused alone), all queued before the pump runs, so they share a transaction. */
  async appendEach(calls: EntryDraft[][], signing: LedgerSigning): Promise<AppendOutcome[]> {
    if (!Array.isArray(calls)) throw new Error("ledger: appendEach takes an array of calls");
    if (calls.length > MAX_CALL_DRAFTS) throw new Error(`ledger: at most ${MAX_CALL_DRAFTS} calls per appendEach`);
    this.rpcs++;
    const answers = calls.map((drafts): Promise<AppendOutcome> => {
      try {
        return this.enqueue(drafts, signing).then(
          (entries): AppendOutcome => ({ entries }),
          (err): AppendOutcome => ({ error: message(err) }),
        );
      } catch (err) {
        return Promise.resolve({ error: message(err) });
      }
    });
    this.startPump();
    return Promise.all(answers);
  }

  /** Checks one call and queues it; throws (for this call alone) when it cannot be chained. */
  private enqueue(drafts: EntryDraft[], signing: LedgerSigning): Promise<LedgerEntry[]> {
    const call = normaliseDrafts(drafts, signing);
    if (call.drafts.length === 0) return Promise.resolve([]);
    this.chain(); // refuse before queueing if the object has no chain name
    return new Promise<LedgerEntry[]>((resolve, reject) => {
      this.queue.push({ ...call, resolve, reject });
    });
  }

  /** Starts the pump after the current call returned its promise (so a refusal always has its listener). */
  private startPump(): void {
    if (this.pumping || this.queue.length === 0) return;
    this.pumping = true;
    queueMicrotask(() => void this.pump());
  }

  private async pump(): Promise<void> {
    try {
      // The first append to an idle pump commits at once; later arrivals gather while a batch is
      // made durable (the sync below) and go in the next transaction. No timer to gather more:
      // measured under load, waiting for one stalls the callers and costs more than the
      // transactions it saves (BENCHMARKS.md, "Ledger appends per chain").
      while (this.queue.length > 0) {
        const batch: Waiting[] = [];
        let size = 0;
        while (this.queue.length > 0 && (batch.length === 0 || size + this.queue[0]!.drafts.length <= MAX_TRANSACTION_DRAFTS)) {
          const w = this.queue.shift()!;
          batch.push(w);
          size += w.drafts.length;
        }
        let results: LedgerEntry[][];
        try {
          results = commitBatch(this.ctx.storage, this.sql, this.state, this.chain(), batch);
          // Durable before anyone hears of it (the output gate would also hold the answers back).
          await this.ctx.storage.sync();
        } catch (err) {
          const refusal = new Error(`ledger: the chain could not be written (${message(err)}); nothing was appended`);
          for (const w of batch) w.reject(refusal);
          continue;
        }
        for (const [i, w] of batch.entries()) w.resolve(results[i]!);
        await this.afterCommit().catch(() => undefined);
      }
    } finally {
      this.pumping = false;
    }
  }

  /**
   * After a commit: sign at once when 256 entries are unanchored, and arm the alarm for the D1
   * flush and the 10 s checkpoint. Under sustained load the alarm's turn can come seconds late
   * (measured: it waited for the load to stop), so a commit that finds it overdue runs the
   * background pass itself, beside the appends and never awaited by them.
   */
  private async afterCommit(): Promise<void> {
    const s = this.state;
    if (s.head.seq - s.checkpointSize >= CHECKPOINT_EVERY) this.startCheckpoint();
    if (!this.background && typeof this.alarmAt === "number" && Date.now() - this.alarmAt >= ALARM_OVERDUE_MS) {
      void this.startBackground().catch(() => undefined);
    }
    await this.arm(Math.min(Date.now() + FLUSH_DELAY_MS, s.checkpointDue ?? Number.POSITIVE_INFINITY));
  }

  // ---- checkpoints ----

  /** Starts signing (and anchoring) a checkpoint of the head unless one is already in flight. */
  private startCheckpoint(): Promise<void> {
    if (!this.signing) {
      this.signing = checkpointNow(this.checkpointing)
        .catch((err: unknown) => setProblem(this.sql, this.state, `checkpoint failed: ${message(err)}`))
        .finally(() => {
          this.signing = null;
        });
    }
    return this.signing;
  }

  /** The alarm: one background pass, after any pass a commit started (see afterCommit). */
  override async alarm(): Promise<void> {
    while (this.background) await this.background.catch(() => undefined);
    await this.startBackground();
  }

  /** Runs one background pass (the only way one starts), remembering it until it ends. */
  private startBackground(): Promise<void> {
    const pass: Promise<void> = this.backgroundPass().finally(() => {
      if (this.background === pass) this.background = null;
    });
    this.background = pass;
    return pass;
  }

  /**
   * The background work, idempotent (alarms may fire more than once): flush to D1 (failures back
   * off and never touch appends), sign the checkpoint that is due, retry anchoring; then set the
   * alarm for the earliest thing still pending.
   */
  private async backgroundPass(): Promise<void> {
    this.alarmAt = null;
    const next: number[] = [];

    await flushStep(this.sql, this.env.LEDGER_DB, this.d1, () => Date.now(), next);
    // Per-minute rollups past their retention go (the all-time totals stay).
    try {
      pruneRollup(this.sql, Math.floor((Date.now() - MINUTE_RETENTION_MS) / 60_000));
    } catch {
      /* the next pass tries again */
    }

    await settle(this.signing, 30_000);
    // The row, not memory: it is what a delivery of this alarm acts on (and what an operator or a test may have aged).
    const due = readMeta<number>(this.sql, "checkpoint_due");
    this.state.checkpointDue = due;
    if (due !== undefined && this.state.head.seq > this.state.checkpointSize) {
      if (due <= Date.now()) await this.startCheckpoint().catch(() => undefined);
      else next.push(due);
    } else if (due !== undefined) setDue(this.sql, this.state, undefined);

    // A checkpoint not yet in `_global` (a failed anchor, or an object evicted before it anchored).
    const anchorRetryAt = await retryAnchor(this.checkpointing);
    if (anchorRetryAt !== undefined) next.push(anchorRetryAt);

    // Whatever signing and anchoring just wrote still has to reach D1.
    const flushAt = flushPendingAt(this.sql, this.state, () => Date.now());
    if (flushAt !== undefined) next.push(flushAt);
    const laterDue = this.state.checkpointDue;
    if (laterDue !== undefined) next.push(laterDue);
    if (next.length > 0) await this.arm(Math.min(...next));
  }

  // ---- reads ----

  async head(): Promise<Head> {
    return headOf(this.sql);
  }

  async read(afterSeq: number, limit: number): Promise<LedgerEntry[]> {
    return readEntries(this.sql, () => this.chain(), afterSeq, limit);
  }

  /** One call's entries (see LedgerApi.traceCall; `trace` is a reserved handler name RPC cannot call). */
  async traceCall(id: string): Promise<LedgerEntry[]> {
    return traceEntries(this.sql, () => this.chain(), id);
  }

  /** Signed checkpoints after `afterSize`; waits (≤ 2 s) for a checkpoint being signed right now. */
  async checkpoints(afterSize: number): Promise<Checkpoint[]> {
    await settle(this.signing);
    return checkpointsAfter(this.sql, afterSize);
  }

  /** A signed checkpoint of exactly `size` entries (an export ends each chain with one), or null (see ledger-checkpoints.ts). */
  async checkpointAt(size: number): Promise<Checkpoint | null> {
    await settle(this.signing);
    return checkpointAt(this.checkpointing, size, () => this.startCheckpoint());
  }

  async status(): Promise<LedgerStatus> {
    await settle(this.signing);
    return statusOf(this.sql, this.rpcs);
  }

  async metrics(fromMinute: number, toMinute: number): Promise<MetricRow[]> {
    if (!Number.isSafeInteger(fromMinute) || !Number.isSafeInteger(toMinute)) throw new Error("ledger: metrics takes two epoch minutes");
    return readRollup(this.sql, fromMinute, toMinute);
  }
}
