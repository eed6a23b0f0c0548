// The policy engine (issue 9, items 3–5, 9): a table of cases through parsePolicy → compilePolicy →
// evaluate — deny overrides, every match field, CEL conditions (one that errors fails closed),
// history counts / running totals / succeeded, time windows, magnitude thresholds, per-rule
// observe, each gateway mode, the baseline — then budgetLimits, listVerdict, historyQueries, the
// policy version, and the problems compile and the schema report at once.
import { describe, expect, it } from "vitest";
import { type PolicyInput, parsePolicy } from "../../src/config/policy-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { budgetLimits, evaluate, historyQueries, listVerdict, type PolicyFacts } from "../../src/governance/policy.ts";
import { type CompiledPolicy, compilePolicy, PolicyError } from "../../src/governance/policy-compile.ts";
import { toolPolicy } from "../../src/governance/policy-view.ts";
import { type Classification, type Decision, historyKey, type HistoryQuery, type Mode } from "../../src/governance/steps.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";

type Rules = NonNullable<PolicyInput["rules"]>;
type Opts = { mode?: Mode; unclassifiedReads?: "block" | "observe"; budgets?: PolicyInput["budgets"] };

function compile(rules: Rules, opts: Opts = {}): CompiledPolicy {
  const parsed = parsePolicy({ rules, ...(opts.budgets ? { budgets: opts.budgets } : {}) });
  if (!parsed.ok) throw new Error(`fixture policy does not parse: ${parsed.problems.join("; ")}`);
  return compilePolicy(parsed.policy, { mode: opts.mode ?? "enforce", unclassifiedReads: opts.unclassifiedReads ?? "block" });
}

/** Wednesday 2026-03-04, 10:30 UTC. */
const NOW = Date.parse("2026-03-04T10:30:00Z");
const at = (iso: string) => Date.parse(iso);

const AGENT: Principal = { sub: "agent:bot", team: "ops", roles: ["agent"], tools: ["pay__*", "db__*"], authenticated: true, jti: "j1" };
const ADMIN: Principal = { sub: "human:leo", team: "platform", roles: ["admin"], tools: null, authenticated: true };
const MAPPED: Classification = {
  effect: "irreversible",
  blastRadius: "scoped",
  axes: { reversibility: "irreversible", blastRadius: "scoped", externality: "external" },
  verb: "send",
  source: "mapping",
};
const READ: Classification = {
  effect: "read_only",
  blastRadius: "single",
  axes: { reversibility: "reversible", blastRadius: "single", externality: "internal" },
  source: "mapping",
};
const DEFAULT: Classification = {
  effect: "irreversible",
  blastRadius: "systemic",
  axes: { reversibility: "irreversible", blastRadius: "systemic", externality: "external" },
  source: "default",
};
const HEURISTIC: Classification = { ...READ, source: "heuristic:read" };
const MAPPING: ToolMapping = { effect: "irreversible", approval: "none", arguments: "full", magnitude: { fromArg: "amount" } };

function facts(over: Partial<PolicyFacts> = {}): PolicyFacts {
  return {
    principal: AGENT,
    exposedName: "pay__send",
    upstream: "pay",
    tool: "send",
    arguments: { amount: 500, to: "acct-1" },
    classification: MAPPED,
    mapping: MAPPING,
    annotations: undefined,
    runId: "run-1",
    now: NOW,
    history: { answers: {} },
    ...over,
  };
}
const unmapped = (over: Partial<PolicyFacts> = {}) => facts({ classification: DEFAULT, mapping: undefined, ...over });

const COUNT_PAY: HistoryQuery = { kind: "count", tool: "pay__*", withinMs: 60_000, scope: "principal" };
const COUNT_PAY_RUN: HistoryQuery = { kind: "count", tool: "pay__*", withinMs: 60_000, scope: "run" };
const TOTAL_PAY: HistoryQuery = { kind: "total", tool: "pay__*", arg: "amount", withinMs: 86_400_000, scope: "principal" };
const BACKUP_OK: HistoryQuery = { kind: "succeeded", tool: "db__backup", scope: "run" };
const answers = (...pairs: [HistoryQuery, number | boolean][]) => ({ answers: Object.fromEntries(pairs.map(([q, v]) => [historyKey(q), v])) });

const allow = (id: string, extra: Partial<Rules[number]> = {}): Rules[number] => ({ id, decision: "allow", reason: `${id} allows`, ...extra });
const deny = (id: string, extra: Partial<Rules[number]> = {}): Rules[number] => ({ id, decision: "deny", reason: `${id} denies`, ...extra });
const hold = (id: string, extra: Partial<Rules[number]> = {}): Rules[number] => ({ id, decision: "require_approval", reason: `${id} holds`, ...extra });

const RATE_RULE = deny("rate", { match: { tool: "pay__*" }, history: { count: { tool: "pay__*", within: "1m" } }, when: "history.count >= 2" });
const TOTAL_RULE = deny("daily-cap", {
  match: { tool: "pay__*" },
  history: { total: { tool: "pay__*", arg: "amount", within: "1d" } },
  when: "history.total + args.amount > 1000.0",
});
const BACKUP_RULE = deny("backup-first", { match: { tool: "db__drop" }, history: { succeeded: { tool: "db__backup" } }, when: "!history.succeeded" });
const OFFICE = { days: ["mon", "tue", "wed", "thu", "fri"] as ("mon" | "tue" | "wed" | "thu" | "fri")[], hours: "09:00-17:00" };

interface Case {
  name: string;
  rules: Rules;
  facts?: PolicyFacts;
  opts?: Opts;
  expect: Partial<Decision>;
  reason?: RegExp;
  /** Decision fields that must be absent. */
  absent?: (keyof Decision)[];
}

