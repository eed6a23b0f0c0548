/**
 * `portcullis add`: registers one upstream in a portcullis.yaml and, with --gateway, hot-adds it
 * to a running gateway. Owns the command's flags; the edit of the config file through the yaml
 * Document API (the upstream is appended to `upstreams:`; comments, order and every other entry are
 * kept; the one upstream already there keeps its own tool names, `namespace: false` written on it);
 * the checks made before anything is written — a duplicate name, a URL or header value that
 * carries a credential inline (src/config/inline-secret.ts's rule, the config loader's: it must be a
 * `${NAME}` reference, and the secret to set is named), and the whole resulting config validated as `check` and `doctor` do
 * (schema, mappings, policy and each upstream's egress; every problem at once); the atomic write
 * (temp file + rename, the file's mode kept); the reload (bin/reload-cli.mjs putConfig); and the
 * output and exit codes: 0 added (and reloaded), 1 refused (a problem in the result, a write that
 * failed, or the gateway refused the config), 2 usage, 3 the gateway could not be reached or
 * refused otherwise. `validate` comes from bin/portcullis.mjs as an argument (this file never
 * imports it: its top-level await would deadlock). Must never: write the file when a check fails
 * or on --dry-run, write a credential into it, print a header value that looks like one (or a
 * token), or send the token anywhere but the gateway named by --gateway.
 */
import { readFileSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";
import { isMap, isSeq, parse, parseDocument, stringify } from "yaml";
import { parseOptions, UsageError } from "./cli-args.mjs";
import { INLINE_SECRET, inlineSecretProblem, secretName } from "../src/config/inline-secret.ts";
import { renamedUpstreams, renameProblem } from "../src/protocol/exposed-names.ts";
import { urlProblem, writeAtomic } from "./clients-cli.mjs";
import { exitCodeOf, FetchError, gatewayOf, Refused, tokenOf } from "./gateway-http.mjs";
import { checkRulesBeforeReload, ConfigRefused, putConfig, versionLine } from "./reload-cli.mjs";

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

export const KNOWN = [
  "config",
  "name",
  "url",
  "header",
  "namespace",
  "no-namespace",
  "allow",
  "deny",
  "timeout",
  "local",
  "deployed",
  "gateway",
  "token",
  "dry-run",
  "force",
  "json",
  "help",
];
const BOOLEAN = new Set(["namespace", "no-namespace", "local", "deployed", "dry-run", "force", "json", "help"]);
const REPEATABLE = new Set(["header"]);

/** A refusal found before anything was written: every problem, printed by the command. */
class Problems extends Error {
  constructor(problems) {
    super(`${problems.length} problem${problems.length === 1 ? "" : "s"}`);
    this.problems = problems;
  }
}

const globs = (v, flag) => {
  const out = String(v)
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (out.length === 0) throw new UsageError(`${flag}: give one or more tool-name globs, comma-separated`);
  return out;
};

/** `--header "K: V"` values as [name, value] pairs; a UsageError for one without a colon or a repeated name. */
function headersOf(list) {
  const out = [];
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
const refsOf = (value) => [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}/g)].map((m) => m[1]);

/**
 * The problems of the new upstream's own inputs that validation cannot see: a duplicate name, a
 * credential in the URL, an inline credential in a header (each with the reference and the secret
 * to set instead). Never includes a header value.
 */
function inputProblems(file, name, url, headers, existing) {
  const problems = [];
  if (existing.includes(name))
    problems.push(`an upstream named "${name}" is already in ${file}: choose another --name, or change that entry in ${file} and run portcullis reload`);
  const bad = urlProblem(url);
  if (bad && /credential/.test(bad)) {
    const where = /\?[^=\s]+=/.exec(bad)?.[0] ?? "user:password@";
    problems.push(
      `--url carries a credential (${where}), which never goes in the config file: drop it from the URL and send it as a header instead, e.g. --header "Authorization: Bearer \${${secretName(name, "Authorization", new Set())}}"`,
    );
  }
  // The config loader's rule and wording (src/config/inline-secret.ts), said as the flag to give.
  const taken = new Set();
  for (const [h, v] of headers) {
    const inline = inlineSecretProblem(name, h, v, taken, "flag");
    if (inline) problems.push(`--header ${h}: ${inline}`);
  }
  return problems;
}

