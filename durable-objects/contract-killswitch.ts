/**
 * The kill switch's storage contract: the HaltRecord shape KillSwitchDO keeps, its snapshot, its
 * RPC surface, and the one home of the rules a well-formed change follows (the scopes, the target
 * and reason bounds: `killSwitchChangeProblem`), which KillSwitchDO (adding its actor check) and
 * the Worker's client (src/ports/killswitch-client.ts, before a change reaches the object) both run.
 * HaltRecord and the snapshot mirror governance's Halt and KillSwitchState (src/governance/halts.ts;
 * stateOf in the client converts), which this layer may not import: test/unit/mirrors.test.ts
 * keeps them in step. Owns those shapes, bounds and that pure check. Must never: hold state or
 * I/O, or accept a change the object would refuse (the object checks again on its side).
 */
import type { KillSwitchBody } from "../src/ledger/records.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/** Version of the HaltRecord shape. */
export const HALT_RECORD_VERSION = 1;
/** A halt's scope: the ledger's `killswitch.changed` record (KillSwitchBody) declares the names. */
export type HaltScopeName = KillSwitchBody["scope"];
/** Every scope a halt may have, in the order the docs list them. */
export const HALT_SCOPES = ["global", "team", "upstream", "tool", "principal", "grant"] as const satisfies readonly HaltScopeName[];
/** Longest target (team, upstream, exposed tool name, principal, grant jti) and actor accepted. */
export const MAX_TARGET_CHARS = 256;
/** Longest reason accepted. */
export const MAX_REASON_CHARS = 500;

export interface HaltRecord {
  /** Record shape version (HALT_RECORD_VERSION). */
  v: number;
  scope: HaltScopeName;
  /** The team, upstream, exposed tool name, principal or grant jti; null for global. */
  target: string | null;
  reason: string;
  /** Who halted (the admin's principal, from its token). */
  by: string;
  at: number;
}
/** The kill switch as it is: `version` grows with every change. */
export interface KillSwitchSnapshot {
  version: number;
  halts: HaltRecord[];
}
export type KillSwitchChange = { ok: true; changed: boolean; snapshot: KillSwitchSnapshot } | { ok: false; message: string };
/**
 * The KillSwitchDO RPC surface (one object, `global`). Every change is recorded as
 * `killswitch.changed` on the `_global` chain, durable before the change answers ok (no record,
 * no change).
 */
export interface KillSwitchApi {
  state(): Promise<KillSwitchSnapshot>;
  halt(scope: HaltScopeName, target: string | null, reason: string, by: string, signing: LedgerSigning): Promise<KillSwitchChange>;
  resume(scope: HaltScopeName, target: string | null, reason: string, by: string, signing: LedgerSigning): Promise<KillSwitchChange>;
}

/**
 * Why a change of scope, target and reason is refused (a readable sentence), or null when it is
 * well formed. Global halts take no target; every other scope needs one. The actor is not checked
 * here: KillSwitchDO checks it (durable-objects/killswitch.ts changeProblem), the Worker takes it
 * from a verified token.
 */
export function killSwitchChangeProblem(scope: unknown, target: unknown, reason: unknown): string | null {
  if (typeof scope !== "string" || !(HALT_SCOPES as readonly string[]).includes(scope)) return `scope must be one of ${HALT_SCOPES.join(", ")}`;
  if (scope === "global") {
    if (target !== null && target !== undefined) return "a global halt takes no target";
  } else {
    if (typeof target !== "string" || target === "") return `a ${scope} halt needs a target (the ${scope === "grant" ? "grant's jti" : scope})`;
    if (target.length > MAX_TARGET_CHARS) return `target must be at most ${MAX_TARGET_CHARS} characters`;
  }
  if (typeof reason !== "string" || reason.trim() === "") return "a reason is required";
  if (reason.length > MAX_REASON_CHARS) return `reason must be at most ${MAX_REASON_CHARS} characters`;
  return null;
}
