/**
 * `portcullis add`: registers one upstream in a portcullis.yaml and, with --gateway, hot-adds it
 * to a running gateway. Owns the command's flags; the checks made before anything is written — a
 * duplicate name, a URL or header value that carries a credential inline (src/config/inline-secret.ts's
 * rule, the config loader's: it must be a `${NAME}` reference, and the secret to set is named), and
 * the whole resulting config validated as `check` and `doctor` do (schema, mappings, policy and
 * each upstream's egress; every problem at once); the atomic write (temp file + rename, the file's
 * mode kept); the reload (cli/reload.ts putConfig); and the output and exit codes: 0 added (and
 * reloaded), 1 refused (a problem in the result, a write that failed, or the gateway refused the
 * config), 2 usage, 3 the gateway could not be reached or refused otherwise. The edit of the file
 * itself is cli/add-yaml.ts's. Must never: write the file when a check fails or on --dry-run, write
 * a credential into it, print a header value that looks like one (or a token), or send the token
 * anywhere but the gateway named by --gateway.
 */
import { parseDocument } from "yaml";
import { INLINE_SECRET, inlineSecretProblem, secretName } from "../src/config/inline-secret.ts";
import { renamedUpstreams, renameProblem } from "../src/protocol/exposed-names.ts";
import { FLAG, HELP_OPTION, namesOf, type Options, parseOptions, REPEATED, STRING, UsageError } from "./args.ts";
import { keepingNames, Problems, readConfigDoc, withUpstream } from "./add-yaml.ts";
import { urlProblem, writeAtomic } from "./client-files.ts";
import { gatewayEndpoint } from "./client-files.ts";
import { exitCodeOf, FetchError, type JsonObject, messageOf, Refused, tokenOf } from "./gateway-http.ts";
import { checkRulesBeforeReload, ConfigRefused, putConfig, type StoredVersion, versionLine } from "./reload.ts";
import { validate } from "./validate.ts";

export const HELP = `usage: portcullis add --config FILE --name NAME --url URL [--header "K: V"]... [--namespace | --no-namespace]
                      [--allow GLOB,...] [--deny GLOB,...] [--timeout 30s] [--local | --deployed]
                      [--gateway URL] [--force] [--dry-run] [--json]
  appends an upstream to the upstreams: of FILE (comments and order kept) and, with --gateway, reloads
  FILE into that running gateway, so open sessions of both eras see its tools without a restart.
  Nothing is written unless the whole resulting config is valid, as check and doctor see it: schema,
  mappings, policy and every upstream's egress, each problem printed at once.
  --config FILE      the portcullis.yaml to add to (it must exist)
  --name NAME        the upstream's name, ^[a-z][a-z0-9-]{0,30}$ (prefixes its tools: NAME__tool); a name
                     already in FILE is refused
  --url URL          its Streamable HTTP endpoint; a credential in the URL (user:password@, ?token=) is refused
  --header "K: V"    a header sent to it (repeatable). A credential never goes in FILE inline: write it as
                     "Authorization: Bearer \${NAME}" and set the secret (export NAME=... for portcullis dev,
                     npx wrangler secret put NAME for a deployed gateway); an inline one is refused
  --namespace / --no-namespace  prefix its tool names with NAME__ or not (default: prefixed, written
                     as namespace: true, when FILE already has an upstream; one upstream at most keeps
                     its own names). Adding never renames another upstream's tools: when FILE has one
                     upstream served with its own names, namespace: false is written on it
  --allow GLOB,...   expose only these of its tools;  --deny GLOB,...  hide these
  --timeout 30s      per request to it (500ms, 30s, 2m)
  --local / --deployed  where the gateway runs, for the egress check (default: local unless auth.required
                     is true), as for portcullis doctor
  --gateway URL      then reload FILE into the gateway at URL (PUT /v1/config, an admin token) and print the
                     new config version; the gateway checks it again with its own secrets. As reload does,
                     in enforce a rule that matches no real tool (a typo, a tool the upstream dropped)
                     stops the reload
  --force            accept a result that renames another upstream's tools for agents (add itself keeps
                     every name; a rename comes from FILE's own settings); without --force that is refused
                     and nothing is written (open sessions listed the old names; grants and rules written
                     for them stop matching)
  --dry-run          print the resulting FILE and write nothing (nor reload)
  --json             print {ok, config, upstream, written, problems, notes, secrets, reload?} (with --dry-run: yaml)
Give the token in PORTCULLIS_TOKEN (a --token on the command line is visible to other processes on this machine).
exit: 0 added (and reloaded), 1 refused (every problem printed; FILE unchanged) or the gateway refused the
config (FILE written, the gateway's old config keeps serving), 2 usage, 3 the gateway could not be reached`;

