// Policy engine properties (fast-check): for generated policies (every rule feature: match fields,
// CEL conditions — some that error on some inputs — history, magnitude, windows, per-rule observe)
// and arbitrary calls (arguments of any JSON shape, history answers of any type, any time, even
// NaN), evaluate never throws, is deterministic, keeps the mode's promises, lets a deny override
// everything, agrees with listVerdict, and compilePolicy refuses bad policies naming every problem.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type PolicyInput, parsePolicy } from "../../src/config/policy-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { ROLES } from "../../src/config/roles.ts";
import { compilePolicy, evaluate, historyQueries, listVerdict, type PolicyFacts, PolicyError } from "../../src/governance/policy.ts";
import { type Classification, historyKey, type Mode } from "../../src/governance/steps.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";

const RUNS = 400;
type Rule = NonNullable<PolicyInput["rules"]>[number];

const TOOLS = ["pay__send", "pay__refund", "db__drop", "db__read", "fs__write", "x"];
const CONDITIONS = [
  "args.amount > 1000",
  "has(args.amount) && args.amount > 10",
  'principal.team == "ops"',
  '"agent" in principal.roles',
  'args.to.startsWith("acct")',
  "now.getHours() >= 9",
  "size(args) > 2",
  "args.items.exists(i, i == 1)",
  "args.flag",
  'classification.effect == "read_only" || tool.upstream == "db"',
  'args.s.matches("^a+$")',
  "run.id == null",
];
const HISTORY: { history: Rule["history"]; when: string }[] = [
  { history: { count: { tool: "pay__*", within: "1m" } }, when: "history.count >= 2" },
  { history: { total: { tool: "pay__*", arg: "amount", within: "1d", scope: "run" } }, when: "history.total > 100.0" },
  { history: { succeeded: { tool: "db__backup" } }, when: "!history.succeeded" },
];

const opt = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });
const ruleArb: fc.Arbitrary<Omit<Rule, "id">> = fc
  .record({
    match: opt(
      fc.record(
        {
          tool: fc.constantFrom("pay__*", "db__*", "*", "x", "pay__s?nd"),
          upstream: fc.constantFrom("pay", "db", "fs"),
          effect: fc.subarray(["read_only", "idempotent", "reversible", "irreversible"] as const, { minLength: 1 }),
          principal: fc.constantFrom("agent:*", "human:*", "agent:bot"),
          team: fc.constantFrom("ops", "finance"),
          role: fc.constantFrom(...ROLES),
          blast_radius: fc.constantFrom("single", "scoped", "systemic"),
        },
        { requiredKeys: [] },
      ),
    ),
    when: opt(fc.constantFrom(...CONDITIONS)),
    history: opt(fc.constantFrom(...HISTORY)),
    magnitude: opt(fc.record({ over: fc.integer({ min: -10, max: 5000 }) })),
    window: opt(
      fc.record({
        days: opt(fc.subarray(["mon", "wed", "sat"] as const, { minLength: 1 })),
        hours: fc.constantFrom("09:00-17:00", "22:00-06:00"),
        outside: opt(fc.boolean()),
      }),
    ),
    decision: fc.constantFrom("allow", "deny", "require_approval"),
    obligations: opt(fc.subarray(["mask:email", "audit:full", "redact:$.token", "rate_limit:5/1m", "watermark"], { minLength: 1 })),
    observe: fc.boolean(),
    owner: opt(fc.constantFrom("secops@example.com")),
  })
  .map(({ history, when, observe, ...r }) => {
    const rule: Omit<Rule, "id"> = { ...r, reason: "because" };
    if (history) {
      rule.history = history.history;
      rule.when = when ? `(${history.when}) && (${when})` : history.when;
    } else if (when) rule.when = when;
    if (observe) rule.mode = "observe";
    return rule;
  });
const policyArb = fc.array(ruleArb, { maxLength: 12 }).map((rules) => rules.map((r, i) => ({ id: `r${i}`, ...r })));
const modeArb = fc.constantFrom<Mode>("enforce", "advise", "observe");

function compileRules(rules: Rule[], mode: Mode, unclassifiedReads: "block" | "observe" = "block") {
  const parsed = parsePolicy({ rules });
  if (!parsed.ok) throw new Error(`generated policy does not parse: ${parsed.problems.join("; ")}`);
  return compilePolicy(parsed.policy, { mode, unclassifiedReads });
}

const classificationArb: fc.Arbitrary<Classification> = fc
  .record({
    effect: fc.constantFrom("read_only", "idempotent", "reversible", "irreversible"),
    blastRadius: fc.constantFrom("single", "scoped", "systemic"),
    reversibility: fc.constantFrom("reversible", "compensable", "irreversible"),
    externality: fc.constantFrom("internal", "external"),
    source: fc.constantFrom("mapping", "default", "heuristic:read", "heuristic:write"),
  })
  .map(({ reversibility, externality, ...c }) => ({ ...c, axes: { reversibility, blastRadius: c.blastRadius, externality } }) as Classification);
