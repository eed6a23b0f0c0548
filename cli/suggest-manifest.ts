/**
 * `portcullis suggest-manifest --config FILE --upstream NAME`: a draft mapping file
 * (mappings/<upstream>.yaml format) from the upstream's tools/list — for each tool the heuristic's
 * guess (effect, verb, axes), the tool's own annotations and description in a comment, and
 * schema_hash pinned to its current hash. Owns the draft's text, where it may be written, and the
 * command's exit codes (0 drafted, 1 the upstream could not be read or the file was refused, 2 usage
 * or an invalid config). The guess is src/governance/classify.ts's, the format
 * src/config/mapping-schema.ts's. Must never: overwrite a file without `--force`, write a draft
 * where a gateway would load it unreviewed (the config's mappings_dir, under an upstream's name),
 * or print a header value or a URL's userinfo or query.
 */
import { existsSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, extname, isAbsolute, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import type { GatewayConfig, UpstreamConfig } from "../src/config/gateway-config.ts";
import { mappingFileSchema } from "../src/config/mapping-schema.ts";
import { type CatalogTool, catalogEntry } from "../src/governance/catalog-entry.ts";
import { classifyTool } from "../src/governance/classify.ts";
import { toolAllowed } from "../src/governance/grant-scope.ts";
import { isObject, type Json } from "../src/wire/jsonrpc.ts";
import { FLAG, HELP_OPTION, type Options, STRING, UsageError } from "./args.ts";
import { timeoutArg } from "./classify.ts";
import { codeOf } from "./gateway-http.ts";
import { listUpstreamTools, printableUrl, Unreachable } from "./mcp-list.ts";
import { loadGatewayConfig } from "./validate.ts";

export const HELP = `usage: portcullis suggest-manifest --config FILE --upstream NAME [--out FILE] [--force] [--timeout 15s]
  Drafts a mapping file (mappings/<upstream>.yaml format) from the upstream's tools/list: for each tool
  the heuristic's guess — effect, verb, axes — with the tool's own annotations and description in a
  comment, and schema_hash pinned to its current hash. A draft is never enforced until reviewed:
  review every effect, then move it into mappings_dir as <upstream>.yaml.
  --out FILE  write the draft there (default: print it); an existing FILE is never overwritten
              without --force, and a file in the config's mappings_dir named after an upstream is
              refused (the gateway would load it unreviewed)
  --timeout   for the upstream (default 15s)
exit: 0 drafted, 1 the upstream could not be read or the file was refused, 2 usage or invalid config`;

export const SUGGEST_OPTIONS = { config: STRING, upstream: STRING, out: STRING, force: FLAG, timeout: STRING, ...HELP_OPTION } as const;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** The server's own annotations as the starter mappings comment them: `ro true, destr -, idem false, open -`. */
function annotationsComment(annotations: CatalogTool["annotations"]): string {
  const v = (k: string) => {
    const hint = annotations?.[k];
    return typeof hint === "boolean" ? String(hint) : "-";
  };
  return `ro ${v("readOnlyHint")}, destr ${v("destructiveHint")}, idem ${v("idempotentHint")}, open ${v("openWorldHint")}`;
}

/** One line of text fit for a YAML comment: no control characters, at most `max` characters. */
function commentText(s: string, max = 140): string {
  const one = String(s)
    .replace(/[\p{Cc}\u2028\u2029]+/gu, " ")
    .replace(/\s+/g, " ")
    .trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** A mapping key: plain when YAML reads it back as that same string, else double-quoted (JSON is valid YAML). */
function yamlKey(name: string): string {
  return /^[A-Za-z_][A-Za-z0-9_.-]*$/.test(name) && !/^(true|false|null|yes|no|on|off|y|n|~)$/i.test(name) ? name : JSON.stringify(name);
}

const SOURCE_NOTE: Record<string, string> = {
  default: "default: nothing in its name or annotations",
};

/**
 * The text of a draft mapping file for `upstream` from its listed tools (raw tools/list items):
 * the heuristic's effect, verb and axes (classify.ts, with no mappings), each tool's annotations
 * and description in comments, `schema_hash` pinned to catalog.ts's hash. Checked against
 * mappingFileSchema before it is returned (a draft that would not load is a bug: it throws).
 * Tools the upstream's allow/deny hides are drafted too, marked so (allow/deny may change).
 */
export function draftManifest({ upstream, tools, date = new Date() }: { upstream: UpstreamConfig; tools: Json[]; date?: Date }): {
  text: string;
  drafted: number;
} {
  const none = { loaded: false, get: () => undefined };
  const seen = new Set<string>();
  const entries: { tool: CatalogTool; c: ReturnType<typeof classifyTool>; description: string }[] = [];
  const skipped: string[] = [];
  for (const item of tools) {
    if (!isObject(item) || typeof item.name !== "string") continue;
    if (seen.has(item.name)) continue;
    seen.add(item.name);
    if (item.name.length === 0 || item.name.length > 128) {
      skipped.push(item.name.length === 0 ? "(a tool with an empty name)" : `${item.name.slice(0, 40)}… (name longer than 128 characters)`);
      continue;
    }
    const tool = catalogEntry(item, item.name);
    if (!tool) continue;
    entries.push({ tool, c: classifyTool({ upstream, tool }, none), description: typeof item.description === "string" ? item.description : "" });
  }
  const day = date.toISOString().slice(0, 10);
  const lines = [
    `# DRAFT — generated by portcullis suggest-manifest on ${day} from ${printableUrl(upstream.url)}; never enforced until reviewed: review every effect, then move it into mappings_dir`,
    `# Upstream "${upstream.name}": ${plural(entries.length, "tool")} drafted from its tools/list. Move the reviewed file to <mappings_dir>/${upstream.name}.yaml.`,
    "# Every effect below is a guess: the name heuristic (src/governance/classify.ts), which the server's",
    "# annotations may only make more cautious, or the conservative default (irreversible, systemic) where",
    "# nothing was known. Annotations are the server's own untrusted hints: ro = readOnlyHint,",
    '# destr = destructiveHint, idem = idempotentHint, open = openWorldHint ("-" where the server states none).',
    "# Consider `approval: required`, `permission`, `magnitude` and `arguments` (full | hashed | redacted) for each tool.",
    "# schema_hash pins each tool's schema as listed today: if it changes, calls are refused until the mapping is reviewed.",
    ...skipped.map((s) => `# skipped: ${commentText(s)}`),
  ];
  if (entries.length === 0) lines.push("tools: {}");
  else lines.push("tools:");
  for (const { tool, c, description } of entries) {
    if (description) lines.push(`  # ${commentText(description)}`);
    const hidden = toolAllowed(upstream, tool.name) ? "" : "; hidden by this config's allow/deny today";
    lines.push(`  # ${annotationsComment(tool.annotations)}; guess: ${SOURCE_NOTE[c.source] ?? c.source}${hidden}`);
    lines.push(`  ${yamlKey(tool.name)}:`);
    lines.push(`    effect: ${c.effect}`);
    if (c.verb) lines.push(`    verb: ${c.verb}`);
    lines.push(`    axes: { reversibility: ${c.axes.reversibility}, blast_radius: ${c.axes.blastRadius}, externality: ${c.axes.externality} }`);
    lines.push(`    schema_hash: "${tool.schemaHash}"`);
  }
  const text = `${lines.join("\n")}\n`;
  const check = mappingFileSchema.safeParse(parseYaml(text, { uniqueKeys: true }));
  if (!check.success)
    throw new Error(`the draft does not parse as a mapping file: ${check.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`);
  return { text, drafted: entries.length };
}

/**
 * Refuses a draft path the gateway would load unreviewed: a `<upstream>.yaml|yml` file, for an
 * upstream of this config, in the config's mappings_dir. Returns the sentence, or null.
 */
function enforcedPath(out: string, configFile: string, raw: string, cfg: GatewayConfig): string | null {
  let doc: unknown;
  try {
    doc = parseYaml(raw);
  } catch {
    return null;
  }
  if (!isObject(doc) || typeof doc.mappings_dir !== "string") return null;
  const base = dirname(resolve(configFile));
  const dir = isAbsolute(doc.mappings_dir) ? doc.mappings_dir : resolve(base, doc.mappings_dir);
  const ext = extname(out);
  if (![".yaml", ".yml"].includes(ext) || !cfg.upstreams.some((u) => u.name === basename(out, ext))) return null;
  const real = (p: string) => {
    try {
      return realpathSync(p);
    } catch {
      return resolve(p);
    }
  };
  if (real(dirname(resolve(out))) !== real(dir)) return null;
  return `${out} is in the config's mappings_dir (${doc.mappings_dir}), where the gateway would load it unreviewed: write the draft elsewhere, review every effect, then move it there`;
}

/** `portcullis suggest-manifest …`, its options parsed: the exit code. */
export async function suggestCommand(a: Options<typeof SUGGEST_OPTIONS>): Promise<number> {
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  if (typeof a.upstream !== "string") throw new UsageError("give --upstream NAME (one of the config's upstreams)");
  const timeoutMs = timeoutArg(a.timeout);
  const { cfg, raw } = await loadGatewayConfig(a.config);
  const up = cfg.upstreams.find((u) => u.name === a.upstream);
  if (!up) throw new UsageError(`--upstream: ${a.config} has no upstream named ${a.upstream} (it has: ${cfg.upstreams.map((u) => u.name).join(", ")})`);
  const out = typeof a.out === "string" ? a.out : undefined;
  const exists = () => `portcullis suggest-manifest: refused: ${out} exists and is never overwritten (pass --force to replace it, or choose another --out)`;
  if (out !== undefined) {
    const enforced = enforcedPath(out, a.config, raw, cfg);
    if (enforced) {
      console.error(`portcullis suggest-manifest: refused: ${enforced}`);
      return 1;
    }
    if (existsSync(out) && !a.force) {
      console.error(exists());
      return 1;
    }
    if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`--out: ${out} is a directory; name the file`);
  }
  let listed: Awaited<ReturnType<typeof listUpstreamTools>>;
  try {
    listed = await listUpstreamTools(up, { timeoutMs: Math.min(timeoutMs, up.timeoutMs ?? timeoutMs) });
  } catch (e) {
    if (!(e instanceof Unreachable)) throw e;
    console.error(`portcullis suggest-manifest: upstream ${up.name} (${printableUrl(up.url)}) unreachable: ${e.message}`);
    return 1;
  }
  const { text, drafted } = draftManifest({ upstream: up, tools: listed.tools });
  if (out === undefined) {
    process.stdout.write(text);
    return 0;
  }
  try {
    writeFileSync(out, text, { flag: a.force ? "w" : "wx" });
  } catch (e) {
    if (codeOf(e) === "EEXIST") {
      console.error(exists());
      return 1;
    }
    throw new UsageError(`--out: cannot write ${out} (${codeOf(e)})`);
  }
  console.error(
    `portcullis suggest-manifest: wrote a DRAFT for ${plural(drafted, "tool")} of ${up.name} to ${out}; never enforced until reviewed: review every effect, then move it into mappings_dir as ${up.name}.yaml`,
  );
  return 0;
}