const CASES: Case[] = [
  // ---- deny overrides, combination, obligations, owner
  {
    name: "a matching allow rule allows",
    rules: [allow("a")],
    expect: { decision: "allow", rule: "a", obligations: [] },
    reason: /rule a: a allows/,
    absent: ["wouldBlock", "owner"],
  },
  { name: "deny overrides allow", rules: [allow("a"), deny("d")], expect: { decision: "deny", rule: "d" } },
  { name: "deny overrides allow whatever the order", rules: [deny("d"), allow("a")], expect: { decision: "deny", rule: "d" } },
  { name: "require_approval overrides allow", rules: [allow("a"), hold("h")], expect: { decision: "require_approval", rule: "h" } },
  { name: "deny overrides require_approval", rules: [hold("h"), deny("d")], expect: { decision: "deny", rule: "d" } },
  {
    name: "two denies: the first decides, both reasons are given",
    rules: [deny("d1"), deny("d2")],
    expect: { decision: "deny", rule: "d1" },
    reason: /rule d1: d1 denies; rule d2: d2 denies/,
  },
  { name: "a deny names its rule's owner", rules: [deny("d", { owner: "secops@example.com" })], expect: { decision: "deny", owner: "secops@example.com" } },
  {
    name: "the owner comes from the first denying rule that has one",
    rules: [deny("d1"), deny("d2", { owner: "dba@example.com" })],
    expect: { rule: "d1", owner: "dba@example.com" },
  },
  { name: "an allow never carries an owner", rules: [allow("a", { owner: "x@example.com" })], expect: { decision: "allow" }, absent: ["owner"] },
  {
    name: "obligations of every matching allow rule are combined, deduplicated, in rule order",
    rules: [allow("a1", { obligations: ["mask:email", "audit:full"] }), allow("a2", { obligations: ["audit:full", "redact:$.token"] })],
    expect: {
      decision: "allow",
      obligations: [
        { kind: "mask", arg: "email", spec: "mask:email" },
        { kind: "audit", arg: "full", spec: "audit:full" },
        { kind: "redact", arg: "$.token", spec: "redact:$.token" },
      ],
    },
  },
  {
    name: "a held call keeps the obligations of matching allow rules (an approval never drops a mask)",
    rules: [allow("a", { obligations: ["mask:email"] }), hold("h", { obligations: ["rate_limit:5/1m"] })],
    expect: {
      decision: "require_approval",
      obligations: [
        { kind: "mask", arg: "email", spec: "mask:email" },
        { kind: "rate_limit", arg: "5/1m", spec: "rate_limit:5/1m" },
      ],
    },
  },
  { name: "a deny carries no obligations", rules: [allow("a", { obligations: ["mask:email"] }), deny("d")], expect: { decision: "deny", obligations: [] } },
  {
    name: "unknown obligation kinds pass through to the obligations step",
    rules: [allow("a", { obligations: ["watermark"] })],
    expect: { obligations: [{ kind: "watermark", spec: "watermark" }] },
  },

  // ---- match fields
  { name: "tool glob that does not match leaves the baseline", rules: [deny("d", { match: { tool: "db__*" } })], expect: { decision: "allow", rule: null } },
  { name: "tool glob that matches", rules: [deny("d", { match: { tool: "pay__s?nd" } })], expect: { decision: "deny", rule: "d" } },
  { name: "a list of tool globs matches any", rules: [deny("d", { match: { tool: ["db__*", "pay__send"] } })], expect: { decision: "deny" } },
  { name: "upstream must match", rules: [deny("d", { match: { upstream: "db" } })], expect: { decision: "allow", rule: null } },
  { name: "upstream matches", rules: [deny("d", { match: { upstream: "pay" } })], expect: { decision: "deny" } },
  { name: "effect in a list", rules: [deny("d", { match: { effect: ["reversible", "irreversible"] } })], expect: { decision: "deny" } },
  { name: "effect not matching", rules: [deny("d", { match: { effect: "read_only" } })], expect: { decision: "allow", rule: null } },
  { name: "principal glob", rules: [deny("d", { match: { principal: "agent:*" } })], expect: { decision: "deny" } },
  { name: "principal glob not matching", rules: [deny("d", { match: { principal: "human:*" } })], expect: { decision: "allow", rule: null } },
  { name: "team must match", rules: [deny("d", { match: { team: "finance" } })], expect: { decision: "allow", rule: null } },
  { name: "role matches", rules: [deny("d", { match: { role: "agent" } })], expect: { decision: "deny" } },
  { name: "role not held", rules: [deny("d", { match: { role: ["operator", "approver"] } })], expect: { decision: "allow", rule: null } },
  { name: "admin holds every role", rules: [deny("d", { match: { role: "approver" } })], facts: facts({ principal: ADMIN }), expect: { decision: "deny" } },
  { name: "blast_radius", rules: [deny("d", { match: { blast_radius: ["scoped", "systemic"] } })], expect: { decision: "deny" } },
  { name: "externality not matching", rules: [deny("d", { match: { externality: "internal" } })], expect: { decision: "allow", rule: null } },
  { name: "reversibility", rules: [deny("d", { match: { reversibility: "irreversible" } })], expect: { decision: "deny" } },
  {
    name: "every match field must hold",
    rules: [deny("d", { match: { tool: "pay__*", team: "ops", role: "agent", effect: "read_only" } })],
    expect: { rule: null },
  },

  // ---- CEL conditions
  { name: "when true applies the rule", rules: [hold("big", { when: "args.amount > 100" })], expect: { decision: "require_approval", rule: "big" } },
  { name: "when false skips the rule", rules: [hold("big", { when: "args.amount > 1000" })], expect: { decision: "allow", rule: null } },
  {
    name: "a condition that errors fails closed: the rule matches as a deny, naming the rule and why",
    rules: [allow("a"), allow("needs-currency", { when: 'args.currency == "EUR"' })],
    expect: { decision: "deny", rule: "needs-currency" },
    reason: /rule needs-currency failed closed: No such key: currency/,
  },
  {
    name: "has() guards an optional argument",
    rules: [deny("d", { when: 'has(args.currency) && args.currency == "EUR"' })],
    expect: { decision: "allow", rule: null },
  },
  {
    name: "a string compared with a number errors and fails closed",
    rules: [allow("a", { when: "args.amount > 1000" })],
    facts: facts({ arguments: { amount: "5000" } }),
    expect: { decision: "deny", rule: "a" },
    reason: /failed closed/,
  },
  {
    name: "a condition that is not a bool at run time fails closed",
    rules: [allow("a", { when: "args.flag" })],
    facts: facts({ arguments: { flag: "yes" } }),
    expect: { decision: "deny", rule: "a" },
    reason: /not a bool/,
  },
  {
    name: "principal.team and roles in scope",
    rules: [deny("d", { when: 'principal.team == "ops" && "agent" in principal.roles && principal.sub.startsWith("agent:")' })],
    expect: { decision: "deny" },
  },
  {
    name: "principal.tools is null for the unrestricted actor",
    rules: [deny("d", { when: "principal.tools == null" })],
    facts: facts({ principal: ADMIN }),
    expect: { decision: "deny" },
  },
  {
    name: "tool name, upstream and exposed name in scope",
    rules: [deny("d", { when: 'tool.name == "send" && tool.upstream == "pay" && tool.exposed == "pay__send"' })],
    expect: { decision: "deny" },
  },
  {
    name: "classification in scope",
    rules: [
      deny("d", {
        when: 'classification.effect == "irreversible" && classification.blast_radius == "scoped" && classification.source == "mapping" && classification.verb == "send"',
      }),
    ],
    expect: { decision: "deny" },
  },
  { name: "run.id in scope", rules: [deny("d", { when: 'run.id == "run-1"' })], expect: { decision: "deny" } },
  { name: "run.id is null outside a run", rules: [deny("d", { when: "run.id == null" })], facts: facts({ runId: null }), expect: { decision: "deny" } },
  { name: "now is a timestamp (UTC methods)", rules: [deny("d", { when: "now.getHours() == 10 && now.getDayOfWeek() == 3" })], expect: { decision: "deny" } },
  {
    name: "now compares with timestamp literals",
    rules: [deny("d", { when: 'now < timestamp("2026-01-01T00:00:00Z")' })],
    expect: { decision: "allow", rule: null },
  },
  {
    name: "nested arguments and macros",
    rules: [deny("d", { when: 'args.items.exists(i, i.sku == "X") && args.order.total >= 10' })],
    facts: facts({ arguments: { items: [{ sku: "A" }, { sku: "X" }], order: { total: 12.5 } } }),
    expect: { decision: "deny" },
  },
  {
    name: "no arguments means args is an empty map",
    rules: [deny("d", { when: "size(args) == 0" })],
    facts: facts({ arguments: undefined }),
    expect: { decision: "deny" },
  },
  {
    name: "a failing observe rule shadows as a deny and changes nothing",
    rules: [deny("shadow", { mode: "observe", when: "args.missing > 1" })],
    expect: {
      decision: "allow",
      rule: null,
      wouldBlock: { rule: "shadow", decision: "deny", reason: expect.stringMatching(/failed closed/) as unknown as string },
    },
  },

  // ---- history
  { name: "history count under the limit", rules: [RATE_RULE], facts: facts({ history: answers([COUNT_PAY, 1]) }), expect: { decision: "allow", rule: null } },
  {
    name: "history count at the limit denies (the third call)",
    rules: [RATE_RULE],
    facts: facts({ history: answers([COUNT_PAY, 2]) }),
    expect: { decision: "deny", rule: "rate" },
  },
  {
    name: "a history answer missing from the snapshot fails closed",
    rules: [RATE_RULE],
    expect: { decision: "deny", rule: "rate" },
    reason: /history answer .* missing/,
  },
  {
    name: "a history answer of the wrong type fails closed",
    rules: [RATE_RULE],
    facts: facts({ history: answers([COUNT_PAY, true]) }),
    expect: { decision: "deny", rule: "rate" },
    reason: /failed closed/,
  },
  {
    name: "history is keyed by its scope: a principal-scoped answer does not satisfy a run-scoped query",
    rules: [deny("rate-run", { history: { count: { tool: "pay__*", within: "1m", scope: "run" } }, when: "history.count >= 2" })],
    facts: facts({ history: answers([COUNT_PAY, 0]) }),
    expect: { decision: "deny", rule: "rate-run" },
    reason: /missing/,
  },
  {
    name: "a run-scoped count answered",
    rules: [deny("rate-run", { history: { count: { tool: "pay__*", within: "1m", scope: "run" } }, when: "history.count >= 2" })],
    facts: facts({ history: answers([COUNT_PAY_RUN, 1]) }),
    expect: { decision: "allow", rule: null },
  },
  {
    name: "running total plus this call over the cap denies",
    rules: [TOTAL_RULE],
    facts: facts({ history: answers([TOTAL_PAY, 600]) }),
    expect: { decision: "deny", rule: "daily-cap" },
  },
  {
    name: "running total plus this call within the cap",
    rules: [TOTAL_RULE],
    facts: facts({ history: answers([TOTAL_PAY, 400]) }),
    expect: { decision: "allow", rule: null },
  },
  {
    name: "an earlier success in the run lets the call through",
    rules: [BACKUP_RULE],
    facts: facts({ exposedName: "db__drop", upstream: "db", tool: "drop", history: answers([BACKUP_OK, true]) }),
    expect: { decision: "allow", rule: null },
  },
  {
    name: "no earlier success in the run denies",
    rules: [BACKUP_RULE],
    facts: facts({ exposedName: "db__drop", upstream: "db", tool: "drop", history: answers([BACKUP_OK, false]) }),
    expect: { decision: "deny", rule: "backup-first" },
  },
  {
    name: "a history rule whose match fails needs no answer",
    rules: [RATE_RULE],
    facts: facts({ exposedName: "db__read", upstream: "db", tool: "read" }),
    expect: { decision: "allow", rule: null },
  },

  // ---- time windows (UTC)
  {
    name: "inside the window the rule applies",
    rules: [allow("office", { window: OFFICE }), deny("late", { window: { ...OFFICE, outside: true } })],
    expect: { decision: "allow", rule: "office" },
  },
  {
    name: "after hours the rule does not apply",
    rules: [deny("d", { window: OFFICE })],
    facts: facts({ now: at("2026-03-04T18:00:00Z") }),
    expect: { decision: "allow", rule: null },
  },
  {
    name: "the end of the range is exclusive",
    rules: [deny("d", { window: OFFICE })],
    facts: facts({ now: at("2026-03-04T17:00:00Z") }),
    expect: { rule: null },
  },
  {
    name: "the start of the range is inclusive",
    rules: [deny("d", { window: OFFICE })],
    facts: facts({ now: at("2026-03-04T09:00:00Z") }),
    expect: { rule: "d" },
  },
  {
    name: "on a weekend day the rule does not apply",
    rules: [deny("d", { window: OFFICE })],
    facts: facts({ now: at("2026-03-07T10:30:00Z") }),
    expect: { rule: null },
  },
  {
    name: "outside: true applies only outside the window",
    rules: [deny("after-hours", { window: { ...OFFICE, outside: true } })],
    facts: facts({ now: at("2026-03-07T10:30:00Z") }),
    expect: { decision: "deny", rule: "after-hours" },
  },
  {
    name: "an overnight range wraps past midnight",
    rules: [deny("night", { window: { hours: "22:00-06:00" } })],
    facts: facts({ now: at("2026-03-04T23:15:00Z") }),
    expect: { rule: "night" },
  },
  { name: "an overnight range does not cover the day", rules: [deny("night", { window: { hours: "22:00-06:00" } })], expect: { rule: null } },
  { name: "days alone", rules: [deny("wed", { window: { days: ["wed"] } })], expect: { rule: "wed" } },
  {
    name: "a range may end at 24:00",
    rules: [deny("eve", { window: { hours: "20:00-24:00" } })],
    facts: facts({ now: at("2026-03-04T23:59:00Z") }),
    expect: { rule: "eve" },
  },
  {
    name: "a time that is not a time fails a window rule closed",
    rules: [allow("a", { window: OFFICE })],
    facts: facts({ now: Number.NaN }),
    expect: { decision: "deny", rule: "a" },
    reason: /not a valid time/,
  },

  // ---- magnitude thresholds
  { name: "magnitude over the threshold applies", rules: [hold("big", { magnitude: { over: 100 } })], expect: { decision: "require_approval", rule: "big" } },
  { name: "magnitude equal to the threshold does not", rules: [hold("big", { magnitude: { over: 500 } })], expect: { decision: "allow", rule: null } },
  {
    name: "a decimal string magnitude counts",
    rules: [hold("big", { magnitude: { over: 1000 } })],
    facts: facts({ arguments: { amount: "1500.50" } }),
    expect: { rule: "big" },
  },
  {
    name: "a missing magnitude argument fails closed",
    rules: [hold("big", { magnitude: { over: 1000 } })],
    facts: facts({ arguments: {} }),
    expect: { decision: "deny", rule: "big" },
    reason: /"amount" is missing/,
  },
  {
    name: "a non-numeric magnitude fails closed",
    rules: [hold("big", { magnitude: { over: 1000 } })],
    facts: facts({ arguments: { amount: "lots" } }),
    expect: { decision: "deny", rule: "big" },
    reason: /not a number/,
  },
  {
    name: "a tool whose mapping declares no magnitude is not subject to the rule",
    rules: [deny("big", { magnitude: { over: 0 } })],
    facts: facts({ mapping: { ...MAPPING, magnitude: undefined } }),
    expect: { decision: "allow", rule: null },
  },
  {
    name: "a dotted magnitude path",
    rules: [deny("big", { magnitude: { over: 99 } })],
    facts: facts({ mapping: { ...MAPPING, magnitude: { fromArg: "order.total" } }, arguments: { order: { total: 100 } } }),
    expect: { rule: "big" },
  },

  // ---- per-rule observe
  {
    name: "an observe deny never blocks; it is recorded as would-block",
    rules: [allow("a"), deny("new", { mode: "observe", owner: "o@example.com" })],
    expect: { decision: "allow", rule: "a", wouldBlock: { rule: "new", decision: "deny", reason: "shadowing (mode: observe) rule new: new denies" } },
    absent: ["owner"],
  },
  {
    name: "an observe allow does not lift the baseline's deny",
    rules: [allow("new", { mode: "observe" })],
    facts: unmapped(),
    expect: { decision: "deny", rule: null },
    absent: ["wouldBlock"],
  },
  {
    name: "an observe hold no stronger than the decision is not recorded",
    rules: [hold("h"), hold("new", { mode: "observe" })],
    expect: { decision: "require_approval", rule: "h" },
    absent: ["wouldBlock"],
  },
  {
    name: "an observe deny stronger than a hold is recorded",
    rules: [hold("h"), deny("new", { mode: "observe" })],
    expect: {
      decision: "require_approval",
      rule: "h",
      wouldBlock: { rule: "new", decision: "deny", reason: "shadowing (mode: observe) rule new: new denies" },
    },
  },
  {
    name: "observe rules' obligations are not applied",
    rules: [allow("new", { mode: "observe", obligations: ["mask:email"] })],
    expect: { decision: "allow", obligations: [] },
  },

  // ---- gateway modes
  {
    name: "advise: a deny runs, recorded as would-block, owner kept",
    rules: [deny("d", { owner: "secops@example.com" })],
    opts: { mode: "advise" },
    expect: {
      decision: "allow",
      rule: "d",
      mode: "advise",
      owner: "secops@example.com",
      wouldBlock: { rule: "d", decision: "deny", reason: "rule d: d denies" },
    },
    reason: /^allowed in advise mode; enforce would deny it: rule d: d denies$/,
  },
  {
    name: "observe: a hold runs, recorded as would-block",
    rules: [hold("h")],
    opts: { mode: "observe" },
    expect: { decision: "allow", mode: "observe", wouldBlock: { rule: "h", decision: "require_approval", reason: "rule h: h holds" } },
    reason: /enforce would hold it/,
  },
  {
    name: "observe: an unmapped tool runs, recorded as would-block",
    rules: [],
    facts: unmapped(),
    opts: { mode: "observe" },
    expect: { decision: "allow", rule: null, wouldBlock: { rule: null, decision: "deny", reason: expect.stringMatching(/unclassified/) as unknown as string } },
  },
  {
    name: "advise: an allow is an allow, nothing would block",
    rules: [allow("a")],
    opts: { mode: "advise" },
    expect: { decision: "allow", mode: "advise" },
    absent: ["wouldBlock"],
  },
  {
    name: "advise: allow-rule obligations still apply to a relaxed deny",
    rules: [allow("a", { obligations: ["mask:email"] }), deny("d")],
    opts: { mode: "advise" },
    expect: { decision: "allow", obligations: [{ kind: "mask", arg: "email", spec: "mask:email" }] },
  },
  {
    name: "advise: a failing condition is recorded, not blocking",
    rules: [allow("a", { when: "args.nope == 1" })],
    opts: { mode: "advise" },
    expect: { decision: "allow", wouldBlock: { rule: "a", decision: "deny", reason: expect.stringMatching(/failed closed/) as unknown as string } },
  },
  { name: "enforce: mode is enforce", rules: [allow("a")], expect: { mode: "enforce" } },

  // ---- baseline
  {
    name: "baseline: a mapped tool is allowed",
    rules: [],
    expect: { decision: "allow", rule: null, obligations: [] },
    reason: /mapped/,
    absent: ["unverifiedRead", "wouldBlock"],
  },
  {
    name: "baseline: a mapping with approval required holds",
    rules: [],
    facts: facts({ mapping: { ...MAPPING, approval: "required" } }),
    expect: { decision: "require_approval", rule: null },
    reason: /requires approval/,
  },
  {
    name: "baseline: an unmapped tool is denied as unclassified",
    rules: [],
    facts: unmapped(),
    expect: { decision: "deny", rule: null },
    reason: /pay\/send is unclassified/,
    absent: ["owner"],
  },
  {
    name: "baseline: a heuristic classification is still unmapped",
    rules: [],
    facts: unmapped({ classification: HEURISTIC }),
    expect: { decision: "deny" },
    reason: /heuristic:read/,
  },
  {
    name: "baseline: unclassified_reads observe runs a read-only-annotated tool as an unverified read",
    rules: [],
    facts: unmapped({ annotations: { readOnlyHint: true } }),
    opts: { unclassifiedReads: "observe" },
    expect: { decision: "allow", rule: null, unverifiedRead: true },
    absent: ["wouldBlock"],
  },
  {
    name: "baseline: destructiveHint defeats readOnlyHint",
    rules: [],
    facts: unmapped({ annotations: { readOnlyHint: true, destructiveHint: true } }),
    opts: { unclassifiedReads: "observe" },
    expect: { decision: "deny" },
    absent: ["unverifiedRead"],
  },
  {
    name: "baseline: with unclassified_reads block annotations grant nothing",
    rules: [],
    facts: unmapped({ annotations: { readOnlyHint: true } }),
    expect: { decision: "deny" },
    absent: ["unverifiedRead"],
  },
  {
    name: "baseline: a readOnlyHint that is not true is no hint",
    rules: [],
    facts: unmapped({ annotations: { readOnlyHint: "true" } }),
    opts: { unclassifiedReads: "observe" },
    expect: { decision: "deny" },
  },
  {
    name: "an explicit rule decides an unmapped tool like any other call",
    rules: [allow("a", { match: { tool: "pay__*" } })],
    facts: unmapped(),
    expect: { decision: "allow", rule: "a" },
  },
  {
    name: "an explicit rule decides a tool whose mapping requires approval",
    rules: [allow("a")],
    facts: facts({ mapping: { ...MAPPING, approval: "required" } }),
    expect: { decision: "allow", rule: "a" },
  },
];

