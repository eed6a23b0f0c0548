/**
 * The admin enrollment API: `POST /v1/grants/enroll` mints a one-time enrollment code (what
 * `portcullis token enroll` prints) with which a person signs in to the OAuth flow of a hosted
 * client (Claude, ChatGPT, VS Code) and receives a grant. Owns the request's validation against
 * the configured enrollment template (auth.oauth.sign_in.enrollment.template: its roles, its tool
 * globs, its lifetime, auth.max_token_lifetime) and the order: code stored, then its
 * `grant.enrolled` record durable on the template team's chain, then the answer. Must never: return
 * a code whose ledger record was not written, put the code into the ledger or a log, or mint a
 * code for a principal of an identity provider (an external issuer, Cloudflare Access, their
 * default prefixes), for a principal not in the gateway's one spelling (src/config/principal.ts),
 * or beyond the template.
 */
import { z } from "zod";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { principalSpaces } from "../config/principal-spaces.ts";
import { mintedPrincipalProblem, type Principal } from "../config/principal.ts";
import { ROLES } from "../config/roles.ts";
import type { Env } from "../env.ts";
import { mintEnrollment, readEnrollment } from "../identity/enrollment.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { coveredTools } from "../identity/oauth-grant.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import { readJsonBody } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";

/** Default and longest life of a code itself (not of the grant it signs in to). */
export const CODE_TTL_DEFAULT_S = 86_400;
export const CODE_TTL_MAX_S = 7 * 86_400;

const enrollBody = z.strictObject({
  sub: z.string().min(1).max(200),
  /** Tool globs of the grant; default: the template's. Each must be covered by the template. */
  tools: z.array(z.string().min(1).max(200)).max(200).optional(),
  roles: z.array(z.enum(ROLES)).min(1).default(["agent"]),
  /** Lifetime of the grant the code signs in to; default: the template's lifetime. */
  ttl_seconds: z.number().int().positive().optional(),
  code_ttl_seconds: z.number().int().positive().max(CODE_TTL_MAX_S, `at most ${CODE_TTL_MAX_S} (7 days)`).default(CODE_TTL_DEFAULT_S),
});

function bad(message: string, status = 400): Response {
  return jsonResponse({ error: "invalid_request", error_description: message }, status);
}

/**
 * Mints an enrollment code for `sub`. Refusals: 409 when OAuth or the enrollment sign-in is not
 * configured (naming the key to set); 400 for a body the template does not cover; 503 when the
 * code cannot be stored or its record written (the code is then not returned, and voided).
 */
export async function enrollRoute(req: Request, env: Env, cfg: GatewayConfig, by: Principal): Promise<Response> {
  const oauth = cfg.auth.oauth;
  if (!oauth.enabled)
    return bad("OAuth sign-in is off: set auth.oauth.enabled: true (and auth.oauth.sign_in.enrollment.template) to use enrollment codes", 409);
  const template = oauth.enrollment;
  if (!template)
    return bad("no enrollment template is configured: set auth.oauth.sign_in.enrollment.template (the tools, roles, team and lifetime a code may grant)", 409);
  const read = await readJsonBody(req);
  if (read instanceof Response) return read;
  const parsed = enrollBody.safeParse(read.value);
  if (!parsed.success) return bad(parsed.error.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`).join("; "));
  const b = parsed.data;
  // An identity provider's principals are its own: a code never signs anyone in as one, and a name has one spelling (as for POST /v1/grants).
  const badSub = mintedPrincipalProblem(b.sub, principalSpaces(cfg.auth));
  if (badSub) return bad(`sub ${JSON.stringify(b.sub)}: ${badSub}`);
  const roles = [...new Set(b.roles)];
  const outside = roles.filter((r) => !template.roles.includes(r));
  if (outside.length)
    return bad(`role${outside.length === 1 ? "" : "s"} ${outside.join(", ")} not in the enrollment template's roles (${template.roles.join(", ")})`);
  const tools = b.tools ? [...new Set(b.tools)] : [...template.tools];
  const { dropped } = coveredTools(template, tools);
  if (dropped.length)
    return bad(
      `tool${dropped.length === 1 ? "" : "s"} ${dropped.map((t) => JSON.stringify(t)).join(", ")} not covered by the enrollment template's tools (${template.tools.map((t) => JSON.stringify(t)).join(", ") || "none"})`,
    );
  const ttl = b.ttl_seconds ?? Math.min(template.lifetimeS, cfg.auth.maxTokenLifetimeS);
  if (ttl > template.lifetimeS) return bad(`ttl_seconds exceeds the enrollment template's lifetime (${template.lifetimeS})`);
  if (ttl > cfg.auth.maxTokenLifetimeS) return bad(`ttl_seconds exceeds the maximum lifetime (auth.max_token_lifetime, ${cfg.auth.maxTokenLifetimeS})`);
  const expires = Math.floor(Date.now() / 1000) + b.code_ttl_seconds;
  let minted: { code: string; id: string };
  try {
    minted = await mintEnrollment(env, { sub: b.sub, tools, roles, ttlSeconds: ttl, expiresAt: expires, by: by.sub });
  } catch (e) {
    return bad(`no enrollment code was issued: it could not be stored (${(e as Error).message})`, 503);
  }
  try {
    await appendRecord(env, ledgerSigning(cfg), template.team, "grant.enrolled", {
      enrollment: minted.id,
      sub: b.sub,
      roles,
      tools,
      ttl_seconds: ttl,
      expires,
      by: by.sub,
    });
  } catch (e) {
    // Unrecorded, the code must not work: take it (best effort; it is never returned either way).
    await readEnrollment(env, minted.code, true).catch(() => undefined);
    return bad(`no enrollment code was issued: its ledger record could not be written (${(e as Error).message})`, 503);
  }
  return jsonResponse(
    { code: minted.code, enrollment: minted.id, sub: b.sub, roles, tools, ttl_seconds: ttl, expires, connect_url: `${canonicalUrl(cfg)}/mcp` },
    201,
    { "cache-control": "no-store" },
  );
}
