/**
 * `portcullis reload --config FILE --url GATEWAY`: hot-reloads a running gateway's config
 * (upstreams, mappings, policy) without a redeploy, over its JSON API (`PUT /v1/config`). Owns
 * the command's flags, reading FILE with its policy and mappings_dir files inlined
 * (cli/config-files.ts), the request, output and exit codes (0 stored, 1 the gateway refused the
 * config — every problem printed, the previous one keeps serving — 2 usage or a file problem, 3
 * the gateway refused otherwise or could not be reached), the rule check before a reload (shared
 * with `add --gateway` and `dev`), and putConfig, the request itself, which `add --gateway`
 * (cli/add.ts) reuses. The token comes from PORTCULLIS_TOKEN or --token (an admin grant); the
 * actor recorded is its principal. Must never: print or log a token or the config text, or send
 * either anywhere but the gateway named by --url.
 */
import { readFileSync } from "node:fs";
import { FLAG, HELP_OPTION, namesOf, type Options, parseOptions, STRING, UsageError } from "./args.ts";
import { inlineConfigFiles } from "./config-files.ts";
import { type LiveCoverage, liveCoverageOf } from "./doctor-live.ts";
import { answerOf, exitCodeOf, FetchError, gatewayOf, isObject, Refused, refusal, send, tokenOf } from "./gateway-http.ts";

const HELP = `usage: portcullis reload --config FILE --url GATEWAY [--force] [--json]
  stores FILE (its policy and mappings_dir files inlined) as the next version of the gateway's
  config: upstreams, mappings and policy change without a redeploy, every isolate serves it within
  seconds, and open sessions are told their tool list changed. The gateway validates it whole
  against its own secrets and egress rules; a config with any problem is refused (each one
  printed) and the previous one keeps serving. The change is a ledger record naming the version
  and you. Needs an admin token.
  Before sending, the policy is checked against the upstreams' real tool lists (contacted from
  this machine, as doctor --live does): in enforce, a deny or require_approval rule, or a rule with
  obligations, that matches no tool refuses the reload (exit 1, each rule named with the nearest
  real names) — the policy would say deny while the gateway allows. The gateway also refuses a
  config that renames an upstream's tools for agents (its namespacing changes: open sessions listed
  the old names). --force sends it anyway and accepts the rename. When the upstreams cannot be
  listed from here the rule check is skipped, and says so.
Give the token in PORTCULLIS_TOKEN (a --token on the command line is visible to other processes on this machine).
exit: 0 stored (or already current), 1 the config was refused (by the gateway, or by the rule check), 2 usage or an unreadable file, 3 refused otherwise or unreachable`;

const RELOAD_OPTIONS = { config: STRING, url: STRING, token: STRING, force: FLAG, json: FLAG, ...HELP_OPTION } as const;

/** The options of `reload` (help.test.ts checks its --help names them all). */
export const KNOWN = namesOf(RELOAD_OPTIONS);

/** What the rule check says around its findings, in the words of the command that runs it. */
export interface RuleCheckWords {
  command: string;
  unchecked: string;
  forced: string;
  refused: string;
  after: string;
  fix: string;
}

/** What `reload` (and `add --gateway`) says around the rule check; `dev` says its own (cli/local.ts). */
const RELOAD_WORDS: RuleCheckWords = {
  command: "portcullis reload",
  unchecked: "",
  forced: "sent",
  refused: "not sent",
  after: "; the previous config keeps serving",
  fix: "fix the rule's match",
};

/**
 * The rule check before a reload (cli/doctor-live.ts liveCoverageOf): throws Refused when, in
 * enforce, a rule that should stop calls matches no real tool, unless `force`. Prints what it
 * found (to stderr, or in `report` for --json), in `words` (the command's own). Shared with
 * `add --gateway` and, before it starts a gateway, `dev`.
 */
export async function checkRulesBeforeReload(
  file: string,
  { force = false, json = false, gateway, words = RELOAD_WORDS }: { force?: boolean; json?: boolean; gateway?: URL; words?: RuleCheckWords } = {},
): Promise<LiveCoverage> {
  const onLoopback = gateway ? ["127.0.0.1", "localhost", "[::1]"].includes(gateway.hostname) : true;
  const c = await liveCoverageOf(file, { onLoopback });
  const w = words;
  const say = (line: string) => {
    if (!json) console.error(line);
  };
  if (!c.checked) say(`${w.command}: rules ${c.reason}${w.unchecked}`);
  for (const u of c.unmatched) if (!c.blocking.includes(u)) say(`${w.command}: warning: ${u.line}`);
  if (c.blocking.length === 0) return c;
  const lines = c.blocking.map((u) => u.line);
  if (force) {
    for (const l of lines) say(`${w.command}: --force: ${w.forced} although ${l}`);
    return c;
  }
  if (json) console.log(JSON.stringify({ ok: false, problems: lines, unmatched_rules: c.unmatched }, null, 2));
  else
    console.error(
      `${w.command}: ${w.refused}: in enforce, ${lines.length === 1 ? "a rule matches" : "rules match"} no real tool (the gateway would allow what ${lines.length === 1 ? "it means" : "they mean"} to stop)${w.after}:\n  - ${lines.join("\n  - ")}\n${w.fix} (or --force)`,
    );
  throw new Refused(`${lines.length} rule${lines.length === 1 ? "" : "s"} matching no tool in ${file}`);
}

