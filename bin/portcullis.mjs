#!/usr/bin/env node
/**
 * The `portcullis` command. Owns argument parsing and process orchestration for local use:
 * `dev --config FILE [--port N]` (a local gateway on workerd via wrangler), `start` (the demo:
 * a bundled upstream plus a governed gateway in front of it; once up it prints the console URL, an
 * approver grant to paste there — on the terminal only — and a try-it recipe), `demo-upstream` (that upstream alone, pinned
 * to 127.0.0.1), `check --config FILE` (validate a config), `token mint` (a grant for one gateway),
 * `token enroll` (a one-time enrollment code for a gateway's OAuth sign-in, through its API);
 * `classify` and `suggest-manifest` are bin/governance-cli.mjs's, as is the classification banner
 * `dev` and `start` print once their gateway is up; `token revoke`, `keys generate | rotate`,
 * `check --self-probe` and `doctor --live` are bin/operator-cli.mjs's (given `startGateway` and
 * `validate` from here), and `add` is bin/add-cli.mjs's (given `validate`). Owns the help
 * conventions every command follows (see USAGE): `--help` / `-h` prints the usage on stdout, exit
 * 0; an unknown or missing option exits 2 pointing at the command's --help.
 * Must never: print secret values (config errors name variables, not values), put one on a
 * command line (a gateway gets its vars through a private env file, see `startGateway`), or let
 * the demo upstream listen beyond loopback.
 */
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseOptions, UsageError } from "./cli-args.mjs";
import { inlineConfigFiles } from "./config-files.mjs";
import { adminRefusal, answerOf, exitCodeOf, FetchError, gatewayOf, Refused, send, tokenOf } from "./gateway-http.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => resolve(root, "node_modules", ".bin", name);

/**
 * The usage of every command, printed by `portcullis --help` (stdout) and by `portcullis` alone
 * (stderr). Each command's own `--help` / `-h` prints its full usage.
 */
export const USAGE = `usage: portcullis <command> [options]     (portcullis <command> --help, or -h, for each one's options)
  portcullis start [--port N] [--upstream-port N] [--persist-to DIR]
                        demo upstream (127.0.0.1 only) + gateway on http://127.0.0.1:8787/mcp
  portcullis demo-upstream [--port N]      the bundled demo upstream alone, on 127.0.0.1:3001 only
  portcullis dev --config FILE [--port N]  local gateway with that config (prints the classification
                        banner once it is up, as start does)
  portcullis check --config FILE [--json]  validate a config and report every problem
  portcullis check --self-probe [--json]   fail-closed self-probe: a local gateway whose ledger cannot be
                        written must refuse a real tools/call before it reaches the upstream: exit 0 PASS,
                        1 FAIL (portcullis check --help)
  portcullis doctor --config FILE [--local|--deployed] [--json]
                        check the config statically, egress rules included: exit 1 naming each
                        refused upstream and its reason (all at once), 0 when sound
  portcullis doctor --config FILE --live [--timeout 5s] [--json]
                        also contact each upstream (tools/list) and report its reachability: exit 1
                        when one is unreachable (portcullis doctor --help)
  portcullis doctor --clients [--client C] [--path FILE]  servers a client reaches directly (ungoverned)
                        and a missing gateway entry: exit 1 when found (portcullis doctor --clients --help)
  portcullis import --client claude-code|claude-desktop|cursor|vscode [--path FILE] [--config FILE] [--dry-run]
                        a client's HTTP servers become upstreams (secrets by reference), the client file is
                        backed up once and points at the gateway alone (portcullis import --help)
  portcullis restore --client C [--path FILE]  put the client file back from that backup
  portcullis add --config FILE --name NAME --url URL [--header "K: V"]... [--gateway URL] [--dry-run]
                        register an upstream in FILE (comments kept, validated whole, inline secrets
                        refused) and, with --gateway, hot-add it to that gateway (portcullis add --help)
  portcullis token mint --sub PRINCIPAL [--team T] [--role R,...] [--tools GLOB,...] [--ttl 1h]
                        [--port N | --gateway URL | --aud URL] [--iss ISS] [--key FILE]
                        locally, with the dev key, for one gateway:
                          --port N       the local gateway on port N: iss = aud = http://127.0.0.1:N
                          --gateway URL  the gateway at URL (its /mcp endpoint will do): iss = aud = URL
                          --aud URL      aud = URL, iss = --iss or the same URL
                        default: --port 8787; --iss overrides the issuer in every case;
                        the dev key is .portcullis/dev-signing-key.json (PORTCULLIS_DEV_KEY_FILE overrides)
  portcullis token mint --url GATEWAY --sub ...  through POST /v1/grants (admin token in PORTCULLIS_TOKEN)
  portcullis token revoke JTI --url GATEWAY [--exp SECONDS] [--json]
                        revoke a grant (admin token in PORTCULLIS_TOKEN; portcullis token revoke --help)
  portcullis token enroll --url GATEWAY --sub PRINCIPAL [--role R,...] [--tools GLOB,...] [--ttl 8h] [--code-ttl 24h] [--json]
                        a one-time enrollment code with which a person signs in a hosted MCP client
                        (Claude, ChatGPT, VS Code) over OAuth; prints the code and the URL to use
                        (admin token in PORTCULLIS_TOKEN; portcullis token enroll --help)
  portcullis keys generate [--out FILE] [--kid KID] [--stdout] [--json]
                        a new Ed25519 signing key in FILE (mode 0600, never overwritten), its public
                        JWKS and the wrangler secret put line (portcullis keys --help)
  portcullis keys rotate --key FILE [--out FILE] [--kid KID] [--json]
                        a key set: a new key signs, the old ones keep verifying
  portcullis ledger verify|export|trace ...  the ledger: verify an export offline, export or trace
                        from a gateway (portcullis ledger --help)
  portcullis classify --config FILE [--json] [--live]
                        read every upstream's tools/list and print the classification banner
                        (OK / NOTE / WARN / BLOCK per tool, with totals); exit 1 on a BLOCK or an
                        unreachable upstream (portcullis classify --help)
  portcullis suggest-manifest --config FILE --upstream NAME [--out FILE] [--force]
                        draft a mappings/<upstream>.yaml from its tools/list, to review before it
                        goes into mappings_dir; never overwrites (portcullis suggest-manifest --help)
  portcullis holds list|show|approve|reject ... --url GATEWAY
                        held calls: list (pending by default), show one, approve or reject it
                        (portcullis holds --help); the token in PORTCULLIS_TOKEN
  portcullis runs list|show|rollback ... --url GATEWAY
                        runs (a session or Portcullis-Run-Id): list, show steps and the rollback plan,
                        roll back newest first (a dry run unless --confirm; portcullis runs --help)
  portcullis halt --scope S [--target T] --reason R --url GATEWAY
  portcullis resume --scope S [--target T] --reason R --url GATEWAY
  portcullis status --url GATEWAY [--json]
                        the kill switch: scopes global | team | upstream | tool | principal | grant
  portcullis reload --config FILE --url GATEWAY [--json]
                        hot-reload upstreams, mappings and policy into a running gateway (validated whole;
                        a refused config keeps the old one serving; portcullis reload --help)
Every command answers --help (or -h) with its usage on stdout (exit 0). An unknown option, a missing
required one or an unexpected argument exits 2, naming it and pointing at the command's --help.`;

