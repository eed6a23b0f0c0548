#!/usr/bin/env node
/**
 * `npm run bench:policy`: a microbenchmark of the policy engine (src/governance/policy.ts) —
 * one tools/call evaluated against a 50-rule policy, timed one evaluation at a time over a fixed
 * count after a warm-up, and printed as p50 / p99 / max in microseconds for a few shapes of
 * policy (typical mix, every rule matching with a CEL condition, the list verdict, the history
 * query planner) — and the governance cost of one call: classification (classify.ts
 * classifyTool), validation (validate.ts validateCall against a realistic inputSchema, drift
 * check included) and policy evaluation (evaluate, 50 rules), step by step and together, side by
 * side with the same steps as pass-throughs (what a gateway without mappings or policy runs).
 * `--governance-json` prints only that comparison, as JSON, for bench/run.mjs (`npm run bench`),
 * which runs this file in a child Node with the same flags. Imports the TypeScript sources
 * directly (Node 22 type transformation, so TypeScript beyond erasable syntax cannot break it)
 * and runs with code generation from strings disabled, so a CEL interpreter or schema validator
 * that needed `eval`/`new Function` would fail here as it would in production. Prints numbers,
 * never asserts a time; no I/O beyond stdout.
 */
import { realpathSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { opsPayRules, otherToolRules } from "./harness.mjs";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const { parsePolicy } = await import(resolve(root, "src/config/policy-schema.ts"));
const { compilePolicy } = await import(resolve(root, "src/governance/policy-compile.ts"));
const { evaluate, historyQueries, listVerdict } = await import(resolve(root, "src/governance/policy.ts"));
const { historyKey, OPEN_POLICY } = await import(resolve(root, "src/governance/steps.ts"));
const { classifyTool } = await import(resolve(root, "src/governance/classify.ts"));
const { catalogEntry } = await import(resolve(root, "src/governance/catalog-entry.ts"));
const { validateCall } = await import(resolve(root, "src/governance/validate.ts"));

const N = Number(process.env.BENCH_POLICY_N ?? 20_000);
const WARMUP = Math.min(5_000, N);
const TARGET_P99_US = 50;

function codegenRefused() {
  try {
    // biome-ignore lint/security/noGlobalEval: probes that code generation from strings is refused in this process
    eval("1");
    return false;
  } catch {
    return true;
  }
}

/** 50 rules as an operator would write them: most about other tools, some static, some CEL, history, a window, a magnitude. */
function typicalRules() {
  const rules = [...otherToolRules(30), ...opsPayRules(8, "static")];
  for (let i = 0; i < 6; i++)
    rules.push({
      id: `cel-${i}`,
      match: { upstream: "pay" },
      when: `has(args.amount) && args.amount > ${1000 * (i + 1)}.0 && principal.team == "ops" && !(args.to.startsWith("blocked-"))`,
      decision: "require_approval",
      reason: "large payment",
    });
  rules.push({
    id: "rate",
    match: { tool: "pay__*" },
    history: { count: { tool: "pay__*", within: "1m" } },
    when: "history.count >= 20",
    decision: "deny",
    reason: "at most 20 payments a minute",
  });
  rules.push({
    id: "daily-cap",
    match: { tool: "pay__*" },
    history: { total: { tool: "pay__*", arg: "amount", within: "1d" } },
    when: "history.total + args.amount > 100000.0",
    decision: "deny",
    reason: "daily cap",
  });
  rules.push({
    id: "office-hours",
    match: { tool: "pay__*" },
    window: { days: ["sat", "sun"] },
    decision: "require_approval",
    reason: "weekend payments need approval",
  });
  rules.push({ id: "magnitude", match: { tool: "pay__*" }, magnitude: { over: 50000 }, decision: "deny", reason: "too large" });
  rules.push({ id: "shadow", match: { tool: "pay__*" }, when: 'args.currency == "XTS"', decision: "deny", reason: "test currency", mode: "observe" });
  rules.push({ id: "no-drops", match: { tool: "db__drop*" }, decision: "deny", reason: "never drop" });
  return rules;
}
/** The worst case: every one of 50 rules matches and runs a CEL condition. */
function allCelRules() {
  return Array.from({ length: 50 }, (_, i) => ({
    id: `c${i}`,
    when: `args.amount > ${i}.0 && "agent" in principal.roles && classification.effect != "read_only" && tool.upstream == "pay"`,
    decision: i % 2 ? "allow" : "require_approval",
    reason: `r${i}`,
    obligations: [`audit:full`],
  }));
}

function compile(rules) {
  const parsed = parsePolicy({ rules });
  if (!parsed.ok) throw new Error(parsed.problems.join("\n"));
  return compilePolicy(parsed.policy, { mode: "enforce", unclassifiedReads: "block" });
}

const principal = { sub: "agent:bot", team: "ops", roles: ["agent"], tools: ["pay__*"], authenticated: true, jti: "j1" };
const classification = {
  effect: "irreversible",
  blastRadius: "scoped",
  axes: { reversibility: "irreversible", blastRadius: "scoped", externality: "external" },
  source: "mapping",
};
const baseFacts = {
  principal,
  exposedName: "pay__send",
  upstream: "pay",
  tool: "send",
  arguments: { amount: 2500, to: "acct-42", currency: "EUR", memo: "invoice 2026-0042" },
  classification,
  mapping: { effect: "irreversible", approval: "none", arguments: "full", magnitude: { fromArg: "amount" } },
  annotations: { destructiveHint: true },
  runId: "run-1",
  now: Date.parse("2026-03-04T10:30:00Z"),
};
function factsFor(p) {
  const qs = historyQueries(p, baseFacts);
  return { ...baseFacts, history: { answers: Object.fromEntries(qs.map((q) => [historyKey(q), q.kind === "succeeded" ? true : 3])) } };
}

function measure(fn, n = N) {
  const warmup = Math.min(5_000, n);
  for (let i = 0; i < warmup; i++) fn();
  const t = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const s = process.hrtime.bigint();
    fn();
    t[i] = Number(process.hrtime.bigint() - s) / 1000;
  }
  t.sort();
  const q = (x) => t[Math.min(n - 1, Math.floor(x * n))];
  return { p50: q(0.5), p99: q(0.99), max: t[n - 1] };
}

