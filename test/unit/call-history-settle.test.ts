/**
 * The governed call (src/governance/call.ts) reaches history only for calls it admitted there:
 * with injected fakes, a policy without history rules or budgets never touches the history
 * store — not even when the upstream leg fails or is uncertain (settling a call that was never
 * admitted would be a HistoryDO round trip the object ignores) — while a call admitted under a
 * budget has its failed or uncertain outcome settled, and under history rules its success too.
 */
import { describe, expect, it } from "vitest";
import type { Principal } from "../../src/config/principal.ts";
import { governToolCall } from "../../src/governance/call.ts";
import type { GovernanceDeps } from "../../src/governance/call-decide.ts";
import { catalogEntry } from "../../src/governance/catalog-entry.ts";
import { type HistoryStore, type LegResult, NO_HOLDS, NO_LEDGER, NO_MAPPINGS, OPEN_POLICY, type Policy, type ToolCall } from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

const up = testUpstream("alpha");
const agent: Principal = { sub: "agent:h", team: "t", roles: ["agent"], tools: ["alpha__*"], authenticated: true, jti: "j-h" };

function call(): ToolCall {
  const request: JsonRpcRequest = { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "alpha__read", arguments: {} } };
  return { principal: agent, era: "modern", request, exposedName: "alpha__read", arguments: {}, runId: null };
}

/** A history store that records every method it is asked. */
function recordingHistory() {
  const asked: string[] = [];
  const store: HistoryStore = {
    snapshot: async () => {
      asked.push("snapshot");
      return { answers: {} };
    },
    admit: async () => {
      asked.push("admit");
      return { ok: true };
    },
    settle: async (_p, _id, status) => {
      asked.push(`settle:${status}`);
    },
  };
  return { asked, store };
}

async function run(policy: Policy, leg: LegResult) {
  const h = recordingHistory();
  const tool = (await catalogEntry({ name: "read", inputSchema: { type: "object" } }, "alpha__read"))!;
  const deps: GovernanceDeps = {
    catalog: { resolve: async () => ({ upstream: up, tool }) },
    killSwitch: NO_HALTS,
    mappings: NO_MAPPINGS,
    policy,
    holds: NO_HOLDS,
    ledger: NO_LEDGER,
    history: h.store,
    upstream: { call: async () => leg },
    clock: Date.now,
  };
  const answer = await governToolCall(deps, call());
  return { answer, asked: h.asked };
}

const ok: LegResult = { kind: "answered", response: { jsonrpc: "2.0", id: 1, result: { content: [] } }, status: 200 };
const failed: LegResult = { kind: "failed", reason: "upstream down", auth: false };
const uncertain: LegResult = { kind: "uncertain", reason: "timed out" };

describe("history is reached only for admitted calls", () => {
  it("no history rules, no budget: nothing asked of history, whatever the leg did", async () => {
    for (const leg of [ok, failed, uncertain]) {
      const { answer, asked } = await run(OPEN_POLICY, leg);
      expect(asked).toEqual([]);
      expect(answer.response.id).toBe(1);
    }
  });

  it("a budget admits the call; a failed or uncertain outcome is settled", async () => {
    const budget: Policy = { ...OPEN_POLICY, limits: () => ({ grantCalls: 100 }) };
    expect((await run(budget, failed)).asked).toEqual(["admit", "settle:failed"]);
    expect((await run(budget, uncertain)).asked).toEqual(["admit", "settle:uncertain"]);
    expect((await run(budget, ok)).asked).toEqual(["admit"]);
  });

  it("history rules admit the call and settle every outcome", async () => {
    const rules: Policy = { ...OPEN_POLICY, usesHistory: true };
    expect((await run(rules, ok)).asked).toEqual(["admit", "settle:succeeded"]);
    expect((await run(rules, failed)).asked).toEqual(["admit", "settle:failed"]);
  });
});
