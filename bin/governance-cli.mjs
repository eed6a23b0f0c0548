#!/usr/bin/env node
/**
 * `portcullis classify` and `portcullis suggest-manifest`, and the classification banner `dev` and
 * `start` print once their gateway answers /healthz. Owns a small MCP client for one job — reading
 * an upstream's `tools/list` as a client would (2026-07-28 `server/discover` + `tools/list` with
 * `_meta`, else legacy `initialize` + `notifications/initialized` + `tools/list` with the session
 * header, every page, bounded in time and size, no redirect followed) — the text and JSON output of
 * both commands, their exit codes (0 fine, 1 a BLOCK / an unreachable upstream / a refused write,
 * 2 usage or an invalid config), and the drafts suggest-manifest writes. Classification itself is
 * src/governance/classify.ts, the schema hash src/governance/catalog-entry.ts, the mapping format
 * src/config/mapping-schema.ts: this file only feeds them and prints what they say. Runs in Node,
 * never in the Worker. Must never: print or log a header value (headers come from the config,
 * `${NAME}` from this environment; reasons are scrubbed of them), print a URL's userinfo or query,
 * overwrite a file without `--force`, write a draft where a gateway would load it unreviewed (the
 * config's mappings_dir, under an upstream's name), or wait on an upstream without a bound.
 */
import { existsSync, readFileSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, extname, isAbsolute, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parse as parseYaml } from "yaml";
import { inlineConfigFiles } from "./config-files.mjs";
import { parseOptions, UsageError } from "./cli-args.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const src = (path) => import(pathToFileURL(resolve(root, "src", path)).href);

const MODERN_VERSION = "2026-07-28";
const LEGACY_VERSION = "2025-11-25";
const META = {
  protocolVersion: "io.modelcontextprotocol/protocolVersion",
  clientCapabilities: "io.modelcontextprotocol/clientCapabilities",
  clientInfo: "io.modelcontextprotocol/clientInfo",
};
const CLIENT_INFO = { name: "portcullis-cli", version: "0.1.0" };
/** tools/list pages read per upstream (the gateway's catalog reads as many). */
const MAX_PAGES = 50;
/** Bytes read from one answer. */
const MAX_ANSWER_BYTES = 16 * 2 ** 20;
const DEFAULT_TIMEOUT_MS = 15_000;
/** The start banner: every upstream is asked at once, and none is waited on longer than this. */
const BANNER_BUDGET_MS = 5_000;

export const HELP = {
  classify: `usage: portcullis classify --config FILE [--json] [--live] [--timeout 15s]
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
exit: 0 no tool is BLOCK and every upstream answered, 1 otherwise (the reason is printed), 2 usage or invalid config`,
  "suggest-manifest": `usage: portcullis suggest-manifest --config FILE --upstream NAME [--out FILE] [--force] [--timeout 15s]
  Drafts a mapping file (mappings/<upstream>.yaml format) from the upstream's tools/list: for each tool
  the heuristic's guess — effect, verb, axes — with the tool's own annotations and description in a
  comment, and schema_hash pinned to its current hash. A draft is never enforced until reviewed:
  review every effect, then move it into mappings_dir as <upstream>.yaml.
  --out FILE  write the draft there (default: print it); an existing FILE is never overwritten
              without --force, and a file in the config's mappings_dir named after an upstream is
              refused (the gateway would load it unreviewed)
  --timeout   for the upstream (default 15s)
exit: 0 drafted, 1 the upstream could not be read or the file was refused, 2 usage or invalid config`,
};