/** The usage of the commands this file runs itself (the others are their modules'). */
export const HELP = {
  start: `usage: portcullis start [--port N] [--upstream-port N] [--persist-to DIR]
  the demo: the bundled upstream (server-everything, 127.0.0.1 only) and a governed gateway in front of
  it (portcullis.yaml: mode enforce, mappings/everything.yaml, the demo policy). Once it is up it prints
  the classification banner, the console URL, an approver grant to paste there (this terminal only)
  and a three-step try-it recipe. Ctrl-C stops both.
  --port N           the gateway's port on 127.0.0.1 (default 8787)
  --upstream-port N  the demo upstream's port on 127.0.0.1 (default 3001)
  --persist-to DIR   keep the gateway's state (ledger, holds, sessions) in DIR across restarts
exit: the gateway's exit code once it stops; 2 usage`,
  "demo-upstream": `usage: portcullis demo-upstream [--port N]
  the bundled demo upstream (server-everything, Streamable HTTP) alone, listening on 127.0.0.1 only
  --port N  its port (default 3001); its endpoint is http://127.0.0.1:N/mcp
exit: 2 usage; otherwise it runs until stopped`,
  dev: `usage: portcullis dev --config FILE [--port N] [--force]
  a local gateway (wrangler dev on workerd, local D1 and Durable Objects) with that config, on
  http://127.0.0.1:N/mcp; policy and mappings_dir are relative to FILE; every \${NAME} the config
  names goes to the gateway from this environment. Before it starts, the policy is checked against
  the upstreams' real tool lists (as doctor --live does): in enforce, a deny or require_approval rule,
  or an obligation, that matches no tool stops it (exit 1, each rule named with the nearest real
  names); other rules that match nothing are warnings. Prints the classification banner once it is up.
  --config FILE  the portcullis.yaml (validated first: every problem printed, exit 1)
  --port N       its port on 127.0.0.1 (default 8787)
  --force        start although a rule matches no real tool
exit: 1 an invalid config or a rule that matches nothing in enforce, 2 usage; otherwise the gateway's
exit code once it stops`,
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

const BOOLEAN = new Set(["help", "json", "local", "deployed"]);
/** The options each command this file runs accepts (help.test.ts checks its --help names them all). */
export const KNOWN = {
  start: ["port", "upstream-port", "persist-to", "help"],
  "demo-upstream": ["port", "help"],
  dev: ["config", "port", "force", "help"],
  check: ["config", "json", "help"],
  doctor: ["config", "local", "deployed", "json", "help"],
  "token mint": ["sub", "team", "role", "tools", "ttl", "max-lifetime", "port", "gateway", "aud", "iss", "key", "url", "token", "json", "help"],
  "token enroll": ["url", "sub", "role", "tools", "ttl", "code-ttl", "json", "help"],
};

/** `--help`, `-h` or `help` as the only word after a command (group): print its usage. */
const isHelp = (w) => w === "--help" || w === "-h" || w === "help";

/** A usage mistake in a command this file runs: its message and the pointer to --help on stderr, exit 2. */
function usageError(name, message) {
  console.error(`portcullis ${name}: ${message}\n(portcullis ${name} --help for the options)`);
  process.exit(2);
}

/** `argv` parsed for command `name` (KNOWN); --help prints its usage and exits 0; a usage mistake exits 2. */
function options(name, argv) {
  let a;
  try {
    a = parseOptions(argv, { known: KNOWN[name], boolean: BOOLEAN, positionals: false });
  } catch (e) {
    if (e instanceof UsageError) usageError(name, e.message);
    throw e;
  }
  if (a.help) {
    console.log(HELP[name] ?? USAGE);
    process.exit(0);
  }
  return a;
}

/** `--port`'s value as a port number (1-65535), or `fallback` when not given; a usage error otherwise. */
function portOf(name, v, fallback, flag = "--port") {
  if (v === undefined) return fallback;
  const n = /^\d+$/.test(v) ? Number(v) : Number.NaN;
  if (!(n >= 1 && n <= 65535)) usageError(name, `${flag}: use a port number (1-65535), not ${v}`);
  return n;
}

function usage(code = 1) {
  console.error(USAGE);
  process.exit(code);
}

const DEV_KEY = resolve(root, ".portcullis", "dev-signing-key.json");

/**
 * The local dev signing key (a private Ed25519 JWK), created on first use. Never for production.
 * PORTCULLIS_DEV_KEY_FILE names another file (tests use a temporary one).
 */
export async function devSigningKey(file = process.env.PORTCULLIS_DEV_KEY_FILE || DEV_KEY) {
  if (existsSync(file)) return readFileSync(file, "utf8");
  const { generateSigningKey } = await import(resolve(root, "src/identity/tokens.ts"));
  const { privateJwk } = await generateSigningKey(`dev-${Date.now().toString(36)}`);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(privateJwk), { mode: 0o600 });
  return JSON.stringify(privateJwk);
}