describe("policy engine: the table", () => {
  it("has at least 60 cases", () => {
    expect(CASES.length).toBeGreaterThanOrEqual(60);
  });
  for (const c of CASES) {
    it(c.name, () => {
      const p = compile(c.rules, c.opts);
      const d = evaluate(p, c.facts ?? facts());
      expect(d).toMatchObject(c.expect);
      expect(d.policyVersion).toBe(p.version);
      expect(d.mode).toBe(c.opts?.mode ?? "enforce");
      if (c.reason) expect(d.reason).toMatch(c.reason);
      for (const k of c.absent ?? []) expect(d).not.toHaveProperty(k);
    });
  }
});

describe("facts the policy cannot read at all", () => {
  it("are refused in every gateway mode (applied in enforce), never thrown", () => {
    for (const mode of ["enforce", "advise", "observe"] as const) {
      const p = compile([allow("a", { when: "args.amount > 1" })], { mode });
      const d = evaluate(p, { ...facts(), principal: undefined, classification: undefined } as unknown as PolicyFacts);
      expect(d).toMatchObject({ decision: "deny", rule: null, mode: "enforce", obligations: [], policyVersion: p.version });
      expect(d.reason).toMatch(/the policy could not be evaluated .*fail closed/);
    }
  });
});

describe("budgetLimits", () => {
  const withBudget = (calls: number): Principal => ({ ...AGENT, budget: { calls } });
  it("no budgets anywhere: no limits", () => {
    expect(budgetLimits(compile([]), AGENT, "run-1")).toEqual({});
  });
  it("the grant's budget claim alone", () => {
    expect(budgetLimits(compile([]), withBudget(3), "run-1")).toEqual({ grantCalls: 3 });
  });
  it("the policy's budgets alone", () => {
    expect(budgetLimits(compile([], { budgets: { run: { calls: 100 }, grant: { calls: 1000 } } }), AGENT, "run-1")).toEqual({
      runCalls: 100,
      grantCalls: 1000,
    });
  });
  it("the smaller of the grant claim and the policy's grant budget wins", () => {
    const p = compile([], { budgets: { grant: { calls: 10 } } });
    expect(budgetLimits(p, withBudget(3), null)).toEqual({ grantCalls: 3 });
    expect(budgetLimits(p, withBudget(50), null)).toEqual({ grantCalls: 10 });
  });
  it("a run budget applies only to a call in a run", () => {
    const p = compile([], { budgets: { run: { calls: 5 } } });
    expect(budgetLimits(p, AGENT, "run-1")).toEqual({ runCalls: 5 });
    expect(budgetLimits(p, AGENT, null)).toEqual({});
  });
  it("a zero budget is a limit, not an absence", () => {
    expect(budgetLimits(compile([], { budgets: { grant: { calls: 0 } } }), withBudget(3), null)).toEqual({ grantCalls: 0 });
  });
});

