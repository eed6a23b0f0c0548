/**
 * LedgerDO: one hash chain (a team's, or `_global`, the chain of every team's checkpoints) as a
 * thin state machine over DO SQLite. It is the durable write-ahead point of the governed call
 * path: `append` chains drafts after the head and inserts them inside one `transactionSync`,
 * with every append that arrived meanwhile (group commit), and answers only once the write is
 * durable. Behind the chain it signs checkpoints (≥ 256 unanchored entries, or ≤ 10 s after
 * the first one), commits each team checkpoint to `_global`, and flushes entries and
 * checkpoints to D1 (`LEDGER_DB`) in idempotent batches from its alarm. The chain rules live in
 * src/ledger (pure functions); the D1 schema in ./ledger-schema.ts; limits and draft checks in
 * ./ledger-drafts.ts; row shapes and statements in ./ledger-rows.ts. What the append path needs
 * (head, counters, newest checkpoint size, stored signing settings, checkpoint due time) it keeps
 * in memory, read from SQLite once per instance and changed only after the transaction that
 * stores it committed, so one commit runs its INSERTs and one meta statement and reads nothing
 * else. Must never: renumber, rewrite or delete an entry, answer an append before its
 * transaction committed, let memory run ahead of what a transaction committed, let D1 or
 * signing failures reach an append, or put any part of a secret in a status or error.
 */
import { DurableObject } from "cloudflare:workers";
// @ts-expect-error node:crypto comes from nodejs_compat, whose types the Workers tsconfig leaves out; the one function used is typed below.
import { createHash as nodeCreateHash } from "node:crypto";
import type { Env } from "../src/env.ts";
import { EMPTY_HEAD, type Head, nextEntry } from "../src/ledger/chain.ts";
import { type Checkpoint, checkpointOrigin, signCheckpoint, type SigningKey, signingKeyFrom } from "../src/ledger/checkpoint.ts";
import type { EntryDraft, LedgerEntry } from "../src/ledger/records.ts";
import { sha256Hex } from "../src/wire/canonical.ts";
import {
  ALARM_OVERDUE_MS,
  backoff,
  CHECKPOINT_EVERY,
  CHECKPOINT_WITHIN_MS,
  chainOfObjectName,
  FLUSH_DELAY_MS,
  FLUSH_MAX_ROWS,
  IDEMPOTENT_KINDS,
  MAX_CALL_DRAFTS,
  MAX_PAGE,
  MAX_TRANSACTION_DRAFTS,
  message,
  normaliseDrafts,
  settle,
} from "./ledger-drafts.ts";
import {
  type CheckpointSqlRow,
  checkpointInserts,
  d1Row,
  type EntrySqlRow,
  entryInserts,
  FLUSH_BATCH_ROWS,
  metaUpsert,
  OBJECT_INSERT_CHARS,
  OBJECT_INSERT_ROWS,
  OBJECT_SCHEMA,
  objectEntryInsert,
  toCheckpoint,
  toEntry,
} from "./ledger-rows.ts";
import { rowFacts, schemaStatements } from "./ledger-schema.ts";
import { GLOBAL_CHAIN, ledgerObject } from "./names.ts";
import type { AppendOutcome, LedgerApi, LedgerSigning, LedgerStatus } from "./records.ts";

// The pure rules and row code live in ./ledger-drafts.ts and ./ledger-rows.ts; their public names stay importable from here.
export { CHECKPOINT_EVERY, CHECKPOINT_WITHIN_MS, chainOfObjectName, FLUSH_DELAY_MS, MAX_BODY_CHARS, normaliseDrafts } from "./ledger-drafts.ts";
export { FLUSH_BATCH_ROWS } from "./ledger-rows.ts";

/**
 * SHA-256 (lowercase hex of the UTF-8 text) for entry hashes: node:crypto's, native and about three
 * times as fast as the portable sha256Hex, when the two agree on a probe text; sha256Hex otherwise.
 */
const createHash = nodeCreateHash as (algorithm: "sha256") => { update(text: string, encoding: "utf8"): { digest(encoding: "hex"): string } };
const entrySha256: (text: string) => string = (() => {
  const native = (text: string): string => createHash("sha256").update(text, "utf8").digest("hex");
  try {
    const probe = `{"at":"2026-01-01T00:00:00.000Z","body":{"é":"中 😀"},"chain":"t","id":"x","kind":"decision","prev":"${"0".repeat(64)}","seq":1,"v":1}`;
    return native(probe) === sha256Hex(probe) ? native : sha256Hex;
  } catch {
    return sha256Hex;
  }
})();

