/**
 * The Worker's group commit (src/ports/ledger-batch.ts) against a fake LedgerDO: a lone append is
 * sent at once; appends that arrive while RPCs are out ride together in the next one; each caller
 * gets its own entries, or its own refusal when the object refuses its call alone; an RPC that
 * throws refuses exactly its callers; one that hangs refuses its callers at the bound and the
 * queue moves on; queues of two chains, or of two Envs, never mix.
 */
import { describe, expect, it, vi } from "vitest";
import type { AppendOutcome, LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { Env } from "../../src/env.ts";
import { chainEntries, EMPTY_HEAD, type Head } from "../../src/ledger/chain.ts";
import type { EntryDraft } from "../../src/ledger/records.ts";
import { batchedAppend } from "../../src/ports/ledger-batch.ts";

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" };
const draft = (id: string): EntryDraft => ({ kind: "decision", id, at: new Date().toISOString(), body: { id } });

type Behaviour = "ok" | "throw" | "hang";

/** One fake chain per object name; every appendEach is logged (object, size) and answered after a tick. */
function fakeEnv(behaviour: (rpc: number) => Behaviour = () => "ok", refuse: (d: EntryDraft) => boolean = () => false) {
  const heads = new Map<string, Head>();
  const rpcs: { chain: string; calls: string[][] }[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const env = {
    LEDGER: {
      idFromName: (n: string) => n,
      get: (name: string) => ({
        async appendEach(calls: EntryDraft[][]): Promise<AppendOutcome[]> {
          const n = rpcs.push({ chain: name, calls: calls.map((c) => c.map((d) => d.id)) });
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          try {
            await new Promise((r) => setTimeout(r, 1));
            const b = behaviour(n);
            if (b === "throw") throw new Error("object reset");
            if (b === "hang") await new Promise(() => undefined);
            return calls.map((c) => {
              if (c.some(refuse)) return { error: "ledger: draft 0 cannot be canonicalised" };
              const chained = chainEntries(name.slice("chain:".length), heads.get(name) ?? EMPTY_HEAD, c);
              heads.set(name, { seq: chained.at(-1)!.seq, hash: chained.at(-1)!.hash });
              return { entries: chained };
            });
          } finally {
            inFlight--;
          }
        },
      }),
    },
  } as unknown as Env;
  return { env, rpcs, maxInFlight: () => maxInFlight };
}

describe("the Worker's group commit for ledger appends", () => {
  it("a lone append goes out at once, alone", async () => {
    const f = fakeEnv();
    const [e] = await batchedAppend(f.env, "team-a", SIGNING, [draft("x")], 1000);
    expect(e).toMatchObject({ id: "x", seq: 1, chain: "team-a" });
    expect(f.rpcs).toEqual([{ chain: "chain:team-a", calls: [["x"]] }]);
  });

  it("200 concurrent appends: few RPCs, at most two in flight, every caller its own entry, seq contiguous", async () => {
    const f = fakeEnv();
    const ids = Array.from({ length: 200 }, (_, i) => `d-${i}`);
    const out = await Promise.all(ids.map((id) => batchedAppend(f.env, "team-a", SIGNING, [draft(id)], 1000)));
    for (const [i, entries] of out.entries()) expect(entries.map((e) => e.id)).toEqual([ids[i]]);
    expect(out.map((e) => e[0]!.seq).sort((a, b) => a - b)).toEqual(ids.map((_, i) => i + 1));
    expect(f.rpcs.length).toBeLessThanOrEqual(5);
    expect(f.maxInFlight()).toBe(2);
    expect(f.rpcs.flatMap((r) => r.calls.flat()).sort()).toEqual([...ids].sort());
  });

  it("a call the object refuses is refused alone; the others in its RPC are stored", async () => {
    const f = fakeEnv(
      () => "ok",
      (d) => d.id === "bad",
    );
    const settled = await Promise.allSettled(["a", "b", "bad", "c"].map((id) => batchedAppend(f.env, "team-a", SIGNING, [draft(id)], 1000)));
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    expect(String((settled[2] as PromiseRejectedResult).reason)).toMatch(/cannot be canonicalised/);
  });

  it("an RPC that throws refuses its callers only; the RPCs before and after it are served", async () => {
    const f = fakeEnv((n) => (n === 2 ? "throw" : "ok"));
    const alone = batchedAppend(f.env, "team-a", SIGNING, [draft("alone")], 1000);
    await new Promise((r) => setTimeout(r, 0)); // its RPC is out
    const wave = Array.from({ length: 10 }, (_, i) => batchedAppend(f.env, "team-a", SIGNING, [draft(`t-${i}`)], 1000));
    const settled = await Promise.allSettled([alone, ...wave]);
    expect(f.rpcs[0]!.calls).toEqual([["alone"]]);
    const refused = new Set(f.rpcs[1]!.calls.flat());
    expect(refused.size).toBeGreaterThan(0);
    expect(settled[0]!.status).toBe("fulfilled");
    for (const [i, s] of settled.slice(1).entries()) expect(s.status).toBe(refused.has(`t-${i}`) ? "rejected" : "fulfilled");
    for (const s of settled.filter((x) => x.status === "rejected")) expect(String((s as PromiseRejectedResult).reason)).toMatch(/object reset/);
    expect((await batchedAppend(f.env, "team-a", SIGNING, [draft("after")], 1000))[0]!.id).toBe("after");
  });

  it("an RPC that hangs refuses its callers at the bound, and the queue moves on", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const f = fakeEnv((n) => (n === 1 ? "hang" : "ok"));
      const first = batchedAppend(f.env, "team-a", SIGNING, [draft("h")], 500).then(
        () => "stored",
        (e: Error) => e.message,
      );
      await vi.advanceTimersByTimeAsync(0); // its RPC is out (and will never answer)
      const rest = Array.from({ length: 3 }, (_, i) => batchedAppend(f.env, "team-a", SIGNING, [draft(`r-${i}`)], 500));
      await vi.advanceTimersByTimeAsync(600);
      expect(await first).toMatch(/did not answer within 500 ms/);
      const after = batchedAppend(f.env, "team-a", SIGNING, [draft("later")], 500);
      await vi.advanceTimersByTimeAsync(10);
      expect((await Promise.all(rest)).map((e) => e[0]!.id)).toEqual(["r-0", "r-1", "r-2"]);
      expect((await after)[0]!.id).toBe("later");
    } finally {
      vi.useRealTimers();
    }
  });

  it("two chains and two Envs keep separate queues: no RPC carries another chain's append", async () => {
    const f = fakeEnv();
    const g = fakeEnv();
    await Promise.all([
      ...Array.from({ length: 20 }, (_, i) => batchedAppend(f.env, "team-a", SIGNING, [draft(`a-${i}`)], 1000)),
      ...Array.from({ length: 20 }, (_, i) => batchedAppend(f.env, "team-b", SIGNING, [draft(`b-${i}`)], 1000)),
      ...Array.from({ length: 20 }, (_, i) => batchedAppend(g.env, "team-a", SIGNING, [draft(`g-${i}`)], 1000)),
    ]);
    for (const r of f.rpcs) expect(r.calls.flat().every((id) => id.startsWith(r.chain === "chain:team-a" ? "a-" : "b-"))).toBe(true);
    expect(g.rpcs.flatMap((r) => r.calls.flat()).every((id) => id.startsWith("g-"))).toBe(true);
  });

  it("a team that is no chain name is refused without an RPC", async () => {
    const f = fakeEnv();
    await expect(batchedAppend(f.env, "no spaces allowed", SIGNING, [draft("x")], 1000)).rejects.toThrow(/not a valid ledger chain name/);
    expect(f.rpcs).toHaveLength(0);
  });
});
