/**
 * `portcullis import | restore | doctor --clients`: an MCP client's own config file (Claude Code,
 * Claude Desktop, Cursor, VS Code) moved behind the gateway and back. `import` reads the client's
 * server list, appends each HTTP server it can govern to the `upstreams:` of a portcullis.yaml
 * (through the yaml Document API, so its comments stay), backs the client file up once, takes those
 * servers out of the client file and adds one `portcullis` entry; a server that signs in with OAuth
 * (its entry's settings, or a probe unless --offline) becomes an `auth: {type: oauth}` upstream that
 * each person connects in the console; what it cannot govern — stdio servers, legacy SSE, a URL
 * carrying a credential — stays in the client file byte for byte and is named
 * (`not governed: <reason>`); with `--bridge` each stdio server instead becomes an upstream served by
 * `portcullis bridge` on 127.0.0.1 (cli/import-bridge.ts plans it and writes its secret and start
 * script) and leaves the client file too. `restore` puts the backup back byte for byte; `doctor --clients`
 * reports servers a client reaches directly (ungoverned: a problem when import would move them;
 * reported, not failed, when it cannot govern them yet), a missing gateway entry, and a gateway
 * entry that reads PORTCULLIS_TOKEN. `--gateway` is normalised the same way in both (an origin gets
 * /mcp; /mcp and /mcp/<upstream> are kept; any other path is a usage error). Owns these commands'
 * flags, output and exit codes (0 ok, 1 problems found, 2 usage); the client file formats and the
 * probe are cli/client-files.ts's, the byte-exact JSONC edit cli/jsonc.ts's.
 * Must never: copy a credential out of a client file (an inline secret becomes a `${NAME}`
 * reference and the command names the secret to set, never its value; an entry's own OAuth client
 * settings are named by their keys only, never copied), print one, change or drop a
 * server it keeps, overwrite an existing backup, write anything on --dry-run, or point a client at
 * PORTCULLIS_TOKEN.
 */
import { constants, copyFileSync, existsSync, readFileSync, rmSync } from "node:fs";
import { basename, resolve } from "node:path";
import { Document, isMap, isSeq, parseDocument } from "yaml";
import { FLAG, HELP_OPTION, namesOf, type Options, parseOptions, portArg, STRING, UsageError } from "./args.ts";
import {
  AGENT_TOKEN,
  BACKUP_SUFFIX,
  CLIENTS,
  type Client,
  DEFAULT_GATEWAY,
  ENTRY,
  FORMATS,
  Failure,
  gatewayEndpoint,
  gatewayEntry,
  type ImportedSecret,
  isClient,
  isGatewayEntry,
  OPERATOR_TOKEN,
  PROBE_TIMEOUT_MS,
  type Probe,
  probeOAuth,
  readClientFile,
  type Server,
  safeUrl,
  sameUrl,
  sendsCredential,
  serversOf,
  upstreamHeaders,
  upstreamName,
  urlProblem,
  writeAtomic,
} from "./client-files.ts";
import { codeOf, exitCodeOf, isObject, type JsonObject } from "./gateway-http.ts";
import { bridgeReport, bridgeUpstream, DEFAULT_BRIDGE_PORT, notBridgeable, planBridges, scriptOf, writeBridgeFiles } from "./import-bridge.ts";
import { applyEdits, dropMembers, type Edit, indentUnit, member, scanJsonc, setMember } from "./jsonc.ts";

