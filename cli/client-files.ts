/**
 * The MCP clients' own config files (Claude Code, Claude Desktop, Cursor, VS Code) as `import`,
 * `restore` and `doctor --clients` (cli/clients.ts) read and rewrite them: each client's file
 * format and default paths (the file read as JSONC, cli/jsonc.ts, so a rewrite changes only the
 * servers it moves), every server in a file and what kind it is (HTTP, legacy SSE, stdio, and
 * whether its entry's own settings say it signs in with OAuth), the probe that asks an HTTP server
 * whether it wants an OAuth sign-in (one POST initialize, no redirect followed, then its RFC 9728
 * metadata), the gateway endpoint `--gateway` names (always /mcp or /mcp/<upstream>), the gateway
 * entry in each client's own reference syntax (the agent's grant from PORTCULLIS_AGENT_TOKEN), the
 * headers an imported upstream gets (a credential becomes a `${NAME}` reference), and the atomic
 * write (`add` uses it too). What counts as an inline secret is src/config/inline-secret.ts's rule.
 * Must never: copy a credential out of a client file, put one in a message, send one in a probe
 * (only servers with no credential-looking header are probed, and with no header of theirs), or
 * point a client at PORTCULLIS_TOKEN (the operator CLI's admin and approver grants).
 */
import { existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir, platform } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { looksLikeCredential, SCHEME, SENSITIVE_HEADER, secretName } from "../src/config/inline-secret.ts";
import { UsageError } from "./args.ts";
import { causeOf, codeOf, isObject, type JsonObject, messageOf } from "./gateway-http.ts";
import { type JsonNode, member, scanJsonc } from "./jsonc.ts";

export const CLIENTS = ["claude-code", "claude-desktop", "cursor", "vscode"] as const;
export type Client = (typeof CLIENTS)[number];
export const DEFAULT_GATEWAY = "http://127.0.0.1:8787/mcp";
export const ENTRY = "portcullis";
export const BACKUP_SUFFIX = ".portcullis-backup";
/**
 * The variable a client's gateway entry reads the agent's grant from (as examples/call.mjs does).
 * Never OPERATOR_TOKEN, which the operator CLI reads for admin and approver grants.
 */
export const AGENT_TOKEN = "PORTCULLIS_AGENT_TOKEN";
export const OPERATOR_TOKEN = "PORTCULLIS_TOKEN";
/** A reference to OPERATOR_TOKEN anywhere in an entry (`${PORTCULLIS_TOKEN}`, `${env:PORTCULLIS_TOKEN}`, an env key). */
const READS_OPERATOR_TOKEN = /(?<![A-Za-z0-9_])PORTCULLIS_TOKEN(?![A-Za-z0-9_])/;

/** A file that could not be read, parsed or written: exit 1 with its message. */
export class Failure extends Error {}

// ---------------------------------------------------------------------------------------------
// The clients: where their file is, which key holds the servers, and how they write an env reference.

/** Claude Desktop's config file on this OS (Linux/macOS defaults; Windows under %APPDATA%). */
function desktopPath(): string {
  if (platform() === "darwin") return join(homedir(), "Library", "Application Support", "Claude", "claude_desktop_config.json");
  if (platform() === "win32" && process.env.APPDATA) return join(process.env.APPDATA, "Claude", "claude_desktop_config.json");
  return join(process.env.XDG_CONFIG_HOME || join(homedir(), ".config"), "Claude", "claude_desktop_config.json");
}

interface Format {
  key: string;
  projects: boolean;
  env: ((name: string) => string) | null;
  paths: () => string[];
}

