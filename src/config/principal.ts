/**
 * Who is calling: the principal a request runs as, after authentication, and the one rule for
 * the names a principal is made of. Owns the Principal shape, the role question, the names the
 * gateway reserves for itself (team `_global`, every Durable Object and storage name kind, names
 * starting with `_`, the hold-id separator `~`), the canonical form of team and principal names
 * (checked by every entry point: minted grants, enrollment codes, grant verification, OIDC and
 * Access claims, OAuth templates, config), the principal spaces of the identity providers, and
 * the look-alike comparison separation of duties uses. Must never: hold the token itself (only
 * its jti), widen a grant, put a name's value into a reason, or fold names where ownership is
 * decided (ownership compares the canonical names exactly; only refusals — self-approval, a
 * kill-switch halt of a principal or team — compare folded forms, so folding can only ever deny).
 */
import { type Budget, hasRole, type Role } from "./roles.ts";

export interface Principal {
  /** e.g. `agent:triage-bot`, `human:leo`, or the configured actor when unauthenticated. */
  sub: string;
  team: string;
  roles: Role[];
  /** Globs over exposed tool names; null means every tool (the unauthenticated loopback actor). */
  tools: string[] | null;
  authenticated: boolean;
  jti?: string;
  /** When the grant (or external token) stops verifying, seconds since the epoch; absent for the unauthenticated actor. */
  exp?: number;
  budget?: Budget;
}

/** `admin` holds every role; the others are independent (roles.ts owns the rule). */
export function principalHas(p: Principal, role: Role): boolean {
  return hasRole(p, role);
}

/**
 * The gateway's own ledger chain (`GLOBAL_CHAIN` of src/ledger/records.ts, which this layer may
 * not import; test/unit/reserved-names.test.ts keeps the two equal). Team names are chain names,
 * so a team of this name would write onto the global chain and break every export's verification.
 */
export const GLOBAL_TEAM = "_global";

/**
 * The kinds that prefix Durable Object and storage names (durable-objects/object-names.ts, the
 * enrollment keys of src/identity/enrollment.ts). Every builder puts its kind in front of the
 * identifier, so no identifier can address an object of another kind; a team or principal that
 * starts with a kind is refused all the same, so no name ever reads like an object's name.
 */
export const OBJECT_NAME_KINDS = ["session:", "sse:", "run:", "round:", "leg:", "principal:", "team:", "chain:", "shard-", "enroll:"] as const;

/** Separates the team from the random part of a hold id (`<team>~<24 hex>`). */
export const HOLD_ID_SEPARATOR = "~";

/**
 * The principal prefixes the identity providers use by default (`oidc:<issuer host/path>:` for
 * an external issuer, `access:` for Cloudflare Access): a minted grant or an enrollment code never
 * takes a name in them, configured or not, so configuring an issuer later never meets an old grant.
 */
export const IDP_DEFAULT_PREFIXES = ["oidc:", "access:"] as const;

export type NameKind = "team" | "principal";

/** Longest team name (a chain name, a hold id's first part) and longest principal name. */
export const MAX_TEAM = 100;
export const MAX_PRINCIPAL = 512;

/** Characters no name may hold: controls (NUL separates parts of legs' object names), format characters (zero-width, bidi), separators and spaces, lone surrogates. */
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Z}\p{Cs}]/u;

/**
 * Why `name` cannot be a team or a principal because of a name the gateway reserves or a
 * character no name may hold; null when it can. Shared by every entry point and by grant
 * verification (a signed token naming a reserved team is refused). Teams are also canonical here
 * (lowercase, NFC); the case rule of a principal depends on its space (principalNameProblem).
 */
