/**
 * Compiling a policy (the engine's first half; evaluation is policy.ts): a validated `policy:`
 * section becomes rules whose matchers are built once — globs, role and classification sets, CEL
 * conditions (policy-cel.ts), durations, time windows, history queries, obligations — and the
 * policy's version (SHA-256 of the RFC 8785 JSON of the policy, mode and unclassified_reads).
 * Every problem is reported at once as a `PolicyError`. Must never: compile lazily per call, or
 * accept a rule it cannot evaluate (a CEL expression that does not parse, a history query that
 * `when` does not read).
 */
import { durationMs, type PolicyConfig, type PolicyRuleConfig, parseHours, parseObligation, RULE_ID } from "../config/policy-schema.ts";
import { canonicalHash } from "../wire/canonical.ts";
import { globMatch } from "../wire/glob.ts";
import type { Json } from "../wire/jsonrpc.ts";
import { type CompiledCondition, compileCondition } from "./policy-cel.ts";
import type { HistoryQuery, Mode, Obligation } from "./steps.ts";

export class PolicyError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid policy:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.problems = problems;
  }
}

export type Verdict = "allow" | "deny" | "require_approval";
export type Pred = (s: string) => boolean;

export interface CompiledWindow {
  /** Bit d set ⇔ UTC day d (0 = Sunday) is in the window. */
  days: number;
  hours: { start: number; end: number } | null;
  outside: boolean;
}
export interface RuleHistory {
  count?: Extract<HistoryQuery, { kind: "count" }>;
  total?: Extract<HistoryQuery, { kind: "total" }>;
  succeeded?: Extract<HistoryQuery, { kind: "succeeded" }>;
}
/** One rule, compiled. Opaque to callers beyond its id. */
export interface CompiledRule {
  readonly id: string;
  readonly decision: Verdict;
  readonly reason: string;
  readonly owner: string | undefined;
  readonly obligations: readonly Obligation[];
  readonly observe: boolean;
  /** No when, history, magnitude or window: its match alone decides (listVerdict). */
  readonly unconditional: boolean;
  readonly tool: Pred | null;
  readonly upstream: Pred | null;
  readonly principal: Pred | null;
  readonly team: Pred | null;
  readonly roles: readonly string[] | null;
  readonly effect: ReadonlySet<string> | null;
  readonly blastRadius: ReadonlySet<string> | null;
  readonly externality: ReadonlySet<string> | null;
  readonly reversibility: ReadonlySet<string> | null;
  readonly window: CompiledWindow | null;
  readonly magnitudeOver: number | null;
  readonly history: RuleHistory | null;
  readonly historyQueries: readonly HistoryQuery[];
  readonly when: CompiledCondition | null;
}
export interface CompiledPolicy {
  /** SHA-256 hex of the RFC 8785 JSON of `{policy, mode, unclassified_reads}`. */
  readonly version: string;
  readonly mode: Mode;
  readonly unclassifiedReads: "block" | "observe";
  readonly rules: readonly CompiledRule[];
  readonly budgets: { readonly runCalls?: number; readonly grantCalls?: number };
  /** Whether admitted calls must be kept in history: some rule has a history query or a `rate_limit` obligation. */
  readonly usesHistory: boolean;
}

export const DAY_INDEX: Record<string, number> = { sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6 };
const list = <T>(v: T | T[] | undefined): T[] | null => (v === undefined ? null : Array.isArray(v) ? v : [v]);

/** Globs compiled to one predicate: `*` always, literal names by set lookup, the rest via wire/glob (compiled, cached). */
function globs(v: string | string[] | undefined): Pred | null {
  const all = list(v);
  if (!all) return null;
  if (all.includes("*")) return () => true;
  const exact = new Set(all.filter((g) => !/[*?]/.test(g)));
  const wild = all.filter((g) => /[*?]/.test(g));
  for (const g of wild) globMatch(g, ""); // compile now, not on the first call
  if (wild.length === 0) return (s) => exact.has(s);
  return (s) => exact.has(s) || wild.some((g) => globMatch(g, s));
}
const set = (v: string | string[] | undefined): Set<string> | null => {
  const all = list(v);
  return all ? new Set(all) : null;
};