const ADD_OPTIONS = {
  config: STRING,
  name: STRING,
  url: STRING,
  header: REPEATED,
  namespace: FLAG,
  "no-namespace": FLAG,
  allow: STRING,
  deny: STRING,
  timeout: STRING,
  local: FLAG,
  deployed: FLAG,
  gateway: STRING,
  token: STRING,
  "dry-run": FLAG,
  force: FLAG,
  json: FLAG,
  ...HELP_OPTION,
} as const;

/** The options of `add` (help.test.ts checks its --help names them all). */
export const KNOWN = namesOf(ADD_OPTIONS);

const globs = (v: string, flag: string): string[] => {
  const out = v
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (out.length === 0) throw new UsageError(`${flag}: give one or more tool-name globs, comma-separated`);
  return out;
};

/** `--header "K: V"` values as [name, value] pairs; a UsageError for one without a colon or a repeated name. */
function headersOf(list: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (const h of list) {
    const colon = h.indexOf(":");
    const name = colon > 0 ? h.slice(0, colon).trim() : "";
    if (!name) throw new UsageError(`--header: use "Name: value" (e.g. --header "Authorization: Bearer \${API_TOKEN}"), not ${JSON.stringify(h.slice(0, 40))}`);
    if (out.some(([n]) => n.toLowerCase() === name.toLowerCase())) throw new UsageError(`--header ${name} is given twice: give each header once`);
    out.push([name, h.slice(colon + 1).trim()]);
  }
  return out;
}

/** The `${NAME}` references of a header value (the syntax of src/config/load.ts). */
const refsOf = (value: string): string[] => [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}/g)].map((m) => m[1] ?? "");

/**
 * The problems of the new upstream's own inputs that validation cannot see: a duplicate name, a
 * credential in the URL, an inline credential in a header (each with the reference and the secret
 * to set instead). Never includes a header value.
 */
function inputProblems(file: string, name: string, url: string, headers: [string, string][], existing: string[]): string[] {
  const problems: string[] = [];
  if (existing.includes(name))
    problems.push(`an upstream named "${name}" is already in ${file}: choose another --name, or change that entry in ${file} and run npx portcullis reload`);
  const bad = urlProblem(url);
  if (bad && /credential/.test(bad)) {
    const where = /\?[^=\s]+=/.exec(bad)?.[0] ?? "user:password@";
    problems.push(
      `--url carries a credential (${where}), which never goes in the config file: drop it from the URL and send it as a header instead, e.g. --header "Authorization: Bearer \${${secretName(name, "Authorization", new Set())}}"`,
    );
  }
  // The config loader's rule and wording (src/config/inline-secret.ts), said as the flag to give.
  const taken = new Set<string>();
  for (const [h, v] of headers) {
    const inline = inlineSecretProblem(name, h, v, taken, "flag");
    if (inline) problems.push(`--header ${h}: ${inline}`);
  }
  return problems;
}

type AddFlags = Options<typeof ADD_OPTIONS>;

