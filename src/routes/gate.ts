/**
 * The order every protected route follows: the config (and its egress check), Host/Origin,
 * then the grant — and the per-request view of the config the handler gets. Owns that order.
 * Must never: hand a handler a request whose config, origin or grant did not pass.
 */
import { ConfigError, type GatewayConfig } from "../config/load.ts";
import { currentConfig } from "./config-view.ts";
import { egressRefusal, requestConfig } from "./request-config.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { checkOrigin } from "../mcp/edge.ts";
import { jsonResponse } from "../mcp/respond.ts";
import { authenticate, isLoopbackRequest, type AuthOptions } from "../identity/auth.ts";
import type { Principal } from "../config/principal.ts";

export function configOr503(env: Env): GatewayConfig | Response {
  try {
    return currentConfig(env);
  } catch (e) {
    const problems = e instanceof ConfigError ? e.problems : [String(e)];
    return jsonResponse({ ok: false, error: "configuration invalid", problems }, 503);
  }
}

/** Config that parsed and passes the egress rules from this request's vantage, or the refusal. */
export function servableConfig(env: Env, req: Request): GatewayConfig | Response {
  const shared = configOr503(env);
  if (shared instanceof Response) return shared;
  return egressRefusal(shared, req) ?? shared;
}

/**
 * `scoped`: the handler serves the principal's tools (/mcp, credentials), so the per-request
 * config holds only the upstreams its grant reaches; operator routes see every upstream.
 */
export async function gate(req: Request, env: Env, opts: AuthOptions & { scoped?: boolean }): Promise<{ cfg: GatewayConfig; who: Principal } | Response> {
  const shared = configOr503(env);
  if (shared instanceof Response) return shared;
  // Host/Origin first: a rebinding attempt learns nothing, not even whether the config is servable.
  const bad = checkOrigin(req, shared) ?? egressRefusal(shared, req);
  if (bad) return bad;
  const onLoopback = isLoopbackRequest(req);
  // External issuers' JWKS are fetched under the same egress rules as upstreams.
  const fetcher = (url: string, init: RequestInit) =>
    guardedFetch(url, init, { rules: shared.egress, gatewayOnLoopback: onLoopback, maxRedirects: 0, timeoutMs: 5000, maxBytes: 1024 * 1024 });
  const auth = await authenticate(req, env, shared, { ...opts, fetcher });
  if (!auth.ok) return auth.response;
  const cfg = opts.scoped ? await requestConfig(env, shared, req, auth.principal) : await requestConfig(env, shared, req);
  return { cfg, who: auth.principal };
}
