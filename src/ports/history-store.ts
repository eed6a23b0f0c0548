/**
 * The governed path's HistoryStore (src/governance/steps.ts) over each principal's HistoryDO
 * (`historyObject`): snapshots of the caller's recent calls for history rules and rate limits,
 * atomic budget admission, and outcomes. The object answers a snapshot in query order; this
 * module keys the answers by `historyKey`. Every round trip is bounded (HISTORY_TIMEOUT_MS,
 * src/wire/bounded.ts): a HistoryDO that does not answer rejects like one that throws. Owns
 * nothing else.
 * Must never: swallow an error of the store (it propagates, and the governed path refuses the
 * call to fail closed), address an object by anything but the verified principal's `sub`, wait
 * on the object without a bound, or call the store for a snapshot with no queries.
 */
import type { Env } from "../env.ts";
import {
  type BudgetLimits,
  type HistoryEntry,
  type HistoryQuery,
  type HistorySnapshot,
  type HistoryStore,
  historyKey,
  type OutcomeStatus,
} from "../governance/steps.ts";
import { historyObject } from "../../durable-objects/object-names.ts";
import type { HistoryBudget, HistoryCall, HistoryQuerySpec } from "../../durable-objects/contract-history.ts";
import { bounded } from "../wire/bounded.ts";

/** A HistoryDO that does not answer within this bound counts as failed (like the ledger's write bound): the call is refused at its step. */
export const HISTORY_TIMEOUT_MS = 5000;
const HISTORY = "the history store";

/** The HistoryStore of one Worker environment. */
export function historyStore(env: Env): HistoryStore {
  return {
    async snapshot(principal: string, jti: string | undefined, runId: string | null, queries: HistoryQuery[], now: number): Promise<HistorySnapshot> {
      if (queries.length === 0) return { answers: {} };
      const specs: HistoryQuerySpec[] = queries;
      const answers = await bounded(historyObject(env, principal).snapshot(jti ?? null, runId, specs, now), HISTORY_TIMEOUT_MS, HISTORY);
      if (!Array.isArray(answers) || answers.length !== queries.length)
        throw new Error("history: the store answered a different number of queries than were asked");
      const out: Record<string, number | boolean> = {};
      queries.forEach((q, i) => {
        out[historyKey(q)] = answers[i]!;
      });
      return { answers: out };
    },
    async admit(entry: HistoryEntry, limits: BudgetLimits) {
      const call: HistoryCall = entry;
      const budget: HistoryBudget = limits;
      return bounded(historyObject(env, entry.principal).admit(call, budget), HISTORY_TIMEOUT_MS, HISTORY);
    },
    async settle(principal: string, callId: string, status: OutcomeStatus): Promise<void> {
      await bounded(historyObject(env, principal).settle(callId, status), HISTORY_TIMEOUT_MS, HISTORY);
    },
  };
}