function seconds(ttl, flag = "--ttl") {
  const m = /^(\d+)(s|m|h|d)?$/.exec(String(ttl));
  if (!m || Number(m[1]) === 0) throw new UsageError(`${flag}: use a number of seconds or 30m / 1h / 1d, not ${ttl}`);
  return Number(m[1]) * { s: 1, m: 60, h: 3600, d: 86400 }[m[2] ?? "s"];
}

const list = (v) =>
  v === undefined || v === true
    ? []
    : String(v)
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean);

function fail(message) {
  console.error(`portcullis: ${message}`);
  process.exit(1);
}

/**
 * The gateway a locally minted grant is for: `{ iss, aud }` from --port, --gateway or --aud
 * (at most one of them; default the demo's port 8787), then --iss overriding the issuer.
 * Returns an error sentence instead when the flags do not name one gateway.
 */
export function mintTarget(a) {
  const given = ["aud", "gateway", "port"].filter((k) => a[k] !== undefined);
  if (given.length > 1) {
    return given.includes("aud")
      ? `--aud and --${given.find((k) => k !== "aud")} both name the gateway: use --port N or --gateway URL (issuer and audience both), or --aud URL (with --iss ISS if the issuer differs), not both`
      : "--port and --gateway both name the gateway: use one";
  }
  let url;
  if (a.port !== undefined) {
    const n = typeof a.port === "string" && /^\d+$/.test(a.port) ? Number(a.port) : NaN;
    if (!(n >= 1 && n <= 65535)) return `--port: use a port number (1-65535), not ${a.port === true ? "nothing" : a.port}`;
    url = `http://127.0.0.1:${n}`;
  } else if (a.gateway !== undefined) {
    let u = null;
    try {
      u = typeof a.gateway === "string" ? new URL(a.gateway) : null;
    } catch {
      u = null;
    }
    if (!u || (u.protocol !== "http:" && u.protocol !== "https:"))
      return `--gateway: use the gateway's http(s) URL, e.g. http://127.0.0.1:8787, not ${a.gateway === true ? "nothing" : a.gateway}`;
    // The gateway's URL or its MCP endpoint: both name the same gateway.
    url = /^\/mcp\/*$/.test(u.pathname) && !u.search ? u.origin : u.href.replace(/\/+$/, "");
  } else if (a.aud !== undefined) {
    if (typeof a.aud !== "string" || a.aud.trim() === "") return "--aud: give the audience (the gateway's URL)";
    url = a.aud.replace(/\/+$/, "");
  } else {
    url = "http://127.0.0.1:8787";
  }
  if (a.iss !== undefined && typeof a.iss !== "string") return "--iss: give the issuer URL";
  return { iss: typeof a.iss === "string" ? a.iss : url, aud: url };
}

async function tokenMint(a) {
  if (typeof a.sub !== "string") throw new UsageError("give --sub PRINCIPAL (who the grant is for)");
  const body = {
    sub: a.sub,
    team: typeof a.team === "string" ? a.team : "default",
    roles: list(a.role).length ? list(a.role) : ["agent"],
    tools: list(a.tools),
  };
  const ttl = seconds(a.ttl ?? "1h");
  if (typeof a.url === "string") {
    const named = ["aud", "gateway", "port", "iss", "key", "max-lifetime"].filter((k) => a[k] !== undefined);
    if (named.length) fail(`--url mints through that gateway, which signs for itself: drop ${named.map((k) => `--${k}`).join(", ")}`);
    const token = tokenOf(a);
    const res = await fetch(new URL("/v1/grants", a.url), {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify({ ...body, ttl_seconds: ttl }),
      signal: AbortSignal.timeout(30_000),
    }).catch((e) => fail(`POST ${new URL("/v1/grants", a.url).origin}/v1/grants: ${e.cause?.code ?? e.cause?.message ?? e.message}`));
    const j = await res.json().catch(() => ({}));
    if (!res.ok) {
      console.error(`mint refused (${res.status}): ${j.error_description ?? j.error ?? "unknown error"}`);
      process.exit(1);
    }
    console.log(a.json ? JSON.stringify(j, null, 2) : j.token);
    return;
  }
  const target = mintTarget(a);
  if (typeof target === "string") fail(target);
  // The gateway's one name rule (src/config/principal.ts): no reserved team (`_global` is its own
  // ledger chain), one spelling per principal, none in an identity provider's default space. A
  // gateway minting through --url checks the same, and its configured providers' spaces too.
  const { mintedPrincipalProblem, reservedNameProblem } = await import(resolve(root, "src/config/principal.ts"));
  const badSub = mintedPrincipalProblem(body.sub, []);
  if (badSub) fail(`cannot mint: --sub ${JSON.stringify(body.sub)}: ${badSub}`);
  const badTeam = reservedNameProblem("team", body.team);
  if (badTeam) fail(`cannot mint: --team ${JSON.stringify(body.team)}: ${badTeam}`);
  const { parseKeySet, mintGrant } = await import(resolve(root, "src/identity/tokens.ts"));
  let keyText;
  if (typeof a.key === "string") {
    try {
      keyText = readFileSync(a.key, "utf8");
    } catch (e) {
      fail(`--key: cannot read ${a.key} (${e.code ?? e.message})`);
    }
  } else keyText = await devSigningKey();
  const maxLifetimeSeconds = a["max-lifetime"] ? seconds(a["max-lifetime"], "--max-lifetime") : 86400;
  let minted;
  try {
    minted = await mintGrant(await parseKeySet(keyText), { ...target, ...body, ttlSeconds: ttl }, { maxLifetimeSeconds });
  } catch (e) {
    fail(`cannot mint: ${e?.message ?? e}`);
  }
  console.log(a.json ? JSON.stringify({ token: minted.token, jti: minted.jti, exp: minted.exp, ...target, ...body }, null, 2) : minted.token);
}

/** The shape of an enrollment code (src/identity/enrollment.ts ENROLLMENT_CODE). */
const ENROLLMENT_CODE = /^pce_[A-Za-z0-9_-]{43}$/;

/**
 * `token enroll`: an enrollment code minted by the gateway at --url (POST /v1/grants/enroll), as
 * an admin whose token is in PORTCULLIS_TOKEN (no --token: never on a command line). Prints the
 * code and how to use it, or the gateway's answer with --json; never prints the token.
 */
async function tokenEnroll(a) {
  if (typeof a.sub !== "string") throw new UsageError("give --sub PRINCIPAL (who signs in with the code)");
  const base = gatewayOf(a.url);
  const token = process.env.PORTCULLIS_TOKEN;
  if (!token) throw new UsageError("an admin token is needed: give it in PORTCULLIS_TOKEN (never on the command line)");
  const body = { sub: a.sub };
  if (a.role !== undefined) body.roles = list(a.role);
  if (a.role !== undefined && body.roles.length === 0) throw new UsageError("--role: give one or more roles, e.g. --role agent");
  if (a.tools !== undefined) body.tools = list(a.tools);
  if (a.ttl !== undefined) body.ttl_seconds = seconds(a.ttl);
  if (a["code-ttl"] !== undefined) body.code_ttl_seconds = seconds(a["code-ttl"], "--code-ttl");
  const { res, where } = await send(base, "POST", "/v1/grants/enroll", token, { body, timeoutMs: 30_000, redirect: "manual" });
  const answer = await answerOf(res);
  if (!res.ok) throw adminRefusal(where, res.status, answer, "enrolling");
  const j = answer.json;
  if (!j || typeof j.code !== "string" || !ENROLLMENT_CODE.test(j.code) || typeof j.connect_url !== "string" || typeof j.expires !== "number")
    throw new FetchError(`${where}: the answer is not an enrollment code`);
  if (a.json) {
    console.log(JSON.stringify(j, null, 2));
    return 0;
  }
  const until = new Date(j.expires * 1000).toISOString();
  console.log(`Enrollment code for ${j.sub} (roles ${j.roles.join(", ")}; tools ${j.tools.join(", ") || "none"}; grant lifetime ${j.ttl_seconds} s):

  ${j.code}

Add ${j.connect_url} to your MCP client as a connector (Claude: custom connector URL; ChatGPT: developer-mode connector; VS Code: mcp.json type http). When its sign-in page opens, choose "Enrollment code" and enter: ${j.code}
The code works once, until ${until}.`);
  return 0;
}

/**
 * Validates a config file (or `text`, a config meant for `file`'s place, as `add` does before it
 * writes): schema, secrets named in it, and the egress rules for every upstream from the given
 * vantage (`onLoopback`: the gateway serves on 127.0.0.1, as `dev` does).
 */
async function validate(file, { onLoopback = true, secrets = "env", text: given } = {}) {
  // `policy: <path>` and `mappings_dir: <dir>` are inlined: the Worker gets one config text.
  const inlined = inlineConfigFiles(given ?? readFileSync(file, "utf8"), file);
  const text = inlined.text;
  if (inlined.problems.length) return { ok: false, problems: inlined.problems, text };
  const { loadConfig, ConfigError } = await import(resolve(root, "src/config/load.ts"));
  const { egressProblems } = await import(resolve(root, "src/egress/config-check.ts"));
  // Secrets live in the Worker, not here: a static check resolves ${NAME} to a placeholder.
  // PORTCULLIS_ORIGIN is not a secret the config names: the gateway learns it when it starts.
  const vars =
    secrets === "env" ? { ...process.env } : new Proxy({}, { get: (_t, k) => (typeof k === "string" && k !== "PORTCULLIS_ORIGIN" ? `<${k}>` : undefined) });
  const { compiledPolicy } = await import(resolve(root, "src/governance/engine.ts"));
  const { PolicyError } = await import(resolve(root, "src/governance/policy.ts"));
  // The CEL compiler: a config with problems also reports its policy conditions' problems at once.
  const { compileCondition } = await import(resolve(root, "src/governance/policy-cel.ts"));
  try {
    const cfg = loadConfig(text, vars, { source: file, conditions: compileCondition });
    try {
      compiledPolicy(cfg);
    } catch (e) {
      if (e instanceof PolicyError) return { ok: false, problems: e.problems, text };
      throw e;
    }
    const problems = egressProblems(cfg, onLoopback);
    return problems.length ? { ok: false, problems, text } : { ok: true, text, cfg };
  } catch (e) {
    if (e instanceof ConfigError) return { ok: false, problems: e.problems, text };
    throw e;
  }
}

/**
 * The text of a dotenv file that `wrangler dev --env-file` (wrangler 4: dotenv 16.3 parses it,
 * then dotenv-expand 12 expands it, with nothing from the process environment) turns back into
 * exactly `vars`, whatever the values hold: newlines, CR, quotes of every kind, `$`, `#`, `\`.
 * That parser has no escapes of its own beyond `\n`/`\r` in double quotes, so each value is
 * quoted with a quote it does not contain (', then `, else "), every `$` is written `\$` (the
 * expander's escape), and what a quote cannot hold comes from `${…}` expansions: a run of
 * backslashes at the end of a value, or before `n`/`r` in double quotes, as the default of a
 * name that is never set (`${T_UNSET:-\\}`); a `"` inside double quotes (with the backslashes
 * before it) as a helper var defined first (`T_0='"'`), which the Worker then also sees.
 * T is a random tag that no name or value contains. Names must be [A-Za-z_][A-Za-z0-9_]*.
 * test/e2e/secrets.test.ts runs wrangler's own parser over this text.
 */
export function envFileText(vars) {
  const entries = Object.entries(vars).map(([k, v]) => {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new Error(`var name ${JSON.stringify(k)}: use letters, digits and _ only`);
    return [k, String(v)];
  });
  let tag;
  do tag = `PORTCULLIS_ENV_${randomBytes(6).toString("hex").toUpperCase()}`;
  while (entries.some(([k, v]) => k.includes(tag) || v.includes(tag)));
  const literal = (run) => `\${${tag}_UNSET:-${run}}`;
  const helpers = new Map();
  const helper = (text) => {
    if (!helpers.has(text)) helpers.set(text, `${tag}_${helpers.size}`);
    return `\${${helpers.get(text)}}`;
  };
  const lines = entries.map(([k, v]) => {
    const q = !/['\r]/.test(v) ? "'" : !/[`\r]/.test(v) ? "`" : '"';
    let out = "";
    for (let i = 0; i < v.length; ) {
      let j = i;
      while (v[j] === "\\") j++;
      const run = v.slice(i, j);
      if (j === v.length) {
        out += literal(run); // a backslash just before the closing quote would escape it
        break;
      }
      const c = v[j];
      if (q === '"' && c === '"') out += helper(`${run}"`);
      else if (q === '"' && run && (c === "n" || c === "r")) out += `${literal(run)}${c}`;
      else out += run + (c === "$" ? "\\$" : c === "\r" ? "\\r" : c);
      i = j + 1;
    }
    return `${k}=${q}${out}${q}`;
  });
  return `${[...[...helpers].map(([text, name]) => `${name}='${text}'`), ...lines].join("\n")}\n`;
}

/** Private env-file directories not yet removed; removed at this process's exit whatever the path to it. */
const envDirs = new Set();
let envDirsHooked = false;

/**
 * Writes `vars` (see `envFileText`) to a file of mode 0600 in a fresh directory of mode 0700
 * under the temporary directory, for `wrangler dev --env-file`. Returns `{ dir, file, remove }`;
 * `remove()` deletes both (idempotent), and anything not removed by then goes at process exit.
 */
export function privateEnvFile(vars) {
  const text = envFileText(vars);
  const dir = mkdtempSync(join(tmpdir(), "portcullis-vars-"));
  chmodSync(dir, 0o700);
  const file = join(dir, "gateway.env");
  envDirs.add(dir);
  if (!envDirsHooked) {
    envDirsHooked = true;
    process.on("exit", () => {
      for (const d of envDirs) {
        try {
          rmSync(d, { recursive: true, force: true });
        } catch {
          /* best effort at exit */
        }
      }
      envDirs.clear();
    });
  }
  const remove = () => {
    if (!envDirs.delete(dir)) return;
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      /* best effort: the exit hook no longer lists it */
    }
  };
  try {
    writeFileSync(file, text, { mode: 0o600, flag: "wx" });
  } catch (e) {
    remove();
    throw e;
  }
  return { dir, file, remove };
}

/** The origin a gateway started on `ip`:`port` serves: `http://127.0.0.1:8787`, `http://[::1]:8787`. */
export function gatewayOrigin(ip, port) {
  return `http://${String(ip).includes(":") ? `[${ip}]` : ip}:${port}`;
}

/**
 * Starts wrangler dev for the gateway. Resolves to the child. The Worker's vars — the config
 * text (PORTCULLIS_CONFIG), the origin it serves (PORTCULLIS_ORIGIN, `http://<ip>:<port>`), the
 * dev signing key (PORTCULLIS_SIGNING_KEY) and every `extraVars` entry (these win) — go through a
 * private env file (`privateEnvFile`, `--env-file`), never the command line, where any local user
 * could read them; it is removed when the child exits (or this process does). With `--env-file`
 * wrangler reads no .dev.vars or .env, and the process environment is kept out of the Worker's
 * vars (CLOUDFLARE_INCLUDE_PROCESS_ENV=false): the file is all the Worker gets.
 * `ip` is 127.0.0.1 for every command; tests may pass another local address to show what the
 * gateway does when it is exposed beyond loopback. `detached` (default false, as the commands
 * use it) starts the gateway in its own process group: the wrangler shim, the real wrangler and
 * workerd then share that group, so a caller can stop the whole tree with `process.kill(-pid, sig)`
 * (the e2e harness and the bench do; the caller then owns the signals and must unref the child).
 */
export function startGateway({
  configText,
  port = 8787,
  persistTo,
  stdio = "inherit",
  extraVars = {},
  signingKey,
  logLevel = "log",
  ip = "127.0.0.1",
  detached = false,
}) {
  // The dev signing key travels as a var: local runs only (a deploy uses `wrangler secret put`).
  const vars = {
    PORTCULLIS_CONFIG: configText,
    PORTCULLIS_ORIGIN: gatewayOrigin(ip, port),
    ...(signingKey ? { PORTCULLIS_SIGNING_KEY: signingKey } : {}),
    ...extraVars,
  };
  const envFile = privateEnvFile(vars);
  const argv = [
    "dev",
    "--config",
    resolve(root, "wrangler.toml"),
    "--ip",
    ip,
    "--port",
    String(port),
    // "log" level: the Worker's own structured lines (one per upstream request) are shown.
    "--inspector-port",
    "0",
    "--show-interactive-dev-session=false",
    "--log-level",
    logLevel,
    "--env-file",
    envFile.file,
  ];
  if (persistTo) argv.push("--persist-to", persistTo);
  let child;
  try {
    child = spawn(bin("wrangler"), argv, {
      cwd: root,
      stdio,
      detached,
      env: {
        ...process.env,
        WRANGLER_SEND_METRICS: "false",
        CLOUDFLARE_CF_FETCH_ENABLED: "false",
        // The env file is the Worker's only source of vars: loaded (the default, made sure of), and nothing from this environment.
        CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true",
        CLOUDFLARE_INCLUDE_PROCESS_ENV: "false",
      },
    });
  } catch (e) {
    envFile.remove();
    throw e;
  }
  child.once("exit", envFile.remove);
  child.once("error", () => {
    if (child.pid === undefined) envFile.remove(); // never started: no exit will come
  });
  return child;
}

/**
 * For `dev`: the secrets the config names — each `${NAME}` in its text (which `validate` just
 * resolved from this environment) and its credentials key — as this environment holds them, to
 * go to the gateway with its other vars (wrangler reads no .dev.vars or .env beside the env file).
 * The vars `startGateway` sets itself are left out.
 */
function secretsFromEnv(text, cfg) {
  // `${NAME}` and `${NAME:-fallback}` (the syntax of src/config/load.ts): NAME goes along when set; unset, the Worker falls back.
  const names = new Set([...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}/g)].map((m) => m[1]));
  if (cfg?.credentialsKeySecret) names.add(cfg.credentialsKeySecret);
  const out = {};
  for (const name of names) {
    if (["PORTCULLIS_CONFIG", "PORTCULLIS_ORIGIN", "PORTCULLIS_SIGNING_KEY"].includes(name)) continue;
    if (typeof process.env[name] === "string") out[name] = process.env[name];
  }
  return out;
}

