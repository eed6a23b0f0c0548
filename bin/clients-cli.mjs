#!/usr/bin/env node
/**
 * `portcullis import | restore | doctor --clients`: an MCP client's own config file (Claude Code,
 * Claude Desktop, Cursor, VS Code) moved behind the gateway and back. `import` reads the client's
 * server list, appends each HTTP server to the `upstreams:` of a portcullis.yaml (through the yaml
 * Document API, so its comments stay), backs the client file up once and rewrites its server list
 * to one `portcullis` entry; `restore` puts the backup back byte for byte; `doctor --clients`
 * reports servers a client reaches directly (ungoverned), a missing gateway entry, and a gateway
 * entry that reads PORTCULLIS_TOKEN. Owns these commands' flags, the four clients' file formats
 * and default paths, the JSONC scanning that lets a rewrite change only the servers key, and their
 * output and exit codes (0 ok, 1 problems found, 2 usage); the gateway entry reads the agent's
 * grant from PORTCULLIS_AGENT_TOKEN, in each client's own reference syntax.
 * Must never: copy a credential out of a client file (an inline secret becomes a `${NAME}`
 * reference and the command names the secret to set, never its value), print one, overwrite an
 * existing backup, write anything on --dry-run, or point a client at PORTCULLIS_TOKEN (the
 * operator CLI's admin and approver grants: an agent started from an operator's shell would run
 * with them). What counts as an inline secret is src/config/inline-secret.ts's rule (the config
 * loader's and `add`'s too); bin/add-cli.mjs reuses this file's urlProblem and writeAtomic.
 */
import { copyFileSync, constants, existsSync, readFileSync, realpathSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir, platform } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Document, isMap, isSeq, parseDocument } from "yaml";
import { parseOptions, UsageError } from "./cli-args.mjs";
import { exitCodeOf } from "./gateway-http.mjs";
import { looksLikeCredential, SCHEME, SENSITIVE_HEADER, secretName } from "../src/config/inline-secret.ts";

const CLIENTS = ["claude-code", "claude-desktop", "cursor", "vscode"];
const DEFAULT_GATEWAY = "http://127.0.0.1:8787/mcp";
const ENTRY = "portcullis";
const BACKUP_SUFFIX = ".portcullis-backup";
/**
 * The variable a client's gateway entry reads the agent's grant from (as examples/call.mjs does).
 * Never OPERATOR_TOKEN, which the operator CLI reads for admin and approver grants.
 */
export const AGENT_TOKEN = "PORTCULLIS_AGENT_TOKEN";
const OPERATOR_TOKEN = "PORTCULLIS_TOKEN";
/** A reference to OPERATOR_TOKEN anywhere in an entry (`${PORTCULLIS_TOKEN}`, `${env:PORTCULLIS_TOKEN}`, an env key). */
const READS_OPERATOR_TOKEN = /(?<![A-Za-z0-9_])PORTCULLIS_TOKEN(?![A-Za-z0-9_])/;

const HELP = {
  import: `usage: portcullis import --client ${CLIENTS.join("|")} [--path FILE] [--config portcullis.yaml]
                         [--gateway URL] [--dry-run] [--json]
  moves a client's HTTP MCP servers behind Portcullis:
  - each HTTP server in the client's file becomes an upstream in --config (default ./portcullis.yaml,
    created when missing; appended to upstreams:, comments kept); stdio servers are skipped, and said so
  - secrets only by reference: an inline Authorization (or any credential-looking header) is never
    copied; the upstream gets "\${<NAME>_TOKEN}" and the command names the secret to set
  - the client file is backed up once to FILE${BACKUP_SUFFIX} (an existing backup is never overwritten),
    then its server list becomes one "${ENTRY}" entry at --gateway (default ${DEFAULT_GATEWAY})
    sending the agent's grant from $${AGENT_TOKEN} (never ${OPERATOR_TOKEN}, the operator CLI's);
    every other key of the file is kept as it was
  --client C   claude-code (~/.claude.json: mcpServers and projects.<dir>.mcpServers; or --path .mcp.json),
               claude-desktop (claude_desktop_config.json: ~/Library/Application Support/Claude on macOS,
               ~/.config/Claude elsewhere), cursor (~/.cursor/mcp.json), vscode (./.vscode/mcp.json: servers)
  --path FILE  the client's config file instead of its default
  --dry-run    print what would change; write nothing
  --json       print the result as JSON
exit: 0 imported (or nothing to import), 1 a file could not be read, parsed or written, 2 usage`,
  restore: `usage: portcullis restore --client ${CLIENTS.join("|")} [--path FILE] [--json]
  puts FILE${BACKUP_SUFFIX} (written by the first import) back byte for byte and removes it;
  the upstreams import added to portcullis.yaml stay
exit: 0 restored, 1 no backup (or it could not be restored), 2 usage`,
  doctor: `usage: portcullis doctor --clients [--client ${CLIENTS.join("|")}] [--path FILE] [--gateway URL] [--json]
  reports every MCP server a client reaches directly (an ungoverned path: anything but the "${ENTRY}"
  entry), a client with no gateway entry, and a gateway entry that reads ${OPERATOR_TOKEN} (the
  operator CLI's variable) instead of ${AGENT_TOKEN}. Without --client: every client config
  found at its default path (and ./.mcp.json, ./.cursor/mcp.json, ./.vscode/mcp.json)
  --gateway URL  the gateway's MCP endpoint (default ${DEFAULT_GATEWAY}); an entry at this URL, or named
                 "${ENTRY}", is the gateway entry
exit: 0 every client goes through the gateway only, 1 an ungoverned server, a missing gateway entry or one
  reading ${OPERATOR_TOKEN}, 2 usage`,
};

