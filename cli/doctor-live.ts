/**
 * `portcullis doctor --config FILE --live`: the static doctor, then each upstream contacted from
 * this machine as an MCP client (its tools/list), and the policy checked against the real tool
 * lists; and the policy checks `check` (against the tools the mappings name), `reload`, `add
 * --gateway` and `dev` (against the real lists) share. Owns the reachability report, the coverage
 * verdicts (in enforce a deny, require_approval or obligation rule that matches no tool is a
 * problem; other unmatched rules are warnings), and the command's output and exit codes (0 sound
 * and reachable, 1 a problem or an unreachable upstream, 2 usage). What a rule matches is
 * src/governance/policy-coverage.ts's; the MCP client is cli/mcp-list.ts's. Must never: contact an
 * upstream the egress rules refuse, or print a header value (reasons are scrubbed of them).
 */
import { readFileSync } from "node:fs";
import type { GatewayConfig } from "../src/config/gateway-config.ts";
import { checkEgress } from "../src/egress/rules.ts";
import { compiledPolicy } from "../src/governance/engine.ts";
import { describeUnmatched, type KnownTool, type UnmatchedRule, unmatchedRules } from "../src/governance/policy-coverage.ts";
import { exposeName, knownTools } from "../src/protocol/exposed-names.ts";
import { durationArg, FLAG, HELP_OPTION, type Options, STRING, UsageError } from "./args.ts";
import { codeOf, isObject, messageOf } from "./gateway-http.ts";
import { HELP } from "./local.ts";
import { listUpstreamTools, printableUrl } from "./mcp-list.ts";
import { loadGatewayConfig, validate } from "./validate.ts";

/** The options of `doctor` as this file runs it (--live). */
export const DOCTOR_OPTIONS = { config: STRING, live: FLAG, local: FLAG, deployed: FLAG, timeout: STRING, json: FLAG, ...HELP_OPTION } as const;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** One upstream as `doctor --live` found it. */
export interface Reachability {
  name: string;
  url: string;
  reachable: boolean;
  contacted: boolean;
  era?: string;
  protocol_version?: string;
  tools?: number;
  tool_names?: string[];
  ms?: number;
  note?: string;
  error?: string;
}

/** An unmatched rule with its report line. */
export type Unmatched = UnmatchedRule & { line: string };

/**
 * Each upstream of `cfg` asked for its tools/list (at once, each bounded by `timeoutMs`): `{ name,
 * url, reachable, tools?, era?, note?, error? }`. Upstreams the egress rules refuse are not contacted.
 */
export async function upstreamReachability(cfg: GatewayConfig, { timeoutMs, onLoopback }: { timeoutMs: number; onLoopback: boolean }): Promise<Reachability[]> {
  return Promise.all(
    cfg.upstreams.map(async (up): Promise<Reachability> => {
      const base = { name: up.name, url: printableUrl(up.url) };
      const egress = checkEgress(up.url, cfg.egress, { gatewayOnLoopback: onLoopback });
      if (!egress.ok) return { ...base, reachable: false, contacted: false, error: `not contacted: the egress rules refuse it (${egress.reason})` };
      const started = Date.now();
      try {
        const r = await listUpstreamTools(up, { timeoutMs });
        return {
          ...base,
          reachable: true,
          contacted: true,
          era: r.era,
          protocol_version: r.protocolVersion,
          tools: r.tools.length,
          tool_names: r.tools.flatMap((t) => (isObject(t) && typeof t.name === "string" ? [t.name] : [])),
          ms: Date.now() - started,
        };
      } catch (e) {
        const error = messageOf(e);
        // It answered, but wants the credential each principal brings: reachable.
        if (up.credentials?.mode === "per_principal" && /^refused the credentials/.test(error))
          return { ...base, reachable: true, contacted: true, note: `${error}`, ms: Date.now() - started };
        return { ...base, reachable: false, contacted: true, error, ms: Date.now() - started };
      }
    }),
  );
}

function coverageOver(cfg: GatewayConfig, known: KnownTool[], describe = describeUnmatched): Unmatched[] {
  return unmatchedRules(compiledPolicy(cfg), known, cfg.policy).map((u) => ({ ...u, line: describe(u, known.length) }));
}