/** FILE's YAML document and its upstreams sequence (created when absent); a Problems naming why it cannot be edited. */
function readConfigDoc(file) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    const missing = e.code === "ENOENT";
    throw new Problems([
      missing
        ? `${file} does not exist: give the portcullis.yaml to add to (portcullis import --client C creates one from a client's servers)`
        : `cannot read ${file} (${e.code ?? e.message})`,
    ]);
  }
  const doc = parseDocument(text, { uniqueKeys: true });
  if (doc.errors.length) throw new Problems([`${file}: YAML: ${String(doc.errors[0].message).split("\n")[0]} (fix it, then add again)`]);
  if (doc.contents !== null && !isMap(doc.contents))
    throw new Problems([`${file}: not a YAML mapping (a portcullis.yaml has upstreams: and its other settings at the top level)`]);
  const seq = doc.get("upstreams", true);
  if (seq !== undefined && seq !== null && !isSeq(seq)) throw new Problems([`${file}: upstreams: is not a list`]);
  const entries = seq ? (seq.toJSON() ?? []).filter((u) => u && typeof u === "object") : [];
  return { text, doc, entries, existing: entries.map((u) => u.name).filter((n) => typeof n === "string") };
}

/**
 * FILE's `text` with `namespace: false` written on its one upstream when that upstream has no
 * `namespace` of its own: it is served with its own names alone, and this keeps them beside the
 * upstream being added (which is prefixed NAME__). A line inserted after its `name:` line, in the
 * entry's indentation; through the yaml Document API when the entry is flow-style or the insert
 * would not read back as that one change. `text` itself when there is nothing to keep.
 */
function keepingNames(text, doc, entries) {
  if (entries.length !== 1 || entries[0].namespace !== undefined) return text;
  const entry = doc.get("upstreams", true).items.find((n) => isMap(n));
  const expected = parse(text, { uniqueKeys: false });
  expected.upstreams.find((u) => u && typeof u === "object").namespace = false;
  const pair = entry.flow ? undefined : entry.items.find((it) => it.key?.value === "name");
  if (pair?.key?.range && pair.value?.range) {
    const keyAt = pair.key.range[0];
    const lineStart = text.lastIndexOf("\n", keyAt - 1) + 1;
    const nl = text.indexOf("\n", pair.value.range[1]);
    const at = nl < 0 ? text.length : nl + 1;
    const line = `${" ".repeat(keyAt - lineStart)}namespace: false # keeps its own tool names beside other upstreams (portcullis add)\n`;
    const inserted = `${text.slice(0, at)}${nl < 0 ? "\n" : ""}${line}${text.slice(at)}`;
    try {
      if (isDeepStrictEqual(parse(inserted, { uniqueKeys: false }), expected)) return inserted;
    } catch {
      /* the Document's text, then */
    }
  }
  entry.set("namespace", false);
  return doc.toString({ lineWidth: 0 });
}

/**
 * FILE's `text` with `upstream` appended to its `upstreams:`. Spliced in as text after the last
 * entry, in the list's own indentation, so every other byte stays as it was; when the list is
 * absent, empty or flow-style (or the splice would not read back as the same config), through
 * the yaml Document API instead: comments and order are kept, spacing may be normalised.
 */
function withUpstream(text, doc, upstream) {
  let seq = doc.get("upstreams", true);
  const last = isSeq(seq) && !seq.flow ? seq.items.at(-1) : undefined;
  let spliced;
  if (last?.range) {
    const lineStart = text.lastIndexOf("\n", last.range[0] - 1) + 1;
    const dash = /^([ \t]*)-([ \t]+)$/.exec(text.slice(lineStart, last.range[0]));
    if (dash) {
      let at = last.range[1];
      if (text[at - 1] !== "\n") {
        const nl = text.indexOf("\n", at);
        at = nl < 0 ? text.length : nl + 1;
      }
      const pad = `${dash[1]}${" ".repeat(1 + dash[2].length)}`;
      const lines = stringify(upstream, { lineWidth: 0 }).trimEnd().split("\n");
      const item = lines.map((l, i) => (i === 0 ? `${dash[1]}-${dash[2]}${l}` : `${pad}${l}`)).join("\n");
      spliced = `${text.slice(0, at)}${at > 0 && text[at - 1] !== "\n" ? "\n" : ""}${item}\n${text.slice(at)}`;
    }
  }
  if (!seq) {
    seq = doc.createNode([]);
    doc.set("upstreams", seq);
  }
  if (seq.flow && seq.items.length === 0) seq.flow = false;
  seq.add(doc.createNode(upstream));
  const viaDoc = doc.toString({ lineWidth: 0 });
  if (spliced !== undefined) {
    try {
      if (isDeepStrictEqual(parse(spliced, { uniqueKeys: false }), parse(viaDoc, { uniqueKeys: false }))) return spliced;
    } catch {
      /* the Document's text, then */
    }
  }
  return viaDoc;
}