class ConfigProblem extends Error {
  constructor(file, problems) {
    super(`${file}: invalid\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}
/** The upstream could not be read; the message is the reason (scrubbed of header values). */
class Unreachable extends Error {}

const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

const BOOLEAN = new Set(["json", "live", "force", "help"]);
export const KNOWN = {
  classify: ["config", "json", "live", "timeout", "help"],
  "suggest-manifest": ["config", "upstream", "out", "force", "timeout", "help"],
};

const parseArgs = (argv, known) => parseOptions(argv, { known, boolean: BOOLEAN, positionals: false });

function timeoutArg(v) {
  if (v === undefined) return DEFAULT_TIMEOUT_MS;
  const m = /^(\d+)(ms|s|m)?$/.exec(String(v));
  const ms = m ? Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] ?? "s"] : Number.NaN;
  if (!(ms >= 100 && ms <= 600_000)) throw new UsageError(`--timeout: use 500ms, 15s or 2m (between 100 ms and 10 minutes), not ${v}`);
  return ms;
}

/** A URL as it may be printed: no userinfo, no query, no fragment (either may hold a secret). */
export function printableUrl(url) {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}${u.search ? "?…" : ""}`;
  } catch {
    return "(not a URL)";
  }
}

/** `text` with every header value of `up` (and the URL's userinfo and query) replaced. */
function scrub(text, up) {
  let out = String(text);
  const secrets = Object.values(up.headers ?? {}).filter((v) => typeof v === "string" && v.length >= 4);
  try {
    const u = new URL(up.url);
    for (const s of [u.username, u.password, u.search.slice(1)]) if (s && s.length >= 4) secrets.push(s);
  } catch {
    /* no URL parts to hide */
  }
  for (const s of secrets.sort((a, b) => b.length - a.length)) out = out.split(s).join("<redacted>");
  return out;
}

/**
 * The config file as the gateway would get it (`policy` and `mappings_dir` inlined) and loaded
 * with `${NAME}` from this environment. Throws ConfigProblem naming every problem.
 */
export async function loadGatewayConfig(file) {
  let raw;
  try {
    raw = readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`--config: cannot read ${file} (${e.code ?? e.message})`);
  }
  const inlined = inlineConfigFiles(raw, file);
  if (inlined.problems.length) throw new ConfigProblem(file, inlined.problems);
  const { loadConfig, ConfigError } = await src("config/load.ts");
  // Given the CEL compiler, a config with problems reports its policy conditions' problems with them.
  const { compileCondition } = await src("governance/policy-cel.ts");
  // PORTCULLIS_ORIGIN is what the CLI tells a gateway it starts; it has no meaning here.
  const { PORTCULLIS_ORIGIN: _origin, ...vars } = process.env;
  try {
    return { cfg: loadConfig(inlined.text, vars, { source: file, conditions: compileCondition }), raw };
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigProblem(file, e.problems);
    throw e;
  }
}

// ---- a small MCP client: one upstream's tools/list ---------------------------------------------

/** `body` cut off with an error past MAX_ANSWER_BYTES. */
function bounded(body) {
  let n = 0;
  return body.pipeThrough(
    new TransformStream({
      transform(chunk, ctl) {
        n += chunk.byteLength;
        if (n > MAX_ANSWER_BYTES) ctl.error(new Error(`answer larger than ${MAX_ANSWER_BYTES / 2 ** 20} MiB`));
        else ctl.enqueue(chunk);
      },
    }),
  );
}

function transportReason(e, deadline, timeoutMs) {
  if (deadline.aborted) return `no answer within ${timeoutMs / 1000} s`;
  const c = e?.cause;
  if (c?.code === "ECONNREFUSED") return "connection refused (ECONNREFUSED)";
  if (c?.code) return `${c.code}${c.message && !c.message.includes(c.code) ? `: ${c.message}` : ""}`;
  return c?.message ?? e?.message ?? String(e);
}

/**
 * POSTs one JSON-RPC message; returns `{ status, sessionId, response }` where `response` is the
 * JSON-RPC response with the message's id (from a JSON body or an SSE stream), if one came.
 */
