/**
 * The governed path against a faulty ledger: a failure injected at each await of the write path
 * — the decision append and the outcome append, each as a throw, a hang (past the write bound)
 * and a partial write (a record the ledger did not confirm) — refuses the call before the
 * upstream sees anything, or holds the result back; never a result without its records. Also:
 * what a decision record keeps (arguments hashed, never raw; the names, never the values, of the
 * client's `portcullis/` `_meta` keys the forward dropped) and the receipt the answer carries.
 */
import { describe, expect, it, vi } from "vitest";
import type { LedgerApi } from "../../durable-objects/contract-ledger.ts";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import { governToolCall } from "../../src/governance/call.ts";
import type { GovernanceDeps } from "../../src/governance/call-decide.ts";
import { RECEIPT_META } from "../../src/governance/call-answers.ts";
import { catalogEntry } from "../../src/governance/catalog-entry.ts";
import { type LegResult, NO_HISTORY, NO_HOLDS, NO_MAPPINGS, OPEN_POLICY, type ToolCall } from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import { chainEntries, EMPTY_HEAD, type Head } from "../../src/ledger/chain.ts";
import { canonicalHash } from "../../src/wire/canonical.ts";
import type { EntryDraft, LedgerEntry } from "../../src/ledger/records.ts";
import { callLedger, LEDGER_WRITE_TIMEOUT_MS } from "../../src/ports/ledger-writer.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";
import type { TraceContext } from "../../src/wire/trace-context.ts";

const up: UpstreamConfig = testUpstream();
const agent: Principal = { sub: "agent:a", team: "team-a", roles: ["agent"], tools: null, authenticated: true };

type Fault = "none" | "throw" | "hang" | "partial";

/** A LedgerApi in memory that chains for real, with one fault injected at the n-th append. */
function fakeLedger(faultAt: number, fault: Fault, extra: Record<string, unknown> = {}) {
  const entries: LedgerEntry[] = [];
  /** Every draft as the writer sent it (with the rollup facts beside it). */
  const drafts: EntryDraft[] = [];
  let head: Head = EMPTY_HEAD;
  let calls = 0;
  const api: Pick<LedgerApi, "append" | "appendEach"> = {
    // What the Worker's group commit (src/ports/ledger-batch.ts) calls: each call as its own append, one fault each.
    async appendEach(calls: EntryDraft[][]) {
      return Promise.all(
        calls.map((drafts) =>
          api.append(drafts, { secret: "", gateway: "" }).then(
            (entries) => ({ entries }),
            (e: Error) => ({ error: e.message }),
          ),
        ),
      );
    },
    async append(sent: EntryDraft[]) {
      drafts.push(...sent);
      calls++;
      if (calls === faultAt) {
        if (fault === "throw") throw new Error("disk on fire");
        if (fault === "hang") return new Promise<LedgerEntry[]>(() => undefined);
        if (fault === "partial") return [];
      }
      const chained = chainEntries("team-a", head, sent);
      entries.push(...chained);
      head = { seq: chained.at(-1)!.seq, hash: chained.at(-1)!.hash };
      return chained;
    },
  };
  const env = { LEDGER: { idFromName: (n: string) => n, get: () => api }, ...extra } as unknown as Env;
  return { env, entries, drafts };
}

async function run(
  faultAt: number,
  fault: Fault,
  args: JsonObject = { secret_arg: "hunter2" },
  meta?: JsonObject,
  trace?: TraceContext,
  extra: Record<string, unknown> = {},
) {
  const { env, entries } = fakeLedger(faultAt, fault, extra);
  let reached = 0;
  const sent: JsonObject[] = [];
  const deps: GovernanceDeps = {
    catalog: { resolve: async (name) => ({ upstream: up, tool: (await catalogEntry({ name: name.slice(7), inputSchema: {} }, name))! }) },
    killSwitch: NO_HALTS,
    mappings: NO_MAPPINGS,
    policy: OPEN_POLICY,
    holds: NO_HOLDS,
    ledger: callLedger({ env, principal: agent, signing: { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" }, waitUntil: () => undefined }),
    upstream: {
      call: async (_t, request): Promise<LegResult> => {
        reached++;
        sent.push(request.params ?? {});
        return { kind: "answered", response: { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "RESULT-XYZ" }] } }, status: 200 };
      },
    },
    history: NO_HISTORY,
    clock: Date.now,
  };
  const call: ToolCall = {
    principal: agent,
    era: "modern",
    request: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "alpha__do", arguments: args, ...(meta ? { _meta: meta } : {}) } },
    exposedName: "alpha__do",
    arguments: args,
    runId: "run-9",
    ...(trace ? { trace } : {}),
  };
  const answer = await governToolCall(deps, call);
  return { answer, reached, entries, sent, text: JSON.stringify(answer) };
}

