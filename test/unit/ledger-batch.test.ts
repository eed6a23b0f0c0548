/**
 * Group commit on the caller's side (src/mcp/ledger-batch.ts) against a fake chain that counts
 * its RPCs: concurrent appends to one chain share calls (a lone one goes at once), each record
 * gets exactly its own entry back in order, a failed call rejects every record it carried and the
 * queue goes on, a large draft travels alone, and chains (or signing keys) never share a call.
 */
import { describe, expect, it } from "vitest";
import type { LedgerApi, LedgerSigning } from "../../durable-objects/records.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import { ALONE_BODY_CHARS, appendBatched, MAX_BATCH } from "../../src/mcp/ledger-batch.ts";

const signing: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" };
const d = (i: number, body: Record<string, unknown> = { i }): EntryDraft => ({
  kind: "decision",
  id: `d-${i}`,
  at: "2026-12-01T00:00:00.000Z",
  body: body as never,
});

function fakeChain(opts: { failCall?: number; delayMs?: number } = {}) {
  const calls: string[][] = [];
  let seq = 0;
  const api = {
    async append(drafts: EntryDraft[]): Promise<LedgerEntry[]> {
      calls.push(drafts.map((x) => x.id));
      await new Promise((r) => setTimeout(r, opts.delayMs ?? 1));
      if (opts.failCall === calls.length) throw new Error("injected failure");
      return drafts.map((x) => ({ ...x, v: 1, chain: "t", seq: ++seq, prev: "p", hash: `h${seq}` }));
    },
  } as unknown as LedgerApi;
  return { api, calls };
}

describe("appendBatched", () => {
  it("a lone append goes at once; 300 concurrent ones share a handful of calls and each gets its own entry, in order", async () => {
    const c = fakeChain();
    const one = await appendBatched("t1", c.api, d(0), signing);
    expect(one.id).toBe("d-0");
    expect(c.calls).toEqual([["d-0"]]);
    const got = await Promise.all(Array.from({ length: 300 }, (_, i) => appendBatched("t1", c.api, d(i + 1), signing)));
    expect(got.map((e) => e.id)).toEqual(Array.from({ length: 300 }, (_, i) => `d-${i + 1}`));
    const seqs = got.map((e) => e.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(c.calls.length).toBeLessThanOrEqual(1 + 1 + Math.ceil(299 / MAX_BATCH));
    expect(Math.max(...c.calls.map((x) => x.length))).toBeLessThanOrEqual(MAX_BATCH);
  });

  it("a failed call rejects every record it carried; the next call goes on", async () => {
    const c = fakeChain({ failCall: 2 });
    const first = appendBatched("t2", c.api, d(1), signing);
    const rest = Array.from({ length: 5 }, (_, i) => appendBatched("t2", c.api, d(i + 2), signing));
    await expect(first).resolves.toMatchObject({ id: "d-1" });
    for (const r of rest) await expect(r).rejects.toThrow("injected failure");
    await expect(appendBatched("t2", c.api, d(9), signing)).resolves.toMatchObject({ id: "d-9" });
  });

  it("a large draft travels alone; other chains and other signing keys never share a call", async () => {
    const c = fakeChain({ delayMs: 5 });
    const big = d(1, { blob: "x".repeat(ALONE_BODY_CHARS + 1) });
    await Promise.all([
      appendBatched("t3", c.api, d(0), signing),
      appendBatched("t3", c.api, big, signing),
      appendBatched("t3", c.api, d(2), signing),
      appendBatched("t4", c.api, d(3), signing),
      appendBatched("t3", c.api, d(4), { ...signing, gateway: "http://127.0.0.1:9" }),
    ]);
    expect(c.calls).toContainEqual(["d-1"]);
    for (const call of c.calls) {
      if (call.includes("d-3")) expect(call).toEqual(["d-3"]);
      if (call.includes("d-4")) expect(call).toEqual(["d-4"]);
    }
  });

  it("a record the chain does not return is not confirmed", async () => {
    const api = { append: async () => [] } as unknown as LedgerApi;
    await expect(appendBatched("t5", api, d(1), signing)).rejects.toThrow("did not confirm");
  });
});