/** An append waiting for its group commit. */
interface Waiting {
  drafts: EntryDraft[];
  /** Each draft's body as RFC 8785 JSON: what is stored. */
  bodies: string[];
  signing: LedgerSigning;
  resolve: (entries: LedgerEntry[]) => void;
  reject: (err: Error) => void;
}

/** A background failure with its retry time (D1 flush, anchoring). */
interface Trouble {
  failures: number;
  error: string;
  retryAt: number;
}

/**
 * What the append path reads, kept in memory: loaded from SQLite when the instance starts (the
 * object is single-threaded and the only writer of its tables), and changed only once the
 * transaction that stores the change has committed, so it never runs ahead of the tables.
 */
interface ChainState {
  /** `meta.chain` (null before the first commit stores it). */
  storedChain: string | null;
  head: Head;
  /** Size of the newest checkpoint (0: none). */
  checkpointSize: number;
  /** `meta.transactions` and `meta.appends`. */
  transactions: number;
  appends: number;
  /** `meta.signing` as stored (its JSON text): rewritten only when an append names other settings. */
  signing: string | undefined;
  /** `meta.checkpoint_due` as this instance last wrote or read it (the alarm reads the row itself). */
  checkpointDue: number | undefined;
  /** `meta.checkpoint_problem` as stored: rewritten only when it changes. */
  checkpointProblem: string | undefined;
}

