/**
 * `portcullis holds …`: list the held calls an approver may see (`list`), show one (`show`), and
 * approve or reject one (`approve`, `reject`) on a running gateway, over its /v1/holds API. Owns
 * argument parsing, the HTTP requests, the text and JSON output and the exit codes: 0 done,
 * 1 refused by the gateway (403 not allowed, e.g. your own hold; 404 no such hold; 409 no longer
 * pending, expired, or a different action), 2 usage, 3 the gateway could not be reached or
 * answered anything else. Who may resolve what is the gateway's decision (the approver is the
 * token's principal); this file only asks. Tokens come from --token or, preferably,
 * PORTCULLIS_TOKEN. Must never: print or log a token, send it anywhere but the gateway named by
 * --url, follow a redirect with it, or wait on the gateway without a bound.
 */
import { FLAG, HELP_OPTION, limitArg, namesOf, type Options, oneArgument, STRING, UsageError } from "./args.ts";
import { runGroup, type Subcommand, subcommand, table } from "./command-group.ts";
import { gatewayOf, helpWithToken, isObject, type JsonObject, jsonCaller, objectOf, tokenOf } from "./gateway-http.ts";

const STATES = ["pending", "approved", "rejected", "expired", "consumed", "all"];
const MAX_REASON = 500;
const TIMEOUT_MS = 30_000;

const HELP = {
  holds: `usage: portcullis holds <command> [options]
  list      the held calls you may see (your team's; --team T for an admin or a resolver of T)
  show      one hold: its exact canonical action, action hash, rule, reason and state
  approve   approve a pending hold (the agent's identical retry then runs once)
  reject    reject a pending hold, with a reason (the agent is told it)
Each command takes --help and --url GATEWAY. Give the token in PORTCULLIS_TOKEN (a --token on the
command line is visible to other processes on this machine). The approver is the token's principal;
the principal that raised a hold can never resolve it.
exit: 0 done, 1 refused (403 not allowed, 404 no such hold, 409 not pending / expired / changed), 2 usage, 3 unreachable or other`,
  list: `usage: portcullis holds list --url GATEWAY [--status S] [--team T] [--limit N] [--json]
  --status S   pending (the default), approved, rejected, expired, consumed, or all
  --team T     another team's holds (admin, or a resolver entry naming T or *)
  --limit N    at most N holds (1-500, default 100), newest first
  --json       print the gateway's answer {"holds": [...]} as JSON
exit: 0 listed, 1 refused, 2 usage, 3 unreachable or other`,
  show: `usage: portcullis holds show ID --url GATEWAY [--json]
exit: 0 shown, 1 refused or no such hold, 2 usage, 3 unreachable or other`,
  approve: `usage: portcullis holds approve ID --url GATEWAY [--reason R] [--action-hash H] [--json]
  --reason R        why (optional for an approval; at most ${MAX_REASON} characters)
  --action-hash H   approve only if the hold's action hash is H (what you reviewed with \`holds show\`)
exit: 0 approved (the ledger record is durable), 1 refused, 2 usage, 3 unreachable or other`,
  reject: `usage: portcullis holds reject ID --reason R --url GATEWAY [--action-hash H] [--json]
  --reason R        why (required; the agent is told it; at most ${MAX_REASON} characters)
exit: 0 rejected (the ledger record is durable), 1 refused, 2 usage, 3 unreachable or other`,
};

const GATEWAY = { url: STRING, token: STRING } as const;
const LIST_OPTIONS = { ...GATEWAY, status: STRING, team: STRING, limit: STRING, json: FLAG, ...HELP_OPTION } as const;
const SHOW_OPTIONS = { ...GATEWAY, json: FLAG, ...HELP_OPTION } as const;
const RESOLVE_OPTIONS = { ...GATEWAY, reason: STRING, "action-hash": STRING, json: FLAG, ...HELP_OPTION } as const;

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { list: namesOf(LIST_OPTIONS), show: namesOf(SHOW_OPTIONS), approve: namesOf(RESOLVE_OPTIONS), reject: namesOf(RESOLVE_OPTIONS) };

const help = (cmd: Exclude<keyof typeof HELP, "holds">): number => helpWithToken(HELP[cmd]);
const oneId = (a: { _: string[] }, cmd: string): string => oneArgument(a, `give one hold id: holds ${cmd} ID --url GATEWAY`);

/** Calls the gateway with this command's timeout; the answer's object (empty when it is none). */
const call = jsonCaller(TIMEOUT_MS);

function ago(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  return `${Math.round(s / 3600)}h`;
}

