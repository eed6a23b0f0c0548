/**
 * The Worker: the Hono app. Mounts each route behind the gate it needs (routes/gate.ts) and
 * hands the request to the module that owns it; exports the Durable Object classes.
 * Must never: hold protocol or governance logic here.
 */
import { Hono } from "hono";
import { authenticate, isLoopbackRequest, signingKeys } from "./identity/auth.ts";
import { checkOrigin } from "./identity/origin.ts";
import { canonicalUrl, protectedResourceMetadata } from "./identity/metadata.ts";
import { publicJwks } from "./identity/keys.ts";
import { readiness, summary } from "./services/health.ts";
import { policyWatchReport } from "./services/policy-watch.ts";
import { liveConfigOr503, requestConfig, servableConfig } from "./routes/config-view.ts";
import { configRoutes } from "./routes/config-admin.ts";
import { deleteCredentialRoute, putCredentialRoute } from "./routes/credentials-api.ts";
import { type AppEnv, gate } from "./routes/gate.ts";
import { mintGrantRoute, revokeGrantRoute } from "./routes/grants.ts";
import { exportRoute, searchRoute, traceRoute } from "./routes/ledger-api.ts";
import { metricsJsonRoute, prometheusRoute } from "./routes/metrics-api.ts";
import { mcpRoutes } from "./routes/mcp.ts";
import { sseRoutes } from "./routes/http-sse-routes.ts";
import { previewRoute } from "./routes/preview-api.ts";
import { holdsRoutes } from "./routes/holds-api.ts";
import { killSwitchRoutes } from "./routes/killswitch-api.ts";
import { runsRoutes } from "./routes/runs-api.ts";
import { consoleRoutes } from "./routes/console.ts";
import { clientMetadataRoute } from "./routes/console-connections.ts";
import { CLIENT_METADATA_PATH } from "./services/connections.ts";
import { operatorMcp } from "./routes/operator.ts";
import { oauthRoutes } from "./routes/oauth-endpoints.ts";
import { enrollRoute } from "./routes/enroll.ts";
import { jsonResponse } from "./wire/http.ts";
import { withSecurityHeaders } from "./console/headers.ts";

// The Durable Object classes (src/objects.ts): the main module exports each one wrangler binds.
export * from "./objects.ts";

const app = new Hono<AppEnv>();

// Every route, metadata and health included, answers only a Host that names this gateway (and an
// allowed Origin): the config first — without one (or without the gateway's own URL) everything
// but /healthz is 503.
app.use("*", async (c, next) => {
  // Refusals of console pages carry the console's security headers too (no framing, no caching).
  const page = (r: Response) => (c.req.path === "/console" || c.req.path.startsWith("/console/") ? withSecurityHeaders(r) : r);
  const cfg = await liveConfigOr503(c.env);
  if (cfg instanceof Response) return c.req.path === "/healthz" ? next() : page(cfg);
  const bad = checkOrigin(c.req.raw, cfg);
  if (bad) return page(bad);
  await next();
});

const admin = gate({ path: "/", role: "admin", allowActor: false });
// /v1/* never runs unauthenticated, on loopback too: the actor of a dev gateway gets no REST API.
const agent = gate({ path: "/", role: "agent", allowActor: false, scoped: true });
const auditor = gate({ path: "/", role: ["auditor", "admin"], allowActor: false });
const watcher = gate({ path: "/", role: ["auditor", "operator", "admin"], allowActor: false });

for (const path of [
  "/.well-known/oauth-protected-resource",
  "/.well-known/oauth-protected-resource/mcp",
  // Every name answers alike (metadata.ts: a per-upstream route names /mcp as its resource).
  "/.well-known/oauth-protected-resource/mcp/:upstream",
  "/.well-known/oauth-protected-resource/operator/mcp",
]) {
  app.get(path, async (c) => {
    const cfg = await liveConfigOr503(c.env);
    if (cfg instanceof Response) return cfg;
    const resource = path.slice("/.well-known/oauth-protected-resource".length) || "/";
    return c.json(protectedResourceMetadata(cfg, resource));
  });
}

// OAuth for hosted clients (auth.oauth): metadata, registration, token, and the sign-in and consent pages.
app.route("/", oauthRoutes);

app.get("/.well-known/jwks.json", async (c) => {
  const cfg = await liveConfigOr503(c.env);
  if (cfg instanceof Response) return cfg;
  const keys = signingKeys(c.env, cfg);
  return c.json(keys ? publicJwks(await keys) : { keys: [] }, 200, { "cache-control": "public, max-age=300" });
});

