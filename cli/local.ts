/**
 * The local config commands: `dev --config FILE [--port N] [--persist-to DIR] [--force]` (a
 * gateway on workerd via wrangler with that config, its state in DIR or ./.wrangler/state, after
 * its rules are checked against the upstreams' real tool lists; once it is up the classification
 * banner and, as `start` prints them through cli/demo.ts gatewayGuide, what the config governs,
 * the console URL, an approver sign-in and a try-it recipe), `check --config FILE` (validate a config: every
 * problem, and the rules that name no mapped tool as warnings) and `doctor --config FILE`
 * (the static doctor: schema, policy and each upstream's egress from where it will run). Owns these
 * commands' flags, output and exit codes (0 ok, 1 invalid or refused, 2 usage), and the usage of
 * `check` and `doctor` in all their forms (`check --self-probe` and `doctor --live` run in
 * cli/self-probe.ts and cli/doctor-live.ts). Light to load: what a command needs is loaded when it runs.
 * Must never: print a secret value (problems name variables, not values; upstream URLs lose their
 * query), or put one on a command line (the gateway gets the secrets the config names through its
 * private env file).
 */
import { resolve } from "node:path";
import type { GatewayConfig } from "../src/config/gateway-config.ts";
import { commandOptions, FLAG, HELP_OPTION, namesOf, portOf, STRING, usageError } from "./args.ts";
import { messageOf, Refused } from "./gateway-http.ts";
import { existsSync } from "node:fs";
import { devSigningKey, gatewayOrigin, startGateway, stopChildrenOnSignal } from "./gateway-start.ts";
import { namedSecrets, projectOf, writeConfigModule } from "./project.ts";

/** Where a local gateway (`dev`, `start`) keeps its state: --persist-to DIR (relative to the current directory), else .wrangler/state here. */
export function stateDir(persistTo: string | undefined): string {
  return resolve(persistTo ?? ".wrangler/state");
}

/** What `dev` and `start` say about --persist-to in their --help. */
export const PERSIST_HELP = `--persist-to DIR   keep the gateway's state (ledger, holds, sessions: its local D1 and Durable
                     Objects) in DIR across restarts; without it, .wrangler/state in the current
                     directory`;

export const HELP = {
  dev: `usage: portcullis dev [--config FILE] [--port N] [--persist-to DIR] [--force]
  a local gateway (wrangler dev on workerd, local D1 and Durable Objects) with that config, on
  http://127.0.0.1:N/mcp; policy and mappings_dir are relative to FILE; every \${NAME} the config
  names goes to the gateway from this environment. Before it starts, the policy is checked against
  the upstreams' real tool lists (as doctor --live does): in enforce, a deny or require_approval rule,
  or an obligation, that matches no tool stops it (exit 1, each rule named with the nearest real
  names); other rules that match nothing are warnings. Once it is up it prints, as start does, the
  classification banner, the console URL, an approver grant to paste there (this terminal only; team
  local) and a try-it recipe against the config's own upstreams. Ctrl-C stops it.
  --config FILE      the portcullis.yaml (validated first: every problem printed, exit 1)
  --port N           its port on 127.0.0.1 (default 8787)
  ${PERSIST_HELP}
  --force            start although a rule matches no real tool
exit: 1 an invalid config or a rule that matches nothing in enforce, 2 usage; otherwise the gateway's
exit code once it stops`,
  check: `usage: portcullis check --config FILE [--json]
       portcullis check --self-probe [--port N] [--timeout 180s] [--verbose] [--json]
  --config FILE   validate a config and report every problem (exit 0 ok, 1 invalid); with --json,
                  print {ok, config, problems}
  --self-probe    prove that this build fails closed: starts a recording upstream and a local gateway
                  (wrangler dev on 127.0.0.1, a fresh signing key, its state in a temporary directory)
                  and sends a real tools/call as a grant whose team is not a valid ledger chain name,
                  so the gateway cannot write the call's decision to the ledger before forwarding it
                  (the write-ahead). PASS when that call is refused by the ledger step and
                  the upstream saw no tools/call, and a control call with a writable ledger then reaches
                  the upstream (so the refusal was the ledger's, not a broken setup).
  --port N        the probe gateway's port on 127.0.0.1 (default: a free port); exit 3 when it is taken
  --timeout       how long the gateway may take to start (default 180s)
  --verbose       show the gateway's own output
  --json          print the report as JSON
exit: 0 PASS, 1 FAIL (or an invalid config), 2 usage, 3 the probe could not be run (the gateway did not start)`,
  doctor: `usage: portcullis doctor --config FILE [--local|--deployed] [--live [--timeout 5s]] [--json]
       portcullis doctor --clients ...  (portcullis doctor --clients --help)
  Checks the config statically (schema, mappings, policy, each upstream's egress: every problem at
  once). --live also contacts each upstream from this machine as an MCP client (server/discover,
  else initialize, then tools/list; the config's headers with \${NAME} from this environment; no
  redirect followed) and reports whether it answered. An upstream the egress rules refuse is not
  contacted. An upstream with per-principal credentials that refuses this command's missing
  credential (401/403) counts as reachable. With every upstream's tool list in hand, --live also
  checks the policy against them: a rule (or history query) that matches no real tool is named,
  with the nearest real names; in enforce a deny or require_approval rule, or one with
  obligations, that matches nothing is a problem (exit 1), otherwise a warning.
  --local / --deployed  where the gateway will run (default: local unless auth.required is true)
  --timeout             per upstream, with --live (default 5s)
  --json                print {ok, config, where, problems} (and upstreams, warnings, unmatched_rules, with --live)
exit: 0 sound (and every upstream reachable), 1 a problem or an unreachable upstream, 2 usage`,
};

