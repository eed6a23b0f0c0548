/**
 * The LedgerDO's checkpoints, as plain functions over a small set of handles (`CheckpointHandles`:
 * its storage and SQLite, the env, the in-memory ChainState, the chain name, the alarm and a
 * clock): which signing key the stored settings name (or why there is none), signing a checkpoint
 * of the head and storing it in one transaction, and anchoring the newest checkpoint of a team
 * chain in `_global` with backoff on failure, and the checkpoint an export ends a chain with
 * (`checkpointAt`: exactly the size exported). The object decides when these run and keeps at most
 * one signing in flight. Must never: sign anything but the committed head, change memory before
 * the transaction that stores it, let a failure escape as anything but a recorded problem or an
 * anchor retry, or put any part of a secret in a problem text.
 */
import type { Env } from "../src/env.ts";
import { checkpointOrigin, signCheckpoint, type SigningKey, signingKeyFrom } from "../src/ledger/checkpoint.ts";
import { backoff, CHECKPOINT_WITHIN_MS, FLUSH_DELAY_MS, message } from "./ledger-drafts.ts";
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import { type CheckpointSqlRow, type EntrySqlRow, toCheckpoint } from "./ledger-rows.ts";
import { type ChainState, readMeta, setDue, setProblem, type Trouble, writeMeta } from "./ledger-state.ts";
import { ledgerObject } from "./object-names.ts";
import { GLOBAL_CHAIN } from "../src/ledger/records.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/** What signing and anchoring work on: the object's handles and state, never the object. */
export interface CheckpointHandles {
  /** Runs the checkpoint's transaction. */
  storage: DurableObjectStorage;
  sql: SqlStorage;
  /** Holds the signing secret the settings name, and the LEDGER binding `_global` is reached through. */
  env: Env;
  state: ChainState;
  /** The object's chain name (throws when the object has none). */
  chain: () => string;
  /** Sets the alarm to `at` unless one is due sooner. */
  arm: (at: number) => Promise<void>;
  now: () => number;
}

/** The key named by the latest signing settings, or the reason there is none (never the secret's text). */
export function signingKey(env: Env, signing: LedgerSigning | undefined): SigningKey | string {
  if (!signing) return "no signing settings yet (no append has named a signing secret)";
  const secret = env[signing.secret];
  if (typeof secret !== "string" || secret.trim() === "") return `no signing key configured: the Worker secret ${signing.secret} is not set`;
  try {
    return signingKeyFrom(secret);
  } catch {
    return `the Worker secret ${signing.secret} holds no usable Ed25519 private key`;
  }
}

/** Signs a checkpoint of the current head (idempotent: nothing when the head is already anchored), then commits it to `_global`. */
export async function checkpointNow(h: CheckpointHandles): Promise<void> {
  const started = h.now();
  const s = h.state;
  const head = s.head;
  if (head.seq > s.checkpointSize) {
    const signing = s.signing === undefined ? undefined : (JSON.parse(s.signing) as LedgerSigning);
    const key = signingKey(h.env, signing);
    if (typeof key === "string") {
      // Recorded, and tried again on the next append (not by a loop of alarms).
      setProblem(h.sql, s, key);
      setDue(h.sql, s, undefined);
      return;
    }
    const chain = h.chain();
    let note: string;
    try {
      note = await signCheckpoint(checkpointOrigin(signing!.gateway, chain), head.seq, head.hash, key);
    } catch (err) {
      setProblem(h.sql, s, `signing failed: ${message(err)}`);
      setDue(h.sql, s, started + CHECKPOINT_WITHIN_MS);
      await h.arm(started + CHECKPOINT_WITHIN_MS);
      return;
    }
    // Entries committed while signing are unanchored since (at most) the start of this signing.
    const due = s.head.seq > head.seq ? started + CHECKPOINT_WITHIN_MS : undefined;
    h.storage.transactionSync(() => {
      h.sql.exec("INSERT OR IGNORE INTO checkpoints (size, hash, at, note) VALUES (?, ?, ?, ?)", head.seq, head.hash, new Date(h.now()).toISOString(), note);
      writeMeta(h.sql, "checkpoint_problem", undefined);
      writeMeta(h.sql, "checkpoint_due", due);
    });
    s.checkpointSize = Math.max(s.checkpointSize, head.seq);
    s.checkpointProblem = undefined;
    s.checkpointDue = due;
    await h.arm(Math.min(h.now() + FLUSH_DELAY_MS, due ?? Number.POSITIVE_INFINITY));
  }
  await anchor(h);
}

