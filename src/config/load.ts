/**
 * Config loading: YAML text → validated, resolved `GatewayConfig` (its shapes: gateway-config.ts).
 * Owns: YAML parsing (a syntax error shows its line and neighbours, problems.ts), reporting every
 * problem of every layer at once — schema (unknown keys with a "did you mean"), headers (a
 * `${NAME}` unset, an inline secret: inline-secret.ts's rule), identity (the principal spaces of
 * the identity providers: principal-spaces.ts's rules), policy and mappings, and, given the
 * caller's CEL compiler (config cannot import governance), the `when` condition of every rule
 * whose text is readable even when other layers failed — `${NAME}` / `${NAME:-fallback}`
 * expansion from Worker secrets/vars, duration parsing and namespace defaults. Must never:
 * include a secret's value in an error message, or return a config that failed any check.
 */
import { parse as parseYaml } from "yaml";
import { type AuthConfig, type ExternalIssuer, type GatewayConfig, type GatewayMode, HOLD_WAIT_MAX_MS, type UpstreamConfig } from "./gateway-config.ts";
import { parseMappings } from "./mapping-schema.ts";
import { parsePolicy, type PolicyConfig } from "./policy-schema.ts";
import { defaultSubPrefix, principalSpaceProblems } from "./principal-spaces.ts";
import { configSchema, type ParsedConfig } from "./schema.ts";
import { inlineSecretProblem } from "./inline-secret.ts";
import { parseOptions, yamlProblem } from "./problems.ts";
import { durationMs } from "./duration.ts";
import { oauthOf } from "./oauth-schema.ts";

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`invalid config:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.problems = problems;
  }
}

/** A `${NAME}` or `${NAME:-fallback}` reference in a header value (the fallback runs to the first `}`). */
const SECRET_REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/**
 * Expands `${NAME}` and `${NAME:-fallback}` from `vars`. The fallback stands in when NAME is
 * unset or empty; a bare `${NAME}` that is unset is a problem reported by name, never by value.
 */
function expand(value: string, vars: Record<string, unknown>, where: string, problems: string[]): string {
  return value.replace(SECRET_REFERENCE, (_, name: string, fallback: string | undefined) => {
    const v = vars[name];
    if (fallback !== undefined) return typeof v === "string" && v !== "" ? v : fallback;
    if (typeof v !== "string") {
      problems.push(`${where}: \${${name}} is not set as a Worker secret or var`);
      return "";
    }
    return v;
  });
}

function formatPath(path: PropertyKey[]): string {
  return (
    path
      .map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`))
      .join("")
      .replace(/^\./, "") || "(root)"
  );
}

function validateConfig(raw: unknown): { ok: true; config: ParsedConfig } | { ok: false; problems: string[] } {
  const res = configSchema.safeParse(raw, parseOptions);
  if (res.success) return { ok: true, config: res.data };
  const problems = res.error.issues.map((i) => `${formatPath(i.path)}: ${i.message}`);
  return { ok: false, problems };
}

/** A CEL compiler (src/governance/policy-cel.ts compileCondition): a problem, or anything else when the condition compiles. */
export type ConditionCompiler = (source: string) => { problem: string } | object;

