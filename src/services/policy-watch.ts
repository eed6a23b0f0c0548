/**
 * The policy watch: whenever a complete tools/list has been read from every upstream of the
 * served config (a catalog refresh, after `notifications/tools/list_changed` or a TTL), the policy
 * is checked against those real tools (src/governance/policy-coverage.ts). A rule that stops
 * matching — an upstream dropped or renamed the tool it names — is reported at once: one JSON log
 * line, a `policy.unmatched` record on the caller's team chain (its id names the report, so the
 * same report is stored once per chain), and the isolate's latest report, which `/readyz` shows
 * operators. In enforce a tool that appears unmapped is blocked by the baseline as before; this
 * only tells. Runs only on tools/list, never on a tools/call. Must never: throw into the listing,
 * block the answer, report from a partial set of lists (an upstream the caller's grant does not
 * reach, a page cut short, or a `/mcp/<upstream>` route's one upstream), or log a tool's arguments or a grant.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { compiledPolicy } from "../governance/engine.ts";
import { describeUnmatched, type KnownTool, matchedBefore, unmatchedRules } from "../governance/policy-coverage.ts";
import { canonicalJson, sha256Hex } from "../wire/canonical.ts";
import { isObject, type Json, type JsonObject } from "../wire/jsonrpc.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { knownTools } from "../protocol/exposed-names.ts";
import { Memo } from "../wire/memo.ts";

/** What /readyz shows operators: the newest report this isolate made. */
export interface PolicyWatchReport {
  at: string;
  policy_version: string;
  mode: string;
  tools: number;
  /** One line per rule (or history query) that matches no listed tool, with the nearest real names. */
  unmatched: string[];
}

let latest: PolicyWatchReport | null = null;
/** The signature of the last report per policy version, and the tools it was judged against (bounded: a few versions). */
const MAX_VERSIONS = 8;
const reported = new Memo<string, { signature: string; known: KnownTool[] }>({ max: MAX_VERSIONS });

/** The newest report of this isolate (null before any complete listing). */
export function policyWatchReport(): PolicyWatchReport | null {
  return latest;
}

/** For tests: forget what this isolate reported. */
export function resetPolicyWatch(): void {
  latest = null;
  reported.clear();
}

/**
 * Checks the served policy against `lists` (every upstream's complete raw tools/list as read for
 * this caller). `complete` false (an upstream missing or cut short): nothing is judged.
 */
export function watchPolicy(ctx: CallContext, lists: readonly (readonly [UpstreamConfig, Json[]])[], complete: boolean): void {
  try {
    const cfg = ctx.cfg;
    // A /mcp/<upstream> route lists one upstream of the config: a partial set, never judged.
    if (!complete || ctx.route || !cfg.policy || (cfg.policy.rules ?? []).length === 0) return;
    if (cfg.upstreams.some((up) => !lists.some(([u]) => u.name === up.name))) return;
    const names = lists.map(([up, raw]) => [up, raw.flatMap((t) => (isObject(t) && typeof t.name === "string" ? [t.name] : []))] as const);
    const known: KnownTool[] = knownTools(cfg.upstreams, names);
    const policy = compiledPolicy(cfg);
    const previous = reported.get(policy.version)?.known;
    let unmatched = unmatchedRules(policy, known, cfg.policy);
    // What a rule that stopped matching matched in this isolate's previous complete listing (the tool that was dropped).
    if (previous && unmatched.length) unmatched = matchedBefore(unmatched, policy, previous, "in the previous listing");
    const lines = unmatched.map((u) => describeUnmatched(u, known.length));
    // The signature leaves out what matched before: the same unmatched rules are one report however they are told.
    const signature = canonicalJson(unmatched.map((u) => describeUnmatched({ ...u, before: undefined }, known.length)));
    if (reported.get(policy.version)?.signature === signature) return;
    reported.set(policy.version, { signature, known });
    latest = { at: new Date().toISOString(), policy_version: policy.version, mode: cfg.mode, tools: known.length, unmatched: lines };
    if (unmatched.length === 0) return;
    console.warn(JSON.stringify({ event: "policy_unmatched", policy_version: policy.version, mode: cfg.mode, rules: lines }));
    const body: JsonObject = {
      policy_version: policy.version,
      mode: cfg.mode,
      tools: known.length,
      rules: unmatched.map((u) => ({
        rule: u.rule,
        decision: u.decision,
        where: u.where,
        names: u.names,
        nearest: u.nearest,
        blocking: u.blocking,
        ...(u.before ? { matched_before: u.before.names } : {}),
      })),
    };
    ctx.stores.ledger.unmatched?.(`policy.unmatched:${sha256Hex(`${policy.version}\n${signature}`)}`, body);
  } catch (e) {
    console.error("portcullis: the policy watch failed", String((e as Error)?.message ?? e));
  }
}
