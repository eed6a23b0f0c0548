/**
 * Separation of duties for held calls: who may resolve (approve or reject) a hold, and who may
 * see a team's holds at all — pure functions of the `holds` config, the approver's verified
 * principal and the hold's immutable facts (requester, team, rule). The order is fixed: the
 * requester never resolves its own hold (by `sub`, compared folded — case, width, Unicode
 * compatibility — so no spelling of the requester's name can approve: names are canonical where
 * they enter, src/config/principal.ts, and this fold only ever denies); a rule named in `holds.unresolvable` is
 * resolved by nobody, admin included; an admin resolves any other; everyone else needs a
 * `holds.resolvers` entry whose rule globs, roles and teams all match. A hold a mapping's
 * `approval` asked for has no rule id and is matched as `(mapping)`. Must never: read storage, a
 * clock or a request (identity comes only from the principal handed in), or let anything but a
 * matching entry (or admin) resolve a hold.
 */
import type { HoldsConfig } from "../config/gateway-config.ts";
import { lookAlike, type Principal, principalHas } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import { globMatch } from "../wire/glob.ts";

/** The rule id a hold is matched as: its policy rule, or `(mapping)` for a mapping's `approval`. */
export const MAPPING_RULE = "(mapping)";

/** What the decision needs of a hold: who raised it, in which team, under which rule. */
export interface HoldFacts {
  principal: string;
  team: string;
  rule: string | null;
}

export type MayResolve = { ok: true } | { ok: false; why: string; status: 403 };

/** The roles that read holds (of their own team; admin of every team). */
export const HOLD_VIEWER_ROLES: readonly Role[] = ["approver", "auditor", "operator", "admin"];

function ruleOf(hold: HoldFacts): string {
  return hold.rule ?? MAPPING_RULE;
}

/** Whether a resolver entry's `teams` cover `team` for an approver of `own` team: absent → own team only; `*` → any. */
function teamCovered(teams: string[] | undefined, own: string, team: string): boolean {
  if (teams === undefined) return own === team;
  return teams.includes("*") || teams.includes(team);
}

/** Whether `approver` (from its own verified token) may approve or reject `hold`; the reason when not. */
export function mayResolve(holds: HoldsConfig, approver: Principal, hold: HoldFacts): MayResolve {
  if (lookAlike(approver.sub, hold.principal))
    return {
      ok: false,
      status: 403,
      why:
        approver.sub === hold.principal
          ? `${approver.sub} raised this hold and cannot resolve it (separation of duties)`
          : `${approver.sub} is a spelling of ${hold.principal}, who raised this hold, and cannot resolve it (separation of duties)`,
    };
  const rule = ruleOf(hold);
  const locked = holds.unresolvable.find((g) => globMatch(g, rule));
  if (locked !== undefined)
    return {
      ok: false,
      status: 403,
      why: `holds of rule ${rule} cannot be resolved by anyone (holds.unresolvable: ${locked}); the call is denied when the hold expires`,
    };
  if (principalHas(approver, "admin")) return { ok: true };
  const fits = holds.resolvers.some(
    (r) => r.rules.some((g) => globMatch(g, rule)) && r.roles.some((role) => principalHas(approver, role)) && teamCovered(r.teams, approver.team, hold.team),
  );
  if (fits) return { ok: true };
  return {
    ok: false,
    status: 403,
    why: `${approver.sub} (team ${approver.team}, roles ${approver.roles.join(", ") || "none"}) may not resolve holds of rule ${rule} in team ${hold.team} (holds.resolvers)`,
  };
}

/**
 * Whether `viewer` may see team `team`'s holds: an approver, auditor or operator of that team, an
 * admin of any, or a principal holding a role of a resolver entry that names `team` (or `*`).
 */
export function maySeeTeam(holds: HoldsConfig, viewer: Principal, team: string): boolean {
  if (principalHas(viewer, "admin")) return true;
  if (viewer.team === team && HOLD_VIEWER_ROLES.some((r) => principalHas(viewer, r))) return true;
  return holds.resolvers.some(
    (r) => r.teams !== undefined && (r.teams.includes("*") || r.teams.includes(team)) && r.roles.some((role) => principalHas(viewer, role)),
  );
}
