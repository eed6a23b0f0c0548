/**
 * Policy coverage (src/governance/policy-coverage.ts): which rules name tools that do not exist —
 * a typo, a tool renamed for agents by namespacing, an upstream that is gone, a history glob that
 * counts nothing — with the nearest real names, and which of them refuse a config in enforce.
 */
import { describe, expect, it } from "vitest";
import { type PolicyInput, parsePolicy } from "../../src/config/policy-schema.ts";
import { compilePolicy } from "../../src/governance/policy-compile.ts";
import { policyEngine } from "../../src/governance/engine.ts";
import { testConfig, testUpstream } from "./fixtures.ts";
import { describeUnmatched, type KnownTool, matchedBefore, unmatchedRules } from "../../src/governance/policy-coverage.ts";

type Rules = NonNullable<PolicyInput["rules"]>;
const coverage = (rules: Rules, tools: KnownTool[]) => {
  const parsed = parsePolicy({ rules });
  if (!parsed.ok) throw new Error(parsed.problems.join("; "));
  return unmatchedRules(compilePolicy(parsed.policy, { mode: "enforce", unclassifiedReads: "block" }), tools, parsed.policy);
};
const ALONE: KnownTool[] = [
  { upstream: "everything", tool: "get-sum", exposed: "get-sum" },
  { upstream: "everything", tool: "get-env", exposed: "get-env" },
];
const NAMESPACED: KnownTool[] = [
  { upstream: "everything", tool: "get-sum", exposed: "everything__get-sum" },
  { upstream: "everything", tool: "get-env", exposed: "everything__get-env" },
  { upstream: "files", tool: "read", exposed: "files__read" },
];

describe("unmatchedRules", () => {
  it("a rule that matches a tool is not reported; one with a typo is, with the nearest name, and blocks when it denies or holds", () => {
    const u = coverage(
      [
        { id: "ok", match: { tool: "get-env" }, decision: "deny", reason: "r" },
        { id: "typo", match: { tool: "get-summ" }, decision: "require_approval", reason: "r" },
        { id: "allowed-typo", match: { tool: "get-envv" }, decision: "allow", reason: "r" },
        { id: "shadow", match: { tool: "get-summ" }, decision: "deny", reason: "r", mode: "observe" },
        { id: "masks", match: { tool: "get-envv" }, decision: "allow", reason: "r", obligations: ["redact:$.token"] },
      ],
      ALONE,
    );
    expect(u.map((x) => [x.rule, x.blocking, x.nearest])).toEqual([
      ["typo", true, ["get-sum"]],
      ["allowed-typo", false, ["get-env"]],
      ["shadow", false, ["get-sum"]],
      ["masks", true, ["get-env"]],
    ]);
    expect(describeUnmatched(u[0]!, ALONE.length)).toBe(
      'rule typo (require_approval): match names "get-summ", which matches no tool of the 2 known — did you mean "get-sum"?',
    );
  });
  it("a rule by exposed name that namespacing renamed is reported with the new name; the stable form is not", () => {
    const u = coverage(
      [
        { id: "old", match: { tool: "get-sum" }, decision: "deny", reason: "r" },
        { id: "stable", match: { upstream: "everything", tool: "get-sum" }, decision: "deny", reason: "r" },
      ],
      NAMESPACED,
    );
    expect(u.map((x) => [x.rule, x.nearest])).toEqual([["old", ["everything__get-sum"]]]);
  });
  it("an upstream that does not exist, a rule with no tool or upstream, and a history glob that counts nothing", () => {
    const u = coverage(
      [
        { id: "gone", match: { upstream: "filez" }, decision: "deny", reason: "r" },
        { id: "everyone", match: { role: "agent" }, decision: "deny", reason: "r" },
        {
          id: "counted",
          match: { tool: "files__*" },
          history: { count: { tool: "files__raed", within: "1m" } },
          when: "history.count > 1",
          decision: "deny",
          reason: "r",
        },
      ],
      NAMESPACED,
    );
    expect(u.map((x) => [x.rule, x.where, x.nearest])).toEqual([
      ["gone", "match", ["files"]],
      ["counted", "history.count.tool", ["files__read"]],
    ]);
  });
  it("a history query by stable identity ({upstream, tool}) counts the upstream's own name under any namespacing; a typo in it is reported", () => {
    const rules = (tool: string) => [
      {
        id: "sums",
        match: { upstream: "everything", tool: "get-sum" },
        history: { count: { upstream: "everything", tool, within: "1m" } },
        when: "history.count > 1",
        decision: "deny" as const,
        reason: "r",
      },
    ];
    expect(coverage(rules("get-sum"), ALONE)).toEqual([]);
    expect(coverage(rules("get-sum"), NAMESPACED)).toEqual([]);
    const typo = coverage(rules("get-summ"), NAMESPACED);
    expect(typo.map((x) => [x.rule, x.where, x.names, x.nearest, x.blocking])).toEqual([
      ["sums", "history.count.tool", ["upstream everything", "get-summ"], ["get-sum"], true],
    ]);
  });
});