export const KNOWN = {
  import: ["client", "path", "config", "gateway", "dry-run", "json", "help"],
  restore: ["client", "path", "json", "help"],
  doctor: ["clients", "client", "path", "gateway", "json", "help"],
};
const BOOLEAN = new Set(["dry-run", "json", "help", "clients"]);

/** A file that could not be read, parsed or written: exit 1 with its message. */
class Failure extends Error {}

// ---------------------------------------------------------------------------------------------
// The clients: where their file is, which key holds the servers, and how they write an env reference.

/** Claude Desktop's config file on this OS (Linux/macOS defaults; Windows under %APPDATA%). */
function desktopPath() {
  if (platform() === "darwin") return join(homedir(), "Library", "Application Support", "Claude", "claude_desktop_config.json");
  if (platform() === "win32" && process.env.APPDATA) return join(process.env.APPDATA, "Claude", "claude_desktop_config.json");
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "Claude", "claude_desktop_config.json");
}

const FORMATS = {
  "claude-code": { key: "mcpServers", projects: true, env: (n) => `\${${n}}`, paths: () => [join(homedir(), ".claude.json"), resolve(".mcp.json")] },
  "claude-desktop": { key: "mcpServers", projects: false, env: null, paths: () => [desktopPath()] },
  cursor: {
    key: "mcpServers",
    projects: false,
    env: (n) => `\${env:${n}}`,
    paths: () => [join(homedir(), ".cursor", "mcp.json"), resolve(".cursor", "mcp.json")],
  },
  vscode: { key: "servers", projects: false, env: (n) => `\${env:${n}}`, paths: () => [resolve(".vscode", "mcp.json")] },
};

function clientOf(a, { required }) {
  if (a.client === undefined) {
    if (required) throw new UsageError(`give --client (${CLIENTS.join(", ")})`);
    if (a.path !== undefined) throw new UsageError("--path needs --client (the file's format)");
    return undefined;
  }
  if (!CLIENTS.includes(a.client)) throw new UsageError(`--client must be one of ${CLIENTS.join(", ")}, not ${a.client}`);
  return a.client;
}

/** The file `import`/`restore` work on: --path, else the client's first default. */
const fileOf = (client, a) => resolve(typeof a.path === "string" ? a.path : FORMATS[client].paths()[0]);

