/**
 * The `auth.oauth` section resolved (the gateway as OAuth authorization server for hosted
 * clients): the sign-in sources and the grant template of each, with every problem reported at
 * once — a lifetime above auth.max_token_lifetime or under 60 s, Access sign-in without
 * auth.access, an OIDC issuer that is not an external issuer, OAuth on with no source. Must never:
 * resolve a secret (a client secret stays a secret's name), or return a template wider than the
 * config wrote.
 */
import type { Role } from "./roles.ts";
import { durationMs } from "./duration.ts";

/** What an OAuth-issued grant carries at most (auth.oauth.sign_in.*.template), resolved. */
export interface GrantTemplate {
  tools: string[];
  roles: Role[];
  team: string;
  budget?: { calls: number };
  lifetimeS: number;
}

/** An external OIDC issuer people sign in with (auth.oauth.sign_in.oidc[]). */
export interface OidcSignIn {
  issuer: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  clientId: string;
  /** Name of the Worker secret with the client secret, if the issuer wants one. */
  clientSecret?: string;
  scopes: string[];
  label: string;
  template: GrantTemplate;
}

/** The gateway as OAuth 2.1 authorization server for its own resource (auth.oauth). */
export interface OAuthConfig {
  enabled: boolean;
  accessTokenTtlS: number;
  dynamicRegistration: boolean;
  clientMetadataDocuments: boolean;
  access?: GrantTemplate;
  enrollment?: GrantTemplate;
  oidc: OidcSignIn[];
}

type RawTemplate = { tools: string[]; roles: Role[]; team: string; budget?: { calls: number } | undefined; lifetime: number | string };

/** auth.oauth resolved; every problem (a lifetime above the maximum, a source with nothing behind it) is pushed to `problems`. */
export function oauthOf(
  o: {
    enabled: boolean;
    access_token_ttl: number | string;
    dynamic_registration: boolean;
    client_metadata_documents: boolean;
    sign_in: {
      access?: { template: RawTemplate } | undefined;
      enrollment?: { template: RawTemplate } | undefined;
      oidc: {
        issuer: string;
        authorization_endpoint: string;
        token_endpoint: string;
        client_id: string;
        client_secret?: string | undefined;
        scopes: string[];
        label?: string | undefined;
        template: RawTemplate;
      }[];
    };
  },
  auth: { maxTokenLifetimeS: number; issuers: string[]; access: boolean },
  problems: string[],
): OAuthConfig {
  const max = auth.maxTokenLifetimeS;
  const template = (t: RawTemplate, where: string): GrantTemplate => {
    const lifetimeS = Math.floor(durationMs(t.lifetime, 8 * 3_600_000) / 1000);
    if (lifetimeS > max) problems.push(`${where}.lifetime: at most auth.max_token_lifetime (${max}s), got ${t.lifetime}`);
    if (lifetimeS < 60) problems.push(`${where}.lifetime: at least 60s, got ${t.lifetime}`);
    const out: GrantTemplate = { tools: t.tools, roles: t.roles, team: t.team, lifetimeS };
    if (t.budget) out.budget = { calls: t.budget.calls };
    return out;
  };
  const accessTokenTtlS = Math.floor(durationMs(o.access_token_ttl, 3_600_000) / 1000);
  if (accessTokenTtlS < 60) problems.push(`auth.oauth.access_token_ttl: at least 60s, got ${o.access_token_ttl}`);
  if (accessTokenTtlS > max) problems.push(`auth.oauth.access_token_ttl: at most auth.max_token_lifetime (${max}s), got ${o.access_token_ttl}`);
  const out: OAuthConfig = {
    enabled: o.enabled,
    accessTokenTtlS,
    dynamicRegistration: o.dynamic_registration,
    clientMetadataDocuments: o.client_metadata_documents,
    oidc: o.sign_in.oidc.map((x, i) => {
      const where = `auth.oauth.sign_in.oidc[${i}]`;
      if (!auth.issuers.includes(x.issuer))
        problems.push(`${where}.issuer: ${x.issuer} is not one of auth.external_issuers (its keys and audience verify the sign-in)`);
      const s: OidcSignIn = {
        issuer: x.issuer,
        authorizationEndpoint: x.authorization_endpoint,
        tokenEndpoint: x.token_endpoint,
        clientId: x.client_id,
        scopes: x.scopes.includes("openid") ? x.scopes : ["openid", ...x.scopes],
        label: x.label ?? new URL(x.issuer).host,
        template: template(x.template, `${where}.template`),
      };
      if (x.client_secret) s.clientSecret = x.client_secret;
      return s;
    }),
  };
  if (o.sign_in.access) {
    if (!auth.access) problems.push("auth.oauth.sign_in.access: set auth.access (the Cloudflare Access application whose JWT signs people in)");
    out.access = template(o.sign_in.access.template, "auth.oauth.sign_in.access.template");
  }
  if (o.sign_in.enrollment) out.enrollment = template(o.sign_in.enrollment.template, "auth.oauth.sign_in.enrollment.template");
  if (out.enabled && !out.access && !out.enrollment && out.oidc.length === 0) {
    problems.push("auth.oauth: enabled, but no sign-in source is configured (auth.oauth.sign_in.access, .enrollment or .oidc)");
  }
  return out;
}
