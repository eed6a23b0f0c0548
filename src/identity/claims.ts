/**
 * Grant claim checks on a decoded JWT payload. Owns the claim rules shared by minting and
 * verification: `iss` in the accepted issuers, `aud` (string or array) containing an accepted audience,
 * `exp`/`nbf`/`iat` numeric and within the clock skew, lifetime `exp − iat` within the maximum,
 * `sub` and `team` names the gateway does not reserve (src/config/principal.ts: a signed grant for
 * team `_global` would write onto the gateway's own chain; a team not in its one lowercase form), `roles` known
 * roles, `tools` strings, `budget` (optional) of known fields, `jti` non-empty. Whether the `sub` has the
 * gateway's own spelling depends on the identity providers configured, so src/identity/auth.ts checks that. Must never: run on a payload whose signature was not verified
 * (verification calls it only after the signature check), throw, or put claim values into a
 * reason — reasons are fixed short strings.
 */
import { reservedNameProblem } from "../config/principal.ts";
import { isRole, type Budget, type Grant, type Role } from "../config/roles.ts";

export type ClaimCheck = {
  issuers: readonly string[];
  /** Accepted audiences; the token's `aud` must contain one of them. */
  audiences: readonly string[];
  /** Seconds since the epoch. */
  now: number;
  skew: number;
  maxLifetimeSeconds: number;
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isNumericDate(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v) && v >= 0;
}

function readBudget(v: unknown): Budget | string {
  if (!isRecord(v)) return "budget is not an object";
  const budget: Budget = {};
  for (const [key, value] of Object.entries(v)) {
    // Fail closed on a limit this gateway does not know how to enforce.
    if (key !== "calls") return "budget has an unknown field";
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) return "budget.calls is not a non-negative integer";
    budget.calls = value;
  }
  return budget;
}

/** The claim of a grant minted for another gateway: its issuer or its audience is not this gateway's. */
export type ForeignClaim = "iss" | "aud";

/** Returns the Grant, or a short reason why the claims are not acceptable (and which claim, when the grant is another gateway's). */
export function checkClaims(p: Record<string, unknown>, c: ClaimCheck): { grant: Grant } | { reason: string; foreign?: ForeignClaim } {
  const fail = (reason: string) => ({ reason });
  if (p.iss === undefined) return fail("missing iss");
  if (typeof p.iss !== "string") return fail("malformed iss");
  if (!c.issuers.includes(p.iss)) return { reason: "wrong iss", foreign: "iss" };
  const aud = p.aud;
  if (aud === undefined) return fail("missing aud");
  const auds = typeof aud === "string" ? [aud] : Array.isArray(aud) && aud.every((a) => typeof a === "string") ? (aud as string[]) : null;
  if (auds === null) return fail("malformed aud");
  const matched = c.audiences.find((a) => auds.includes(a));
  if (matched === undefined) return { reason: "wrong aud", foreign: "aud" };
  if (!isNumericDate(p.exp)) return fail("missing or malformed exp");
  if (c.now >= p.exp + c.skew) return fail("expired");
  if (!isNumericDate(p.nbf)) return fail("missing or malformed nbf");
  if (p.nbf > c.now + c.skew) return fail("not yet valid (nbf)");
  if (!isNumericDate(p.iat)) return fail("missing or malformed iat");
  if (p.iat > c.now + c.skew) return fail("iat in the future");
  if (p.exp <= p.iat) return fail("exp not after iat");
  if (p.exp - p.iat > c.maxLifetimeSeconds + c.skew) return fail("lifetime above the maximum");
  if (typeof p.sub !== "string" || p.sub.length === 0) return fail("missing sub");
  const badSub = reservedNameProblem("principal", p.sub);
  if (badSub) return fail(`sub refused: ${badSub}`);
  if (typeof p.team !== "string") return fail("missing or malformed team");
  const badTeam = reservedNameProblem("team", p.team);
  if (badTeam) return fail(`team refused: ${badTeam}`);
  if (!Array.isArray(p.roles)) return fail("roles is not an array");
  if (!p.roles.every(isRole)) return fail("unknown role");
  if (!Array.isArray(p.tools) || !p.tools.every((t) => typeof t === "string")) return fail("tools is not an array of strings");
  if (typeof p.jti !== "string" || p.jti.length === 0) return fail("missing jti");
  const grant: Grant = {
    sub: p.sub,
    team: p.team,
    roles: [...(p.roles as Role[])],
    tools: [...(p.tools as string[])],
    jti: p.jti,
    exp: p.exp,
    iat: p.iat,
    iss: p.iss,
    aud: matched,
  };
  if (p.budget !== undefined) {
    const budget = readBudget(p.budget);
    if (typeof budget === "string") return fail(budget);
    grant.budget = budget;
  }
  return { grant };
}
