/**
 * `portcullis token mint` (a grant for one gateway: signed locally with the dev key or --key, or
 * through a gateway's POST /v1/grants) and `portcullis token enroll` (a one-time enrollment code
 * for a gateway's OAuth sign-in, through its API), and the `token` group's dispatch (`token revoke`
 * is cli/operator.ts's). Owns these commands' flags, output and exit codes (0 minted, 1 refused,
 * 2 usage, 3 the gateway could not be reached), and which gateway a local grant is for
 * (`mintTarget`). The grant format and its checks are src/identity/tokens.ts's, the name rules
 * src/config/principal.ts's. Must never: print or log an admin token, take one from the command
 * line for `enroll`, or mint a grant the gateway's own name rules would refuse.
 */
import { readFileSync } from "node:fs";
import type { Role } from "../src/config/roles.ts";
import { commandOptions, FLAG, HELP_OPTION, namesOf, type Options, STRING, UsageError, usageError } from "./args.ts";
import { adminRefusal, answerOf, codeOf, exitCodeOf, FetchError, gatewayOf, isObject, messageOf, send, tokenOf, unreachable } from "./gateway-http.ts";
import { devSigningKey } from "./gateway-start.ts";

export const HELP = {
  token: `usage: portcullis token <command> [options]
  mint     a grant: locally with the dev key (or --key), or through a gateway's POST /v1/grants (--url)
  revoke   revoke a grant on a gateway (POST /v1/grants/JTI/revoke)
  enroll   a one-time enrollment code for a gateway's OAuth sign-in (POST /v1/grants/enroll)
Each command takes --help.`,
  "token mint": `usage: portcullis token mint --sub PRINCIPAL [--team T] [--role R,...] [--tools GLOB,...] [--ttl 1h]
                             [--port N | --gateway URL | --aud URL] [--iss ISS] [--key FILE] [--max-lifetime 24h] [--json]
       portcullis token mint --url GATEWAY --sub PRINCIPAL [--team T] [--role R,...] [--tools GLOB,...] [--ttl 1h] [--json]
  prints a grant token (an EdDSA JWT) for one gateway on stdout.
  --sub PRINCIPAL    who the grant is for (e.g. agent:ci, human:alice): lowercase a-z, 0-9 and . _ : @ + / = -,
                     not starting with oidc: or access: (the identity providers' principals)
  --team T           its team (default "default"): its holds, ledger chain and kill-switch scope; lowercase,
                     not starting with "_" (_global is the gateway's own ledger chain)
  --role R,...       roles: agent (default), approver, auditor, operator, admin
  --tools GLOB,...   the tools it may see and call (exposed names, globs; default none), the gateway's own
                     agent tools included: e.g. --tools 'everything__*,portcullis.*' (portcullis.* = the
                     run, rollback-plan and preview tools; or one, e.g. portcullis.plan_rollback; '*' covers all)
  --ttl 1h           lifetime: seconds, or 30m / 1h / 1d (default 1h)
  locally, signed with the dev key (.portcullis/dev-signing-key.json; PORTCULLIS_DEV_KEY_FILE overrides):
  --port N           for the local gateway on port N: iss = aud = http://127.0.0.1:N (the default, 8787)
  --gateway URL      for the gateway at URL (its /mcp endpoint will do): iss = aud = URL
  --aud URL          aud = URL, iss = --iss or the same URL (give one of --port, --gateway, --aud)
  --iss ISS          the issuer, overriding the one above
  --key FILE         sign with this private key (or key set) instead of the dev key
  --max-lifetime D   refuse a --ttl above D (default 1d; a gateway refuses grants above its
                     auth.max_token_lifetime)
  through a gateway, which signs for itself (a grant.minted record on the ledger):
  --url GATEWAY      POST GATEWAY/v1/grants; needs an admin token. Give the token in PORTCULLIS_TOKEN (a
                     --token on the command line is visible to other processes on this machine)
  --json             print {token, jti, exp, iss, aud, sub, team, roles, tools} (through --url: the gateway's answer)
exit: 0 minted, 1 refused (conflicting gateway flags, a reserved or non-canonical --sub or --team, a ttl above the maximum, or the gateway refused), 2 usage`,
  "token enroll": `usage: portcullis token enroll --url GATEWAY --sub PRINCIPAL [--role R,...] [--tools GLOB,...] [--ttl 8h] [--code-ttl 24h] [--json]
  mints a one-time enrollment code on the gateway (POST GATEWAY/v1/grants/enroll; a grant.enrolled
  record on the ledger, never the code) and prints it with the URL to add to an MCP client (Claude,
  ChatGPT, VS Code): on the gateway's OAuth sign-in page the person chooses "Enrollment code", enters
  it, and the client receives a grant for PRINCIPAL. The gateway's enrollment template
  (auth.oauth.sign_in.enrollment.template) bounds what a code may grant; the gateway refuses more.
  --url GATEWAY      the gateway (needs auth.oauth.enabled and an enrollment template)
  --sub PRINCIPAL    who signs in with the code (e.g. human:alice)
  --role R,...       roles of the grant (default agent; each must be in the template's roles)
  --tools GLOB,...   tool globs of the grant (default: the template's; each must be covered by it);
                     the agent tools need portcullis.* (or their names) like any tool
  --ttl 8h           lifetime of the grant, refreshes included: seconds, or 30m / 8h / 1d (default:
                     the template's lifetime; at most it and auth.max_token_lifetime)
  --code-ttl 24h     how long the code itself can be used (default 24h, at most 7d)
  --json             print the gateway's answer {code, enrollment, sub, roles, tools, ttl_seconds,
                     expires, connect_url}
  Needs an admin token, given in PORTCULLIS_TOKEN only (never on the command line: other processes
  on this machine can read it there). The code is printed on stdout only: whoever holds it signs in
  once as PRINCIPAL.
exit: 0 minted, 1 refused by the gateway (its reason on stderr), 2 usage, 3 the gateway could not be
  reached or failed`,
};