// ---- the governance cost of one call -------------------------------------------------------

/**
 * A realistic inputSchema: a payment `send` tool as a payments server would publish it — required
 * fields, a pattern through `$ref`/`$defs`, enums, bounds, a nested object, a unique-items array
 * and an `if/then` (instant payments are capped), `additionalProperties: false` throughout.
 */
const SEND_SCHEMA = {
  type: "object",
  $defs: {
    account: { type: "string", pattern: "^acct-[0-9]{1,12}$" },
    money: {
      type: "object",
      properties: { amount: { type: "number", exclusiveMinimum: 0, maximum: 1e9 }, currency: { type: "string", pattern: "^[A-Z]{3}$" } },
      required: ["amount", "currency"],
      additionalProperties: false,
    },
  },
  properties: {
    amount: { type: "number", exclusiveMinimum: 0, maximum: 1e9, description: "Amount in the currency's major unit" },
    to: { $ref: "#/$defs/account" },
    currency: { type: "string", enum: ["EUR", "USD", "GBP", "XTS"] },
    memo: { type: "string", maxLength: 140 },
    kind: { type: "string", enum: ["standard", "instant"], default: "standard" },
    fees: { $ref: "#/$defs/money" },
    tags: { type: "array", items: { type: "string", minLength: 1, maxLength: 32 }, maxItems: 10, uniqueItems: true },
    schedule: {
      type: "object",
      properties: { at: { type: "string", minLength: 20, maxLength: 40 }, repeat: { type: "string", enum: ["none", "weekly", "monthly"] } },
      required: ["at"],
      additionalProperties: false,
    },
  },
  required: ["amount", "to", "currency"],
  additionalProperties: false,
  if: { properties: { kind: { const: "instant" } }, required: ["kind"] },
  // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then keyword, not a thenable
  then: { properties: { amount: { maximum: 10000 } } },
};
const SEND_ARGS = {
  amount: 2500,
  to: "acct-42",
  currency: "EUR",
  memo: "invoice 2026-0042",
  kind: "instant",
  fees: { amount: 1.5, currency: "EUR" },
  tags: ["invoice", "q1"],
  schedule: { at: "2026-03-04T10:30:00Z", repeat: "none" },
};
const sendTool = catalogEntry({ name: "send", inputSchema: SEND_SCHEMA, annotations: { destructiveHint: true, openWorldHint: true } }, "pay__send");
const payUpstream = {
  name: "pay",
  url: "https://pay.example/mcp",
  namespaced: true,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 30_000,
  credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
  egress: {},
  onLoopback: false,
};
const target = { upstream: payUpstream, tool: sendTool };
/** The operator's mapping, pinned to the tool's schema hash (so the drift check runs too). */
const sendMapping = {
  effect: "irreversible",
  verb: "send",
  axes: { reversibility: "irreversible", blastRadius: "scoped", externality: "external" },
  approval: "none",
  arguments: "full",
  magnitude: { fromArg: "amount" },
  schemaHash: sendTool.schemaHash,
};
const payMappings = { loaded: true, get: (upstream, tool) => (upstream === "pay" && tool === "send" ? sendMapping : undefined) };
const unmappedTarget = { upstream: payUpstream, tool: { ...sendTool, name: "refund_charge", exposedName: "pay__refund_charge" } };

