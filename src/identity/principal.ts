/**
 * Who is calling: the principal a request runs as, after authentication. Owns the shape every
 * other module reads and the grant-scope questions (may this principal see a tool, an upstream).
 * Must never: hold the token itself (only its jti), or widen a grant.
 */
import type { UpstreamConfig } from "../config/load.ts";
import { globMatch } from "../mcp/names.ts";

import { hasRole, type Role } from "./grant.ts";

export type { Role };

export interface Principal {
  /** e.g. `agent:triage-bot`, `human:leo`, or the configured actor when unauthenticated. */
  sub: string;
  team: string;
  roles: Role[];
  /** Globs over exposed tool names; null means every tool (the unauthenticated loopback actor). */
  tools: string[] | null;
  authenticated: boolean;
  jti?: string;
  budget?: { calls?: number };
}

/** `admin` holds every role; the others are independent (grant.ts owns the rule). */
export function principalHas(p: Principal, role: Role): boolean {
  return hasRole(p, role);
}

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