const HELP = {
  import: `usage: portcullis import --client ${CLIENTS.join("|")} [--path FILE] [--config portcullis.yaml]
                         [--gateway URL] [--bridge [--bridge-port N]] [--offline] [--dry-run] [--json]
  moves a client's HTTP MCP servers behind Portcullis, and keeps what it cannot govern:
  - each HTTP server in the client's file becomes an upstream in --config (default ./portcullis.yaml,
    created when missing; appended to upstreams:, comments kept) and leaves the client file
  - a server that signs in with OAuth (its entry's oauth/auth settings or an mcp-remote
    --static-oauth-… flag; or the probe below) becomes an upstream with auth: {type: oauth}: each person
    connects it once in the console (<gateway>/console/connections; --json: oauth[]); the entry's own
    OAuth client settings are the client's registration and are not copied (their key names are shown)
  - kept in the client file as they are, each named with "not governed: <reason>" (--json: kept[]):
    stdio  a server the client starts (command): a Worker cannot spawn processes (unless --bridge)
    sse    the legacy SSE transport (Portcullis upstreams speak Streamable HTTP)
    url    a url carrying a credential (user:password@, ?token=…): move it to a header, import again
  - the probe: each HTTP server sending no credential-looking header gets one POST initialize
    (${PROBE_TIMEOUT_MS / 1000} s, no redirect followed, none of its headers); a 401 with WWW-Authenticate: Bearer
    resource_metadata=…, or with RFC 9728 metadata at /.well-known/oauth-protected-resource, is OAuth.
    A server that does not answer is imported as a plain HTTP upstream, and said so
  - secrets only by reference: an inline Authorization (or any credential-looking header) is never
    copied; the upstream gets "\${<NAME>_TOKEN}" and the command names the secret to set
  - the client file is backed up once to FILE${BACKUP_SUFFIX} (an existing backup is never overwritten),
    then gets one "${ENTRY}" entry at --gateway sending the agent's grant from $${AGENT_TOKEN} (never
    ${OPERATOR_TOKEN}, the operator CLI's); every kept server and every other key stays byte for byte
  --client C     claude-code (~/.claude.json: mcpServers and projects.<dir>.mcpServers; or --path .mcp.json),
                 claude-desktop (claude_desktop_config.json: ~/Library/Application Support/Claude on macOS,
                 ~/.config/Claude elsewhere), cursor (~/.cursor/mcp.json), vscode (./.vscode/mcp.json: servers)
  --path FILE    the client's config file instead of its default
  --gateway URL  the gateway: its origin (http://127.0.0.1:8787 gets /mcp), its MCP endpoint …/mcp (default
                 ${DEFAULT_GATEWAY}), or one upstream's route …/mcp/<upstream>; any other path is refused.
                 What the client file gets always ends in /mcp or /mcp/<upstream>
  --bridge       each stdio server becomes an upstream too, served by portcullis bridge on 127.0.0.1: a port
                 each (from --bridge-port N, default ${DEFAULT_BRIDGE_PORT}, upward, skipping ports in use or named by
                 the config), a secret file each (<config dir>/.portcullis/bridges/<name>.secret, mode 0600, never
                 printed) that the upstream's Authorization names as \${BRIDGE_<NAME>_SECRET}, egress.allow_loopback
                 set, and .portcullis/bridges/start.sh, which starts every bridge (the lines are printed too).
                 The server's env: references stay references, an inline credential is never copied (the
                 script asks for it by name). A server whose command line carries a credential stays direct
  --offline      no probe, no network: only each entry's own settings say whether it signs in with OAuth
                 (a probed OAuth server is then imported without auth: add it by hand)
  --dry-run      print what would change; write nothing (the probe still runs unless --offline)
  --json         print the result as JSON
exit: 0 imported (or nothing to import), 1 a file could not be read, parsed or written, 2 usage`,
  restore: `usage: portcullis restore --client ${CLIENTS.join("|")} [--path FILE] [--json]
  puts FILE${BACKUP_SUFFIX} (written by the first import) back byte for byte and removes it;
  the upstreams import added to portcullis.yaml stay, and so do the bridges' files (import --bridge)
exit: 0 restored, 1 no backup (or it could not be restored), 2 usage`,
  doctor: `usage: portcullis doctor --clients [--client ${CLIENTS.join("|")}] [--path FILE] [--gateway URL] [--offline] [--json]
  reports every MCP server a client reaches directly (an ungoverned path: anything but the "${ENTRY}"
  entry), a client with no gateway entry, and a gateway entry that reads ${OPERATOR_TOKEN} (the
  operator CLI's variable) instead of ${AGENT_TOKEN}. A direct server that import keeps because
  Portcullis cannot govern it yet ("not governed: stdio" or "sse", as import says) is reported but is
  not a problem by itself; any other direct server is, a server that signs in with OAuth too (import
  moves it as an OAuth upstream; --json: its "oauth" is true). Without --client: every client
  config found at its default path (and ./.mcp.json, ./.cursor/mcp.json, ./.vscode/mcp.json)
  --gateway URL  the gateway, as import reads it: its origin (gets /mcp), its MCP endpoint …/mcp (default
                 ${DEFAULT_GATEWAY}) or …/mcp/<upstream>; an entry at that endpoint, or named "${ENTRY}",
                 is the gateway entry
  --offline      no probe: an HTTP server counts as signing in with OAuth only by its entry's own settings
                 (otherwise each one sending no credential-looking header is probed as import does; the
                 verdict is the same either way, only what the report says about OAuth differs)
exit: 0 every client goes through the gateway (and what it keeps direct is only what Portcullis cannot
  govern yet), 1 an ungoverned server import would move, a missing gateway entry or one reading
  ${OPERATOR_TOKEN}, 2 usage`,
};