function gatewayUrlOf(a) {
  const g = a.gateway ?? DEFAULT_GATEWAY;
  let u;
  try {
    u = new URL(g);
  } catch {
    throw new UsageError(`--gateway: not a URL: ${g}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:")
    throw new UsageError("--gateway must be the gateway's http(s) MCP endpoint, e.g. http://127.0.0.1:8787/mcp");
  return u.href;
}

const sameUrl = (a, b) => {
  try {
    return new URL(a).href.replace(/\/+$/, "") === new URL(b).href.replace(/\/+$/, "");
  } catch {
    return false;
  }
};

/** The entry that connects `client` to the gateway at `url`, with the grant as a reference in the client's own syntax. */
function gatewayEntry(client, url) {
  if (client === "claude-desktop") {
    // Claude Desktop's file holds stdio servers and expands nothing: the mcp-remote bridge speaks HTTP
    // to the gateway and expands ${PORTCULLIS_AGENT_TOKEN} from the env this entry gives it.
    return {
      command: "npx",
      args: ["-y", "mcp-remote", url, "--header", `Authorization:Bearer \${${AGENT_TOKEN}}`],
      env: { [AGENT_TOKEN]: "PASTE-AN-AGENT-GRANT-HERE" },
    };
  }
  const auth = `Bearer ${FORMATS[client].env(AGENT_TOKEN)}`;
  return client === "cursor" ? { url, headers: { Authorization: auth } } : { type: "http", url, headers: { Authorization: auth } };
}

// ---------------------------------------------------------------------------------------------
// JSONC: parse (comments and trailing commas allowed, as VS Code and Cursor allow them) and find
// where each value sits, so a rewrite replaces the servers value and leaves every other byte.

/** A JSONC text's values with their spans: `{ kind, start, end, members?: [{ key, keyStart, value }] }`. */
function scanJsonc(text) {
  let i = 0;
  const fail = (why) => {
    const line = text.slice(0, i).split("\n").length;
    throw new Failure(`not JSON (line ${line}): ${why}`);
  };
  const skip = () => {
    for (;;) {
      while (i < text.length && /\s/.test(text[i])) i++;
      if (text.startsWith("//", i)) {
        const nl = text.indexOf("\n", i);
        i = nl < 0 ? text.length : nl + 1;
      } else if (text.startsWith("/*", i)) {
        const end = text.indexOf("*/", i + 2);
        if (end < 0) fail("unterminated comment");
        i = end + 2;
      } else return;
    }
  };
  const string = () => {
    const start = i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    if (i >= text.length) fail("unterminated string");
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = () => {
    skip();
    const start = i;
    const c = text[i];
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      const node = { kind: c === "{" ? "object" : "array", start, members: [], items: [] };
      i++;
      for (;;) {
        skip();
        if (text[i] === close) break;
        if (c === "{") {
          if (text[i] !== '"') fail("expected a key");
          const keyStart = i;
          const key = string();
          skip();
          if (text[i] !== ":") fail(`expected : after "${key}"`);
          i++;
          node.members.push({ key, keyStart, value: value() });
        } else node.items.push(value());
        skip();
        if (text[i] === ",") i++;
        else if (text[i] !== close) fail(`expected , or ${close}`);
      }
      i++;
      node.end = i;
      node.json = c === "{" ? Object.fromEntries(node.members.map((m) => [m.key, m.value.json])) : node.items.map((v) => v.json);
      return node;
    }
    if (c === '"') return { kind: "scalar", start, json: string(), end: i };
    const m = /^(?:true|false|null|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/.exec(text.slice(i, i + 64));
    if (!m) fail("unexpected character");
    i += m[0].length;
    return { kind: "scalar", start, end: i, json: JSON.parse(m[0]) };
  };
  const root = value();
  skip();
  if (i < text.length) fail("text after the value");
  if (root.kind !== "object") throw new Failure("not a JSON object");
  return root;
}

const member = (node, key) => (node?.kind === "object" ? node.members.find((m) => m.key === key) : undefined);

/** The whitespace that starts the line `pos` is on. */
const lineIndent = (text, pos) => /^[ \t]*/.exec(text.slice(text.lastIndexOf("\n", pos - 1) + 1))[0];

/** The file's indentation unit: that of the root object's first member ("" for a one-line file). */
function indentUnit(text, root) {
  const first = root.members[0];
  if (!first || !text.slice(root.start, first.keyStart).includes("\n")) return "";
  return lineIndent(text, first.keyStart) || "  ";
}

/** `value` as JSON in the file's style, its lines after the first indented by `indent`. */
const jsonAt = (value, unit, indent) => (unit ? JSON.stringify(value, null, unit).replaceAll("\n", `\n${indent}`) : JSON.stringify(value));

/** Edits (`{ start, end, text }`) that set `key` of the object `node` to `value`. */
function setMember(text, node, key, value, unit) {
  const m = member(node, key);
  if (m) return { start: m.value.start, end: m.value.end, text: jsonAt(value, unit, lineIndent(text, m.keyStart)) };
  const last = node.members.at(-1);
  if (last) {
    const ind = unit ? lineIndent(text, last.keyStart) : "";
    return {
      start: last.value.end,
      end: last.value.end,
      text: `,${unit ? `\n${ind}` : ""}${JSON.stringify(key)}:${unit ? " " : ""}${jsonAt(value, unit, ind)}`,
    };
  }
  const outer = lineIndent(text, node.start);
  return { start: node.start, end: node.end, text: jsonAt({ [key]: value }, unit, outer) };
}

const applyEdits = (text, edits) => [...edits].sort((a, b) => b.start - a.start).reduce((t, e) => t.slice(0, e.start) + e.text + t.slice(e.end), text);

// ---------------------------------------------------------------------------------------------
// Reading a client file: every server, where it sits, and what kind it is.

function readClientFile(file) {
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new Failure(`cannot read ${file} (${e.code ?? e.message})`);
  }
  try {
    return { text, root: scanJsonc(text) };
  } catch (e) {
    throw new Failure(`${file}: ${e.message}`);
  }
}

/** mcp-remote's `--header "Name: value"` arguments, `${VAR}` resolved from the entry's env (a literal there is inline). */
function bridgeOf(entry) {
  const args = Array.isArray(entry.args) ? entry.args.map(String) : [];
  const at = args.findIndex((x) => /^mcp-remote(@.*)?$/.test(x) || /[/\\]mcp-remote(\.js)?$/.test(x));
  if (entry.command !== "mcp-remote" && at < 0) return null;
  const rest = args.slice(at + 1);
  const url = rest.find((x) => /^https?:\/\//.test(x));
  if (!url) return null;
  const env = entry.env && typeof entry.env === "object" ? entry.env : {};
  const headers = {};
  for (let k = 0; k < rest.length; k++) {
    if (rest[k] !== "--header" || typeof rest[k + 1] !== "string") continue;
    const h = rest[++k];
    const colon = h.indexOf(":");
    if (colon <= 0) continue;
    // A ${VAR} the entry's env sets is inline in this file; one it does not comes from the environment.
    headers[h.slice(0, colon).trim()] = h
      .slice(colon + 1)
      .replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (ref, n) => (typeof env[n] === "string" ? env[n] : ref))
      .trim();
  }
  const sseOnly = rest.includes("sse-only") && rest[rest.indexOf("sse-only") - 1] === "--transport";
  return { url, headers, sse: sseOnly };
}

/** One server of a client file: `{ name, where, kind: http | sse | stdio, url?, headers, command? }`. */
function serverOf(name, where, entry, client) {
  if (!entry || typeof entry !== "object") return { name, where, kind: "stdio", headers: {}, command: "(not an object)" };
  const headers = entry.headers && typeof entry.headers === "object" ? Object.fromEntries(Object.entries(entry.headers).map(([k, v]) => [k, String(v)])) : {};
  const type = typeof entry.type === "string" ? entry.type.toLowerCase() : undefined;
  if (typeof entry.url === "string") {
    const kind = type === "sse" ? "sse" : "http";
    return { name, where, kind, url: entry.url, headers };
  }
  const bridge = client === "claude-desktop" || typeof entry.command === "string" ? bridgeOf(entry) : null;
  if (bridge) return { name, where, kind: bridge.sse ? "sse" : "http", url: bridge.url, headers: bridge.headers, bridge: true };
  return { name, where, kind: "stdio", headers: {}, command: redactedCommand(entry) };
}

/** A stdio server's command line for messages: an argument that looks like a credential, or follows a --token-like flag, is "…". */
function redactedCommand(entry) {
  const words = [entry.command, ...(Array.isArray(entry.args) ? entry.args : [])].filter((x) => typeof x === "string");
  const out = words.map((w, k) => {
    const eq = w.indexOf("=");
    if (w.startsWith("-") && eq > 0) return SENSITIVE_HEADER.test(w.slice(0, eq)) || looksLikeCredential("", w.slice(eq + 1)) ? `${w.slice(0, eq)}=…` : w;
    if (k > 0 && words[k - 1].startsWith("-") && SENSITIVE_HEADER.test(words[k - 1])) return "…";
    return looksLikeCredential("", w) ? "…" : w;
  });
  return out.join(" ") || "(no command)";
}

/** A URL for messages: without user:password@, and its query hidden when a credential may be in it. */
function safeUrl(url) {
  try {
    const u = new URL(url);
    const hide = urlProblem(url) !== null;
    return `${u.protocol}//${u.host}${u.pathname}${u.search ? (hide ? "?…" : u.search) : ""}`;
  } catch {
    return "(not a URL)";
  }
}

/** Every server in the file, with the scopes (`{ node, where }`) that hold servers. */
function serversOf(client, parsed) {
  const f = FORMATS[client];
  const scopes = [];
  const top = member(parsed.root, f.key);
  scopes.push({ node: top?.value, where: f.key, parent: parsed.root, top: true });
  if (f.projects) {
    const projects = member(parsed.root, "projects")?.value;
    for (const p of projects?.kind === "object" ? projects.members : []) {
      const m = member(p.value, "mcpServers");
      if (m?.value.kind === "object") scopes.push({ node: m.value, where: `projects[${JSON.stringify(p.key)}].mcpServers`, parent: p.value, top: false });
    }
  }
  const servers = [];
  for (const s of scopes) {
    if (s.node?.kind !== "object") continue;
    for (const m of s.node.members) {
      const server = serverOf(m.key, `${s.where}.${m.key}`, m.value.json, client);
      server.readsOperatorToken = READS_OPERATOR_TOKEN.test(JSON.stringify(m.value.json) ?? "");
      servers.push(server);
    }
  }
  return { scopes, servers };
}

const isGatewayEntry = (s, gateway) => s.name === ENTRY || (s.url !== undefined && sameUrl(s.url, gateway));

// ---------------------------------------------------------------------------------------------
// Secrets: what looks like a credential, and the references that replace it.

// The rule itself (looksLikeCredential, secretName) is src/config/inline-secret.ts's: the config
// loader, `check` and `add` refuse by it too.

/** `${env:X}`, `${X}`, `${X:-default}` → `${X}`; anything else in `${…}` (an input, a client variable) → null. */
function envRefs(value) {
  const refs = [];
  let unresolvable = false;
  let droppedDefault = false;
  const text = value.replace(/\$\{([^}]*)\}/g, (_, inner) => {
    const m = /^(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(:-.*)?$/.exec(inner);
    if (!m) {
      unresolvable = true;
      return "";
    }
    if (m[2]) droppedDefault = true;
    refs.push(m[1]);
    return `\${${m[1]}}`;
  });
  const literal = value.replace(/\$\{[^}]*\}/g, "");
  return { text, refs, literal, unresolvable, droppedDefault };
}

