/**
 * The policy watch (src/services/policy-watch.ts): a complete tools/list from every upstream checks the
 * served policy against the real tools; a rule that stops matching (the upstream dropped its tool)
 * is reported once — a log line, a `policy.unmatched` record, the isolate's report /readyz shows —
 * and the same report is not repeated; partial listings judge nothing.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { parsePolicy } from "../../src/config/policy-schema.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { policyWatchReport, resetPolicyWatch, watchPolicy } from "../../src/services/policy-watch.ts";
import type { Json, JsonObject } from "../../src/wire/jsonrpc.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

const UP = testUpstream("everything", "http://127.0.0.1:9/mcp", { namespaced: false });
const parsed = parsePolicy({
  rules: [
    { id: "no-env", match: { upstream: "everything", tool: "get-env" }, decision: "deny", reason: "secrets" },
    { id: "big-sums", match: { upstream: "everything", tool: "get-sum" }, when: "args.a + args.b > 100", decision: "require_approval", reason: "big" },
  ],
});
if (!parsed.ok) throw new Error(parsed.problems.join("; "));
const cfg = testConfig([UP], { mode: "enforce", policy: parsed.policy });

function context() {
  const records: { id: string; body: JsonObject }[] = [];
  const ctx = { cfg, stores: { ledger: { unmatched: (id: string, body: JsonObject) => records.push({ id, body }) } } } as unknown as CallContext;
  return { ctx, records };
}
const tools = (...names: string[]): Json[] => names.map((name) => ({ name, inputSchema: { type: "object" } }));

afterEach(() => {
  resetPolicyWatch();
  vi.restoreAllMocks();
});

describe("watchPolicy", () => {
  it("all rules matching: a clean report, no record; the upstream drops get-env: one record, one log line, the report names the rule", () => {
    const warn = vi.spyOn(console, "warn").mockImplementation(() => undefined);
    const { ctx, records } = context();
    watchPolicy(ctx, [[UP, tools("get-sum", "get-env", "echo")]], true);
    expect(records).toEqual([]);
    expect(policyWatchReport()).toMatchObject({ mode: "enforce", tools: 3, unmatched: [] });

    watchPolicy(ctx, [[UP, tools("get-sum", "echo")]], true);
    expect(records).toHaveLength(1);
    expect(records[0]!.id).toMatch(/^policy\.unmatched:[0-9a-f]{64}$/);
    expect(records[0]!.body).toMatchObject({
      mode: "enforce",
      tools: 2,
      rules: [{ rule: "no-env", decision: "deny", blocking: true, names: ["upstream everything", "get-env"], matched_before: ["get-env"] }],
    });
    // The report names what the rule matched in the previous listing: the tool the upstream dropped.
    expect(policyWatchReport()?.unmatched).toEqual([
      'rule no-env (deny): match names "upstream everything", "get-env", which matches no tool of the 2 known (in the previous listing it matched "get-env")',
    ]);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]![0])).toContain('"event":"policy_unmatched"');

    // The same listing again: already reported by this isolate.
    watchPolicy(ctx, [[UP, tools("get-sum", "echo")]], true);
    expect(records).toHaveLength(1);
    // The tool comes back: the report is clean again, and nothing is recorded.
    watchPolicy(ctx, [[UP, tools("get-sum", "get-env", "echo")]], true);
    expect(records).toHaveLength(1);
    expect(policyWatchReport()?.unmatched).toEqual([]);
  });

  it("a partial listing (a page cut short, an upstream not listed, a /mcp/<upstream> route's one upstream) judges nothing", () => {
    const { ctx, records } = context();
    watchPolicy(ctx, [[UP, tools("echo")]], false);
    watchPolicy(ctx, [], true);
    watchPolicy({ ...ctx, route: { upstream: UP.name, prefixed: true } }, [[UP, tools("echo")]], true);
    expect(records).toEqual([]);
    expect(policyWatchReport()).toBeNull();
  });
});
