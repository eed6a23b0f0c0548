/**
 * The operator tools that exist today: whoami, upstream status, grant revocation, and ledger
 * search and trace (an auditor's own team; admin any).
 * Must never: reveal secrets (upstream headers) or another principal's token.
 */
import { readiness, summary } from "../services/health.ts";
import { revokeGrant } from "./grants.ts";
import { searchRoute, traceRoute } from "./ledger-api.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { registerOperatorTool } from "./operator-registry.ts";
import { previewAs, previewBody, previewPrincipal } from "./preview-api.ts";
import { classificationOf } from "../front/preview.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { requestConfig } from "./config-view.ts";

registerOperatorTool({
  name: "portcullis.whoami",
  description: "The principal, team, roles and tool globs of the calling grant.",
  inputSchema: { type: "object", additionalProperties: false },
  roles: ["auditor", "approver", "operator", "admin"],
  run: async (_args, { principal }) => ({
    sub: principal.sub,
    team: principal.team,
    roles: principal.roles,
    tools: principal.tools,
    authenticated: principal.authenticated,
  }),
});

registerOperatorTool({
  name: "portcullis.upstreams",
  description: "Each configured upstream: reachability (cached ≤ 2 s), description and tool count. No schemas, no credentials.",
  inputSchema: { type: "object", additionalProperties: false },
  roles: ["auditor", "operator", "admin"],
  run: async (_args, { cfg, principal }) => {
    const [ready, sum] = await Promise.all([readiness(cfg), summary(cfg, principal, false)]);
    const ok = new Map(ready.upstreams.map((u) => [u.name, u.ok]));
    return { upstreams: sum.upstreams.map((u) => ({ ...u, ok: ok.get(u.name) ?? false })) };
  },
});

registerOperatorTool({
  name: "portcullis.revoke_grant",
  description: "Revokes a grant by its jti; every later request with it is refused (401).",
  inputSchema: {
    type: "object",
    properties: {
      jti: { type: "string", minLength: 8, maxLength: 128 },
      exp: { type: "integer", description: "the grant's exp (seconds); the revocation is kept at least as long as any grant can still live" },
    },
    required: ["jti"],
    additionalProperties: false,
  },
  roles: ["admin"],
  run: async (args, { env, cfg, principal, gateway }) => {
    const jti = args.jti;
    if (typeof jti !== "string" || !/^[A-Za-z0-9_-]{8,128}$/.test(jti)) throw new Error("jti must be 8–128 characters of [A-Za-z0-9_-]");
    return { ...(await revokeGrant(env, cfg, gateway, jti, args.exp, principal)) };
  },
});

/** A ledger route's JSON answer as a tool result; its error as a tool error. */
async function fromRoute(r: Response): Promise<JsonObject> {
  const body = (await r.json()) as JsonObject;
  if (!r.ok) throw new Error(typeof body.error === "string" ? body.error : `HTTP ${r.status}`);
  return body;
}

registerOperatorTool({
  name: "portcullis.ledger_search",
  description:
    "Searches the ledger (newest first): filter by team, principal, tool, kind, status, since/until (ISO times); `after` continues from a previous page's `next`.",
  inputSchema: {
    type: "object",
    properties: {
      ...Object.fromEntries(["team", "principal", "tool", "kind", "status", "since", "until", "after"].map((k) => [k, { type: "string" }])),
      limit: { type: "integer", minimum: 1, maximum: 1000 },
    },
    additionalProperties: false,
  },
  roles: ["auditor", "admin"],
  run: async (args, { env, principal }) => {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(args)) if (typeof v === "string" || typeof v === "number") q.set(k, String(v));
    return fromRoute(await searchRoute(env, principal, q));
  },
});

registerOperatorTool({
  name: "portcullis.ledger_trace",
  description: "Every ledger record of one call (decision, enforcement, outcome, holds) by its decision id, with what became of it.",
  inputSchema: { type: "object", properties: { id: { type: "string" }, team: { type: "string" } }, required: ["id"], additionalProperties: false },
  roles: ["auditor", "admin"],
  run: async (args, { env, principal }) => fromRoute(await traceRoute(env, principal, String(args.id), typeof args.team === "string" ? args.team : null)),
});

registerOperatorTool({
  name: "portcullis.preview_impact",
  description:
    "Would this principal's tool call be allowed, held or blocked — by which check or rule, with which obligations? Executes nothing and records nothing. Without `principal`, previews for the calling grant.",
  inputSchema: {
    type: "object",
    properties: {
      name: { type: "string", description: "the exposed tool name" },
      arguments: { type: "object" },
      principal: {
        type: "object",
        properties: {
          sub: { type: "string" },
          team: { type: "string" },
          roles: { type: "array", items: { type: "string" } },
          tools: { type: "array", items: { type: "string" } },
        },
        required: ["sub"],
        additionalProperties: false,
      },
    },
    required: ["name"],
    additionalProperties: false,
  },
  roles: ["approver", "operator", "admin"],
  run: async (args, { env, cfg, principal, req }) => {
    const parsed = previewBody.safeParse(args);
    if (!parsed.success) throw new Error(parsed.error.issues.map((i) => `${i.path.join(".") || "(arguments)"}: ${i.message}`).join("; "));
    const who = previewPrincipal(principal, parsed.data.principal);
    if (typeof who === "string") throw new Error(who);
    const preview = await previewAs(env, cfg, req, who, parsed.data.name, parsed.data.arguments as JsonObject | undefined);
    return { principal: who.sub, ...preview } as unknown as JsonObject;
  },
});

registerOperatorTool({
  name: "portcullis.classify",
  description:
    "How every upstream tool is classified — OK (mapped), NOTE (heuristic read), WARN (heuristic write), BLOCK (unclassified or drifted: blocked in enforce) — with the reason and totals, from each upstream's own tools/list.",
  inputSchema: { type: "object", additionalProperties: false },
  roles: ["auditor", "operator", "admin"],
  run: async (_args, { env, cfg, principal, req }) => {
    // The operator's view: every upstream, every tool allow/deny let through (not the caller's grant).
    const who = { ...principal, tools: null };
    const view = await requestConfig(env, cfg, req);
    const { banner, unlisted, unavailable } = await classificationOf(
      { env, cfg: view, principal: who, gateway: canonicalUrl(cfg), waitUntil: () => undefined },
      req,
    );
    return { mode: cfg.mode, totals: banner.totals, tools: banner.lines, unlisted, unavailable } as unknown as JsonObject;
  },
});
