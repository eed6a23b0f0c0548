/**
 * The policy's view of one tool for everyone (the start banner, `classify`, the console's Tools
 * page): `toolPolicy` says what a call with no other facts gets — the rule that always decides it,
 * or the baseline — whether agents see it at all, and which rules apply only sometimes (a
 * condition, a history query, a window, a principal, team or role). Built on policy.ts's matching
 * and baseline, so it cannot disagree with `evaluate`. Must never: decide a call, or be read on a
 * tools/call's path.
 */
import type { Principal } from "../config/principal.ts";
import { baseline, type ListFacts, type PolicyFacts, staticMatch } from "./policy.ts";
import type { CompiledPolicy, CompiledRule } from "./policy-compile.ts";

/** What the policy makes of one tool for everyone (the start banner, the console's Tools page). */
export interface ToolPolicy {
  /** What a call with no other facts gets: a deciding rule that always applies, else the baseline. */
  decision: "allow" | "deny" | "require_approval";
  /** The rule that decides it always, or null (the baseline decides). */
  rule: string | null;
  /** Hidden from every agent's tools/list (an unconditional deny, in enforce). */
  hidden: boolean;
  /** The other rules that may apply: `require_approval when args.a + args.b > 100 (rule demo-big-sums)`. */
  sometimes: string[];
}

/**
 * The policy's view of one tool, independent of any caller: the rules whose tool, upstream and
 * classification fields match it; those without a condition or a principal, team or role field
 * decide it always (deny over require_approval over allow), the rest "sometimes", each with its
 * condition. Observe rules are left out (they never decide). Pure.
 */
export function toolPolicy(
  p: CompiledPolicy,
  f: Pick<PolicyFacts, "exposedName" | "upstream" | "tool" | "classification" | "mapping" | "annotations">,
): ToolPolicy {
  const anyone = { sub: "", team: "", roles: [], tools: null, authenticated: true } as unknown as Principal;
  const facts = { ...f, principal: anyone } as ListFacts;
  const always: CompiledRule[] = [];
  const sometimes: string[] = [];
  for (const r of p.rules) {
    if (r.observe) continue;
    const forWhom = [r.principal ? "some principals" : "", r.team ? "some teams" : "", r.roles ? `role ${r.roles.join("|")}` : ""].filter(Boolean);
    if (!staticMatch({ ...r, principal: null, team: null, roles: null }, facts)) continue;
    if (r.unconditional && forWhom.length === 0) {
      always.push(r);
      continue;
    }
    const conds = [
      ...(r.when ? [`when ${r.when.source}`] : []),
      ...(r.history ? ["by history"] : []),
      ...(r.magnitudeOver !== null ? [`over ${r.magnitudeOver}`] : []),
    ];
    if (r.window) conds.push("in its time window");
    if (forWhom.length) conds.push(`for ${forWhom.join(", ")}`);
    sometimes.push(`${r.decision} ${conds.join(" ")} (rule ${r.id})`);
  }
  const top = always.find((r) => r.decision === "deny") ?? always.find((r) => r.decision === "require_approval") ?? always[0];
  if (top) return { decision: top.decision, rule: top.id, hidden: p.mode === "enforce" && top.decision === "deny", sometimes };
  const b = baseline(p, { ...(facts as PolicyFacts), arguments: undefined, runId: null, now: 0, history: { answers: {} } });
  return { decision: b.decision, rule: null, hidden: false, sometimes };
}
