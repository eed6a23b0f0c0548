/**
 * A gateway project: the directory a team keeps in its own repository, with Portcullis installed
 * as a package. `init [DIR]` writes one (wrangler.toml with the package's Durable Objects and D1
 * binding, worker.js importing the Worker from the package, portcullis.yaml, policy.yaml,
 * mappings/, .gitignore, a README, package.json) and never overwrites a file; `build` writes the
 * project's config module (.portcullis/build/config.js: portcullis.yaml with its policy and
 * mappings inlined, the Worker's deployed config, of any size) that worker.js imports. Also owns
 * recognising a project (`projectOf`) and reading the few wrangler.toml tables the CLI checks.
 * Must never: overwrite a file the team has, write a secret into a file it generates, or call a
 * config built that src/config/load.ts refused.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import type { GatewayConfig } from "../src/config/gateway-config.ts";
import { commandOptions, FLAG, HELP_OPTION, namesOf, parseOptions, STRING, UsageError, usageError } from "./args.ts";
import { root } from "./gateway-start.ts";

export const HELP = {
  init: `usage: portcullis init [DIR] [--name NAME] [--json]
  writes a gateway project into DIR (default: this directory), for a team to keep in its own
  repository: wrangler.toml (the Worker, its Durable Objects and D1 ledger, migrations from the
  package), worker.js (imports the Worker from the portcullis package), portcullis.yaml, policy.yaml,
  mappings/, .gitignore (keys and local state), README.md and package.json (portcullis and wrangler
  as devDependencies; an existing package.json only gains what it lacks). A file that exists is
  never overwritten: it is listed as kept. Then: npm install (once), npx portcullis dev.
  --name NAME   the Worker's name (default: DIR's name, lower-cased; letters, digits and -)
  --json        print {dir, name, written, kept}
exit: 0 written, 1 DIR is a file or cannot be written, 2 usage`,
  build: `usage: portcullis build [--config FILE] [--json]
  checks the config (as portcullis check does) and writes .portcullis/build/config.js beside it:
  the config with policy: and mappings_dir: inlined, as the module worker.js imports; the Worker
  serves it as its deployed config (no size limit: it is part of the bundle, not a var).
  portcullis dev and portcullis deploy run it first.
  --config FILE  the config (default: portcullis.yaml in this directory)
  --json         print {config, module, bytes, sha256}
exit: 0 built, 1 invalid config, 2 usage`,
};

const INIT_OPTIONS = { name: STRING, json: FLAG, ...HELP_OPTION } as const;
const BUILD_OPTIONS = { config: STRING, json: FLAG, ...HELP_OPTION } as const;
export const KNOWN = { init: namesOf(INIT_OPTIONS), build: namesOf(BUILD_OPTIONS) };

/** Where `build` writes a project's config module, relative to the project. */
export const CONFIG_MODULE = join(".portcullis", "build", "config.js");

// --- wrangler.toml: the tables the CLI reads (the package's own file, and a project's) -----------

export interface WranglerTables {
  name: string | undefined;
  main: string | undefined;
  compatibilityDate: string | undefined;
  compatibilityFlags: string[];
  /** [[durable_objects.bindings]]: binding name → class. */
  objects: { name: string; className: string }[];
  /** [[migrations]]: tag → the classes it creates. */
  migrations: { tag: string; classes: string[] }[];
  /** [[d1_databases]] entries. */
  d1: { binding: string; databaseName: string | undefined; databaseId: string | undefined; migrationsDir: string | undefined }[];
  /** [[kv_namespaces]] bindings. */
  kv: { binding: string; id: string | undefined }[];
}

const stringList = (v: string | undefined): string[] => [...(v ?? "").matchAll(/"([^"]*)"/g)].map((m) => m[1] ?? "");
const unquote = (v: string | undefined): string | undefined => (v === undefined ? undefined : /^"(.*)"$/.exec(v.trim())?.[1]);

/**
 * The tables of a wrangler.toml the CLI needs, read line by line: `key = "value"` and
 * `key = ["a", "b"]` at the top and in `[[array tables]]`. Enough for the files init writes and the
 * package's own; a key it does not know is ignored.
 */
