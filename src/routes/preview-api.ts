/**
 * Previews on the REST and operator surfaces: `POST /v1/preview {name, arguments?, principal?}`
 * and the operator tool `portcullis.preview_impact`. A caller previews its own grant; an operator
 * or admin may name any principal (sub, team, roles, tool globs) and sees what that principal's
 * call would get. Owns the request shapes and the per-principal config view. Must never:
 * execute, record or change anything, or let an agent preview as someone else.
 */
import { z } from "zod";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import { ROLES } from "../config/roles.ts";
import type { Env } from "../env.ts";
import type { Preview } from "../governance/call-decide.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { previewFor } from "../front/preview.ts";
import { readJsonBody } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { requestConfig } from "./config-view.ts";

export const principalSpec = z.strictObject({
  sub: z.string().min(1).max(200),
  team: z.string().min(1).max(100).default("default"),
  roles: z.array(z.enum(ROLES)).default(["agent"]),
  tools: z.array(z.string().min(1).max(200)).max(200).default([]),
});

export const previewBody = z.strictObject({
  name: z.string().min(1).max(256),
  arguments: z.record(z.string(), z.unknown()).optional(),
  principal: principalSpec.optional(),
});

/** The principal a preview is for: the caller, or (operator/admin only) the one it names. */
export function previewPrincipal(caller: Principal, named: z.output<typeof principalSpec> | undefined): Principal | string {
  if (!named) return caller;
  if (!principalHas(caller, "operator")) return "previewing for another principal needs the operator or admin role";
  return { sub: named.sub, team: named.team, roles: named.roles, tools: named.tools, authenticated: true };
}

/** The preview of `name(args)` for `who`, with the config as that principal's requests see it. */
export async function previewAs(env: Env, shared: GatewayConfig, req: Request, who: Principal, name: string, args: JsonObject | undefined): Promise<Preview> {
  const cfg = await requestConfig(env, shared, req, who);
  return previewFor({ env, cfg, principal: who, gateway: canonicalUrl(shared), waitUntil: () => undefined }, req, name, args);
}

export async function previewRoute(req: Request, env: Env, cfg: GatewayConfig, caller: Principal): Promise<Response> {
  const read = await readJsonBody(req);
  if (read instanceof Response) return read;
  const parsed = previewBody.safeParse(read.value);
  if (!parsed.success) {
    const why = parsed.error.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`).join("; ");
    return jsonResponse({ error: "invalid_request", error_description: why }, 400);
  }
  const who = previewPrincipal(caller, parsed.data.principal);
  if (typeof who === "string") return jsonResponse({ error: "insufficient_scope", error_description: who }, 403);
  const preview = await previewAs(env, cfg, req, who, parsed.data.name, parsed.data.arguments as JsonObject | undefined);
  return jsonResponse({ principal: who.sub, ...preview }, 200, { "cache-control": "no-store" });
}