const EVERYTHING = resolve(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");

/**
 * Starts the bundled demo upstream (server-everything, streamableHttp) on 127.0.0.1:`port` only,
 * the way `start` does. server-everything calls `app.listen(PORT)` with no host — every interface —
 * and offers no host setting, so the child runs this file's `demo-upstream` command, which pins
 * its listening socket to 127.0.0.1 before loading it (node_modules stays untouched).
 * `detached` (default false): its own process group, as for `startGateway`.
 */
export function startDemoUpstream({ port = 3001, stdio = ["ignore", "inherit", "inherit"], detached = false } = {}) {
  return spawn(process.execPath, [fileURLToPath(import.meta.url), "demo-upstream", "--port", String(port)], {
    cwd: root,
    stdio,
    detached,
    env: { ...process.env },
  });
}

/** Runs server-everything in this process with every TCP listen bound to 127.0.0.1. */
async function demoUpstream(port) {
  const net = await import("node:net");
  const listen = net.Server.prototype.listen;
  net.Server.prototype.listen = function (...args) {
    const cb = typeof args[args.length - 1] === "function" ? args.pop() : undefined;
    const [first] = args;
    let opts;
    if (first === undefined || typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first)))
      opts = { port: Number(first ?? 0), host: "127.0.0.1" };
    else if (first && typeof first === "object" && first.path === undefined && first.fd === undefined && first.handle === undefined && !first._handle)
      opts = { ...first, host: "127.0.0.1" };
    else throw new Error("demo upstream: only TCP listens on 127.0.0.1 are allowed");
    return cb ? listen.call(this, opts, cb) : listen.call(this, opts);
  };
  process.env.PORT = String(port);
  process.argv.splice(2, Infinity, "streamableHttp");
  await import(EVERYTHING);
}