/**
 * The policy against the upstreams' real tool lists (`upstreams` from upstreamReachability):
 * `{ checked, reason?, unmatched: [{…, line}] }`. Checked only when every upstream listed its
 * tools — a rule naming an unreachable upstream's tool cannot be told dead.
 */
export async function policyCoverage(cfg: GatewayConfig, upstreams: Reachability[]): Promise<{ checked: boolean; reason?: string; unmatched: Unmatched[] }> {
  const missing = upstreams.filter((u) => !Array.isArray(u.tool_names));
  if (missing.length) return { checked: false, reason: `not checked: ${missing.map((u) => u.name).join(", ")} listed no tools`, unmatched: [] };
  // As the gateway judges them (src/services/policy-live.ts): the names each upstream listed, as the config exposes them.
  const known = knownTools(
    cfg.upstreams,
    cfg.upstreams.map((up) => [up, upstreams.find((u) => u.name === up.name)?.tool_names ?? []] as const),
  );
  return { checked: true, unmatched: coverageOver(cfg, known) };
}

/**
 * The policy against the tools the mappings name (offline, for `check`): the unmatched rules, each
 * with its report line ("… which matches no tool of the N the mappings name"). Only upstreams
 * with a mapping count: a rule on an unmapped upstream's tool cannot be told dead offline.
 */
export async function mappedCoverage(cfg: GatewayConfig): Promise<Unmatched[]> {
  const mapped = cfg.upstreams.filter((up) => cfg.mappings?.[up.name]);
  if (mapped.length === 0) return [];
  const known = mapped.flatMap((up) => Object.keys(cfg.mappings[up.name] ?? {}).map((tool) => ({ upstream: up.name, tool, exposed: exposeName(up, tool) })));
  // Rules about upstreams without a mapping are not judged here.
  const judged = { ...cfg, policy: cfg.policy, upstreams: mapped };
  return coverageOver(judged, known, (u, n) => describeUnmatched(u, n).replace(/ known( —|$)/, " the mappings name$1")).filter(
    (u) => !u.names.some((n) => cfg.upstreams.some((up) => !mapped.includes(up) && `upstream ${up.name}` === n)),
  );
}

/** What the live rule check found: `blocking` are the unmatched rules that refuse the config in enforce. */
export interface LiveCoverage {
  checked: boolean;
  reason?: string;
  mode?: GatewayConfig["mode"];
  unmatched: Unmatched[];
  blocking: Unmatched[];
}

/**
 * The policy of config FILE against its upstreams' real tool lists, contacted from this machine
 * (as `doctor --live` does): `{ checked, reason?, mode?, unmatched, blocking }`, where `blocking`
 * are the unmatched rules that refuse the config in enforce. Never throws for a config that does
 * not load here or an upstream that does not answer: the check is then skipped, with the reason.
 */
export async function liveCoverageOf(file: string, { timeoutMs = 5000, onLoopback = true } = {}): Promise<LiveCoverage> {
  let cfg: GatewayConfig;
  try {
    cfg = (await loadGatewayConfig(file)).cfg;
  } catch {
    return { checked: false, reason: "not checked: the config does not load with this environment", unmatched: [], blocking: [] };
  }
  const upstreams = await upstreamReachability(cfg, { timeoutMs, onLoopback });
  const down = upstreams.filter((u) => !u.reachable);
  if (down.length)
    return { checked: false, reason: `not checked: ${down.map((u) => u.name).join(", ")} did not list its tools from here`, unmatched: [], blocking: [] };
  const coverage = await policyCoverage(cfg, upstreams);
  return { ...coverage, mode: cfg.mode, blocking: cfg.mode === "enforce" ? coverage.unmatched.filter((u) => u.blocking) : [] };
}