/**
 * The headers an upstream gets for a client server's headers: references as they were (in Portcullis
 * syntax), credentials replaced by a new `${NAME}`, other literals as they were. Never a credential.
 */
function upstreamHeaders(up, server, taken) {
  const headers = {};
  const secrets = [];
  const notes = [];
  for (const [h, v] of Object.entries(server.headers)) {
    if (!/^[A-Za-z0-9-]+$/.test(h)) {
      notes.push(
        `header ${JSON.stringify(h)} not imported: Portcullis sends only header names of letters, digits and -, so this upstream gets no such header (its value was not copied)`,
      );
      continue;
    }
    const r = envRefs(v);
    if (r.unresolvable || looksLikeCredential(h, r.literal)) {
      const name = secretName(up, h, taken);
      const scheme = SCHEME.exec(r.literal)?.[0].trim();
      headers[h] = `${scheme ? `${scheme} ` : ""}\${${name}}`;
      secrets.push({
        name,
        upstream: up,
        header: h,
        why: r.unresolvable
          ? "the client filled it in itself (an input or client variable)"
          : "was inline in the client file (never copied; the backup still has it)",
      });
      continue;
    }
    headers[h] = r.text;
    if (r.droppedDefault) notes.push(`header ${h}: the \${NAME:-default} default was dropped`);
    for (const name of r.refs) {
      if (!taken.has(name)) secrets.push({ name, upstream: up, header: h, why: "the client read it from its environment; the gateway needs it now" });
      taken.add(name);
    }
  }
  return { headers, secrets, notes };
}