export const FORMATS: Record<Client, Format> = {
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

export const isClient = (c: string): c is Client => (CLIENTS as readonly string[]).includes(c);

export const sameUrl = (a: string, b: string): boolean => {
  try {
    return new URL(a).href.replace(/\/+$/, "") === new URL(b).href.replace(/\/+$/, "");
  } catch {
    return false;
  }
};

/** What --gateway accepts, for its usage errors and help. */
export const GATEWAY_FORMS =
  "the gateway's origin (http://127.0.0.1:8787: /mcp is added), its MCP endpoint (…/mcp), or one upstream's route (…/mcp/<upstream>)";

/**
 * The MCP endpoint `--gateway raw` names: an origin (or origin + "/") gets "/mcp"; a path of /mcp or
 * /mcp/<upstream> is kept (a trailing "/" dropped); anything else is a UsageError saying what is
 * accepted. A URL written into a client always ends in /mcp or /mcp/<upstream>.
 */
export function gatewayEndpoint(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new UsageError(`--gateway: not a URL: ${raw}; give ${GATEWAY_FORMS}`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`--gateway must be an http(s) URL: ${GATEWAY_FORMS}`);
  if (u.username || u.password) throw new UsageError("--gateway must not carry user:password@ (an agent's grant goes in PORTCULLIS_AGENT_TOKEN)");
  if (u.search || u.hash) throw new UsageError(`--gateway must be a URL without ?query or #fragment: ${GATEWAY_FORMS}`);
  const path = u.pathname.replace(/\/+$/, "");
  if (path === "") return `${u.origin}/mcp`;
  if (!/^\/mcp(\/[a-z][a-z0-9-]{0,30})?$/.test(path))
    throw new UsageError(
      `--gateway must be the gateway's MCP endpoint, and ${u.pathname} is not (an upstream name matches ^[a-z][a-z0-9-]{0,30}$): give ${GATEWAY_FORMS}`,
    );
  return `${u.origin}${path}`;
}

/** The entry that connects `client` to the gateway at `url`, with the grant as a reference in the client's own syntax. */
export function gatewayEntry(client: Client, url: string): JsonObject {
  if (client === "claude-desktop") {
    // Claude Desktop's file holds stdio servers and expands nothing: the mcp-remote bridge speaks HTTP
    // to the gateway and expands ${PORTCULLIS_AGENT_TOKEN} from the env this entry gives it.
    return {
      command: "npx",
      args: ["-y", "mcp-remote", url, "--header", `Authorization:Bearer \${${AGENT_TOKEN}}`],
      env: { [AGENT_TOKEN]: "PASTE-AN-AGENT-GRANT-HERE" },
    };
  }
  const auth = `Bearer ${FORMATS[client].env?.(AGENT_TOKEN)}`;
  return client === "cursor" ? { url, headers: { Authorization: auth } } : { type: "http", url, headers: { Authorization: auth } };
}

// ---------------------------------------------------------------------------------------------
// Reading a client file: every server, where it sits, and what kind it is.

export function readClientFile(file: string): { text: string; root: JsonNode } {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new Failure(`cannot read ${file} (${codeOf(e)})`);
  }
  try {
    return { text, root: scanJsonc(text) };
  } catch (e) {
    throw new Failure(`${file}: ${messageOf(e)}`);
  }
}

/** One server of a client file. */
export interface Server {
  name: string;
  where: string;
  kind: "http" | "sse" | "stdio";
  url?: string;
  headers: Record<string, string>;
  command?: string;
  bridge?: boolean;
  readsOperatorToken?: boolean;
  /** The entry's own setting that says it signs in with OAuth (`oauth`, `auth`, an mcp-remote --static-oauth-… flag). */
  oauth?: string;
  /** The names of the keys inside that setting when it is an object (`clientId`, `callbackPort`, …), for messages: never their values. */
  oauthKeys?: string[];
  /** A stdio server's entry as the file has it, for `import --bridge` to run it (never printed: it may hold credentials). */
  entry?: JsonObject;
}

/**
 * The settings by which a client entry signs in with OAuth: Claude Code's `oauth` ({clientId,
 * callbackPort, …}), Cursor's `auth` ({CLIENT_ID, CLIENT_SECRET, scopes}), an `authorization` or
 * `authentication` object some clients write, and mcp-remote's --static-oauth-client-info /
 * --static-oauth-client-metadata (or any --oauth… flag).
 */
const OAUTH_KEYS = new Set(["oauth", "auth", "authorization", "authentication"]);
const OAUTH_FLAG = /^--(static-oauth-client-(info|metadata)|oauth[A-Za-z0-9-]*)(=|$)/;

function oauthSettingOf(entry: JsonObject): string | undefined {
  const key = Object.keys(entry).find((k) => OAUTH_KEYS.has(k.toLowerCase()) && entry[k] !== null && entry[k] !== false && entry[k] !== "");
  if (key) return key;
  const args = Array.isArray(entry.args) ? entry.args.filter((x): x is string => typeof x === "string") : [];
  return args.find((x) => OAUTH_FLAG.test(x))?.split("=")[0];
}

/** True when a server sends a header that looks like a credential (its name, or a Bearer/Basic/… value): it signs in by that header. */
export const sendsCredential = (s: Server): boolean => Object.entries(s.headers).some(([h, v]) => SENSITIVE_HEADER.test(h) || SCHEME.test(v));

