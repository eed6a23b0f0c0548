/**
 * Grant scope: which tools and upstreams a principal's grant reaches, and which tools an
 * upstream's own allow/deny globs let through. Pure questions over the principal and the
 * config. Must never: widen a grant, or answer for a tool name it was not given.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { globMatch } from "../wire/glob.ts";

/** Whether the grant lets this principal see and call the tool with this exposed name. */
export function grantAllowsTool(p: Principal, exposedName: string): boolean {
  return p.tools === null || p.tools.some((g) => globMatch(g, exposedName));
}

/** The literal text of a glob before its first wildcard. */
function literalPrefix(glob: string): string {
  const i = glob.search(/[*?]/);
  return i < 0 ? glob : glob.slice(0, i);
}

/**
 * Whether any tool of `up` could match the grant (prompts and resources of unreachable
 * upstreams are hidden). Conservative: a glob whose literal prefix is shorter than the
 * `<name>__` prefix reaches the upstream if the prefixes agree.
 */
export function grantReachesUpstream(p: Principal, up: UpstreamConfig): boolean {
  if (p.tools === null) return true;
  if (!up.namespaced) return p.tools.length > 0;
  const prefix = `${up.name}__`;
  return p.tools.some((g) => {
    const lit = literalPrefix(g);
    return lit.startsWith(prefix) || prefix.startsWith(lit);
  });
}

/** The upstream's allow/deny rules over its own (un-prefixed) tool names. Deny wins. */
export function toolAllowed(up: UpstreamConfig, toolName: string): boolean {
  if (up.deny.some((g) => globMatch(g, toolName))) return false;
  if (up.allow.length === 0) return true;
  return up.allow.some((g) => globMatch(g, toolName));
}