/** Why a URL cannot be copied as it is (credentials in it), or null. */
export function urlProblem(url) {
  let u;
  try {
    u = new URL(url);
  } catch {
    return "its url is not a URL";
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return `its url is not http(s) (${u.protocol})`;
  if (u.username || u.password) return "its url carries credentials (user:password@), which are never copied: move them to a header and import again";
  for (const [k, v] of u.searchParams)
    if (/token|key|secret|auth|password|sig|session/i.test(k) || looksLikeCredential("", v))
      return `its url carries a credential in ?${k}= (never copied): move it to a header and import again`;
  if (/\$\{/.test(url)) return "its url uses a variable, which an upstream url cannot";
  return null;
}

/** An upstream name from a client's server name: ^[a-z][a-z0-9-]{0,30}$, not in `taken`. */
function upstreamName(raw, taken) {
  let base = String(raw)
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  if (!/^[a-z]/.test(base)) base = `mcp-${base}`.replace(/-+$/, "");
  base = base.slice(0, 31).replace(/-+$/, "");
  let name = base;
  for (let n = 2; taken.has(name); n++) {
    const suffix = `-${n}`;
    name = `${base.slice(0, 31 - suffix.length).replace(/-+$/, "")}${suffix}`;
  }
  taken.add(name);
  return name;
}

// ---------------------------------------------------------------------------------------------
// The Portcullis config: read its upstreams, append new ones, keep everything else.

function readConfig(file) {
  if (!existsSync(file)) return { doc: null, upstreams: [] };
  const doc = parseDocument(readFileSync(file, "utf8"), { uniqueKeys: true });
  if (doc.errors.length) throw new Failure(`${file}: YAML: ${String(doc.errors[0].message).split("\n")[0]}`);
  if (doc.contents !== null && !isMap(doc.contents)) throw new Failure(`${file}: not a YAML mapping`);
  const seq = doc.get("upstreams", true);
  if (seq !== undefined && seq !== null && !isSeq(seq)) throw new Failure(`${file}: upstreams: is not a list`);
  const upstreams = seq ? (seq.toJSON() ?? []).filter((u) => u && typeof u === "object") : [];
  return { doc, upstreams };
}

/** The config text with `added` appended to upstreams: (the file created when missing). */
function configWith(file, doc, added, client) {
  if (!doc) {
    const fresh = new Document({ upstreams: added });
    fresh.commentBefore = ` Portcullis config: upstreams imported from ${client} by \`portcullis import\`.\n Check it with: portcullis doctor --config ${basename(file)}`;
    return fresh.toString({ lineWidth: 0 });
  }
  let seq = doc.get("upstreams", true);
  if (!seq) {
    seq = doc.createNode([]);
    doc.set("upstreams", seq);
  }
  if (seq.flow && seq.items.length === 0) seq.flow = false;
  for (const u of added) seq.add(doc.createNode(u));
  return doc.toString({ lineWidth: 0 });
}

/** Writes `text` to `file` by a rename in its directory, keeping the file's mode. */
export function writeAtomic(file, text) {
  const mode = existsSync(file) ? statSync(file).mode & 0o777 : 0o644;
  const tmp = join(dirname(file), `.${basename(file)}.portcullis-${process.pid}.tmp`);
  try {
    writeFileSync(tmp, text, { mode, flag: "wx" });
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new Failure(`cannot write ${file} (${e.code ?? e.message})`);
  }
}

// ---------------------------------------------------------------------------------------------
// The commands.

const connectLine = (gateway) => `claude mcp add --transport http ${ENTRY} ${gateway} --header 'Authorization: Bearer \${${AGENT_TOKEN}}'`;

// A grant that reaches every tool (--tools '*'); narrow it with globs for a real agent.
const mintLine = (gateway) => `portcullis token mint --sub you@example.com --tools '*' --gateway ${new URL(gateway).origin}`;

async function importCommand(a) {
  if (a.help) return help("import");
  const client = clientOf(a, { required: true });
  const gateway = gatewayUrlOf(a);
  const file = fileOf(client, a);
  const configFile = resolve(typeof a.config === "string" ? a.config : "portcullis.yaml");
  const dry = a["dry-run"] === true;
  const parsed = readClientFile(file);
  const { scopes, servers } = serversOf(client, parsed);
  const config = readConfig(configFile);

  const names = new Set(config.upstreams.map((u) => u.name).filter((n) => typeof n === "string"));
  const secretNames = new Set();
  const added = [];
  const reused = [];
  const skipped = [];
  const secrets = [];
  const notes = [];
  for (const s of servers) {
    if (isGatewayEntry(s, gateway)) continue;
    if (s.kind === "stdio") {
      skipped.push({
        server: s.name,
        where: s.where,
        reason: `a stdio server (${s.command}): Portcullis fronts HTTP servers only; removed from the client file, kept in the backup`,
      });
      continue;
    }
    if (s.kind === "sse") {
      skipped.push({
        server: s.name,
        where: s.where,
        reason: "the legacy SSE transport: Portcullis upstreams speak Streamable HTTP; removed from the client file, kept in the backup",
      });
      continue;
    }
    const bad = urlProblem(s.url);
    if (bad) {
      skipped.push({ server: s.name, where: s.where, reason: `${bad}; removed from the client file, kept in the backup` });
      continue;
    }
    const same = [...config.upstreams, ...added].find((u) => typeof u.url === "string" && sameUrl(u.url, s.url));
    if (same) {
      reused.push({ server: s.name, where: s.where, upstream: same.name });
      continue;
    }
    const name = upstreamName(s.name, names);
    const h = upstreamHeaders(name, s, secretNames);
    const upstream = { name, url: s.url, description: `${s.name}, imported from ${client} (${s.where})`.slice(0, 500) };
    if (Object.keys(h.headers).length) upstream.headers = h.headers;
    added.push(upstream);
    secrets.push(...h.secrets);
    notes.push(...h.notes.map((n) => `${name}: ${n}`));
  }

  // The client file: the top-level servers key holds the gateway entry alone; per-project lists are emptied.
  const unit = indentUnit(parsed.text, parsed.root);
  const edits = [];
  for (const s of scopes) {
    if (s.top) edits.push(setMember(parsed.text, parsed.root, FORMATS[client].key, { [ENTRY]: gatewayEntry(client, gateway) }, unit));
    else if (s.node.members.length) edits.push({ start: s.node.start, end: s.node.end, text: "{}" });
  }
  const newClientText = applyEdits(parsed.text, edits);
  const clientChanged = newClientText !== parsed.text;
  const backup = `${file}${BACKUP_SUFFIX}`;
  const backupExisted = existsSync(backup);
  let backupWritten = false;
  if (!dry) {
    if (added.length) writeAtomic(configFile, configWith(configFile, config.doc, added, client));
    if (clientChanged) {
      if (!backupExisted) {
        try {
          copyFileSync(file, backup, constants.COPYFILE_EXCL);
          backupWritten = true;
        } catch (e) {
          throw new Failure(`cannot back up ${file} to ${backup} (${e.code ?? e.message}); the client file was not changed`);
        }
      }
      writeAtomic(file, newClientText);
    }
  }
  const result = {
    client,
    file,
    config: configFile,
    gateway,
    dryRun: dry,
    upstreams: added,
    reused,
    skipped,
    secrets: secrets.map((s) => ({ ...s, dev: `export ${s.name}=…`, deploy: `npx wrangler secret put ${s.name}` })),
    notes,
    backup: { path: backup, written: backupWritten, existed: backupExisted },
    clientChanged,
    connect: connectLine(gateway),
  };
  if (a.json) {
    console.log(JSON.stringify(result, null, 2));
    return 0;
  }
  const would = dry ? "would " : "";
  console.log(`portcullis import ${client}: ${file}${dry ? " (dry run: nothing written)" : ""}`);
  if (added.length) {
    console.log(`  ${would}add ${added.length} upstream${added.length === 1 ? "" : "s"} to ${configFile}:`);
    for (const u of added)
      console.log(
        `    ${u.name}  ${u.url}${
          u.headers
            ? `  headers: ${Object.entries(u.headers)
                .map(([k, v]) => `${k}: ${v}`)
                .join(", ")}`
            : ""
        }`,
      );
  } else console.log(`  no new upstream for ${configFile}`);
  for (const r of reused) console.log(`  ${r.server}: already upstream ${r.upstream} of ${configFile} (same url), not added again`);
  for (const s of skipped) console.log(`  skipped ${s.server} (${s.where}): ${s.reason}`);
  for (const n of notes) console.log(`  note: ${n}`);
  if (secrets.length) {
    console.log("  secrets to set for the gateway (values are never copied or printed):");
    for (const s of secrets) {
      console.log(`    ${s.name}: upstreams.${s.upstream}.headers.${s.header}; ${s.why}`);
      console.log(`      dev:    export ${s.name}=…   (portcullis dev passes it to the gateway)`);
      console.log(`      deploy: npx wrangler secret put ${s.name}`);
    }
  }
  if (clientChanged) {
    console.log(
      backupExisted
        ? `  backup: ${backup} kept as it was (from the first import; never overwritten)`
        : `  backup: ${would}write ${backup} (portcullis restore --client ${client}${a.path ? ` --path ${a.path}` : ""} puts it back)`,
    );
    console.log(`  ${would}rewrite ${FORMATS[client].key} in ${file} to one "${ENTRY}" entry at ${gateway}; every other key kept`);
  } else console.log(`  ${file} already has only the "${ENTRY}" entry: not changed`);
  if (client === "claude-desktop")
    console.log(`  Claude Desktop cannot read your shell's environment: put an agent grant (${mintLine(gateway)}) in ${ENTRY}.env.${AGENT_TOKEN} of ${file}`);
  else console.log(`  the client sends ${AGENT_TOKEN} from its environment: export ${AGENT_TOKEN}=$(${mintLine(gateway)})`);
  console.log(`  (an agent grant, in ${AGENT_TOKEN} only: ${OPERATOR_TOKEN} holds the operator CLI's admin and approver grants)`);
  console.log(`  to connect Claude Code by hand instead:\n    ${connectLine(gateway)}`);
  if (added.length && !dry) console.log(`  next: portcullis doctor --config ${configFile}`);
  return 0;
}

async function restoreCommand(a) {
  if (a.help) return help("restore");
  const client = clientOf(a, { required: true });
  const file = fileOf(client, a);
  const backup = `${file}${BACKUP_SUFFIX}`;
  if (!existsSync(backup)) throw new Failure(`no backup at ${backup}: nothing to restore (import writes it)`);
  try {
    copyFileSync(backup, file);
  } catch (e) {
    throw new Failure(`cannot restore ${file} from ${backup} (${e.code ?? e.message}); the backup is kept`);
  }
  rmSync(backup);
  if (a.json) console.log(JSON.stringify({ client, file, restoredFrom: backup }));
  else console.log(`portcullis restore ${client}: ${file} is back as it was before the import (${backup} removed)`);
  return 0;
}

async function doctorCommand(a) {
  if (a.help) return help("doctor");
  const only = clientOf(a, { required: false });
  const gateway = gatewayUrlOf(a);
  const targets = [];
  if (only) {
    const paths = a.path !== undefined ? [resolve(a.path)] : FORMATS[only].paths();
    const found = paths.filter((p) => existsSync(p));
    // A named client with no file at all is a client with no gateway entry.
    for (const p of found.length ? found : paths.slice(0, 1)) targets.push({ client: only, file: p });
  } else {
    for (const c of CLIENTS) for (const p of FORMATS[c].paths()) if (existsSync(p) && !targets.some((t) => t.file === p)) targets.push({ client: c, file: p });
  }
  const reports = targets.map(({ client, file }) => {
    const r = { client, file, exists: existsSync(file), gateway: [], ungoverned: [], problems: [] };
    if (!r.exists) {
      r.problems.push(`no config file: ${client} does not reach the gateway (portcullis import --client ${client}, or add the "${ENTRY}" entry)`);
      return r;
    }
    try {
      const { servers } = serversOf(client, readClientFile(file));
      for (const s of servers) {
        const desc = { server: s.name, where: s.where, kind: s.kind, ...(s.url ? { url: safeUrl(s.url) } : { command: s.command }) };
        if (isGatewayEntry(s, gateway)) {
          r.gateway.push(desc);
          // An agent started from an operator's shell would send the operator's admin or approver grant.
          if (s.readsOperatorToken)
            r.problems.push(
              `the "${ENTRY}" entry (${s.where}) reads ${OPERATOR_TOKEN}, the operator CLI's variable: an agent started from an operator's shell runs with that grant; make it read ${AGENT_TOKEN} (portcullis import --client ${client} rewrites the entry)`,
            );
        } else r.ungoverned.push(desc);
      }
      // A file with no gateway entry matters when it names servers, or when this client was asked about.
      if (r.gateway.length === 0 && (servers.length || only)) r.problems.push(`no "${ENTRY}" entry: this client does not reach the gateway`);
    } catch (e) {
      if (!(e instanceof Failure)) throw e;
      r.problems.push(e.message);
    }
    return r;
  });
  const ok = reports.length > 0 && reports.every((r) => r.problems.length === 0 && r.ungoverned.length === 0);
  if (a.json) {
    console.log(JSON.stringify({ ok, gateway, clients: reports }, null, 2));
    return ok ? 0 : 1;
  }
  if (reports.length === 0) {
    console.log(
      `portcullis doctor --clients: no client config found at the default paths; give --client C [--path FILE], or connect one:\n  ${connectLine(gateway)}`,
    );
    return 1;
  }
  for (const r of reports) {
    const bad = r.problems.length + r.ungoverned.length;
    console.log(`${r.client}: ${r.file}: ${bad ? "PROBLEMS" : `ok (${r.gateway.map((g) => g.where).join(", ")})`}`);
    for (const u of r.ungoverned)
      console.log(`  UNGOVERNED ${u.server} (${u.where}, ${u.kind}${u.url ? ` ${u.url}` : ` ${u.command}`}): reached directly, not through the gateway`);
    for (const p of r.problems) console.log(`  MISSING ${p}`);
  }
  if (!ok) console.log(`fix: portcullis import --client C moves HTTP servers behind the gateway; or connect by hand:\n  ${connectLine(gateway)}`);
  return ok ? 0 : 1;
}

function help(cmd) {
  console.log(HELP[cmd]);
  return 0;
}

const COMMANDS = { import: importCommand, restore: restoreCommand, doctor: doctorCommand };

/** Runs `portcullis import|restore|doctor --clients <argv…>` (argv after the command); the exit code. */
export async function clientsCommand(cmd, argv) {
  const run = COMMANDS[cmd];
  if (!run) {
    console.error(`portcullis: unknown command ${cmd}\n${HELP.import}`);
    return 2;
  }
  const label = cmd === "doctor" ? "portcullis doctor --clients" : `portcullis ${cmd}`;
  return exitCodeOf(label, async () => {
    try {
      return await run(parseOptions(argv, { known: KNOWN[cmd], boolean: BOOLEAN, positionals: false }));
    } catch (e) {
      if (!(e instanceof Failure)) throw e;
      console.error(`${label}: ${e.message}`);
      return 1;
    }
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  const [cmd, ...rest] = process.argv.slice(2);
  process.exitCode = await clientsCommand(cmd, rest);
}