/** `pid` and every descendant of it, from `ps` (Linux and macOS); just `pid` when ps cannot be run. */
function processTree(pid) {
  const kids = new Map();
  try {
    for (const line of execFileSync("ps", ["-A", "-o", "pid=,ppid="], { encoding: "utf8" }).split("\n")) {
      const [c, p] = line.trim().split(/\s+/).map(Number);
      if (c && !Number.isNaN(p)) kids.set(p, [...(kids.get(p) ?? []), c]);
    }
  } catch {
    /* no ps: the child alone */
  }
  const out = [];
  for (const pending = [pid]; pending.length; ) {
    const p = pending.pop();
    out.push(p);
    pending.push(...(kids.get(p) ?? []));
  }
  return out;
}

/**
 * Ctrl-C and SIGTERM for `dev` and `start`: the signal goes on to each child (a terminal's Ctrl-C
 * reaches them anyway; `kill PID` reaches only this process, and the gateway would be orphaned).
 * A second signal, or a child still running `graceMs` later, gets SIGKILL for that child and its
 * whole tree (the wrangler shim, the real wrangler, workerd), so nothing is left behind.
 */
function stopChildrenOnSignal(children /* read at each signal: callers may add to it */, graceMs = 10_000) {
  const running = () => children.filter((c) => c.pid !== undefined && c.exitCode === null && c.signalCode === null);
  const killTrees = () => {
    for (const pid of running().flatMap((c) => processTree(c.pid))) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* gone */
      }
    }
    setTimeout(() => process.exit(1), 2000).unref();
  };
  let timer;
  const onSignal = (sig) => {
    if (timer) {
      clearTimeout(timer);
      killTrees();
      return;
    }
    for (const c of running()) c.kill(sig);
    timer = setTimeout(killTrees, graceMs);
    timer.unref();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
}