/** Commits the newest checkpoint of a team chain to `_global` (retried with backoff from the alarm). */
export async function anchor(h: CheckpointHandles): Promise<void> {
  const chain = h.chain();
  if (chain === GLOBAL_CHAIN) return;
  const row = h.sql.exec<CheckpointSqlRow>("SELECT * FROM checkpoints ORDER BY size DESC LIMIT 1").toArray()[0];
  if (!row || row.size <= (readMeta<number>(h.sql, "anchored") ?? 0)) return;
  const signing = readMeta<LedgerSigning>(h.sql, "signing");
  const global = ledgerObject(h.env, GLOBAL_CHAIN);
  try {
    if (!signing || !global) throw new Error("no global chain to anchor to");
    await global.append(
      [{ kind: "checkpoint", id: `checkpoint:${chain}:${row.size}`, at: row.at, body: { chain, size: row.size, hash: row.hash, note: row.note } }],
      signing,
    );
    writeMeta(h.sql, "anchored", row.size);
    writeMeta(h.sql, "anchor_trouble", undefined);
  } catch (err) {
    const failures = (readMeta<Trouble>(h.sql, "anchor_trouble")?.failures ?? 0) + 1;
    const retryAt = h.now() + backoff(failures);
    writeMeta(h.sql, "anchor_trouble", { failures, error: message(err), retryAt } satisfies Trouble);
    await h.arm(retryAt);
  }
}

/**
 * The background pass's anchoring step: a checkpoint not yet in `_global` (a failed anchor, or an
 * object evicted before it anchored) is anchored unless its retry time is still ahead. Returns
 * the retry time still pending, if any.
 */
export async function retryAnchor(h: CheckpointHandles): Promise<number | undefined> {
  const anchorTrouble = readMeta<Trouble>(h.sql, "anchor_trouble");
  if (!anchorTrouble || anchorTrouble.retryAt <= h.now()) await anchor(h);
  return readMeta<Trouble>(h.sql, "anchor_trouble")?.retryAt;
}

/**
 * A signed checkpoint of exactly `size` entries, for an export that ends there: the stored one
 * when the chain has it; else, when `size` is still the head, the regular checkpoint (signed,
 * stored and anchored by `signHead`); else one signed now over entry `size`'s stored hash and
 * handed back unstored (the chain's own checkpoints stay in order of size, which the D1 flush and
 * the anchoring rely on). Null when the chain has fewer entries or no usable signing key (the
 * export then ends unanchored, and the verifier says so).
 */
export async function checkpointAt(h: CheckpointHandles, size: number, signHead: () => Promise<void>): Promise<Checkpoint | null> {
  const n = Math.floor(Number(size) || 0);
  if (n < 1 || n > h.state.head.seq) return null;
  const stored = () => h.sql.exec<CheckpointSqlRow>("SELECT * FROM checkpoints WHERE size = ?", n).toArray()[0];
  let row = stored();
  if (!row && n === h.state.head.seq) {
    await signHead();
    row = stored();
  }
  const chain = h.chain();
  if (row) return toCheckpoint(chain, row);
  const entry = h.sql.exec<EntrySqlRow>("SELECT * FROM entries WHERE seq = ?", n).toArray()[0];
  const signing = h.state.signing === undefined ? undefined : (JSON.parse(h.state.signing) as LedgerSigning);
  const key = signingKey(h.env, signing);
  if (!entry || typeof key === "string") return null;
  const hash = String(entry.hash);
  const note = await signCheckpoint(checkpointOrigin(signing!.gateway, chain), n, hash, key);
  return { chain, size: n, hash, at: new Date(h.now()).toISOString(), note };
}
