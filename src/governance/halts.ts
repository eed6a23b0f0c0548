/**
 * Step 5 of a governed tools/call (docs/architecture.md), the kill switch: the halts as the
 * governed path reads them (HaltScope, Halt, KillSwitchState), the reader it is handed
 * (KillSwitchReader; src/ports/killswitch-client.ts reads KillSwitchDO through a per-isolate
 * cache of at most a second), the pass-through `NO_HALTS` for tests and routes without the
 * store, and `haltFor`, which halt covers a call. These shapes mirror the storage contract's
 * (durable-objects/contract-killswitch.ts), which governance may not import:
 * test/unit/mirrors.test.ts keeps them in step. Must never: read storage or a clock itself, or
 * let a rename of a tool or a re-spelling of a name lift a halt (covering more is safe).
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { lookAlike } from "../config/principal.ts";
import type { Refusal, ToolCall } from "./steps.ts";

export type HaltScope = "global" | "team" | "upstream" | "tool" | "principal" | "grant";
export interface Halt {
  scope: HaltScope;
  /** The team, upstream, exposed tool name, principal or grant jti; absent for global. */
  target?: string;
  reason: string;
}
export interface KillSwitchState {
  version: number;
  halts: Halt[];
}
/** Reads the current halts (KillSwitchDO, cached per isolate for at most a second: src/ports/killswitch-client.ts); throws when it cannot tell. */
export interface KillSwitchReader {
  read(): Promise<KillSwitchState>;
}
export const NO_HALTS: KillSwitchReader = { read: async () => ({ version: 0, halts: [] }) };

/**
 * The first halt that covers this call, as a refusal; null when nothing is halted for it. A tool
 * halt names the tool as agents call it, or (given `ownTool`) by its stable identity
 * (`<upstream>/<tool>`), its prefixed name or the upstream's own name, whichever naming the
 * upstream has now: a rename under the agents never lifts it (covering more is safe).
 */
export function haltFor(state: KillSwitchState, call: ToolCall, upstream: UpstreamConfig, ownTool?: string): Refusal | null {
  const p = call.principal;
  const covers = (h: Halt): boolean => {
    switch (h.scope) {
      case "global":
        return true;
      // Team and principal halts cover every spelling of their target (folded): a halt can only ever cover more.
      case "team":
        return h.target !== null && h.target !== undefined && lookAlike(h.target, p.team);
      case "upstream":
        return h.target === upstream.name;
      case "tool":
        return (
          h.target === call.exposedName ||
          (ownTool !== undefined && [ownTool, `${upstream.name}/${ownTool}`, `${upstream.name}__${ownTool}`].includes(h.target ?? ""))
        );
      case "principal":
        return h.target !== null && h.target !== undefined && lookAlike(h.target, p.sub);
      case "grant":
        return p.jti !== undefined && h.target === p.jti;
    }
  };
  const h = state.halts.find(covers);
  return h ? { check: "kill_switch", reason: `halted (${h.scope}${h.target ? ` ${h.target}` : ""}): ${h.reason}` } : null;
}