const DEV_OPTIONS = { config: STRING, port: STRING, "persist-to": STRING, force: FLAG, ...HELP_OPTION } as const;
const CHECK_OPTIONS = { config: STRING, json: FLAG, ...HELP_OPTION } as const;
const DOCTOR_OPTIONS = { config: STRING, local: FLAG, deployed: FLAG, json: FLAG, ...HELP_OPTION } as const;

/** The options of `dev`, `check --config` and `doctor --config` (help.test.ts checks their --help names them all). */
export const KNOWN = { dev: namesOf(DEV_OPTIONS), check: namesOf(CHECK_OPTIONS), doctor: namesOf(DOCTOR_OPTIONS) };

/** The classification banner once the gateway answers /healthz (cli/classify.ts startBanner); never fails the command. */
export function classificationBanner(opts: { cfg?: GatewayConfig; configText?: string; origin: string }): Promise<void> {
  return import("./classify.ts")
    .then(({ startBanner }) => startBanner(opts))
    .catch((e: unknown) => console.log(`portcullis: no classification banner (${messageOf(e)})`));
}

/**
 * `dev`'s check before the gateway starts: the policy of FILE against its upstreams' real tool
 * lists (cli/reload.ts checkRulesBeforeReload, in dev's words). In enforce, a rule that should stop calls and
 * matches no tool stops `dev` (exit 1) unless `force`: nothing is served under a policy that says
 * deny while the gateway would allow. Unchecked (an upstream not answering) and other unmatched
 * rules are printed and the gateway starts.
 */
