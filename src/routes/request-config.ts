/**
 * The config as one request sees it: each upstream carries whether the gateway is serving on
 * loopback (loopback egress needs it) and, for `per_principal` upstreams, the caller's own
 * credential; upstreams the caller's grant cannot reach are not in it. Owns that per-request view and the refusal to serve a config whose upstreams
 * fail the egress rules. Must never: mutate the shared config, or let a resolved credential
 * outlive the request.
 */
import type { Env } from "../env.ts";
import { upstreamsFor } from "../egress/credentials.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { type Principal } from "../config/principal.ts";
import { jsonResponse } from "../mcp/respond.ts";
import type { GatewayConfig } from "../config/load.ts";
import { egressProblems } from "../egress/config-check.ts";

const checked = new WeakMap<GatewayConfig, Map<boolean, string[]>>();

/** Egress refusals of the config for this request's vantage (cached per config object and loopback-ness). */
export function egressRefusal(cfg: GatewayConfig, req: Request): Response | null {
  const onLoopback = isLoopbackRequest(req);
  let byVantage = checked.get(cfg);
  if (!byVantage) checked.set(cfg, (byVantage = new Map()));
  let problems = byVantage.get(onLoopback);
  if (!problems) byVantage.set(onLoopback, (problems = egressProblems(cfg, onLoopback)));
  if (problems.length === 0) return null;
  return jsonResponse({ ok: false, error: "configuration refused by the egress rules", problems }, 503);
}

/**
 * With a principal, upstreams its grant cannot reach are left out altogether: no list, route,
 * capability, listen or GET stream of this request can touch them.
 */
export async function requestConfig(env: Env, cfg: GatewayConfig, req: Request, who?: Principal): Promise<GatewayConfig> {
  const onLoopback = isLoopbackRequest(req);
  const reachable = who === undefined ? cfg : { ...cfg, upstreams: cfg.upstreams.filter((u) => grantReachesUpstream(who, u)) };
  const base = who === undefined ? cfg.upstreams : await upstreamsFor(env, reachable, who.sub);
  return { ...cfg, upstreams: base.map((u) => ({ ...u, onLoopback })) };
}
