/**
 * External OIDC issuers: verifying their JWTs against their published JWKS (fetched without
 * redirects, bounded in time, cached by jose) and mapping claims to a Principal: `<sub_prefix><sub>`,
 * the sub kept as the issuer wrote it (OIDC subs are case-sensitive: folding could make two people
 * one), and the team of the team claim or the issuer's default. Must never: accept a token whose
 * issuer is not configured, take roles the issuer's mapping does not grant, or sign anyone in
 * whose sub or team is not a name the gateway accepts (a reserved team such as `_global`, a
 * non-canonical team, a control or format character): such a token signs nobody in.
 */
import { createRemoteJWKSet, customFetch, jwtVerify, type JWTPayload } from "jose";
import type { ExternalIssuer } from "../config/gateway-config.ts";
import { ROLES } from "../config/roles.ts";
import { type Principal, principalNameProblem, reservedNameProblem } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import { Memo } from "../wire/memo.ts";

export type OidcFetch = (url: string, init: RequestInit) => Promise<Response>;

/** Key sets by JWKS URL (one per configured issuer; bounded). */
const jwksCache = new Memo<string, ReturnType<typeof createRemoteJWKSet>>({ max: 64 });

function jwksFor(iss: ExternalIssuer, fetcher: OidcFetch) {
  let set = jwksCache.get(iss.jwksUrl);
  if (!set) {
    set = createRemoteJWKSet(new URL(iss.jwksUrl), {
      timeoutDuration: 5000,
      cooldownDuration: 30_000,
      cacheMaxAge: 600_000,
      [customFetch]: (url: string, init: RequestInit) => fetcher(url, init),
    });
    jwksCache.set(iss.jwksUrl, set);
  }
  return set;
}

function stringList(v: unknown): string[] | null {
  if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
  if (typeof v === "string") return v.split(/\s+/).filter(Boolean);
  return null;
}

function principalFromClaims(iss: ExternalIssuer, payload: JWTPayload): Principal | string {
  if (typeof payload.sub !== "string" || payload.sub === "") return "token has no sub";
  const roleNames = (iss.rolesClaim ? stringList(payload[iss.rolesClaim]) : null) ?? iss.defaultRoles;
  const roles = roleNames.filter((r): r is Role => (ROLES as readonly string[]).includes(r));
  const teamClaim = iss.teamClaim ? payload[iss.teamClaim] : undefined;
  const tools = (iss.toolsClaim ? stringList(payload[iss.toolsClaim]) : null) ?? iss.defaultTools;
  const sub = `${iss.subPrefix}${payload.sub}`;
  const badSub = principalNameProblem(sub, [{ prefix: iss.subPrefix, source: iss.issuer }]);
  if (badSub) return `token from ${iss.issuer} refused: ${badSub}`;
  // A team claim that is absent, empty or not a string falls back to the default; a team it names must be one the gateway accepts.
  const claimed = typeof teamClaim === "string" && teamClaim !== "";
  const team = claimed ? teamClaim : iss.defaultTeam;
  const badTeam = reservedNameProblem("team", team);
  if (badTeam) return `token from ${iss.issuer} refused: ${claimed ? `its ${iss.teamClaim} claim` : "the default team"}: ${badTeam}`;
  const p: Principal = {
    sub,
    team,
    roles,
    tools,
    authenticated: true,
  };
  if (typeof payload.jti === "string") p.jti = payload.jti;
  if (typeof payload.exp === "number") p.exp = payload.exp;
  return p;
}

/** Verifies a token from `iss`; a string result is the reason it failed. */
export async function verifyExternal(token: string, iss: ExternalIssuer, fetcher: OidcFetch, maxLifetimeS: number): Promise<Principal | string> {
  try {
    const { payload } = await jwtVerify(token, jwksFor(iss, fetcher), {
      issuer: iss.issuer,
      audience: iss.audience,
      clockTolerance: 60,
      maxTokenAge: maxLifetimeS,
      algorithms: ["RS256", "PS256", "ES256", "EdDSA"],
      requiredClaims: ["exp", "iat", "sub"],
    });
    return principalFromClaims(iss, payload);
  } catch (e) {
    return `token from ${iss.issuer} failed verification (${(e as Error).name})`;
  }
}
