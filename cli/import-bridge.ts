/**
 * `portcullis import --bridge` (cli/clients.ts runs it): each stdio server of a client file
 * becomes an upstream served by `portcullis bridge` (cli/bridge.ts). Owns the plan for each one —
 * its upstream name, its port (from `--bridge-port` upward, deterministic in the file's order,
 * skipping a port another upstream of the config names or something on this machine listens on),
 * its secret file and log under <config dir>/.portcullis/bridges/, the upstream entry (the
 * bearer header names the secret as `${BRIDGE_<NAME>_SECRET}`), the environment the server had
 * (`${VAR}` references kept as references, plain values kept, inline credentials never copied:
 * the person exports them by name) — the start script (start.sh beside the secret files: one
 * `portcullis bridge` per server, all stopped together) and the files it writes (secrets of mode
 * 0600, reused when they exist). A server whose command line carries a credential, or whose entry
 * cannot be run as it is (no command, an envFile), is not bridged: it stays in the client file,
 * with the reason. Must never: copy a credential out of a client file (into the config, the
 * script or a message), print a bridge secret, or write anything on --dry-run.
 */
import { chmodSync, existsSync, mkdirSync } from "node:fs";
import { createServer } from "node:net";
import { dirname, join, resolve } from "node:path";
import { looksLikeCredential, SENSITIVE_HEADER } from "../src/config/inline-secret.ts";
import { secretFromFile, secretNameOf } from "./bridge-secret.ts";
import { type Client, type Server, upstreamName, writeAtomic } from "./client-files.ts";
import { isObject, type JsonObject } from "./gateway-http.ts";

/** The first port `--bridge-port` stands for. */
export const DEFAULT_BRIDGE_PORT = 8801;

/** One stdio server moved behind a bridge. */
export interface BridgePlan {
  server: string;
  where: string;
  upstream: string;
  port: number;
  url: string;
  secretName: string;
  secretFile: string;
  logFile: string;
  /** What the bridge runs after `--`. */
  command: string[];
  /** The server's environment: a value kept as it was, a reference to another variable, or one the person must export. */
  env: { name: string; value?: string; from?: string; export?: true }[];
}

/** Why a stdio server cannot be bridged as it is; null when it can. */
export function notBridgeable(entry: JsonObject | undefined): string | null {
  if (!entry || typeof entry.command !== "string" || !entry.command) return "its entry names no command";
  if (entry.envFile !== undefined) return "it reads an envFile, which the bridge does not: move those variables to env and import again";
  const args = Array.isArray(entry.args) ? entry.args : [];
  if (!args.every((x) => typeof x === "string")) return "its args are not all strings";
  const words = [entry.command, ...(args as string[])];
  const secretWord = words.some((w, k) => {
    const eq = w.indexOf("=");
    if (w.startsWith("-") && eq > 0) return SENSITIVE_HEADER.test(w.slice(0, eq)) || looksLikeCredential("", w.slice(eq + 1));
    const before = words[k - 1];
    return (k > 0 && before !== undefined && before.startsWith("-") && SENSITIVE_HEADER.test(before)) || looksLikeCredential("", w);
  });
  if (secretWord) return "its command line carries a credential (never copied): move it to env and import again";
  return null;
}

/** Whether something on this machine listens on 127.0.0.1:`port` (a bind there fails). */
function inUse(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = createServer();
    s.unref();
    s.once("error", () => done(true));
    s.listen(port, "127.0.0.1", () => s.close(() => done(false)));
  });
}

/** The ports of loopback URLs among `urls` (the config's upstreams: another bridge, a local server). */
function loopbackPorts(urls: unknown[]): Set<number> {
  const out = new Set<number>();
  for (const u of urls) {
    if (typeof u !== "string") continue;
    try {
      const url = new URL(u);
      if (["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)) out.add(Number(url.port || (url.protocol === "https:" ? 443 : 80)));
    } catch {
      // Not a URL: the config check reports it.
    }
  }
  return out;
}

const REF = /^\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}$/;

/** The plans for `servers` (stdio, each with its entry), in order; names and secret names taken from `names` and `secretNames`. */
export async function planBridges(
  servers: { server: Server; entry: JsonObject }[],
  o: { base: number; configFile: string; names: Set<string>; secretNames: Set<string>; upstreamUrls: unknown[] },
): Promise<BridgePlan[]> {
  const taken = loopbackPorts(o.upstreamUrls);
  const dir = join(dirname(o.configFile), ".portcullis", "bridges");
  const plans: BridgePlan[] = [];
  let port = o.base;
  for (const { server, entry } of servers) {
    while (port <= 65535 && (taken.has(port) || (await inUse(port)))) port++;
    if (port > 65535) throw new Error(`no free port from --bridge-port ${o.base} up`);
    taken.add(port);
    const upstream = upstreamName(server.name, o.names);
    let secretName = secretNameOf(upstream);
    for (let n = 2; o.secretNames.has(secretName); n++) secretName = `${secretNameOf(upstream).replace(/_SECRET$/, "")}_${n}_SECRET`;
    o.secretNames.add(secretName);
    const env: BridgePlan["env"] = [];
    for (const [name, v] of Object.entries(isObject(entry.env) ? entry.env : {})) {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) continue;
      const value = String(v);
      const ref = REF.exec(value)?.[1];
      if (ref) env.push(ref === name ? { name, export: true } : { name, from: ref });
      else if (value.includes("${") || looksLikeCredential(name, value)) env.push({ name, export: true });
      else env.push({ name, value });
    }
    plans.push({
      server: server.name,
      where: server.where,
      upstream,
      port,
      url: `http://127.0.0.1:${port}/mcp`,
      secretName,
      secretFile: join(dir, `${upstream}.secret`),
      logFile: join(dir, `${upstream}.log`),
      command: [entry.command as string, ...((Array.isArray(entry.args) ? entry.args : []) as string[])],
      env,
    });
    port++;
  }
  return plans;
}