function printList(holds: unknown[]): void {
  if (holds.length === 0) {
    console.log("no holds");
    return;
  }
  const now = Date.now();
  const rows = holds.map(objectOf).map(({ hold, resolvable }) => {
    const h = objectOf(hold);
    const expiresAt = Number(h.expiresAt);
    return [
      h.id,
      h.state,
      h.exposedName,
      h.principal,
      h.rule ?? "(mapping)",
      ago(now - Number(h.createdAt)),
      h.state === "pending" ? (expiresAt > now ? `in ${ago(expiresAt - now)}` : "expired") : "",
      resolvable ? "yes" : "no",
    ];
  });
  table(["id", "state", "tool", "requester", "rule", "age", "expires", "you may resolve"], rows);
}

function printHold(v: JsonObject): void {
  const h = objectOf(v.hold);
  console.log(`hold ${h.id}: ${h.state}`);
  console.log(`  requester  ${h.principal} (team ${h.team})`);
  console.log(`  tool       ${h.exposedName} (upstream ${h.upstream}, tool ${h.tool})`);
  // The reason a rule gives is recorded as "rule <id>: …": print the id once.
  const recorded = String(h.reason);
  const reason = h.rule && recorded.startsWith(`rule ${h.rule}: `) ? recorded.slice(`rule ${h.rule}: `.length) : recorded;
  console.log(`  rule       ${h.rule ?? "(mapping)"}: ${reason}`);
  console.log(`  created    ${new Date(Number(h.createdAt)).toISOString()}; expires ${new Date(Number(h.expiresAt)).toISOString()}`);
  if (h.approver) console.log(`  ${h.state === "rejected" ? "rejected" : "approved"} by ${h.approver}${h.resolveReason ? `: ${h.resolveReason}` : ""}`);
  console.log(`  action     ${h.actionHash}`);
  console.log(`             ${h.action}`);
  console.log(`  console    ${v.url}`);
  console.log(`  you ${v.resolvable ? "may resolve it" : `may not resolve it: ${v.why ?? "not resolvable"}`}`);
}

async function listCommand(a: Options<typeof LIST_OPTIONS>): Promise<number> {
  if (a.help) return help("list");
  const base = gatewayOf(a.url);
  const status = a.status ?? "pending";
  if (!STATES.includes(status)) throw new UsageError(`--status must be one of ${STATES.join(", ")}`);
  const limit = limitArg(a.limit);
  if (a._.length) throw new UsageError(`unexpected argument ${a._[0]}`);
  const out = await call(base, "GET", "/v1/holds", tokenOf(a), { query: { status, team: a.team, limit } });
  if (a.json) console.log(JSON.stringify(out, null, 2));
  else printList(Array.isArray(out.holds) ? out.holds : []);
  return 0;
}

async function showCommand(a: Options<typeof SHOW_OPTIONS>): Promise<number> {
  if (a.help) return help("show");
  const base = gatewayOf(a.url);
  const id = oneId(a, "show");
  const out = await call(base, "GET", `/v1/holds/${encodeURIComponent(id)}`, tokenOf(a));
  if (a.json) console.log(JSON.stringify(out, null, 2));
  else printHold(out);
  return 0;
}

function resolveCommand(decision: "approve" | "reject") {
  return async (a: Options<typeof RESOLVE_OPTIONS>): Promise<number> => {
    const cmd = decision;
    if (a.help) return help(cmd);
    const base = gatewayOf(a.url);
    const id = oneId(a, cmd);
    const reason = a.reason ?? "";
    if (decision === "reject" && reason.trim() === "") throw new UsageError("a rejection needs --reason R (the agent is told it)");
    if (reason.trim().length > MAX_REASON) throw new UsageError(`--reason is at most ${MAX_REASON} characters`);
    const hash = a["action-hash"];
    if (hash !== undefined && !/^[0-9a-f]{64}$/.test(hash)) throw new UsageError("--action-hash must be 64 lowercase hex digits (the hold's action hash)");
    const out = await call(base, "POST", `/v1/holds/${encodeURIComponent(id)}/resolve`, tokenOf(a), {
      body: { decision, reason, ...(hash !== undefined ? { action_hash: hash } : {}) },
    });
    if (a.json) console.log(JSON.stringify(out, null, 2));
    else {
      const hold = isObject(out.hold) ? out.hold : undefined;
      console.log(`hold ${hold?.id ?? id}: ${hold?.state ?? (decision === "approve" ? "approved" : "rejected")} by ${hold?.approver ?? "you"} (on the ledger)`);
    }
    return 0;
  };
}

const COMMANDS: Record<string, Subcommand> = {
  list: subcommand(LIST_OPTIONS, listCommand),
  show: subcommand(SHOW_OPTIONS, showCommand),
  approve: subcommand(RESOLVE_OPTIONS, resolveCommand("approve")),
  reject: subcommand(RESOLVE_OPTIONS, resolveCommand("reject")),
};

/** Runs `portcullis holds <argv…>`; the exit code (3 for an error the exit codes do not name). */
export const holdsCommand = (argv: string[]): Promise<number> => runGroup("holds", HELP.holds, COMMANDS, argv, { unexpected: 3 });
