/**
 * Who is calling: the principal a request runs as, after authentication. Owns the shape every
 * other module reads and the role question. Must never: hold the token itself (only its jti),
 * or widen a grant.
 */
import { type Budget, hasRole, type Role } from "./roles.ts";

export interface Principal {
  /** e.g. `agent:triage-bot`, `human:leo`, or the configured actor when unauthenticated. */
  sub: string;
  team: string;
  roles: Role[];
  /** Globs over exposed tool names; null means every tool (the unauthenticated loopback actor). */
  tools: string[] | null;
  authenticated: boolean;
  jti?: string;
  /** When the grant (or external token) stops verifying, seconds since the epoch; absent for the unauthenticated actor. */
  exp?: number;
  budget?: Budget;
}

/** `admin` holds every role; the others are independent (roles.ts owns the rule). */
export function principalHas(p: Principal, role: Role): boolean {
  return hasRole(p, role);
}