const IMPORT_OPTIONS = {
  client: STRING,
  path: STRING,
  config: STRING,
  gateway: STRING,
  bridge: FLAG,
  "bridge-port": STRING,
  offline: FLAG,
  "dry-run": FLAG,
  json: FLAG,
  ...HELP_OPTION,
} as const;
const RESTORE_OPTIONS = { client: STRING, path: STRING, json: FLAG, ...HELP_OPTION } as const;
const DOCTOR_OPTIONS = { clients: FLAG, client: STRING, path: STRING, gateway: STRING, offline: FLAG, json: FLAG, ...HELP_OPTION } as const;

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { import: namesOf(IMPORT_OPTIONS), restore: namesOf(RESTORE_OPTIONS), doctor: namesOf(DOCTOR_OPTIONS) };

function help(cmd: keyof typeof HELP): number {
  console.log(HELP[cmd]);
  return 0;
}

function clientOf(a: { client?: string; path?: string }, o: { required: true }): Client;
function clientOf(a: { client?: string; path?: string }, o: { required: false }): Client | undefined;
function clientOf(a: { client?: string; path?: string }, { required }: { required: boolean }): Client | undefined {
  if (a.client === undefined) {
    if (required) throw new UsageError(`give --client (${CLIENTS.join(", ")})`);
    if (a.path !== undefined) throw new UsageError("--path needs --client (the file's format)");
    return undefined;
  }
  if (!isClient(a.client)) throw new UsageError(`--client must be one of ${CLIENTS.join(", ")}, not ${a.client}`);
  return a.client;
}

/** The file `import`/`restore` work on: --path, else the client's first default. */
const fileOf = (client: Client, a: { path?: string }) => resolve(typeof a.path === "string" ? a.path : (FORMATS[client].paths()[0] ?? ""));

/** The gateway's MCP endpoint --gateway names (cli/client-files.ts's gatewayEndpoint), or the default. */
const gatewayUrlOf = (a: { gateway?: string }): string => gatewayEndpoint(a.gateway ?? DEFAULT_GATEWAY);

// ---------------------------------------------------------------------------------------------
// What Portcullis cannot govern yet: the servers import keeps in the client file, and why.

/** Why a server stays direct: import keeps it, doctor reports it without counting it a problem (except "url", which the operator can fix). */
type KeptReason = "stdio" | "sse" | "url";
interface Kept {
  name: string;
  where: string;
  reason: KeptReason;
  detail: string;
}

const WHY: Record<KeptReason, string> = {
  stdio: "a Worker cannot spawn processes; import --bridge serves it to the gateway through portcullis bridge",
  sse: "the legacy SSE transport: Portcullis upstreams speak Streamable HTTP",
  url: "its url cannot be copied",
};

/** Servers an HTTP-server probe is for: HTTP, a clean url, no OAuth setting, no credential-looking header. */
const probed = (s: Server, offline: boolean): boolean =>
  !offline && s.kind === "http" && s.url !== undefined && !s.oauth && urlProblem(s.url) === null && !sendsCredential(s);

/** The probes of `servers` (at most 8 at once), by server. */
async function probesOf(servers: Server[], offline: boolean): Promise<Map<Server, Probe>> {
  const todo = servers.filter((s) => probed(s, offline));
  const out = new Map<Server, Probe>();
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(8, todo.length) }, async () => {
      for (let s = todo[next++]; s !== undefined; s = todo[next++]) out.set(s, await probeOAuth(s.url ?? ""));
    }),
  );
  return out;
}

/** Why Portcullis cannot govern `s` (it stays direct), with a detail for messages; null when import moves it. */
function keptOf(s: Server): Kept | null {
  const k = (reason: KeptReason, detail: string): Kept => ({ name: s.name, where: s.where, reason, detail });
  if (s.kind === "stdio") return k("stdio", `a stdio server (${s.command}): ${WHY.stdio}`);
  if (s.kind === "sse") return k("sse", WHY.sse);
  const bad = urlProblem(s.url ?? "");
  if (bad) return k("url", bad);
  return null;
}

