/**
 * The files a config names, inlined for the Worker: `policy: <path>` becomes the parsed policy
 * and `mappings_dir: <dir>` becomes `mappings: { <upstream>: <file> }` (one `<upstream>.yaml` per
 * upstream), both relative to the config file — the Worker gets one self-contained config text
 * (PORTCULLIS_CONFIG) and never reads files. Owns that resolution and its error messages. Must
 * never: follow a path outside what the config names, or let a file that fails to parse through
 * (every problem is reported, and the caller refuses to start; a YAML error shows its file, line and
 * column and the lines around it, src/config/problems.ts).
 * Run as `node cli/config-files.ts FILE`, it prints FILE's inlined text (what a deploy passes as
 * PORTCULLIS_CONFIG), or every problem on stderr and exits 1.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { basename, dirname, extname, isAbsolute, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse, stringify } from "yaml";
import { yamlProblem } from "../src/config/problems.ts";

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** `text` with `policy`/`mappings_dir` files inlined; `problems` lists every file that could not be read or parsed. */
export function inlineConfigFiles(text: string, configFile: string): { text: string; problems: string[] } {
  const problems: string[] = [];
  let doc: unknown;
  try {
    doc = parse(text, { uniqueKeys: true });
  } catch {
    // The config's own YAML errors are reported by loadConfig, with their position.
    return { text, problems };
  }
  if (!isObject(doc)) return { text, problems };
  const base = dirname(resolve(configFile));
  const at = (p: string) => (isAbsolute(p) ? p : resolve(base, p));
  let changed = false;
  if (typeof doc.policy === "string") {
    const file = at(doc.policy);
    const parsed = readYaml(file, `policy (${doc.policy})`, problems);
    if (parsed !== undefined) {
      // A policy file holds the policy section itself, or a document with a `policy:` key.
      doc.policy = isObject(parsed) && "policy" in parsed ? parsed.policy : parsed;
      changed = true;
    }
  }
  if (typeof doc.mappings_dir === "string") {
    const dir = at(doc.mappings_dir);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) problems.push(`mappings_dir: ${doc.mappings_dir} is not a directory (relative to ${base})`);
    else {
      const names = new Set((Array.isArray(doc.upstreams) ? doc.upstreams : []).map((u: unknown) => (isObject(u) ? u.name : undefined)));
      const mappings: Record<string, unknown> = { ...(doc.mappings && typeof doc.mappings === "object" ? doc.mappings : {}) };
      for (const f of readdirSync(dir).sort()) {
        if (![".yaml", ".yml"].includes(extname(f))) continue;
        const upstream = basename(f, extname(f));
        // Starter mappings for upstreams this config does not front are simply not used.
        if (!names.has(upstream)) continue;
        const parsed = readYaml(resolve(dir, f), `mappings_dir: ${f}`, problems);
        if (parsed !== undefined) mappings[upstream] = parsed;
      }
      delete doc.mappings_dir;
      doc.mappings = mappings;
      changed = true;
    }
  }
  return { text: changed ? stringify(doc, { lineWidth: 0 }) : text, problems };
}

/** `file` as the user would name it: relative to the working directory when inside it. */
function shown(file: string): string {
  const rel = relative(process.cwd(), file);
  return rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : file;
}

function readYaml(file: string, what: string, problems: string[]): unknown {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    problems.push(`${what}: cannot read ${file}`);
    return undefined;
  }
  try {
    return parse(text, { uniqueKeys: true }) ?? {};
  } catch (e) {
    // `policies/strict.yaml line 3, column 5: <reason>`, then the lines around it.
    problems.push(yamlProblem(e, text, shown(file)));
    return undefined;
  }
}

/** `node cli/config-files.ts FILE`: FILE inlined on stdout, or its problems on stderr (exit 1); exit 2 on a usage mistake. */
function main(argv: string[]): void {
  const file = argv[0];
  if (!file || argv.length > 1 || file.startsWith("-")) {
    console.error("usage: node cli/config-files.ts FILE   print FILE with its policy and mappings_dir files inlined (the PORTCULLIS_CONFIG text)");
    process.exit(2);
  }
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    console.error(`cannot read ${file}`);
    process.exit(1);
  }
  const out = inlineConfigFiles(text, file);
  if (out.problems.length) {
    for (const p of out.problems) console.error(`  - ${p}`);
    process.exit(1);
  }
  process.stdout.write(out.text);
}

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) main(process.argv.slice(2));
