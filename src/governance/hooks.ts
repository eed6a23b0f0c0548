/**
 * The governance seam of the tools/call path (DESIGN steps 4–13). Owns the hook contract, the
 * grant check made before any routing (outsideGrant), and the hook that exists before policy
 * lands: the upstream's allow/deny globs.
 * Must never: let a call through when a hook throws (the caller treats a throw as a denial).
 */
import type { UpstreamConfig } from "../config/load.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { grantAllowsTool } from "./grant-scope.ts";
import { type Principal } from "../config/principal.ts";
import { toolAllowed } from "./grant-scope.ts";

export interface ToolCall {
  principal: string;
  /** The caller's grant. */
  who: Principal;
  upstream: UpstreamConfig;
  /** The upstream's own tool name. */
  tool: string;
  /** The name the client used. */
  exposedName: string;
  arguments: JsonObject | undefined;
}

export type Verdict =
  | { kind: "allow" }
  /** The tool is not visible to this caller: answered exactly like an unknown tool. */
  | { kind: "unknown" }
  | { kind: "deny"; reason: string };

export interface CallHook {
  name: string;
  before(call: ToolCall): Promise<Verdict> | Verdict;
}

export const upstreamAllowDeny: CallHook = {
  name: "upstream-allow-deny",
  before: (call) => (toolAllowed(call.upstream, call.tool) ? { kind: "allow" } : { kind: "unknown" }),
};

/**
 * Why a call is outside the caller's grant, or null. The answer is the same whether or not the
 * tool exists, so a denial reveals nothing about tools the grant cannot see.
 */
export function outsideGrant(who: Principal, exposedName: string): string | null {
  return grantAllowsTool(who, exposedName) ? null : `tool "${exposedName}" is outside the grant of ${who.sub}; it cannot be listed or called with this grant`;
}

/** The grant is checked before routing (dispatch.ts, via outsideGrant); hooks run on routed calls. */
export const defaultHooks: CallHook[] = [upstreamAllowDeny];

/** Runs hooks in order; the first non-allow verdict wins; a throwing hook denies (fail closed). */
export async function decide(call: ToolCall, hooks: CallHook[] = defaultHooks): Promise<Verdict> {
  for (const h of hooks) {
    let v: Verdict;
    try {
      v = await h.before(call);
    } catch (e) {
      return { kind: "deny", reason: `governance check ${h.name} failed (${(e as Error).message}); denied to fail closed` };
    }
    if (v.kind !== "allow") return v;
  }
  return { kind: "allow" };
}