/** What says an HTTP server signs in with OAuth (its entry's own setting, or what the probe found); null when nothing does. */
const oauthEvidenceOf = (s: Server, probe: Probe | undefined): string | null =>
  s.oauth ? `its entry's "${s.oauth}" setting` : probe?.oauth ? probe.evidence : null;

/** An OAuth server import moved: its upstream, why it is OAuth, and where each person connects it. */
interface MovedOAuth {
  upstream: string;
  server: string;
  evidence: string;
  connect: string;
  /** The keys of the entry's own OAuth client settings (clientId, callbackPort, …), never their values. */
  clientSettings: string[];
}

/**
 * An OAuth server's upstream gets `auth: {type: oauth}` (dynamic registration, each principal
 * connects their own); its notes and record, with the entry's own client settings named by their
 * keys only.
 */
function oauthUpstream(upstream: JsonObject, s: Server, evidence: string, gateway: string): { notes: string[]; moved: MovedOAuth } {
  const name = String(upstream.name);
  const origin = new URL(gateway).origin;
  const connect = `${origin}/console/connections?upstream=${encodeURIComponent(name)}`;
  upstream.auth = { type: "oauth" };
  const notes = [
    `signs in with OAuth (${evidence}): imported with auth: {type: oauth}; each person connects it once in the console: ${connect} (until then a call to it reaches nothing and is answered with that URL)`,
    "the gateway keeps OAuth tokens sealed under the PORTCULLIS_CREDENTIALS_KEY secret (32 bytes, base64): dev: export PORTCULLIS_CREDENTIALS_KEY=$(openssl rand -base64 32); deploy: npx wrangler secret put PORTCULLIS_CREDENTIALS_KEY",
    "its authorization server's host must be allowed by egress (any public host while egress.hosts is empty; otherwise add it there)",
  ];
  const settings = s.oauthKeys ?? [];
  if (s.oauth)
    notes.push(
      `the entry's "${s.oauth}" setting${settings.length ? ` (${settings.join(", ")})` : ""} is the client's own sign-in and was not copied: the gateway registers itself (dynamic registration); if the server does not offer it, register a client whose redirect URI is ${origin}/console/connections/callback and set upstreams.${name}.auth.client_id (and client_secret as a \${NAME} reference)`,
    );
  return { notes, moved: { upstream: name, server: s.name, evidence, connect, clientSettings: settings } };
}

// ---------------------------------------------------------------------------------------------
// The Portcullis config: read its upstreams, append new ones, keep everything else.

function readConfig(file: string): { doc: Document | null; upstreams: JsonObject[] } {
  if (!existsSync(file)) return { doc: null, upstreams: [] };
  const doc = parseDocument(readFileSync(file, "utf8"), { uniqueKeys: true });
  if (doc.errors.length) throw new Failure(`${file}: YAML: ${String(doc.errors[0]?.message).split("\n")[0]}`);
  if (doc.contents !== null && !isMap(doc.contents)) throw new Failure(`${file}: not a YAML mapping`);
  const seq = doc.get("upstreams", true);
  if (seq !== undefined && seq !== null && !isSeq(seq)) throw new Failure(`${file}: upstreams: is not a list`);
  const upstreams = isSeq(seq) ? ((seq.toJSON() ?? []) as unknown[]).filter(isObject) : [];
  return { doc, upstreams };
}

/** The config text with `added` appended to upstreams: (the file created when missing); `loopback`: egress.allow_loopback set too (bridges). */
function configWith(file: string, doc: Document | null, added: JsonObject[], client: Client, loopback = false): string {
  if (!doc) {
    const fresh = new Document(loopback ? { egress: { allow_loopback: true }, upstreams: added } : { upstreams: added });
    fresh.commentBefore = ` Portcullis config: upstreams imported from ${client} by \`portcullis import\`.\n Check it with: portcullis doctor --config ${basename(file)}`;
    return fresh.toString({ lineWidth: 0 });
  }
  if (loopback && doc.getIn(["egress", "allow_loopback"]) !== true) doc.setIn(["egress", "allow_loopback"], true);
  let seq = doc.get("upstreams", true);
  if (!isSeq(seq)) {
    seq = doc.createNode([]);
    doc.set("upstreams", seq);
  }
  if (isSeq(seq)) {
    if (seq.flow && seq.items.length === 0) seq.flow = false;
    for (const u of added) seq.add(doc.createNode(u));
  }
  return doc.toString({ lineWidth: 0 });
}

