/**
 * The per-request view behind `/mcp/<upstream>` (the mcp-mux style): one upstream of the
 * caller's config served alone, exactly as a transparent single-upstream gateway would serve it —
 * its copy in the view is not namespaced, so tool and prompt names, resource URIs and task ids
 * reach the client as the upstream gives them, lists page through verbatim, capabilities and
 * instructions are the upstream's own and unknown methods pass through — while the RouteView it
 * comes with tells governance the name /mcp gives each tool (exposed-names.ts), so the same grant, policy,
 * rate limits, history, ledger fields, holds and kill switch apply on both paths. The gateway's own
 * agent tools (`portcullis.preview_impact`) are offered on /mcp only: the route shows the upstream
 * and nothing else, and a `portcullis.` name there could only be the upstream's own tool.
 * Must never: build a view of an upstream the caller's config does not hold (the config handed in
 * is already cut down to the upstreams the grant reaches, config-view.ts requestConfig), mutate
 * the config it is handed, or change anything but the upstream list and the agent tools.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { RouteView } from "../protocol/exposed-names.ts";

/** The view of `cfg` (this request's, grant-scoped config) that serves upstream `name` alone; null when `cfg` holds no such upstream. */
export function routeView(cfg: GatewayConfig, name: string): { cfg: GatewayConfig; route: RouteView } | null {
  const up = cfg.upstreams.find((u) => u.name === name);
  if (!up) return null;
  return {
    cfg: { ...cfg, upstreams: [up.namespaced ? { ...up, namespaced: false } : up], agentTools: false },
    route: { upstream: up.name, prefixed: up.namespaced },
  };
}

/** Upstream names as the config allows them (schema.ts): anything else in a route path is no upstream of any config. */
const UPSTREAM_NAME = /^[a-z][a-z0-9-]{0,30}$/;

/**
 * The message of the 404 for a route this caller has no upstream behind — one that does not exist
 * and one its grant cannot reach read alike, so the answer tells nothing about upstreams beyond the grant.
 */
export function noSuchRoute(name: string): string {
  const named = UPSTREAM_NAME.test(name) ? `no upstream named "${name}"` : "no upstream by that name";
  return `Not Found: ${named} is available to this grant (/mcp serves every upstream it reaches)`;
}
