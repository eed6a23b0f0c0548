/**
 * The gate every protected route passes, as Hono middleware: the config (and its egress
 * check), then the grant — in that order, after the app-wide Host/Origin check of src/index.ts —
 * and the per-request view of the config.
 * On success it sets the typed `c.var.cfg` and `c.var.principal`; on failure it answers itself.
 * Must never: let a handler run for a request whose config, origin or grant did not pass.
 */
import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { authenticate, isLoopbackRequest } from "../identity/auth.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { recordConfigOnce } from "../ports/ledger-writer.ts";
import { storedVersionOf } from "../ports/live-config.ts";
import { egressRefusal, liveConfigOr503, requestConfig } from "./config-view.ts";

/** The Hono environment of every route: Worker bindings, and what the gate established. */
export type AppEnv = { Bindings: Env; Variables: { cfg: GatewayConfig; principal: Principal } };

export interface GateOptions {
  /** The resource path, for the metadata URL in challenges (`/mcp`, `/operator/mcp` or `/`). */
  path: string;
  /** Role(s) the route accepts: any one of them will do. */
  role: Role | Role[];
  /** Whether the loopback-only unauthenticated actor may use this route. */
  allowActor: boolean;
  /** The handler serves the principal's tools (/mcp, credentials): the config holds only the upstreams its grant reaches. */
  scoped?: boolean;
}

export function gate(opts: GateOptions) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const req = c.req.raw;
    const shared = await liveConfigOr503(c.env);
    if (shared instanceof Response) return shared;
    // Host/Origin were checked for every route before this (src/index.ts), so a rebinding
    // attempt learns nothing, not even whether the config is servable; then the egress rules.
    const bad = egressRefusal(shared, req);
    if (bad) return bad;
    // External issuers' JWKS are fetched under the same egress rules as upstreams.
    const onLoopback = isLoopbackRequest(req);
    const fetcher = (url: string, init: RequestInit) =>
      guardedFetch(url, init, { rules: shared.egress, gatewayOnLoopback: onLoopback, maxRedirects: 0, timeoutMs: 5000, maxBytes: 1024 * 1024 });
    const auth = await authenticate(req, c.env, shared, { path: opts.path, role: opts.role, allowActor: opts.allowActor, fetcher });
    if (!auth.ok) return auth.response;
    // A stored (hot-reloaded) version was recorded by ConfigDO when it was stored; the var's is recorded here.
    if (!storedVersionOf(shared)) recordConfigOnce(c.env, shared, canonicalUrl(shared), waitUntilOf(c));
    c.set("principal", auth.principal);
    c.set("cfg", await requestConfig(c.env, shared, req, opts.scoped ? auth.principal : undefined, waitUntilOf(c)));
    await next();
  });
}

/** waitUntil of the request's execution context (routes hand it to long-running work). */
export function waitUntilOf(c: Context<AppEnv>): (p: Promise<unknown>) => void {
  const exec = c.executionCtx as ExecutionContext;
  return (p) => exec.waitUntil(p);
}
