/**
 * The one bounded map of the per-isolate memos (src/wire/memo.ts): never more than `max`
 * entries, the oldest first out — oldest by last write, or by last use with `lru`; a lifetime
 * (the map's, or one entry's own, counted from the entry's `at`) after which it reads as absent
 * and is dropped; the clock injected. Also: under any sequence of writes and reads it agrees with
 * a plain model of the rule and never exceeds its bound.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Memo } from "../../src/wire/memo.ts";

describe("the bound", () => {
  it("keeps at most max entries; a new key drops the oldest written", () => {
    const m = new Memo<string, number>({ max: 3 });
    for (const [i, k] of ["a", "b", "c", "d"].entries()) m.set(k, i);
    expect(m.size).toBe(3);
    expect(m.keys()).toEqual(["b", "c", "d"]);
    expect(m.get("a")).toBeUndefined();
  });

  it("rewriting a key refreshes it (newest) and drops nothing", () => {
    const m = new Memo<string, number>({ max: 3 });
    m.set("a", 1).set("b", 2).set("c", 3).set("a", 10);
    expect(m.keys()).toEqual(["b", "c", "a"]);
    m.set("d", 4);
    expect(m.keys()).toEqual(["c", "a", "d"]);
    expect(m.get("a")).toBe(10);
  });

  it("reads do not refresh by default; with lru they do", () => {
    const fifo = new Memo<string, number>({ max: 2 });
    fifo.set("a", 1).set("b", 2);
    fifo.get("a");
    fifo.set("c", 3);
    expect(fifo.keys()).toEqual(["b", "c"]);
    const lru = new Memo<string, number>({ max: 2, lru: true });
    lru.set("a", 1).set("b", 2);
    expect(lru.get("a")).toBe(1);
    lru.set("c", 3);
    expect(lru.keys()).toEqual(["a", "c"]);
  });

  it("one entry at least; delete and clear", () => {
    expect(() => new Memo({ max: 0 })).toThrow(RangeError);
    const one = new Memo<string, string>({ max: 1 });
    one.set("s1", "k1").set("s2", "k2");
    expect(one.keys()).toEqual(["s2"]);
    expect(one.delete("s2")).toBe(true);
    expect(one.delete("s2")).toBe(false);
    one.set("x", "y");
    one.clear();
    expect(one.size).toBe(0);
  });
});

describe("lifetimes, on an injected clock", () => {
  it("an entry is served for ttlMs from when it was set, then reads as absent and is dropped", () => {
    let t = 1000;
    const m = new Memo<string, string>({ max: 10, ttlMs: 100, now: () => t });
    m.set("k", "v");
    t = 1099;
    expect(m.get("k")).toBe("v");
    expect(m.has("k")).toBe(true);
    t = 1100;
    expect(m.has("k")).toBe(false);
    expect(m.get("k")).toBeUndefined();
    expect(m.size).toBe(0);
  });

  it("an entry's age can start earlier (at), and an entry can have a lifetime of its own or none", () => {
    let t = 5000;
    const m = new Memo<string, string>({ max: 10, ttlMs: 100, now: () => t });
    m.set("started-earlier", "v", { at: 4950 });
    m.set("forever", "v", { ttlMs: null });
    m.set("short", "v", { ttlMs: 10 });
    t = 5010;
    expect(m.get("short")).toBeUndefined();
    expect(m.get("started-earlier")).toBe("v");
    t = 5050;
    expect(m.get("started-earlier")).toBeUndefined();
    t = 10 ** 9;
    expect(m.get("forever")).toBe("v");
    // Without a map lifetime an entry lives until evicted, unless it brings its own.
    const plain = new Memo<string, string>({ max: 10, now: () => t });
    plain.set("a", "v").set("b", "v", { ttlMs: 60_000 });
    t += 60_000;
    expect([plain.get("a"), plain.get("b")]).toEqual(["v", undefined]);
  });

  it("a rewrite restarts the lifetime; an expired entry still counts until read or evicted", () => {
    let t = 0;
    const m = new Memo<string, number>({ max: 2, ttlMs: 100, now: () => t });
    m.set("a", 1);
    t = 90;
    m.set("a", 2);
    t = 150;
    expect(m.get("a")).toBe(2);
    m.set("b", 3);
    t = 300;
    expect(m.size).toBe(2);
    m.set("c", 4);
    expect(m.keys()).toEqual(["b", "c"]);
  });
});

describe("against a model", () => {
  it("any sequence of writes and reads: the same answers as the rule, never over the bound", () => {
    type Op = { op: "set"; k: number; v: number } | { op: "get"; k: number } | { op: "delete"; k: number };
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({ op: fc.constant("set" as const), k: fc.nat({ max: 7 }), v: fc.nat() }),
      fc.record({ op: fc.constant("get" as const), k: fc.nat({ max: 7 }) }),
      fc.record({ op: fc.constant("delete" as const), k: fc.nat({ max: 7 }) }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 5 }), fc.boolean(), fc.array(op, { maxLength: 60 }), (max, lru, ops) => {
        const m = new Memo<number, number>({ max, lru });
        // The model: an array of [key, value], oldest first.
        let model: [number, number][] = [];
        for (const o of ops) {
          const i = model.findIndex(([k]) => k === o.k);
          if (o.op === "set") {
            if (i >= 0) model.splice(i, 1);
            while (model.length >= max) model.shift();
            model.push([o.k, o.v]);
            m.set(o.k, o.v);
          } else if (o.op === "get") {
            const want = i >= 0 ? model[i]![1] : undefined;
            if (lru && i >= 0) model.push(model.splice(i, 1)[0]!);
            expect(m.get(o.k)).toBe(want);
          } else {
            expect(m.delete(o.k)).toBe(i >= 0);
            if (i >= 0) model = model.filter(([k]) => k !== o.k);
          }
          expect(m.size).toBeLessThanOrEqual(max);
          expect(m.keys()).toEqual(model.map(([k]) => k));
        }
      }),
      { numRuns: 300 },
    );
  });
});
