/**
 * The operator tools that exist today: whoami, upstream status, and grant revocation.
 * Must never: reveal secrets (upstream headers) or another principal's token.
 */
import { revocationObject } from "../../durable-objects/names.ts";
import { readiness, summary } from "../mcp/health.ts";
import { revocationUntil } from "./grants.ts";
import { registerOperatorTool } from "./operator-registry.ts";

registerOperatorTool({
  name: "portcullis.whoami",
  description: "The principal, team, roles and tool globs of the calling grant.",
  inputSchema: { type: "object", additionalProperties: false },
  roles: ["auditor", "approver", "operator", "admin"],
  run: async (_args, { principal }) => ({ sub: principal.sub, team: principal.team, roles: principal.roles, tools: principal.tools, authenticated: principal.authenticated }),
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
    properties: { jti: { type: "string", minLength: 8, maxLength: 128 }, exp: { type: "integer", description: "the grant's exp (seconds); the revocation is kept at least as long as any grant can still live" } },
    required: ["jti"],
    additionalProperties: false,
  },
  roles: ["admin"],
  run: async (args, { env, cfg, principal }) => {
    const jti = args.jti;
    if (typeof jti !== "string" || !/^[A-Za-z0-9_-]{8,128}$/.test(jti)) throw new Error("jti must be 8–128 characters of [A-Za-z0-9_-]");
    const exp = revocationUntil(cfg, args.exp);
    await revocationObject(env, jti).revoke(jti, exp, principal.sub);
    return { revoked: jti, until: exp };
  },
});