/** The pass-throughs: a gateway without mappings, schema checks or policy runs these in the same places. */
const passClassification = {
  effect: "irreversible",
  blastRadius: "systemic",
  axes: { reversibility: "irreversible", blastRadius: "systemic", externality: "external" },
  source: "default",
};
const passClassify = (_target, _mappings) => passClassification;
const passValidate = (_target, _args, _mapping) => null;
const passDecide = (_policy, facts) => OPEN_POLICY.decide(facts);

/** One governed call's three steps, with the facts built per call as engine.ts builds them. */
function governanceSteps(classify, validate, decide, policy, history) {
  return () => {
    const classification = classify(target, payMappings);
    const mapping = payMappings.get("pay", "send");
    const refusal = validate(target, SEND_ARGS, mapping);
    const d = decide(policy, {
      principal,
      exposedName: sendTool.exposedName,
      upstream: "pay",
      tool: "send",
      arguments: SEND_ARGS,
      classification,
      mapping,
      annotations: sendTool.annotations,
      runId: "run-1",
      now: baseFacts.now,
      history,
    });
    return (refusal ? 1 : 0) ^ d.obligations.length;
  };
}

/**
 * The governance cost of one call, measured in this process: each step and the three together,
 * governed and as pass-throughs, `n` timed calls each (p50/p99/max µs).
 */
export function governanceCost(n = N) {
  const policy = compile(typicalRules());
  const history = factsFor(policy).history;
  // The governed steps must take the paths a real allowed call takes: valid arguments, no drift.
  const refusal = validateCall(target, SEND_ARGS, sendMapping);
  if (refusal) throw new Error(`bench: the sample arguments do not validate: ${refusal.reason}`);
  const c = classifyTool(target, payMappings);
  if (c.source !== "mapping") throw new Error(`bench: the sample tool is not classified by its mapping (${c.source})`);
  let sink = 0;
  const facts = { ...baseFacts, classification: c, mapping: sendMapping, history };
  const rows = [
    [
      "classify (classifyTool, mapped)",
      () => (sink ^= classifyTool(target, payMappings).effect.length),
      () => (sink ^= passClassify(target, payMappings).effect.length),
    ],
    [
      "classify (classifyTool, unmapped: heuristic)",
      () => (sink ^= classifyTool(unmappedTarget, payMappings).effect.length),
      () => (sink ^= passClassify(unmappedTarget, payMappings).effect.length),
    ],
    [
      "validate (validateCall, 8-field schema + drift)",
      () => (sink ^= validateCall(target, SEND_ARGS, sendMapping) ? 1 : 0),
      () => (sink ^= passValidate(target, SEND_ARGS, sendMapping) ? 1 : 0),
    ],
    [
      "policy (evaluate, 50 rules, typical mix)",
      () => (sink ^= evaluate(policy, facts).obligations.length),
      () => (sink ^= passDecide(policy, facts).obligations.length),
    ],
    [
      "per call: classify + validate + policy",
      governanceSteps(classifyTool, validateCall, evaluate, policy, history),
      governanceSteps(passClassify, passValidate, passDecide, policy, history),
    ],
  ].map(([step, governed, baseline]) => ({ step, governed: measure(governed, n), baseline: measure(baseline, n) }));
  if (sink === Number.MIN_SAFE_INTEGER) console.log(sink); // keeps the results alive
  return { n, node: process.version, codegenRefused: codegenRefused(), rows };
}

