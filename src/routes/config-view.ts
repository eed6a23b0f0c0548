/**
 * The config as the Worker serves it: parsed once per isolate from the PORTCULLIS_CONFIG var,
 * checked against the egress rules from each request's vantage (loopback or not), and the
 * per-request view a handler gets — each upstream marked with whether the gateway is on
 * loopback and, for `per_principal` upstreams, carrying the caller's own credential; upstreams
 * the caller's grant cannot reach are left out altogether. Must never: serve with a config that
 * failed validation or the egress rules (503 naming every problem), mutate the shared config,
 * or let a resolved credential outlive the request.
 */
import { ConfigError, type GatewayConfig, loadConfig } from "../config/load.ts";
import type { Principal } from "../config/principal.ts";
import { egressProblems } from "../egress/config-check.ts";
import { upstreamsFor } from "../egress/credentials.ts";
import type { Env } from "../env.ts";
import { compiledPolicy } from "../governance/engine.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { PolicyError } from "../governance/policy.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import { ownUrlProblem } from "../identity/metadata.ts";
import { jsonResponse } from "../wire/http.ts";

let cached: { text: string; config: GatewayConfig } | null = null;

/** The parsed config of this Worker; throws ConfigError naming every problem. */
function currentConfig(env: Env): GatewayConfig {
  const text = env.PORTCULLIS_CONFIG;
  if (typeof text !== "string" || text.trim() === "") {
    throw new ConfigError(["PORTCULLIS_CONFIG is not set: start with `portcullis dev --config FILE` or set it at deploy"]);
  }
  if (cached && cached.text === text) return cached.config;
  const config = loadConfig(text, env as Record<string, unknown>);
  // A policy that does not compile (CEL, globs, windows) refuses the config, every problem named.
  try {
    compiledPolicy(config);
  } catch (e) {
    if (e instanceof PolicyError) throw new ConfigError(e.problems);
    throw e;
  }
  cached = { text, config };
  return config;
}

/** The config, or 503 naming every problem — a gateway that does not know its own URL (auth.audience) serves nothing. */
export function configOr503(env: Env): GatewayConfig | Response {
  try {
    const cfg = currentConfig(env);
    const ownUrl = ownUrlProblem(cfg);
    return ownUrl ? jsonResponse({ ok: false, error: "configuration invalid", problems: [ownUrl] }, 503) : cfg;
  } catch (e) {
    const problems = e instanceof ConfigError ? e.problems : [String(e)];
    return jsonResponse({ ok: false, error: "configuration invalid", problems }, 503);
  }
}

const checked = new WeakMap<GatewayConfig, Map<boolean, string[]>>();

/** Egress refusals of the config for this request's vantage (cached per config object and loopback-ness). */
export function egressRefusal(cfg: GatewayConfig, req: Request): Response | null {
  const onLoopback = isLoopbackRequest(req);
  const byVantage = checked.get(cfg) ?? new Map<boolean, string[]>();
  checked.set(cfg, byVantage);
  const problems = byVantage.get(onLoopback) ?? egressProblems(cfg, onLoopback);
  byVantage.set(onLoopback, problems);
  if (problems.length === 0) return null;
  return jsonResponse({ ok: false, error: "configuration refused by the egress rules", problems }, 503);
}

/** Config that parsed and passes the egress rules from this request's vantage, or the refusal. */
export function servableConfig(env: Env, req: Request): GatewayConfig | Response {
  const shared = configOr503(env);
  if (shared instanceof Response) return shared;
  return egressRefusal(shared, req) ?? shared;
}

/**
 * With a principal, upstreams its grant cannot reach are left out altogether: no list, route,
 * capability, listen or GET stream of this request can touch them.
 */
export async function requestConfig(env: Env, cfg: GatewayConfig, req: Request, principal?: Principal): Promise<GatewayConfig> {
  const onLoopback = isLoopbackRequest(req);
  const reachable = principal === undefined ? cfg : { ...cfg, upstreams: cfg.upstreams.filter((u) => grantReachesUpstream(principal, u)) };
  const base = principal === undefined ? cfg.upstreams : await upstreamsFor(env, reachable, principal.sub);
  return { ...cfg, upstreams: base.map((u) => ({ ...u, onLoopback })) };
}