export interface LoadOptions {
  /** What the text is called in a YAML error (`portcullis.yaml line 5, column 1: …`); default `config`. */
  source?: string;
  /**
   * Compiles policy `when` conditions: when the config has problems, every readable rule's
   * condition is compiled too, so its CEL problems are reported with the rest (on success the
   * caller's policy compile reports them).
   */
  conditions?: ConditionCompiler;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** `policy.rules[i].when: <problem>` for each rule whose `when` is a condition's text (the schema owns every other shape). */
function conditionProblems(policy: unknown, compile: ConditionCompiler): string[] {
  const rules = isRecord(policy) && Array.isArray(policy.rules) ? policy.rules : [];
  const out: string[] = [];
  rules.forEach((r, i) => {
    const when = isRecord(r) ? r.when : undefined;
    if (typeof when !== "string" || when.length === 0 || when.length > 4096) return;
    const c = compile(when);
    if ("problem" in c && typeof c.problem === "string") out.push(`policy.rules[${i}].when: ${c.problem}`);
  });
  return out;
}

/** The inline-secret problems of the upstreams' headers as written (read defensively: the schema may have refused them). */
function inlineSecrets(upstreams: unknown): string[] {
  const out: string[] = [];
  (Array.isArray(upstreams) ? upstreams : []).forEach((u, i) => {
    if (!isRecord(u) || !isRecord(u.headers)) return;
    const name = typeof u.name === "string" ? u.name : "upstream";
    const taken = new Set<string>();
    for (const [k, val] of Object.entries(u.headers)) {
      const inline = typeof val === "string" ? inlineSecretProblem(name, k, val, taken) : null;
      if (inline) out.push(`upstreams[${i}].headers.${k}: ${inline}`);
    }
  });
  return out;
}

export function loadConfig(yamlText: string, vars: Record<string, unknown>, opts: LoadOptions = {}): GatewayConfig {
  let raw: unknown;
  try {
    raw = parseYaml(yamlText, { uniqueKeys: true });
  } catch (e) {
    throw new ConfigError([yamlProblem(e, yamlText, opts.source ?? "config")]);
  }
  raw ??= {};
  // Every layer's problems at once: what failed, plus the CEL of every rule that can be read.
  const refuse = (problems: string[]): never => {
    const policy = isRecord(raw) ? raw.policy : undefined;
    const cel = opts.conditions ? conditionProblems(policy, opts.conditions).filter((p) => !problems.includes(p)) : [];
    throw new ConfigError([...problems, ...cel]);
  };
  const v = validateConfig(raw);
  if (!v.ok) {
    // The policy and mappings sections are checked by their own schemas: readable without the rest.
    const r = isRecord(raw) ? raw : {};
    const sections = governanceOf(
      {
        policy: r.policy,
        mappings: isRecord(r.mappings) ? r.mappings : undefined,
        mappings_dir: typeof r.mappings_dir === "string" ? r.mappings_dir : undefined,
      },
      null,
    );
    refuse([...v.problems, ...inlineSecrets(r.upstreams), ...sections.problems]);
  }
  const c = (v as { config: ParsedConfig }).config;
  const problems: string[] = inlineSecrets(c.upstreams);
  const single = c.upstreams.length === 1;
  const upstreams = c.upstreams.map((u, i): UpstreamConfig => {
    const headers: Record<string, string> = {};
    // A header whose whole value expands empty is not sent (`Authorization: "${TOKEN:-}"` with TOKEN unset).
    for (const [k, val] of Object.entries(u.headers ?? {})) {
      const expanded = expand(val, vars, `upstreams[${i}].headers.${k}`, problems);
      if (expanded !== "") headers[k] = expanded;
    }
    const out: UpstreamConfig = {
      name: u.name,
      url: u.url,
      namespaced: u.namespace ?? !single,
      headers,
      allow: u.allow ?? [],
      deny: u.deny ?? [],
      timeoutMs: durationMs(u.timeout, 60000),
      egress: c.egress,
      onLoopback: false,
      credentials: {
        mode: u.credentials?.mode ?? (Object.keys(headers).length ? "brokered" : "none"),
        header: u.credentials?.header ?? "Authorization",
        prefix: u.credentials?.prefix ?? "Bearer ",
      },
    };
    if (u.description !== undefined) out.description = u.description;
    if (u.auth) {
      const a = u.auth;
      out.credentials = { mode: "oauth", header: "Authorization", prefix: "Bearer " };
      out.oauth = { registration: a.registration ?? (a.client_id !== undefined ? "configured" : "dynamic"), connection: a.connection };
      if (a.scopes) out.oauth.scopes = a.scopes;
      if (a.client_id !== undefined) out.oauth.clientId = a.client_id;
      if (a.client_secret !== undefined) out.oauth.clientSecret = expand(a.client_secret, vars, `upstreams[${i}].auth.client_secret`, problems);
    }
    return out;
  });
  const a = c.auth;
  const issuerProblemsLater: string[] = [];
  const auth: AuthConfig = {
    required: a.required,
    maxTokenLifetimeS: Math.floor(durationMs(a.max_token_lifetime, 86_400_000) / 1000),
    signingKeySecret: a.signing_key_secret,
    externalIssuers: a.external_issuers.map((x) => {
      const e: ExternalIssuer = {
        issuer: x.issuer,
        jwksUrl: x.jwks_url,
        audience: x.audience,
        defaultRoles: x.default_roles,
        defaultTeam: x.default_team,
        defaultTools: x.default_tools,
        subPrefix: x.sub_prefix ?? defaultSubPrefix(x.issuer),
      };
      if (x.roles_claim) e.rolesClaim = x.roles_claim;
      if (x.team_claim) e.teamClaim = x.team_claim;
      if (x.tools_claim) e.toolsClaim = x.tools_claim;
      return e;
    }),
    oauth: { enabled: false, accessTokenTtlS: 3600, dynamicRegistration: true, clientMetadataDocuments: false, oidc: [] },
  };
  if (a.audience) auth.audience = a.audience.replace(/\/+$/, "");
  if (a.access) {
    const domain = a.access.team_domain.replace(/\/+$/, "");
    auth.access = {
      teamDomain: domain,
      audience: a.access.audience,
      certsUrl: a.access.certs_url ?? `${domain}/cdn-cgi/access/certs`,
      roles: a.access.roles,
      team: a.access.team,
      subPrefix: a.access.sub_prefix,
    };
  }
  auth.oauth = oauthOf(
    a.oauth,
    { maxTokenLifetimeS: auth.maxTokenLifetimeS, issuers: auth.externalIssuers.map((e) => e.issuer), access: auth.access !== undefined },
    issuerProblemsLater,
  );
  const waitMs = c.holds.wait === 0 ? 0 : durationMs(c.holds.wait, 0);
  if (waitMs > HOLD_WAIT_MAX_MS) issuerProblemsLater.push(`holds.wait: at most 10m (a call is never held open longer), got ${c.holds.wait}`);
  if (a.issuer) auth.issuer = a.issuer;
  const issuerProblems = [...principalSpaceProblems(auth, c.actor), ...issuerProblemsLater];
  const origin = startedOrigin(vars.PORTCULLIS_ORIGIN);
  if (typeof origin === "string") auth.origin = origin;
  else if (origin) issuerProblems.push(origin.problem);
  const governance = governanceOf(
    c,
    upstreams.map((u) => u.name),
  );
  problems.push(...issuerProblems, ...governance.problems);
  if (problems.length) refuse(problems);
  return {
    actor: c.actor,
    auth,
    mode: governance.mode,
    unclassifiedReads: c.unclassified_reads,
    policy: governance.policy,
    mappings: governance.mappings,
    agentTools: c.gateway.agent_tools,
    legacySse: c.gateway.legacy_sse,
    allowedHosts: c.gateway.allowed_hosts.map((h) => h.toLowerCase()),
    allowedOrigins: c.gateway.allowed_origins,
    sseRetryMs: c.gateway.sse_retry_ms,
    sessionTtlS: c.gateway.session_ttl_s,
    credentialsKeySecret: c.gateway.credentials_key_secret,
    holds: {
      expiresMs: durationMs(c.holds.expires, 4 * 3_600_000),
      waitMs,
      resolvers: c.holds.resolvers.map((r) => ({ rules: r.rules, roles: r.roles, ...(r.teams ? { teams: r.teams } : {}) })),
      unresolvable: c.holds.unresolvable,
      webhooks: c.holds.webhooks.map((w) => ({ url: w.url, events: w.events, ...(w.secret ? { secret: w.secret } : {}) })),
    },
    egress: c.egress,
    upstreams,
  };
}

/** PORTCULLIS_ORIGIN (set by `portcullis dev`): the origin string, nothing when unset, or why it is unusable. */
function startedOrigin(v: unknown): string | { problem: string } | undefined {
  if (v === undefined || v === null || v === "") return undefined;
  let u: URL | null = null;
  try {
    u = typeof v === "string" ? new URL(v) : null;
  } catch {
    u = null;
  }
  if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.origin !== String(v).replace(/\/+$/, "")) {
    return { problem: "PORTCULLIS_ORIGIN must be the origin the gateway listens on, e.g. http://127.0.0.1:8787" };
  }
  return u.origin;
}

