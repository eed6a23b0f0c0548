/**
 * The type mirrors the layer rule keeps: shapes governance declares (src/governance/steps.ts and
 * halts.ts, which may import only wire and config) that the storage contract (durable-objects/contract*.ts,
 * which may import only wire and ledger) and the ledger's records (src/ledger/records.ts, wire
 * only) declare again for themselves. Each pair is checked here by tsc (`npm run typecheck`
 * compiles test/unit): identical pairs must stay identical, and a pair that differs on purpose
 * (a stored record keeps more, or keeps an old row's absent fields) must keep the relation the
 * converter between them relies on. The converters themselves (stateOf; the history store's
 * plain assignments) are run here too. Must never: widen a check to make a drifted pair pass;
 * change the type on one side and the other in the same commit instead.
 */
import { describe, expect, it } from "vitest";
import type {
  HistoryAdmission,
  HistoryBudget,
  HistoryCall,
  HistoryCallStatus,
  HistoryQueryScope,
  HistoryQuerySpec,
} from "../../durable-objects/contract-history.ts";
import { HALT_SCOPES, type HaltRecord, type HaltScopeName, type KillSwitchSnapshot } from "../../durable-objects/contract-killswitch.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";
import type { Admission, BudgetLimits, DecisionRecord, HistoryEntry, HistoryQuery, HistoryScope, OutcomeStatus, Receipt } from "../../src/governance/steps.ts";
import type { Halt, HaltScope, KillSwitchState } from "../../src/governance/halts.ts";
import type { ArgumentsMode, ChainReceipt, KillSwitchBody, OutcomeBody } from "../../src/ledger/records.ts";
import { stateOf } from "../../src/ports/killswitch-client.ts";

/** True exactly when A and B are the same type (not merely assignable either way). */
type Equal<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
/** True when every A is a B. */
type Assignable<A, B> = [A] extends [B] ? true : false;

// Each line fails to compile ("Type 'true' does not satisfy the expected type 'false'") when its pair drifts.
export const MIRRORS = {
  // kill switch: governance (halts.ts) ↔ store (contract-killswitch.ts) ↔ ledger (KillSwitchBody)
  haltScope: true satisfies Equal<HaltScope, HaltScopeName>,
  haltScopeRecorded: true satisfies Equal<HaltScopeName, KillSwitchBody["scope"]>,
  haltScopesListed: true satisfies Equal<(typeof HALT_SCOPES)[number], HaltScopeName>,
  haltFields: true satisfies Equal<keyof Halt, Exclude<keyof HaltRecord, "v" | "by" | "at">>,
  haltScopeField: true satisfies Equal<Halt["scope"], HaltRecord["scope"]>,
  haltTarget: true satisfies Equal<NonNullable<Halt["target"]>, NonNullable<HaltRecord["target"]>>,
  haltReason: true satisfies Equal<Halt["reason"], HaltRecord["reason"]>,
  killSwitchFields: true satisfies Equal<keyof KillSwitchState, keyof KillSwitchSnapshot>,
  killSwitchVersion: true satisfies Equal<KillSwitchState["version"], KillSwitchSnapshot["version"]>,
  // history: governance (steps.ts) ↔ store (contract-history.ts)
  historyScope: true satisfies Equal<HistoryScope, HistoryQueryScope>,
  historyQuery: true satisfies Equal<HistoryQuery, HistoryQuerySpec>,
  budget: true satisfies Equal<BudgetLimits, HistoryBudget>,
  admission: true satisfies Equal<Admission, HistoryAdmission>,
  settled: true satisfies Equal<OutcomeStatus, Exclude<HistoryCallStatus, "admitted">>,
  // A stored call may lack upstream and tool (rows written before they were kept); every entry governance makes is one.
  historyEntryStored: true satisfies Assignable<HistoryEntry, HistoryCall>,
  historyFields: true satisfies Equal<keyof HistoryEntry, keyof HistoryCall>,
  historyRowWithIdentity: true satisfies Assignable<HistoryCall & { upstream: string; tool: string }, HistoryEntry>,
  // ledger records: governance (steps.ts) ↔ ledger (records.ts) ↔ config (mapping-schema.ts)
  outcomeStatus: true satisfies Equal<OutcomeStatus, OutcomeBody["status"]>,
  receipt: true satisfies Equal<Receipt, ChainReceipt>,
  argumentsKept: true satisfies Equal<DecisionRecord["argumentsKept"], ArgumentsMode>,
  argumentsMapped: true satisfies Equal<ToolMapping["arguments"], ArgumentsMode>,
};

const record = (scope: HaltScopeName, target: string | null, reason: string): HaltRecord => ({ v: 1, scope, target, reason, by: "human:root", at: 1 });

describe("mirrored shapes", () => {
  it("every check compiled (tsc) and holds", () => {
    expect(Object.values(MIRRORS).every((v) => v === true)).toBe(true);
    expect(Object.keys(MIRRORS)).toHaveLength(21);
  });

  it("stateOf turns each HaltRecord into the Halt governance reads: scope and reason kept, a null target absent, who and when dropped", () => {
    const snapshot: KillSwitchSnapshot = {
      version: 9,
      halts: HALT_SCOPES.map((scope) => record(scope, scope === "global" ? null : `${scope}-target`, `why ${scope}`)),
    };
    const state = stateOf(snapshot);
    expect(state.version).toBe(9);
    expect(state.halts).toEqual([
      { scope: "global", reason: "why global" },
      { scope: "team", target: "team-target", reason: "why team" },
      { scope: "upstream", target: "upstream-target", reason: "why upstream" },
      { scope: "tool", target: "tool-target", reason: "why tool" },
      { scope: "principal", target: "principal-target", reason: "why principal" },
      { scope: "grant", target: "grant-target", reason: "why grant" },
    ]);
    expect("target" in state.halts[0]!).toBe(false);
    for (const h of state.halts) expect(Object.keys(h).every((k) => ["scope", "target", "reason"].includes(k))).toBe(true);
  });

  it("stateOf refuses what is not a snapshot (the governed path then refuses the call)", () => {
    for (const bad of [null, {}, { version: "1", halts: [] }, { version: 1, halts: {} }])
      expect(() => stateOf(bad as unknown as KillSwitchSnapshot)).toThrow(/not a state/);
  });

  it("a history entry is stored as is: the store's call row is the entry, field for field", () => {
    const entry: HistoryEntry = {
      callId: "c1",
      principal: "human:a",
      jti: "j1",
      runId: "r1",
      exposedName: "alpha__send",
      upstream: "alpha",
      tool: "send",
      numbers: { n: 2 },
      at: 5,
    };
    const call: HistoryCall = entry;
    expect(call).toBe(entry);
    const limits: BudgetLimits = { grantCalls: 3, runCalls: 2 };
    const budget: HistoryBudget = limits;
    expect(budget).toEqual({ grantCalls: 3, runCalls: 2 });
  });
});