/** FILE's text with its policy and mappings inlined; a UsageError naming every file problem. */
function configText(file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    throw new UsageError(`cannot read --config ${file}`);
  }
  const out = inlineConfigFiles(text, file);
  if (out.problems.length) throw new UsageError(`the config's files could not be read:\n  - ${out.problems.join("\n  - ")}`);
  return out.text;
}

/** The gateway refused the config itself (400 with its problems): `problems` lists each one, `where` the request. */
export class ConfigRefused extends Refused {
  readonly where: string;
  readonly problems: string[];
  constructor(where: string, problems: string[]) {
    super(`${problems.length} problem${problems.length === 1 ? "" : "s"}`);
    this.where = where;
    this.problems = problems;
  }
}

/** A stored config version, as the gateway answers PUT /v1/config. */
export interface StoredVersion {
  version: number;
  sha256: string;
  changed?: unknown;
  warnings?: unknown;
  [k: string]: unknown;
}

/**
 * Stores config `text` (its files already inlined) as the next version of the config of the
 * gateway at `base` (a URL), with admin `token`: the gateway's answer `{ version, sha256, changed }`.
 * Throws ConfigRefused when the gateway refuses the config (the previous one keeps serving),
 * FetchError when it refuses otherwise or cannot be reached. Used by `reload` and `add --gateway`.
 */
export async function putConfig(base: URL, token: string, text: string, { force = false } = {}): Promise<StoredVersion> {
  const { res, where } = await send(base, "PUT", "/v1/config", token, { body: force ? { config: text, force: true } : { config: text }, timeoutMs: 30_000 });
  const answer = await answerOf(res);
  const json = answer.json;
  if (res.status === 400 && isObject(json) && Array.isArray(json.problems)) throw new ConfigRefused(where, json.problems.map(String));
  if (!res.ok) throw new FetchError(refusal(where, res.status, answer));
  if (!isObject(json) || typeof json.version !== "number" || typeof json.sha256 !== "string")
    throw new FetchError(`${where}: the answer is not a stored config version`);
  return { ...json, version: json.version, sha256: json.sha256 };
}

/** The line `reload` and `add --gateway` print for a stored version, with what the gateway's own rule check reported. */
export const versionLine = (json: StoredVersion): string =>
  [
    json.changed === false
      ? `already current: config version ${json.version} (sha256 ${json.sha256})`
      : `reloaded: config version ${json.version} (sha256 ${json.sha256})`,
    ...(Array.isArray(json.warnings) ? json.warnings.map((w) => `  the gateway reports: ${w}`) : []),
  ].join("\n");

async function reload(a: Options<typeof RELOAD_OPTIONS>): Promise<number> {
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  const base = gatewayOf(a.url);
  const token = tokenOf(a);
  const text = configText(a.config);
  await checkRulesBeforeReload(a.config, { force: Boolean(a.force), json: Boolean(a.json), gateway: base });
  let json: StoredVersion;
  try {
    json = await putConfig(base, token, text, { force: Boolean(a.force) });
  } catch (e) {
    if (!(e instanceof ConfigRefused)) throw e;
    if (a.json) console.log(JSON.stringify({ ok: false, problems: e.problems }, null, 2));
    else console.error(`${e.where} → 400: the config was refused; the previous one keeps serving:\n  - ${e.problems.join("\n  - ")}`);
    throw new Refused(`${e.message} in ${a.config}`);
  }
  if (a.json) console.log(JSON.stringify(json, null, 2));
  else console.log(versionLine(json));
  return 0;
}

/** Runs `portcullis reload <argv…>`; the exit code. */
export async function reloadCommand(argv: string[]): Promise<number> {
  return exitCodeOf("portcullis reload", async () => {
    const a = parseOptions(argv, RELOAD_OPTIONS);
    if (a.help) {
      console.log(HELP);
      return 0;
    }
    return await reload(a);
  });
}