app.post("/v1/grants", admin, (c) => mintGrantRoute(c.req.raw, c.env, c.var.cfg, c.var.principal));
app.post("/v1/grants/enroll", admin, (c) => enrollRoute(c.req.raw, c.env, c.var.cfg, c.var.principal));
app.post("/v1/grants/:jti/revoke", admin, (c) => revokeGrantRoute(c.req.raw, c.env, c.var.cfg, c.req.param("jti"), c.var.principal));
app.put("/v1/credentials/:upstream", agent, (c) => putCredentialRoute(c.req.raw, c.env, c.var.cfg, c.var.principal, c.req.param("upstream")));
app.delete("/v1/credentials/:upstream", agent, (c) => deleteCredentialRoute(c.env, c.var.cfg, c.var.principal, c.req.param("upstream")));

// What a call would get (the caller's own grant; operator/admin: any principal). Executes nothing.
app.post("/v1/preview", gate({ path: "/", role: ["agent", "approver", "operator", "admin"], allowActor: false }), (c) =>
  previewRoute(c.req.raw, c.env, c.var.cfg, c.var.principal),
);

app.get("/v1/ledger", auditor, (c) => searchRoute(c.env, c.var.principal, new URL(c.req.url).searchParams));
app.get("/v1/ledger/export", auditor, (c) => exportRoute(c.env, c.var.principal, c.req.query("team") ?? null, canonicalUrl(c.var.cfg)));
app.get("/v1/ledger/:id/trace", auditor, (c) => traceRoute(c.env, c.var.principal, c.req.param("id"), c.req.query("team") ?? null));

// Metrics from the ledger's rollups: Prometheus text and JSON (auditor, operator, admin).
app.get("/metrics", watcher, (c) => prometheusRoute(c.env, c.var.principal, new URL(c.req.url).searchParams));
app.get("/v1/metrics", watcher, (c) => metricsJsonRoute(c.env, c.var.principal, new URL(c.req.url).searchParams));

// Holds (approvers), the kill switch (admin; status for operators) and the web console.
app.route("/", holdsRoutes);
app.route("/", killSwitchRoutes);
app.route("/", runsRoutes);
app.route("/", consoleRoutes);
// Hot reload: PUT /v1/config (admin) stores a new version of the config.
app.route("/", configRoutes);

app.all("/operator/mcp", gate({ path: "/operator/mcp", role: ["auditor", "approver", "operator", "admin"], allowActor: false }), (c) =>
  operatorMcp(c.req.raw, c.env, c.var.cfg, c.var.principal),
);

app.get("/healthz", (c) => c.json({ ok: true }));
app.get(CLIENT_METADATA_PATH, (c) => clientMetadataRoute(c.env, c.req.raw));

// Readiness says only {ok} to anyone; the per-upstream detail (reachability, each list's last
// outcome in this isolate, ready/degraded) is for operators (a grant with operator, auditor or
// admin) and for the loopback actor of an unauthenticated dev gateway. 503 when no upstream is
// reachable (or the config cannot be served); one down among several is `degraded`, still 200.
app.get("/readyz", async (c) => {
  const req = c.req.raw;
  const shared = await servableConfig(c.env, req);
  if (shared instanceof Response) return shared;
  let detail = !shared.auth.required && isLoopbackRequest(req) && req.headers.get("authorization") === null;
  if (req.headers.get("authorization") !== null) {
    const auth = await authenticate(req, c.env, shared, { path: "/", role: ["operator", "auditor", "admin"], allowActor: false });
    if (!auth.ok) return auth.response;
    detail = true;
  }
  const body = await readiness(await requestConfig(c.env, shared, req));
  // Operators also see the policy watch: rules that match none of the tools the upstreams listed last (src/services/policy-watch.ts).
  const policy = policyWatchReport();
  return c.json(detail ? { ...body, ...(policy ? { policy } : {}) } : { ok: body.ok }, body.ok ? 200 : 503, { "cache-control": "no-store" });
});

// What the caller can see: the same gate as /mcp, so counts follow the grant and the upstreams' allow/deny.
app.get("/summary", gate({ path: "/mcp", role: "agent", allowActor: true, scoped: true }), async (c) => c.json(await summary(c.var.cfg, c.var.principal)));

app.route("/", sseRoutes);
app.route("/", mcpRoutes);

app.notFound(() => jsonResponse({ error: "not found" }, 404));
app.onError((err) => {
  console.error("portcullis: unhandled", err.stack ?? String(err));
  return jsonResponse({ error: "internal error" }, 500);
});

export default app;