describe("listVerdict", () => {
  const list = (rules: Rules, f: PolicyFacts = facts(), mode: Mode = "enforce") => listVerdict(compile(rules, { mode }), f);
  it("an unconditional deny hides the tool", () => {
    expect(list([deny("d", { match: { tool: "pay__*" } })])).toBe("hidden");
  });
  it("only for the principals it matches", () => {
    expect(list([deny("d", { match: { tool: "pay__*", team: "finance" } })])).toBe("listed");
    expect(list([deny("d", { match: { role: "approver" } })], facts({ principal: ADMIN }))).toBe("hidden");
  });
  it("a deny that depends on arguments, history, magnitude or time is listed", () => {
    expect(list([deny("d", { when: "args.amount > 1" })])).toBe("listed");
    expect(list([RATE_RULE])).toBe("listed");
    expect(list([deny("d", { magnitude: { over: 1 } })])).toBe("listed");
    expect(list([deny("d", { window: OFFICE })])).toBe("listed");
  });
  it("an observe deny is listed", () => {
    expect(list([deny("d", { mode: "observe" })])).toBe("listed");
  });
  it("holds and allows are listed, and so are unmapped tools", () => {
    expect(list([hold("h")])).toBe("listed");
    expect(list([allow("a")])).toBe("listed");
    expect(list([], unmapped())).toBe("listed");
  });
  it("nothing is hidden in advise or observe", () => {
    expect(list([deny("d")], facts(), "advise")).toBe("listed");
    expect(list([deny("d")], facts(), "observe")).toBe("listed");
  });
  it("an unconditional deny hides even when an allow also matches (deny overrides)", () => {
    expect(list([allow("a"), deny("d", { match: { effect: "irreversible" } })])).toBe("hidden");
  });
});

