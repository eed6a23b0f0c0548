/**
 * The `portcullis.yaml` schema (zod). Owns: field names, types, defaults and the rules that
 * relate fields to each other (namespacing, unique names); every team a config names (an issuer's
 * default team, Access's, an OAuth template's, a resolver's) passes the one team-name rule of
 * principal.ts. Must never: accept an unknown field, or resolve secrets (that is load.ts's job,
 * after validation).
 */
import { z } from "zod";
import { egressSchema } from "./egress-schema.ts";
import { reservedNameProblem } from "./principal.ts";

/** Upstream names become tool-name prefixes (`<name>__<tool>`) and URI scheme prefixes, so no `_`. */
const UPSTREAM_NAME = /^[a-z][a-z0-9-]{0,30}$/;

/** A team name: not one the gateway reserves (`_global`, `_…`, object name kinds), in its one lowercase form. */
const teamName = z.string().superRefine((v, ctx) => {
  const problem = reservedNameProblem("team", v);
  if (problem) ctx.addIssue({ code: "custom", message: problem });
});

const duration = z.union([
  z.number().int().positive(),
  z.string().regex(/^\d+(ms|s|m|h)$/, 'use a number of milliseconds or a string such as "500ms", "30s", "2m", "24h"'),
]);

/** An upstream behind OAuth: what to ask for, how the gateway is its client, whose connection it is. */
const upstreamOAuthSchema = z.strictObject({
  type: z.literal("oauth"),
  /** The scopes to ask for; default: the protected-resource metadata's `scopes_supported`, else none. */
  scopes: z
    .array(z.string().regex(/^[\x21\x23-\x5b\x5d-\x7e]+$/, "a scope is printable ASCII without spaces, quotes or backslashes"))
    .max(50)
    .optional(),
  /**
   * How the gateway becomes a client of the upstream's authorization server: `dynamic` (RFC 7591
   * registration, the default), `metadata_document` (the gateway's client ID metadata document at
   * /oauth/upstream-client.json is its client_id), or `configured` (`client_id`, and
   * `client_secret` by `${NAME}` for a confidential client).
   */
  registration: z.enum(["dynamic", "metadata_document", "configured"]).optional(),
  client_id: z.string().min(1).max(500).optional(),
  /** A `${NAME}` reference to a Worker secret; never the secret itself. */
  client_secret: z.string().min(1).optional(),
  /** Whose connection it is: each principal's own (`per_principal`, the default) or one per team, connected by an operator (`shared`). */
  connection: z.enum(["per_principal", "shared"]).default("per_principal"),
});

const upstreamSchema = z.strictObject({
  name: z.string().regex(UPSTREAM_NAME, "must match ^[a-z][a-z0-9-]{0,30}$ (it prefixes tool names and URIs)"),
  url: z.string().refine((u) => {
    try {
      const p = new URL(u);
      return p.protocol === "http:" || p.protocol === "https:";
    } catch {
      return false;
    }
  }, "must be an absolute http:// or https:// URL (stdio upstreams are not supported)"),
  description: z.string().max(500).optional(),
  namespace: z.boolean().optional(),
  headers: z.record(z.string().regex(/^[A-Za-z0-9-]+$/, "header names are letters, digits and -"), z.string()).optional(),
  /**
   * How the upstream is authenticated: `brokered` (the `headers` above, `${SECRET}` from Worker
   * secrets), `per_principal` (the token each principal registered, in `header`), or `none`.
   * Default: brokered when headers are set, else none.
   */
  credentials: z
    .strictObject({
      mode: z.enum(["brokered", "per_principal", "none"]),
      header: z
        .string()
        .regex(/^[A-Za-z0-9-]+$/)
        .default("Authorization"),
      prefix: z.string().default("Bearer "),
    })
    .optional(),
  /**
   * `{type: oauth}`: the upstream signs people in with OAuth (docs/configuration.md "OAuth
   * upstreams"); the gateway is its OAuth client and keeps each connection's tokens.
   */
  auth: upstreamOAuthSchema.optional(),
  allow: z.array(z.string().min(1)).optional(),
  deny: z.array(z.string().min(1)).optional(),
  timeout: duration.optional(),
});

import { ROLES } from "./roles.ts";

