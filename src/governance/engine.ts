/**
 * The gateway's policy and mappings as the governed path is handed them: the config's policy
 * compiled once per config (policy.ts; CEL conditions, globs and windows compiled at load) behind
 * the `Policy` interface of steps.ts, and the config's mappings behind `Mappings`. Owns the
 * translation from a call (DecisionInput) to the policy's facts. Must never: compile per request,
 * or answer for a policy that failed to compile (compilation errors refuse the config at load).
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";
import type { Principal } from "../config/principal.ts";
import { budgetLimits, evaluate, historyQueries, listVerdict, namesTool } from "./policy.ts";
import { type CompiledPolicy, compilePolicy } from "./policy-compile.ts";
import type { Classification, DecisionInput, Mappings, Policy, Target } from "./steps.ts";
import { toolGlobMatch } from "../wire/glob.ts";
import { Memo } from "../wire/memo.ts";

const compiled = new WeakMap<object, CompiledPolicy>();
const engines = new WeakMap<object, Policy>();
const mapped = new WeakMap<object, Mappings>();

/** The config's compiled policy (throws PolicyError naming every problem: the config is refused). */
export function compiledPolicy(cfg: GatewayConfig): CompiledPolicy {
  const key = cfg.policy as object;
  let p = compiled.get(key);
  if (!p) {
    p = compilePolicy(cfg.policy, { mode: cfg.mode, unclassifiedReads: cfg.unclassifiedReads });
    compiled.set(key, p);
  }
  return p;
}

function factsOf(input: Omit<DecisionInput, "history">) {
  return {
    principal: input.call.principal,
    exposedName: input.call.exposedName,
    upstream: input.target.upstream.name,
    tool: input.target.tool.name,
    arguments: input.call.arguments,
    classification: input.classification,
    mapping: input.mapping,
    annotations: input.target.tool.annotations,
    runId: input.call.runId,
    now: input.now,
  };
}

/**
 * Which calls history must keep, per exposed name (memoized per policy): those a history query's
 * tool glob counts, and those a rule with a rate limit could match (its tool glob, or any tool;
 * its other conditions are not narrowed here — keeping too many is safe, too few is not). A
 * policy whose history rules count only `pay__*` spares every other call two HistoryDO round trips.
 */
function recordsCallOf(p: CompiledPolicy): (exposedName: string, upstream: string, tool: string) => boolean {
  if (!p.usesHistory) return () => false;
  const counted = p.rules.flatMap((r) => r.historyQueries);
  // Rate limits count the call's own tool by its stable identity (obligations.ts): every call a rate-limited rule could match is kept.
  const rateLimited = p.rules.filter((r) => r.obligations.some((o) => o.kind === "rate_limit"));
  const memo = new Memo<string, boolean>({ max: 4096 });
  return (name, upstream, tool) => {
    const key = `${upstream}\u0000${tool}\u0000${name}`;
    let hit = memo.get(key);
    if (hit === undefined) {
      const call = { exposed: name, upstream, tool };
      hit = counted.some((q) => toolGlobMatch(q, call)) || rateLimited.some((r) => namesTool(r, call));
      memo.set(key, hit);
    }
    return hit;
  };
}

/** The policy of this config, as the governed path calls it. */
export function policyEngine(cfg: GatewayConfig): Policy {
  const key = cfg.policy as object;
  const cached = engines.get(key);
  if (cached) return cached;
  const p = compiledPolicy(cfg);
  const engine: Policy = {
    version: p.version,
    mode: p.mode,
    queries: (input) => historyQueries(p, factsOf(input)),
    decide: (input) => evaluate(p, { ...factsOf(input), history: input.history }),
    limits: (call) => budgetLimits(p, call.principal, call.runId),
    usesHistory: p.usesHistory,
    recordsCall: recordsCallOf(p),
    mayHide: p.mode === "enforce" && p.rules.some((r) => r.unconditional && !r.observe && r.decision === "deny"),
    listed: (principal: Principal, target: Target, classification: Classification) =>
      listVerdict(p, { principal, exposedName: target.tool.exposedName, upstream: target.upstream.name, tool: target.tool.name, classification }) === "listed",
  };
  engines.set(key, engine);
  return engine;
}

/** The config's mappings by upstream and upstream tool name. */
export function mappingsOf(cfg: GatewayConfig): Mappings {
  const key = cfg.mappings as object;
  let m = mapped.get(key);
  if (!m) {
    const byUpstream = cfg.mappings;
    const loaded = Object.values(byUpstream).some((t) => Object.keys(t).length > 0);
    m = { loaded, get: (upstream: string, tool: string): ToolMapping | undefined => byUpstream[upstream]?.[tool] };
    mapped.set(key, m);
  }
  return m;
}