describe("historyQueries", () => {
  it("no rule with history: no queries", () => {
    expect(historyQueries(compile([allow("a"), deny("d", { when: "args.amount > 1" })]), facts())).toEqual([]);
  });
  it("the queries of the rules whose match and window hold, deduplicated", () => {
    const p = compile([
      RATE_RULE,
      deny("rate2", { match: { tool: "pay__*" }, history: { count: { tool: "pay__*", within: "60s" } }, when: "history.count >= 5" }),
      TOTAL_RULE,
      BACKUP_RULE,
      deny("weekend", { window: { days: ["sat"] }, history: { count: { tool: "x", within: "1h" } }, when: "history.count > 0" }),
    ]);
    expect(historyQueries(p, facts())).toEqual([COUNT_PAY, TOTAL_PAY]);
    expect(historyQueries(p, facts({ exposedName: "db__drop", upstream: "db", tool: "drop" }))).toEqual([BACKUP_OK]);
  });
  it("the answers it asks for are exactly what evaluate reads", () => {
    const p = compile([RATE_RULE, TOTAL_RULE]);
    const qs = historyQueries(p, facts());
    const snap = { answers: Object.fromEntries(qs.map((q) => [historyKey(q), 0])) };
    expect(evaluate(p, facts({ history: snap }))).toMatchObject({ decision: "allow", rule: null });
  });
});

