/**
 * The deterministic policy engine: `compilePolicy` (policy-compile.ts) turns a validated `policy:` section into matchers compiled once (globs, CEL
 * conditions, durations, windows, obligations; every problem at once as a `PolicyError`), `evaluate` decides one call from the
 * facts it is handed, `historyQueries` says which history answers that needs, `listVerdict`
 * whether `tools/list` shows a tool, and `budgetLimits` which call budgets apply (a tool's
 * caller-independent view, for the banner and console, is policy-view.ts). Preview is
 * `evaluate` itself: it has no side effects. Must never: read storage, a clock or the network
 * (history, `now` and the mapping are handed in), throw from `evaluate`, or let an error turn into
 * "allow": a rule whose condition cannot be evaluated fails closed (it matches, as a deny).
 *
 * Semantics of `evaluate` (documented here because operators and the ledger rely on it):
 * - A rule matches when every `match` field holds (globs over the exposed tool name — or, when
 *   the rule also names an `upstream`, over that upstream's own tool name, the tool's stable
 *   identity: `{upstream: everything, tool: get-sum}` keeps matching whatever the tool is exposed
 *   as —, the upstream, principal and team; effect, blast radius, externality and reversibility of the
 *   classification; any of the roles), its `window` holds at `now` (UTC; `outside: true`
 *   inverts it; an overnight range such as 22:00-06:00 uses the day of `now`), its `magnitude`
 *   threshold is exceeded (a tool whose mapping declares no `magnitude.from_arg` has none, so
 *   the rule does not apply; a declared magnitude argument that is missing or not a number fails
 *   closed), and its `when` condition is true (history answers missing from the snapshot fail
 *   closed). Every matching rule is considered.
 * - Rules without `mode: observe` decide: deny overrides require_approval overrides allow. The
 *   decision names the first rule (in policy order) of the winning kind; its reason lists every
 *   rule of that kind (`rule <id>: <reason>`). Obligations are those of every matching allow and
 *   require_approval rule (an approved call keeps its masks), deduplicated, in rule order; a deny
 *   carries none.
 * - No deciding rule matches → the baseline: a mapped tool (classification.source "mapping") is
 *   allowed, or require_approval when its mapping says `approval: required`; an unmapped one is
 *   denied as unclassified — except with `unclassified_reads: observe` when its (untrusted)
 *   annotations say `readOnlyHint: true` and not `destructiveHint: true`: allowed, `unverifiedRead`.
 * - `mode: observe` rules never change the decision; the strongest of them that would block is
 *   recorded in `wouldBlock` when it is stronger than the effective decision.
 * - Gateway mode: `enforce` keeps the decision. `advise` and `observe` turn a deny or
 *   require_approval into "allow" (so the call runs, nothing is held) and record what enforce
 *   would have done in `wouldBlock` (the effective decision, or a stronger shadow rule);
 *   `rule` stays the rule that would have blocked. `mode` is the gateway's mode — except for
 *   facts so malformed that the policy cannot answer at all: that deny is applied in `enforce`
 *   whatever the gateway mode (fail closed, docs/architecture.md invariant 1).
 * - `owner` is the owner of the deny rule that decided (before the mode relaxed it); shadow
 *   rules and the baseline never set it (the grant's issuer is not known here).
 */
import type { Principal } from "../config/principal.ts";
import { hasRole } from "../config/roles.ts";
import type { Json, JsonObject } from "../wire/jsonrpc.ts";
import { type CelScope, runCondition } from "./policy-cel.ts";
import type { CompiledPolicy, CompiledRule, CompiledWindow, RuleHistory, Verdict } from "./policy-compile.ts";
import type { BudgetLimits, Classification, Decision, HistoryQuery, HistorySnapshot, Obligation } from "./steps.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";
import { historyKey } from "./steps.ts";

/** Everything one decision depends on, handed in by the governed path (or by preview). */
export interface PolicyFacts {
  principal: Principal;
  exposedName: string;
  upstream: string;
  /** The upstream's own tool name. */
  tool: string;
  arguments: JsonObject | undefined;
  classification: Classification;
  mapping: ToolMapping | undefined;
  /** The tool's annotations as its server sent them: untrusted hints. */
  annotations: JsonObject | undefined;
  runId: string | null;
  /** Evaluation time, ms since the epoch. */
  now: number;
  /** Answers to `historyQueries(policy, facts)`. */
  history: HistorySnapshot;
}
/** What `historyQueries` needs: the facts before history is fetched. */
export type PreHistoryFacts = Omit<PolicyFacts, "history">;
/** What `listVerdict` needs: no arguments, history or time (only unconditional rules hide a tool). */
export type ListFacts = Pick<PolicyFacts, "principal" | "exposedName" | "upstream" | "tool" | "classification">;

