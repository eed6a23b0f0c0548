// Policy engine properties (fast-check): for generated policies (every rule feature: match fields,
// CEL conditions — some that error on some inputs — history, magnitude, windows, per-rule observe)
// and arbitrary calls (arguments of any JSON shape, history answers of any type, any time, even
// NaN), evaluate never throws, is deterministic, keeps the mode's promises, lets a deny override
// everything, agrees with listVerdict, and compilePolicy refuses bad policies naming every problem.
// Also, for conditions from a CEL grammar over the whole scope (ill-typed and run-time-failing ones
// included), principals with any value in any field and wire-shaped arguments (`__proto__`,
// `constructor`, deep nesting, extreme numbers): compilePolicy answers or throws only PolicyError;
// evaluate is total (one of allow | deny | require_approval) and deterministic — again, on a copy,
// on a fresh compile, and after deciding other calls; history queries, list verdicts and budgets
// answer every well-typed principal and are deterministic for any.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { type PolicyInput, parsePolicy } from "../../src/config/policy-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { ROLES } from "../../src/config/roles.ts";
import { budgetLimits, evaluate, historyQueries, listVerdict, type PolicyFacts } from "../../src/governance/policy.ts";
import { compilePolicy, PolicyError } from "../../src/governance/policy-compile.ts";
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

// ---- Totality and determinism for arbitrary CEL conditions, arbitrary principals and wire-shaped arguments ----

/**
 * CEL conditions from a grammar over the documented scope: values (fields, literals, arithmetic,
 * conversions, ternaries) inside boolean forms (comparisons, `in`, logic, `has`, macros, string
 * functions) — some ill-typed, some that error at run time (a missing key, a bad regex, a
 * division by zero, an overflow).
 */
const celArb: fc.Arbitrary<string> = fc.letrec<{ bool: string; value: string; atom: string }>((tie) => ({
  atom: fc.oneof(
    fc.constantFrom(
      "args.amount",
      "args.n",
      "args.s",
      "args.items",
      "args.order.total",
      'args["weird key"]',
      "args.items[0]",
      "args.__proto__",
      "args.constructor",
      "principal.sub",
      "principal.team",
      "principal.roles",
      "principal.tools",
      "tool.name",
      "tool.upstream",
      "tool.exposed",
      "classification.effect",
      "classification.blast_radius",
      "run.id",
      "now",
      "now.getHours()",
      "now.getDayOfWeek()",
      'now.getHours("Europe/Paris")',
      'timestamp("2026-01-01T00:00:00Z")',
      'duration("1h")',
      "args",
      "principal",
    ),
    fc.integer({ min: -3, max: 3000 }).map(String),
    fc.constantFrom("1.5", "0.0", "-2.5", "1e3", "18446744073709551615u", "9223372036854775807", "0"),
    fc.string({ maxLength: 6 }).map((s) => JSON.stringify(s)),
    fc.constantFrom("true", "false", "null", "[]", "[1, 2]", '{"a": 1}', "{}", 'b"x"'),
  ),
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    tie("atom"),
    tie("atom"),
    fc.tuple(tie("value"), fc.constantFrom("+", "-", "*", "/", "%"), tie("value")).map(([x, op, y]) => `${x} ${op} ${y}`),
    fc.tuple(fc.constantFrom("size", "int", "double", "string", "dyn", "uint"), tie("value")).map(([f, x]) => `${f}(${x})`),
    fc.tuple(tie("bool"), tie("value"), tie("value")).map(([c, x, y]) => `(${c} ? ${x} : ${y})`),
    fc
      .tuple(fc.constantFrom("args.items", "principal.roles", "[1, 2, 3]"), fc.constantFrom("map", "filter"), tie("bool"))
      .map(([l, m, body]) => `${l}.${m}(x, ${body})`),
  ),
  bool: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.tuple(tie("value"), fc.constantFrom("==", "!=", "<", "<=", ">", ">=", "in"), tie("value")).map(([x, op, y]) => `${x} ${op} ${y}`),
    fc.tuple(tie("bool"), fc.constantFrom("&&", "||"), tie("bool")).map(([x, op, y]) => `(${x}) ${op} (${y})`),
    tie("bool").map((x) => `!(${x})`),
    fc
      .tuple(fc.constantFrom("has(args.amount)", "has(args.items)", "has(principal.team)", "has(args.order.total)"), tie("bool"))
      .map(([h, x]) => `${h} && ${x}`),
    fc
      .tuple(tie("atom"), fc.constantFrom("startsWith", "endsWith", "contains", "matches"), fc.constantFrom('"a"', '""', '"^a+$"', '"("', "1"))
      .map(([x, f, y]) => `${x}.${f}(${y})`),
    fc
      .tuple(fc.constantFrom("args.items", "principal.roles", "[1, 2, 3]", "args"), fc.constantFrom("exists", "all", "exists_one"), tie("bool"))
      .map(([l, m, body]) => `${l}.${m}(x, ${body})`),
    fc.constantFrom("true", "false", "args.flag", "x == 1", "bool(args.s)"),
  ),
})).bool;