const MINT_OPTIONS = {
  sub: STRING,
  team: STRING,
  role: STRING,
  tools: STRING,
  ttl: STRING,
  "max-lifetime": STRING,
  port: STRING,
  gateway: STRING,
  aud: STRING,
  iss: STRING,
  key: STRING,
  url: STRING,
  token: STRING,
  json: FLAG,
  ...HELP_OPTION,
} as const;
const ENROLL_OPTIONS = { url: STRING, sub: STRING, role: STRING, tools: STRING, ttl: STRING, "code-ttl": STRING, json: FLAG, ...HELP_OPTION } as const;

/** The options of `token mint` and `token enroll` (help.test.ts checks their --help names them all). */
export const KNOWN = { "token mint": namesOf(MINT_OPTIONS), "token enroll": namesOf(ENROLL_OPTIONS) };

function seconds(ttl: string, flag = "--ttl"): number {
  const m = /^(\d+)(s|m|h|d)?$/.exec(ttl);
  if (!m || Number(m[1]) === 0) throw new UsageError(`${flag}: use a number of seconds or 30m / 1h / 1d, not ${ttl}`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[(m[2] ?? "s") as "s" | "m" | "h" | "d"];
}

const list = (v: string | undefined): string[] =>
  v === undefined
    ? []
    : v
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean);

function fail(message: string): never {
  console.error(`portcullis: ${message}`);
  process.exit(1);
}

/** The flags that name the gateway a locally minted grant is for. */
export interface MintTargetFlags {
  port?: string;
  gateway?: string;
  aud?: string;
  iss?: string;
}

/**
 * The gateway a locally minted grant is for: `{ iss, aud }` from --port, --gateway or --aud
 * (at most one of them; default the demo's port 8787), then --iss overriding the issuer.
 * Returns an error sentence instead when the flags do not name one gateway.
 */
