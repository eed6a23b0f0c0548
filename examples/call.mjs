#!/usr/bin/env node
/**
 * examples/call.mjs: one MCP `tools/call` through a Portcullis gateway, made the way an agent's
 * client makes it: the MCP TypeScript SDK v2 client (`@modelcontextprotocol/client`, a devDependency)
 * over `StreamableHTTPClientTransport`, with the grant as a bearer header. Owns: its arguments
 * (`[--url URL] [--era legacy|modern] [--save FILE] [--json] TOOL [key=value ...]`), one connection and
 * one call (bounded at 60 s), printing the tool result (its text blocks, whether it is an error, and
 * the ledger receipt the gateway puts in `_meta["portcullis/receipt"]`), writing the whole result to
 * `--save FILE` (what `portcullis ledger verify --receipt FILE` reads), and its exit code: 0 the gateway
 * answered with a tool result (read `isError`: a refusal or a held call is a result too), 1 no result
 * (a JSON-RPC error, an HTTP error, nothing listening), 2 usage. The README's Quick start runs it, and
 * test/e2e/readme.test.ts runs the Quick start. The grant comes only from the environment variable
 * PORTCULLIS_AGENT_TOKEN (unset: no Authorization header, which a gateway on loopback with `auth.required:
 * false` serves as its configured `actor`); PORTCULLIS_TOKEN, which the CLI reads for the operator
 * commands, is deliberately not used, so an approver's grant never makes the agent's call.
 * Must never: print the token, send it anywhere but --url, take it from the command line, or wait
 * without a bound.
 */
import { writeFileSync } from "node:fs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const USAGE = `usage: node examples/call.mjs [--url URL] [--era legacy|modern] [--save FILE] [--json] TOOL [key=value ...]
  --url URL    the gateway's MCP endpoint (default http://127.0.0.1:8787/mcp)
  --era E      legacy: a 2025-11-25 session (initialize, Mcp-Session-Id; the default, as most clients do)
               modern: 2026-07-28, one stateless request
  --save FILE  also write the whole tool result as JSON to FILE (portcullis ledger verify --receipt FILE)
  --json       print the whole tool result as JSON instead of its text
  key=value    one argument each; the value is read as JSON when it parses (a=60 is a number,
               flag=true a boolean, 'tags=["a"]' a list), else it is a string
The grant, if any, comes from PORTCULLIS_AGENT_TOKEN (never from the command line).
exit: 0 a tool result (isError or not), 1 no result (a JSON-RPC or HTTP error, nothing listening), 2 usage`;

function usage(message) {
  if (message) console.error(`examples/call.mjs: ${message}`);
  console.error(USAGE);
  process.exit(2);
}

function parse(argv) {
  const o = { url: "http://127.0.0.1:8787/mcp", era: "legacy", save: undefined, json: false, tool: undefined, args: {} };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    if (a === "--help" || a === "-h") {
      console.log(USAGE);
      process.exit(0);
    } else if (a === "--url") o.url = value();
    else if (a === "--era") o.era = value();
    else if (a === "--save") o.save = value();
    else if (a === "--json") o.json = true;
    else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else if (o.tool === undefined) o.tool = a;
    else {
      const eq = a.indexOf("=");
      if (eq < 1) usage(`arguments are key=value, not ${a}`);
      const raw = a.slice(eq + 1);
      let v = raw;
      try {
        v = JSON.parse(raw);
      } catch {
        /* not JSON: the string itself */
      }
      o.args[a.slice(0, eq)] = v;
    }
  }
  if (!o.tool) usage("name the tool to call");
  if (o.era !== "legacy" && o.era !== "modern") usage("--era is legacy or modern");
  try {
    const u = new URL(o.url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    usage(`--url must be the gateway's http(s) MCP endpoint, not ${o.url}`);
  }
  return o;
}

const o = parse(process.argv.slice(2));
const token = process.env.PORTCULLIS_AGENT_TOKEN;
const client = new Client(
  { name: "portcullis-example", version: "1.0.0" },
  { versionNegotiation: { mode: o.era === "modern" ? { pin: "2026-07-28" } : "legacy" } },
);
const transport = new StreamableHTTPClientTransport(new URL(o.url), {
  requestInit: { headers: token ? { authorization: `Bearer ${token}` } : {} },
});

let code = 0;
const timer = setTimeout(() => {
  console.error("examples/call.mjs: no answer within 60 s");
  process.exit(1);
}, 60_000);
try {
  await client.connect(transport);
  const result = await client.callTool({ name: o.tool, arguments: o.args });
  if (o.save) writeFileSync(o.save, `${JSON.stringify(result, null, 2)}\n`);
  if (o.json) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(`${o.tool}: ${result.isError ? "isError" : "result"}`);
    for (const c of result.content ?? []) console.log(`  ${c.type === "text" ? c.text : `[${c.type} content]`}`);
    const receipt = result._meta?.["portcullis/receipt"];
    if (receipt) console.log(`  receipt: ledger chain ${receipt.chain}, seq ${receipt.seq}, decision ${receipt.decision_id}`);
  }
} catch (e) {
  console.error(`examples/call.mjs: ${o.tool} got no result: ${e?.message ?? e}`);
  code = 1;
} finally {
  clearTimeout(timer);
  if (o.era === "legacy") await transport.terminateSession().catch(() => undefined);
  await client.close().catch(() => undefined);
}
process.exit(code);