const principalArb: fc.Arbitrary<Principal> = fc.record({
  sub: fc.oneof(fc.constantFrom("agent:bot", "human:leo", "agent:other"), fc.string()),
  team: fc.oneof(fc.constantFrom("ops", "finance"), fc.string()),
  roles: fc.subarray([...ROLES]),
  tools: fc.option(fc.array(fc.string(), { maxLength: 3 }), { nil: null }),
  authenticated: fc.boolean(),
});
const argsArb: fc.Arbitrary<JsonObject | undefined> = fc.oneof(
  fc.constant(undefined),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 3 })) as fc.Arbitrary<JsonObject>,
  fc.record(
    {
      amount: fc.oneof(fc.double(), fc.integer(), fc.string(), fc.constant("1500.5"), fc.constant(null)),
      to: fc.oneof(fc.constant("acct-1"), fc.integer()),
      items: fc.array(fc.oneof(fc.integer({ min: 0, max: 2 }), fc.string()), { maxLength: 3 }),
      flag: fc.oneof(fc.boolean(), fc.string()),
      s: fc.constantFrom("aaa", "ab", ""),
      order: fc.record({ total: fc.double() }),
    },
    { requiredKeys: [] },
  ) as fc.Arbitrary<JsonObject>,
);
const factsArb: fc.Arbitrary<Omit<PolicyFacts, "history">> = fc.record({
  principal: principalArb,
  exposedName: fc.oneof(fc.constantFrom(...TOOLS), fc.string()),
  upstream: fc.constantFrom("pay", "db", "fs"),
  tool: fc.string({ maxLength: 10 }),
  arguments: argsArb,
  classification: classificationArb,
  mapping: fc.option(
    fc.record({
      effect: fc.constantFrom("read_only", "irreversible"),
      approval: fc.constantFrom("none", "required"),
      arguments: fc.constant("full"),
      magnitude: opt(fc.record({ fromArg: fc.constantFrom("amount", "order.total", "nope") })),
    }),
    { nil: undefined },
  ) as fc.Arbitrary<PolicyFacts["mapping"]>,
  annotations: fc.option(fc.record({ readOnlyHint: fc.oneof(fc.boolean(), fc.string()), destructiveHint: opt(fc.boolean()) }, { requiredKeys: [] }), {
    nil: undefined,
  }) as fc.Arbitrary<JsonObject | undefined>,
  runId: fc.option(fc.string({ maxLength: 8 }), { nil: null }),
  now: fc.oneof(fc.integer({ min: 0, max: 4_102_444_800_000 }), fc.constant(Number.NaN), fc.double()),
});
/** Facts plus a snapshot answering some, all or none of the policy's queries, with values of any type. */
const answerArb = fc.oneof(fc.nat({ max: 10 }), fc.double(), fc.boolean(), fc.integer({ min: -5, max: 5000 }));