export function mintTarget(a: MintTargetFlags): { iss: string; aud: string } | string {
  const given = (["aud", "gateway", "port"] as const).filter((k) => a[k] !== undefined);
  if (given.length > 1) {
    return given.includes("aud")
      ? `--aud and --${given.find((k) => k !== "aud")} both name the gateway: use --port N or --gateway URL (issuer and audience both), or --aud URL (with --iss ISS if the issuer differs), not both`
      : "--port and --gateway both name the gateway: use one";
  }
  let url: string;
  if (a.port !== undefined) {
    const n = /^\d+$/.test(a.port) ? Number(a.port) : Number.NaN;
    if (!(n >= 1 && n <= 65535)) return `--port: use a port number (1-65535), not ${a.port}`;
    url = `http://127.0.0.1:${n}`;
  } else if (a.gateway !== undefined) {
    let u: URL | null = null;
    try {
      u = new URL(a.gateway);
    } catch {
      u = null;
    }
    if (!u || (u.protocol !== "http:" && u.protocol !== "https:"))
      return `--gateway: use the gateway's http(s) URL, e.g. http://127.0.0.1:8787, not ${a.gateway}`;
    // The gateway's URL or its MCP endpoint: both name the same gateway.
    url = /^\/mcp\/*$/.test(u.pathname) && !u.search ? u.origin : u.href.replace(/\/+$/, "");
  } else if (a.aud !== undefined) {
    if (a.aud.trim() === "") return "--aud: give the audience (the gateway's URL)";
    url = a.aud.replace(/\/+$/, "");
  } else {
    url = "http://127.0.0.1:8787";
  }
  return { iss: a.iss ?? url, aud: url };
}

async function tokenMint(a: Options<typeof MINT_OPTIONS>): Promise<void> {
  if (typeof a.sub !== "string") throw new UsageError("give --sub PRINCIPAL (who the grant is for)");
  const roles = list(a.role);
  const body = { sub: a.sub, team: typeof a.team === "string" ? a.team : "default", roles: roles.length ? roles : ["agent"], tools: list(a.tools) };
  const ttl = seconds(a.ttl ?? "1h");
  if (typeof a.url === "string") {
    const named = (["aud", "gateway", "port", "iss", "key", "max-lifetime"] as const).filter((k) => a[k] !== undefined);
    if (named.length) fail(`--url mints through that gateway, which signs for itself: drop ${named.map((k) => `--${k}`).join(", ")}`);
    const token = tokenOf(a);
    const res = await fetch(new URL("/v1/grants", a.url), {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ ...body, ttl_seconds: ttl }),
      signal: AbortSignal.timeout(30_000),
    }).catch((e: unknown) => fail(unreachable(new URL("/v1/grants", a.url), e)));
    const j: unknown = await res.json().catch(() => ({}));
    const answer = isObject(j) ? j : {};
    if (!res.ok) {
      console.error(`mint refused (${res.status}): ${answer.error_description ?? answer.error ?? "unknown error"}`);
      process.exit(1);
    }
    console.log(a.json ? JSON.stringify(j, null, 2) : answer.token);
    return;
  }
  const target = mintTarget(a);
  if (typeof target === "string") fail(target);
  // The gateway's one name rule (src/config/principal.ts): no reserved team (`_global` is its own
  // ledger chain), one spelling per principal, none in an identity provider's default space. A
  // gateway minting through --url checks the same, and its configured providers' spaces too.
  const { mintedPrincipalProblem, reservedNameProblem } = await import("../src/config/principal.ts");
  const badSub = mintedPrincipalProblem(body.sub, []);
  if (badSub) fail(`cannot mint: --sub ${JSON.stringify(body.sub)}: ${badSub}`);
  const badTeam = reservedNameProblem("team", body.team);
  if (badTeam) fail(`cannot mint: --team ${JSON.stringify(body.team)}: ${badTeam}`);
  const { parseKeySet } = await import("../src/identity/keys.ts");
  const { mintGrant } = await import("../src/identity/tokens.ts");
  let keyText: string;
  if (typeof a.key === "string") {
    try {
      keyText = readFileSync(a.key, "utf8");
    } catch (e) {
      fail(`--key: cannot read ${a.key} (${codeOf(e)})`);
    }
  } else keyText = await devSigningKey();
  const maxLifetimeSeconds = a["max-lifetime"] ? seconds(a["max-lifetime"], "--max-lifetime") : 86400;
  let minted: { token: string; jti: string; exp: number };
  try {
    // The role names go as given: mintGrant checks every claim and refuses an unknown role with its reason.
    const claims = { ...target, ...body, roles: body.roles as Role[], ttlSeconds: ttl };
    minted = await mintGrant(await parseKeySet(keyText), claims, { maxLifetimeSeconds });
  } catch (e) {
    fail(`cannot mint: ${messageOf(e)}`);
  }
  console.log(a.json ? JSON.stringify({ token: minted.token, jti: minted.jti, exp: minted.exp, ...target, ...body }, null, 2) : minted.token);
}

/** The shape of an enrollment code (src/identity/enrollment.ts ENROLLMENT_CODE). */
const ENROLLMENT_CODE = /^pce_[A-Za-z0-9_-]{43}$/;

const joined = (v: unknown): string => (Array.isArray(v) ? v.join(", ") : "");

/**
 * `token enroll`: an enrollment code minted by the gateway at --url (POST /v1/grants/enroll), as
 * an admin whose token is in PORTCULLIS_TOKEN (no --token: never on a command line). Prints the
 * code and how to use it, or the gateway's answer with --json; never prints the token.
 */
async function tokenEnroll(a: Options<typeof ENROLL_OPTIONS>): Promise<number> {
  if (typeof a.sub !== "string") throw new UsageError("give --sub PRINCIPAL (who signs in with the code)");
  const base = gatewayOf(a.url);
  const token = process.env.PORTCULLIS_TOKEN;
  if (!token) throw new UsageError("an admin token is needed: give it in PORTCULLIS_TOKEN (never on the command line)");
  const body: Record<string, unknown> = { sub: a.sub };
  if (a.role !== undefined) {
    const roles = list(a.role);
    if (roles.length === 0) throw new UsageError("--role: give one or more roles, e.g. --role agent");
    body.roles = roles;
  }
  if (a.tools !== undefined) body.tools = list(a.tools);
  if (a.ttl !== undefined) body.ttl_seconds = seconds(a.ttl);
  if (a["code-ttl"] !== undefined) body.code_ttl_seconds = seconds(a["code-ttl"], "--code-ttl");
  const { res, where } = await send(base, "POST", "/v1/grants/enroll", token, { body, timeoutMs: 30_000, redirect: "manual" });
  const answer = await answerOf(res);
  if (!res.ok) throw adminRefusal(where, res.status, answer, "enrolling");
  const j = answer.json;
  if (!isObject(j) || typeof j.code !== "string" || !ENROLLMENT_CODE.test(j.code) || typeof j.connect_url !== "string" || typeof j.expires !== "number")
    throw new FetchError(`${where}: the answer is not an enrollment code`);
  if (a.json) {
    console.log(JSON.stringify(j, null, 2));
    return 0;
  }
  const until = new Date(j.expires * 1000).toISOString();
  console.log(`Enrollment code for ${j.sub} (roles ${joined(j.roles)}; tools ${joined(j.tools) || "none"}; grant lifetime ${j.ttl_seconds} s):

  ${j.code}

Add ${j.connect_url} to your MCP client as a connector (Claude: custom connector URL; ChatGPT: developer-mode connector; VS Code: mcp.json type http). When its sign-in page opens, choose "Enrollment code" and enter: ${j.code}
The code works once, until ${until}.`);
  return 0;
}

const isHelp = (w: string) => w === "--help" || w === "-h" || w === "help";

/** `portcullis token <mint|revoke|enroll> …` (`argv` after `token`): runs it and exits with its code (mint ends with 0 on success). */
export async function tokenCommand(argv: string[]): Promise<void> {
  const [sub, ...more] = argv;
  if (sub !== undefined && isHelp(sub)) {
    console.log(HELP.token);
    return;
  }
  if (sub === "revoke") {
    const { operatorCommand } = await import("./operator.ts");
    process.exit(await operatorCommand("token revoke", more));
  }
  if (sub === "enroll") {
    const a = commandOptions("token enroll", more, ENROLL_OPTIONS, HELP["token enroll"]);
    process.exit(await exitCodeOf("portcullis token enroll", () => tokenEnroll(a)));
  }
  if (sub === "mint") {
    const a = commandOptions("token mint", more, MINT_OPTIONS, HELP["token mint"]);
    try {
      await tokenMint(a);
    } catch (e) {
      if (e instanceof UsageError) usageError("token mint", e.message);
      throw e;
    }
    return;
  }
  console.error(`${sub === undefined ? "portcullis token: give a command" : `portcullis token: unknown command ${sub}`}\n${HELP.token}`);
  process.exit(2);
}