describe("the outcome's rollup facts", () => {
  it("name the upstream and its tool, and the gateway's own time without the upstream's or a hold's wait; never reach the record", async () => {
    const { env, entries, drafts } = fakeLedger(0, "none");
    let now = 1_000_000;
    const deps: GovernanceDeps = {
      catalog: { resolve: async (name) => ({ upstream: up, tool: (await catalogEntry({ name: name.slice(7), inputSchema: {} }, name))! }) },
      killSwitch: NO_HALTS,
      mappings: NO_MAPPINGS,
      // Every call needs approval; the hold step waits 60 s for a person (holds.wait), who approves: the call runs, consuming the hold.
      policy: {
        ...OPEN_POLICY,
        decide: () => ({ decision: "require_approval", rule: "people", reason: "a person decides", obligations: [], mode: "enforce", policyVersion: "none" }),
      },
      holds: {
        ...NO_HOLDS,
        settle: async () => {
          now += 60_000;
          return { proceed: true, holdId: "team-a~0123456789abcdef01234567" };
        },
      },
      ledger: callLedger({ env, principal: agent, signing: { secret: "PORTCULLIS_SIGNING_KEY", gateway: "http://127.0.0.1" }, waitUntil: () => undefined }),
      upstream: {
        call: async (): Promise<LegResult> => {
          now += 250; // the upstream's time
          return { kind: "answered", response: { jsonrpc: "2.0", id: 1, result: { content: [] } }, status: 200 };
        },
      },
      history: NO_HISTORY,
      clock: () => now,
    };
    const call: ToolCall = {
      principal: agent,
      era: "modern",
      request: { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "alpha__do", arguments: {} } },
      exposedName: "alpha__do",
      arguments: {},
      runId: null,
      receivedAt: now - 3,
    };
    const answer = await governToolCall(deps, call);
    expect(answer.response.result?.isError, JSON.stringify(answer.response)).not.toBe(true);
    const outcome = drafts.find((d) => d.kind === "outcome") as EntryDraft & { metrics?: Record<string, unknown> };
    expect(outcome.metrics).toMatchObject({ upstream: "alpha", tool: "do" });
    expect(outcome.metrics!.gateway_ms as number).toBeGreaterThanOrEqual(3);
    expect(outcome.metrics!.gateway_ms as number).toBeLessThan(250);
    expect(entries.every((e) => !("metrics" in e))).toBe(true);
    // The hold step did run (and waited): the decision names the hold it consumed.
    expect(entries.find((e) => e.kind === "decision")!.body.hold_id).toBe("team-a~0123456789abcdef01234567");
  });
});