describe("matchedBefore: what a rule that matches nothing matched under the previous config", () => {
  it("a rule renamed away from its tool names what it matched; a new rule, or one that matched nothing then, is left as it is", () => {
    const policyOf = (rules: Rules) => {
      const parsed = parsePolicy({ rules });
      if (!parsed.ok) throw new Error(parsed.problems.join("; "));
      return { compiled: compilePolicy(parsed.policy, { mode: "enforce", unclassifiedReads: "block" }), source: parsed.policy };
    };
    const old = policyOf([
      { id: "no-env", match: { tool: "get-env" }, decision: "deny", reason: "r" },
      { id: "typo", match: { tool: "get-summ" }, decision: "deny", reason: "r" },
    ]);
    const now = policyOf([
      { id: "no-env", match: { tool: "get-env" }, decision: "deny", reason: "r" },
      { id: "typo", match: { tool: "get-summ" }, decision: "deny", reason: "r" },
      { id: "fresh", match: { tool: "nope" }, decision: "deny", reason: "r" },
    ]);
    const unmatched = unmatchedRules(now.compiled, NAMESPACED, now.source);
    const told = matchedBefore(unmatched, old.compiled, ALONE, "under the config served now");
    expect(told.map((u) => [u.rule, u.before?.names ?? null])).toEqual([
      ["no-env", ["get-env"]],
      ["typo", null],
      ["fresh", null],
    ]);
    expect(describeUnmatched(told[0]!, 3)).toBe(
      'rule no-env (deny): match names "get-env", which matches no tool of the 3 known (under the config served now it matched "get-env") — did you mean "everything__get-env"?',
    );
  });
});

describe("which calls history keeps (policyEngine.recordsCall)", () => {
  const engineOf = (rules: Rules) => {
    const parsed = parsePolicy({ rules });
    if (!parsed.ok) throw new Error(parsed.problems.join("; "));
    return policyEngine(testConfig([testUpstream("everything")], { mode: "enforce", policy: parsed.policy }));
  };
  it("a rate-limited rule written by stable identity keeps the calls it limits, under any exposed name (a rename does not reset the count)", () => {
    const e = engineOf([{ id: "slow", match: { upstream: "everything", tool: "get-sum" }, decision: "allow", reason: "r", obligations: ["rate_limit:1/1m"] }]);
    expect(e.recordsCall?.("get-sum", "everything", "get-sum")).toBe(true);
    expect(e.recordsCall?.("everything__get-sum", "everything", "get-sum")).toBe(true);
    expect(e.recordsCall?.("everything__get-env", "everything", "get-env")).toBe(false);
    expect(e.recordsCall?.("get-sum", "files", "get-sum")).toBe(false);
  });
  it("a history query by stable identity keeps the calls it counts", () => {
    const e = engineOf([
      {
        id: "n",
        match: { tool: "*" },
        history: { count: { upstream: "everything", tool: "get-*", within: "1m" } },
        when: "history.count > 5",
        decision: "deny",
        reason: "r",
      },
    ]);
    expect(e.recordsCall?.("everything__get-env", "everything", "get-env")).toBe(true);
    expect(e.recordsCall?.("files__get-x", "files", "get-x")).toBe(false);
  });
});
