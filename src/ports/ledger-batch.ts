/**
 * Group commit on the Worker's side of the RPC: appends this isolate makes to one chain while
 * earlier ones are on their way to the LedgerDO wait, and go to the object together in one
 * `appendEach` call, where each is still its own append (checked alone, refused alone, answered
 * with its own entries) and all land in the object's next transaction. An idle chain sends at
 * once, so a lone caller pays no wait; under load one RPC carries many appends, and the per-RPC
 * cost of Durable Objects stops bounding a chain's appends/s (BENCHMARKS.md, "Ledger appends per
 * chain"). Workers rule this design follows: I/O belongs to the request that started it and dies
 * with it, so every RPC is sent by one of the callers whose drafts it carries, from its own
 * request, while it waits for its own answer; a caller that was not chosen to send only waits for
 * its answer or its turn. Owns the per-isolate queues (keyed by the Env, the chain and the signing
 * settings, under the isolate's LEDGER binding). Must never: answer a caller with an entry that is not its own (entries are matched by
 * position, then checked by id and kind in ledger-writer.ts), let one caller's refused draft refuse
 * the others, send an RPC from a request that is not waiting for it, or let a sender that never
 * comes back (its request cancelled) stall the queue: a batch older than the bound no longer
 * counts as in flight, and every caller is bounded on its own.
 */