export function wranglerTables(text: string): WranglerTables {
  const out: WranglerTables = {
    name: undefined,
    main: undefined,
    compatibilityDate: undefined,
    compatibilityFlags: [],
    objects: [],
    migrations: [],
    d1: [],
    kv: [],
  };
  let table = "";
  let row: Record<string, string> = {};
  const flush = () => {
    if (table === "durable_objects.bindings" && row.name && row.class_name)
      out.objects.push({ name: unquote(row.name) ?? "", className: unquote(row.class_name) ?? "" });
    if (table === "migrations" && row.tag) out.migrations.push({ tag: unquote(row.tag) ?? "", classes: stringList(row.new_sqlite_classes ?? row.new_classes) });
    if (table === "d1_databases" && row.binding)
      out.d1.push({
        binding: unquote(row.binding) ?? "",
        databaseName: unquote(row.database_name),
        databaseId: unquote(row.database_id),
        migrationsDir: unquote(row.migrations_dir),
      });
    if (table === "kv_namespaces" && row.binding) out.kv.push({ binding: unquote(row.binding) ?? "", id: unquote(row.id) });
    row = {};
  };
  for (const raw of text.split("\n")) {
    const line = raw.replace(/\s+#.*$/, "").trim();
    if (line === "" || line.startsWith("#")) continue;
    const t = /^\[\[?([^\]]+)\]\]?$/.exec(line);
    if (t) {
      flush();
      table = t[1]!.trim();
      continue;
    }
    const kv = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!kv) continue;
    const [, key, value] = kv as unknown as [string, string, string];
    if (table === "") {
      if (key === "name") out.name = unquote(value);
      if (key === "main") out.main = unquote(value);
      if (key === "compatibility_date") out.compatibilityDate = unquote(value);
      if (key === "compatibility_flags") out.compatibilityFlags = stringList(value);
    } else row[key] = value;
  }
  flush();
  return out;
}

/** The package's own wrangler.toml tables: the Durable Objects and migrations every gateway needs. */
export function packageTables(): WranglerTables {
  return wranglerTables(readFileSync(resolve(root, "wrangler.toml"), "utf8"));
}

/** A D1 database id that is not yet a real one (init's, or the all-zero placeholder). */
export const PLACEHOLDER_ID = "00000000-0000-0000-0000-000000000000";

/** The wrangler.toml init writes for a project named `name`: the package's objects and migrations, D1 from the package's migrations. */
export function projectWranglerToml(name: string, pkg: WranglerTables = packageTables()): string {
  const q = JSON.stringify;
  const objects = pkg.objects.map((o) => `[[durable_objects.bindings]]\nname = ${q(o.name)}\nclass_name = ${q(o.className)}\n`).join("\n");
  const migrations = pkg.migrations
    .map((m) => `[[migrations]]\ntag = ${q(m.tag)}\nnew_sqlite_classes = [${m.classes.map((c) => q(c)).join(", ")}]\n`)
    .join("\n");
  return `# This gateway's Worker (written by \`npx portcullis init\`; yours to edit). Its code is the installed
# portcullis package (worker.js imports it); its config is portcullis.yaml, built into the bundle by
# \`npx portcullis build\` (dev and deploy run it), so no size limit applies to it.
name = ${q(name)}
main = "worker.js"
compatibility_date = ${q(pkg.compatibilityDate ?? "2026-11-01")}
compatibility_flags = [${pkg.compatibilityFlags.map((f) => q(f)).join(", ")}]

# A custom domain instead of (or beside) ${name}.<your-subdomain>.workers.dev: uncomment, with a
# hostname in a zone of your Cloudflare account; wrangler creates its DNS record and certificate.
# Put the same URL in portcullis.yaml as auth.audience.
# routes = [{ pattern = "gateway.example.com", custom_domain = true }]
# workers_dev = false   # serve the custom domain only

# The gateway's Durable Objects and their migrations, as this version of Portcullis has them.
# After \`npm update portcullis\`, \`npx portcullis deploy\` names any a new version added.
${objects}
${migrations}
# The shared ledger store every team's auditors query. \`npx portcullis deploy\` creates the
# database and writes its id here; the schema comes from the package (applied by deploy).
[[d1_databases]]
binding = "LEDGER_DB"
database_name = ${q(`${name}-ledger`)}
database_id = ${q(PLACEHOLDER_ID)}
migrations_dir = "node_modules/portcullis/migrations"

# OAuth for hosted clients (auth.oauth in portcullis.yaml) needs a KV namespace, OAUTH_KV:
# \`npx portcullis deploy\` creates it and adds it here when auth.oauth.enabled is true.

# Workers Logs and Workers traces (the gateway's JSON log lines, one per decision, and the runtime's
# spans of each request). To export them to an OpenTelemetry backend, create a destination in the
# Cloudflare dashboard (Workers Observability → Destinations) and name it in \`destinations\`; see
# docs/operations.md "Traces and logs".
[observability]
enabled = true

[observability.logs]
enabled = true
invocation_logs = true

[observability.traces]
enabled = true
`;
}

/**
 * The project a config file belongs to: its directory when that holds a wrangler.toml whose
 * `main` imports the Worker from the portcullis package (what init writes); null otherwise (a
 * config in this repository, served by its own wrangler.toml).
 */
