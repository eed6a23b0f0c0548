/**
 * The isolate's revocation cache: `isRevokedCached(env, jti)` answers what auth.ts `isRevoked`
 * answers — true (revoked), false (not revoked), null when the revocation list cannot answer, so
 * the caller refuses (fail closed) — while sparing most requests the RevocationsDO round trip.
 * A "not revoked" answer is served for at most REVOCATION_MAX_AGE_MS (1 s, the staleness the
 * design allows for revocations), counted from when the read that produced it started, so a
 * revocation committed before a read began is seen by every isolate once that second has passed.
 * A "revoked" answer is kept (bounded): a revocation is never undone (RevocationsDO has no
 * unrevoke; its entries are dropped only once the grant expired and can no longer be presented),
 * and a read that saw it revoked always wins over one that saw it not revoked. A failed or slow
 * read (REVOCATION_READ_TIMEOUT_MS) answers null and is not kept. No read in flight is shared
 * between requests — Workers never settles for one request a promise whose request has ended —
 * so a request that finds nothing fresh reads for itself; only settled answers are kept.
 * `noteRevoked(jti)` lets the isolate that served a revocation see it at once.
 * Must never: answer false for a jti it could not read within the last second, answer false after
 * any read saw it revoked, turn a failure into false, or hold more than MAX_ENTRIES answers.
 */
import { revocationObject } from "../../durable-objects/object-names.ts";
import type { Env } from "../env.ts";
import { bounded } from "../wire/bounded.ts";
import { Memo } from "../wire/memo.ts";

/** Longest an isolate serves a "not revoked" answer (ms). */
export const REVOCATION_MAX_AGE_MS = 1000;
/** A revocation list that does not answer within this bound cannot answer (null: refused). */
export const REVOCATION_READ_TIMEOUT_MS = 5000;
/** Answers kept per isolate; the oldest goes first. */
const MAX_ENTRIES = 10_000;

type Answer = { revoked: true } | { revoked: false; startedAt: number };

export interface RevocationCache {
  /** true / false, or null when `load` failed or did not answer in time. */
  isRevoked(jti: string): Promise<boolean | null>;
  /** This isolate served a revocation of `jti`: it is revoked from now on. */
  noteRevoked(jti: string): void;
  /** How many answers are kept (tests check the bound). */
  size(): number;
}

/**
 * A cache over `load` (the revocation list's own answer for one jti). `now` is the clock and
 * `maxAgeMs` the bound on a "not revoked" answer (tests drive both).
 */
export function revocationCache(
  load: (jti: string) => Promise<boolean>,
  now: () => number = Date.now,
  maxAgeMs = REVOCATION_MAX_AGE_MS,
  maxEntries = MAX_ENTRIES,
  readTimeoutMs = REVOCATION_READ_TIMEOUT_MS,
): RevocationCache {
  // The newest answer is the newest entry; past maxEntries the oldest goes first.
  const answers = new Memo<string, Answer>({ max: maxEntries });
  const keep = (jti: string, a: Answer) => answers.set(jti, a);
  return {
    async isRevoked(jti) {
      const t = now();
      const hit = answers.get(jti);
      if (hit?.revoked) return true;
      if (hit && t - hit.startedAt < maxAgeMs && t >= hit.startedAt) return false;
      const startedAt = t;
      let revoked: boolean;
      try {
        revoked = await bounded(load(jti), readTimeoutMs, "the revocation list");
        if (typeof revoked !== "boolean") return null;
      } catch {
        return null;
      }
      const cur = answers.get(jti);
      if (revoked) keep(jti, { revoked: true });
      // Keep the newest read's "not revoked" only; never over a "revoked" another read found meanwhile.
      else if (!cur || (!cur.revoked && cur.startedAt <= startedAt)) keep(jti, { revoked: false, startedAt });
      else if (cur.revoked) return true;
      return revoked;
    },
    noteRevoked(jti) {
      keep(jti, { revoked: true });
    },
    size: () => answers.size,
  };
}

/** The isolate's one cache; each read goes through the env of the request that makes it. */
let isolateLoad: ((jti: string) => Promise<boolean>) | null = null;
const isolate = revocationCache((jti) => {
  if (!isolateLoad) return Promise.reject(new Error("no revocation list binding"));
  return isolateLoad(jti);
});

/** true / false, or null when the revocation list could not answer; "not revoked" is at most 1 s old. */
export function isRevokedCached(env: Env, jti: string): Promise<boolean | null> {
  isolateLoad = (j) => revocationObject(env, j).isRevoked(j);
  return isolate.isRevoked(jti);
}

/** The revocation of `jti` was just stored (by this isolate): every later check here answers true. */
export function noteRevoked(jti: string): void {
  isolate.noteRevoked(jti);
}