describe("usesHistory", () => {
  it("is true only when some rule has a history query or a rate_limit obligation", () => {
    expect(compile([allow("a"), deny("d", { when: "args.amount > 1" })]).usesHistory).toBe(false);
    expect(compile([RATE_RULE]).usesHistory).toBe(true);
    expect(compile([allow("a", { obligations: ["rate_limit:5/1m"] })]).usesHistory).toBe(true);
  });
});

describe("policy version", () => {
  const cfg = (rules: Rules) => {
    const r = parsePolicy({ rules });
    if (!r.ok) throw new Error(r.problems.join("; "));
    return r.policy;
  };
  it("is a SHA-256 hex, stable for the same policy and mode", () => {
    const a = compilePolicy(cfg([allow("a", { match: { tool: "x", upstream: "y" } })]), { mode: "enforce", unclassifiedReads: "block" });
    const b = compilePolicy(cfg([allow("a", { match: { upstream: "y", tool: "x" } })]), { mode: "enforce", unclassifiedReads: "block" });
    expect(a.version).toMatch(/^[0-9a-f]{64}$/);
    expect(b.version).toBe(a.version);
  });
  it("changes with the rules, the mode and unclassified_reads", () => {
    const base = compilePolicy(cfg([allow("a")]), { mode: "enforce", unclassifiedReads: "block" }).version;
    expect(compilePolicy(cfg([allow("b")]), { mode: "enforce", unclassifiedReads: "block" }).version).not.toBe(base);
    expect(compilePolicy(cfg([allow("a")]), { mode: "advise", unclassifiedReads: "block" }).version).not.toBe(base);
    expect(compilePolicy(cfg([allow("a")]), { mode: "enforce", unclassifiedReads: "observe" }).version).not.toBe(base);
  });
});

