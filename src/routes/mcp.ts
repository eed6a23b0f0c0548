/**
 * The /mcp route and the per-upstream routes `/mcp/<upstream>`: the gate (role agent, loopback
 * actor allowed, config scoped to the grant — the same gate for both, so a grant minted for the
 * gateway works on every route), then era routing (docs/architecture.md, protocol eras) — a body with
 * `_meta[protocolVersion]`, or a 2026-07-28 header without a session, is modern; `initialize` and
 * `Mcp-Session-Id` are legacy; GET and DELETE without a session from a modern client get 405 —
 * and the front that serves it. `/mcp/<upstream>` serves the view of that one upstream
 * (src/front/route-view.ts: its own names at the edge, /mcp's names for governance); an upstream
 * that does not exist and one the grant cannot reach both get the same 404.
 * Must never: look at anything but the parsed body and the protocol headers to pick the era, or
 * tell a caller which upstreams exist beyond its grant.
 */
import { Hono } from "hono";
import { canonicalUrl } from "../identity/metadata.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { readPost } from "../front/edge.ts";
import { legacyDelete, legacyGet, legacyPost } from "../front/legacy.ts";
import { modernPost } from "../front/modern.ts";
import { noSuchRoute, routeView } from "../front/route-view.ts";
import { META, MODERN_VERSION } from "../protocol/versions.ts";
import { refuse } from "../wire/http.ts";
import { ErrorCode, isObject } from "../wire/jsonrpc.ts";
import { traceOf } from "../wire/trace-context.ts";
import { type AppEnv, gate, waitUntilOf } from "./gate.ts";

export const mcpRoutes = new Hono<AppEnv>();

/** One MCP request in its era's front; it belongs to the W3C trace its headers continue (or a new one). */
async function serve(route: Omit<FrontContext, "trace">, req: Request): Promise<Response> {
  const fc: FrontContext = { ...route, trace: traceOf(req.headers) };
  const hasSession = req.headers.get("mcp-session-id") !== null;
  const modernHeader = req.headers.get("mcp-protocol-version")?.trim() === MODERN_VERSION;
  if (req.method === "POST") {
    const v = await readPost(req, true);
    if (!v.ok) return v.response;
    const m = v.message;
    const params = "method" in m && isObject(m.params) ? m.params : undefined;
    const metaVersion = params && isObject(params._meta) && params._meta[META.protocolVersion] !== undefined;
    const initialize = "method" in m && m.method === "initialize";
    if (metaVersion || (modernHeader && !hasSession && !initialize)) return modernPost(fc, req, m);
    return legacyPost(fc, req, m);
  }
  if (!hasSession && modernHeader) {
    return refuse(405, ErrorCode.InvalidRequest, `Method Not Allowed: ${MODERN_VERSION} uses POST only`, null, { allow: "POST" });
  }
  return req.method === "GET" ? legacyGet(fc, req) : legacyDelete(fc, req);
}

mcpRoutes.on(["POST", "GET", "DELETE"], "/mcp", gate({ path: "/mcp", role: "agent", allowActor: true, scoped: true }), (c) =>
  serve({ env: c.env, cfg: c.var.cfg, principal: c.var.principal, gateway: canonicalUrl(c.var.cfg), waitUntil: waitUntilOf(c) }, c.req.raw),
);

mcpRoutes.all("/mcp", () => refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: use POST, GET or DELETE", null, { allow: "POST, GET, DELETE" }));

// One upstream alone, in both eras, under the same gate as /mcp (c.var.cfg holds only the upstreams the grant reaches).
mcpRoutes.on(["POST", "GET", "DELETE"], "/mcp/:upstream", gate({ path: "/mcp", role: "agent", allowActor: true, scoped: true }), (c) => {
  const name = c.req.param("upstream");
  const view = routeView(c.var.cfg, name);
  if (!view) return refuse(404, ErrorCode.ServerError, noSuchRoute(name));
  return serve(
    { env: c.env, cfg: view.cfg, route: view.route, principal: c.var.principal, gateway: canonicalUrl(c.var.cfg), waitUntil: waitUntilOf(c) },
    c.req.raw,
  );
});

mcpRoutes.all("/mcp/:upstream", () =>
  refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: use POST, GET or DELETE", null, { allow: "POST, GET, DELETE" }),
);