describe("the ledger write path under faults", () => {
  it("no fault: decision before forwarding, outcome before the answer, receipt in _meta; arguments only as a hash", async () => {
    const r = await run(0, "none");
    expect(r.reached).toBe(1);
    expect(r.entries.map((e) => e.kind)).toEqual(["decision", "outcome"]);
    const [decision, outcome] = r.entries as [LedgerEntry, LedgerEntry];
    expect(decision.body).toMatchObject({
      principal: "agent:a",
      team: "team-a",
      run: "run-9",
      upstream: "alpha",
      // Both names: the stable identity (upstream and its own tool name) and the name the agent called.
      tool: "do",
      exposed: "alpha__do",
      arguments_mode: "hashed",
      arguments: { sha256: canonicalHash({ secret_arg: "hunter2" }) },
    });
    expect(JSON.stringify(r.entries)).not.toContain("hunter2");
    expect(outcome.body).toMatchObject({
      decision_id: decision.id,
      status: "succeeded",
      result_hash: canonicalHash({ result: { content: [{ type: "text", text: "RESULT-XYZ" }] } }),
    });
    expect(JSON.stringify(r.entries)).not.toContain("RESULT-XYZ");
    expect((r.answer.response.result!._meta as JsonObject)[RECEIPT_META]).toEqual({ chain: "team-a", seq: 2, hash: outcome.hash, decision_id: decision.id });
  });

  it("a call's trace ids go on its decision (trace) and outcome (trace_id), and one decision log line names the trace and the record, never hashed arguments", async () => {
    const trace: TraceContext = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "b7ad6b7169203331", parentSpanId: "00f067aa0ba902b7", flags: "01" };
    const lines: string[] = [];
    const spy = vi.spyOn(console, "log").mockImplementation((line: unknown) => {
      lines.push(String(line));
    });
    try {
      const r = await run(0, "none", { secret_arg: "hunter2" }, undefined, trace);
      const decision = r.entries.find((e) => e.kind === "decision")!;
      const outcome = r.entries.find((e) => e.kind === "outcome")!;
      expect(decision.body.trace).toEqual({ trace_id: trace.traceId, span_id: trace.spanId, parent_span_id: trace.parentSpanId });
      expect(outcome.body.trace_id).toBe(trace.traceId);
      const logged = lines.map((l) => JSON.parse(l)).filter((j) => j.event === "decision");
      expect(logged).toEqual([
        {
          event: "decision",
          trace_id: trace.traceId,
          decision_id: decision.id,
          chain: "team-a",
          seq: decision.seq,
          principal: "agent:a",
          team: "team-a",
          run: "run-9",
          upstream: "alpha",
          tool: "do",
          exposed: "alpha__do",
          decision: "allow",
          mode: decision.body.mode,
          rule: decision.body.rule,
        },
      ]);
      expect(lines.join("\n")).not.toContain("hunter2");
      // Without a trace: no trace fields, and the line says so with null.
      lines.length = 0;
      const plain = await run(0, "none", { x: 1 });
      expect(plain.entries.find((e) => e.kind === "decision")!.body).not.toHaveProperty("trace");
      expect(plain.entries.find((e) => e.kind === "outcome")!.body).not.toHaveProperty("trace_id");
      expect(lines.map((l) => JSON.parse(l)).find((j) => j.event === "decision")?.trace_id).toBeNull();
    } finally {
      spy.mockRestore();
    }
  });

  it("with an Analytics Engine dataset bound, an outcome writes one data point (team, kind, upstream, tool, status, principal, trace; upstream and gateway ms), never an argument; a throwing dataset fails nothing", async () => {
    const points: AnalyticsEngineDataPoint[] = [];
    const trace: TraceContext = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "b7ad6b7169203331", parentSpanId: null, flags: "01" };
    const r = await run(0, "none", { secret_arg: "hunter2" }, undefined, trace, {
      PORTCULLIS_ANALYTICS: { writeDataPoint: (p: AnalyticsEngineDataPoint) => points.push(p) },
    });
    expect(r.reached).toBe(1);
    expect(points).toHaveLength(1);
    expect(points[0]!.indexes).toEqual(["team-a"]);
    expect(points[0]!.blobs).toEqual(["outcome", "alpha", "do", "succeeded", "agent:a", trace.traceId]);
    expect(points[0]!.doubles).toHaveLength(2);
    expect(JSON.stringify(points)).not.toContain("hunter2");
    const broken = await run(0, "none", { x: 1 }, undefined, undefined, {
      PORTCULLIS_ANALYTICS: {
        writeDataPoint: () => {
          throw new Error("analytics down");
        },
      },
    });
    expect(broken.reached).toBe(1);
    expect(broken.entries.map((e) => e.kind)).toEqual(["decision", "outcome"]);
    expect(broken.answer.response.result?.isError).not.toBe(true);
  });

  it("a decision names the client's portcullis/ _meta keys the forward dropped (names only, never values); none dropped, no field", async () => {
    const r = await run(0, "none", { x: 1 }, { "portcullis/idempotency_key": "AGENT-KEY-VALUE", "vendor/trace": "t-1" });
    expect(r.sent.map((p) => p._meta)).toEqual([{ "vendor/trace": "t-1" }]);
    const decision = r.entries.find((e) => e.kind === "decision")!;
    expect(decision.body.stripped_meta).toEqual(["portcullis/idempotency_key"]);
    expect(JSON.stringify(r.entries)).not.toContain("AGENT-KEY-VALUE");
    const plain = await run(0, "none", { x: 1 }, { "vendor/trace": "t-1" });
    expect(plain.entries.find((e) => e.kind === "decision")!.body).not.toHaveProperty("stripped_meta");
  });

  for (const fault of ["throw", "hang", "partial"] as const) {
    it(`decision append: ${fault} → refused, the upstream sees nothing`, async () => {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      try {
        const pending = run(1, fault);
        await vi.advanceTimersByTimeAsync(LEDGER_WRITE_TIMEOUT_MS + 10);
        const r = await pending;
        expect(r.reached).toBe(0);
        expect(r.answer.response.result?.isError).toBe(true);
        expect(r.text).toContain("the ledger step could not answer");
        expect(r.entries.filter((e) => e.kind === "decision")).toHaveLength(0);
      } finally {
        vi.useRealTimers();
      }
    });
    it(`outcome append: ${fault} → the call ran, but its result is held back`, async () => {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
      try {
        const pending = run(2, fault);
        await vi.advanceTimersByTimeAsync(LEDGER_WRITE_TIMEOUT_MS + 10);
        const r = await pending;
        expect(r.reached).toBe(1);
        expect(r.answer.response.result?.isError).toBe(true);
        expect(r.text).toContain("the ledger step could not answer");
        expect(r.text).not.toContain("RESULT-XYZ");
      } finally {
        vi.useRealTimers();
      }
    });
  }
});
