/**
 * The admin grant API: `POST /v1/grants` mints a grant with the gateway's active key (its jti
 * noted in RevocationsDO until it expires, so a revocation can tell a jti this gateway minted),
 * `POST /v1/grants/:jti/revoke` revokes one (effective at once on this isolate, within 1 s on every other: src/identity/revocation-cache.ts),
 * any jti, saying whether the gateway knew it. Owns request validation for both. Must never: mint beyond the configured maximum lifetime,
 * mint for a team the gateway reserves (`_global` is its own ledger chain) or not in its one
 * form, mint a principal outside the gateway's own spelling or inside an identity provider's
 * space (src/config/principal.ts), return or log the signing key, or log a minted token.
 */
import { z } from "zod";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { principalSpaces } from "../config/principal-spaces.ts";
import { ROLES } from "../config/roles.ts";
import type { Env } from "../env.ts";

import { signingKeys } from "../identity/auth.ts";
import { canonicalUrl, issuerOf } from "../identity/metadata.ts";
import { mintedPrincipalProblem, type Principal, reservedNameProblem } from "../config/principal.ts";
import { revocationObject } from "../../durable-objects/object-names.ts";
import { noteRevoked } from "../identity/revocation-cache.ts";
import { MAX_CLOCK_SKEW_SECONDS, mintGrant } from "../identity/tokens.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";
import { readJsonBody } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";

const mintBody = z.strictObject({
  sub: z.string().min(1).max(200),
  team: z.string().min(1).max(100).default("default"),
  roles: z.array(z.enum(ROLES)).min(1).default(["agent"]),
  tools: z.array(z.string().min(1).max(200)).max(200).default([]),
  budget: z.strictObject({ calls: z.number().int().positive().optional() }).optional(),
  ttl_seconds: z.number().int().positive().optional(),
});

function bad(message: string, status = 400): Response {
  return jsonResponse({ error: "invalid_request", error_description: message }, status);
}

/**
 * Mints a grant; its jti is noted (RevocationsDO noteMinted) and the `grant.minted` record (never
 * the token) is durable in the grant team's chain before the token is returned.
 */
export async function mintGrantRoute(req: Request, env: Env, cfg: GatewayConfig, by: Principal): Promise<Response> {
  const read = await readJsonBody(req);
  if (read instanceof Response) return read;
  const parsed = mintBody.safeParse(read.value);
  if (!parsed.success) return bad(parsed.error.issues.map((i) => `${i.path.join(".") || "(body)"}: ${i.message}`).join("; "));
  const b = parsed.data;
  // An identity provider's principals are its own (a minted grant never speaks for one), and a name has one spelling.
  const badSub = mintedPrincipalProblem(b.sub, principalSpaces(cfg.auth));
  if (badSub) return bad(`sub ${JSON.stringify(b.sub)}: ${badSub}`);
  // A reserved team would put the grant's records on the gateway's own chains.
  const badTeam = reservedNameProblem("team", b.team);
  if (badTeam) return bad(`team ${JSON.stringify(b.team)}: ${badTeam}`);
  const ttl = b.ttl_seconds ?? Math.min(3600, cfg.auth.maxTokenLifetimeS);
  if (ttl > cfg.auth.maxTokenLifetimeS) return bad(`ttl_seconds exceeds the maximum lifetime (${cfg.auth.maxTokenLifetimeS})`);
  const keysP = signingKeys(env, cfg);
  if (!keysP) return bad(`no signing key is configured (set the ${cfg.auth.signingKeySecret} secret)`, 503);
  const claims = {
    iss: issuerOf(cfg),
    aud: canonicalUrl(cfg),
    sub: b.sub,
    team: b.team,
    roles: b.roles,
    tools: b.tools,
    ttlSeconds: ttl,
    ...(b.budget ? { budget: b.budget } : {}),
  };
  const minted = await mintGrant(await keysP, claims, { maxLifetimeSeconds: cfg.auth.maxTokenLifetimeS });
  try {
    await revocationObject(env, minted.jti).noteMinted(minted.jti, minted.exp);
  } catch (e) {
    return bad(`the grant was not issued: its jti could not be recorded (${(e as Error).message})`, 503);
  }
  try {
    await appendRecord(env, ledgerSigning(cfg), b.team, "grant.minted", {
      jti: minted.jti,
      sub: b.sub,
      team: b.team,
      roles: b.roles,
      tools: b.tools,
      exp: minted.exp,
      by: by.sub,
    });
  } catch (e) {
    return bad(`the grant was not issued: its ledger record could not be written (${(e as Error).message})`, 503);
  }
  return jsonResponse({ token: minted.token, jti: minted.jti, exp: minted.exp }, 201, { "cache-control": "no-store" });
}

/**
 * How long a revocation is kept: never shorter than the longest any grant with that jti can still
 * verify — the maximum lifetime, plus the clock skew verification tolerates on its `iat` and again
 * on its `exp` — so a mistaken or hostile `exp` (0, or any time in the past) cannot end it early.
 */
export function revocationUntil(cfg: GatewayConfig, given: unknown): number {
  const floor = Math.floor(Date.now() / 1000) + cfg.auth.maxTokenLifetimeS + 2 * MAX_CLOCK_SKEW_SECONDS;
  return typeof given === "number" && Number.isFinite(given) ? Math.max(given, floor) : floor;
}

/** What a revocation of a jti the gateway has no record of says (the answer's `note`, beside `known: false`). */
export const UNKNOWN_JTI_NOTE =
  "this gateway has no record of this jti: it did not mint it through POST /v1/grants (or that grant has expired) and had not revoked it before. It is revoked all the same; check it for a typo. A grant signed offline with the key (token mint --key) or issued through OAuth sign-in is not recorded at minting";

/** The answer of a revocation. `known`: the gateway minted this jti (POST /v1/grants, unexpired) or revoked it before. */
export interface Revocation {
  revoked: string;
  until: number;
  known: boolean;
  note?: string;
  warning?: string;
}

/**
 * Revokes `jti` (at once here, within 1 s everywhere) and records `grant.revoked` on the
 * revoker's team chain. The revocation stands even if the record cannot be written; the answer
 * then says so. It stands too for a jti the gateway has no record of (`known: false` and a
 * `note`): a grant signed offline with the key is valid and must be revocable.
 */
export async function revokeGrant(env: Env, cfg: GatewayConfig, gateway: string, jti: string, given: unknown, by: Principal): Promise<Revocation> {
  const until = revocationUntil(cfg, given);
  const { known } = await revocationObject(env, jti).revoke(jti, until, by.sub);
  noteRevoked(jti);
  const answer: Revocation = { revoked: jti, until, known, ...(known ? {} : { note: UNKNOWN_JTI_NOTE }) };
  try {
    await appendRecord(env, { secret: cfg.auth.signingKeySecret, gateway }, by.team, "grant.revoked", { jti, until, by: by.sub });
  } catch (e) {
    return { ...answer, warning: `the revocation applies, but its ledger record could not be written (${(e as Error).message})` };
  }
  return answer;
}

export async function revokeGrantRoute(req: Request, env: Env, cfg: GatewayConfig, jti: string, by: Principal): Promise<Response> {
  if (!/^[A-Za-z0-9_-]{8,128}$/.test(jti)) return bad("jti must be 8–128 characters of [A-Za-z0-9_-]");
  const read = await readJsonBody(req);
  if (read instanceof Response) return read;
  const b = read.value;
  const given = b && typeof b === "object" && "exp" in b ? (b as { exp: unknown }).exp : undefined;
  return jsonResponse(await revokeGrant(env, cfg, canonicalUrl(cfg), jti, given, by));
}
