/**
 * The policy of a config against its upstreams' real tool lists, read by the gateway itself: what
 * `PUT /v1/config` (and `portcullis.reload`) checks before storing a config. Every upstream of the
 * candidate config is asked for its tools/list at once (each bounded by LIST_TIMEOUT_MS, under the
 * reloading admin's credential scope); when every one answered, the rules are judged by
 * policy-coverage.ts (each with what the same rule matched under the config served now): `blocking` are those that refuse the config in enforce (a deny or
 * require_approval rule, or an obligation, that matches no tool), `warnings` the rest and, when an
 * upstream did not answer, why nothing was judged. Must never: judge from a partial set of lists,
 * decide a call, or return a tool's schema or an upstream's credential.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { compiledPolicy } from "../governance/engine.ts";
import { describeUnmatched, type KnownTool, matchedBefore, unmatchedRules } from "../governance/policy-coverage.ts";
import { listTools } from "./health.ts";
import { knownTools } from "../protocol/exposed-names.ts";

/** How long the check waits for one upstream's list (a reload does not wait on an upstream's full timeout). */
const LIST_TIMEOUT_MS = 5000;

export interface LiveCoverage {
  /** Every upstream listed its tools, so the rules were judged. */
  checked: boolean;
  /** The lines that refuse the config in enforce (each rule with the nearest real names). */
  blocking: string[];
  /** What is reported without refusing: rules that match nothing outside enforce or without a deny, and why nothing was judged. */
  warnings: string[];
}

/**
 * The policy of `cfg` against what its upstreams list now (nothing listed when it has no rules).
 * `reach` is each upstream as this request reaches it (its vantage and `sub`'s credentials,
 * config-view.ts requestConfig); an upstream of `cfg` not among them is one that did not list.
 */
export async function liveCoverage(cfg: GatewayConfig, reach: readonly UpstreamConfig[], sub: string, served?: GatewayConfig): Promise<LiveCoverage> {
  if (!cfg.policy || (cfg.policy.rules ?? []).length === 0) return { checked: true, blocking: [], warnings: [] };
  const lists = await Promise.all(
    cfg.upstreams.map(async (up) => {
      const via = reach.find((u) => u.name === up.name);
      return [up, via ? await listTools({ ...via, timeoutMs: Math.min(via.timeoutMs, LIST_TIMEOUT_MS) }, sub) : null] as const;
    }),
  );
  const silent = lists.filter(([, names]) => names === null).map(([up]) => up.name);
  if (silent.length)
    return {
      checked: false,
      blocking: [],
      warnings: [`rules not checked against the upstreams' tools: ${silent.join(", ")} did not list its tools to the gateway`],
    };
  const listed = lists.map(([up, names]) => [up, names ?? []] as const);
  const known: KnownTool[] = knownTools(cfg.upstreams, listed);
  let unmatched = unmatchedRules(compiledPolicy(cfg), known, cfg.policy);
  // What each rule matched under the config served until now: the same tools, named as that config names them.
  if (served?.policy && unmatched.length) {
    const was = listed.flatMap(([up, names]) => served.upstreams.filter((u) => u.name === up.name).map((u) => [u, names] as const));
    const before = knownTools(served.upstreams, was);
    unmatched = matchedBefore(unmatched, compiledPolicy(served), before, "under the config served now");
  }
  const enforce = cfg.mode === "enforce";
  const line = (u: (typeof unmatched)[number]) => describeUnmatched(u, known.length);
  return {
    checked: true,
    blocking: unmatched.filter((u) => enforce && u.blocking).map(line),
    warnings: unmatched.filter((u) => !(enforce && u.blocking)).map(line),
  };
}