const externalIssuerSchema = z.strictObject({
  /** The `iss` value tokens from this issuer carry. */
  issuer: z.string().url(),
  /** Where its signing keys are published; fetched under the egress rules and cached. */
  jwks_url: z.string().url(),
  /** The `aud` its tokens must carry for this gateway. */
  audience: z.string().min(1),
  /** Claim holding roles (array or space-separated string); absent → default_roles. */
  roles_claim: z.string().min(1).optional(),
  default_roles: z.array(z.enum(ROLES)).default(["agent"]),
  /** Claim holding the team; absent → default_team. */
  team_claim: z.string().min(1).optional(),
  default_team: teamName.default("default"),
  /** Claim holding tool globs; absent → default_tools. */
  tools_claim: z.string().min(1).optional(),
  default_tools: z.array(z.string().min(1)).default([]),
  /**
   * Principal = prefix + sub (the sub as the issuer wrote it: OIDC subs are case-sensitive). Default:
   * `oidc:<issuer host and path>:`, so two issuers never share a principal space; a config in which
   * two prefixes overlap (one starts with another, case folded), this one's and auth.access's
   * included, is refused at load.
   */
  sub_prefix: z.string().min(1).optional(),
});

const secretName = z.string().regex(/^[A-Z_][A-Z0-9_]*$/, "a Worker secret name: A-Z, 0-9 and _");

/** Cloudflare Access in front of the console: its JWT (`Cf-Access-Jwt-Assertion`) signs an approver in. */
const accessSchema = z.strictObject({
  /** The Access team domain, e.g. https://acme.cloudflareaccess.com (its keys: <team_domain>/cdn-cgi/access/certs). */
  team_domain: z.string().url(),
  /** The Access application's AUD tag: the `aud` its JWTs must carry. */
  audience: z.string().min(1),
  /** Where the keys are fetched (default <team_domain>/cdn-cgi/access/certs), under the egress rules. */
  certs_url: z.string().url().optional(),
  /** Roles and team an Access-signed-in person gets (the JWT's email, lowercased, becomes the principal `<sub_prefix><email>`). */
  roles: z.array(z.enum(ROLES)).default(["approver"]),
  team: teamName.default("default"),
  sub_prefix: z.string().min(1).default("access:"),
});

/** Held calls (`require_approval`): how long a hold lives, how long a call may wait, who may resolve what, who is told. */
const holdsSchema = z.strictObject({
  /** How long a hold lives: pending until then, and an approved or consumed hold replays its answer until then. */
  expires: duration.default("4h"),
  /** How long a held call stays open waiting for the approver (0: answer at once with the hold id); at most 10m. */
  wait: z.union([z.literal(0), duration]).default(0),
  /**
   * Who may resolve a hold: an approver matching an entry whose `rules` (globs over rule ids;
   * `(mapping)` for holds a mapping's `approval` asked for) match the hold's rule, holding one of
   * `roles`, in one of `teams` (default: the hold's own team; `*`: any team). Admins resolve any resolvable hold.
   */
  resolvers: z
    .array(
      z.strictObject({
        rules: z.array(z.string().min(1)).default(["*"]),
        roles: z.array(z.enum(ROLES)).default(["approver"]),
        teams: z.array(z.union([z.literal("*"), teamName])).optional(),
      }),
    )
    .default([{ rules: ["*"], roles: ["approver"] }]),
  /** Rule ids (globs) whose holds nobody may resolve: such calls wait out their expiry and are denied. */
  unresolvable: z.array(z.string().min(1)).default([]),
  /** Told when a hold is created and resolved: Slack-compatible JSON, body signed with HMAC-SHA256 of the named secret. */
  webhooks: z
    .array(
      z.strictObject({
        url: z.string().url(),
        /** Worker secret holding the HMAC key; the signature goes in `X-Portcullis-Signature: sha256=<hex>`. */
        secret: secretName.optional(),
        events: z.array(z.enum(["created", "resolved"])).default(["created", "resolved"]),
      }),
    )
    .default([]),
});

/** What an OAuth-issued grant may carry at most: one template per sign-in source (auth.oauth.sign_in). */
const grantTemplateSchema = z.strictObject({
  /** Tool globs the grant carries (an enrollment code's own globs are kept only where these cover them). */
  tools: z.array(z.string().min(1).max(200)).max(200).default([]),
  roles: z.array(z.enum(ROLES)).min(1).default(["agent"]),
  team: teamName.default("default"),
  budget: z.strictObject({ calls: z.number().int().positive() }).optional(),
  /** How long the grant lives, refreshes included (at most auth.max_token_lifetime). */
  lifetime: duration.default("8h"),
});