export function projectOf(configFile: string): string | null {
  const dir = dirname(resolve(configFile));
  const toml = join(dir, "wrangler.toml");
  if (!existsSync(toml)) return null;
  const main = wranglerTables(readFileSync(toml, "utf8")).main;
  if (!main) return null;
  const entry = resolve(dir, main);
  return existsSync(entry) && /from\s+["']portcullis\/worker["']/.test(readFileSync(entry, "utf8")) ? dir : null;
}

// --- build ---------------------------------------------------------------------------------------

/** The `${NAME}` secrets a config text names (src/config/load.ts's syntax): required ones (no fallback) and those with a fallback. */
export function namedSecrets(text: string): { required: string[]; optional: string[] } {
  const required = new Set<string>();
  const optional = new Set<string>();
  for (const m of text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}/g)) (m[2] ? optional : required).add(m[1] ?? "");
  for (const n of required) optional.delete(n);
  return { required: [...required].sort(), optional: [...optional].sort() };
}

/** The module text of a built config: the inlined config as the default export (a JS string: no module rule needed). */
export function configModuleText(text: string): string {
  const sha = createHash("sha256").update(text).digest("hex");
  return `// Built by \`npx portcullis build\` from portcullis.yaml (policy and mappings inlined); do not edit.\n// sha256 ${sha}\nexport default ${JSON.stringify(text)};\n`;
}

/** Writes `dir`/.portcullis/build/config.js for the inlined config `text` (atomically); its path, size and the text's SHA-256. */
export function writeConfigModule(dir: string, text: string): { module: string; bytes: number; sha256: string } {
  const file = resolve(dir, CONFIG_MODULE);
  mkdirSync(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, configModuleText(text));
  renameSync(tmp, file);
  return { module: file, bytes: Buffer.byteLength(text), sha256: createHash("sha256").update(text).digest("hex") };
}

/**
 * Checks `configFile` (schema, secrets by name only, policy; egress from `onLoopback`'s vantage)
 * and writes its project's config module. Problems: every one, nothing written.
 */
export async function buildProjectConfig(
  configFile: string,
  { onLoopback = true }: { onLoopback?: boolean } = {},
): Promise<{ ok: true; text: string; cfg: GatewayConfig; module: string; bytes: number; sha256: string } | { ok: false; problems: string[] }> {
  const { validate } = await import("./validate.ts");
  const v = await validate(configFile, { onLoopback, secrets: "static" });
  if (!v.ok) return { ok: false, problems: v.problems };
  return { ok: true, text: v.text, cfg: v.cfg, ...writeConfigModule(dirname(resolve(configFile)), v.text) };
}

/** `portcullis build [--config FILE] [--json]`. */
export async function buildCommand(argv: string[]): Promise<number> {
  const a = commandOptions("build", argv, BUILD_OPTIONS, HELP.build);
  const config = resolve(a.config ?? "portcullis.yaml");
  if (!existsSync(config))
    usageError("build", `${relative(process.cwd(), config) || config}: no such file (give --config FILE, or run it in a project: npx portcullis init)`);
  const r = await buildProjectConfig(config);
  if (!r.ok) {
    if (a.json) console.log(JSON.stringify({ ok: false, config, problems: r.problems }, null, 2));
    else console.error(`${a.config ?? "portcullis.yaml"}: invalid, nothing built\n${r.problems.map((p) => `  - ${p}`).join("\n")}`);
    return 1;
  }
  if (a.json) console.log(JSON.stringify({ ok: true, config, module: r.module, bytes: r.bytes, sha256: r.sha256 }, null, 2));
  else console.log(`portcullis: built ${relative(process.cwd(), r.module)} (${r.bytes} bytes of config, sha256 ${r.sha256.slice(0, 12)}…)`);
  return 0;
}

// --- init ----------------------------------------------------------------------------------------

/** `argv` parsed with positionals (init's DIR); --help and usage mistakes as commandOptions has them. */
function withPositionals<const O extends Parameters<typeof parseOptions>[1]>(name: string, argv: string[], spec: O, help: string) {
  try {
    const a = parseOptions(argv, spec, { positionals: true });
    if ((a as { help?: boolean }).help) {
      console.log(help);
      process.exit(0);
    }
    return a;
  } catch (e) {
    if (e instanceof UsageError) usageError(name, e.message);
    throw e;
  }
}

/** A Worker name from a directory name: lower case, letters, digits and -, at most 63. */
export function workerName(dir: string): string {
  const n = basename(resolve(dir))
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 63);
  return /^[a-z0-9]/.test(n) ? n : `portcullis-${n}`.replace(/-+$/, "");
}

const template = (file: string) => readFileSync(resolve(root, "templates", "project", file), "utf8");

