/**
 * The resolved gateway config: the `GatewayConfig` loadConfig (./load.ts) returns and every part
 * the rest of the gateway reads — upstreams with their headers expanded, identity (external
 * issuers, Cloudflare Access, OAuth), holds, the mode — camelCase, durations in ms, defaults
 * applied. Owns those shapes and the bound on `holds.wait`. Must never: hold parsing or checks
 * (./schema.ts and ./load.ts own them), or a secret's value outside `UpstreamConfig.headers`.
 */
import type { EgressRules } from "./egress-schema.ts";
import type { ToolMapping } from "./mapping-schema.ts";
import type { OAuthConfig } from "./oauth-schema.ts";
import type { PolicyConfig } from "./policy-schema.ts";
import type { Role } from "./roles.ts";

export interface UpstreamConfig {
  name: string;
  url: string;
  description?: string;
  /** True when exposed names carry the `<name>__` prefix (and URIs the `<name>+` scheme prefix). */
  namespaced: boolean;
  /** Resolved headers (secrets expanded). Never log these. */
  headers: Record<string, string>;
  allow: string[];
  deny: string[];
  timeoutMs: number;
  /** `oauth`: the token of the principal's (or team's) connection, in `Authorization` (see `oauth`). */
  credentials: { mode: "brokered" | "per_principal" | "none" | "oauth"; header: string; prefix: string };
  /** Set when the upstream is behind OAuth (`auth: {type: oauth}`). */
  oauth?: UpstreamOAuth;
  egress: EgressRules;
  /** Whether the gateway serves this request on loopback (set per request; loopback egress needs it). */
  onLoopback: boolean;
  /** Set per request when a per-principal credential is missing: every request to the upstream fails with it. */
  credentialProblem?: string;
  /** Set per request with `credentialProblem` when the caller has not connected this OAuth upstream: where a person connects it. */
  connect?: { url: string };
}

/** An OAuth upstream's client settings, resolved (the secret expanded: never log it). */
export interface UpstreamOAuth {
  /** Configured scopes; absent: the protected-resource metadata's `scopes_supported`. */
  scopes?: string[];
  registration: "dynamic" | "metadata_document" | "configured";
  clientId?: string;
  clientSecret?: string;
  connection: "per_principal" | "shared";
}

export interface ExternalIssuer {
  issuer: string;
  jwksUrl: string;
  audience: string;
  rolesClaim?: string;
  defaultRoles: string[];
  teamClaim?: string;
  defaultTeam: string;
  toolsClaim?: string;
  defaultTools: string[];
  subPrefix: string;
}

/** Cloudflare Access for the console (auth.access). */
export interface AccessConfig {
  teamDomain: string;
  audience: string;
  certsUrl: string;
  roles: Role[];
  team: string;
  subPrefix: string;
}

/** The `holds` section, resolved. */
export interface HoldsConfig {
  expiresMs: number;
  /** 0: answer a held call at once; else how long it may stay open for the approver. */
  waitMs: number;
  resolvers: { rules: string[]; roles: Role[]; teams?: string[] }[];
  unresolvable: string[];
  webhooks: { url: string; secret?: string; events: ("created" | "resolved")[] }[];
}

/** Longest `holds.wait`: a call is never held open longer than this. */
export const HOLD_WAIT_MAX_MS = 10 * 60_000;

export interface AuthConfig {
  required: boolean;
  audience?: string;
  /** The origin `portcullis dev` started this gateway on (PORTCULLIS_ORIGIN), when it is a valid http(s) origin. */
  origin?: string;
  issuer?: string;
  maxTokenLifetimeS: number;
  signingKeySecret: string;
  externalIssuers: ExternalIssuer[];
  access?: AccessConfig;
  oauth: OAuthConfig;
}

export type GatewayMode = "enforce" | "advise" | "observe";

export interface GatewayConfig {
  actor: string;
  auth: AuthConfig;
  /** The governance mode (default: observe while no mappings are loaded, else enforce). */
  mode: GatewayMode;
  unclassifiedReads: "block" | "observe";
  policy: PolicyConfig;
  /** Tool mappings by upstream name, then the upstream's own tool name. */
  mappings: Record<string, Record<string, ToolMapping>>;
  /** Whether `portcullis.preview_impact` is offered to agents on /mcp. */
  agentTools: boolean;
  /** Whether the legacy HTTP+SSE endpoint (`GET /sse`, `POST /messages`) is served (`gateway.legacy_sse`). */
  legacySse: boolean;
  allowedHosts: string[];
  allowedOrigins: string[];
  sseRetryMs: number;
  sessionTtlS: number;
  credentialsKeySecret: string;
  holds: HoldsConfig;
  egress: EgressRules;
  upstreams: UpstreamConfig[];
}
