/**
 * The isolate's revocation cache (src/identity/revocation-cache.ts) in workerd: on a controllable
 * clock, "not revoked" is served for at most 1 s counted from when its read started, "revoked" is
 * kept and wins over an older or overlapping "not revoked", failures and timeouts answer null and
 * are not kept, concurrent cold reads each read for themselves (nothing in flight shared), the
 * bound on entries holds; and through the real RevocationsDO, a revocation stored by another
 * isolate is seen within the bound, one noted here at once, and an unreachable list answers null.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { revocationObject } from "../../durable-objects/object-names.ts";
import type { Env } from "../../src/env.ts";
import { isRevokedCached, noteRevoked, REVOCATION_MAX_AGE_MS, revocationCache } from "../../src/identity/revocation-cache.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A revocation list in memory that counts its reads. */
function fakeList() {
  const revoked = new Set<string>();
  const list = {
    reads: 0,
    revoked,
    load: async (jti: string) => {
      list.reads++;
      return revoked.has(jti);
    },
  };
  return list;
}

describe("revocationCache", () => {
  it("serves 'not revoked' for less than 1 s from when its read started, then reads again", async () => {
    const list = fakeList();
    let t = 10_000;
    const c = revocationCache(list.load, () => t);
    expect(await c.isRevoked("j1")).toBe(false);
    expect(list.reads).toBe(1);
    list.revoked.add("j1");
    t += REVOCATION_MAX_AGE_MS - 1;
    expect(await c.isRevoked("j1")).toBe(false); // stale within the bound
    expect(list.reads).toBe(1);
    t += 1;
    expect(await c.isRevoked("j1")).toBe(true); // the bound has passed: read again, revoked
    expect(list.reads).toBe(2);
  });

  it("keeps 'revoked' (a revocation is never undone) and reads nothing more for it", async () => {
    const list = fakeList();
    let t = 0;
    const c = revocationCache(list.load, () => t);
    list.revoked.add("gone");
    expect(await c.isRevoked("gone")).toBe(true);
    t += 60_000;
    list.revoked.delete("gone"); // the list dropped it (the grant expired): still refused here
    expect(await c.isRevoked("gone")).toBe(true);
    expect(list.reads).toBe(1);
  });

  it("a clock that went backwards never extends a 'not revoked' answer", async () => {
    const list = fakeList();
    let t = 5000;
    const c = revocationCache(list.load, () => t);
    await c.isRevoked("j");
    t = 4000;
    list.revoked.add("j");
    expect(await c.isRevoked("j")).toBe(true);
    expect(list.reads).toBe(2);
  });

  it("a failed, malformed or slow read answers null and is not kept", async () => {
    let mode: "throw" | "malformed" | "hang" | "ok" = "throw";
    let reads = 0;
    const c = revocationCache(
      (_jti) => {
        reads++;
        if (mode === "throw") return Promise.reject(new Error("object down"));
        if (mode === "malformed") return Promise.resolve("yes" as unknown as boolean);
        if (mode === "hang") return new Promise<boolean>(() => undefined);
        return Promise.resolve(false);
      },
      Date.now,
      REVOCATION_MAX_AGE_MS,
      100,
      50,
    );
    expect(await c.isRevoked("j")).toBeNull();
    mode = "malformed";
    expect(await c.isRevoked("j")).toBeNull();
    mode = "hang";
    const started = Date.now();
    expect(await c.isRevoked("j")).toBeNull();
    expect(Date.now() - started).toBeLessThan(2000);
    expect(c.size()).toBe(0);
    mode = "ok";
    expect(await c.isRevoked("j")).toBe(false);
    expect(reads).toBe(4); // every failure went back to the list
  });

  it("a 'not revoked' that lands after a 'revoked' from a later read does not undo it", async () => {
    const gates: ((v: boolean) => void)[] = [];
    const c = revocationCache((_jti) => new Promise<boolean>((resolve) => gates.push(resolve)));
    const older = c.isRevoked("j"); // its read started first (the list said "not revoked")
    const newer = c.isRevoked("j"); // cold too: reads for itself, nothing in flight shared
    expect(gates.length).toBe(2);
    gates[1]!(true);
    expect(await newer).toBe(true);
    gates[0]!(false);
    expect(await older).toBe(true); // the cache knew better by the time it landed
    expect(await c.isRevoked("j")).toBe(true);
    expect(gates.length).toBe(2);
  });

  it("noteRevoked answers true at once; the number of answers kept is bounded", async () => {
    const list = fakeList();
    const c = revocationCache(list.load, Date.now, REVOCATION_MAX_AGE_MS, 3);
    expect(await c.isRevoked("a")).toBe(false);
    c.noteRevoked("a");
    expect(await c.isRevoked("a")).toBe(true);
    for (const j of ["b", "c", "d", "e"]) await c.isRevoked(j);
    expect(c.size()).toBe(3);
  });
});

describe("isRevokedCached (the isolate's cache over RevocationsDO)", () => {
  it("sees a revocation stored elsewhere within 1 s, and one noted here at once", async () => {
    const jti = `rc-${crypto.randomUUID()}`;
    const exp = Math.floor(Date.now() / 1000) + 600;
    expect(await isRevokedCached(env as unknown as Env, jti)).toBe(false);
    // Stored straight in the object, as another isolate would: this isolate may serve "not revoked" ≤ 1 s more.
    await revocationObject(env as unknown as Env, jti).revoke(jti, exp, "human:test");
    const start = Date.now();
    let seen = false;
    for (let i = 0; i < 40 && !seen; i++) {
      seen = (await isRevokedCached(env as unknown as Env, jti)) === true;
      if (!seen) await sleep(50);
    }
    expect(seen).toBe(true);
    expect(Date.now() - start).toBeLessThan(REVOCATION_MAX_AGE_MS + 500);

    const other = `rc-${crypto.randomUUID()}`;
    expect(await isRevokedCached(env as unknown as Env, other)).toBe(false);
    await revocationObject(env as unknown as Env, other).revoke(other, exp, "human:test");
    noteRevoked(other);
    expect(await isRevokedCached(env as unknown as Env, other)).toBe(true);
  });

  it("an unreachable revocation list answers null (refused), never false", async () => {
    const broken = {
      ...env,
      REVOCATIONS: { idFromName: () => ({}), get: () => ({ isRevoked: async () => Promise.reject(new Error("object down")) }) },
    } as unknown as Env;
    const jti = `rc-${crypto.randomUUID()}`;
    expect(await isRevokedCached(broken, jti)).toBeNull();
    // Nothing was kept: the real list answers the next read.
    expect(await isRevokedCached(env as unknown as Env, jti)).toBe(false);
  });
});