async function add(a, deps) {
  if (a.help) {
    console.log(HELP);
    return 0;
  }
  for (const k of ["config", "name", "url"])
    if (typeof a[k] !== "string" || a[k] === "") throw new UsageError(`give --${k} ${k === "config" ? "FILE" : k.toUpperCase()}`);
  if (a.namespace && a["no-namespace"]) throw new UsageError("--namespace and --no-namespace: give one");
  if (a.local && a.deployed) throw new UsageError("--local and --deployed: give one");
  const headers = headersOf(a.header ?? []);
  const allow = a.allow !== undefined ? globs(a.allow, "--allow") : undefined;
  const deny = a.deny !== undefined ? globs(a.deny, "--deny") : undefined;
  const dry = a["dry-run"] === true;
  // The gateway and its token are checked first: nothing is written for a reload that cannot be sent.
  let base;
  let token;
  if (a.gateway !== undefined && !dry) {
    try {
      base = gatewayOf(a.gateway);
    } catch (e) {
      throw new UsageError(`--gateway: ${String(e.message).replace(/^--url:? ?/, "")} (the gateway's URL, e.g. http://127.0.0.1:8787)`);
    }
    token = tokenOf(a);
  }

  const file = a.config;
  const { text, doc, entries, existing } = readConfigDoc(file);
  const upstream = { name: a.name, url: a.url };
  // Its naming is its own: beside other upstreams it is written prefixed, so no later add or removal moves its names.
  if (a.namespace || (entries.length > 0 && !a["no-namespace"])) upstream.namespace = true;
  if (a["no-namespace"]) upstream.namespace = false;
  if (headers.length) upstream.headers = Object.fromEntries(headers);
  if (allow) upstream.allow = allow;
  if (deny) upstream.deny = deny;
  if (a.timeout !== undefined) upstream.timeout = /^\d+$/.test(a.timeout) ? Number(a.timeout) : a.timeout;

  const problems = inputProblems(file, a.name, a.url, headers, existing);
  // The one upstream FILE has keeps its names (unless this add asks for bare names itself, which the schema then refuses).
  const kept = a["no-namespace"] ? text : keepingNames(text, doc, entries);
  const next = withUpstream(kept, kept === text ? doc : parseDocument(kept, { uniqueKeys: true }), upstream);

  // The whole result, as check and doctor see it: secrets are the Worker's (a static check), egress from where it runs.
  const onLoopback = a.local ? true : a.deployed ? false : !/^\s*required:\s*true\b/m.test(next);
  const v = await deps.validate(file, { text: next, onLoopback, secrets: "static" });
  // A duplicate name is already explained above, with what to do.
  const dup = existing.includes(a.name) ? /duplicate upstream name/ : null;
  // So is an inline secret in one of its --header values (the loader refuses it too, as upstreams[N].headers.H).
  const flagged = new Set(problems.filter((p) => p.startsWith("--header ") && p.includes(INLINE_SECRET)).map((p) => p.slice(9, p.indexOf(":")).toLowerCase()));
  const sameSecret = (p) => {
    const m = /^upstreams\[(\d+)\]\.headers\.([A-Za-z0-9-]+): /.exec(p);
    return m !== null && Number(m[1]) === entries.length && flagged.has(m[2].toLowerCase()) && p.includes(INLINE_SECRET);
  };
  if (!v.ok) for (const p of v.problems) if (!problems.includes(p) && !dup?.test(p) && !sameSecret(p)) problems.push(p);
  if (problems.length) throw new Problems(problems);

  // Adding an upstream must not rename another's tools under agents (the one upstream FILE had,
  // unprefixed by default, is prefixed once there are two): refused, nothing written, unless --force.
  const before = v.ok ? await deps.validate(file, { text, onLoopback, secrets: "static" }) : null;
  const renamed = before?.ok ? renamedUpstreams(before.cfg.upstreams, v.cfg.upstreams) : [];
  if (renamed.length && !a.force)
    throw new Problems(renamed.map((r) => `${renameProblem(r).replace("force the reload", "add --force")}; ${file} is as it was`));

  const notes = [];
  if (kept !== text)
    notes.push(
      `${existing[0] ?? "the upstream already there"} keeps its own tool names (namespace: false written on it); ${a.name}'s tools are ${a.name}__<tool>`,
    );
  for (const r of renamed)
    notes.push(`--force: ${r.upstream}'s tools are now exposed as ${r.after} (clients, grants and rules that name them ${r.before} must change)`);
  const secrets = [...new Set(headers.flatMap(([, val]) => refsOf(val)))].map((name) => ({
    name,
    set_here: typeof process.env[name] === "string",
    dev: `export ${name}=…`,
    deploy: `npx wrangler secret put ${name}`,
  }));
  const result = { ok: true, config: file, upstream, dryRun: dry, written: false, notes, secrets };

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
    throw new Problems([`${e.message}; ${file} is as it was`]);
  }
  result.written = true;
  const say = a.json ? () => undefined : (s) => console.log(s);
  say(`added upstream ${a.name} (${a.url}) to ${file}`);
  for (const n of notes) say(`  note: ${n}`);
  for (const s of secrets)
    say(`  secret ${s.name}: the gateway needs it (${s.dev} for portcullis dev${s.set_here ? ", set here" : ", not set here"}; ${s.deploy} when deployed)`);
  if (!base) {
    if (a.json) console.log(JSON.stringify(result, null, 2));
    else say(`  next: portcullis reload --config ${file} --url GATEWAY (a running gateway), or restart portcullis dev`);
    return 0;
  }
  // As reload does: in enforce, a rule that would match no real tool after this add (its names moved, say) stops the reload.
  try {
    await checkRulesBeforeReload(file, { json: a.json, gateway: base });
  } catch (e) {
    if (e instanceof Refused) {
      if (!a.json) console.error(`${file} was written, but not reloaded: fix the rules above, then: portcullis reload --config ${file} --url ${a.gateway}`);
      throw new Refused(`${e.message}; ${file} was written, the gateway keeps its previous config`);
    }
    throw e;
  }
  try {
    result.reload = await putConfig(base, token, v.text, { force: renamed.length > 0 });
  } catch (e) {
    const again = `fix ${file}, then: portcullis reload --config ${file} --url ${a.gateway}`;
    if (e instanceof ConfigRefused) {
      if (a.json) console.log(JSON.stringify({ ...result, ok: false, problems: e.problems, next: again }, null, 2));
      else
        console.error(
          `${e.where} → 400: ${file} was written, but the gateway refused it and keeps serving its previous config:\n  - ${e.problems.join("\n  - ")}\n${again}`,
        );
      throw new Refused(`the gateway refused ${file}`);
    }
    if (e instanceof FetchError)
      throw new FetchError(`${e.message}\n${file} was written; once the gateway is reachable: portcullis reload --config ${file} --url ${a.gateway}`);
    throw e;
  }
  if (a.json) console.log(JSON.stringify(result, null, 2));
  else say(versionLine(result.reload));
  return 0;
}

/** Runs `portcullis add <argv…>`; `deps.validate` is bin/portcullis.mjs's. The exit code. */
export async function addCommand(argv, deps) {
  return exitCodeOf("portcullis add", async () => {
    const a = parseOptions(argv, { known: KNOWN, boolean: BOOLEAN, repeatable: REPEATABLE, positionals: false });
    try {
      return await add(a, deps);
    } catch (e) {
      if (!(e instanceof Problems)) throw e;
      if (a.json) console.log(JSON.stringify({ ok: false, config: a.config, written: false, problems: e.problems }, null, 2));
      else console.error(`portcullis add: refused; ${a.config} is unchanged:\n  - ${e.problems.join("\n  - ")}`);
      return 1;
    }
  });
}