/** Any value at all in any principal field (what a bug elsewhere, or a hostile token, could hand the engine). */
const junkPrincipalArb = fc.record({
  sub: fc.oneof(fc.string(), fc.anything({ maxDepth: 1 })),
  team: fc.oneof(fc.constantFrom("ops", "finance"), fc.anything({ maxDepth: 1 })),
  roles: fc.oneof(fc.subarray([...ROLES]), fc.array(fc.anything({ maxDepth: 0 }), { maxLength: 3 }), fc.anything({ maxDepth: 1 })),
  tools: fc.oneof(fc.constant(null), fc.array(fc.string(), { maxLength: 2 }), fc.anything({ maxDepth: 1 })),
  authenticated: fc.anything({ maxDepth: 0 }),
  jti: fc.option(fc.string({ maxLength: 6 }), { nil: undefined }),
}) as unknown as fc.Arbitrary<Principal>;

/** Arguments as they arrive off the wire: JSON text parsed, with keys that mean something to JavaScript objects. */
const wireArgsArb: fc.Arbitrary<JsonObject | undefined> = fc.oneof(
  argsArb,
  fc
    .dictionary(
      fc.oneof(
        fc.constantFrom("__proto__", "constructor", "prototype", "hasOwnProperty", "toString", "amount", "items", "n", "weird key", ""),
        fc.string({ maxLength: 4 }),
      ),
      fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constantFrom(1e308, -0, 5e-324, 2 ** 53 + 1)),
      { maxKeys: 5 },
    )
    .map((o) => JSON.parse(JSON.stringify(o)) as JsonObject),
  fc.constant(JSON.parse('{"__proto__": {"amount": 5000}, "amount": 1}') as JsonObject),
  fc.constant(JSON.parse(`{"deep": ${"[".repeat(60)}1${"]".repeat(60)}}`) as JsonObject),
);

const DECISIONS = ["allow", "deny", "require_approval"];

