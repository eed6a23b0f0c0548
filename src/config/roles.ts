/**
 * The verified grant and its roles. Owns the Grant shape that the rest of the gateway consumes
 * (principal, team, roles, tool globs, optional budget, token id and times) and the role rule:
 * `admin` implies every role; otherwise roles are flat — `operator` does not imply `approver`,
 * `approver` does not imply `auditor`, and nothing implies `agent` except `admin`. Must never:
 * grant a role for an unknown role name, or let anything but a verified token produce a Grant
 * (see tokens.ts; this file holds only types and pure helpers).
 */

/** Every role a grant may carry. A token naming any other role is rejected. */
export const ROLES = ["agent", "auditor", "approver", "operator", "admin"] as const;

export type Role = (typeof ROLES)[number];

/** Optional per-grant limits; `calls` = the most governed tool calls the grant may make. */
export type Budget = { calls?: number };

export type Grant = {
  /** Principal, e.g. `agent:triage-bot` or `human:leo`. */
  sub: string;
  team: string;
  roles: Role[];
  /** Globs over exposed tool names. */
  tools: string[];
  budget?: Budget;
  /** Token id (≥ 128 random bits), the revocation key together with `iss`. */
  jti: string;
  /** Expiry and issue time, seconds since the epoch. */
  exp: number;
  iat: number;
  iss: string;
  /** The audience this token was verified for (this gateway's canonical URL). */
  aud: string;
};

export function isRole(value: unknown): value is Role {
  return typeof value === "string" && (ROLES as readonly string[]).includes(value);
}

/** Whether the grant holds `role`. `admin` implies every role; the others imply only themselves. */
export function hasRole(grant: Pick<Grant, "roles">, role: Role): boolean {
  return grant.roles.includes("admin") || grant.roles.includes(role);
}
