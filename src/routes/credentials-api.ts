/**
 * `PUT /v1/credentials/:upstream` and `DELETE /v1/credentials/:upstream`: a principal registers
 * (or removes) its own token for a `per_principal` upstream. Owns request validation.
 * Must never: echo the token back, store it unsealed, or act on another principal's entry.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import type { Principal } from "../config/principal.ts";

import { credentialsObject } from "../../durable-objects/object-names.ts";
import { sealCredential } from "../egress/upstream-credentials.ts";
import { jsonResponse } from "../wire/http.ts";
import { readJsonBody } from "../wire/body.ts";

function bad(message: string, status = 400): Response {
  return jsonResponse({ error: "invalid_request", error_description: message }, status);
}

function target(cfg: GatewayConfig, name: string): UpstreamConfig | Response {
  const up = cfg.upstreams.find((u) => u.name === name);
  if (!up) return bad(`no upstream named ${name}`, 404);
  if (up.credentials.mode !== "per_principal") return bad(`upstream ${name} does not take per-principal credentials (mode ${up.credentials.mode})`);
  return up;
}

export async function putCredentialRoute(req: Request, env: Env, cfg: GatewayConfig, principal: Principal, upstream: string): Promise<Response> {
  const up = target(cfg, upstream);
  if (up instanceof Response) return up;
  const read = await readJsonBody(req, 16 * 1024);
  if (read instanceof Response) return read;
  const body = read.value;
  if (body === undefined) return bad('body must be JSON: {"token": "…"}');
  const token = body && typeof body === "object" ? (body as { token?: unknown }).token : undefined;
  if (typeof token !== "string" || token.length < 1 || token.length > 8192 || /[\r\n]/.test(token)) {
    return bad("token must be a string of 1–8192 characters without line breaks");
  }
  try {
    await credentialsObject(env, principal.sub).put(upstream, await sealCredential(env, cfg, principal.sub, up, token));
  } catch (e) {
    return bad(`the credential could not be stored (${(e as Error).message})`, 503);
  }
  return jsonResponse({ upstream, principal: principal.sub, stored: true });
}

export async function deleteCredentialRoute(env: Env, cfg: GatewayConfig, principal: Principal, upstream: string): Promise<Response> {
  const up = target(cfg, upstream);
  if (up instanceof Response) return up;
  const removed = await credentialsObject(env, principal.sub).remove(upstream);
  return jsonResponse({ upstream, principal: principal.sub, removed });
}