/**
 * `dev`'s check before the gateway starts: the policy of FILE against its upstreams' real tool
 * lists (bin/reload-cli.mjs checkRulesBeforeReload, in dev's words). In enforce, a rule that should stop calls and
 * matches no tool stops `dev` (exit 1) unless `force`: nothing is served under a policy that says
 * deny while the gateway would allow. Unchecked (an upstream not answering) and other unmatched
 * rules are printed and the gateway starts.
 */
async function rulesBeforeStart(file, force) {
  const { checkRulesBeforeReload } = await import("./reload-cli.mjs");
  const words = {
    command: "portcullis dev",
    unchecked: "; the gateway reports them once it lists them (/readyz, the ledger)",
    forced: "starting",
    refused: "not started",
    after: "",
    fix: `fix the rule's match in ${file}`,
  };
  try {
    await checkRulesBeforeReload(file, { force, words });
  } catch (e) {
    if (e instanceof Refused) process.exit(1);
    throw e;
  }
}

/** The classification banner once the gateway answers /healthz (bin/governance-cli.mjs); never fails the command. */
function classificationBanner(opts) {
  return import("./governance-cli.mjs")
    .then(({ startBanner }) => startBanner(opts))
    .catch((e) => console.log(`portcullis: no classification banner (${e?.message ?? e})`));
}

/**
 * The demo's approver sign-in for `start`: a grant minted with the dev key (as `token mint
 * --port N` does) for the gateway on `port`, sub `human:demo-approver`, roles approver and
 * auditor, in team "local" — the team of the unauthenticated loopback actor (src/identity/auth.ts),
 * whose holds are that team's, so they reach this approver (who, being another principal, may
 * resolve them). Its auditor role reads the same team's ledger (`ledger verify --url`).
 */