/** The governance rows as text (shared with bench/run.mjs). */
export function formatGovernanceCost(g) {
  const two = (a, b) => `${a.toFixed(2).padStart(8)}${b.toFixed(2).padStart(8)}`;
  const lines = [
    `governance per call, in-process: ${g.n} timed calls per row after a warm-up, Node ${g.node}, code generation from strings refused: ${g.codegenRefused ? "yes" : "NO"}`,
    `${"".padEnd(48)}${["governed µs", "pass-through µs", "added µs"].map((h) => h.padStart(16)).join("  ")}`,
    `${"step".padEnd(48)}${Array.from({ length: 3 }, () => `${"p50".padStart(8)}${"p99".padStart(8)}`).join("  ")}`,
  ];
  for (const r of g.rows) {
    const { governed: a, baseline: b } = r;
    lines.push(`${r.step.padEnd(48)}${[two(a.p50, a.p99), two(b.p50, b.p99), two(a.p50 - b.p50, a.p99 - b.p99)].join("  ")}`);
  }
  return lines.join("\n");
}

function main() {
  if (process.argv.includes("--governance-json")) {
    const g = governanceCost(Number(process.env.BENCH_GOV_N ?? N));
    console.log(JSON.stringify({ ...g, text: formatGovernanceCost(g) }));
    return;
  }
  const typical = compile(typicalRules());
  const allCel = compile(allCelRules());
  const typicalFacts = factsFor(typical);
  const allCelFacts = factsFor(allCel);
  const sample = evaluate(typical, typicalFacts);
  let sink = 0;
  const rows = [
    ["evaluate: 50 rules, typical mix", () => (sink ^= evaluate(typical, typicalFacts).obligations.length)],
    ["evaluate: 50 rules, all match with CEL", () => (sink ^= evaluate(allCel, allCelFacts).obligations.length)],
    ["historyQueries: 50 rules", () => (sink ^= historyQueries(typical, baseFacts).length)],
    ["listVerdict: 50 rules", () => (sink ^= listVerdict(typical, baseFacts).length)],
  ].map(([name, fn]) => ({ name, ...measure(fn) }));

  const pad = (s, n) => String(s).padEnd(n);
  const num = (x) => x.toFixed(2).padStart(8);
  console.log(`policy engine microbenchmark — ${N} evaluations each after ${WARMUP} warm-up, Node ${process.version}`);
  console.log(`code generation from strings refused in this process: ${codegenRefused() ? "yes" : "NO"}`);
  console.log(`sample decision (typical mix): ${sample.decision} by ${sample.rule} with ${sample.obligations.length} obligations\n`);
  console.log(`${pad("case", 42)}${"p50 µs".padStart(8)}${"p99 µs".padStart(8)}${"max µs".padStart(8)}`);
  for (const r of rows) console.log(`${pad(r.name, 42)}${num(r.p50)}${num(r.p99)}${num(r.max)}`);
  const p99 = rows[0].p99;
  console.log(`\ntarget: one call against 50 rules ≤ ${TARGET_P99_US} µs p99 — typical mix ${p99.toFixed(2)} µs: ${p99 <= TARGET_P99_US ? "met" : "missed"}`);
  console.log(`\n${formatGovernanceCost(governanceCost(Number(process.env.BENCH_GOV_N ?? N)))}`);
  if (sink === Number.MIN_SAFE_INTEGER) console.log(sink); // keeps the results alive
}

// Run as a command, not when imported.
if (process.argv[1] && pathToFileURL(realpathSync(process.argv[1])).href === import.meta.url) main();