function compileRule(r: PolicyRuleConfig, at: string, problems: string[]): CompiledRule | null {
  const before = problems.length;
  if (typeof r.id !== "string" || !RULE_ID.test(r.id)) problems.push(`${at}.id: rule ids are letters, digits and _ . : -`);
  if (typeof r.reason !== "string" || r.reason.length === 0) problems.push(`${at}.reason: a rule needs a reason the model can read`);
  if (r.decision !== "allow" && r.decision !== "deny" && r.decision !== "require_approval")
    problems.push(`${at}.decision: must be allow, deny or require_approval`);

  const obligations: Obligation[] = [];
  (r.obligations ?? []).forEach((spec, j) => {
    const o = typeof spec === "string" ? parseObligation(spec) : { problem: "an obligation is a spec string" };
    if ("problem" in o) problems.push(`${at}.obligations[${j}]: ${o.problem}`);
    else obligations.push(o);
  });

  let window: CompiledWindow | null = null;
  if (r.window) {
    let days = 0;
    for (const d of r.window.days ?? Object.keys(DAY_INDEX)) {
      const i = DAY_INDEX[d];
      if (i === undefined) problems.push(`${at}.window.days: unknown day "${d}"`);
      else days |= 1 << i;
    }
    const hours = r.window.hours === undefined ? null : parseHours(r.window.hours);
    if (r.window.hours !== undefined && !hours) problems.push(`${at}.window.hours: use "HH:MM-HH:MM" in UTC`);
    window = { days, hours, outside: r.window.outside === true };
  }

  let history: RuleHistory | null = null;
  const historyQueries: HistoryQuery[] = [];
  if (r.history) {
    history = {};
    const within = (v: number | string, where: string): number => {
      const ms = durationMs(v);
      if (ms === null) problems.push(`${at}.history.${where}.within: not a duration`);
      return ms ?? 0;
    };
    const h = r.history;
    // With an upstream, a query counts by the stable identity (wire/glob.ts toolGlobMatch).
    const on = (q: { upstream?: string | undefined }) => (q.upstream === undefined ? {} : { upstream: q.upstream });
    if (h.count)
      history.count = { kind: "count", tool: h.count.tool, ...on(h.count), withinMs: within(h.count.within, "count"), scope: h.count.scope ?? "principal" };
    if (h.total)
      history.total = {
        kind: "total",
        tool: h.total.tool,
        ...on(h.total),
        arg: h.total.arg,
        withinMs: within(h.total.within, "total"),
        scope: h.total.scope ?? "principal",
      };
    if (h.succeeded) history.succeeded = { kind: "succeeded", tool: h.succeeded.tool, ...on(h.succeeded), scope: "run" };
    for (const q of [history.count, history.total, history.succeeded]) if (q) historyQueries.push(q);
    if (historyQueries.length === 0) problems.push(`${at}.history: name at least one of count, total, succeeded`);
  }

  let when: CompiledCondition | null = null;
  if (r.when !== undefined) {
    const c = compileCondition(r.when);
    if ("problem" in c) problems.push(`${at}.when: ${c.problem}`);
    else {
      when = c;
      if (c.readsHistory && !history) problems.push(`${at}.when: reads history, but the rule declares no history query`);
    }
  }
  if (history && !(when?.readsHistory ?? false) && r.when === undefined)
    problems.push(`${at}.history: a history query needs a when condition that reads it (e.g. history.count >= 2)`);
  else if (history && when && !when.readsHistory) problems.push(`${at}.history: the rule's when condition never reads history`);

  const magnitudeOver = r.magnitude === undefined ? null : r.magnitude.over;
  if (magnitudeOver !== null && !Number.isFinite(magnitudeOver)) problems.push(`${at}.magnitude.over: must be a finite number`);

  if (problems.length > before) return null;
  const m = r.match ?? {};
  return {
    id: r.id,
    decision: r.decision,
    reason: r.reason,
    owner: r.owner,
    obligations,
    observe: r.mode === "observe",
    unconditional: when === null && history === null && magnitudeOver === null && window === null,
    tool: globs(m.tool),
    upstream: globs(m.upstream),
    principal: globs(m.principal),
    team: globs(m.team),
    roles: list(m.role),
    effect: set(m.effect),
    blastRadius: set(m.blast_radius),
    externality: set(m.externality),
    reversibility: set(m.reversibility),
    window,
    magnitudeOver,
    history,
    historyQueries,
    when,
  };
}

/** Compiles a validated policy once; every problem at once (PolicyError). */
export function compilePolicy(cfg: PolicyConfig, opts: { mode: Mode; unclassifiedReads: "block" | "observe" }): CompiledPolicy {
  const problems: string[] = [];
  const rules: CompiledRule[] = [];
  const seen = new Map<string, number>();
  (cfg.rules ?? []).forEach((r, i) => {
    const prev = seen.get(r.id);
    if (prev !== undefined) problems.push(`policy.rules[${i}].id: duplicate rule id "${r.id}" (also rules[${prev}])`);
    else seen.set(r.id, i);
    const c = compileRule(r, `policy.rules[${i}]`, problems);
    if (c) rules.push(c);
  });
  if (opts.mode !== "enforce" && opts.mode !== "advise" && opts.mode !== "observe") problems.push(`mode: must be enforce, advise or observe`);
  if (opts.unclassifiedReads !== "block" && opts.unclassifiedReads !== "observe") problems.push(`unclassified_reads: must be block or observe`);
  let version = "";
  try {
    version = canonicalHash({ policy: cfg as unknown as Json, mode: opts.mode, unclassified_reads: opts.unclassifiedReads });
  } catch (e) {
    problems.push(`policy: has no canonical JSON form (${(e as Error).message})`);
  }
  if (problems.length) throw new PolicyError(problems);
  const budgets: { runCalls?: number; grantCalls?: number } = {};
  if (cfg.budgets?.run) budgets.runCalls = cfg.budgets.run.calls;
  if (cfg.budgets?.grant) budgets.grantCalls = cfg.budgets.grant.calls;
  const usesHistory = rules.some((r) => r.historyQueries.length > 0 || r.obligations.some((o) => o.kind === "rate_limit"));
  return { version, mode: opts.mode, unclassifiedReads: opts.unclassifiedReads, rules, budgets, usesHistory };
}