// ---- matching -----------------------------------------------------------------------------

/**
 * Whether the rule's `upstream` and `tool` globs name this tool: `tool` globs the exposed name; a
 * rule that also names an upstream matches that upstream's own tool name too — the stable
 * identity, which no namespacing change moves. Shared with engine.ts and policy-coverage.ts.
 */
export function namesTool(r: Pick<CompiledRule, "tool" | "upstream">, t: { exposed: string; upstream: string; tool: string }): boolean {
  if (r.upstream && !r.upstream(t.upstream)) return false;
  return !r.tool || r.tool(t.exposed) || (r.upstream !== null && r.tool(t.tool));
}

/** Whether the rule's match fields hold for these facts (no condition, window or magnitude). Shared with policy-view.ts. */
export function staticMatch(r: CompiledRule, f: ListFacts): boolean {
  if (!namesTool(r, { exposed: f.exposedName, upstream: f.upstream, tool: f.tool })) return false;
  const c = f.classification;
  if (r.effect && !r.effect.has(c.effect)) return false;
  if (r.blastRadius && !r.blastRadius.has(c.blastRadius)) return false;
  if (r.externality && !r.externality.has(c.axes.externality)) return false;
  if (r.reversibility && !r.reversibility.has(c.axes.reversibility)) return false;
  const p = f.principal;
  if (r.principal && !r.principal(p.sub)) return false;
  if (r.team && !r.team(p.team)) return false;
  if (r.roles && !r.roles.some((role) => hasRole(p, role as Principal["roles"][number]))) return false;
  return true;
}

/** Whether the rule's window holds at `now`; null when `now` is not a time (the rule then fails closed). */
function inWindow(w: CompiledWindow, now: number): boolean | null {
  if (!Number.isFinite(now)) return null;
  const d = new Date(now);
  const day = d.getUTCDay();
  if (Number.isNaN(day)) return null;
  let inside = (w.days & (1 << day)) !== 0;
  if (inside && w.hours) {
    const min = d.getUTCHours() * 60 + d.getUTCMinutes();
    const { start, end } = w.hours;
    inside = start < end ? min >= start && min < end : min >= start || min < end;
  }
  return w.outside ? !inside : inside;
}

function argAt(args: JsonObject | undefined, path: string): Json | undefined {
  let v: Json | undefined = args;
  for (const k of path.split(".")) {
    if (v === null || typeof v !== "object" || Array.isArray(v) || !Object.hasOwn(v, k)) return undefined;
    v = (v as JsonObject)[k];
  }
  return v;
}
const NUMERIC = /^-?\d+(\.\d+)?$/;

/** The call's magnitude: null when the mapping declares none, an error when the argument is missing or not a number. */
function magnitudeOf(f: PolicyFacts): number | null | { error: string } {
  const from = f.mapping?.magnitude?.fromArg;
  if (typeof from !== "string") return null;
  const v = argAt(f.arguments, from);
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (typeof v === "string" && NUMERIC.test(v)) return Number(v);
  return { error: v === undefined ? `the magnitude argument "${from}" is missing` : `the magnitude argument "${from}" is not a number` };
}

/** The rule's history answers as CEL sees them; an error when the snapshot lacks one. */
function historyScope(h: RuleHistory, snap: HistorySnapshot): { ok: Record<string, unknown> } | { error: string } {
  const out: Record<string, unknown> = {};
  const answers = snap && typeof snap === "object" && snap.answers && typeof snap.answers === "object" ? snap.answers : {};
  const get = (q: HistoryQuery): unknown => {
    const k = historyKey(q);
    return Object.hasOwn(answers, k) ? answers[k] : undefined;
  };
  if (h.count) {
    const v = get(h.count);
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) return { error: `the history answer for count of "${h.count.tool}" is missing` };
    out.count = BigInt(v);
  }
  if (h.total) {
    const v = get(h.total);
    if (typeof v !== "number" || !Number.isFinite(v))
      return { error: `the history answer for the total of "${h.total.arg}" over "${h.total.tool}" is missing` };
    out.total = v;
  }
  if (h.succeeded) {
    const v = get(h.succeeded);
    if (typeof v !== "boolean") return { error: `the history answer for whether "${h.succeeded.tool}" succeeded is missing` };
    out.succeeded = v;
  }
  return { ok: out };
}