/** An external OIDC issuer people sign in with (authorization-code redirect, PKCE); its tokens are checked as under external_issuers. */
const oidcSignInSchema = z.strictObject({
  /** Must be one of auth.external_issuers (its keys and audience verify the id_token). */
  issuer: z.string().url(),
  authorization_endpoint: z.string().url(),
  token_endpoint: z.string().url(),
  client_id: z.string().min(1),
  /** Worker secret holding the client secret, when the issuer wants one (client_secret_post). */
  client_secret: secretName.optional(),
  scopes: z.array(z.string().min(1)).default(["openid"]),
  /** Shown on the sign-in page. */
  label: z.string().min(1).max(100).optional(),
  template: grantTemplateSchema,
});

/**
 * Portcullis as the OAuth 2.1 authorization server for its own resource (RFC 8414, RFC 7591,
 * client ID metadata documents, PKCE S256, RFC 8707, RFC 9207), so hosted clients (Claude,
 * ChatGPT, VS Code) can connect from the gateway URL alone. Tokens it issues are grants.
 */
const oauthSchema = z.strictObject({
  enabled: z.boolean().default(false),
  /** Lifetime of each access token (a grant); the grant's template lifetime bounds it. */
  access_token_ttl: duration.default("1h"),
  /** RFC 7591 dynamic client registration at /oauth/register. */
  dynamic_registration: z.boolean().default(true),
  /** Client ID metadata documents (an https URL as client_id), fetched only where the egress rules allow. */
  client_metadata_documents: z.boolean().default(false),
  /** Who may sign in, and the grant each source's people receive. */
  sign_in: z
    .strictObject({
      /** A Cloudflare Access JWT on the request (auth.access must be set). */
      access: z.strictObject({ template: grantTemplateSchema }).optional(),
      /** A one-time enrollment code an admin minted (`portcullis token enroll`). */
      enrollment: z.strictObject({ template: grantTemplateSchema }).optional(),
      oidc: z.array(oidcSignInSchema).default([]),
    })
    .prefault({}),
});

const authSchema = z.strictObject({
  /** Require a grant token on every request. Unauthenticated mode is refused off loopback. */
  required: z.boolean().default(false),
  /**
   * The gateway's canonical URL: the `aud` its grants carry and the resource its metadata names.
   * Unset, a gateway started by `portcullis dev` on loopback uses the origin it was started on
   * (PORTCULLIS_ORIGIN); anywhere else it refuses to serve until this is set. Never the request's Host.
   */
  audience: z.string().url().optional(),
  /** The `iss` of grants this gateway mints (default: the audience). */
  issuer: z.string().min(1).optional(),
  /** Longest grant lifetime accepted or minted. */
  max_token_lifetime: duration.default("24h"),
  /** Worker secret holding the signing key (a private Ed25519 JWK or a key set). */
  signing_key_secret: z
    .string()
    .regex(/^[A-Z_][A-Z0-9_]*$/)
    .default("PORTCULLIS_SIGNING_KEY"),
  external_issuers: z.array(externalIssuerSchema).default([]),
  /** Cloudflare Access for the console (optional): an Access JWT signs a person in without pasting a grant. */
  access: accessSchema.optional(),
  oauth: oauthSchema.prefault({}),
});