/** The package.json of a new project, or what an existing one lacks (its own entries win). */
export function projectPackageJson(existing: Record<string, unknown> | null, name: string): Record<string, unknown> {
  const own = JSON.parse(readFileSync(resolve(root, "package.json"), "utf8")) as { version: string; devDependencies?: Record<string, string> };
  const wrangler = own.devDependencies?.wrangler ?? "4";
  const base = existing ?? { name, private: true, type: "module" };
  const record = (k: string) => (base[k] && typeof base[k] === "object" ? (base[k] as Record<string, unknown>) : {});
  const deps = { ...record("dependencies"), ...record("devDependencies") };
  return {
    ...base,
    scripts: {
      dev: "portcullis dev",
      build: "portcullis build",
      deploy: "portcullis deploy",
      check: "portcullis check --config portcullis.yaml",
      ...record("scripts"),
    },
    devDependencies: {
      ...(deps.portcullis ? {} : { portcullis: `^${own.version}` }),
      ...(deps.wrangler ? {} : { wrangler: `^${wrangler.replace(/^[\^~]/, "")}` }),
      ...record("devDependencies"),
    },
    // npm runs no install script it was not told to: workerd and esbuild (wrangler's) need theirs.
    allowScripts: { esbuild: true, workerd: true, ...record("allowScripts") },
  };
}

/** Writes the project's files into `dir`; each file that exists is kept. */
export function initProject(dir: string, name: string): { written: string[]; kept: string[] } {
  const written: string[] = [];
  const kept: string[] = [];
  const put = (rel: string, text: string) => {
    const file = join(dir, rel);
    if (existsSync(file)) {
      kept.push(rel);
      return;
    }
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, text, { flag: "wx" });
    written.push(rel);
  };
  put("wrangler.toml", projectWranglerToml(name));
  put("worker.js", template("worker.js"));
  put("portcullis.yaml", template("portcullis.yaml").replaceAll("__NAME__", name));
  put("policy.yaml", template("policy.yaml"));
  put(join("mappings", "everything.yaml"), readFileSync(resolve(root, "mappings", "everything.yaml"), "utf8"));
  put(".gitignore", template("gitignore"));
  put("README.md", template("README.md").replaceAll("__NAME__", name));
  const pkgFile = join(dir, "package.json");
  if (existsSync(pkgFile)) {
    const was = readFileSync(pkgFile, "utf8");
    const next = `${JSON.stringify(projectPackageJson(JSON.parse(was) as Record<string, unknown>, name), null, 2)}\n`;
    if (JSON.stringify(JSON.parse(was)) === JSON.stringify(JSON.parse(next))) kept.push("package.json");
    else {
      writeFileSync(pkgFile, next);
      written.push("package.json (what it lacked added)");
    }
  } else put("package.json", `${JSON.stringify(projectPackageJson(null, name), null, 2)}\n`);
  return { written, kept };
}

/** `portcullis init [DIR] [--name NAME] [--json]`. */
export async function initCommand(argv: string[]): Promise<number> {
  const a = withPositionals("init", argv, INIT_OPTIONS, HELP.init);
  if (a._.length > 1) usageError("init", `one DIR at most (got ${a._.length})`);
  const dir = resolve(a._[0] ?? ".");
  const name = a.name ?? workerName(dir);
  if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name))
    usageError("init", `--name ${JSON.stringify(name)}: a Worker name is lower-case letters, digits and -, at most 63`);
  if (existsSync(dir) && !statSync(dir).isDirectory()) {
    console.error(`portcullis init: ${dir} is not a directory`);
    return 1;
  }
  let r: { written: string[]; kept: string[] };
  try {
    mkdirSync(dir, { recursive: true });
    r = initProject(dir, name);
  } catch (e) {
    console.error(`portcullis init: cannot write ${dir}: ${(e as Error).message}`);
    return 1;
  }
  if (a.json) {
    console.log(JSON.stringify({ dir, name, ...r }, null, 2));
    return 0;
  }
  const here = relative(process.cwd(), dir) || ".";
  console.log(`portcullis: a gateway project "${name}" in ${here}`);
  for (const f of r.written) console.log(`  wrote ${f}`);
  for (const f of r.kept) console.log(`  kept  ${f} (it exists; not overwritten)`);
  const installedHere = existsSync(join(dir, "node_modules", "portcullis"));
  console.log(
    `next:\n${here === "." ? "" : `  cd ${here}\n`}${installedHere ? "" : "  npm install\n"}  npx portcullis demo-upstream &   # the example upstream (or put your own in portcullis.yaml)\n  npx portcullis dev                # the gateway on http://127.0.0.1:8787/mcp\n  npx portcullis deploy --dry-run   # then README.md's "Deploy it"`,
  );
  return 0;
}
