/**
 * The legacy HTTP+SSE routes (MCP 2024-11-05 transport): `GET /sse` and `POST /messages`, served
 * by src/front/http-sse.ts behind the same gate as /mcp (role agent, loopback actor allowed,
 * config scoped to the grant). Off unless the live config says `gateway.legacy_sse: true`: then
 * both paths answer exactly what an unknown route answers (404), before any authentication.
 * Must never: serve either path while the setting is off, or let a handler run for a request
 * the gate refused.
 */
import { type Context, Hono } from "hono";
import { createMiddleware } from "hono/factory";
import { canonicalUrl } from "../identity/metadata.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { sseDeps, sseOpen, ssePost } from "../front/http-sse.ts";
import { jsonResponse, refuse } from "../wire/http.ts";
import { ErrorCode } from "../wire/jsonrpc.ts";
import { traceOf } from "../wire/trace-context.ts";
import { liveConfigOr503 } from "./config-view.ts";
import { type AppEnv, gate, waitUntilOf } from "./gate.ts";

export const sseRoutes = new Hono<AppEnv>();

/** Off: the app's own not-found answer (src/index.ts), so the paths look like any unknown route. */
const enabled = createMiddleware<AppEnv>(async (c, next) => {
  const cfg = await liveConfigOr503(c.env);
  if (cfg instanceof Response) return cfg;
  if (!cfg.legacySse) return jsonResponse({ error: "not found" }, 404);
  await next();
});

const mcpGate = gate({ path: "/mcp", role: "agent", allowActor: true, scoped: true });

const front = (c: Context<AppEnv>): FrontContext => ({
  env: c.env,
  cfg: c.var.cfg,
  principal: c.var.principal,
  gateway: canonicalUrl(c.var.cfg),
  waitUntil: waitUntilOf(c),
  trace: traceOf(c.req.raw.headers),
});

sseRoutes.get("/sse", enabled, mcpGate, (c) => sseOpen(sseDeps, front(c), c.req.raw));
sseRoutes.post("/messages", enabled, mcpGate, (c) => ssePost(sseDeps, front(c), c.req.raw));

sseRoutes.all("/sse", enabled, () => refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: GET /sse opens the stream", null, { allow: "GET" }));
sseRoutes.all("/messages", enabled, () =>
  refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: POST one JSON-RPC message to /messages?sessionId=…", null, { allow: "POST" }),
);