async function add(a: AddFlags): Promise<number> {
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  const { config: file, name, url } = a;
  if (file === undefined || file === "") throw new UsageError("give --config FILE");
  if (name === undefined || name === "") throw new UsageError("give --name NAME");
  if (url === undefined || url === "") throw new UsageError("give --url URL");
  if (a.namespace && a["no-namespace"]) throw new UsageError("--namespace and --no-namespace: give one");
  if (a.local && a.deployed) throw new UsageError("--local and --deployed: give one");
  const headers = headersOf(a.header);
  const allow = a.allow !== undefined ? globs(a.allow, "--allow") : undefined;
  const deny = a.deny !== undefined ? globs(a.deny, "--deny") : undefined;
  const dry = a["dry-run"] === true;
  // The gateway and its token are checked first: nothing is written for a reload that cannot be sent.
  let base: URL | undefined;
  let token: string | undefined;
  if (a.gateway !== undefined && !dry) {
    // --gateway as every command reads it (cli/client-files.ts): the gateway's URL or its MCP endpoint.
    base = new URL(new URL(gatewayEndpoint(a.gateway)).origin);
    token = tokenOf(a);
  }

  const { text, doc, entries, existing } = readConfigDoc(file);
  const upstream: JsonObject = { name, url };
  // Its naming is its own: beside other upstreams it is written prefixed, so no later add or removal moves its names.
  if (a.namespace || (entries.length > 0 && !a["no-namespace"])) upstream.namespace = true;
  if (a["no-namespace"]) upstream.namespace = false;
  if (headers.length) upstream.headers = Object.fromEntries(headers);
  if (allow) upstream.allow = allow;
  if (deny) upstream.deny = deny;
  if (a.timeout !== undefined) upstream.timeout = /^\d+$/.test(a.timeout) ? Number(a.timeout) : a.timeout;

  const problems = inputProblems(file, name, url, headers, existing);
  // The one upstream FILE has keeps its names (unless this add asks for bare names itself, which the schema then refuses).
  const kept = a["no-namespace"] ? text : keepingNames(text, doc, entries);
  const next = withUpstream(kept, kept === text ? doc : parseDocument(kept, { uniqueKeys: true }), upstream);

  // The whole result, as check and doctor see it: secrets are the Worker's (a static check), egress from where it runs.
  const onLoopback = a.local ? true : a.deployed ? false : !/^\s*required:\s*true\b/m.test(next);
  const v = await validate(file, { text: next, onLoopback, secrets: "static" });
  // A duplicate name is already explained above, with what to do.
  const dup = existing.includes(name) ? /duplicate upstream name/ : null;
  // So is an inline secret in one of its --header values (the loader refuses it too, as upstreams[N].headers.H).
  const flagged = new Set(problems.filter((p) => p.startsWith("--header ") && p.includes(INLINE_SECRET)).map((p) => p.slice(9, p.indexOf(":")).toLowerCase()));
  const sameSecret = (p: string) => {
    const m = /^upstreams\[(\d+)\]\.headers\.([A-Za-z0-9-]+): /.exec(p);
    return m !== null && Number(m[1]) === entries.length && flagged.has((m[2] ?? "").toLowerCase()) && p.includes(INLINE_SECRET);
  };
  if (!v.ok) for (const p of v.problems) if (!problems.includes(p) && !dup?.test(p) && !sameSecret(p)) problems.push(p);
  if (problems.length || !v.ok) throw new Problems(problems);

  // Adding an upstream must not rename another's tools under agents (the one upstream FILE had,
  // unprefixed by default, is prefixed once there are two): refused, nothing written, unless --force.
  const before = await validate(file, { text, onLoopback, secrets: "static" });
  const renamed = before.ok ? renamedUpstreams(before.cfg.upstreams, v.cfg.upstreams) : [];
  if (renamed.length && !a.force)
    throw new Problems(renamed.map((r) => `${renameProblem(r).replace("force the reload", "add --force")}; ${file} is as it was`));

  const notes: string[] = [];
  if (kept !== text)
    notes.push(`${existing[0] ?? "the upstream already there"} keeps its own tool names (namespace: false written on it); ${name}'s tools are ${name}__<tool>`);
  for (const r of renamed)
    notes.push(`--force: ${r.upstream}'s tools are now exposed as ${r.after} (clients, grants and rules that name them ${r.before} must change)`);
  const secrets = [...new Set(headers.flatMap(([, val]) => refsOf(val)))].map((ref) => ({
    name: ref,
    set_here: typeof process.env[ref] === "string",
    dev: `export ${ref}=…`,
    deploy: `npx wrangler secret put ${ref}`,
  }));
  const result: JsonObject = { ok: true, config: file, upstream, dryRun: dry, written: false, notes, secrets };

  if (dry) {
    if (a.json) console.log(JSON.stringify({ ...result, yaml: next }, null, 2));
    else {
      process.stdout.write(next);
      console.error(`portcullis add: dry run: ${file} not written${a.gateway !== undefined ? ", nothing reloaded" : ""}`);
    }
    return 0;
  }
  try {
    writeAtomic(file, next);
  } catch (e) {
    throw new Problems([`${messageOf(e)}; ${file} is as it was`]);
  }
  result.written = true;
  const say = a.json ? () => undefined : (s: string) => console.log(s);
  say(`added upstream ${name} (${url}) to ${file}`);
  for (const n of notes) say(`  note: ${n}`);
  for (const s of secrets)
    say(`  secret ${s.name}: the gateway needs it (${s.dev} for npx portcullis dev${s.set_here ? ", set here" : ", not set here"}; ${s.deploy} when deployed)`);
  if (!base || token === undefined) {
    if (a.json) console.log(JSON.stringify(result, null, 2));
    else say(`  next: npx portcullis reload --config ${file} --url GATEWAY (a running gateway), or restart npx portcullis dev`);
    return 0;
  }
  // As reload does: in enforce, a rule that would match no real tool after this add (its names moved, say) stops the reload.
  try {
    await checkRulesBeforeReload(file, { json: a.json, gateway: base });
  } catch (e) {
    if (e instanceof Refused) {
      if (!a.json) console.error(`${file} was written, but not reloaded: fix the rules above, then: npx portcullis reload --config ${file} --url ${a.gateway}`);
      throw new Refused(`${e.message}; ${file} was written, the gateway keeps its previous config`);
    }
    throw e;
  }
  let reloaded: StoredVersion;
  try {
    reloaded = await putConfig(base, token, v.text, { force: renamed.length > 0 });
    result.reload = reloaded;
  } catch (e) {
    const again = `fix ${file}, then: npx portcullis reload --config ${file} --url ${a.gateway}`;
    if (e instanceof ConfigRefused) {
      if (a.json) console.log(JSON.stringify({ ...result, ok: false, problems: e.problems, next: again }, null, 2));
      else
        console.error(
          `${e.where} → 400: ${file} was written, but the gateway refused it and keeps serving its previous config:\n  - ${e.problems.join("\n  - ")}\n${again}`,
        );
      throw new Refused(`the gateway refused ${file}`);
    }
    if (e instanceof FetchError)
      throw new FetchError(`${e.message}\n${file} was written; once the gateway is reachable: npx portcullis reload --config ${file} --url ${a.gateway}`);
    throw e;
  }
  if (a.json) console.log(JSON.stringify(result, null, 2));
  else say(versionLine(reloaded));
  return 0;
}

/** Runs `portcullis add <argv…>`. The exit code. */
export async function addCommand(argv: string[]): Promise<number> {
  return exitCodeOf("portcullis add", async () => {
    const a = parseOptions(argv, ADD_OPTIONS);
    try {
      return await add(a);
    } catch (e) {
      if (!(e instanceof Problems)) throw e;
      if (a.json) console.log(JSON.stringify({ ok: false, config: a.config, written: false, problems: e.problems }, null, 2));
      else console.error(`portcullis add: refused; ${a.config} is unchanged:\n  - ${e.problems.join("\n  - ")}`);
      return 1;
    }
  });
}