export async function demoApproverGrant(port, ttlSeconds = 8 * 3600) {
  const { parseKeySet, mintGrant } = await import(resolve(root, "src/identity/tokens.ts"));
  const target = mintTarget({ port: String(port) });
  const claims = { ...target, sub: "human:demo-approver", team: "local", roles: ["approver", "auditor"], tools: [], ttlSeconds };
  return mintGrant(await parseKeySet(await devSigningKey()), claims, { maxLifetimeSeconds: 86400 });
}

/**
 * For `start`, once the gateway at `origin` answers /healthz: what the demo policy does, the
 * console URL with the approver grant to paste at /console/login (printed to this terminal only —
 * never a log file, never a command line), and a three-step "try it" recipe. Never fails the command.
 */
async function demoGuide({ origin, port, print = (s) => console.log(s) }) {
  try {
    let up = false;
    for (let i = 0; i < 240 && !up; i++) {
      up = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(2000) })
        .then(async (r) => {
          await r.body?.cancel();
          return r.ok;
        })
        .catch(() => false);
      if (!up) await new Promise((r) => setTimeout(r, 500).unref());
    }
    if (!up) return print(`portcullis: the gateway did not come up at ${origin}; no approver sign-in printed`);
    const grant = await demoApproverGrant(port);
    const hours = Math.round((grant.exp - Math.floor(Date.now() / 1000)) / 3600);
    const call = (a, b) =>
      `curl -s ${origin}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: get-sum' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":${a},"b":${b}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'`;
    print(`
portcullis: the demo is governed (portcullis.yaml, mode enforce, mappings/everything.yaml):
  held     get-sum when a + b > 100 (rule demo-big-sums): it runs once an approver approves it
  denied   get-env (rule demo-no-env): not listed, and a call is refused with the reason
  allowed  every other mapped tool; an MCP client without a grant is the agent local:demo (team local)

Console: ${origin}/console
  Sign in at ${origin}/console/login by pasting this approver grant (human:demo-approver,
  team local, roles approver + auditor, ${hours}h, signed with the dev key). It is shown here only:
  paste it, never put it on a command line.

${grant.token}

Try it:
  1. Call the held tool as the agent (or in \`npx @modelcontextprotocol/inspector\`: Streamable HTTP,
     ${origin}/mcp, tool get-sum, a = 60, b = 50):
       ${call(60, 50)}
     → "Blocked by Portcullis: this call needs approval … It is held as local~<id> …"
  2. Approve it in the console: ${origin}/console → the hold → Approve.
  3. Send the identical call again: it runs once ("The sum of 60 and 50 is 110."; later retries get
     that answer replayed). Then verify the ledger with the same grant (an auditor), read from the
     terminal so it stays out of argv and shell history:
       read -rs PORTCULLIS_TOKEN && export PORTCULLIS_TOKEN    # paste the grant, then Enter
       npx portcullis ledger verify --url ${origin}
`);
  } catch (e) {
    print(
      `portcullis: no approver sign-in (${e?.message ?? e}); mint one: npx portcullis token mint --sub human:me --team local --role approver,auditor --port ${port}`,
    );
  }
}

/** The config file's text for `name` (check, doctor, dev); a refusal naming the file when it cannot be read. */
function configFileText(name, file) {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    console.error(`portcullis ${name}: cannot read --config ${file} (${e.code ?? e.message})`);
    process.exit(1);
  }
}