function baseScope(f: PolicyFacts): CelScope {
  const c = f.classification;
  const classification: Record<string, unknown> = {
    effect: c.effect,
    blast_radius: c.blastRadius,
    reversibility: c.axes.reversibility,
    externality: c.axes.externality,
    source: c.source,
  };
  if (c.verb !== undefined) classification.verb = c.verb;
  const p = f.principal;
  return {
    args: f.arguments ?? {},
    principal: { sub: p.sub, team: p.team, roles: [...p.roles], tools: p.tools === null ? null : [...p.tools] },
    tool: { name: f.tool, upstream: f.upstream, exposed: f.exposedName },
    classification,
    run: { id: f.runId },
    now: new Date(f.now),
    history: {},
  };
}

interface Hit {
  rule: CompiledRule;
  decision: Verdict;
  /** Text for the decision's reason. */
  text: string;
  failed: boolean;
}

/** Whether the rule applies to this call: true, false, or the error that makes it fail closed. */
function applies(r: CompiledRule, f: PolicyFacts, scope: () => CelScope): boolean | { error: string } {
  if (r.window) {
    const w = inWindow(r.window, f.now);
    if (w === null) return { error: "the evaluation time is not a valid time" };
    if (!w) return false;
  }
  if (r.magnitudeOver !== null) {
    const m = magnitudeOf(f);
    if (m === null) return false;
    if (typeof m === "object") return m;
    if (!(m > r.magnitudeOver)) return false;
  }
  let hist: Record<string, unknown> | null = null;
  if (r.history) {
    const h = historyScope(r.history, f.history);
    if ("error" in h) return h;
    hist = h.ok;
  }
  if (!r.when) return true;
  const s = scope();
  return runCondition(r.when, hist ? { ...s, history: hist } : s);
}

const STRENGTH: Record<Verdict, number> = { allow: 0, require_approval: 1, deny: 2 };

export interface Effective {
  decision: Verdict;
  rule: string | null;
  reason: string;
  owner?: string;
  unverifiedRead?: boolean;
}

function strongest(hits: Hit[]): Hit[] {
  let best = -1;
  for (const h of hits) best = Math.max(best, STRENGTH[h.decision]);
  return hits.filter((h) => STRENGTH[h.decision] === best);
}

function fromHits(top: Hit[]): Effective {
  const first = top[0]!;
  const e: Effective = { decision: first.decision, rule: first.rule.id, reason: top.map((h) => h.text).join("; ") };
  if (first.decision === "deny") {
    const owner = top.find((h) => h.rule.owner !== undefined)?.rule.owner;
    if (owner !== undefined) e.owner = owner;
  }
  return e;
}

/** The decision when no deciding rule matches (mapping, unclassified reads, else deny). Shared with policy-view.ts. */
export function baseline(p: CompiledPolicy, f: PolicyFacts): Effective {
  const c = f.classification;
  const what = `${f.upstream}/${f.tool}`;
  if (c.source === "mapping") {
    if (f.mapping?.approval === "required")
      return { decision: "require_approval", rule: null, reason: `no rule matched; the mapping of ${what} (${c.effect}) requires approval` };
    return { decision: "allow", rule: null, reason: `no rule matched; ${what} is mapped (${c.effect}) and the baseline allows mapped tools` };
  }
  const a = f.annotations;
  if (p.unclassifiedReads === "observe" && a && a.readOnlyHint === true && a.destructiveHint !== true)
    return {
      decision: "allow",
      rule: null,
      reason: `no rule matched; ${what} is unclassified (no mapping) but its server annotates it read-only, so it runs as an unverified read (unclassified_reads: observe)`,
      unverifiedRead: true,
    };
  return {
    decision: "deny",
    rule: null,
    reason: `no rule matched and ${what} is unclassified (no mapping; classified ${c.source} as ${c.effect}): unmapped tools are blocked — add a mapping for it or a rule that decides it`,
  };
}

/** Decides one call. Pure, total and deterministic: the same facts give the same decision, and it never throws. */
export function evaluate(p: CompiledPolicy, facts: PolicyFacts): Decision {
  try {
    return decide(p, facts);
  } catch (e) {
    // Unreachable for well-typed facts (every rule failure is a rule failing closed). Facts that
    // cannot be read at all mean the policy cannot answer, which refuses the call in every gateway
    // mode (docs/architecture.md invariant 1): this one decision is applied in enforce whatever the mode.
    const reason = `the policy could not be evaluated (${e instanceof Error ? e.message : String(e)}); the call is refused to fail closed`;
    return { decision: "deny", rule: null, reason, obligations: [], mode: "enforce", policyVersion: p.version };
  }
}

