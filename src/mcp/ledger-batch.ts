/**
 * Group commit on the caller's side: concurrent appends from this isolate to one chain travel
 * in one LedgerDO RPC. While a chain's append is in flight, later records queue; when it
 * returns, the whole queue goes in the next call (at most MAX_BATCH drafts). A lone append goes
 * at once, so an idle chain pays no extra latency; under load the per-RPC cost — which dominates
 * the LedgerDO's throughput — is shared. Owns that queue. Must never: confirm a record the chain
 * did not return, reorder one chain's records from one caller, or swallow a failure (every
 * record of a failed call is rejected, and its caller refuses to fail closed). A draft that could
 * fail a call by itself (a large body) goes alone.
 */
import type { LedgerApi, LedgerSigning } from "../../durable-objects/records.ts";
import type { EntryDraft, LedgerEntry } from "../ledger/records.ts";

/** At most this many drafts per RPC (the LedgerDO accepts up to 1000 per call). */
export const MAX_BATCH = 256;
/**
 * A draft whose body is this large travels alone: the chain refuses a whole call for one draft
 * it cannot keep (over its body limit), and one caller's oversized record must not fail others.
 */
export const ALONE_BODY_CHARS = 64 * 1024;

interface Queued {
  draft: EntryDraft;
  resolve: (e: LedgerEntry) => void;
  reject: (e: unknown) => void;
}
interface ChainQueue {
  api: LedgerApi;
  signing: LedgerSigning;
  waiting: Queued[];
  inFlight: boolean;
}

const queues = new Map<string, ChainQueue>();

/** How long one batched append may take before its records count as failed. */
export const RPC_BOUND_MS = 5_000;

function within<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the ledger did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([p, late]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}

/** Appends `draft` to the chain behind `api`, sharing an RPC with this isolate's concurrent appends to it. */
export function appendBatched(key: string, api: LedgerApi, draft: EntryDraft, signing: LedgerSigning): Promise<LedgerEntry> {
  if (JSON.stringify(draft.body).length > ALONE_BODY_CHARS) return appendAlone(api, draft, signing);
  // Records signed for different gateways or keys never share a call.
  const k = `${key}\u0000${signing.secret}\u0000${signing.gateway}`;
  let q = queues.get(k);
  if (!q) {
    q = { api, signing, waiting: [], inFlight: false };
    queues.set(k, q);
  }
  const queue = q;
  return new Promise<LedgerEntry>((resolve, reject) => {
    queue.waiting.push({ draft, resolve, reject });
    if (!queue.inFlight) void drain(k, queue);
  });
}

async function appendAlone(api: LedgerApi, draft: EntryDraft, signing: LedgerSigning): Promise<LedgerEntry> {
  const [e] = await api.append([draft], signing);
  if (!e || e.id !== draft.id || e.kind !== draft.kind) throw new Error("the ledger did not confirm the record");
  return e;
}

async function drain(k: string, q: ChainQueue): Promise<void> {
  q.inFlight = true;
  try {
    while (q.waiting.length > 0) {
      const batch = q.waiting.splice(0, MAX_BATCH);
      try {
        // A call that never answers must not hold the chain's queue: past the bound its records
        // fail (their callers refuse; the chain may still have them, as after any lost answer).
        const entries = await within(
          q.api.append(
            batch.map((b) => b.draft),
            q.signing,
          ),
          RPC_BOUND_MS,
        );
        const byId = new Map(entries.map((e) => [e.id, e]));
        for (const b of batch) {
          const e = byId.get(b.draft.id);
          if (e && e.kind === b.draft.kind) b.resolve(e);
          else b.reject(new Error("the ledger did not confirm the record"));
        }
      } catch (e) {
        for (const b of batch) b.reject(e);
      }
    }
  } finally {
    q.inFlight = false;
    if (q.waiting.length === 0) queues.delete(k);
  }
}