/** `portcullis doctor --config FILE --live …`, its options parsed: the exit code. */
export async function doctorLiveCommand(a: Options<typeof DOCTOR_OPTIONS>): Promise<number> {
  if (a.help) {
    console.log(HELP.doctor);
    return 0;
  }
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  if (!a.live) throw new UsageError("this form is doctor --config FILE --live (without --live, npx portcullis doctor --config FILE)");
  if (a.local && a.deployed) throw new UsageError("--local and --deployed: give one");
  const timeoutMs = durationArg(a.timeout, 5000);
  let text: string;
  try {
    text = readFileSync(a.config, "utf8");
  } catch (e) {
    throw new UsageError(`--config: cannot read ${a.config} (${codeOf(e)})`);
  }
  const local = a.local ? true : a.deployed ? false : !/^\s*required:\s*true\b/m.test(text);
  const where = local ? "served on loopback" : "deployed";
  const v = await validate(a.config, { onLoopback: local, secrets: "static" });
  const problems = v.ok ? [] : [...v.problems];
  // The live check sends the config's headers: ${NAME} from this environment, as classify does.
  let upstreams: Reachability[] = [];
  let cfg: GatewayConfig | undefined;
  try {
    cfg = (await loadGatewayConfig(a.config)).cfg;
  } catch (e) {
    if (e instanceof UsageError) throw e;
    const lines = messageOf(e)
      .split("\n")
      .slice(1)
      .map((l) => l.replace(/^\s*-\s*/, ""));
    if (v.ok) problems.push(...lines.map((l) => `with this environment: ${l}`));
    problems.push("upstreams not contacted: the config does not load with this environment (set the variables it names, then run again)");
  }
  if (cfg) {
    if (!a.json) console.error(`portcullis doctor: contacting ${plural(cfg.upstreams.length, "upstream")} (at most ${timeoutMs / 1000} s each)`);
    upstreams = await upstreamReachability(cfg, { timeoutMs, onLoopback: local });
  }
  const unreachable = upstreams.filter((u) => !u.reachable);
  // Rules that name no real tool: in enforce a deny, require_approval or obligation that matches nothing refuses the config; otherwise reported.
  const coverage = cfg && unreachable.length === 0 ? await policyCoverage(cfg, upstreams) : { checked: false, unmatched: [] };
  const enforce = cfg?.mode === "enforce";
  const dead = coverage.unmatched.filter((u) => enforce && u.blocking);
  const notes = coverage.unmatched.filter((u) => !(enforce && u.blocking));
  for (const u of dead) problems.push(`${u.line} (in enforce the gateway would allow what this rule means to stop: fix its match)`);
  const ok = problems.length === 0 && unreachable.length === 0;
  if (a.json) {
    const all = [...problems, ...unreachable.filter((u) => u.contacted).map((u) => `upstream ${u.name} unreachable: ${u.error}`)];
    const shown = upstreams.map(({ tool_names: _names, ...u }) => u);
    console.log(
      JSON.stringify(
        { ok, config: a.config, where, problems: all, warnings: notes.map((u) => u.line), unmatched_rules: coverage.unmatched, upstreams: shown },
        null,
        2,
      ),
    );
    return ok ? 0 : 1;
  }
  const n = v.ok ? v.cfg.upstreams.length : cfg?.upstreams.length;
  console.log(`${a.config}: ${problems.length === 0 ? "sound" : "refused"} (${where}${n !== undefined ? `; ${plural(n, "upstream")}` : ""})`);
  for (const p of problems) console.log(`  - ${p}`);
  for (const u of notes) console.log(`  warning: ${u.line}`);
  if (upstreams.length) console.log("upstreams:");
  for (const u of upstreams) {
    if (u.reachable && u.note) console.log(`  REACHABLE   ${u.name} (${u.url}): ${u.note}`);
    else if (u.reachable)
      console.log(`  REACHABLE   ${u.name} (${u.url}, ${u.era} ${u.protocol_version}): ${plural(u.tools ?? 0, "tool")} listed in ${u.ms} ms`);
    else console.log(`  UNREACHABLE ${u.name} (${u.url}): ${u.error}`);
  }
  if (unreachable.length)
    console.log(
      `${plural(unreachable.length, "upstream")} unreachable: start ${unreachable.length === 1 ? "it" : "them"}, or fix the url and headers in ${a.config}`,
    );
  return ok ? 0 : 1;
}