/** The policy and mappings sections, checked against the upstreams (`names`; null: unknown, not checked); the mode they imply. */
function governanceOf(c: Pick<ParsedConfig, "policy" | "mappings" | "mappings_dir"> & { mode?: ParsedConfig["mode"] }, names: string[] | null) {
  const problems: string[] = [];
  if (c.mappings_dir !== undefined) {
    problems.push("mappings_dir: the Worker reads no files; start with `portcullis dev --config FILE`, which inlines the directory as `mappings:`");
  }
  if (typeof c.policy === "string") {
    problems.push("policy: a path is inlined by `portcullis dev --config FILE`; the Worker needs the policy itself (rules:, budgets:)");
  }
  const p = typeof c.policy === "string" ? { ok: true as const, policy: { rules: [] } as PolicyConfig } : parsePolicy(c.policy ?? {});
  if (!p.ok) problems.push(...p.problems);
  const m = parseMappings(c.mappings ?? {});
  problems.push(...m.problems);
  const known = names === null ? null : new Set(names);
  if (known) for (const up of Object.keys(m.mappings)) if (!known.has(up)) problems.push(`mappings.${up}: no upstream is named ${up}`);
  const loaded = Object.values(m.mappings).some((tools) => Object.keys(tools).length > 0);
  return {
    problems,
    policy: p.ok ? p.policy : ({ rules: [] } as PolicyConfig),
    mappings: m.mappings,
    mode: (c.mode ?? (loaded ? "enforce" : "observe")) as GatewayMode,
  };
}
