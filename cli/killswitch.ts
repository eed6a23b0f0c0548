/**
 * `portcullis halt | resume | status`: the kill switch of a running gateway over its JSON API
 * (`POST /v1/killswitch/halt`, `POST /v1/killswitch/resume`, `GET /v1/killswitch`). Owns the
 * flags of these commands, their HTTP calls, output and exit codes (0 ok, 2 usage, 3 the gateway
 * refused or could not be reached, or could not read its kill switch). Tokens come from
 * PORTCULLIS_TOKEN or --token; the actor recorded is the token's principal, never a flag. Must
 * never: print or log a token, send it anywhere but the gateway named by --url, or print a state
 * the gateway did not answer (no "unknown").
 */
import { FLAG, HELP_OPTION, namesOf, type Options, parseOptions, STRING, UsageError } from "./args.ts";
import { answerOf, exitCodeOf, FetchError, gatewayOf, helpWithToken, isObject, type JsonObject, refusal, send, tokenOf } from "./gateway-http.ts";
import { HALT_SCOPES } from "../durable-objects/contract-killswitch.ts";

const SCOPES: readonly string[] = HALT_SCOPES;

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

const CHANGE_OPTIONS = { scope: STRING, target: STRING, reason: STRING, url: STRING, token: STRING, json: FLAG, ...HELP_OPTION } as const;
const STATUS_OPTIONS = { url: STRING, token: STRING, json: FLAG, ...HELP_OPTION } as const;

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { halt: namesOf(CHANGE_OPTIONS), resume: namesOf(CHANGE_OPTIONS), status: namesOf(STATUS_OPTIONS) };

/** The kill switch's state as the gateway answers it: a version and its halts. */
type State = JsonObject & { version: number; halts: unknown[] };

/** One request to the gateway; its JSON body when 2xx, else a FetchError naming the status and the gateway's reason. */
async function call(base: URL, method: string, path: string, token: string, body?: unknown): Promise<State> {
  const { res, where } = await send(base, method, path, token, { body, timeoutMs: 30_000 });
  const answer = await answerOf(res);
  if (!res.ok) throw new FetchError(refusal(where, res.status, answer));
  const json = answer.json;
  if (!isObject(json) || typeof json.version !== "number" || !Array.isArray(json.halts))
    throw new FetchError(`${where}: the answer is not a kill-switch state`);
  return { ...json, version: json.version, halts: json.halts };
}

function printState(s: State, headline?: string): void {
  if (headline) console.log(headline);
  console.log(`kill switch version ${s.version}: ${s.halts.length === 0 ? "nothing is halted" : `${s.halts.length} halt${s.halts.length > 1 ? "s" : ""}`}`);
  for (const h of s.halts.filter(isObject)) console.log(`  HALTED ${h.scope}${h.target !== null ? ` ${h.target}` : ""}: ${h.reason} (by ${h.by}, ${h.at})`);
}

async function change(action: "halt" | "resume", a: Options<typeof CHANGE_OPTIONS>): Promise<number> {
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

async function status(a: Options<typeof STATUS_OPTIONS>): Promise<number> {
  const s = await call(gatewayOf(a.url), "GET", "/v1/killswitch", tokenOf(a));
  if (a.json) console.log(JSON.stringify(s, null, 2));
  else printState(s);
  return 0;
}

/** Runs `portcullis <halt|resume|status> <argv…>`; the exit code. */
export async function killSwitchCommand(cmd: string, argv: string[]): Promise<number> {
  if (cmd !== "halt" && cmd !== "resume" && cmd !== "status") {
    console.error(`portcullis: unknown kill-switch command ${cmd}\n${HELP.halt}\n${HELP.resume}\n${HELP.status}`);
    return 2;
  }
  const usage = () => helpWithToken(HELP[cmd]);
  return exitCodeOf(`portcullis ${cmd}`, async () => {
    if (cmd === "status") {
      const a = parseOptions(argv, STATUS_OPTIONS);
      return a.help ? usage() : await status(a);
    }
    const a = parseOptions(argv, CHANGE_OPTIONS);
    return a.help ? usage() : await change(cmd, a);
  });
}