describe("policy properties: arbitrary conditions and principals", () => {
  it("compilePolicy is total over arbitrary CEL conditions: it compiles or refuses with a PolicyError naming the rule, nothing else", () => {
    let compiled = 0;
    fc.assert(
      fc.property(
        fc.array(fc.oneof({ weight: 5, arbitrary: celArb }, { weight: 1, arbitrary: fc.string({ maxLength: 30 }) }), { minLength: 1, maxLength: 3 }),
        modeArb,
        (whens, mode) => {
          const rules = whens.map((when, i) => ({ id: `c${i}`, decision: (["allow", "deny", "require_approval"] as const)[i % 3]!, reason: "r", when }));
          try {
            compilePolicy({ rules } as never, { mode, unclassifiedReads: "block" });
            compiled++;
          } catch (e) {
            expect(e, `compiling ${JSON.stringify(whens)}`).toBeInstanceOf(PolicyError);
            for (const p of (e as PolicyError).problems) expect(p).toMatch(/^policy\.rules\[\d+\]/);
          }
        },
      ),
      { numRuns: RUNS },
    );
    // The grammar is not all noise: some policies of up to three generated conditions type-check as a whole.
    expect(compiled).toBeGreaterThan(RUNS / 20);
  });

  it("evaluate is total and deterministic for every condition that compiles, with arbitrary principals and wire-shaped arguments", () => {
    let ran = 0;
    fc.assert(
      fc.property(
        fc.array(celArb, { minLength: 1, maxLength: 3 }),
        policyArb,
        modeArb,
        factsArb,
        fc.oneof(
          principalArb.map((p) => ({ p, typed: true })),
          junkPrincipalArb.map((p) => ({ p, typed: false })),
        ),
        wireArgsArb,
        (whens, generated, mode, f, { p: principal, typed }, args) => {
          const rules: Rule[] = [
            ...whens.map((when, i) => ({ id: `c${i}`, decision: (["deny", "require_approval", "allow"] as const)[i % 3]!, reason: "r", when })),
            ...generated,
          ];
          let p: ReturnType<typeof compileRules>;
          try {
            p = compileRules(rules, mode);
          } catch (e) {
            if (e instanceof PolicyError || /does not parse/.test(String(e))) return;
            throw e;
          }
          ran++;
          const facts: PolicyFacts = { ...f, principal, arguments: args, history: { answers: {} } };
          const a = evaluate(p, facts);
          expect(DECISIONS).toContain(a.decision);
          expect(typeof a.reason).toBe("string");
          expect(a.policyVersion).toBe(p.version);
          expect(a.rule === null || rules.some((r) => r.id === a.rule)).toBe(true);
          // A well-typed call never reaches the last-resort catch: a condition that errors is that rule failing closed.
          if (typed) expect(a.reason, JSON.stringify(whens)).not.toMatch(/the policy could not be evaluated/);
          // Deterministic: again, on a copy, and on a fresh compile of the same policy.
          expect(evaluate(p, facts)).toEqual(a);
          expect(evaluate(p, structuredClone(facts))).toEqual(a);
          expect(evaluate(compileRules(rules, mode), facts)).toEqual(a);
        },
      ),
      { numRuns: 200 },
    );
    expect(ran).toBeGreaterThan(10);
  });

  it("no state carries between calls: a decision is the same before and after deciding other arbitrary calls", () => {
    fc.assert(
      fc.property(
        policyArb,
        modeArb,
        factsArb,
        fc.array(fc.tuple(factsArb, fc.oneof(principalArb, junkPrincipalArb), wireArgsArb), { minLength: 1, maxLength: 5 }),
        (rules, mode, f, others) => {
          const p = compileRules(rules, mode);
          const facts: PolicyFacts = { ...f, history: { answers: {} } };
          const first = evaluate(p, facts);
          for (const [o, principal, args] of others) {
            const d = evaluate(p, { ...o, principal, arguments: args, history: { answers: {} } });
            expect(DECISIONS).toContain(d.decision);
          }
          expect(evaluate(p, facts)).toEqual(first);
        },
      ),
      { numRuns: 200 },
    );
  });

  it("the rest of the engine's surface (history queries, list verdicts, budgets) answers for arbitrary principals, deterministically", () => {
    fc.assert(
      fc.property(policyArb, modeArb, factsArb, fc.oneof(principalArb, junkPrincipalArb), (rules, mode, f, principal) => {
        const p = compileRules(rules, mode);
        const facts = { ...f, principal };
        const attempt = <T>(fn: () => T): { value: T } | { threw: string } => {
          try {
            return { value: fn() };
          } catch (e) {
            return { threw: e instanceof Error ? e.constructor.name : typeof e };
          }
        };
        const q = attempt(() => historyQueries(p, facts));
        const l = attempt(() => listVerdict(p, facts));
        const b = attempt(() => budgetLimits(p, principal, f.runId));
        // Well-typed principals: every answer is given.
        const typed =
          typeof principal.sub === "string" &&
          typeof principal.team === "string" &&
          Array.isArray(principal.roles) &&
          principal.roles.every((r) => typeof r === "string");
        if (typed && (principal.tools === null || (Array.isArray(principal.tools) && principal.tools.every((t) => typeof t === "string")))) {
          expect("value" in q && "value" in l && "value" in b).toBe(true);
        }
        if ("value" in l) expect(["hidden", "listed"]).toContain(l.value);
        // Deterministic either way (the same answer, or the same kind of failure — which the governed path turns into a refusal).
        expect(attempt(() => historyQueries(p, facts))).toEqual(q);
        expect(attempt(() => listVerdict(p, facts))).toEqual(l);
        expect(attempt(() => budgetLimits(p, principal, f.runId))).toEqual(b);
      }),
      { numRuns: 250 },
    );
  });
});
