/**
 * `portcullis classify` and the classification banner `dev` and `start` print once their gateway
 * answers /healthz: every upstream's tools/list (cli/mcp-list.ts), classified with the config's
 * mappings, beside what the policy makes of each tool. Owns the report (text and JSON), the
 * command's exit codes (0 fine, 1 a BLOCK or an unreachable upstream, 2 usage or an invalid
 * config) and the banner's budget. Classification itself is src/governance/classify.ts, the schema
 * hash src/governance/catalog-entry.ts: this file only feeds them and prints what they say. Must never:
 * print a header value, fail `dev` or `start` (the banner never throws), or wait on an upstream
 * without a bound.
 */
import type { GatewayConfig, UpstreamConfig } from "../src/config/gateway-config.ts";
import { catalogEntry, type CatalogTool } from "../src/governance/catalog-entry.ts";
import { type Banner, classificationBanner, classifyTool, formatBanner } from "../src/governance/classify.ts";
import { compiledPolicy, mappingsOf } from "../src/governance/engine.ts";
import { toolAllowed } from "../src/governance/grant-scope.ts";
import { toolPolicy } from "../src/governance/policy-view.ts";
import { exposeName } from "../src/protocol/exposed-names.ts";
import { isObject, type Json } from "../src/wire/jsonrpc.ts";
import { durationMs, FLAG, HELP_OPTION, type Options, STRING, UsageError } from "./args.ts";
import { messageOf } from "./gateway-http.ts";
import { DEFAULT_TIMEOUT_MS, listUpstreamTools, printableUrl, scrub, Unreachable } from "./mcp-list.ts";
import { loadGatewayConfig } from "./validate.ts";

/** The start banner: every upstream is asked at once, and none is waited on longer than this. */
const BANNER_BUDGET_MS = 5_000;

export const HELP = `usage: portcullis classify --config FILE [--json] [--live] [--timeout 15s]
  Reads every upstream's tools/list (as an MCP client: 2026-07-28 server/discover, else legacy
  initialize; the config's headers, \${NAME} from this environment) and prints the classification
  banner: one line per tool the config exposes (OK / NOTE / WARN / BLOCK, with the reason), the
  totals, and one line per upstream. Mappings are the config's (mappings_dir and mappings:).
    OK     mapped (and its pinned schema_hash, if any, still matches)
    NOTE   unmapped, looks like a read (name or readOnlyHint): add a mapping to rely on it
    WARN   unmapped, looks like a write: add a mapping before relying on it
    BLOCK  unclassified (nothing in its name or annotations), or its schema drifted from the
           pinned schema_hash: refused in enforce
  --json     print a machine-readable report instead ({ok, mode, totals, tools, upstreams, problems})
  --live     the tool lists are read from the upstreams now (always so: there is no offline catalog)
  --timeout  per upstream (default 15s)
  Tools a server lists only to clients declaring a capability (sampling, elicitation, roots, tasks)
  are not seen: this command declares none. Tools hidden by an upstream's allow/deny are counted, not listed.
exit: 0 no tool is BLOCK and every upstream answered, 1 otherwise (the reason is printed), 2 usage or invalid config`;

export const CLASSIFY_OPTIONS = { config: STRING, json: FLAG, live: FLAG, timeout: STRING, ...HELP_OPTION } as const;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** `--timeout` of classify and suggest-manifest: 500ms, 15s or 2m, between 100 ms and 10 minutes. */
export function timeoutArg(v: string | undefined): number {
  if (v === undefined) return DEFAULT_TIMEOUT_MS;
  const ms = durationMs(v);
  if (!(ms >= 100 && ms <= 600_000)) throw new UsageError(`--timeout: use 500ms, 15s or 2m (between 100 ms and 10 minutes), not ${v}`);
  return ms;
}

/** One upstream in the report: whether it answered, and what it listed. */
export type UpstreamReport = { name: string; url: string } & (
  | { reachable: false; error: string }
  | { reachable: true; era: string; protocolVersion: string; listed: number; hidden: number; mappedNotListed: number; mappedNotListedNames: string[] }
);

export interface ClassifyReport {
  banner: Banner;
  tools: Record<string, unknown>[];
  upstreams: UpstreamReport[];
  mode: GatewayConfig["mode"];
  unclassifiedReads: GatewayConfig["unclassifiedReads"];
  mappingsLoaded: boolean;
}

type Listing = { up: UpstreamConfig; error: string } | { up: UpstreamConfig; error?: undefined; era: string; protocolVersion: string; tools: Json[] };