describe("policy properties", () => {
  it("evaluate is total: it never throws and always returns a well-formed decision", () => {
    fc.assert(
      fc.property(policyArb, modeArb, fc.boolean(), factsArb, fc.array(answerArb, { maxLength: 6 }), (rules, mode, reads, f, vals) => {
        const p = compileRules(rules, mode, reads ? "observe" : "block");
        const qs = historyQueries(p, f);
        const answers = Object.fromEntries(qs.slice(0, vals.length).map((q, i) => [historyKey(q), vals[i]!]));
        const d = evaluate(p, { ...f, history: { answers } });
        expect(["allow", "deny", "require_approval"]).toContain(d.decision);
        expect(d.mode).toBe(mode);
        expect(d.policyVersion).toBe(p.version);
        expect(typeof d.reason).toBe("string");
        expect(d.reason.length).toBeGreaterThan(0);
        expect(d.rule === null || rules.some((r) => r.id === d.rule)).toBe(true);
        expect(Array.isArray(d.obligations)).toBe(true);
        // Well-typed facts never reach the last-resort catch: every failure is a rule failing closed.
        expect(d.reason).not.toMatch(/the policy could not be evaluated/);
      }),
      { numRuns: RUNS },
    );
  });

  it("evaluate is total even for malformed facts (untyped junk): it still answers with a decision", () => {
    const p = compileRules(
      [
        { id: "a", decision: "allow", reason: "r", when: "args.amount > 1" },
        { id: "b", decision: "deny", reason: "r", match: { team: "x" }, history: { count: { tool: "x", within: "1m" } }, when: "history.count > 1" },
      ],
      "enforce",
    );
    fc.assert(
      fc.property(fc.anything(), fc.anything(), (junk, more) => {
        const d = evaluate(p, { ...(typeof junk === "object" && junk !== null ? junk : {}), history: more } as never);
        expect(["allow", "deny", "require_approval"]).toContain(d.decision);
        expect(d.policyVersion).toBe(p.version);
      }),
      { numRuns: RUNS },
    );
  });

  it("evaluate is deterministic: the same facts (or a copy of them) give the same decision", () => {
    fc.assert(
      fc.property(policyArb, modeArb, factsArb, fc.array(answerArb, { maxLength: 6 }), (rules, mode, f, vals) => {
        const p = compileRules(rules, mode);
        const qs = historyQueries(p, f);
        const facts: PolicyFacts = {
          ...f,
          history: { answers: Object.fromEntries(qs.map((q, i) => [historyKey(q), vals[i % Math.max(vals.length, 1)] ?? 0])) },
        };
        const a = evaluate(p, facts);
        const b = evaluate(p, structuredClone(facts));
        const c = evaluate(compileRules(rules, mode), facts);
        expect(b).toEqual(a);
        expect(c).toEqual(a);
      }),
      { numRuns: RUNS },
    );
  });

  it("advise and observe never block; enforce denies carry no obligations", () => {
    fc.assert(
      fc.property(policyArb, modeArb, factsArb, (rules, mode, f) => {
        const d = evaluate(compileRules(rules, mode), { ...f, history: { answers: {} } });
        if (mode !== "enforce") expect(d.decision).toBe("allow");
        if (d.decision === "deny") expect(d.obligations).toEqual([]);
        if (d.wouldBlock) expect(["deny", "require_approval"]).toContain(d.wouldBlock.decision);
      }),
      { numRuns: RUNS },
    );
  });

  it("deny overrides: a deciding deny that matches every call denies every call in enforce", () => {
    fc.assert(
      fc.property(policyArb, fc.nat(), factsArb, (rules, at, f) => {
        const all = [...rules];
        all.splice(at % (rules.length + 1), 0, { id: "stop", decision: "deny", reason: "everything stops" });
        const d = evaluate(compileRules(all, "enforce"), { ...f, history: { answers: {} } });
        expect(d.decision).toBe("deny");
        expect(d.reason).toContain("rule stop: everything stops");
      }),
      { numRuns: RUNS },
    );
  });

  it("a tool listVerdict hides is denied whatever the arguments, history and time", () => {
    fc.assert(
      fc.property(policyArb, factsArb, fc.array(answerArb, { maxLength: 6 }), (rules, f, vals) => {
        const p = compileRules(rules, "enforce");
        if (listVerdict(p, f) !== "hidden") return;
        const qs = historyQueries(p, f);
        const d = evaluate(p, { ...f, history: { answers: Object.fromEntries(qs.map((q, i) => [historyKey(q), vals[i] ?? 0])) } });
        expect(d.decision).toBe("deny");
      }),
      { numRuns: RUNS },
    );
  });

  it("observe rules never change the decision", () => {
    fc.assert(
      fc.property(policyArb, modeArb, factsArb, (rules, mode, f) => {
        const facts = { ...f, history: { answers: {} } };
        const withShadows = evaluate(compileRules(rules, mode), facts);
        const without = evaluate(
          compileRules(
            rules.filter((r) => r.mode !== "observe"),
            mode,
          ),
          facts,
        );
        expect(withShadows.decision).toBe(without.decision);
        expect(withShadows.rule).toBe(without.rule);
        expect(withShadows.obligations).toEqual(without.obligations);
      }),
      { numRuns: RUNS },
    );
  });

  it("compilePolicy refuses a bad policy naming every bad rule at once", () => {
    const BAD: Rule[] = [
      { id: "b", when: "args.amount >", decision: "allow", reason: "r" },
      { id: "b", when: "nope == 1", decision: "allow", reason: "r" },
      { id: "b", when: "1 + 1", decision: "deny", reason: "r" },
      { id: "b", when: "history.count > 1", decision: "deny", reason: "r" },
      { id: "b", history: { count: { tool: "x", within: "1m", scope: "principal" } }, decision: "deny", reason: "r" },
      { id: "b", decision: "allow", reason: "r", obligations: ["Nope!"] },
      { id: "b", decision: "allow", reason: "r", obligations: ["rate_limit:many"] },
    ];
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.constant(null), fc.constantFrom(...BAD)), { minLength: 1, maxLength: 10 }), (slots) => {
        const rules = slots.map((s, i) => (s ? { ...s, id: `r${i}` } : { id: `r${i}`, decision: "allow" as const, reason: "fine" }));
        const bad = slots.flatMap((s, i) => (s ? [i] : []));
        let err: unknown = null;
        try {
          compilePolicy({ rules } as never, { mode: "enforce", unclassifiedReads: "block" });
        } catch (e) {
          err = e;
        }
        if (bad.length === 0) {
          expect(err).toBeNull();
          return;
        }
        expect(err).toBeInstanceOf(PolicyError);
        const problems = (err as PolicyError).problems;
        expect(problems).toHaveLength(bad.length);
        expect(problems.map((p) => Number(/^policy\.rules\[(\d+)\]/.exec(p)?.[1]))).toEqual(bad);
      }),
      { numRuns: 200 },
    );
  });
});