async function rulesBeforeStart(file: string, force: boolean): Promise<void> {
  const { checkRulesBeforeReload } = await import("./reload.ts");
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

/**
 * For `dev`: the secrets the config names — each `${NAME}` in its text (which `validate` just
 * resolved from this environment) and its credentials key — as this environment holds them, to
 * go to the gateway with its other vars (wrangler reads no .dev.vars or .env beside the env file).
 * The vars `startGateway` sets itself are left out.
 */
function secretsFromEnv(text: string, cfg: GatewayConfig): Record<string, string> {
  // `${NAME}` and `${NAME:-fallback}` (the syntax of src/config/load.ts): NAME goes along when set; unset, the Worker falls back.
  const named = namedSecrets(text);
  const names = new Set([...named.required, ...named.optional]);
  if (cfg.credentialsKeySecret) names.add(cfg.credentialsKeySecret);
  const out: Record<string, string> = {};
  for (const name of names) {
    if (["PORTCULLIS_CONFIG", "PORTCULLIS_ORIGIN", "PORTCULLIS_SIGNING_KEY"].includes(name)) continue;
    const value = process.env[name];
    if (typeof value === "string") out[name] = value;
  }
  return out;
}

const problemList = (problems: string[]) => problems.map((p) => `  - ${p}`).join("\n");

/** A rule as the dev guide names it: its id, where it applies (upstream/tool), and whether it only observes. */
function ruleLine(r: GatewayConfig["policy"]["rules"][number]): string {
  const globs = (v: string | string[] | undefined) => (v === undefined ? "*" : [v].flat().join("|"));
  const where = r.match?.upstream !== undefined || r.match?.tool !== undefined ? ` (${globs(r.match?.upstream)}/${globs(r.match?.tool)})` : "";
  return `rule ${r.id}${where}${r.when ? ` when ${r.when.length > 80 ? `${r.when.slice(0, 77)}...` : r.when}` : ""}${r.mode === "observe" ? " [observe only]" : ""}: ${r.reason}`;
}

/**
 * What `dev` prints once its gateway is up, after the banner (cli/demo.ts gatewayGuide, as `start`
 * prints it): what the config governs (its mode, upstreams, held and denied rules, who an MCP client
 * without a grant is), the console URL with an approver sign-in for team local, and a try-it recipe
 * against the config's own upstreams. No grant is minted when the gateway would not accept one
 * signed with the dev key (the config names another signing-key secret).
 */
export async function devGuide({
  file,
  cfg,
  port,
  origin,
  print,
}: {
  file: string;
  cfg: GatewayConfig;
  port: number;
  origin: string;
  print?: (s: string) => void;
}): Promise<void> {
  const { gatewayGuide, mcpCurl, verifyLines } = await import("./demo.ts");
  const { printableUrl } = await import("./mcp-list.ts");
  const aud = cfg.auth.audience;
  const iss = cfg.auth.issuer;
  const forGateway = aud || iss ? `--aud ${aud ?? origin}${iss ? ` --iss ${iss}` : ""}` : `--port ${port}`;
  const rules = cfg.policy.rules;
  const held = rules.filter((r) => r.decision === "require_approval");
  const denied = rules.filter((r) => r.decision === "deny");
  const lines = [
    `  upstreams  ${cfg.upstreams.map((u) => `${u.name} (${printableUrl(u.url)})${u.namespaced ? ` as ${u.name}__<tool>` : ""}`).join(", ") || "none"}`,
    ...held.map((r) => `  held       ${ruleLine(r)}`),
    ...denied.map((r) => `  denied     ${ruleLine(r)}`),
    cfg.auth.required
      ? "  agents     every MCP client needs a grant (auth.required)"
      : `  agents     an MCP client without a grant is the agent ${cfg.actor} (team local)`,
  ];
  const intro = `\nportcullis: the gateway serves ${file} (mode ${cfg.mode}; ${rules.length} polic${rules.length === 1 ? "y rule" : "y rules"}):\n${lines.join("\n")}\n`;
  const noGrant =
    cfg.auth.signingKeySecret === "PORTCULLIS_SIGNING_KEY"
      ? undefined
      : `the config signs with the ${cfg.auth.signingKeySecret} secret (auth.signing_key_secret), not the dev key dev hands the gateway; mint one with npx portcullis token mint --key FILE --sub human:me --team local --role approver,auditor ${forGateway}`;
  const step1 = cfg.auth.required
    ? `  1. Every client needs a grant here (auth.required). Mint an agent grant (in team local, so its held
     calls reach the approver above) and give it to your MCP client, never on a command line:
       npx portcullis token mint --sub agent:me --team local --tools '*' ${forGateway}
     e.g. \`npx @modelcontextprotocol/inspector\`: Streamable HTTP, ${origin}/mcp, the grant as its Bearer
     token; list the tools.`
    : `  1. List the tools an agent sees (or in \`npx @modelcontextprotocol/inspector\`: Streamable HTTP,
     ${origin}/mcp):
       ${mcpCurl(origin)}`;
  const step2 =
    cfg.mode === "enforce"
      ? `  2. Call one. A call the policy holds${held.length ? ` (${held.map((r) => r.id).join(", ")})` : ""} answers "Blocked by Portcullis: this call needs
     approval … It is held as local~<id> …": approve it in the console (${origin}/console → the hold
     → Approve), then send the identical call again: it runs once.`
      : `  2. Call one. In mode ${cfg.mode} nothing is held or refused: each call is recorded with what
     enforce would have decided.`;
  const step3 = noGrant
    ? `  3. Verify the ledger with an auditor's grant in PORTCULLIS_TOKEN: npx portcullis ledger verify --url ${origin}`
    : `  3. Verify the ledger with the approver grant (an auditor), read from the terminal so it stays out
     of argv and shell history:
${verifyLines(origin)}`;
  const ttlSeconds = Math.min(8 * 3600, cfg.auth.maxTokenLifetimeS);
  await gatewayGuide({
    origin,
    approver: { port, aud, iss, ttlSeconds },
    intro,
    tryIt: `Try it:\n${step1}\n${step2}\n${step3}`,
    noGrant,
    ...(print ? { print } : {}),
  });
}

/** `portcullis dev …`: runs the gateway until it stops (this process exits with it). */
export async function devCommand(argv: string[]): Promise<void> {
  const a = commandOptions("dev", argv, DEV_OPTIONS, HELP.dev);
  // In a gateway project (npx portcullis init) the config is its portcullis.yaml.
  if (typeof a.config !== "string" && existsSync("portcullis.yaml") && projectOf("portcullis.yaml")) a.config = "portcullis.yaml";
  if (typeof a.config !== "string") usageError("dev", "give --config FILE (in a gateway project, portcullis.yaml is the default)");
  const port = portOf("dev", a.port, 8787);
  const { configFileText, validate } = await import("./validate.ts");
  const v = await validate(a.config, { text: configFileText("dev", a.config) });
  if (!v.ok) {
    console.error(`${a.config}: invalid\n${problemList(v.problems)}`);
    process.exit(1);
  }
  await rulesBeforeStart(a.config, a.force === true);
  // A project's Worker is its own bundle, serving the config built into it (as deployed); here, the var.
  const project = projectOf(a.config);
  if (project) writeConfigModule(project, v.text);
  const persistTo = stateDir(a["persist-to"]);
  const child = startGateway({
    ...(project ? { project } : { configText: v.text }),
    port,
    persistTo,
    signingKey: await devSigningKey(),
    extraVars: secretsFromEnv(v.text, v.cfg),
  });
  console.log(`portcullis: gateway on http://127.0.0.1:${port}/mcp (its state in ${persistTo})`);
  stopChildrenOnSignal([child]);
  child.on("exit", (code) => process.exit(code ?? 0));
  const origin = gatewayOrigin("127.0.0.1", port);
  // The banner first, then the guide (console URL, approver sign-in, try-it recipe) last on screen, as `start` prints them.
  void classificationBanner({ cfg: v.cfg, origin }).then(() => devGuide({ file: a.config as string, cfg: v.cfg, port, origin }));
}

/** `portcullis check --config FILE [--json]`: exit 0 ok (warnings printed), 1 invalid. */
export async function checkCommand(argv: string[]): Promise<void> {
  const a = commandOptions("check", argv, CHECK_OPTIONS, HELP.check);
  if (typeof a.config !== "string") usageError("check", "give --config FILE (or --self-probe)");
  const { configFileText, validate } = await import("./validate.ts");
  const v = await validate(a.config, { text: configFileText("check", a.config) });
  // Rules, obligations and history queries that name no tool the mappings name: warnings (doctor --live and reload check the real lists).
  const { mappedCoverage } = await import("./doctor-live.ts");
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
  console.error(`${a.config}: invalid\n${problemList(v.problems)}`);
  process.exit(1);
}

/** The most a Worker var holds (Cloudflare's limit): 5 KB. */
const VAR_LIMIT = 5 * 1024;

/** `portcullis doctor --config FILE [--local|--deployed] [--json]`: exit 0 sound, 1 refused. */
export async function doctorCommand(argv: string[]): Promise<void> {
  const a = commandOptions("doctor", argv, DOCTOR_OPTIONS, HELP.doctor);
  if (typeof a.config !== "string") usageError("doctor", "give --config FILE (or --clients, for the MCP clients on this machine)");
  if (a.local && a.deployed) usageError("doctor", "--local and --deployed: give one");
  // Where will it run? --local: on loopback (portcullis dev); --deployed: on a public hostname.
  // Default: a config that allows unauthenticated use is a local one.
  const { configFileText, validate } = await import("./validate.ts");
  const text = configFileText("doctor", a.config);
  const local = a.local === true ? true : a.deployed === true ? false : !/^\s*required:\s*true\b/m.test(text);
  const checked = await validate(a.config, { onLoopback: local, secrets: "static", text });
  const where = local ? "served on loopback" : "deployed";
  // Deployed from this repository the config travels as a var, which holds at most 5 KB; a project's bundle carries any size.
  const v =
    checked.ok && !local && !projectOf(a.config) && Buffer.byteLength(checked.text) > VAR_LIMIT
      ? {
          ok: false as const,
          text: checked.text,
          problems: [
            `the inlined config is ${(Buffer.byteLength(checked.text) / 1024).toFixed(1)} KB: a Worker var (PORTCULLIS_CONFIG) holds at most 5 KB. Deploy it from a gateway project (npx portcullis init DIR, then npx portcullis deploy), which builds the config into the bundle`,
          ],
        }
      : checked;
  if (a.json) {
    console.log(JSON.stringify({ ok: v.ok, config: a.config, where, problems: v.ok ? [] : v.problems }, null, 2));
    process.exit(v.ok ? 0 : 1);
  }
  if (v.ok) {
    console.log(`${a.config}: sound (${where}; ${v.cfg.upstreams.length} upstream${v.cfg.upstreams.length === 1 ? "" : "s"})`);
    return;
  }
  console.error(`${a.config}: refused (${where})\n${problemList(v.problems)}`);
  process.exit(1);
}