/**
 * Every upstream's tools (read at once, each bounded by `timeoutMs`), classified with the
 * config's mappings. `{ banner, tools, upstreams, mode, unclassifiedReads }`: `tools[i]` is
 * `banner.lines[i]` with its classification and hashes; each upstream says whether it answered.
 */
export async function classifyConfig(cfg: GatewayConfig, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}): Promise<ClassifyReport> {
  const policy = compiledPolicy(cfg);
  const mappings = mappingsOf(cfg);
  const listed = await Promise.all(
    cfg.upstreams.map(async (up): Promise<Listing> => {
      try {
        return { up, ...(await listUpstreamTools(up, { timeoutMs: Math.min(timeoutMs, up.timeoutMs ?? timeoutMs) })) };
      } catch (e) {
        return { up, error: e instanceof Unreachable ? e.message : scrub(messageOf(e), up) };
      }
    }),
  );
  const targets: { upstream: UpstreamConfig; tool: CatalogTool }[] = [];
  const upstreams = listed.map((l): UpstreamReport => {
    const { up } = l;
    const base = { name: up.name, url: printableUrl(up.url) };
    if (l.error !== undefined) return { ...base, reachable: false, error: l.error };
    const seen = new Set<string>();
    let hidden = 0;
    for (const item of l.tools) {
      if (!isObject(item) || typeof item.name !== "string" || seen.has(item.name)) continue;
      seen.add(item.name);
      if (!toolAllowed(up, item.name)) {
        hidden++;
        continue;
      }
      const tool = catalogEntry(item, exposeName(up, item.name));
      if (tool) targets.push({ upstream: up, tool });
    }
    const notListed = Object.keys(cfg.mappings[up.name] ?? {}).filter((t) => !seen.has(t));
    return {
      ...base,
      reachable: true,
      era: l.era,
      protocolVersion: l.protocolVersion,
      listed: seen.size,
      hidden,
      mappedNotListed: notListed.length,
      mappedNotListedNames: notListed,
    };
  });
  const banner = classificationBanner(
    targets.map((t) => ({ upstream: t.upstream.name, tool: t.tool })),
    mappings,
  );
  const tools = targets.map((t, i) => {
    const line = banner.lines[i]!; // one line per target, in order
    const c = classifyTool(t, mappings);
    const m = mappings.get(t.upstream.name, t.tool.name);
    // What the policy makes of it, beside the classification: the mapping alone does not decide.
    const tp = toolPolicy(policy, {
      exposedName: t.tool.exposedName,
      upstream: t.upstream.name,
      tool: t.tool.name,
      classification: c,
      mapping: m,
      annotations: t.tool.annotations,
    });
    const decided = `${tp.decision}${tp.rule ? ` by rule ${tp.rule}` : " (no rule: the baseline)"}`;
    line.why = `${line.why}; policy: ${decided}${tp.hidden ? ", hidden from agents" : ""}${tp.sometimes.length ? `; ${tp.sometimes.join("; ")}` : ""}`;
    return {
      upstream: t.upstream.name,
      tool: t.tool.name,
      exposed_name: t.tool.exposedName,
      level: line.level,
      why: line.why,
      mapped: m !== undefined,
      effect: c.effect,
      ...(c.verb ? { verb: c.verb } : {}),
      axes: { reversibility: c.axes.reversibility, blast_radius: c.axes.blastRadius, externality: c.axes.externality },
      source: c.source,
      policy: { decision: tp.decision, rule: tp.rule, hidden: tp.hidden, sometimes: tp.sometimes },
      schema_hash: t.tool.schemaHash,
      ...(m?.schemaHash ? { pinned_schema_hash: m.schemaHash } : {}),
      ...(t.tool.annotations ? { annotations: t.tool.annotations } : {}),
    };
  });
  return { banner, tools, upstreams, mode: cfg.mode, unclassifiedReads: cfg.unclassifiedReads, mappingsLoaded: mappings.loaded };
}