async function post(ctx, headers, message) {
  const own = new AbortController();
  const signal = AbortSignal.any([ctx.deadline, own.signal]);
  try {
    let res;
    try {
      res = await fetch(ctx.up.url, {
        method: "POST",
        headers: { ...ctx.up.headers, ...headers, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify(message),
        redirect: "manual",
        signal,
      });
    } catch (e) {
      throw new Unreachable(transportReason(e, ctx.deadline, ctx.timeoutMs));
    }
    const out = { status: res.status, sessionId: res.headers.get("mcp-session-id") ?? undefined, response: undefined };
    if (res.status >= 300 && res.status < 400)
      throw new Unreachable(`answered ${message.method} with a redirect (HTTP ${res.status}); no redirect is followed`);
    if (res.status === 401 || res.status === 403) {
      const perPrincipal = ctx.up.credentials?.mode === "per_principal";
      throw new Unreachable(
        `refused the credentials (HTTP ${res.status})${perPrincipal ? "; its credentials are per principal, and this command has none" : "; check the config's headers and the variables they name"}`,
      );
    }
    if (!("id" in message) || !res.body) return out;
    try {
      const body = bounded(res.body);
      if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
        const { parseSse } = await src("wire/sse.ts");
        for await (const ev of parseSse(body)) {
          let m;
          try {
            m = JSON.parse(ev.data);
          } catch {
            continue;
          }
          if (isObject(m) && m.id === message.id && ("result" in m || "error" in m)) {
            out.response = m;
            break;
          }
        }
      } else {
        const text = await new Response(body).text();
        let m;
        try {
          m = JSON.parse(text);
        } catch {
          m = undefined;
        }
        const found = (Array.isArray(m) ? m : [m]).find((x) => isObject(x) && x.id === message.id && ("result" in x || "error" in x));
        if (found) out.response = found;
      }
    } catch (e) {
      if (e instanceof Unreachable) throw e;
      throw new Unreachable(`${message.method}: ${transportReason(e, ctx.deadline, ctx.timeoutMs)}`);
    }
    return out;
  } finally {
    own.abort(); // an SSE stream still open after the answer is closed
  }
}

const answerProblem = (r) => r.response?.error?.message ?? `HTTP ${r.status}`;

async function allPages(request) {
  const tools = [];
  let cursor;
  for (let page = 0; page < MAX_PAGES; page++) {
    const r = await request(cursor);
    const result = r.response?.result;
    if (!isObject(result) || !Array.isArray(result.tools)) throw new Unreachable(`answered tools/list without a tool list (${answerProblem(r)})`);
    tools.push(...result.tools);
    if (typeof result.nextCursor !== "string" || result.nextCursor === "") break;
    cursor = result.nextCursor;
  }
  return tools;
}

/**
 * One upstream's complete tools/list, read as an MCP client would: `server/discover` first; an
 * upstream that speaks 2026-07-28 is asked `tools/list` with `_meta`, any other gets a legacy
 * `initialize` + `notifications/initialized`, then `tools/list` with its session header (the
 * session is deleted afterwards). Bounded by `timeoutMs` overall. Returns `{ era, protocolVersion,
 * tools }` (the raw items); throws Unreachable with a reason safe to print.
 */
export async function listUpstreamTools(up, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
  const ctx = { up, timeoutMs, deadline: AbortSignal.timeout(timeoutMs) };
  let ids = 0;
  const id = () => `portcullis-cli-${++ids}`;
  const meta = () => ({ [META.protocolVersion]: MODERN_VERSION, [META.clientCapabilities]: {}, [META.clientInfo]: { ...CLIENT_INFO } });
  const modernHeaders = (method) => ({ "mcp-protocol-version": MODERN_VERSION, "mcp-method": method });
  try {
    const discover = await post(ctx, modernHeaders("server/discover"), { jsonrpc: "2.0", id: id(), method: "server/discover", params: { _meta: meta() } });
    const d = discover.response?.result;
    if (isObject(d) && Array.isArray(d.supportedVersions) && d.supportedVersions.includes(MODERN_VERSION)) {
      const tools = await allPages((cursor) =>
        post(ctx, modernHeaders("tools/list"), { jsonrpc: "2.0", id: id(), method: "tools/list", params: { _meta: meta(), ...(cursor ? { cursor } : {}) } }),
      );
      return { era: "modern", protocolVersion: MODERN_VERSION, tools };
    }
    const init = await post(
      ctx,
      { "mcp-protocol-version": LEGACY_VERSION },
      {
        jsonrpc: "2.0",
        id: id(),
        method: "initialize",
        params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { ...CLIENT_INFO } },
      },
    );
    const result = init.response?.result;
    if (!isObject(result)) throw new Unreachable(`refused initialize (${answerProblem(init)}) and server/discover (${answerProblem(discover)})`);
    const version = typeof result.protocolVersion === "string" ? result.protocolVersion : LEGACY_VERSION;
    const session = { "mcp-protocol-version": version, ...(init.sessionId ? { "mcp-session-id": init.sessionId } : {}) };
    try {
      await post(ctx, session, { jsonrpc: "2.0", method: "notifications/initialized" });
      const tools = await allPages((cursor) => post(ctx, session, { jsonrpc: "2.0", id: id(), method: "tools/list", params: cursor ? { cursor } : {} }));
      return { era: "legacy", protocolVersion: version, tools };
    } finally {
      if (init.sessionId) {
        // Ends the session this command opened (best effort, briefly).
        await fetch(up.url, { method: "DELETE", headers: { ...up.headers, ...session }, redirect: "manual", signal: AbortSignal.timeout(2000) })
          .then((r) => r.body?.cancel())
          .catch(() => undefined);
      }
    }
  } catch (e) {
    throw new Unreachable(scrub(e instanceof Unreachable ? e.message : transportReason(e, ctx.deadline, timeoutMs), up));
  }
}