/** The config's upstream for a plan: the bridge's URL, its secret by name. */
export const bridgeUpstream = (p: BridgePlan, client: Client): JsonObject => ({
  name: p.upstream,
  url: p.url,
  description: `${p.server}, a stdio server imported from ${client} (${p.where}), served by portcullis bridge`.slice(0, 500),
  headers: { Authorization: `Bearer \${${p.secretName}}` },
});

/** A word for sh, single-quoted. */
const q = (w: string) => `'${w.replace(/'/g, `'\\''`)}'`;

/** The `portcullis bridge` line of a plan, as a person types it (the script runs the same with this CLI's own paths). */
export const bridgeLine = (p: BridgePlan, cli = "npx portcullis") =>
  `${cli} bridge --port ${p.port} --name ${p.upstream} --secret-file ${q(p.secretFile)} --log ${q(p.logFile)} -- ${p.command.map(q).join(" ")}`;

/** The variables a plan needs the person to export before the script runs (inline credentials, never copied). */
export const toExport = (plans: BridgePlan[]) => plans.flatMap((p) => p.env.filter((e) => e.export).map((e) => ({ ...e, plan: p })));

/** start.sh: every bridge started, each with its server's environment, all stopped together (Ctrl-C, SIGTERM). */
export function startScript(plans: BridgePlan[], client: Client, file: string): string {
  const cli = `${q(process.execPath)} ${q(resolve(import.meta.dirname, existsSync(resolve(import.meta.dirname, "../bin/portcullis.mjs")) ? "../bin/portcullis.mjs" : "../../bin/portcullis.mjs"))}`;
  const lines = [
    "#!/bin/sh",
    `# The stdio servers of ${file} (${client}) behind the gateway: \`portcullis import --bridge\` wrote`,
    "# this. Each runs under `portcullis bridge` on 127.0.0.1 behind its secret (the file beside this one,",
    `# mode 0600; the gateway config names it as \${BRIDGE_<NAME>_SECRET}). Ctrl-C or SIGTERM stops them all.`,
    "set -u",
  ];
  for (const e of toExport(plans))
    lines.push(
      `: "\${${e.name}:?export ${e.name} first: ${e.plan.server} needs it (its value in ${file} is a credential or a client variable, never copied)}"`,
    );
  lines.push("pids=''", "trap 'kill $pids 2>/dev/null; wait' INT TERM", "");
  for (const p of plans) {
    const env = p.env.filter((e) => !e.export).map((e) => `export ${e.name}=${e.from ? `"\${${e.from}:-}"` : q(e.value ?? "")}; `);
    lines.push(`# ${p.server} (${p.where}) → upstream ${p.upstream}, ${p.url}`);
    lines.push(`( ${env.join("")}exec ${bridgeLine(p, cli)} ) &`);
    lines.push('pids="$pids $!"');
  }
  lines.push("wait", "");
  return lines.join("\n");
}

/** Where start.sh goes: beside the secret files ("" without a plan). */
export const scriptOf = (plans: BridgePlan[]): string => (plans[0] ? join(dirname(plans[0].secretFile), "start.sh") : "");

/** Writes each plan's secret file (0600; an existing one is reused) and start.sh (0700); the script's path. */
export function writeBridgeFiles(plans: BridgePlan[], client: Client, file: string): string {
  const first = plans[0];
  if (!first) return "";
  const dir = dirname(first.secretFile);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const p of plans) secretFromFile(p.secretFile);
  const script = scriptOf(plans);
  writeAtomic(script, startScript(plans, client, file));
  chmodSync(script, 0o700);
  return script;
}

/** What import prints for the bridges: the script, each line, the variables to export, how the gateway gets each secret. */
export function bridgeReport(plans: BridgePlan[], script: string, dry: boolean): string[] {
  if (!plans.length) return [];
  const out = [`  stdio servers behind bridges (${dry ? "would write" : "written"}: secrets of mode 0600 and ${script}):`];
  for (const p of plans) out.push(`    ${p.server} → upstream ${p.upstream} at ${p.url}: ${bridgeLine(p)}`);
  for (const e of toExport(plans)) out.push(`    export ${e.name}=…   (${e.plan.server}'s env had it inline or from the client; never copied)`);
  out.push(`  start them: sh ${script}   (keep it running; Ctrl-C stops every bridge and its servers)`);
  out.push("  the gateway sends each bridge its secret: for portcullis dev, in its environment:");
  for (const p of plans) out.push(`    export ${p.secretName}="$(cat ${q(p.secretFile)})"`);
  out.push("    (a hosted gateway: npx wrangler secret put NAME for each, and a tunnel: README, Bridging a stdio server)");
  return out;
}