async function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  // `portcullis` alone: the usage on stderr, exit 0 (as before); --help / -h / help: on stdout.
  if (cmd === undefined) usage(0);
  if (isHelp(cmd)) {
    console.log(USAGE);
    return;
  }
  const has = (...flags) => rest.some((w) => flags.includes(w) || flags.some((f) => w.startsWith(`${f}=`)));
  if (cmd === "ledger") {
    // verify | export | trace: bin/ledger-cli.mjs owns the ledger commands and their flags.
    const { ledgerCommand } = await import("./ledger-cli.mjs");
    process.exit(await ledgerCommand(rest));
  }
  if (cmd === "holds") {
    // list | show | approve | reject: bin/holds-cli.mjs owns the hold commands and their flags.
    const { holdsCommand } = await import("./holds-cli.mjs");
    process.exit(await holdsCommand(rest));
  }
  if (cmd === "runs") {
    // list | show | rollback: bin/runs-cli.mjs owns the run commands and their flags.
    const { runsCommand } = await import("./runs-cli.mjs");
    process.exit(await runsCommand(rest));
  }
  if (cmd === "halt" || cmd === "resume" || cmd === "status") {
    // bin/killswitch-cli.mjs owns the kill-switch commands and their flags.
    const { killSwitchCommand } = await import("./killswitch-cli.mjs");
    process.exit(await killSwitchCommand(cmd, rest));
  }
  if (cmd === "reload") {
    // bin/reload-cli.mjs owns the reload command and its flags.
    const { reloadCommand } = await import("./reload-cli.mjs");
    process.exit(await reloadCommand(rest));
  }
  if (cmd === "add") {
    // bin/add-cli.mjs owns the add command, its flags and its output; the validation is this file's.
    const { addCommand } = await import("./add-cli.mjs");
    process.exit(await addCommand(rest, { validate }));
  }
  if (cmd === "classify" || cmd === "suggest-manifest") {
    // bin/governance-cli.mjs owns these commands, their flags and their output.
    const { governanceCommand } = await import("./governance-cli.mjs");
    process.exitCode = await governanceCommand(cmd, rest);
    return;
  }
  if (cmd === "import" || cmd === "restore") {
    // bin/clients-cli.mjs owns the client-config commands, their flags and their output.
    const { clientsCommand } = await import("./clients-cli.mjs");
    process.exit(await clientsCommand(cmd, rest));
  }
  if (cmd === "token") {
    const [sub, ...more] = rest;
    if (sub !== undefined && isHelp(sub)) {
      console.log(HELP.token);
      return;
    }
    if (sub === "revoke") {
      const { operatorCommand } = await import("./operator-cli.mjs");
      process.exit(await operatorCommand("token revoke", more));
    }
    if (sub === "enroll") {
      const a = options("token enroll", more);
      process.exit(await exitCodeOf("portcullis token enroll", () => tokenEnroll(a)));
    }
    if (sub === "mint") {
      const a = options("token mint", more);
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
  if (cmd === "keys") {
    const { operatorCommand } = await import("./operator-cli.mjs");
    process.exit(await operatorCommand("keys", rest));
  }
  if (cmd === "doctor" && has("--clients")) {
    const { clientsCommand } = await import("./clients-cli.mjs");
    process.exit(await clientsCommand("doctor", rest));
  }
  if ((cmd === "check" && has("--self-probe", "--help", "-h")) || (cmd === "doctor" && has("--live", "--help", "-h"))) {
    // bin/operator-cli.mjs owns check --self-probe and doctor --live (and both commands' --help).
    const { operatorCommand } = await import("./operator-cli.mjs");
    process.exit(await operatorCommand(cmd, rest, { startGateway, validate }));
  }
  if (cmd === "doctor") {
    const a = options("doctor", rest);
    if (typeof a.config !== "string") usageError("doctor", "give --config FILE (or --clients, for the MCP clients on this machine)");
    if (a.local && a.deployed) usageError("doctor", "--local and --deployed: give one");
    // Where will it run? --local: on loopback (portcullis dev); --deployed: on a public hostname.
    // Default: a config that allows unauthenticated use is a local one.
    const text = configFileText("doctor", a.config);
    const local = a.local === true ? true : a.deployed === true ? false : !/^\s*required:\s*true\b/m.test(text);
    const v = await validate(a.config, { onLoopback: local, secrets: "static", text });
    const where = local ? "served on loopback" : "deployed";
    if (a.json) {
      console.log(JSON.stringify({ ok: v.ok, config: a.config, where, problems: v.ok ? [] : v.problems }, null, 2));
      process.exit(v.ok ? 0 : 1);
    }
    if (v.ok) {
      console.log(`${a.config}: sound (${where}; ${v.cfg.upstreams.length} upstream${v.cfg.upstreams.length === 1 ? "" : "s"})`);
      return;
    }
    console.error(`${a.config}: refused (${where})\n${v.problems.map((p) => `  - ${p}`).join("\n")}`);
    process.exit(1);
  }
  if (cmd === "check") {
    const a = options("check", rest);
    if (typeof a.config !== "string") usageError("check", "give --config FILE (or --self-probe)");
    const v = await validate(a.config, { text: configFileText("check", a.config) });
    // Rules, obligations and history queries that name no tool the mappings name: warnings (doctor --live and reload check the real lists).
    const { mappedCoverage } = await import("./operator-cli.mjs");
    const warnings = v.ok ? (await mappedCoverage(v.cfg)).map((u) => u.line) : [];
    if (a.json) {
      console.log(JSON.stringify({ ok: v.ok, config: a.config, problems: v.ok ? [] : v.problems, warnings }, null, 2));
      process.exit(v.ok ? 0 : 1);
    }
    if (v.ok) {
      console.log(`${a.config}: ok`);
      for (const w of warnings) console.log(`  warning: ${w}`);
      return;
    }
    console.error(`${a.config}: invalid\n${v.problems.map((p) => `  - ${p}`).join("\n")}`);
    process.exit(1);
  }
  if (cmd === "dev") {
    const a = options("dev", rest);
    if (typeof a.config !== "string") usageError("dev", "give --config FILE");
    const port = portOf("dev", a.port, 8787);
    const v = await validate(a.config, { text: configFileText("dev", a.config) });
    if (!v.ok) {
      console.error(`${a.config}: invalid\n${v.problems.map((p) => `  - ${p}`).join("\n")}`);
      process.exit(1);
    }
    await rulesBeforeStart(a.config, a.force === true);
    const child = startGateway({ configText: v.text, port, signingKey: await devSigningKey(), extraVars: secretsFromEnv(v.text, v.cfg) });
    console.log(`portcullis: gateway on http://127.0.0.1:${port}/mcp`);
    stopChildrenOnSignal([child]);
    child.on("exit", (code) => process.exit(code ?? 0));
    void classificationBanner({ cfg: v.cfg, origin: gatewayOrigin("127.0.0.1", port) });
    return;
  }
  if (cmd === "demo-upstream") {
    const a = options("demo-upstream", rest);
    await demoUpstream(portOf("demo-upstream", a.port, 3001));
    return;
  }
  if (cmd === "start") {
    const a = options("start", rest);
    const upPort = portOf("start", a["upstream-port"], 3001, "--upstream-port");
    const port = portOf("start", a.port, 8787);
    const demo = startDemoUpstream({ port: upPort });
    const children = [demo];
    stopChildrenOnSignal(children);
    const demoConfig = resolve(root, "portcullis.yaml");
    const inlined = inlineConfigFiles(readFileSync(demoConfig, "utf8").replaceAll("127.0.0.1:3001/", `127.0.0.1:${upPort}/`), demoConfig);
    if (inlined.problems.length) fail(`${demoConfig}: invalid\n${inlined.problems.map((p) => `  - ${p}`).join("\n")}`);
    const configText = inlined.text;
    const persistTo = typeof a["persist-to"] === "string" ? a["persist-to"] : undefined;
    const gw = startGateway({ configText, port, persistTo, signingKey: await devSigningKey() });
    console.log(`portcullis: demo upstream on http://127.0.0.1:${upPort}/mcp, gateway on http://127.0.0.1:${port}/mcp`);
    children.push(gw);
    gw.on("exit", (code) => {
      demo.kill();
      process.exit(code ?? 0);
    });
    demo.on("exit", () => gw.kill());
    const origin = gatewayOrigin("127.0.0.1", port);
    // The banner first, then the demo guide (console URL, approver sign-in, try-it recipe) last on screen.
    void classificationBanner({ configText, origin }).then(() => demoGuide({ origin, port }));
    return;
  }
  console.error(`portcullis: unknown command ${cmd}\n(portcullis --help for the commands)`);
  process.exit(2);
}

// Run as a command (directly, or through the node_modules/.bin symlink npx uses), not when imported.
if (process.argv[1] && realpathSync(resolve(process.argv[1])) === realpathSync(fileURLToPath(import.meta.url))) await main();