function upstreamLine(u: UpstreamReport, { forBanner = false } = {}): string {
  if (!u.reachable) {
    return forBanner
      ? `  NOTE  upstream ${u.name} (${u.url}) not reachable for the banner: ${u.error}; its tools are classified when the gateway lists them`
      : `  UNREACHABLE ${u.name} (${u.url}): ${u.error}`;
  }
  const names = u.mappedNotListedNames;
  const shown = names.slice(0, 6).join(", ") + (names.length > 6 ? ", …" : "");
  const extra = [
    u.hidden ? `${u.hidden} hidden by allow/deny` : "",
    u.mappedNotListed
      ? `${plural(u.mappedNotListed, "mapped tool")} the upstream does not list now (a server may list some tools only to clients that declare sampling, elicitation or roots, or lack ones its mapping names: ${shown})`
      : "",
  ].filter(Boolean);
  return `  ${u.name} (${u.url}, ${u.era} ${u.protocolVersion}): ${plural(u.listed, "tool")} listed${extra.length ? `, ${extra.join(", ")}` : ""}`;
}

/** The report as text: the banner (classify.ts formatBanner), the upstreams, the mode. */
export function formatReport(report: ClassifyReport, { forBanner = false } = {}): string {
  const lines = [formatBanner(report.banner), "upstreams:", ...report.upstreams.map((u) => upstreamLine(u, { forBanner }))];
  lines.push(
    `mode: ${report.mode}${report.mappingsLoaded ? "" : " (no mappings loaded)"}; unclassified_reads: ${report.unclassifiedReads}${report.mode === "enforce" ? "" : " — nothing is refused in this mode; the levels say what enforce would do"}`,
  );
  return lines.join("\n");
}

/** Why classify exits 1: BLOCK tools and unreachable upstreams, one sentence each. */
function exitProblems(report: ClassifyReport): string[] {
  const problems: string[] = [];
  const blocked = report.banner.totals.BLOCK;
  if (blocked) problems.push(`${plural(blocked, "tool")} BLOCK (refused in enforce until mapped, or until a drifted mapping is reviewed)`);
  for (const u of report.upstreams) if (!u.reachable) problems.push(`upstream ${u.name} unreachable: ${u.error}`);
  return problems;
}

/** `portcullis classify …`, its options parsed: the exit code. */
export async function classifyCommand(a: Options<typeof CLASSIFY_OPTIONS>): Promise<number> {
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  const timeoutMs = timeoutArg(a.timeout);
  const { cfg } = await loadGatewayConfig(a.config);
  const report = await classifyConfig(cfg, { timeoutMs });
  const problems = exitProblems(report);
  if (a.json) {
    const { banner, ...rest } = report;
    console.log(JSON.stringify({ ok: problems.length === 0, totals: banner.totals, ...rest, problems }, null, 2));
  } else {
    console.log(formatReport(report));
  }
  if (problems.length) {
    console.error(`portcullis classify: exit 1: ${problems.join("; ")}`);
    return 1;
  }
  return 0;
}

// ---- the banner at start -----------------------------------------------------------------------

async function healthy(url: string, waitMs: number): Promise<boolean> {
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline) {
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await r.body?.cancel();
      if (r.ok) return true;
    } catch {
      /* not up yet */
    }
    await new Promise((res) => setTimeout(res, 250).unref());
  }
  return false;
}

export interface BannerOptions {
  cfg?: GatewayConfig;
  configText?: string;
  origin: string;
  waitMs?: number;
  budgetMs?: number;
  print?: (s: string) => void;
}

/**
 * For `dev` and `start`: once the gateway at `origin` answers /healthz (waited on for at most
 * `waitMs`), prints the classification banner for its config (`cfg`, or `configText` loaded with
 * this environment), every upstream asked at once for at most `budgetMs`. Never throws and never
 * fails the command: an unreachable upstream is a NOTE line, any other failure one line saying so.
 */
export async function startBanner({
  cfg,
  configText,
  origin,
  waitMs = 180_000,
  budgetMs = BANNER_BUDGET_MS,
  print = (s) => console.log(s),
}: BannerOptions): Promise<void> {
  try {
    if (!(await healthy(`${origin}/healthz`, waitMs))) return;
    let config = cfg;
    if (!config) {
      const { loadConfig } = await import("../src/config/load.ts");
      const { PORTCULLIS_ORIGIN: _origin, ...vars } = process.env;
      config = loadConfig(configText ?? "", vars);
    }
    const report = await classifyConfig(config, { timeoutMs: budgetMs });
    const t = report.banner.totals;
    const hint = t.NOTE + t.WARN + t.BLOCK ? "\n  (npx portcullis classify --config FILE for the report; npx portcullis suggest-manifest drafts mappings)" : "";
    print(`${formatReport(report, { forBanner: true })}${hint}`);
  } catch (e) {
    print(`portcullis: no classification banner (${messageOf(e)})`);
  }
}