/** mcp-remote's `--header "Name: value"` arguments, `${VAR}` resolved from the entry's env (a literal there is inline). */
function bridgeOf(entry: JsonObject): { url: string; headers: Record<string, string>; sse: boolean } | null {
  const args = Array.isArray(entry.args) ? entry.args.map(String) : [];
  const at = args.findIndex((x) => /^mcp-remote(@.*)?$/.test(x) || /[/\\]mcp-remote(\.js)?$/.test(x));
  if (entry.command !== "mcp-remote" && at < 0) return null;
  const rest = args.slice(at + 1);
  const url = rest.find((x) => /^https?:\/\//.test(x));
  if (!url) return null;
  const env = isObject(entry.env) ? entry.env : {};
  const headers: Record<string, string> = {};
  for (let k = 0; k < rest.length; k++) {
    const next = rest[k + 1];
    if (rest[k] !== "--header" || typeof next !== "string") continue;
    k++;
    const colon = next.indexOf(":");
    if (colon <= 0) continue;
    // A ${VAR} the entry's env sets is inline in this file; one it does not comes from the environment.
    headers[next.slice(0, colon).trim()] = next
      .slice(colon + 1)
      .replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (ref, n: string) => {
        const v = env[n];
        return typeof v === "string" ? v : ref;
      })
      .trim();
  }
  const sseOnly = rest.includes("sse-only") && rest[rest.indexOf("sse-only") - 1] === "--transport";
  return { url, headers, sse: sseOnly };
}

/** One server of a client file: `{ name, where, kind: http | sse | stdio, url?, headers, command? }`. */
function serverOf(name: string, where: string, entry: unknown, client: Client): Server {
  if (!entry || typeof entry !== "object") return { name, where, kind: "stdio", headers: {}, command: "(not an object)" };
  // A JSON object (or array): its fields are read and checked one by one.
  const e = entry as JsonObject;
  const headers = isObject(e.headers) ? Object.fromEntries(Object.entries(e.headers).map(([k, v]) => [k, String(v)])) : {};
  const type = typeof e.type === "string" ? e.type.toLowerCase() : undefined;
  const oauth = oauthSettingOf(e);
  const setting = oauth !== undefined ? e[oauth] : undefined;
  const signIn = oauth ? { oauth, ...(isObject(setting) ? { oauthKeys: Object.keys(setting) } : {}) } : {};
  if (typeof e.url === "string") {
    const kind = type === "sse" ? "sse" : "http";
    return { name, where, kind, url: e.url, headers, ...signIn };
  }
  const bridge = client === "claude-desktop" || typeof e.command === "string" ? bridgeOf(e) : null;
  if (bridge) return { name, where, kind: bridge.sse ? "sse" : "http", url: bridge.url, headers: bridge.headers, bridge: true, ...signIn };
  return { name, where, kind: "stdio", headers: {}, command: redactedCommand(e), entry: e };
}

/** A stdio server's command line for messages: an argument that looks like a credential, or follows a --token-like flag, is "…". */
function redactedCommand(entry: JsonObject): string {
  const words = [entry.command, ...(Array.isArray(entry.args) ? entry.args : [])].filter((x): x is string => typeof x === "string");
  const out = words.map((w, k) => {
    const eq = w.indexOf("=");
    if (w.startsWith("-") && eq > 0) return SENSITIVE_HEADER.test(w.slice(0, eq)) || looksLikeCredential("", w.slice(eq + 1)) ? `${w.slice(0, eq)}=…` : w;
    const before = words[k - 1];
    if (k > 0 && before !== undefined && before.startsWith("-") && SENSITIVE_HEADER.test(before)) return "…";
    return looksLikeCredential("", w) ? "…" : w;
  });
  return out.join(" ") || "(no command)";
}

/** A URL for messages: without user:password@, and its query hidden when a credential may be in it. */
export function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    const hide = urlProblem(url) !== null;
    return `${u.protocol}//${u.host}${u.pathname}${u.search ? (hide ? "?…" : u.search) : ""}`;
  } catch {
    return "(not a URL)";
  }
}

/** Where a client file holds servers: the top-level key, or a project's. */
export interface Scope {
  node: JsonNode | undefined;
  where: string;
  parent: JsonNode;
  top: boolean;
}

/** Every server in the file, with the scopes (`{ node, where }`) that hold servers. */
export function serversOf(client: Client, parsed: { root: JsonNode }): { scopes: Scope[]; servers: Server[] } {
  const f = FORMATS[client];
  const scopes: Scope[] = [];
  const top = member(parsed.root, f.key);
  scopes.push({ node: top?.value, where: f.key, parent: parsed.root, top: true });
  if (f.projects) {
    const projects = member(parsed.root, "projects")?.value;
    for (const p of projects?.kind === "object" ? projects.members : []) {
      const m = member(p.value, "mcpServers");
      if (m?.value.kind === "object") scopes.push({ node: m.value, where: `projects[${JSON.stringify(p.key)}].mcpServers`, parent: p.value, top: false });
    }
  }
  const servers: Server[] = [];
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

export const isGatewayEntry = (s: Server, gateway: string): boolean => s.name === ENTRY || (s.url !== undefined && sameUrl(s.url, gateway));

// ---------------------------------------------------------------------------------------------
// The OAuth probe: does an HTTP server sign people in with OAuth (so its upstream gets auth: {type: oauth})?

/** What one probe of a server found: an OAuth sign-in (and the evidence), an answer (its status), or no answer (why). */
export type Probe = { oauth: true; evidence: string } | { oauth: false; status: number } | { oauth: false; status: null; why: string };

export const PROBE_TIMEOUT_MS = 3000;

/** One request of the probe: no redirect followed, no header of the client's, its body discarded. */
async function probeRequest(url: string, init: RequestInit, timeoutMs: number): Promise<Response> {
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    return await fetch(url, { ...init, redirect: "manual", signal });
  } catch (e) {
    throw new Error(signal.aborted ? `no answer within ${timeoutMs / 1000} s` : causeOf(e));
  }
}

