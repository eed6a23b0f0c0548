#!/usr/bin/env node
/**
 * `portcullis halt | resume | status`: the kill switch of a running gateway over its JSON API
 * (`POST /v1/killswitch/halt`, `POST /v1/killswitch/resume`, `GET /v1/killswitch`). Owns the
 * flags of these commands, their HTTP calls, output and exit codes (0 ok, 2 usage, 3 the gateway
 * refused or could not be reached, or could not read its kill switch). Tokens come from
 * PORTCULLIS_TOKEN or --token; the actor recorded is the token's principal, never a flag. Must
 * never: print or log a token, send it anywhere but the gateway named by --url, or print a state
 * the gateway did not answer (no "unknown").
 */
import { realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseOptions, UsageError } from "./cli-args.mjs";
import { answerOf, exitCodeOf, FetchError, gatewayOf, refusal, send, TOKEN_NOTE, tokenOf } from "./gateway-http.mjs";

const SCOPES = ["global", "team", "upstream", "tool", "principal", "grant"];

const HELP = {
  halt: `usage: portcullis halt --scope SCOPE [--target T] --reason R --url GATEWAY [--json]
  halts governed calls at SCOPE (${SCOPES.join(", ")}); every scope but global needs --target
  (the team, upstream, exposed tool name, principal or grant jti). New calls are refused within 1 s,
  running ones are cancelled upstream; the change is a ledger record. Needs an admin token.
exit: 0 halted, 2 usage, 3 refused or unreachable`,
  resume: `usage: portcullis resume --scope SCOPE [--target T] --reason R --url GATEWAY [--json]
  lifts the halt at SCOPE (a scope that is not halted is left as it is); the change is a ledger record.
  Needs an admin token.
exit: 0 resumed (or not halted), 2 usage, 3 refused or unreachable`,
  status: `usage: portcullis status --url GATEWAY [--json]
  prints the kill switch's version and every halt (scope, target, reason, who, when).
  Needs an auditor, approver, operator or admin token.
exit: 0 read, 2 usage, 3 refused, unreachable or the kill switch could not be read`,
};

export const KNOWN = {
  halt: ["scope", "target", "reason", "url", "token", "json", "help"],
  resume: ["scope", "target", "reason", "url", "token", "json", "help"],
  status: ["url", "token", "json", "help"],
};
const BOOLEAN = new Set(["json", "help"]);

/** One request to the gateway; its JSON body when 2xx, else a FetchError naming the status and the gateway's reason. */
async function call(base, method, path, token, body) {
  const { res, where } = await send(base, method, path, token, { body, timeoutMs: 30_000 });
  const answer = await answerOf(res);
  if (!res.ok) throw new FetchError(refusal(where, res.status, answer));
  const json = answer.json;
  if (!json || typeof json.version !== "number" || !Array.isArray(json.halts)) throw new FetchError(`${where}: the answer is not a kill-switch state`);
  return json;
}

function printState(s, headline) {
  if (headline) console.log(headline);
  console.log(`kill switch version ${s.version}: ${s.halts.length === 0 ? "nothing is halted" : `${s.halts.length} halt${s.halts.length > 1 ? "s" : ""}`}`);
  for (const h of s.halts) console.log(`  HALTED ${h.scope}${h.target !== null ? ` ${h.target}` : ""}: ${h.reason} (by ${h.by}, ${h.at})`);
}

async function change(action, a) {
  if (typeof a.scope !== "string") throw new UsageError(`give --scope (${SCOPES.join(", ")})`);
  if (!SCOPES.includes(a.scope)) throw new UsageError(`--scope must be one of ${SCOPES.join(", ")}`);
  if (a.scope === "global" && a.target !== undefined) throw new UsageError("a global halt takes no --target");
  if (a.scope !== "global" && (typeof a.target !== "string" || a.target === "")) throw new UsageError(`a ${a.scope} ${action} needs --target`);
  if (typeof a.reason !== "string" || a.reason.trim() === "") throw new UsageError("give --reason (it goes on the ledger)");
  const base = gatewayOf(a.url);
  const body = { scope: a.scope, ...(a.scope === "global" ? {} : { target: a.target }), reason: a.reason };
  const s = await call(base, "POST", `/v1/killswitch/${action}`, tokenOf(a), body);
  if (a.json) console.log(JSON.stringify(s, null, 2));
  else {
    const what = `${a.scope}${a.scope === "global" ? "" : ` ${a.target}`}`;
    const headline = action === "halt" ? `halted ${what}` : s.changed ? `resumed ${what}` : `${what} was not halted; nothing changed`;
    printState(s, headline);
  }
  return 0;
}

async function status(a) {
  const s = await call(gatewayOf(a.url), "GET", "/v1/killswitch", tokenOf(a));
  if (a.json) console.log(JSON.stringify(s, null, 2));
  else printState(s);
  return 0;
}

/** Runs `portcullis <halt|resume|status> <argv…>`; the exit code. */
export async function killSwitchCommand(cmd, argv) {
  if (!KNOWN[cmd]) {
    console.error(`portcullis: unknown kill-switch command ${cmd}\n${HELP.halt}\n${HELP.resume}\n${HELP.status}`);
    return 2;
  }
  return exitCodeOf(`portcullis ${cmd}`, async () => {
    const a = parseOptions(argv, { known: KNOWN[cmd], boolean: BOOLEAN, positionals: false });
    if (a.help) {
      console.log(`${HELP[cmd]}\n${TOKEN_NOTE}`);
      return 0;
    }
    return cmd === "status" ? await status(a) : await change(cmd, a);
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  const [cmd, ...rest] = process.argv.slice(2);
  process.exitCode = await killSwitchCommand(cmd, rest);
}
