/**
 * Policy coverage: which rules of a compiled policy name tools that do not exist. Given the tools
 * the gateway knows (from the mappings offline, or the upstreams' live lists), `unmatchedRules`
 * finds every rule whose `match` names tools (by `tool`, or by `upstream` alone) and matches none
 * of them, and every history query whose tool glob counts no tool, each with the nearest real
 * names when the rule names one exactly ("did you mean get-sum"). `blocking` marks what must
 * refuse a config in enforce: a deciding (not observe) `deny` or `require_approval` rule, or a
 * rule carrying obligations, that matches nothing — a policy that says deny while the gateway
 * allows. Matching is the engine's own (policy.ts): `tool` over the exposed name, and over the
 * upstream's own name when the rule names an upstream. `matchedBefore` adds what the same rule
 * matched under the previous config or listing. Must never: do I/O, decide a call, or call a rule
 * dead when a tool it names exists.
 */
import type { PolicyConfig } from "../config/policy-schema.ts";
import { didYouMean } from "../config/problems.ts";
import { toolGlobMatch } from "../wire/glob.ts";
import type { CompiledPolicy, CompiledRule } from "./policy-compile.ts";
import { namesTool } from "./policy.ts";

/** One tool as the gateway would expose it: its stable identity (upstream, the upstream's own name) and its exposed name. */
export interface KnownTool {
  upstream: string;
  tool: string;
  exposed: string;
}

/** A rule (or one of its history queries) that names no tool that exists. */
export interface UnmatchedRule {
  rule: string;
  decision: CompiledRule["decision"];
  observe: boolean;
  /** Where in the rule: `match` or `history.<kind>.tool`. */
  where: string;
  /** The names or globs it gives there. */
  names: string[];
  /** The nearest real names to the exact names it gives (empty when none is close, or for globs). */
  nearest: string[];
  /** In enforce, this refuses the config: a deciding deny or require_approval rule, or one with obligations, that matches no tool. */
  blocking: boolean;
  /** What the same rule (by id) matched before — under the config served until now, or in the previous listing (`matchedBefore`). */
  before?: { when: string; names: string[] };
}

/** Most names a report quotes of what a rule matched before. */
const MAX_BEFORE = 5;

/**
 * Each unmatched rule with what the rule of the same id in `policy` (the config served until now,
 * or the same policy at an earlier listing) matched among `tools` there (`when` says which, e.g.
 * "under the served config"): the tool the typo or the rename lost. A rule that is new, or that
 * matched nothing then too, is returned as it is.
 */
export function matchedBefore(unmatched: readonly UnmatchedRule[], policy: CompiledPolicy, tools: readonly KnownTool[], when: string): UnmatchedRule[] {
  return unmatched.map((u) => {
    const r = policy.rules.find((x) => x.id === u.rule);
    if (!r) return u;
    const kind = /^history\.(count|total|succeeded)\.tool$/.exec(u.where)?.[1];
    const q = kind ? r.historyQueries.find((h) => h.kind === kind) : undefined;
    if (kind && !q) return u;
    const hits = tools.filter((t) => (q ? toolGlobMatch(q, t) : namesTool(r, t))).map((t) => t.exposed);
    const names = [...new Set(hits)];
    return names.length ? { ...u, before: { when, names: names.slice(0, MAX_BEFORE) } } : u;
  });
}

const isGlob = (g: string) => /[*?]/.test(g);

function matchesSome(r: CompiledRule, tools: readonly KnownTool[]): boolean {
  return tools.some((t) => namesTool(r, t));
}

/**
 * The nearest real names to the exact names given: a tool whose own name is exactly the name (it
 * was renamed for agents by namespacing: its exposed name), else the closest by edit distance.
 */
function nearestOf(names: readonly string[], candidates: readonly string[], tools: readonly KnownTool[] = []): string[] {
  const out = new Set<string>();
  for (const n of names) {
    if (isGlob(n)) continue;
    const renamed = tools.filter((t) => t.tool === n && t.exposed !== n).map((t) => t.exposed);
    if (renamed.length) {
      for (const r of renamed) out.add(r);
      continue;
    }
    const near = didYouMean(n, candidates);
    if (near !== undefined) out.add(near);
  }
  return [...out];
}

const asList = (v: string | string[] | undefined): string[] | undefined => (v === undefined ? undefined : Array.isArray(v) ? v : [v]);

/**
 * The rules of `policy` (compiled from `source`, the config's `policy:` section) that name tools
 * none of `tools` is, and the history queries that count none. The compiled rules keep only
 * predicates, so a report quotes each rule's `match.tool` and `match.upstream` from `source`.
 */
export function unmatchedRules(policy: CompiledPolicy, tools: readonly KnownTool[], source: PolicyConfig): UnmatchedRule[] {
  const texts = new Map((source.rules ?? []).map((r) => [r.id, { tool: asList(r.match?.tool), upstream: asList(r.match?.upstream) }]));
  const globsOf = (id: string): { tool?: string[]; upstream?: string[] } => texts.get(id) ?? {};
  const out: UnmatchedRule[] = [];
  const exposed = [...new Set(tools.map((t) => t.exposed))];
  const own = [...new Set(tools.map((t) => t.tool))];
  const upstreams = [...new Set(tools.map((t) => t.upstream))];
  for (const r of policy.rules) {
    const blocking = !r.observe && (r.decision !== "allow" || r.obligations.length > 0);
    if ((r.tool || r.upstream) && !matchesSome(r, tools)) {
      const g = globsOf(r.id);
      const names = [...(g.upstream ?? []).map((u) => `upstream ${u}`), ...(g.tool ?? [])];
      const nearest = [
        ...nearestOf(g.tool ?? [], r.upstream ? [...own, ...exposed] : exposed, r.upstream ? [] : tools),
        ...nearestOf(g.upstream ?? [], upstreams),
      ];
      out.push({ rule: r.id, decision: r.decision, observe: r.observe, where: "match", names, nearest, blocking });
    }
    for (const q of r.historyQueries) {
      if (tools.some((t) => toolGlobMatch(q, t))) continue;
      // A history query that counts nothing makes its rule read 0 / false: report it; it refuses like its rule would.
      out.push({
        rule: r.id,
        decision: r.decision,
        observe: r.observe,
        where: `history.${q.kind}.tool`,
        names: q.upstream === undefined ? [q.tool] : [`upstream ${q.upstream}`, q.tool],
        nearest:
          q.upstream === undefined
            ? nearestOf([q.tool], exposed, tools)
            : [...nearestOf([q.tool], [...own, ...exposed]), ...nearestOf([q.upstream], upstreams)],
        blocking,
      });
    }
  }
  return out;
}

/** One line for a report: `rule no-env (deny): match names get-envv, which matches no tool of the 12 known — did you mean "get-env"?` */
export function describeUnmatched(u: UnmatchedRule, known: number): string {
  const kind = `${u.decision}${u.observe ? ", observe" : ""}`;
  const what = u.names.length ? u.names.map((n) => JSON.stringify(n)).join(", ") : "(nothing)";
  const near = u.nearest.length ? ` — did you mean ${u.nearest.map((n) => JSON.stringify(n)).join(" or ")}?` : "";
  const before = u.before ? ` (${u.before.when} it matched ${u.before.names.map((n) => JSON.stringify(n)).join(", ")})` : "";
  return `rule ${u.rule} (${kind}): ${u.where} names ${what}, which matches no tool of the ${known} known${before}${near}`;
}
