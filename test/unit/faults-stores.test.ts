/**
 * Object failures injected mid-run (issue 15, part 4): the governed call path (governToolCall)
 * over the gateway's real store wrappers — the isolate's cached kill-switch reader
 * (cachedKillSwitchReader), the ledger writer and its group commit (callLedger → batchedAppend),
 * the hold step (holdStore) — each over a fake object that works, then fails (throws, hangs,
 * answers garbage) for a window, then works again. Every call that starts while its object is
 * failing must be refused, readably and within the object's bound, and the recording upstream
 * must see none of them; the calls before and after run. Complements governed-call.test.ts (a
 * step that throws, with fake steps), ledger-writer.test.ts (each ledger append as throw, hang,
 * partial) and killswitch.test.ts (the reader's cache rules); gaps the gateway still has are
 * `it.fails` rows naming the function. Owns nothing of the gateway; never imported by src/.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { HoldClaim, HoldRecord, HoldsApi } from "../../durable-objects/contract-holds.ts";
import type { LedgerApi } from "../../durable-objects/contract-ledger.ts";
import type { KillSwitchSnapshot } from "../../durable-objects/contract-killswitch.ts";
import { loadConfig } from "../../src/config/load.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import { governToolCall } from "../../src/governance/call.ts";
import type { GovernanceDeps } from "../../src/governance/call-decide.ts";
import { catalogEntry } from "../../src/governance/catalog-entry.ts";
import { type HistoryStore, type LegResult, NO_HISTORY, NO_HOLDS, NO_LEDGER, NO_MAPPINGS, OPEN_POLICY, type ToolCall } from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import { chainEntries, EMPTY_HEAD, type Head } from "../../src/ledger/chain.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import type { CallContext, CallLedger } from "../../src/protocol/call-context.ts";
import { HISTORY_TIMEOUT_MS, historyStore } from "../../src/ports/history-store.ts";
import { HOLD_STORE_TIMEOUT_MS, holdStore } from "../../src/ports/hold-store.ts";
import { cachedKillSwitchReader, KILLSWITCH_MAX_AGE_MS, KILLSWITCH_READ_TIMEOUT_MS } from "../../src/ports/killswitch-client.ts";
import { batchedAppend } from "../../src/ports/ledger-batch.ts";
import { callLedger, LEDGER_WRITE_TIMEOUT_MS } from "../../src/ports/ledger-writer.ts";
import { testUpstream } from "./fixtures.ts";

const up = testUpstream();
const agent: Principal = { sub: "agent:f", team: "team-f", roles: ["agent"], tools: null, authenticated: true, jti: "j-f" };

/** How a fake object behaves right now. */
type Mode = "ok" | "throw" | "hang" | "garbage";

afterEach(() => {
  vi.useRealTimers();
});

function toolCall(i: number): ToolCall {
  const args = { i };
  return {
    principal: agent,
    era: i % 2 ? "legacy" : "modern",
    request: { jsonrpc: "2.0", id: i, method: "tools/call", params: { name: "alpha__do", arguments: args } },
    exposedName: "alpha__do",
    arguments: args,
    runId: "run-f",
  };
}

/** Deps with the stores given and a recording upstream: `reached` counts the calls that got there. */
function depsWith(over: Partial<GovernanceDeps>) {
  const seen = { reached: 0 };
  const deps: GovernanceDeps = {
    catalog: { resolve: async (name) => ({ upstream: up, tool: (await catalogEntry({ name: name.slice(7), inputSchema: {} }, name))! }) },
    killSwitch: NO_HALTS,
    mappings: NO_MAPPINGS,
    policy: OPEN_POLICY,
    holds: NO_HOLDS,
    ledger: NO_LEDGER,
    upstream: {
      call: async (): Promise<LegResult> => {
        seen.reached++;
        return { kind: "answered", response: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "RAN" }] } }, status: 200 };
      },
    },
    history: NO_HISTORY,
    clock: Date.now,
    ...over,
  };
  return { deps, seen };
}