// ---------------------------------------------------------------------------------------------
// The commands.

const connectLine = (gateway: string) => `claude mcp add --transport http ${ENTRY} ${gateway} --header 'Authorization: Bearer \${${AGENT_TOKEN}}'`;

// A grant that reaches every tool (--tools '*'); narrow it with globs for a real agent.
const mintLine = (gateway: string) => `portcullis token mint --sub you@example.com --tools '*' --gateway ${new URL(gateway).origin}`;

async function importCommand(a: Options<typeof IMPORT_OPTIONS>): Promise<number> {
  if (a.help) return help("import");
  const client = clientOf(a, { required: true });
  const gateway = gatewayUrlOf(a);
  const file = fileOf(client, a);
  const configFile = resolve(typeof a.config === "string" ? a.config : "portcullis.yaml");
  const dry = a["dry-run"] === true;
  const offline = a.offline === true;
  if (a["bridge-port"] !== undefined && !a.bridge) throw new UsageError("--bridge-port needs --bridge");
  const bridgePort = portArg(a["bridge-port"], DEFAULT_BRIDGE_PORT, "--bridge-port");
  const parsed = readClientFile(file);
  const { scopes, servers } = serversOf(client, parsed);
  const config = readConfig(configFile);
  const probes = await probesOf(
    servers.filter((s) => !isGatewayEntry(s, gateway)),
    offline,
  );

  const names = new Set(config.upstreams.map((u) => u.name).filter((n): n is string => typeof n === "string"));
  const secretNames = new Set<string>();
  const added: JsonObject[] = [];
  const reused: { server: string; where: string; upstream: unknown }[] = [];
  const kept: Kept[] = [];
  const oauth: MovedOAuth[] = [];
  const secrets: ImportedSecret[] = [];
  const notes: string[] = [];
  // What leaves the client file (by where): the servers moved behind the gateway, and old gateway entries.
  const leaving = new Set<string>();
  // The stdio servers --bridge moves behind a bridge each.
  const bridged: { server: Server; entry: JsonObject }[] = [];
  for (const s of servers) {
    if (isGatewayEntry(s, gateway)) {
      leaving.add(s.where);
      continue;
    }
    const probe = probes.get(s);
    const keep = keptOf(s);
    if (keep?.reason === "stdio" && a.bridge) {
      const why = notBridgeable(s.entry);
      if (!why && s.entry) {
        bridged.push({ server: s, entry: s.entry });
        leaving.add(s.where);
        continue;
      }
      keep.detail = `a stdio server (${s.command}), not bridged: ${why}`;
    }
    if (keep || s.url === undefined) {
      if (keep) kept.push(keep);
      continue;
    }
    const url = s.url;
    leaving.add(s.where);
    const same = [...config.upstreams, ...added].find((u) => typeof u.url === "string" && sameUrl(u.url, url));
    if (same) {
      reused.push({ server: s.name, where: s.where, upstream: same.name });
      continue;
    }
    const name = upstreamName(s.name, names);
    const evidence = oauthEvidenceOf(s, probe);
    // An OAuth upstream is sent the connection's token: the entry's own Authorization is not imported.
    const dropped = evidence ? Object.keys(s.headers).find((k) => k.toLowerCase() === "authorization") : undefined;
    const sent = dropped ? { ...s, headers: Object.fromEntries(Object.entries(s.headers).filter(([k]) => k !== dropped)) } : s;
    const h = upstreamHeaders(name, sent, secretNames);
    const upstream: JsonObject = { name, url, description: `${s.name}, imported from ${client} (${s.where})`.slice(0, 500) };
    if (Object.keys(h.headers).length) upstream.headers = h.headers;
    added.push(upstream);
    secrets.push(...h.secrets);
    notes.push(...h.notes.map((n) => `${name}: ${n}`));
    if (evidence) {
      const o = oauthUpstream(upstream, s, evidence, gateway);
      oauth.push(o.moved);
      notes.push(...o.notes.map((n) => `${name}: ${n}`));
      if (dropped) notes.push(`${name}: its ${dropped} header was not imported: an OAuth upstream is sent the connection's token`);
    }
    if (probe && !probe.oauth && probe.status === null)
      notes.push(
        `${name}: ${s.name} did not answer the OAuth probe (${probe.why}): imported as an HTTP server; if it signs in with OAuth, add auth: {type: oauth} to it`,
      );
    else if (probe && !probe.oauth && probe.status === 401)
      notes.push(
        `${name}: ${s.name} answered 401 with no OAuth metadata: it needs a credential the client file does not give; set it in upstreams.${name}.headers as a \${NAME} reference`,
      );
  }

  const plans = await planBridges(bridged, {
    base: bridgePort,
    configFile,
    names,
    secretNames,
    upstreamUrls: [...config.upstreams, ...added].map((u) => u.url),
  });
  added.push(...plans.map((p) => bridgeUpstream(p, client)));
  const script = scriptOf(plans);

  // The client file: the servers that leave are dropped from their lists (every kept one stays byte for
  // byte), then the top-level list gets the "portcullis" entry.
  const unit = indentUnit(parsed.text, parsed.root);
  const drops: Edit[] = [];
  for (const sc of scopes) {
    const node = sc.node;
    if (node?.kind !== "object") continue;
    // The top level's own "portcullis" entry is rewritten in place below, not dropped.
    const edit = dropMembers(parsed.text, node, (key) => leaving.has(`${sc.where}.${key}`) && !(sc.top && key === ENTRY));
    if (edit) drops.push(edit);
  }
  const dropped = applyEdits(parsed.text, drops);
  const root = scanJsonc(dropped);
  const list = member(root, FORMATS[client].key)?.value;
  const entry = gatewayEntry(client, gateway);
  const newClientText = applyEdits(dropped, [
    list?.kind === "object" ? setMember(dropped, list, ENTRY, entry, unit) : setMember(dropped, root, FORMATS[client].key, { [ENTRY]: entry }, unit),
  ]);
  const moved = servers.filter((s) => leaving.has(s.where) && !isGatewayEntry(s, gateway)).length;
  const clientChanged = newClientText !== parsed.text;
  const backup = `${file}${BACKUP_SUFFIX}`;
  const backupExisted = existsSync(backup);
  let backupWritten = false;
  if (!dry) {
    if (plans.length) writeBridgeFiles(plans, client, file);
    if (added.length) writeAtomic(configFile, configWith(configFile, config.doc, added, client, plans.length > 0));
    if (clientChanged) {
      if (!backupExisted) {
        try {
          copyFileSync(file, backup, constants.COPYFILE_EXCL);
          backupWritten = true;
        } catch (e) {
          throw new Failure(`cannot back up ${file} to ${backup} (${codeOf(e)}); the client file was not changed`);
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
    offline,
    upstreams: added,
    reused,
    kept,
    oauth,
    secrets: secrets.map((s) => ({ ...s, dev: `export ${s.name}=…`, deploy: `npx wrangler secret put ${s.name}` })),
    notes,
    bridges: plans.map((p) => ({ ...p, dev: `export ${p.secretName}="$(cat ${p.secretFile})"` })),
    bridgeScript: script || null,
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
    for (const u of added) {
      const headers = isObject(u.headers) ? u.headers : undefined;
      const shown = headers
        ? `  headers: ${Object.entries(headers)
            .map(([k, v]) => `${k}: ${v}`)
            .join(", ")}`
        : "";
      console.log(`    ${u.name}  ${u.url}${shown}${isObject(u.auth) ? "  auth: {type: oauth}" : ""}`);
    }
  } else console.log(`  no new upstream for ${configFile}`);
  for (const r of reused) console.log(`  ${r.server}: already upstream ${r.upstream} of ${configFile} (same url), not added again`);
  for (const k of kept)
    console.log(
      `  stays direct: ${k.name} (${k.where}) is not governed by Portcullis (not governed: ${k.reason}): ${k.detail}; kept in ${basename(file)} as it is`,
    );
  for (const n of notes) console.log(`  note: ${n}`);
  if (secrets.length) {
    console.log("  secrets to set for the gateway (values are never copied or printed):");
    for (const s of secrets) {
      console.log(`    ${s.name}: upstreams.${s.upstream}.headers.${s.header}; ${s.why}`);
      console.log(`      dev:    export ${s.name}=…   (portcullis dev passes it to the gateway)`);
      console.log(`      deploy: npx wrangler secret put ${s.name}`);
    }
  }
  for (const line of bridgeReport(plans, script, dry)) console.log(line);
  if (clientChanged) {
    console.log(
      backupExisted
        ? `  backup: ${backup} kept as it was (from the first import; never overwritten)`
        : `  backup: ${would}write ${backup} (portcullis restore --client ${client}${a.path ? ` --path ${a.path}` : ""} puts it back)`,
    );
    console.log(
      `  ${would}rewrite ${FORMATS[client].key} in ${file}: ${moved} server${moved === 1 ? "" : "s"} moved behind one "${ENTRY}" entry at ${gateway}` +
        `${kept.length ? `, ${kept.length} kept as ${kept.length === 1 ? "it was" : "they were"}` : ""}; every other key kept`,
    );
  } else console.log(`  ${file} already has the "${ENTRY}" entry and no server left to move: not changed`);
  if (client === "claude-desktop")
    console.log(`  Claude Desktop cannot read your shell's environment: put an agent grant (${mintLine(gateway)}) in ${ENTRY}.env.${AGENT_TOKEN} of ${file}`);
  else console.log(`  the client sends ${AGENT_TOKEN} from its environment: export ${AGENT_TOKEN}=$(${mintLine(gateway)})`);
  console.log(`  (an agent grant, in ${AGENT_TOKEN} only: ${OPERATOR_TOKEN} holds the operator CLI's admin and approver grants)`);
  console.log(`  to connect Claude Code by hand instead:\n    ${connectLine(gateway)}`);
  if (added.length && !dry) console.log(`  next: portcullis doctor --config ${configFile}`);
  return 0;
}

async function restoreCommand(a: Options<typeof RESTORE_OPTIONS>): Promise<number> {
  if (a.help) return help("restore");
  const client = clientOf(a, { required: true });
  const file = fileOf(client, a);
  const backup = `${file}${BACKUP_SUFFIX}`;
  if (!existsSync(backup)) throw new Failure(`no backup at ${backup}: nothing to restore (import writes it)`);
  try {
    copyFileSync(backup, file);
  } catch (e) {
    throw new Failure(`cannot restore ${file} from ${backup} (${codeOf(e)}); the backup is kept`);
  }
  rmSync(backup);
  if (a.json) console.log(JSON.stringify({ client, file, restoredFrom: backup }));
  else console.log(`portcullis restore ${client}: ${file} is back as it was before the import (${backup} removed)`);
  return 0;
}

type Described = {
  server: string;
  where: string;
  kind: Server["kind"];
  url?: string;
  command?: string | undefined;
  /** Why Portcullis cannot govern it (import keeps it direct), as import says it; absent when import would move it. */
  reason?: KeptReason;
  /** Whether it counts as a problem: every direct server but those Portcullis cannot govern yet. */
  problem: boolean;
  /** True when it signs in with OAuth (import moves it as an `auth: {type: oauth}` upstream). */
  oauth?: boolean;
};

/** Direct servers that are not a problem by themselves: Portcullis cannot govern them yet ("url" the operator can fix). */
const NOT_A_PROBLEM: ReadonlySet<KeptReason> = new Set(["stdio", "sse"]);

async function doctorCommand(a: Options<typeof DOCTOR_OPTIONS>): Promise<number> {
  if (a.help) return help("doctor");
  const only = clientOf(a, { required: false });
  const gateway = gatewayUrlOf(a);
  const offline = a.offline === true;
  const targets: { client: Client; file: string }[] = [];
  if (only) {
    const paths = a.path !== undefined ? [resolve(a.path)] : FORMATS[only].paths();
    const found = paths.filter((p) => existsSync(p));
    // A named client with no file at all is a client with no gateway entry.
    for (const p of found.length ? found : paths.slice(0, 1)) targets.push({ client: only, file: p });
  } else {
    for (const c of CLIENTS) for (const p of FORMATS[c].paths()) if (existsSync(p) && !targets.some((t) => t.file === p)) targets.push({ client: c, file: p });
  }
  const reports: { client: Client; file: string; exists: boolean; gateway: Described[]; ungoverned: Described[]; problems: string[] }[] = [];
  for (const { client, file } of targets) {
    const r = { client, file, exists: existsSync(file), gateway: [] as Described[], ungoverned: [] as Described[], problems: [] as string[] };
    reports.push(r);
    if (!r.exists) {
      r.problems.push(`no config file: ${client} does not reach the gateway (portcullis import --client ${client}, or add the "${ENTRY}" entry)`);
      continue;
    }
    try {
      const { servers } = serversOf(client, readClientFile(file));
      const probes = await probesOf(
        servers.filter((s) => !isGatewayEntry(s, gateway)),
        offline,
      );
      for (const s of servers) {
        const base = { server: s.name, where: s.where, kind: s.kind, ...(s.url ? { url: safeUrl(s.url) } : { command: s.command }) };
        if (isGatewayEntry(s, gateway)) {
          r.gateway.push({ ...base, problem: false });
          // An agent started from an operator's shell would send the operator's admin or approver grant.
          if (s.readsOperatorToken)
            r.problems.push(
              `the "${ENTRY}" entry (${s.where}) reads ${OPERATOR_TOKEN}, the operator CLI's variable: an agent started from an operator's shell runs with that grant; make it read ${AGENT_TOKEN} (portcullis import --client ${client} rewrites the entry)`,
            );
          continue;
        }
        const kept = keptOf(s);
        const signsIn = !kept && oauthEvidenceOf(s, probes.get(s)) !== null;
        r.ungoverned.push({
          ...base,
          ...(kept ? { reason: kept.reason } : {}),
          ...(signsIn ? { oauth: true } : {}),
          problem: !kept || !NOT_A_PROBLEM.has(kept.reason),
        });
      }
      // A file with no gateway entry matters when it names servers, or when this client was asked about.
      if (r.gateway.length === 0 && (servers.length || only)) r.problems.push(`no "${ENTRY}" entry: this client does not reach the gateway`);
    } catch (e) {
      if (!(e instanceof Failure)) throw e;
      r.problems.push(e.message);
    }
  }
  const ok = reports.length > 0 && reports.every((r) => r.problems.length === 0 && r.ungoverned.every((u) => !u.problem));
  if (a.json) {
    console.log(JSON.stringify({ ok, gateway, offline, clients: reports }, null, 2));
    return ok ? 0 : 1;
  }
  if (reports.length === 0) {
    console.log(
      `portcullis doctor --clients: no client config found at the default paths; give --client C [--path FILE], or connect one:\n  ${connectLine(gateway)}`,
    );
    return 1;
  }
  for (const r of reports) {
    const bad = r.problems.length + r.ungoverned.filter((u) => u.problem).length;
    const direct = r.ungoverned.length ? `; ${r.ungoverned.length} direct, not governed` : "";
    console.log(`${r.client}: ${r.file}: ${bad ? "PROBLEMS" : `ok (${r.gateway.map((g) => g.where).join(", ")}${direct})`}`);
    for (const u of r.ungoverned) {
      const what = `UNGOVERNED ${u.server} (${u.where}, ${u.kind}${u.url ? ` ${u.url}` : ` ${u.command}`}): reached directly, not through the gateway`;
      if (!u.reason)
        console.log(
          `  ${what} (portcullis import --client ${r.client} moves it${u.oauth ? ", as an OAuth upstream each person connects in the console" : ""})`,
        );
      else if (u.problem) console.log(`  ${what}; not governed: ${u.reason} (${WHY[u.reason]}: fix it and import again)`);
      else console.log(`  ${what}; not governed: ${u.reason} (${WHY[u.reason]}; import keeps it direct; not counted as a problem)`);
    }
    for (const p of r.problems) console.log(`  MISSING ${p}`);
  }
  if (!ok) console.log(`fix: portcullis import --client C moves HTTP servers behind the gateway; or connect by hand:\n  ${connectLine(gateway)}`);
  return ok ? 0 : 1;
}

const COMMANDS: Record<string, (argv: string[]) => Promise<number>> = {
  import: (argv) => importCommand(parseOptions(argv, IMPORT_OPTIONS)),
  restore: (argv) => restoreCommand(parseOptions(argv, RESTORE_OPTIONS)),
  doctor: (argv) => doctorCommand(parseOptions(argv, DOCTOR_OPTIONS)),
};

/** Runs `portcullis import|restore|doctor --clients <argv…>` (argv after the command); the exit code. */
export async function clientsCommand(cmd: string, argv: string[]): Promise<number> {
  const run = Object.hasOwn(COMMANDS, cmd) ? COMMANDS[cmd] : undefined;
  if (!run) {
    console.error(`portcullis: unknown command ${cmd}\n${HELP.import}`);
    return 2;
  }
  const label = cmd === "doctor" ? "portcullis doctor --clients" : `portcullis ${cmd}`;
  return exitCodeOf(label, async () => {
    try {
      return await run(argv);
    } catch (e) {
      if (!(e instanceof Failure)) throw e;
      console.error(`${label}: ${e.message}`);
      return 1;
    }
  });
}
