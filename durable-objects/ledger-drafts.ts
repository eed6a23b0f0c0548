/**
 * The LedgerDO's pure rules, apart from its state: the limits and timings it runs by (checkpoint
 * cadence, flush delay, transaction and call sizes, body size, page size, retry backoff), how one
 * append call is checked and its drafts normalised (`normaliseDrafts`: bodies become their RFC 8785
 * text), how a chain name is read from an object name, and the small waiting helper the reads use.
 * Nothing here touches storage, D1, the clock beyond a timer, or the object itself. Must never:
 * hold state, accept a draft the chain could not hash or a reader could not parse back, or put any
 * part of a secret in an error.
 */
import { canonicalJson } from "../src/wire/canonical.ts";
import type { EntryKind } from "../src/ledger/records.ts";
import { draftMetricsOf, type MeteredDraft } from "../src/ledger/metrics.ts";
import type { JsonObject } from "../src/wire/jsonrpc.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/** A checkpoint is signed once this many entries follow the newest one… */
export const CHECKPOINT_EVERY = 256;
/** …or this long after the first entry that follows it. */
export const CHECKPOINT_WITHIN_MS = 10_000;
/** Entries reach D1 this long (at most) after their append. */
export const FLUSH_DELAY_MS = 1_000;
/** An alarm this late when a commit finishes has lost its turn to the load: the commit starts the background pass itself. */
export const ALARM_OVERDUE_MS = 500;
/** Rows one alarm run flushes before it re-arms (bounds the D1 queries of one invocation). */
export const FLUSH_MAX_ROWS = 1_000;
/** Drafts one transaction chains (bounds the synchronous work; a call is never split). */
export const MAX_TRANSACTION_DRAFTS = 2_000;
/** Drafts one append call may carry. */
export const MAX_CALL_DRAFTS = 1_000;
/** Longest body (canonical JSON, UTF-16 units) an entry may have: well inside the 2 MB row limits of DO SQLite and D1. */
export const MAX_BODY_CHARS = 256 * 1024;
/** How long a read waits for a checkpoint being signed right now. */
export const SETTLE_MS = 2_000;
/** Retry backoff for D1 and for anchoring: 1 s, 2 s, 4 s … at most 5 min. */
export const backoff = (failures: number): number => Math.min(1_000 * 2 ** Math.max(0, failures - 1), 300_000);
/** Upper bound of one read / checkpoints answer. */
export const MAX_PAGE = 1_000;

/** Kinds whose entry id names the event itself: appending the same id again returns the stored entry. */
export const IDEMPOTENT_KINDS = new Set<string>(["checkpoint", "config.changed", "hold.expired", "policy.unmatched"]);

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
export const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * Checks one append call and normalises its drafts (bodies become their canonical JSON value, so
 * what is stored, hashed and returned is the same). Throws, for this call only, on anything the
 * chain could not hash or a reader could not parse back.
 */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function normaliseDrafts(drafts: unknown, signing: unknown): { drafts: MeteredDraft[]; bodies: string[]; signing: LedgerSigning } {
  if (!isObject(signing) || typeof signing.secret !== "string" || typeof signing.gateway !== "string") {
    throw new Error("ledger: append needs signing settings {secret, gateway}");
  }
  if (!Array.isArray(drafts)) throw new Error("ledger: append takes an array of drafts");
  if (drafts.length > MAX_CALL_DRAFTS) throw new Error(`ledger: at most ${MAX_CALL_DRAFTS} drafts per append`);
  const out: MeteredDraft[] = [];
  const bodies: string[] = [];
  for (const [i, d] of drafts.entries()) {
    if (!isObject(d)) throw new Error(`ledger: draft ${i} is not an object`);
    if (typeof d.kind !== "string" || d.kind === "") throw new Error(`ledger: draft ${i} has no kind`);
    if (typeof d.id !== "string" || d.id === "" || d.id.length > 256) throw new Error(`ledger: draft ${i} needs an id of 1-256 characters`);
    if (typeof d.at !== "string" || d.at === "") throw new Error(`ledger: draft ${i} has no time (at)`);
    if (!isObject(d.body)) throw new Error(`ledger: draft ${i} has no body object`);
    let text: string;
    try {
      // A lone surrogate has no canonical form (the body's strings are checked by canonicalJson).
      if (LONE_SURROGATE.test(d.kind) || LONE_SURROGATE.test(d.id) || LONE_SURROGATE.test(d.at)) throw new Error("a lone surrogate has no canonical JSON form");
      text = canonicalJson(d.body);
    } catch (err) {
      throw new Error(`ledger: draft ${i} (${d.kind} ${d.id}) cannot be canonicalised: ${message(err)}`);
    }
    if (text.length > MAX_BODY_CHARS)
      throw new Error(`ledger: draft ${i} (${d.kind} ${d.id}) has a body of ${text.length} characters; at most ${MAX_BODY_CHARS} are kept`);
    // The body as stored and hashed is `text`; the object handed back is the caller's (an RPC copy).
    // Rollup facts ride beside the draft (src/ledger/metrics.ts): checked, never chained or stored in the entry.
    const metrics = draftMetricsOf(d.metrics);
    out.push({ kind: d.kind as EntryKind, id: d.id, at: d.at, body: d.body as JsonObject, ...(metrics ? { metrics } : {}) });
    bodies.push(text);
  }
  return { drafts: out, bodies, signing: { secret: signing.secret, gateway: signing.gateway } };
}

/** The chain name an object of the names module carries (`chain:<name>`), or null. */
export function chainOfObjectName(name: string | undefined): string | null {
  return name?.startsWith("chain:") && name.length > "chain:".length ? name.slice("chain:".length) : null;
}

/** Waits for `p` at most `ms` (never rejects). */
export async function settle(p: Promise<unknown> | null, ms = SETTLE_MS): Promise<void> {
  if (!p) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    p.catch(() => undefined),
    new Promise<void>((r) => {
      timer = setTimeout(r, ms);
    }),
  ]);
  if (timer !== undefined) clearTimeout(timer);
}