function decide(p: CompiledPolicy, f: PolicyFacts): Decision {
  const hits: Hit[] = [];
  const shadows: Hit[] = [];
  let scope: CelScope | undefined;
  const lazyScope = () => {
    scope ??= baseScope(f);
    return scope;
  };
  for (const r of p.rules) {
    if (!staticMatch(r, f)) continue;
    const a = applies(r, f, lazyScope);
    if (a === false) continue;
    const failed = a !== true;
    const hit: Hit = failed
      ? { rule: r, decision: "deny", failed, text: `rule ${r.id} failed closed: ${a.error} (it is treated as a deny)` }
      : { rule: r, decision: r.decision, failed, text: `rule ${r.id}: ${r.reason}` };
    (r.observe ? shadows : hits).push(hit);
  }

  const top = strongest(hits);
  const effective = top.length ? fromHits(top) : baseline(p, f);

  const obligations: Obligation[] = [];
  if (effective.decision !== "deny" || p.mode !== "enforce") {
    const seen = new Set<string>();
    for (const h of hits)
      if (h.decision !== "deny")
        for (const o of h.rule.obligations)
          if (!seen.has(o.spec)) {
            seen.add(o.spec);
            obligations.push(o);
          }
  }

  // What enforce would do: the effective decision, or a stronger shadow rule.
  let wouldBlock: Decision["wouldBlock"];
  const shadowTop = strongest(shadows.filter((h) => h.decision !== "allow"));
  const shadow = shadowTop.length ? fromHits(shadowTop) : null;
  if (shadow && STRENGTH[shadow.decision] > STRENGTH[effective.decision])
    wouldBlock = { rule: shadow.rule, reason: `shadowing (mode: observe) ${shadow.reason}`, decision: shadow.decision as "deny" | "require_approval" };
  else if (effective.decision !== "allow" && p.mode !== "enforce")
    wouldBlock = { rule: effective.rule, reason: effective.reason, decision: effective.decision };

  const relaxed = p.mode !== "enforce" && effective.decision !== "allow";
  const d: Decision = {
    decision: relaxed ? "allow" : effective.decision,
    rule: effective.rule,
    reason: relaxed ? `allowed in ${p.mode} mode; enforce would ${effective.decision === "deny" ? "deny" : "hold"} it: ${effective.reason}` : effective.reason,
    obligations,
    mode: p.mode,
    policyVersion: p.version,
  };
  if (wouldBlock) d.wouldBlock = wouldBlock;
  if (effective.owner !== undefined) d.owner = effective.owner;
  if (effective.unverifiedRead) d.unverifiedRead = true;
  return d;
}

/** The history queries of the rules that could apply to this call (deduplicated; empty when none has history). */
export function historyQueries(p: CompiledPolicy, facts: PreHistoryFacts): HistoryQuery[] {
  const out = new Map<string, HistoryQuery>();
  for (const r of p.rules) {
    if (r.historyQueries.length === 0 || !staticMatch(r, facts)) continue;
    if (r.window && inWindow(r.window, facts.now) === false) continue;
    for (const q of r.historyQueries) out.set(historyKey(q), q);
  }
  return [...out.values()];
}

/**
 * Whether `tools/list` shows the tool to this principal: hidden only in enforce, when a deciding
 * (not observe) rule with no when, history, magnitude or window matches it and denies — a deny
 * nothing about the call can change. Anything that depends on arguments, history or time is
 * listed and decided at call time; so are unmapped tools (the baseline decides them per call).
 */
export function listVerdict(p: CompiledPolicy, facts: ListFacts): "hidden" | "listed" {
  if (p.mode !== "enforce") return "listed";
  for (const r of p.rules) if (r.unconditional && !r.observe && r.decision === "deny" && staticMatch(r, facts)) return "hidden";
  return "listed";
}

/**
 * The call budgets for this principal and run: calls per grant (the policy's `budgets.grant.calls`
 * and the grant's own `budget.calls` claim — the smaller wins) and calls per run (the policy's
 * `budgets.run.calls`, only when the call belongs to a run: without one there is nothing to count).
 */
export function budgetLimits(p: CompiledPolicy, principal: Principal, runId: string | null): BudgetLimits {
  const out: BudgetLimits = {};
  const claim = principal.budget?.calls;
  const grant = [p.budgets.grantCalls, typeof claim === "number" && Number.isFinite(claim) && claim >= 0 ? Math.floor(claim) : undefined].filter(
    (v): v is number => v !== undefined,
  );
  if (grant.length) out.grantCalls = Math.min(...grant);
  if (runId !== null && p.budgets.runCalls !== undefined) out.runCalls = p.budgets.runCalls;
  return out;
}