export function reservedNameProblem(kind: NameKind, name: string): string | null {
  if (typeof name !== "string" || name === "") return `the ${kind} is empty`;
  const max = kind === "team" ? MAX_TEAM : MAX_PRINCIPAL;
  if (name.length > max) return `the ${kind} is longer than ${max} characters`;
  if (INVISIBLE.test(name)) return `the ${kind} holds a control, format or space character`;
  if (name.normalize("NFC") !== name) return `the ${kind} is not in Unicode NFC`;
  if (name === GLOBAL_TEAM || name.startsWith("_"))
    return `${kind} names starting with "_" are reserved for the gateway (${GLOBAL_TEAM} is its own ledger chain)`;
  if (name.includes(HOLD_ID_SEPARATOR)) return `the ${kind} holds "${HOLD_ID_SEPARATOR}", which separates a hold id's team from its random part`;
  const folded = name.toLowerCase();
  const kindOf = OBJECT_NAME_KINDS.find((k) => folded.startsWith(k));
  if (kindOf !== undefined) return `the ${kind} starts with "${kindOf}", a kind of the gateway's object names`;
  if (kind === "team" && name !== folded) return "the team is not lowercase (team names are compared exactly, so they are written in one form)";
  return null;
}

/**
 * Principals the gateway names itself — minted grants (`POST /v1/grants`, `token mint`),
 * enrollment codes, the loopback actor: lowercase ASCII letters and digits, then also `. _ : @ +
 * / = -`. One spelling per name, so `Agent:bot` cannot be another principal beside `agent:bot`,
 * and no look-alike letters from other scripts. Refused rather than folded: whoever names the
 * principal learns it at once; a grant minted earlier with another spelling stops verifying.
 */
const GATEWAY_PRINCIPAL = /^[a-z0-9][a-z0-9._:@+/=-]*$/;

/** One identity provider's principal space: the prefix every principal it signs in carries, and who it is (for errors). */
export interface PrincipalSpace {
  prefix: string;
  source: string;
}

/** The case-, width- and compatibility-folded form of a name: what two names must differ in to be told apart by a person. */
export function foldedName(name: string): string {
  return name.normalize("NFKC").toLowerCase().normalize("NFKC");
}

/** The space `sub` falls in (compared folded, so `Access:x` is in `access:`'s), if any. */
export function spaceOf(sub: string, spaces: readonly PrincipalSpace[]): PrincipalSpace | undefined {
  const f = foldedName(sub);
  return spaces.find((s) => f.startsWith(foldedName(s.prefix)));
}

/**
 * Why `sub` is not a canonical principal name, or null. In an identity provider's space (`spaces`)
 * the part after the prefix is the provider's own identifier: OIDC `sub` is case-sensitive (OIDC
 * Core 1.0 §2), so it is kept as the provider wrote it (Access emails are lowercased where they
 * enter, src/identity/access.ts); outside every space it is a name the gateway gave and must have
 * the one gateway spelling.
 */
export function principalNameProblem(sub: string, spaces: readonly PrincipalSpace[]): string | null {
  const reserved = reservedNameProblem("principal", sub);
  if (reserved) return reserved;
  if (spaceOf(sub, spaces)) return null;
  if (!GATEWAY_PRINCIPAL.test(sub))
    return "the principal is not in canonical form: lowercase letters a-z, digits and . _ : @ + / = - (starting with a letter or digit)";
  return null;
}

/**
 * Why an admin may not give `sub` to a minted grant or an enrollment code, or null: it must be
 * canonical and outside every identity provider's space (`spaces`, plus the default prefixes
 * `oidc:` and `access:`), since a person signed in by a provider is that provider's alone.
 */
export function mintedPrincipalProblem(sub: string, spaces: readonly PrincipalSpace[]): string | null {
  const reserved = reservedNameProblem("principal", sub);
  if (reserved) return reserved;
  const all = [...spaces, ...IDP_DEFAULT_PREFIXES.map((prefix) => ({ prefix, source: "the identity providers' default prefixes" }))];
  const theirs = spaceOf(sub, all);
  if (theirs) return `the principal is in the principal space of ${theirs.source}, sub_prefix ${JSON.stringify(theirs.prefix)}: give it a name outside it`;
  return principalNameProblem(sub, []);
}

/**
 * Whether two principal names could be the same person to a reader: equal once folded. Separation
 * of duties refuses an approver whose name looks like the requester's, and a halt covers every
 * spelling of its target; it is never used to grant anything (ownership compares exactly), so a
 * fold can only deny.
 */
export function lookAlike(a: string, b: string): boolean {
  return a === b || foldedName(a) === foldedName(b);
}