describe("compilePolicy refuses bad policies with every problem at once", () => {
  it("CEL parse and type errors, a non-bool condition, history without a reading condition, duplicate ids", () => {
    let err: unknown;
    try {
      compilePolicy(
        {
          rules: [
            { id: "a", when: "args.amount >", decision: "allow", reason: "r" },
            { id: "b", when: "nosuch.field == 1", decision: "allow", reason: "r" },
            { id: "c", when: "1 + 2", decision: "allow", reason: "r" },
            { id: "d", history: { count: { tool: "x", within: "1m", scope: "principal" } }, decision: "deny", reason: "r" },
            { id: "e", when: "history.count > 1", decision: "deny", reason: "r" },
            { id: "f", history: { count: { tool: "x", within: "1m", scope: "principal" } }, when: "args.a == 1", decision: "deny", reason: "r" },
            { id: "a", decision: "allow", reason: "r", obligations: ["Bad Kind", "rate_limit:0/1m"] },
          ],
        },
        { mode: "enforce", unclassifiedReads: "block" },
      );
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PolicyError);
    const problems = (err as PolicyError).problems;
    expect(problems).toEqual([
      expect.stringMatching(/^policy\.rules\[0\]\.when: CEL does not parse/),
      expect.stringMatching(/^policy\.rules\[1\]\.when: CEL does not type-check: Unknown variable: nosuch/),
      expect.stringMatching(/^policy\.rules\[2\]\.when: a condition must be a bool, this one is int/),
      expect.stringMatching(/^policy\.rules\[3\]\.history: a history query needs a when condition/),
      expect.stringMatching(/^policy\.rules\[4\]\.when: reads history, but the rule declares no history query/),
      expect.stringMatching(/^policy\.rules\[5\]\.history: the rule's when condition never reads history/),
      expect.stringMatching(/^policy\.rules\[6\]\.id: duplicate rule id "a" \(also rules\[0\]\)/),
      expect.stringMatching(/^policy\.rules\[6\]\.obligations\[0\]: obligation "Bad Kind"/),
      expect.stringMatching(/^policy\.rules\[6\]\.obligations\[1\]: obligation "rate_limit:0\/1m"/),
    ]);
  });
  it("an empty policy compiles and leaves everything to the baseline", () => {
    const p = compilePolicy({ rules: [] }, { mode: "enforce", unclassifiedReads: "block" });
    expect(p.rules).toHaveLength(0);
    expect(evaluate(p, facts())).toMatchObject({ decision: "allow", rule: null });
  });
});

describe("policySchema (parsePolicy)", () => {
  it("accepts the documented shape and applies defaults", () => {
    const r = parsePolicy({
      rules: [
        {
          id: "no-prod-deletes",
          match: {
            tool: "db__delete_*",
            upstream: "db",
            effect: ["irreversible"],
            principal: "agent:*",
            team: "ops",
            role: "agent",
            blast_radius: ["systemic"],
            externality: "external",
          },
          when: 'args.amount > 1000 && principal.team == "ops"',
          history: { count: { tool: "pay__*", within: "1m" } },
          magnitude: { over: 1000 },
          window: { days: ["mon", "tue", "wed", "thu", "fri"], hours: "09:00-17:00" },
          decision: "deny",
          reason: "text the model can read",
          owner: "secops@example.com",
          obligations: ["mask:email", "redact:$.token", "rate_limit:5/1m"],
          mode: "observe",
        },
      ],
      budgets: { run: { calls: 100 }, grant: { calls: 1000 } },
    });
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.policy.rules[0]!.history!.count!.scope).toBe("principal");
    expect(parsePolicy({})).toEqual({ ok: true, policy: { rules: [] } });
  });
  it("reports every problem at once, with paths, rejecting unknown fields", () => {
    const r = parsePolicy({
      rules: [
        { id: "bad id", decision: "maybe", match: { tools: "x" }, window: { hours: "25:00-01:00" }, obligations: ["Mask"], extra: 1 },
        { id: "ok", decision: "allow", reason: "r", history: { count: { tool: "x", within: "soon" } } },
        { id: "ok", decision: "allow", reason: "r", window: {}, magnitude: { over: "big" } },
      ],
      budgets: { run: { calls: -1 } },
      colour: "blue",
    });
    expect(r.ok).toBe(false);
    const problems = r.ok ? [] : r.problems;
    const has = (re: RegExp) =>
      expect(
        problems.some((p) => re.test(p)),
        `${re} in ${JSON.stringify(problems)}`,
      ).toBe(true);
    has(/^policy\.rules\[0\]\.id: rule ids are/);
    has(/^policy\.rules\[0\]\.decision:/);
    has(/^policy\.rules\[0\]\.reason:/);
    has(/^policy\.rules\[0\]\.match: unknown key "tools" — did you mean "tool"\?$/);
    has(/^policy\.rules\[0\]\.window\.hours:/);
    has(/^policy\.rules\[0\]\.obligations\[0\]: obligation "Mask"/);
    has(/^policy\.rules\[0\]: unknown key "extra"$/);
    has(/^policy\.rules\[1\]\.history\.count\.within:/);
    has(/^policy\.rules\[2\]\.id: duplicate rule id "ok" \(also rules\[1\]\)/);
    has(/^policy\.rules\[2\]\.window: name days, hours, or both/);
    has(/^policy\.rules\[2\]\.magnitude\.over:/);
    has(/^policy\.budgets\.run\.calls:/);
    has(/^policy: unknown key "colour"$/);
  });
  it("durations: ms, s, m, h, d and positive milliseconds", () => {
    for (const within of ["500ms", "30s", "1m", "2h", "1d", 1500])
      expect(parsePolicy({ rules: [RATE_RULE].map((r) => ({ ...r, history: { count: { tool: "x", within } } })) }).ok).toBe(true);
    for (const within of ["0s", "1w", "-1m", 0, 1.5, "1 m"])
      expect(parsePolicy({ rules: [{ ...RATE_RULE, history: { count: { tool: "x", within } } }] }).ok).toBe(false);
  });
});

