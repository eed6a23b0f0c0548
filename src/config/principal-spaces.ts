/**
 * The principal spaces of the identity providers a config names: each external issuer's
 * `sub_prefix` (by default `oidc:<host><path>:`) and Cloudflare Access's, and the load-time rules
 * over them — no two may overlap (compared folded), none may be a reserved name, and the loopback
 * actor is in none — each refusal naming both sources. Owns those rules. Must never: read anything
 * but the resolved auth section and the actor, or accept two sources whose principals could meet.
 */
import type { AuthConfig } from "./gateway-config.ts";
import { foldedName, type PrincipalSpace, principalNameProblem, reservedNameProblem, spaceOf } from "./principal.ts";

/** `oidc:<host><path>:` of an issuer URL: each issuer's principals get a space of their own. */
export function defaultSubPrefix(issuer: string): string {
  const u = new URL(issuer);
  return `oidc:${u.host}${u.pathname.replace(/\/+$/, "")}:`;
}

/**
 * The principal spaces of the identity providers: each external issuer's sub_prefix and Cloudflare
 * Access's. A principal in one was signed in by that provider alone; minted grants and enrollment
 * codes (the gateway's own names) live outside them all, and OAuth sign-in issues grants in the
 * space of the source the person signed in with (Access, an issuer, or an enrollment code).
 */
export function principalSpaces(auth: Pick<AuthConfig, "externalIssuers" | "access">): PrincipalSpace[] {
  const out: PrincipalSpace[] = auth.externalIssuers.map((e, i) => ({ prefix: e.subPrefix, source: `auth.external_issuers[${i}] (${e.issuer})` }));
  if (auth.access) out.push({ prefix: auth.access.subPrefix, source: `auth.access (${auth.access.teamDomain})` });
  return out;
}

/**
 * Sources whose principals could be the same string: equal issuers, or one sub_prefix starting
 * with another's, compared folded (then `alice` of one and some `sub` of the other meet, or look
 * alike: an issuer's `sub_prefix: "access:"` next to auth.access would make an IdP user whose sub
 * is an email the same principal as that person through Access). A prefix must be a name the
 * gateway does not reserve, and the loopback actor must be in no provider's space.
 */
export function principalSpaceProblems(auth: AuthConfig, actor: string): string[] {
  const out: string[] = [];
  const issuers = auth.externalIssuers;
  const spaces = principalSpaces(auth);
  for (const s of spaces) {
    const reserved = reservedNameProblem("principal", s.prefix);
    if (reserved) out.push(`${s.source}: sub_prefix ${JSON.stringify(s.prefix)}: ${reserved.replace(/^the principal/, "the prefix")}`);
  }
  // spaces[i] is issuers[i] for i < issuers.length; Access, when configured, comes last.
  for (let i = 0; i < spaces.length; i++) {
    for (let j = i + 1; j < spaces.length; j++) {
      const a = spaces[i]!;
      const b = spaces[j]!;
      if (j < issuers.length && issuers[i]!.issuer === issuers[j]!.issuer) {
        out.push(`auth.external_issuers: ${issuers[i]!.issuer} is configured twice`);
        continue;
      }
      const fa = foldedName(a.prefix);
      const fb = foldedName(b.prefix);
      if (fa.startsWith(fb) || fb.startsWith(fa)) {
        out.push(
          `${a.source} with sub_prefix ${JSON.stringify(a.prefix)} and ${b.source} with sub_prefix ${JSON.stringify(b.prefix)} map into the same principal space: give each a sub_prefix that does not start with the other's`,
        );
      }
    }
  }
  const actorProblem = principalNameProblem(actor, []);
  if (actorProblem) out.push(`actor: ${actorProblem}`);
  const actorSpace = spaceOf(actor, spaces);
  if (actorSpace)
    out.push(
      `actor ${JSON.stringify(actor)} is in the principal space of ${actorSpace.source}, sub_prefix ${JSON.stringify(actorSpace.prefix)}: name the loopback actor outside it`,
    );
  return out;
}
