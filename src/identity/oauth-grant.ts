/**
 * What an OAuth-issued grant carries, worked out from its sign-in source: the template the admin
 * configured for that source (auth.oauth.sign_in.*.template) bounds everything — an enrollment
 * code's own tools, roles and lifetime are kept only where the template covers them. Also the
 * signed "who signed in" value the consent form carries between the sign-in and the approval
 * (HMAC under the gateway's signing secret, bound to the consent handle). Pure functions. The
 * template's team was checked at load (src/config/schema.ts); a person's name comes from the
 * source's own check (Access, OIDC) or, for a code, must have the gateway's one spelling. Must
 * never: widen a grant beyond its template, offer a code whose principal or team the gateway
 * refuses, accept a signed value made for another handle, or put a token or code into what it signs.
 */
import { utf8ToBytes } from "@noble/hashes/utils.js";
import type { GrantTemplate } from "../config/oauth-schema.ts";
import { principalNameProblem, reservedNameProblem } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import { isRole } from "../config/roles.ts";
import { globMatch } from "../wire/glob.ts";
import { decodeCanonical, encode } from "./base64url.ts";
import { labelledMac, sameMac } from "./secret-mac.ts";
import type { SignInSource } from "./oauth-server.ts";

/** The grant a signed-in person would receive: shown on the consent page, then issued as is. */
export interface GrantOffer {
  source: SignInSource;
  sub: string;
  team: string;
  roles: Role[];
  tools: string[];
  budget?: { calls: number };
  /** Lifetime in seconds, refreshes included. */
  lifetimeS: number;
  /** The OIDC issuer the person signed in with (source oidc). */
  issuer?: string;
  /** The enrollment code's stored id (source enrollment): taken once when the person approves. */
  enrollment?: string;
}

/**
 * Whether every name glob `t` matches is matched by template glob `g` too (conservative: false
 * when that cannot be shown simply). A plain name is covered when `g` matches it; a glob only by
 * the same glob, or by a prefix glob (`github__*`) whose prefix it starts with — never because a
 * `?` in `g` happens to match a `*` in `t`.
 */
function covers(g: string, t: string): boolean {
  if (g === t) return true;
  if (!/[*?]/.test(t)) return globMatch(g, t);
  return /^[^*?]*\*$/.test(g) && t.startsWith(g.slice(0, -1));
}

/** The tool globs the template covers (kept) and those it does not (dropped). */
export function coveredTools(template: GrantTemplate, tools: string[]): { kept: string[]; dropped: string[] } {
  const kept: string[] = [];
  const dropped: string[] = [];
  for (const t of tools) (template.tools.some((g) => covers(g, t)) ? kept : dropped).push(t);
  return { kept, dropped };
}

/** The offer for a person of a source without codes (Access, OIDC): the template as it is. */
export function templateOffer(source: SignInSource, sub: string, template: GrantTemplate, issuer?: string): GrantOffer {
  const offer: GrantOffer = { source, sub, team: template.team, roles: [...template.roles], tools: [...template.tools], lifetimeS: template.lifetimeS };
  if (template.budget) offer.budget = { ...template.budget };
  if (issuer !== undefined) offer.issuer = issuer;
  return offer;
}

/**
 * The offer of an enrollment code: its tools that the template covers, its roles that the
 * template has, its lifetime capped by the template's; the team and budget are the template's.
 * A code that keeps no role, or whose principal or the template's team is not a name the gateway
 * accepts (a code stored before the canonical-name rule), signs nobody in (null).
 */
export function enrollmentOffer(
  template: GrantTemplate,
  code: { sub: string; tools: string[]; roles: Role[]; ttlSeconds: number },
  enrollment: string,
): GrantOffer | null {
  const roles = code.roles.filter((r) => template.roles.includes(r));
  if (roles.length === 0) return null;
  if (principalNameProblem(code.sub, []) !== null || reservedNameProblem("team", template.team) !== null) return null;
  const offer: GrantOffer = {
    source: "enrollment",
    sub: code.sub,
    team: template.team,
    roles,
    tools: coveredTools(template, code.tools).kept,
    lifetimeS: Math.min(code.ttlSeconds, template.lifetimeS),
    enrollment,
  };
  if (template.budget) offer.budget = { ...template.budget };
  return offer;
}

function mac(secret: string, handle: string, body: string): string {
  return labelledMac(secret, "portcullis oauth offer", `${handle}\n${body}`);
}

/** `body.mac`: the offer, signed for this consent handle only. */
export function signOffer(secret: string, handle: string, offer: GrantOffer): string {
  const body = encode(utf8ToBytes(JSON.stringify(offer)));
  return `${body}.${mac(secret, handle, body)}`;
}

/** The offer a consent form carried, if it was signed by this gateway for this handle; null otherwise. */
export function openOffer(secret: string, handle: string, signed: string | null): GrantOffer | null {
  if (typeof signed !== "string" || signed.length > 16_384) return null;
  const [body, given, extra] = signed.split(".");
  if (!body || !given || extra !== undefined) return null;
  if (!sameMac(mac(secret, handle, body), given)) return null;
  const bytes = decodeCanonical(body);
  if (!bytes) return null;
  try {
    const o = JSON.parse(new TextDecoder().decode(bytes)) as GrantOffer;
    if (typeof o.sub !== "string" || !Array.isArray(o.roles) || !o.roles.every(isRole) || !Array.isArray(o.tools)) return null;
    return o;
  } catch {
    return null;
  }
}