export class LedgerDO extends DurableObject<Env> implements LedgerApi {
  private sql: SqlStorage;
  private queue: Waiting[] = [];
  private pumping = false;
  /** RPCs that brought appends since this instance started (status only). */
  private rpcs = 0;
  /** The checkpoint being signed (and anchored), if any: at most one at a time. */
  private signing: Promise<void> | null = null;
  /** The background pass running now (the alarm's, or one an overdue alarm made a commit start), if any: at most one at a time. */
  private background: Promise<void> | null = null;
  /** D1 tables are known to exist (checked once per instance). */
  private schemaReady = false;
  /** The alarm time this instance last set (undefined: not read yet). */
  private alarmAt: number | null | undefined = undefined;
  private state: ChainState;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(OBJECT_SCHEMA);
    this.state = this.load();
  }

  /** The chain's state as stored (see ChainState): a handful of reads, once per instance. */
  private load(): ChainState {
    const rows = this.sql
      .exec<{ k: string; v: string }>(
        "SELECT k, v FROM meta WHERE k IN ('chain', 'transactions', 'appends', 'signing', 'checkpoint_due', 'checkpoint_problem')",
      )
      .toArray();
    const meta = new Map(rows.map((r) => [r.k, r.v]));
    const parsed = <T>(k: string): T | undefined => {
      const v = meta.get(k);
      return v === undefined ? undefined : (JSON.parse(v) as T);
    };
    return {
      storedChain: parsed<string>("chain") ?? null,
      head: this.headNow(),
      checkpointSize: this.lastCheckpoint().size,
      transactions: parsed<number>("transactions") ?? 0,
      appends: parsed<number>("appends") ?? 0,
      signing: meta.get("signing"),
      checkpointDue: parsed<number>("checkpoint_due"),
      checkpointProblem: parsed<string>("checkpoint_problem"),
    };
  }

  // ---- meta ----

  private meta<T>(k: string): T | undefined {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", k).toArray()[0];
    return row ? (JSON.parse(row.v) as T) : undefined;
  }
  private setMeta(k: string, v: unknown): void {
    if (v === undefined) this.sql.exec("DELETE FROM meta WHERE k = ?", k);
    else this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", k, JSON.stringify(v));
  }

  /**
   * The chain this object holds. Its name comes from the object name (`chain:<name>`, built only
   * by names.ts `ledgerObject`) and is stored on the first append, so it never changes after.
   */
  private chain(): string {
    if (this.state.storedChain !== null) return this.state.storedChain;
    const name = chainOfObjectName(this.ctx.id.name);
    if (name === null) throw new Error("ledger: this object was not addressed by a chain name (ledgerObject)");
    return name;
  }

  /** Writes `meta.checkpoint_due` (undefined: removes it) and remembers it. */
  private setDue(at: number | undefined): void {
    this.setMeta("checkpoint_due", at);
    this.state.checkpointDue = at;
  }
  /** Writes `meta.checkpoint_problem` (undefined: removes it) unless it already says that. */
  private setProblem(problem: string | undefined): void {
    if (problem === this.state.checkpointProblem) return;
    this.setMeta("checkpoint_problem", problem);
    this.state.checkpointProblem = problem;
  }

  private headNow(): Head {
    const row = this.sql.exec<{ seq: number; hash: string }>("SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1").toArray()[0];
    return row ? { seq: row.seq, hash: row.hash } : EMPTY_HEAD;
  }
  private lastCheckpoint(): { size: number; hash: string } {
    const row = this.sql.exec<{ size: number; hash: string }>("SELECT size, hash FROM checkpoints ORDER BY size DESC LIMIT 1").toArray()[0];
    return row ?? { size: 0, hash: "" };
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
          results = this.commit(batch);
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
   * One transaction: chain every waiting call in order after the head, insert the entries
   * (several rows per statement) and the transaction's meta rows (one statement). All or
   * nothing: the in-memory state takes the new head and counters only after it committed.
   */
  private commit(batch: Waiting[]): LedgerEntry[][] {
    const s = this.state;
    const chain = this.chain();
    const signing = JSON.stringify(batch[batch.length - 1]!.signing);
    const out: LedgerEntry[][] = [];
    let head = s.head;
    let due = s.checkpointDue;
    this.ctx.storage.transactionSync(() => {
      const seen = new Map<string, LedgerEntry>();
      const params: SqlStorageValue[] = [];
      let rows = 0;
      let chars = 0;
      const insert = () => {
        if (rows === 0) return;
        this.sql.exec(objectEntryInsert(rows), ...params);
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
          const again = idempotent ? (seen.get(d.id) ?? this.byId(d.id, d.kind)) : undefined;
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
          head = { seq: e.seq, hash: e.hash };
          entries.push(e);
        }
        out.push(entries);
      }
      insert();
      const meta: SqlStorageValue[] = ["transactions", JSON.stringify(s.transactions + 1), "appends", JSON.stringify(s.appends + batch.length)];
      if (s.storedChain === null) meta.push("chain", JSON.stringify(chain));
      if (signing !== s.signing) meta.push("signing", signing);
      if (head.seq > s.checkpointSize && due === undefined) {
        due = Date.now() + CHECKPOINT_WITHIN_MS;
        meta.push("checkpoint_due", JSON.stringify(due));
      }
      this.sql.exec(metaUpsert(meta.length / 2), ...meta);
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

  private byId(id: string, kind: string): LedgerEntry | undefined {
    const row = this.sql.exec<EntrySqlRow>("SELECT * FROM entries WHERE id = ? AND kind = ? ORDER BY seq LIMIT 1", id, kind).toArray()[0];
    return row ? toEntry(this.chain(), row) : undefined;
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
      this.signing = this.checkpointNow()
        .catch((err: unknown) => this.setProblem(`checkpoint failed: ${message(err)}`))
        .finally(() => {
          this.signing = null;
        });
    }
    return this.signing;
  }

  /** The key named by the latest signing settings, or the reason there is none (never the secret's text). */
  private signingKey(signing: LedgerSigning | undefined): SigningKey | string {
    if (!signing) return "no signing settings yet (no append has named a signing secret)";
    const secret = this.env[signing.secret];
    if (typeof secret !== "string" || secret.trim() === "") return `no signing key configured: the Worker secret ${signing.secret} is not set`;
    try {
      return signingKeyFrom(secret);
    } catch {
      return `the Worker secret ${signing.secret} holds no usable Ed25519 private key`;
    }
  }

  /** Signs a checkpoint of the current head (idempotent: nothing when the head is already anchored), then commits it to `_global`. */
  private async checkpointNow(): Promise<void> {
    const started = Date.now();
    const s = this.state;
    const head = s.head;
    if (head.seq > s.checkpointSize) {
      const signing = s.signing === undefined ? undefined : (JSON.parse(s.signing) as LedgerSigning);
      const key = this.signingKey(signing);
      if (typeof key === "string") {
        // Recorded, and tried again on the next append (not by a loop of alarms).
        this.setProblem(key);
        this.setDue(undefined);
        return;
      }
      const chain = this.chain();
      let note: string;
      try {
        note = await signCheckpoint(checkpointOrigin(signing!.gateway, chain), head.seq, head.hash, key);
      } catch (err) {
        this.setProblem(`signing failed: ${message(err)}`);
        this.setDue(started + CHECKPOINT_WITHIN_MS);
        await this.arm(started + CHECKPOINT_WITHIN_MS);
        return;
      }
      // Entries committed while signing are unanchored since (at most) the start of this signing.
      const due = s.head.seq > head.seq ? started + CHECKPOINT_WITHIN_MS : undefined;
      this.ctx.storage.transactionSync(() => {
        this.sql.exec("INSERT OR IGNORE INTO checkpoints (size, hash, at, note) VALUES (?, ?, ?, ?)", head.seq, head.hash, new Date().toISOString(), note);
        this.setMeta("checkpoint_problem", undefined);
        this.setMeta("checkpoint_due", due);
      });
      s.checkpointSize = Math.max(s.checkpointSize, head.seq);
      s.checkpointProblem = undefined;
      s.checkpointDue = due;
      await this.arm(Math.min(Date.now() + FLUSH_DELAY_MS, due ?? Number.POSITIVE_INFINITY));
    }
    await this.anchor();
  }

  /** Commits the newest checkpoint of a team chain to `_global` (retried with backoff from the alarm). */
  private async anchor(): Promise<void> {
    const chain = this.chain();
    if (chain === GLOBAL_CHAIN) return;
    const row = this.sql.exec<CheckpointSqlRow>("SELECT * FROM checkpoints ORDER BY size DESC LIMIT 1").toArray()[0];
    if (!row || row.size <= (this.meta<number>("anchored") ?? 0)) return;
    const signing = this.meta<LedgerSigning>("signing");
    const global = ledgerObject(this.env, GLOBAL_CHAIN);
    try {
      if (!signing || !global) throw new Error("no global chain to anchor to");
      await global.append(
        [{ kind: "checkpoint", id: `checkpoint:${chain}:${row.size}`, at: row.at, body: { chain, size: row.size, hash: row.hash, note: row.note } }],
        signing,
      );
      this.setMeta("anchored", row.size);
      this.setMeta("anchor_trouble", undefined);
    } catch (err) {
      const failures = (this.meta<Trouble>("anchor_trouble")?.failures ?? 0) + 1;
      const retryAt = Date.now() + backoff(failures);
      this.setMeta("anchor_trouble", { failures, error: message(err), retryAt } satisfies Trouble);
      await this.arm(retryAt);
    }
  }

  // ---- D1 ----

  /** The stored body text of the decision entry `id`, if any (fills an outcome's D1 row). */
  private decisionBody(id: string): string | undefined {
    return this.sql.exec<{ body: string }>("SELECT body FROM entries WHERE id = ? AND kind = 'decision' LIMIT 1", id).toArray()[0]?.body;
  }

  /**
   * Copies entries after `flushed_seq` and checkpoints after `flushed_cp` to D1, 100 rows per
   * `batch()` (atomic), advancing the marks only after each batch succeeded. Idempotent: rows
   * are keyed (chain, seq) / (chain, size) and inserted with INSERT OR IGNORE. True when rows
   * remain for another run.
   */
  private async flush(): Promise<boolean> {
    const db = this.env.LEDGER_DB;
    if (!db) throw new Error("no D1 binding LEDGER_DB");
    const chain = this.meta<string>("chain");
    if (chain === undefined) return false;
    if (!this.schemaReady) {
      await db.batch(schemaStatements().map((s) => db.prepare(s)));
      this.schemaReady = true;
    }
    let done = 0;
    while (done < FLUSH_MAX_ROWS) {
      const after = this.meta<number>("flushed_seq") ?? 0;
      const rows = this.sql.exec<EntrySqlRow>("SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?", after, FLUSH_BATCH_ROWS).toArray();
      if (rows.length === 0) break;
      await db.batch(
        entryInserts(
          db,
          rows.map((r) => d1Row(chain, r, (id) => this.decisionBody(id))),
        ),
      );
      this.setMeta("flushed_seq", rows[rows.length - 1]!.seq);
      done += rows.length;
    }
    const afterCp = this.meta<number>("flushed_cp") ?? 0;
    const cps = this.sql.exec<CheckpointSqlRow>("SELECT * FROM checkpoints WHERE size > ? ORDER BY size LIMIT ?", afterCp, FLUSH_BATCH_ROWS).toArray();
    if (cps.length > 0) {
      await db.batch(checkpointInserts(db, chain, cps));
      this.setMeta("flushed_cp", cps[cps.length - 1]!.size);
    }
    const head = this.headNow();
    return head.seq > (this.meta<number>("flushed_seq") ?? 0) || cps.length === FLUSH_BATCH_ROWS;
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
    const now = Date.now();

    const trouble = this.meta<Trouble>("flush_trouble");
    if (trouble && trouble.retryAt > now) next.push(trouble.retryAt);
    else {
      try {
        if (await this.flush()) next.push(Date.now());
        this.setMeta("flush_trouble", undefined);
      } catch (err) {
        const failures = (trouble?.failures ?? 0) + 1;
        const retryAt = Date.now() + backoff(failures);
        this.setMeta("flush_trouble", { failures, error: message(err), retryAt } satisfies Trouble);
        next.push(retryAt);
      }
    }

    await settle(this.signing, 30_000);
    // The row, not memory: it is what a delivery of this alarm acts on (and what an operator or a test may have aged).
    const due = this.meta<number>("checkpoint_due");
    this.state.checkpointDue = due;
    if (due !== undefined && this.state.head.seq > this.state.checkpointSize) {
      if (due <= Date.now()) await this.startCheckpoint().catch(() => undefined);
      else next.push(due);
    } else if (due !== undefined) this.setDue(undefined);

    // A checkpoint not yet in `_global` (a failed anchor, or an object evicted before it anchored).
    const anchorTrouble = this.meta<Trouble>("anchor_trouble");
    if (!anchorTrouble || anchorTrouble.retryAt <= Date.now()) await this.anchor();
    const still = this.meta<Trouble>("anchor_trouble");
    if (still) next.push(still.retryAt);

    // Whatever signing and anchoring just wrote still has to reach D1.
    const unflushed = this.state.head.seq > (this.meta<number>("flushed_seq") ?? 0) || this.state.checkpointSize > (this.meta<number>("flushed_cp") ?? 0);
    if (unflushed && !this.meta<Trouble>("flush_trouble")) next.push(Date.now() + FLUSH_DELAY_MS);
    const laterDue = this.state.checkpointDue;
    if (laterDue !== undefined) next.push(laterDue);
    if (next.length > 0) await this.arm(Math.min(...next));
  }

  // ---- reads ----

  async head(): Promise<Head> {
    return this.headNow();
  }

  async read(afterSeq: number, limit: number): Promise<LedgerEntry[]> {
    const n = Math.max(0, Math.min(MAX_PAGE, Math.floor(Number(limit) || 0)));
    if (n === 0) return [];
    return this.sql
      .exec<EntrySqlRow>("SELECT * FROM entries WHERE seq > ? ORDER BY seq LIMIT ?", Math.floor(Number(afterSeq) || 0), n)
      .toArray()
      .map((r) => toEntry(this.chain(), r));
  }

  /** One call's entries (see LedgerApi.traceCall; `trace` is a reserved handler name RPC cannot call). */
  async traceCall(id: string): Promise<LedgerEntry[]> {
    return this.sql
      .exec<EntrySqlRow>("SELECT * FROM entries WHERE id = ? OR decision_id = ? ORDER BY seq LIMIT ?", id, id, MAX_PAGE)
      .toArray()
      .map((r) => toEntry(this.chain(), r));
  }

  /** Signed checkpoints after `afterSize`; waits (≤ 2 s) for a checkpoint being signed right now. */
  async checkpoints(afterSize: number): Promise<Checkpoint[]> {
    await settle(this.signing);
    const chain = this.meta<string>("chain");
    if (chain === undefined) return [];
    return this.sql
      .exec<CheckpointSqlRow>("SELECT * FROM checkpoints WHERE size > ? ORDER BY size LIMIT ?", Math.floor(Number(afterSize) || 0), MAX_PAGE)
      .toArray()
      .map((c) => toCheckpoint(chain, c));
  }

  async status(): Promise<LedgerStatus> {
    await settle(this.signing);
    const head = this.headNow();
    const cp = this.lastCheckpoint();
    const flush = this.meta<Trouble>("flush_trouble");
    const anchor = this.meta<Trouble>("anchor_trouble");
    return {
      chain: this.meta<string>("chain") ?? null,
      head,
      checkpointSize: cp.size,
      unanchored: head.seq - cp.size,
      checkpointProblem: this.meta<string>("checkpoint_problem") ?? null,
      flushedSeq: this.meta<number>("flushed_seq") ?? 0,
      flushProblem: flush?.error ?? null,
      flushFailures: flush?.failures ?? 0,
      anchoredSize: this.meta<number>("anchored") ?? 0,
      anchorProblem: anchor?.error ?? null,
      transactions: this.meta<number>("transactions") ?? 0,
      appends: this.meta<number>("appends") ?? 0,
      rpcs: this.rpcs,
    };
  }
}
