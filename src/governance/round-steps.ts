/**
 * The types of a governed call's input rounds (a 2025-11-25 upstream asking a 2026-07-28 client
 * mid-call, src/upstream/rounds.ts): what governance keeps with a parked call between rounds, and
 * the port that keeps it (built over RoundsDO by src/front/governance-ports.ts). The round's
 * reference and ledger record are steps.ts's (the leg and the ledger port name them). Types only; the path that uses them is call-settle.ts and
 * call-rounds.ts. Must never: hold logic.
 */
import type { Decision, OutcomeRecord, Receipt, RoundRef, Target, ToolCall } from "./steps.ts";

/** What governance keeps with a parked call between its rounds (plain JSON): the one decision and what settling it needs. */
export interface RoundState {
  receipt: Receipt | null;
  decision: Decision;
  callId: string;
  admitted: boolean;
  recorded: boolean;
  beforeHoldMs?: number;
  /** When the first round's forward started (the outcome's duration spans every round). */
  startedAt: number;
}

/**
 * A governed call's input rounds (src/front/governance-ports.ts over RoundsDO): one decision, then
 * rounds until the one outcome. Absent where the front has no rounds.
 */
export interface CallRounds {
  /** Whether the call's requestState is a round token of the gateway's: it continues a parked call. */
  carries(call: ToolCall): boolean;
  /** The continued round's kept state, when its token holds for this caller, call and target and the round is current; else why not. */
  continuation(call: ToolCall, target: Target): Promise<{ ok: true; ref: RoundRef; state: RoundState } | { ok: false; reason: string }>;
  /** Keeps `state` with round `ref`, and the outcome to record if the client never completes it. */
  park(ref: RoundRef, state: RoundState, abandoned: OutcomeRecord): Promise<void>;
  /** Ends a parked call on the gateway's side (a halt): the upstream request is cancelled. */
  cancel(ref: RoundRef, reason: string): Promise<void>;
}
