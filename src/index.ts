/**
 * The Worker: Hono routes only. Each route hands the request to the module that owns it.
 * Must never: hold protocol or governance logic here.
 */
import { Hono } from "hono";
import { requestConfig } from "./routes/request-config.ts";
import { deleteCredentialRoute, putCredentialRoute } from "./routes/credentials.ts";
import type { Env } from "./env.ts";
import { signingKeys } from "./identity/auth.ts";
import { configOr503, gate, servableConfig } from "./routes/gate.ts";
import { mintGrantRoute, revokeGrantRoute } from "./routes/grants.ts";
import { protectedResourceMetadata } from "./identity/metadata.ts";
import type { Role } from "./config/roles.ts";
import { publicJwks } from "./identity/tokens.ts";
import { refuse } from "./mcp/edge.ts";
import { mcpRoute } from "./mcp/front.ts";
import { readiness, summary } from "./mcp/health.ts";
import { ErrorCode } from "./wire/jsonrpc.ts";
import { jsonResponse } from "./mcp/respond.ts";
import { operatorMcp } from "./routes/operator.ts";

export { CredentialsDO } from "../durable-objects/credentials.ts";
export { RevocationsDO } from "../durable-objects/revocations.ts";
export { SessionDO } from "../durable-objects/session.ts";

type AppEnv = { Bindings: Env };
const app = new Hono<AppEnv>();

const OPERATOR_ROLES: Role[] = ["auditor", "approver", "operator", "admin"];

for (const path of ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource/operator/mcp"]) {
  app.get(path, (c) => {
    const cfg = configOr503(c.env);
    if (cfg instanceof Response) return cfg;
    const resource = path.slice("/.well-known/oauth-protected-resource".length) || "/";
    return c.json(protectedResourceMetadata(cfg, c.req.raw, resource));
  });
}

app.get("/.well-known/jwks.json", async (c) => {
  const cfg = configOr503(c.env);
  if (cfg instanceof Response) return cfg;
  const keys = signingKeys(c.env, cfg);
  return c.json(keys ? publicJwks(await keys) : { keys: [] }, 200, { "cache-control": "public, max-age=300" });
});

app.post("/v1/grants", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/", role: "admin", allowActor: false });
  if (g instanceof Response) return g;
  return mintGrantRoute(c.req.raw, c.env, g.cfg);
});

app.post("/v1/grants/:jti/revoke", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/", role: "admin", allowActor: false });
  if (g instanceof Response) return g;
  return revokeGrantRoute(c.req.raw, c.env, g.cfg, c.req.param("jti"), g.who);
});

app.put("/v1/credentials/:upstream", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/", role: "agent", allowActor: true, scoped: true });
  if (g instanceof Response) return g;
  return putCredentialRoute(c.req.raw, c.env, g.cfg, g.who, c.req.param("upstream"));
});

app.delete("/v1/credentials/:upstream", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/", role: "agent", allowActor: true, scoped: true });
  if (g instanceof Response) return g;
  return deleteCredentialRoute(c.env, g.cfg, g.who, c.req.param("upstream"));
});

app.all("/operator/mcp", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/operator/mcp", role: OPERATOR_ROLES, allowActor: false });
  if (g instanceof Response) return g;
  return operatorMcp(c.req.raw, c.env, g.cfg, g.who);
});

app.get("/healthz", (c) => c.json({ ok: true }));

app.get("/readyz", async (c) => {
  const shared = servableConfig(c.env, c.req.raw);
  if (shared instanceof Response) return shared;
  const body = await readiness(await requestConfig(c.env, shared, c.req.raw));
  return c.json(body, body.ok ? 200 : 503);
});

app.get("/summary", async (c) => {
  const shared = servableConfig(c.env, c.req.raw);
  if (shared instanceof Response) return shared;
  return c.json(await summary(await requestConfig(c.env, shared, c.req.raw), shared.actor));
});

app.on(["POST", "GET", "DELETE"], "/mcp", async (c) => {
  const g = await gate(c.req.raw, c.env, { path: "/mcp", role: "agent", allowActor: true, scoped: true });
  if (g instanceof Response) return g;
  const exec = c.executionCtx as ExecutionContext;
  return mcpRoute({ env: c.env, cfg: g.cfg, who: g.who, principal: g.who.sub, waitUntil: (p) => exec.waitUntil(p) }, c.req.raw);
});

app.all("/mcp", () => refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: use POST, GET or DELETE", null, { allow: "POST, GET, DELETE" }));
app.notFound(() => jsonResponse({ error: "not found" }, 404));
app.onError((err) => {
  console.error("portcullis: unhandled", err.stack ?? String(err));
  return jsonResponse({ error: "internal error" }, 500);
});

export default app;
