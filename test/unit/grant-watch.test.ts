/**
 * The grant watch (src/front/grant-watch.ts) with a fake revocation list and short intervals: it
 * aborts on revocation within one poll, at expiry, and — failing closed — when the list throws or
 * does not answer in time; it never aborts for the unauthenticated actor; and once stopped (by
 * stop() or by `until`) it reads the list no more and never aborts. Real timers, bounded waits.
 */
import { describe, expect, it } from "vitest";
import { GrantEnded, watchGrant } from "../../src/front/grant-watch.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A revocation list whose answer the test sets; counts its reads. */
function list(answer: () => Promise<boolean> = async () => false) {
  const l = {
    reads: 0,
    answer,
    isRevoked: async (_jti: string) => {
      l.reads++;
      return l.answer();
    },
  };
  return l;
}

/** Resolves with the time (ms since `t0`) the signal aborted, or null if not within `ms`. */
function abortedWithin(signal: AbortSignal, ms: number, t0 = Date.now()): Promise<number | null> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(Date.now() - t0);
    const t = setTimeout(() => resolve(null), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(Date.now() - t0);
    });
  });
}

const reasonOf = (s: AbortSignal) => (s.reason instanceof GrantEnded ? s.reason.reason : s.reason);

describe("watchGrant", () => {
  it("aborts within one poll of the revocation, and reads the list no more", async () => {
    const l = list();
    const w = watchGrant({ jti: "j-1", exp: Date.now() / 1000 + 3600 }, { isRevoked: l.isRevoked, pollMs: 30 });
    await sleep(100);
    expect(w.signal.aborted).toBe(false);
    expect(l.reads).toBeGreaterThanOrEqual(2);
    const t0 = Date.now();
    l.answer = async () => true;
    const at = await abortedWithin(w.signal, 1000, t0);
    expect(at).not.toBeNull();
    expect(at!).toBeLessThan(200);
    expect(reasonOf(w.signal)).toBe("revoked");
    const reads = l.reads;
    await sleep(120);
    expect(l.reads).toBe(reads);
  });

  it("aborts at the grant's expiry", async () => {
    const t0 = Date.now();
    const w = watchGrant({ jti: "j-2", exp: (t0 + 250) / 1000 }, { isRevoked: list().isRevoked, pollMs: 40 });
    expect(w.signal.aborted).toBe(false);
    const at = await abortedWithin(w.signal, 2000, t0);
    expect(at).not.toBeNull();
    expect(at!).toBeGreaterThanOrEqual(240);
    expect(at!).toBeLessThan(600);
    expect(reasonOf(w.signal)).toBe("expired");
  });

  it("is already aborted for a grant that expired before the watch began", () => {
    const w = watchGrant({ jti: "j-3", exp: Date.now() / 1000 - 1 }, { isRevoked: list().isRevoked });
    expect(w.signal.aborted).toBe(true);
    expect(reasonOf(w.signal)).toBe("expired");
  });

  it("fails closed when the revocation list throws", async () => {
    const l = list(async () => {
      throw new Error("store down");
    });
    const w = watchGrant({ jti: "j-4" }, { isRevoked: l.isRevoked, pollMs: 20 });
    expect(await abortedWithin(w.signal, 1000)).not.toBeNull();
    expect(reasonOf(w.signal)).toBe("unreadable");
  });

  it("fails closed when the revocation list does not answer in time", async () => {
    const l = list(() => new Promise<boolean>(() => undefined));
    const w = watchGrant({ jti: "j-5" }, { isRevoked: l.isRevoked, pollMs: 20, readTimeoutMs: 60 });
    const at = await abortedWithin(w.signal, 1000);
    expect(at).not.toBeNull();
    expect(at!).toBeGreaterThanOrEqual(70);
    expect(reasonOf(w.signal)).toBe("unreadable");
    expect(l.reads).toBe(1);
  });

  it("never aborts, and never reads the list, for the unauthenticated actor (no jti, no exp)", async () => {
    const l = list(async () => true);
    const w = watchGrant({}, { isRevoked: l.isRevoked, pollMs: 10 });
    await sleep(80);
    expect(w.signal.aborted).toBe(false);
    expect(l.reads).toBe(0);
    w.stop();
  });

  it("after stop() reads the list no more and never aborts, not even past the expiry", async () => {
    const l = list();
    const w = watchGrant({ jti: "j-6", exp: (Date.now() + 120) / 1000 }, { isRevoked: l.isRevoked, pollMs: 20 });
    await sleep(50);
    w.stop();
    w.stop();
    const reads = l.reads;
    l.answer = async () => true;
    await sleep(200);
    expect(l.reads).toBe(reads);
    expect(w.signal.aborted).toBe(false);
  });

  it("stops by itself when `until` aborts (the stream ended), and never starts for an ended stream", async () => {
    const l = list();
    const stream = new AbortController();
    const w = watchGrant({ jti: "j-7", exp: (Date.now() + 150) / 1000 }, { isRevoked: l.isRevoked, pollMs: 20, until: stream.signal });
    await sleep(50);
    stream.abort();
    const reads = l.reads;
    await sleep(200);
    expect(l.reads).toBe(reads);
    expect(w.signal.aborted).toBe(false);

    const gone = new AbortController();
    gone.abort();
    const l2 = list(async () => true);
    const w2 = watchGrant({ jti: "j-8", exp: Date.now() / 1000 + 60 }, { isRevoked: l2.isRevoked, pollMs: 10, until: gone.signal });
    await sleep(60);
    expect(l2.reads).toBe(0);
    expect(w2.signal.aborted).toBe(false);
  });

  it("a revocation answer that arrives after stop() is ignored", async () => {
    let release: (v: boolean) => void = () => undefined;
    const l = list(() => new Promise<boolean>((r) => (release = r)));
    const w = watchGrant({ jti: "j-9" }, { isRevoked: l.isRevoked, pollMs: 10 });
    await sleep(40);
    expect(l.reads).toBe(1);
    w.stop();
    release(true);
    await sleep(30);
    expect(w.signal.aborted).toBe(false);
  });
});