import { ledgerObject } from "../../durable-objects/object-names.ts";
import type { AppendOutcome, LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { Env } from "../env.ts";
import type { EntryDraft, LedgerEntry } from "../ledger/records.ts";
import { bounded, NoAnswer } from "../wire/bounded.ts";

/** Appends one RPC carries at most (the object takes up to 1,000 calls per appendEach and 2,000 drafts per transaction). */
export const MAX_RPC_APPENDS = 128;
/** Body characters one RPC carries at most (well inside the 32 MiB Workers RPC limit). */
const MAX_RPC_CHARS = 4 * 1024 * 1024;
/** RPCs one isolate keeps in flight per chain: the next batch gathers while these are answered. */
export const MAX_RPCS_IN_FLIGHT = 2;

/** The team's ledger did not answer an append within its bound ("the ledger did not answer within <ms> ms"). */
export class LedgerLate extends NoAnswer {
  constructor(ms: number) {
    super("the ledger", ms);
  }
}

/** How an append was answered: the object's outcome, or its RPC ran out of time (the bound it had). */
type Settled = AppendOutcome | { late: number };

interface Waiting {
  drafts: EntryDraft[];
  chars: number;
  /** Taken into a batch (by itself or another sender). */
  taken: boolean;
  /** Chosen to send the next batch, not yet running. */
  woken: boolean;
  settle(o: Settled): void;
  turn(): void;
}

interface Queue {
  waiting: Waiting[];
  /** Start times of the batches in flight, by token. */
  inFlight: Map<symbol, number>;
  timeoutMs: number;
}

const queues = new WeakMap<object, Map<string, Queue>>();

function queueOf(env: Env, team: string, signing: LedgerSigning, timeoutMs: number): Queue {
  // Keyed by the LEDGER binding, which every request of an isolate shares (a test's fake Env has its own).
  let byChain = queues.get(env.LEDGER);
  if (!byChain) {
    byChain = new Map();
    queues.set(env.LEDGER, byChain);
  }
  const key = JSON.stringify([team, signing.secret, signing.gateway]);
  let q = byChain.get(key);
  if (!q) {
    q = { waiting: [], inFlight: new Map(), timeoutMs };
    byChain.set(key, q);
  }
  q.timeoutMs = timeoutMs;
  return q;
}

const sizeOf = (drafts: EntryDraft[]): number => drafts.reduce((n, d) => n + JSON.stringify(d.body).length, 0);

/** Batches in flight that may still answer (one older than the bound has lost its sender). */
function live(q: Queue): number {
  const cutoff = Date.now() - q.timeoutMs;
  for (const [token, at] of q.inFlight) if (at < cutoff) q.inFlight.delete(token);
  return q.inFlight.size;
}

/** Hands the turn to the first waiting callers while fewer than MAX_RPCS_IN_FLIGHT batches are out or about to go. */
function wake(q: Queue): void {
  let chosen = q.waiting.filter((w) => w.woken).length;
  for (const w of q.waiting) {
    if (live(q) + chosen >= MAX_RPCS_IN_FLIGHT) return;
    if (w.woken) continue;
    w.woken = true;
    chosen++;
    w.turn();
  }
}

/** The sender `me` takes itself and the next waiting callers off the queue, within the RPC's bounds. */
function takeBatch(q: Queue, me: Waiting): Waiting[] {
  q.waiting.splice(q.waiting.indexOf(me), 1);
  const batch = [me];
  let chars = me.chars;
  while (q.waiting.length > 0 && batch.length < MAX_RPC_APPENDS && chars + q.waiting[0]!.chars <= MAX_RPC_CHARS) {
    const w = q.waiting.shift()!;
    batch.push(w);
    chars += w.chars;
  }
  for (const w of batch) w.taken = true;
  return batch;
}

/** Sends `batch` from the current request and settles every caller in it. */
async function send(env: Env, team: string, signing: LedgerSigning, q: Queue, batch: Waiting[]): Promise<void> {
  const token = Symbol("batch");
  q.inFlight.set(token, Date.now());
  try {
    const chain = ledgerObject(env, team)!;
    const outcomes = await bounded(
      chain.appendEach(
        batch.map((w) => w.drafts),
        signing,
      ),
      q.timeoutMs,
    );
    for (const [i, w] of batch.entries()) w.settle(outcomes[i] ?? { error: "the ledger did not confirm the record" });
  } catch (err) {
    const error = err instanceof Error ? err.message : String(err);
    for (const w of batch) w.settle(err instanceof NoAnswer ? { late: err.ms } : { error });
  } finally {
    q.inFlight.delete(token);
    wake(q);
  }
}

/**
 * Appends `drafts` (one caller's, kept together) to the team's chain through this isolate's
 * queue for it; resolves with the stored entries once they are durable, or rejects (refused,
 * or no answer within `timeoutMs`: LedgerLate). The caller still checks that the entries are its own.
 */
export async function batchedAppend(env: Env, team: string, signing: LedgerSigning, drafts: EntryDraft[], timeoutMs: number): Promise<LedgerEntry[]> {
  if (!ledgerObject(env, team)) throw new Error(`team "${team}" is not a valid ledger chain name`);
  const q = queueOf(env, team, signing, timeoutMs);
  let settle!: (o: Settled) => void;
  let turn!: () => void;
  const result = new Promise<Settled>((r) => {
    settle = r;
  });
  const myTurn = new Promise<"turn">((r) => {
    turn = () => r("turn");
  });
  const me: Waiting = { drafts, chars: sizeOf(drafts), taken: false, woken: false, settle, turn };
  q.waiting.push(me);
  wake(q);
  // One deadline for the whole append, however it is answered — a sender included: it sends, then
  // waits for its answer under this same deadline (the RPC's own bound in send settles the rest).
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"late">((r) => {
    timer = setTimeout(() => r("late"), timeoutMs);
  });
  try {
    let answer = await Promise.race([result, myTurn, late]);
    if (answer === "turn") {
      // send never rejects and settles `me` (and the others it carries) when the RPC answers or its bound passes.
      if (!me.taken) void send(env, team, signing, q, takeBatch(q, me));
      else wake(q); // another sender carried this append: pass the turn on
      answer = await Promise.race([result, late]);
    }
    if (answer === "late") {
      // No answer (and no turn) in time: leave the queue if still in it, and refuse.
      const i = q.waiting.indexOf(me);
      if (i >= 0) q.waiting.splice(i, 1);
      if (me.woken && !me.taken) wake(q);
      throw new LedgerLate(timeoutMs);
    }
    if ("late" in answer) throw new LedgerLate(answer.late);
    if ("error" in answer) throw new Error(answer.error);
    return answer.entries;
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}
