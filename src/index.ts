/**
 * The Worker: Hono routes only. Each route hands the request to the module that owns it.
 * Must never: hold protocol or governance logic here.
 */
import { Hono } from "hono";
import { ConfigError, type GatewayConfig } from "./config/load.ts";
import { currentConfig } from "./config/current.ts";
import type { Env } from "./env.ts";
import { checkOrigin, readPost, refuse } from "./mcp/edge.ts";
import { readiness, summary } from "./mcp/health.ts";
import { ErrorCode, isObject } from "./mcp/jsonrpc.ts";
import { legacyDelete, legacyGet, legacyPost, type FrontContext } from "./mcp/legacy.ts";
import { modernPost } from "./mcp/modern.ts";
import { jsonResponse } from "./mcp/respond.ts";
import { META, MODERN_VERSION } from "./mcp/versions.ts";

export { SessionDO } from "../durable-objects/session.ts";

type AppEnv = { Bindings: Env };
const app = new Hono<AppEnv>();

function configOr503(env: Env): GatewayConfig | Response {
  try {
    return currentConfig(env);
  } catch (e) {
    const problems = e instanceof ConfigError ? e.problems : [String(e)];
    return jsonResponse({ ok: false, error: "configuration invalid", problems }, 503);
  }
}

function front(env: Env, cfg: GatewayConfig, exec: ExecutionContext): FrontContext {
  // Until identity lands, every client runs as the configured actor (loopback only: see checkOrigin).
  return { env, cfg, principal: cfg.actor, waitUntil: (p) => exec.waitUntil(p) };
}

app.get("/healthz", (c) => c.json({ ok: true }));

app.get("/readyz", async (c) => {
  const cfg = configOr503(c.env);
  if (cfg instanceof Response) return cfg;
  const body = await readiness(cfg);
  return c.json(body, body.ok ? 200 : 503);
});

app.get("/summary", async (c) => {
  const cfg = configOr503(c.env);
  if (cfg instanceof Response) return cfg;
  return c.json(await summary(cfg, cfg.actor));
});

app.on(["POST", "GET", "DELETE"], "/mcp", async (c) => {
  const cfg = configOr503(c.env);
  if (cfg instanceof Response) return cfg;
  const req = c.req.raw;
  const bad = checkOrigin(req, cfg);
  if (bad) return bad;
  const fc = front(c.env, cfg, c.executionCtx as ExecutionContext);
  const hasSession = req.headers.get("mcp-session-id") !== null;
  const modernHeader = req.headers.get("mcp-protocol-version")?.trim() === MODERN_VERSION;
  if (req.method === "POST") {
    const v = await readPost(req, true);
    if (!v.ok) return v.response;
    const m = v.message;
    const params = "method" in m && isObject(m.params) ? m.params : undefined;
    const metaVersion = params && isObject(params._meta) && params._meta[META.protocolVersion] !== undefined;
    if (metaVersion || (modernHeader && !hasSession && !("method" in m && m.method === "initialize"))) return modernPost(fc, req, m);
    return legacyPost(fc, req, m);
  }
  if (!hasSession && modernHeader) {
    return refuse(405, ErrorCode.InvalidRequest, `Method Not Allowed: ${MODERN_VERSION} uses POST only`, null, { allow: "POST" });
  }
  return req.method === "GET" ? legacyGet(fc, req) : legacyDelete(fc, req);
});

app.all("/mcp", () => refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: use POST, GET or DELETE", null, { allow: "POST, GET, DELETE" }));
app.notFound(() => jsonResponse({ error: "not found" }, 404));
app.onError((err) => {
  console.error("portcullis: unhandled", err.stack ?? String(err));
  return jsonResponse({ error: "internal error" }, 500);
});

export default app;
