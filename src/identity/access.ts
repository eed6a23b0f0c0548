/**
 * Cloudflare Access sign-in for the web console: verifies the JWT Access puts in front of every
 * request it lets through (`Cf-Access-Jwt-Assertion`) against `auth.access` — RS256 keys from the
 * team's certs URL (fetched with the caller's egress-checked fetch, cached by jose), `aud` = the
 * Access application's AUD tag, `iss` = the team domain, `exp`/`nbf` with a small skew — and maps
 * it to a Principal: `<sub_prefix><email>` with the roles and team the config gives Access users,
 * the email in its one form (NFC, lowercased: an address is one person however it is capitalised,
 * so `Leo@x` and `leo@x` are one principal, never two who could approve each other's holds).
 * Must never: accept a token signed by anyone but the team's keys or meant for another Access
 * application, take roles or a team from the token, sign in a name the gateway refuses
 * (src/config/principal.ts), or let the token reach a log or a page.
 */
import { createRemoteJWKSet, customFetch, jwtVerify } from "jose";
import type { AccessConfig } from "../config/gateway-config.ts";
import { type Principal, principalNameProblem, reservedNameProblem } from "../config/principal.ts";
import { Memo } from "../wire/memo.ts";

/** The header Cloudflare Access sets on requests it let through. */
export const ACCESS_HEADER = "cf-access-jwt-assertion";

/** Clock skew tolerated on exp/nbf/iat, in seconds. */
export const ACCESS_SKEW_S = 30;

export type AccessFetch = (url: string, init: RequestInit) => Promise<Response>;

/** A verified Access sign-in: the principal, and the token's iat (a new token is a new console session). */
export interface AccessSignIn {
  principal: Principal;
  iat: number;
}

/** Key sets by certs URL (one per configured Access team; bounded). */
const keySets = new Memo<string, ReturnType<typeof createRemoteJWKSet>>({ max: 64 });

function keysFor(access: AccessConfig, fetcher: AccessFetch) {
  let set = keySets.get(access.certsUrl);
  if (!set) {
    set = createRemoteJWKSet(new URL(access.certsUrl), {
      timeoutDuration: 5000,
      cooldownDuration: 30_000,
      cacheMaxAge: 600_000,
      [customFetch]: (url: string, init: RequestInit) => fetcher(url, init),
    });
    keySets.set(access.certsUrl, set);
  }
  return set;
}

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const EMAIL = /^[^\s@<>"]{1,200}@[^\s@<>"]{1,200}$/;

/** Verifies an Access JWT; a string result is why it did not sign anyone in (never echoes the token). */
export async function verifyAccess(token: string, access: AccessConfig, fetcher: AccessFetch): Promise<AccessSignIn | string> {
  if (token.length > 8192 || !JWT_SHAPE.test(token)) return "the Cloudflare Access assertion is not a JWT";
  try {
    const { payload } = await jwtVerify(token, keysFor(access, fetcher), {
      issuer: access.teamDomain,
      audience: access.audience,
      algorithms: ["RS256"],
      clockTolerance: ACCESS_SKEW_S,
      requiredClaims: ["exp", "iat"],
    });
    const email = payload.email;
    // Service tokens carry no email (common_name instead): they sign no person in.
    if (typeof email !== "string" || !EMAIL.test(email)) return "the Cloudflare Access token names no email";
    if (typeof payload.exp !== "number" || typeof payload.iat !== "number") return "the Cloudflare Access token has no exp or iat";
    const sub = `${access.subPrefix}${email.normalize("NFC").toLowerCase()}`;
    const badSub = principalNameProblem(sub, [{ prefix: access.subPrefix, source: "auth.access" }]);
    if (badSub) return `the Cloudflare Access token's email signs nobody in: ${badSub}`;
    // The team is the config's (checked at load); checked again, so a reserved team never signs anyone in.
    const badTeam = reservedNameProblem("team", access.team);
    if (badTeam) return `auth.access.team signs nobody in: ${badTeam}`;
    // The principal exists only inside the console: it reaches no tool (an Access user approves, audits or halts; it is no agent).
    const principal: Principal = {
      sub,
      team: access.team,
      roles: [...access.roles],
      tools: [],
      authenticated: true,
      exp: payload.exp,
    };
    return { principal, iat: payload.iat };
  } catch (e) {
    const err = e as { code?: unknown; name?: string };
    return `the Cloudflare Access token failed verification (${typeof err.code === "string" ? err.code : (err.name ?? "error")})`;
  }
}