describe("a rule names a tool by its stable identity (upstream and the upstream's own name)", () => {
  // The same tool of upstream `everything`, exposed first alone (no namespace), then namespaced beside a second upstream.
  const alone = facts({ exposedName: "get-sum", upstream: "everything", tool: "get-sum" });
  const namespaced = facts({ exposedName: "everything__get-sum", upstream: "everything", tool: "get-sum" });
  const other = facts({ exposedName: "other__get-sum", upstream: "other", tool: "get-sum" });
  const decide = (rules: Rules, f: PolicyFacts) => evaluate(compile(rules), f).decision;
  it("{upstream, tool} keeps matching when the tool's exposed name changes, and only that upstream's tool", () => {
    const rules = [deny("no-sums", { match: { upstream: "everything", tool: "get-sum" } })];
    expect(decide(rules, alone)).toBe("deny");
    expect(decide(rules, namespaced)).toBe("deny");
    expect(decide(rules, other)).toBe("allow");
    expect(listVerdict(compile(rules), namespaced)).toBe("hidden");
    expect(listVerdict(compile(rules), other)).toBe("listed");
  });
  it("a rule by exposed name keeps working as before: it matches the exposed name only", () => {
    const byExposed = [hold("h", { match: { tool: "everything__get-sum" } })];
    expect(decide(byExposed, namespaced)).toBe("require_approval");
    expect(decide(byExposed, alone)).toBe("allow");
    // Without an upstream, `tool` is the exposed name: a bare own name does not follow a rename (the reason to name the upstream).
    expect(decide([deny("d", { match: { tool: "get-sum" } })], namespaced)).toBe("allow");
    // With an upstream, the exposed form still matches too.
    expect(decide([deny("d", { match: { upstream: "everything", tool: "everything__get-*" } })], namespaced)).toBe("deny");
  });
  it("obligations follow the rule that matched by stable identity", () => {
    const v = evaluate(compile([allow("masked", { match: { upstream: "everything", tool: "get-sum" }, obligations: ["redact:$.token"] })]), namespaced);
    expect(v.decision).toBe("allow");
    expect(v.obligations.map((o) => o.spec)).toEqual(["redact:$.token"]);
  });
});

describe("toolPolicy: what the policy makes of a tool for everyone (banner, console)", () => {
  const view = (rules: Rules, f: Partial<PolicyFacts> = {}, mode: Mode = "enforce") => {
    const { exposedName, upstream, tool, classification, mapping, annotations } = facts(f);
    return toolPolicy(compile(rules, { mode }), { exposedName, upstream, tool, classification, mapping, annotations });
  };
  it("an unconditional deny decides it and hides it; a conditional hold is 'sometimes'; no rule: the baseline", () => {
    expect(view([deny("no-pay", { match: { upstream: "pay", tool: "send" } })])).toEqual({ decision: "deny", rule: "no-pay", hidden: true, sometimes: [] });
    expect(view([hold("big", { match: { tool: "pay__send" }, when: "args.amount > 100" })])).toEqual({
      decision: "allow",
      rule: null,
      hidden: false,
      sometimes: ["require_approval when args.amount > 100 (rule big)"],
    });
    expect(view([deny("ops-only", { match: { tool: "pay__*", team: "ops" } })]).sometimes).toEqual(["deny for some teams (rule ops-only)"]);
    expect(view([], { mapping: { ...MAPPING, approval: "required" } })).toMatchObject({ decision: "require_approval", rule: null });
    expect(view([], { classification: DEFAULT, mapping: undefined })).toMatchObject({ decision: "deny", rule: null, hidden: false });
    // Observe rules never decide; in observe mode nothing is hidden.
    expect(view([deny("shadow", { mode: "observe" })])).toMatchObject({ decision: "allow", sometimes: [] });
    expect(view([deny("d")], {}, "observe")).toMatchObject({ decision: "deny", hidden: false });
  });
});
