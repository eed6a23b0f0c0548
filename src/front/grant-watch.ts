/**
 * Grant watch: an AbortSignal that ends a long-lived stream (the legacy GET stream, its replay,
 * a 2026-07-28 `subscriptions/listen`) together with the grant that opened it — at the grant's
 * expiry (`principal.exp`), or within about POLL_MS of its revocation reaching the revocation list
 * (polled for `principal.jti` while the stream is open), or as soon as that list cannot be read
 * (fail closed). A request is authenticated once, when it arrives; a stream outlives that moment,
 * so without this a revoked or expired grant would go on receiving notifications.
 * Owns only the timing and the polling. Must never: leave a timer or a poll running after the
 * watch stopped (the stream ended, or `until` aborted), keep a stream open when the revocation
 * list does not answer, or watch anything for the unauthenticated loopback actor (no jti, no exp).
 */
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { revocationObject } from "../../durable-objects/object-names.ts";
import type { RevocationsApi } from "../../durable-objects/contract.ts";

/** How often an open stream re-reads the revocation list. */
export const POLL_MS = 500;
/** A revocation read slower than this counts as unreadable (the stream ends). */
export const READ_TIMEOUT_MS = 5000;
/** setTimeout's largest delay; a farther expiry is reached in steps. */
const MAX_DELAY_MS = 2 ** 31 - 1;

export type GrantEndReason = "expired" | "revoked" | "unreadable";

/** The abort reason of a watch's signal. */
export class GrantEnded extends Error {
  readonly reason: GrantEndReason;
  constructor(reason: GrantEndReason) {
    super(
      reason === "expired"
        ? "the grant expired"
        : reason === "revoked"
          ? "the grant was revoked"
          : "the revocation list could not be read; the stream ended to fail closed",
    );
    this.name = "GrantEnded";
    this.reason = reason;
  }
}

export interface GrantWatch {
  /** Aborts (reason: GrantEnded) when the grant expires, is revoked, or its revocation cannot be read. */
  readonly signal: AbortSignal;
  /** Ends the watch: its timers and polls stop; the signal no longer aborts. Idempotent. */
  stop(): void;
}

export interface GrantWatchOptions {
  /** The revocation list (true: revoked); a throw or a read slower than `readTimeoutMs` ends the grant. */
  isRevoked(jti: string): Promise<boolean>;
  /** The watch stops by itself when this aborts (the stream ended). */
  until?: AbortSignal;
  pollMs?: number;
  readTimeoutMs?: number;
  /** Milliseconds since the epoch (a seam for tests). */
  now?: () => number;
}

/** Watches one principal's grant: its `exp` (seconds since the epoch) and, with a `jti`, its revocation. */
export function watchGrant(principal: Pick<Principal, "jti" | "exp">, opts: GrantWatchOptions): GrantWatch {
  const ctl = new AbortController();
  const now = opts.now ?? Date.now;
  const pollMs = opts.pollMs ?? POLL_MS;
  const readTimeoutMs = opts.readTimeoutMs ?? READ_TIMEOUT_MS;
  let stopped = false;
  let expiry: ReturnType<typeof setTimeout> | undefined;
  let poll: ReturnType<typeof setTimeout> | undefined;
  let readDeadline: ReturnType<typeof setTimeout> | undefined;
  const clear = () => {
    for (const t of [expiry, poll, readDeadline]) if (t !== undefined) clearTimeout(t);
    expiry = poll = readDeadline = undefined;
  };
  const stop = () => {
    if (stopped) return;
    stopped = true;
    clear();
    opts.until?.removeEventListener("abort", stop);
  };
  const end = (reason: GrantEndReason) => {
    if (stopped) return;
    stop();
    ctl.abort(new GrantEnded(reason));
  };
  if (opts.until?.aborted) {
    stop();
    return { signal: ctl.signal, stop };
  }
  opts.until?.addEventListener("abort", stop, { once: true });

  if (typeof principal.exp === "number" && Number.isFinite(principal.exp)) {
    const at = principal.exp * 1000;
    const arm = () => {
      if (stopped) return;
      const left = at - now();
      if (left <= 0) return end("expired");
      expiry = setTimeout(arm, Math.min(left, MAX_DELAY_MS));
    };
    arm();
  }

  const jti = principal.jti;
  if (jti !== undefined && !stopped) {
    const check = async () => {
      poll = undefined;
      if (stopped) return;
      let revoked: boolean;
      try {
        revoked = await new Promise<boolean>((resolve, reject) => {
          readDeadline = setTimeout(() => reject(new Error("revocation read timed out")), readTimeoutMs);
          opts.isRevoked(jti).then(resolve, reject);
        });
      } catch {
        return end("unreadable");
      } finally {
        if (readDeadline !== undefined) clearTimeout(readDeadline);
        readDeadline = undefined;
      }
      if (stopped) return;
      if (revoked !== false) return end("revoked");
      poll = setTimeout(check, pollMs);
    };
    // The request was checked when it arrived; the first look is one interval later.
    poll = setTimeout(check, pollMs);
  }
  return { signal: ctl.signal, stop };
}

/** watchGrant against this gateway's revocation list (RevocationsDO, sharded by jti). */
export function grantWatch(env: Env, principal: Principal, until?: AbortSignal): GrantWatch {
  let shard: RevocationsApi | undefined; // the revocation shard of this jti, addressed once per watch
  const opts: GrantWatchOptions = {
    isRevoked: async (jti) => {
      shard ??= revocationObject(env, jti);
      return shard.isRevoked(jti);
    },
  };
  if (until) opts.until = until;
  return watchGrant(principal, opts);
}

/**
 * Ends `stream` when the grant ends: aborts it (reason GrantEnded), and stops watching once it
 * has aborted for any reason (client gone, upstreams done). The stream's owner closes what it fans in.
 */
export function endWithGrant(env: Env, principal: Principal, stream: AbortController): GrantWatch {
  const watch = grantWatch(env, principal, stream.signal);
  if (watch.signal.aborted) stream.abort(watch.signal.reason);
  else watch.signal.addEventListener("abort", () => stream.abort(watch.signal.reason), { once: true });
  return watch;
}