export const configSchema = z
  .strictObject({
    /** Principal used for unauthenticated clients while the gateway listens on loopback. */
    actor: z.string().min(1).default("local:actor"),
    gateway: z
      .strictObject({
        /** Extra Host values accepted besides loopback (e.g. your workers.dev or custom hostname). */
        allowed_hosts: z.array(z.string().min(1)).default([]),
        /** Origins accepted when a browser-style Origin header is present. */
        allowed_origins: z.array(z.string().min(1)).default([]),
        /** SSE `retry:` hint, in milliseconds, sent with every priming event. */
        sse_retry_ms: z.number().int().min(0).max(60000).default(1000),
        /** How long an idle legacy session lives, in seconds. */
        session_ttl_s: z
          .number()
          .int()
          .min(60)
          .max(7 * 86400)
          .default(86400),
        /** The gateway's own agent tools on /mcp (`portcullis.preview_impact`); false hides them. */
        agent_tools: z.boolean().default(true),
        /**
         * The deprecated HTTP+SSE transport (MCP 2024-11-05) for clients that speak nothing else:
         * `GET /sse` opens the stream, its `endpoint` event names `/messages?sessionId=…`, each POST
         * there gets 202 and its answer comes back on the stream (src/front/http-sse.ts). The same
         * gate and governance as /mcp. Off (the default): both paths are 404 like any unknown route.
         */
        legacy_sse: z.boolean().default(false),
        /** Worker secret holding the AES-256 key (base64) that seals per-principal upstream credentials. */
        credentials_key_secret: z
          .string()
          .regex(/^[A-Z_][A-Z0-9_]*$/)
          .default("PORTCULLIS_CREDENTIALS_KEY"),
      })
      .prefault({}),
    auth: authSchema.prefault({}),
    /** enforce | advise | observe. Default: observe while no mappings are loaded, else enforce. */
    mode: z.enum(["enforce", "advise", "observe"]).optional(),
    /** An unmapped tool: blocked in enforce (`block`), or run when its annotations say read-only (`observe`). */
    unclassified_reads: z.enum(["block", "observe"]).default("block"),
    /** The policy (src/config/policy-schema.ts), inline; `portcullis dev` inlines `policy: <path>`. */
    policy: z.unknown().optional(),
    /** Mappings by upstream (src/config/mapping-schema.ts), inline; `portcullis dev` inlines `mappings_dir`. */
    mappings: z.record(z.string(), z.unknown()).optional(),
    /** A directory of `<upstream>.yaml` mappings: the CLI inlines it; the Worker never reads files. */
    mappings_dir: z.string().optional(),
    holds: holdsSchema.prefault({}),
    /** Where the gateway may connect: every upstream URL and every outbound fetch is checked. */
    egress: egressSchema.prefault({}),
    upstreams: z.array(upstreamSchema).min(1, "at least one upstream is required"),
  })
  .superRefine((cfg, ctx) => {
    const seen = new Map<string, number>();
    cfg.upstreams.forEach((u, i) => {
      const prev = seen.get(u.name);
      if (prev !== undefined)
        ctx.addIssue({ code: "custom", path: ["upstreams", i, "name"], message: `duplicate upstream name "${u.name}" (also upstreams[${prev}])` });
      else seen.set(u.name, i);
      if (u.credentials?.mode === "none" && Object.values(u.headers ?? {}).some((v) => /\$\{/.test(v))) {
        ctx.addIssue({
          code: "custom",
          path: ["upstreams", i, "credentials", "mode"],
          // biome-ignore lint/suspicious/noTemplateCurlyInString: the message names the config's ${...} syntax literally
          message: "mode none cannot send secrets: drop the ${...} headers or use mode brokered",
        });
      }
      if (u.auth) oauthUpstreamIssues(u, i, ctx);
      const bare = cfg.upstreams.findIndex((o) => o.namespace === false);
      if (u.namespace === false && bare !== i) {
        ctx.addIssue({
          code: "custom",
          path: ["upstreams", i, "namespace"],
          message: `namespace: false is already on upstreams[${bare}] (${cfg.upstreams[bare]!.name}): one upstream at most keeps its own names, the others are prefixed NAME__ so no two tools share a name`,
        });
      }
    });
  });

export type ParsedConfig = z.output<typeof configSchema>;

/** The combinations of an OAuth upstream's keys that cannot work, each named where it is written. */
function oauthUpstreamIssues(u: z.output<typeof upstreamSchema>, i: number, ctx: z.RefinementCtx): void {
  const a = u.auth!;
  const at = (key: string, message: string) => ctx.addIssue({ code: "custom", path: ["upstreams", i, "auth", key], message });
  const registration = a.registration ?? (a.client_id !== undefined ? "configured" : "dynamic");
  if (registration === "configured" && a.client_id === undefined)
    at("client_id", "registration configured needs the client_id the authorization server gave the gateway");
  if (registration !== "configured" && (a.client_id !== undefined || a.client_secret !== undefined))
    at("registration", `client_id and client_secret are for registration configured, not ${registration}`);
  if (a.client_secret !== undefined && !/^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/.test(a.client_secret))
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the message names the config's ${...} syntax literally
    at("client_secret", "client_secret must be a ${NAME} reference to a Worker secret, never the secret itself");
  if (u.credentials !== undefined)
    ctx.addIssue({
      code: "custom",
      path: ["upstreams", i, "credentials"],
      message: "an upstream with auth: {type: oauth} takes its credential from the connection; drop credentials",
    });
  if (Object.keys(u.headers ?? {}).some((h) => h.toLowerCase() === "authorization"))
    ctx.addIssue({
      code: "custom",
      path: ["upstreams", i, "headers"],
      message: "an OAuth upstream's Authorization header is the connection's token; drop headers.Authorization",
    });
}