/** RFC 9728 §3.1: the metadata URL with the resource's path inserted after /.well-known/oauth-protected-resource, then the origin's. */
function metadataUrls(url: string): string[] {
  const u = new URL(url);
  const path = u.pathname.replace(/\/+$/, "");
  const base = `${u.origin}/.well-known/oauth-protected-resource`;
  return path ? [`${base}${path}`, base] : [base];
}

/**
 * Whether the MCP server at `url` signs in with OAuth: one POST initialize (no redirect followed,
 * none of the client's headers); a 401 whose WWW-Authenticate is a Bearer challenge carrying
 * resource_metadata, or a 401 from a server that serves RFC 9728 protected-resource metadata
 * (authorization_servers), is OAuth. A server that does not answer is not (status null, why).
 */
export async function probeOAuth(url: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<Probe> {
  let res: Response;
  try {
    res = await probeRequest(
      url,
      {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "portcullis-import", version: "1" } },
        }),
      },
      timeoutMs,
    );
  } catch (e) {
    return { oauth: false, status: null, why: messageOf(e) };
  }
  await res.body?.cancel().catch(() => undefined);
  if (res.status !== 401) return { oauth: false, status: res.status };
  const challenge = res.headers.get("www-authenticate") ?? "";
  if (/\bbearer\b/i.test(challenge) && /\bresource_metadata\s*=/i.test(challenge))
    return { oauth: true, evidence: "401 with WWW-Authenticate: Bearer resource_metadata=…" };
  for (const meta of metadataUrls(url)) {
    try {
      const r = await probeRequest(meta, { headers: { accept: "application/json" } }, timeoutMs);
      const body: unknown = r.ok ? await r.json().catch(() => null) : await r.body?.cancel().catch(() => null);
      if (isObject(body) && Array.isArray(body.authorization_servers))
        return { oauth: true, evidence: `401, and RFC 9728 metadata at ${new URL(meta).pathname}` };
    } catch {
      // No metadata there: try the next URL.
    }
  }
  return { oauth: false, status: 401 };
}

// ---------------------------------------------------------------------------------------------
// Secrets: what looks like a credential, and the references that replace it.

// The rule itself (looksLikeCredential, secretName) is src/config/inline-secret.ts's: the config
// loader, `check` and `add` refuse by it too.

/** `${env:X}`, `${X}`, `${X:-default}` → `${X}`; anything else in `${…}` (an input, a client variable) → null. */
function envRefs(value: string) {
  const refs: string[] = [];
  let unresolvable = false;
  let droppedDefault = false;
  const text = value.replace(/\$\{([^}]*)\}/g, (_, inner: string) => {
    const m = /^(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(:-.*)?$/.exec(inner);
    if (!m?.[1]) {
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

/** A secret an imported upstream needs: the `${NAME}` its header names, and why. */
export interface ImportedSecret {
  name: string;
  upstream: string;
  header: string;
  why: string;
}

/**
 * The headers an upstream gets for a client server's headers: references as they were (in Portcullis
 * syntax), credentials replaced by a new `${NAME}`, other literals as they were. Never a credential.
 */
export function upstreamHeaders(
  up: string,
  server: Server,
  taken: Set<string>,
): { headers: Record<string, string>; secrets: ImportedSecret[]; notes: string[] } {
  const headers: Record<string, string> = {};
  const secrets: ImportedSecret[] = [];
  const notes: string[] = [];
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
export function urlProblem(url: string): string | null {
  let u: URL;
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
export function upstreamName(raw: string, taken: Set<string>): string {
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

/** Writes `text` to `file` by a rename in its directory, keeping the file's mode. */
export function writeAtomic(file: string, text: string): void {
  const mode = existsSync(file) ? statSync(file).mode & 0o777 : 0o644;
  const tmp = join(dirname(file), `.${basename(file)}.portcullis-${process.pid}.tmp`);
  try {
    writeFileSync(tmp, text, { mode, flag: "wx" });
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw new Failure(`cannot write ${file} (${codeOf(e)})`);
  }
}