// ---- classification ----------------------------------------------------------------------------

/**
 * Every upstream's tools (read at once, each bounded by `timeoutMs`), classified with the
 * config's mappings. `{ banner, tools, upstreams, mode, unclassifiedReads }`: `tools[i]` is
 * `banner.lines[i]` with its classification and hashes; each upstream says whether it answered.
 */
export async function classifyConfig(cfg, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}) {
  const [{ catalogEntry }, { classificationBanner, classifyTool }, { mappingsOf, compiledPolicy }, { exposeName }, { toolAllowed }, { toolPolicy }] =
    await Promise.all([
      src("governance/catalog.ts"),
      src("governance/classify.ts"),
      src("governance/engine.ts"),
      src("protocol/exposed-names.ts"),
      src("governance/grant-scope.ts"),
      src("governance/policy-view.ts"),
    ]);
  const policy = compiledPolicy(cfg);
  const mappings = mappingsOf(cfg);
  const listed = await Promise.all(
    cfg.upstreams.map(async (up) => {
      try {
        return { up, ...(await listUpstreamTools(up, { timeoutMs: Math.min(timeoutMs, up.timeoutMs ?? timeoutMs) })) };
      } catch (e) {
        return { up, error: e instanceof Unreachable ? e.message : scrub(e?.message ?? String(e), up) };
      }
    }),
  );
  const targets = [];
  const upstreams = listed.map(({ up, error, era, protocolVersion, tools }) => {
    const base = { name: up.name, url: printableUrl(up.url) };
    if (error !== undefined) return { ...base, reachable: false, error };
    const seen = new Set();
    let hidden = 0;
    for (const item of tools) {
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
    return { ...base, reachable: true, era, protocolVersion, listed: seen.size, hidden, mappedNotListed: notListed.length, mappedNotListedNames: notListed };
  });
  const banner = classificationBanner(
    targets.map((t) => ({ upstream: t.upstream.name, tool: t.tool })),
    mappings,
  );
  const tools = targets.map((t, i) => {
    const line = banner.lines[i];
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

function upstreamLine(u, { forBanner = false } = {}) {
  if (!u.reachable) {
    return forBanner
      ? `  NOTE  upstream ${u.name} (${u.url}) not reachable for the banner: ${u.error}; its tools are classified when the gateway lists them`
      : `  UNREACHABLE ${u.name} (${u.url}): ${u.error}`;
  }
  const names = u.mappedNotListedNames ?? [];
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
export async function formatReport(report, { forBanner = false } = {}) {
  const { formatBanner } = await src("governance/classify.ts");
  const lines = [formatBanner(report.banner), "upstreams:", ...report.upstreams.map((u) => upstreamLine(u, { forBanner }))];
  lines.push(
    `mode: ${report.mode}${report.mappingsLoaded ? "" : " (no mappings loaded)"}; unclassified_reads: ${report.unclassifiedReads}${report.mode === "enforce" ? "" : " — nothing is refused in this mode; the levels say what enforce would do"}`,
  );
  return lines.join("\n");
}

/** Why classify exits 1: BLOCK tools and unreachable upstreams, one sentence each. */
function exitProblems(report) {
  const problems = [];
  const blocked = report.banner.totals.BLOCK;
  if (blocked) problems.push(`${plural(blocked, "tool")} BLOCK (refused in enforce until mapped, or until a drifted mapping is reviewed)`);
  for (const u of report.upstreams) if (!u.reachable) problems.push(`upstream ${u.name} unreachable: ${u.error}`);
  return problems;
}

async function classifyCommand(a) {
  if (a.help) return help("classify");
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  const timeoutMs = timeoutArg(a.timeout);
  const { cfg } = await loadGatewayConfig(a.config);
  const report = await classifyConfig(cfg, { timeoutMs });
  const problems = exitProblems(report);
  if (a.json) {
    const { banner, ...rest } = report;
    console.log(JSON.stringify({ ok: problems.length === 0, totals: banner.totals, ...rest, problems }, null, 2));
  } else {
    console.log(await formatReport(report));
  }
  if (problems.length) {
    console.error(`portcullis classify: exit 1: ${problems.join("; ")}`);
    return 1;
  }
  return 0;
}

// ---- the banner at start -----------------------------------------------------------------------

async function healthy(url, waitMs) {
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

/**
 * For `dev` and `start`: once the gateway at `origin` answers /healthz (waited on for at most
 * `waitMs`), prints the classification banner for its config (`cfg`, or `configText` loaded with
 * this environment), every upstream asked at once for at most `budgetMs`. Never throws and never
 * fails the command: an unreachable upstream is a NOTE line, any other failure one line saying so.
 */
export async function startBanner({ cfg, configText, origin, waitMs = 180_000, budgetMs = BANNER_BUDGET_MS, print = (s) => console.log(s) }) {
  try {
    if (!(await healthy(`${origin}/healthz`, waitMs))) return;
    let config = cfg;
    if (!config) {
      const { loadConfig } = await src("config/load.ts");
      const { PORTCULLIS_ORIGIN: _origin, ...vars } = process.env;
      config = loadConfig(configText, vars);
    }
    const report = await classifyConfig(config, { timeoutMs: budgetMs });
    const t = report.banner.totals;
    const hint = t.NOTE + t.WARN + t.BLOCK ? "\n  (portcullis classify --config FILE for the report; portcullis suggest-manifest drafts mappings)" : "";
    print(`${await formatReport(report, { forBanner: true })}${hint}`);
  } catch (e) {
    print(`portcullis: no classification banner (${e?.message ?? e})`);
  }
}

// ---- suggest-manifest --------------------------------------------------------------------------

/** The server's own annotations as the starter mappings comment them: `ro true, destr -, idem false, open -`. */
function annotationsComment(annotations) {
  const v = (k) => (typeof annotations?.[k] === "boolean" ? String(annotations[k]) : "-");
  return `ro ${v("readOnlyHint")}, destr ${v("destructiveHint")}, idem ${v("idempotentHint")}, open ${v("openWorldHint")}`;
}

/** One line of text fit for a YAML comment: no control characters, at most `max` characters. */
function commentText(s, max = 140) {
  const one = String(s)
    .replace(/[\p{Cc}\u2028\u2029]+/gu, " ")
    .replace(/\s+/g, " ")
    .trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** A mapping key: plain when YAML reads it back as that same string, else double-quoted (JSON is valid YAML). */
function yamlKey(name) {
  return /^[A-Za-z_][A-Za-z0-9_.-]*$/.test(name) && !/^(true|false|null|yes|no|on|off|y|n|~)$/i.test(name) ? name : JSON.stringify(name);
}

const SOURCE_NOTE = {
  default: "default: nothing in its name or annotations",
};

/**
 * The text of a draft mapping file for `upstream` from its listed tools (raw tools/list items):
 * the heuristic's effect, verb and axes (classify.ts, with no mappings), each tool's annotations
 * and description in comments, `schema_hash` pinned to catalog.ts's hash. Checked against
 * mappingFileSchema before it is returned (a draft that would not load is a bug: it throws).
 * Tools the upstream's allow/deny hides are drafted too, marked so (allow/deny may change).
 */
export async function draftManifest({ upstream, tools, date = new Date() }) {
  const [{ catalogEntry }, { classifyTool }, { mappingFileSchema }, { toolAllowed }] = await Promise.all([
    src("governance/catalog.ts"),
    src("governance/classify.ts"),
    src("config/mapping-schema.ts"),
    src("governance/grant-scope.ts"),
  ]);
  const none = { loaded: false, get: () => undefined };
  const seen = new Set();
  const entries = [];
  const skipped = [];
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
function enforcedPath(out, configFile, raw, cfg) {
  let doc;
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
  const real = (p) => {
    try {
      return realpathSync(p);
    } catch {
      return resolve(p);
    }
  };
  if (real(dirname(resolve(out))) !== real(dir)) return null;
  return `${out} is in the config's mappings_dir (${doc.mappings_dir}), where the gateway would load it unreviewed: write the draft elsewhere, review every effect, then move it there`;
}

async function suggestCommand(a) {
  if (a.help) return help("suggest-manifest");
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  if (typeof a.upstream !== "string") throw new UsageError("give --upstream NAME (one of the config's upstreams)");
  const timeoutMs = timeoutArg(a.timeout);
  const { cfg, raw } = await loadGatewayConfig(a.config);
  const up = cfg.upstreams.find((u) => u.name === a.upstream);
  if (!up) throw new UsageError(`--upstream: ${a.config} has no upstream named ${a.upstream} (it has: ${cfg.upstreams.map((u) => u.name).join(", ")})`);
  const out = typeof a.out === "string" ? a.out : undefined;
  if (out !== undefined) {
    const enforced = enforcedPath(out, a.config, raw, cfg);
    if (enforced) {
      console.error(`portcullis suggest-manifest: refused: ${enforced}`);
      return 1;
    }
    if (existsSync(out) && !a.force) {
      console.error(`portcullis suggest-manifest: refused: ${out} exists and is never overwritten (pass --force to replace it, or choose another --out)`);
      return 1;
    }
    if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`--out: ${out} is a directory; name the file`);
  }
  let listed;
  try {
    listed = await listUpstreamTools(up, { timeoutMs: Math.min(timeoutMs, up.timeoutMs ?? timeoutMs) });
  } catch (e) {
    if (!(e instanceof Unreachable)) throw e;
    console.error(`portcullis suggest-manifest: upstream ${up.name} (${printableUrl(up.url)}) unreachable: ${e.message}`);
    return 1;
  }
  const { text, drafted } = await draftManifest({ upstream: up, tools: listed.tools });
  if (out === undefined) {
    process.stdout.write(text);
    return 0;
  }
  try {
    writeFileSync(out, text, { flag: a.force ? "w" : "wx" });
  } catch (e) {
    if (e.code === "EEXIST") {
      console.error(`portcullis suggest-manifest: refused: ${out} exists and is never overwritten (pass --force to replace it, or choose another --out)`);
      return 1;
    }
    throw new UsageError(`--out: cannot write ${out} (${e.code ?? e.message})`);
  }
  console.error(
    `portcullis suggest-manifest: wrote a DRAFT for ${plural(drafted, "tool")} of ${up.name} to ${out}; never enforced until reviewed: review every effect, then move it into mappings_dir as ${up.name}.yaml`,
  );
  return 0;
}

// ---- dispatch ----------------------------------------------------------------------------------

function help(cmd) {
  console.log(HELP[cmd]);
  return 0;
}

const COMMANDS = { classify: classifyCommand, "suggest-manifest": suggestCommand };

/** Runs `portcullis <cmd> <argv…>` for `classify` and `suggest-manifest`; the exit code. */
export async function governanceCommand(cmd, argv) {
  const run = COMMANDS[cmd];
  if (!run) {
    console.error(`portcullis: unknown command ${cmd}`);
    return 2;
  }
  try {
    return await run(parseArgs(argv, KNOWN[cmd]));
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`portcullis ${cmd}: ${e.message}\n(portcullis ${cmd} --help for the options)`);
      return 2;
    }
    if (e instanceof ConfigProblem) {
      const unset = /is not set as a Worker secret or var/.test(e.message) ? `\n(this command reads each \${NAME} from its own environment: set it there)` : "";
      console.error(`portcullis ${cmd}: ${e.message}${unset}`);
      return 2;
    }
    throw e;
  }
}
