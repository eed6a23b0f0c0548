/**
 * The Worker: Hono routes only. Each route hands the request to the module that owns it.
 * Must never: hold protocol or governance logic here.
 */
import { Hono, type Context } from "hono";
import { deleteCredentialRoute, putCredentialRoute } from "./egress/credentials-api.ts";
import { guardedFetch } from "./egress/guarded-fetch.ts";
import { egressRefusal, requestConfig } from "./config/request.ts";
import { authenticate, isLoopbackRequest, signingKeys, type AuthOptions } from "./identity/auth.ts";
import { mintGrantRoute, revokeGrantRoute } from "./identity/grants-api.ts";
import { protectedResourceMetadata } from "./identity/metadata.ts";
import type { Principal, Role } from "./identity/principal.ts";
import { publicJwks } from "./identity/tokens.ts";
import { operatorMcp } from "./operator/endpoint.ts";
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

export { CredentialsDO } from "../durable-objects/credentials.ts";
export { RevocationsDO } from "../durable-objects/revocations.ts";
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

function front(env: Env, cfg: GatewayConfig, exec: ExecutionContext, who: Principal): FrontContext {
  return { env, cfg, who, principal: who.sub, waitUntil: (p) => exec.waitUntil(p) };
}

/** Config and its egress check, Host/Origin, then the grant: the order every protected route follows. */
async function gate(c: Context<AppEnv>, opts: AuthOptions): Promise<{ cfg: GatewayConfig; who: Principal } | Response> {
  const shared = configOr503(c.env);
  if (shared instanceof Response) return shared;
  const bad = checkOrigin(c.req.raw, shared) ?? egressRefusal(shared, c.req.raw);
  if (bad) return bad;
  const onLoopback = isLoopbackRequest(c.req.raw);
  // External issuers' JWKS are fetched under the same egress rules as upstreams.
  const fetcher = (url: string, init: RequestInit) => guardedFetch(url, init, { rules: shared.egress, gatewayOnLoopback: onLoopback, maxRedirects: 0, timeoutMs: 5000, maxBytes: 1024 * 1024 });
  const auth = await authenticate(c.req.raw, c.env, shared, { ...opts, fetcher });
  if (!auth.ok) return auth.response;
  return { cfg: await requestConfig(c.env, shared, c.req.raw, auth.principal.sub), who: auth.principal };
}

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
  const g = await gate(c, { path: "/", role: "admin", allowActor: false });
  if (g instanceof Response) return g;
  return mintGrantRoute(c.req.raw, c.env, g.cfg);
});

app.post("/v1/grants/:jti/revoke", async (c) => {
  const g = await gate(c, { path: "/", role: "admin", allowActor: false });
  if (g instanceof Response) return g;
  return revokeGrantRoute(c.req.raw, c.env, g.cfg, c.req.param("jti"), g.who);
});

app.put("/v1/credentials/:upstream", async (c) => {
  const g = await gate(c, { path: "/", role: "agent", allowActor: true });
  if (g instanceof Response) return g;
  return putCredentialRoute(c.req.raw, c.env, g.cfg, g.who, c.req.param("upstream"));
});

app.delete("/v1/credentials/:upstream", async (c) => {
  const g = await gate(c, { path: "/", role: "agent", allowActor: true });
  if (g instanceof Response) return g;
  return deleteCredentialRoute(c.env, g.cfg, g.who, c.req.param("upstream"));
});

app.all("/operator/mcp", async (c) => {
  const g = await gate(c, { path: "/operator/mcp", role: OPERATOR_ROLES, allowActor: false });
  if (g instanceof Response) return g;
  return operatorMcp(c.req.raw, c.env, g.cfg, g.who);
});

app.get("/healthz", (c) => c.json({ ok: true }));

app.get("/readyz", async (c) => {
  const shared = configOr503(c.env);
  if (shared instanceof Response) return shared;
  const refused = egressRefusal(shared, c.req.raw);
  if (refused) return refused;
  const body = await readiness(await requestConfig(c.env, shared, c.req.raw));
  return c.json(body, body.ok ? 200 : 503);
});

app.get("/summary", async (c) => {
  const shared = configOr503(c.env);
  if (shared instanceof Response) return shared;
  const refused = egressRefusal(shared, c.req.raw);
  if (refused) return refused;
  return c.json(await summary(await requestConfig(c.env, shared, c.req.raw), shared.actor));
});

app.on(["POST", "GET", "DELETE"], "/mcp", async (c) => {
  const g = await gate(c, { path: "/mcp", role: "agent", allowActor: true });
  if (g instanceof Response) return g;
  const { cfg, who } = g;
  const req = c.req.raw;
  const fc = front(c.env, cfg, c.executionCtx as ExecutionContext, who);
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