const textOf = (a: Awaited<ReturnType<typeof governToolCall>>) => JSON.stringify(a.response);
const ran = (a: Awaited<ReturnType<typeof governToolCall>>) => textOf(a).includes("RAN");

/**
 * Runs `n` concurrent calls (fake timers: advancing `advanceMs` lets bounded waits fire) and
 * reports whether each settled within that time, and its answer.
 */
async function concurrent(deps: GovernanceDeps, n: number, from: number, advanceMs = 0) {
  const out: { settled: boolean; answer?: Awaited<ReturnType<typeof governToolCall>> }[] = Array.from({ length: n }, () => ({ settled: false }));
  const all = Array.from({ length: n }, (_, k) =>
    governToolCall(deps, toolCall(from + k)).then((a) => {
      out[k] = { settled: true, answer: a };
    }),
  );
  if (advanceMs > 0) await vi.advanceTimersByTimeAsync(advanceMs);
  else await Promise.all(all);
  return out;
}

describe("the kill switch object fails mid-run (through the isolate's ≤ 1 s cache)", () => {
  function killSwitch() {
    const state = { mode: "ok" as Mode, now: 1_000_000, loads: 0 };
    const load = async (): Promise<KillSwitchSnapshot> => {
      state.loads++;
      if (state.mode === "throw") throw new Error("KillSwitchDO: storage unavailable");
      if (state.mode === "hang") return new Promise<KillSwitchSnapshot>(() => undefined);
      if (state.mode === "garbage") return { halts: "none" } as unknown as KillSwitchSnapshot;
      return { version: 3, halts: [] };
    };
    return { state, reader: cachedKillSwitchReader(load, () => state.now) };
  }

  for (const mode of ["throw", "garbage", "hang"] as const) {
    it(`${mode}: every call that starts once the cached state is older than 1 s is refused; none reaches the upstream; after recovery calls run`, async () => {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      const ks = killSwitch();
      const { deps, seen } = depsWith({ killSwitch: ks.reader });
      const before = await concurrent(deps, 5, 0);
      expect(before.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(seen.reached).toBe(5);

      ks.state.mode = mode;
      ks.state.now += KILLSWITCH_MAX_AGE_MS; // the state read before the failure is no longer fresh
      const during = await concurrent(deps, 20, 100, KILLSWITCH_READ_TIMEOUT_MS + 50);
      for (const r of during) {
        expect(r.settled, "answered within the kill switch's read bound").toBe(true);
        expect(r.answer!.response.result?.isError).toBe(true);
        expect(textOf(r.answer!)).toContain("the kill_switch step could not answer");
        expect(textOf(r.answer!)).toContain("refused to fail closed");
      }
      if (mode === "hang") expect(textOf(during[0]!.answer!)).toContain(`the kill switch did not answer within ${KILLSWITCH_READ_TIMEOUT_MS} ms`);
      expect(seen.reached).toBe(5);

      ks.state.mode = "ok";
      const after = await concurrent(deps, 5, 200);
      expect(after.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(seen.reached).toBe(10);
    });
  }
});

/** A LedgerDO in memory (chains for real) behind the binding the writer reaches, whose mode can change mid-run. */
function fakeLedger() {
  const entries: LedgerEntry[] = [];
  let head: Head = EMPTY_HEAD;
  const state = { mode: "ok" as Mode };
  const counts = { calls: 0 };
  const appendOne = async (drafts: EntryDraft[]): Promise<LedgerEntry[]> => {
    const chained = chainEntries("team-f", head, drafts);
    entries.push(...chained);
    head = { seq: chained.at(-1)!.seq, hash: chained.at(-1)!.hash };
    return chained;
  };
  const api: Pick<LedgerApi, "append" | "appendEach"> = {
    async appendEach(calls: EntryDraft[][]) {
      counts.calls++;
      if (state.mode === "throw") throw new Error("LedgerDO: storage unavailable");
      if (state.mode === "hang") return new Promise(() => undefined);
      if (state.mode === "garbage") return calls.map(() => ({ entries: [] }));
      const out = [];
      for (const drafts of calls) out.push({ entries: await appendOne(drafts) });
      return out;
    },
    async append(drafts: EntryDraft[]) {
      if (state.mode !== "ok") throw new Error("LedgerDO: storage unavailable");
      return appendOne(drafts);
    },
  };
  const env = { LEDGER: { idFromName: (n: string) => n, get: () => api } } as unknown as Env;
  const ledger = callLedger({ env, principal: agent, signing: { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" }, waitUntil: () => undefined });
  return {
    state,
    entries,
    ledger,
    env,
    /** appendEach RPCs received. */
    get calls() {
      return counts.calls;
    },
  };
}

describe("the team's ledger object fails mid-run (group commit under concurrency)", () => {
  for (const mode of ["throw", "garbage", "hang"] as const) {
    it(`${mode}: 20 concurrent calls during the failure are all refused before forwarding; the chain stays contiguous and service resumes`, async () => {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      const l = fakeLedger();
      const { deps, seen } = depsWith({ ledger: l.ledger });
      const before = await concurrent(deps, 5, 0);
      expect(before.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(l.entries).toHaveLength(10);

      l.state.mode = mode;
      const during = await concurrent(deps, 20, 100, LEDGER_WRITE_TIMEOUT_MS + 50);
      for (const r of during) {
        expect(r.settled, "answered within the ledger's write bound").toBe(true);
        expect(r.answer!.response.result?.isError).toBe(true);
        expect(textOf(r.answer!)).toContain("the ledger step could not answer");
      }
      expect(seen.reached).toBe(5);

      l.state.mode = "ok";
      const after = await concurrent(deps, 5, 200);
      expect(after.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(seen.reached).toBe(10);
      // Nothing of the failed window is on the chain (no decision without its call, no gap).
      expect(l.entries.map((e) => e.seq)).toEqual(l.entries.map((_, i) => i + 1));
      expect(l.entries.filter((e) => e.kind === "decision")).toHaveLength(10);
      expect(l.entries.filter((e) => e.kind === "outcome")).toHaveLength(10);
    });
  }

  // Guaranteed: as docs/ledger.md says, a record that cannot be written within 5 s refuses the call within
  // those 5 s — a caller of batchedAppend chosen to send waits for its answer under its own deadline
  // (src/ports/ledger-batch.ts), and the blocked record of a refusal because the ledger did not
  // answer is not attempted on that same ledger while it has just timed out (src/ports/ledger-writer.ts).
  it("hang: every call is refused within the ledger's 5 s write bound (no second bound for the sender, none for the blocked record)", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const l = fakeLedger();
    const { deps, seen } = depsWith({ ledger: l.ledger });
    l.state.mode = "hang";
    const during = await concurrent(deps, 20, 0, LEDGER_WRITE_TIMEOUT_MS - 50);
    expect(
      during.some((r) => r.settled),
      "no refusal before the bound",
    ).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    for (const r of during) {
      expect(r.settled).toBe(true);
      expect(textOf(r.answer!)).toContain(`the ledger step could not answer (the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms)`);
    }
    expect(seen.reached).toBe(0);
  });
});

describe("group commit over a hanging LedgerDO: each caller within its own deadline", () => {
  const signing = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" };
  const d = (i: number): EntryDraft => ({ kind: "blocked", id: `d-${i}`, at: new Date().toISOString(), body: { i } });

  // Guaranteed (src/ports/ledger-batch.ts batchedAppend): a caller whose turn to send comes late (the
  // RPCs before it hung until their bound) waits for its RPC under its own deadline, not for the RPC's.
  it("a caller chosen to send after waiting its turn is refused at its own deadline, not one RPC bound after its turn", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const l = fakeLedger();
    l.state.mode = "hang";
    const settled: Record<string, string> = {};
    const track = (name: string, p: Promise<unknown>) =>
      p.then(
        () => (settled[name] = "stored"),
        (e: Error) => (settled[name] = e.message),
      );
    // Two RPCs in flight (the most per chain), both hanging: b comes once a's RPC is out, so it sends its own.
    track("a", batchedAppend(l.env, "team-f", signing, [d(1)], LEDGER_WRITE_TIMEOUT_MS));
    await vi.advanceTimersByTimeAsync(0);
    track("b", batchedAppend(l.env, "team-f", signing, [d(2)], LEDGER_WRITE_TIMEOUT_MS));
    await vi.advanceTimersByTimeAsync(0);
    expect(l.calls, "two RPCs sent").toBe(2);
    await vi.advanceTimersByTimeAsync(3000);
    // c queues behind them; its turn comes when their bound frees the chain (t = 5 s), 2 s before its deadline.
    track("c", batchedAppend(l.env, "team-f", signing, [d(3)], LEDGER_WRITE_TIMEOUT_MS));
    await vi.advanceTimersByTimeAsync(LEDGER_WRITE_TIMEOUT_MS - 3000 + 50);
    expect(Object.keys(settled).sort()).toEqual(["a", "b"]);
    await vi.advanceTimersByTimeAsync(3000);
    expect(settled.c).toBe(`the ledger did not answer within ${LEDGER_WRITE_TIMEOUT_MS} ms`);
    expect(l.calls, "c sent its own RPC when its turn came").toBe(3);
  });
});

/** A recording ledger for the hold step's own records (hold.created / hold.consumed), always up. */
function recordingLedger(): CallLedger & { kinds: string[] } {
  const kinds: string[] = [];
  let seq = 0;
  const receipt = () => ({ chain: "team-f", seq: ++seq, hash: `h${seq}`, decision_id: `d${seq}` });
  return {
    kinds,
    decision: async () => {
      kinds.push("decision");
      return receipt();
    },
    outcome: async (r) => {
      kinds.push(`outcome:${r.status}`);
      return receipt();
    },
    blocked: async () => {
      kinds.push("blocked");
      return `b${++seq}`;
    },
    hold: async (kind) => {
      kinds.push(kind);
      return `k${++seq}`;
    },
    listed: () => undefined,
  };
}

/** A HoldsApi whose every hold is already approved (claim consumes it), with a mode for claim and for complete. */
function fakeHolds() {
  const state = { claim: "ok" as Mode, complete: "ok" as Mode, claims: 0 };
  const record = (h: Parameters<HoldsApi["claim"]>[0]): HoldRecord => ({
    ...h,
    v: 1,
    state: "consumed",
    approver: "human:boss",
    resolvedAt: h.createdAt,
    resolveReason: null,
    consumedAt: h.createdAt,
    result: null,
    notForwarded: null,
  });
  const behave = async <T>(mode: Mode, ok: () => T, what: string): Promise<T> => {
    if (mode === "throw") throw new Error(`HoldsDO: ${what} failed`);
    if (mode === "hang") return new Promise<T>(() => undefined);
    if (mode === "garbage") return { kind: "nonsense" } as T;
    return ok();
  };
  const api = {
    claim: async (h) => {
      state.claims++;
      return behave<HoldClaim>(state.claim, () => ({ kind: "consumed", hold: record(h) }), "claim");
    },
    complete: async () => behave(state.complete, () => true, "complete"),
    release: async () => true,
  } as Partial<HoldsApi> as HoldsApi;
  return { state, api };
}

const holdCfg = loadConfig("upstreams:\n  - name: alpha\n    url: http://127.0.0.1:9/mcp\n", { PORTCULLIS_ORIGIN: "http://127.0.0.1:8787" });
const NEEDS_APPROVAL = {
  ...OPEN_POLICY,
  version: "p-hold",
  decide: async () => ({
    decision: "require_approval" as const,
    rule: "hold-all",
    reason: "risky",
    obligations: [],
    mode: "enforce" as const,
    policyVersion: "p-hold",
  }),
};

function holdDeps() {
  const holds = fakeHolds();
  const ledger = recordingLedger();
  const ctx = { cfg: holdCfg, era: "modern", principal: agent, stores: { ledger }, signal: new AbortController().signal } as unknown as CallContext;
  const { deps, seen } = depsWith({ policy: NEEDS_APPROVAL, holds: holdStore(ctx, holds.api), ledger });
  return { deps, seen, holds, ledger };
}

describe("the team's holds object fails mid-run (calls that need approval)", () => {
  for (const mode of ["throw"] as const) {
    it(`claim ${mode}: every held call during the failure is refused (hold step), none is forwarded; approved calls run again after`, async () => {
      const h = holdDeps();
      const before = await concurrent(h.deps, 5, 0);
      expect(before.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(h.seen.reached).toBe(5);

      h.holds.state.claim = mode;
      const during = await concurrent(h.deps, 20, 100);
      for (const r of during) {
        expect(r.answer!.response.result?.isError).toBe(true);
        expect(textOf(r.answer!)).toContain("the hold step could not answer");
        expect(ran(r.answer!)).toBe(false);
      }
      expect(h.seen.reached).toBe(5);
      expect(h.ledger.kinds.filter((k) => k === "decision")).toHaveLength(5);

      h.holds.state.claim = "ok";
      const after = await concurrent(h.deps, 5, 200);
      expect(after.every((r) => r.answer && ran(r.answer))).toBe(true);
      expect(h.seen.reached).toBe(10);
    });
  }

  it("claim answers something that is no claim: nothing is forwarded, whatever the call gets back", async () => {
    const h = holdDeps();
    h.holds.state.claim = "garbage";
    const r = await Promise.allSettled(Array.from({ length: 10 }, (_, k) => governToolCall(h.deps, toolCall(k))));
    expect(r.filter((x) => x.status === "fulfilled" && ran(x.value))).toEqual([]);
    expect(h.seen.reached).toBe(0);
    expect(h.ledger.kinds.filter((k) => k === "decision")).toEqual([]);
  });

  // Guaranteed: src/ports/hold-store.ts checks every claim the HoldsDO answers; one of a kind it does
  // not know rejects inside the hold step, so the agent gets a readable refusal (fail closed).
  it("claim answers something that is no claim: a readable refusal (hold step), nothing forwarded", async () => {
    const h = holdDeps();
    h.holds.state.claim = "garbage";
    const a = await governToolCall(h.deps, toolCall(1));
    expect(a.response.result?.isError).toBe(true);
    expect(textOf(a)).toContain('the hold step could not answer (the hold store answered something that is not a hold claim (kind: \\"nonsense\\"))');
    expect(h.seen.reached).toBe(0);
  });

  it("complete throws after the approved call ran: the agent still gets the result (its outcome is recorded), the failure is only logged", async () => {
    const h = holdDeps();
    h.holds.state.complete = "throw";
    const spy = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const r = await concurrent(h.deps, 3, 0);
      expect(r.every((x) => x.answer && ran(x.answer))).toBe(true);
      expect(h.ledger.kinds.filter((k) => k === "outcome:succeeded")).toHaveLength(3);
      expect(spy).toHaveBeenCalledWith("portcullis: hold answer not kept", expect.any(String), expect.stringContaining("HoldsDO: complete failed"));
    } finally {
      spy.mockRestore();
    }
  });

  // Guaranteed: src/ports/hold-store.ts bounds every HoldsDO round trip (HOLD_STORE_TIMEOUT_MS, like
  // the ledger's 5 s), so a HoldsDO that never answers refuses the held call at the hold step.
  it("claim hangs: the held call is refused within the hold store's bound (hold step), nothing forwarded", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const h = holdDeps();
    h.holds.state.claim = "hang";
    const r = await concurrent(h.deps, 3, 0, HOLD_STORE_TIMEOUT_MS + 50);
    expect(h.seen.reached).toBe(0);
    for (const x of r) {
      expect(x.settled).toBe(true);
      expect(x.answer!.response.result?.isError).toBe(true);
      expect(textOf(x.answer!)).toContain(`the hold step could not answer (the hold store did not answer within ${HOLD_STORE_TIMEOUT_MS} ms)`);
    }
  });

  // Guaranteed: holdStore().complete bounds `api.complete` (HOLD_STORE_TIMEOUT_MS), so a HoldsDO that
  // hangs after the approved call ran only delays its answer by that bound: the governed path logs
  // the answer as not kept (as for a throw) and the agent gets the result, its outcome on the record.
  it("complete hangs after the approved call ran: the agent still gets its answer within the hold store's bound", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const h = holdDeps();
    h.holds.state.complete = "hang";
    const spy = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      const r = await concurrent(h.deps, 3, 0, HOLD_STORE_TIMEOUT_MS + 50);
      expect(h.seen.reached).toBe(3);
      expect(r.every((x) => x.settled && ran(x.answer!))).toBe(true);
      expect(h.ledger.kinds.filter((k) => k === "outcome:succeeded")).toHaveLength(3);
      expect(spy).toHaveBeenCalledWith(
        "portcullis: hold answer not kept",
        expect.any(String),
        expect.stringContaining(`the hold store did not answer within ${HOLD_STORE_TIMEOUT_MS} ms`),
      );
    } finally {
      spy.mockRestore();
    }
  });
});

describe("the principal's history object (history rules, budgets) fails", () => {
  const historyPolicy = { ...OPEN_POLICY, version: "p-b", usesHistory: true };
  /** historyStore over a HISTORY binding whose object's admit and settle behave as told. */
  function history(admit: Mode, settle: Mode = "ok"): HistoryStore {
    const act = async <T>(mode: Mode, ok: T): Promise<T> => {
      if (mode === "throw") throw new Error("HistoryDO: storage unavailable");
      if (mode === "hang") return new Promise<T>(() => undefined);
      return ok;
    };
    const api = { admit: () => act(admit, { ok: true }), settle: () => act(settle, undefined), snapshot: async () => [] };
    return historyStore({ HISTORY: { idFromName: (n: string) => n, get: () => api } } as unknown as Env);
  }

  it("admit throws: every call is refused at the budget step and none is forwarded", async () => {
    const { deps, seen } = depsWith({ policy: historyPolicy, history: history("throw") });
    const r = await concurrent(deps, 10, 0);
    for (const x of r) expect(textOf(x.answer!)).toContain("the budget step could not answer");
    expect(seen.reached).toBe(0);
  });

  // Guaranteed: src/ports/history-store.ts bounds every HistoryDO round trip (HISTORY_TIMEOUT_MS), so
  // a hanging HistoryDO refuses each call of a policy with history rules or budgets at its step.
  it("admit hangs: the call is refused within the history store's bound (budget step), nothing forwarded", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { deps, seen } = depsWith({ policy: historyPolicy, history: history("hang") });
    const r = await concurrent(deps, 3, 0, HISTORY_TIMEOUT_MS + 50);
    expect(seen.reached).toBe(0);
    for (const x of r) {
      expect(x.settled).toBe(true);
      expect(textOf(x.answer!)).toContain(`the budget step could not answer (the history store did not answer within ${HISTORY_TIMEOUT_MS} ms)`);
    }
  });

  // Guaranteed: historyStore().settle is bounded (HISTORY_TIMEOUT_MS) and the governed path ignores
  // its failure, so a HistoryDO that hangs after the call ran delays its answer by that bound at most.
  it("settle hangs after the call ran: the agent still gets its answer within the history store's bound", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const { deps, seen } = depsWith({ policy: historyPolicy, history: history("ok", "hang") });
    const r = await concurrent(deps, 3, 0, HISTORY_TIMEOUT_MS + 50);
    expect(seen.reached).toBe(3);
    expect(r.every((x) => x.settled && ran(x.answer!))).toBe(true);
  });
});
