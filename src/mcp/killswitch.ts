/**
 * CONTRACT STUB (being implemented): the kill switch as the gateway reads and changes it — the
 * per-isolate reader (KillSwitchDO state cached for at most one second; unreadable → throws, so
 * the governed path refuses), the in-flight watch that cancels a running call upstream when a
 * halt covers it, and the status/halt/resume operations the API, operator tools, console and
 * CLI share. Must never: report an unknown state as "not halted", or cache state longer than one second.
 */
import type { HaltScopeName, KillSwitchSnapshot } from "../../durable-objects/records.ts";
import type { GatewayConfig, UpstreamConfig } from "../config/load.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import type { KillSwitchReader, LegResult, ToolCall } from "../governance/steps.ts";
import type { CallContext } from "./context.ts";

/** The isolate's reader of the kill switch (≤ 1 s stale). */
export function killSwitchReader(_env: Env): KillSwitchReader {
  throw new Error("killSwitchReader: not implemented yet");
}

/**
 * Runs one governed upstream leg so that a halt covering `call` while it runs cancels it: the
 * request is aborted, a legacy upstream gets `notifications/cancelled` for it, and the leg
 * reports `uncertain` with a reason naming the halt. `run` is handed the context to send with.
 */
export async function haltableLeg(_ctx: CallContext, _reader: KillSwitchReader, _call: ToolCall, _up: UpstreamConfig, run: (ctx: CallContext) => Promise<LegResult>): Promise<LegResult> {
  return run(_ctx);
}

export type KillSwitchResult = { ok: true; changed: boolean; snapshot: KillSwitchSnapshot } | { ok: false; status: 400 | 403 | 503; message: string };

/** The kill switch as it is now (never "unknown": unreadable → ok:false, 503). */
export async function killSwitchStatus(_env: Env): Promise<KillSwitchResult> {
  throw new Error("killSwitchStatus: not implemented yet");
}

/** Halts or resumes a scope as `by` (an admin, from its verified token); recorded on the ledger before it answers ok. */
export async function changeKillSwitch(
  _env: Env,
  _cfg: GatewayConfig,
  _by: Principal,
  _action: "halt" | "resume",
  _scope: HaltScopeName,
  _target: string | null,
  _reason: string,
): Promise<KillSwitchResult> {
  throw new Error("changeKillSwitch: not implemented yet");
}
