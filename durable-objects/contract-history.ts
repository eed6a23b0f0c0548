/**
 * The HistoryDO's storage contract: the retention bounds of a principal's recent calls and budget
 * counters, the row shape of one admitted call, the history questions the object answers and its
 * RPC surface. These shapes mirror governance's (src/governance/steps.ts HistoryQuery,
 * HistoryEntry, BudgetLimits, Admission): the store layer cannot import governance, so they are
 * declared here, and test/unit/mirrors.test.ts proves the two stay in step. Owns only types and
 * constants. Must never: hold logic or state.
 */
import type { OutcomeBody } from "../src/ledger/records.ts";

/** Longest window a history query may ask about (ms): 24 h. A query over a longer window is refused (the rows are not kept). */
export const HISTORY_WINDOW_MAX_MS = 24 * 3_600_000;
/** How long HistoryDO keeps a call's row: the longest window plus one hour, so a late outcome still finds its call. */
export const HISTORY_CALL_RETENTION_MS = 25 * 3_600_000;
/**
 * How long HistoryDO keeps a budget counter after the last call it counted, and a run's record that
 * a tool succeeded: 8 days. A run ends after at most 7 days idle (`gateway.session_ttl_s`), and a
 * grant budget stays exact for grants that live at most this long (`auth.max_token_lifetime`).
 */
export const HISTORY_BUDGET_RETENTION_MS = 8 * 86_400_000;
/** Version of the HistoryCall row shape (the `v` column of HistoryDO's `calls` table). */
export const HISTORY_CALL_VERSION = 1;

/** Which of a principal's calls a history query counts: all of them, one run's, or one grant's (jti). */
export type HistoryQueryScope = "principal" | "run" | "grant";
/** One history question (the same shape as governance's HistoryQuery, declared here because the store layer cannot import governance). */
export type HistoryQuerySpec =
  | { kind: "count"; tool: string; upstream?: string; withinMs: number; scope: HistoryQueryScope }
  | { kind: "total"; tool: string; upstream?: string; arg: string; withinMs: number; scope: HistoryQueryScope }
  | { kind: "succeeded"; tool: string; upstream?: string; scope: "run" };
/** One admitted call as HistoryDO keeps it (governance's HistoryEntry). */
export interface HistoryCall {
  callId: string;
  /** The principal whose object this is: an object refuses a call of another principal. */
  principal: string;
  jti?: string;
  runId: string | null;
  exposedName: string;
  /** The stable identity: the upstream and its own name for the tool (absent on calls recorded before it was kept). */
  upstream?: string;
  tool?: string;
  /** Numeric arguments by dotted path. */
  numbers: Record<string, number>;
  /** When the call was admitted (ms since epoch). */
  at: number;
}
/** A call's status: admitted, then the outcome status the ledger records (OutcomeBody's). */
export type HistoryCallStatus = "admitted" | OutcomeBody["status"];
/** Budget limits of one call (governance's BudgetLimits). */
export interface HistoryBudget {
  grantCalls?: number;
  runCalls?: number;
}
export type HistoryAdmission = { ok: true } | { ok: false; budget: "grant" | "run"; used: number; limit: number };

/**
 * The HistoryDO RPC surface: one object per principal (`principal:<sub>` in the HISTORY
 * namespace), holding that principal's recent calls and its grant and run budget counters.
 */
export interface HistoryApi {
  /** The answer to each query, in query order (a count or total is a number, `succeeded` a boolean). Reads never create state. */
  snapshot(jti: string | null, runId: string | null, queries: HistoryQuerySpec[], now: number): Promise<Array<number | boolean>>;
  /** Atomically: if admitting `call` keeps both limits, records it and answers ok; otherwise records nothing and names the budget. */
  admit(call: HistoryCall, limits: HistoryBudget): Promise<HistoryAdmission>;
  /** The call's outcome; only an admitted, unsettled call changes. */
  settle(callId: string, status: Exclude<HistoryCallStatus, "admitted">): Promise<void>;
}
