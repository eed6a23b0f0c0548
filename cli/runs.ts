/**
 * `portcullis runs …`: list the runs you may see (`list`), show one run with its steps and
 * rollback plan (`show`), and roll one back (`rollback`: a dry run unless --confirm) on a running
 * gateway, over its /v1/runs API. Owns argument parsing, the HTTP requests, the text and JSON
 * output and the exit codes: 0 done (for a rollback: every planned compensation ran), 1 refused by
 * the gateway (403 not allowed, 404 no such run, 409 ambiguous run) or a rollback that left steps
 * remaining, 2 usage, 3 the gateway could not be reached or answered anything else. Who may see and
 * undo what is the gateway's decision; this file only asks. Tokens come from --token or,
 * preferably, PORTCULLIS_TOKEN. Must never: print or log a token, send it anywhere but the gateway
 * named by --url, follow a redirect with it, or wait on the gateway without a bound.
 */
import { FLAG, HELP_OPTION, limitArg, namesOf, type Options, oneArgument, STRING, UsageError } from "./args.ts";
import { runGroup, type Subcommand, subcommand, table } from "./command-group.ts";
import { gatewayOf, helpWithToken, isObject, type JsonObject, jsonCaller, objectOf, tokenOf } from "./gateway-http.ts";

// A rollback calls each compensation up to 3 times and reads it back: give it time.
const TIMEOUT_MS = 120_000;

const HELP = {
  runs: `usage: portcullis runs <command> [options]
  list       the runs you may see (an agent: its own; an operator or auditor: its team's), newest first
  show       one run: each step's tool and outcome, its compensation, and the rollback plan
  rollback   roll a run back, newest step first: a dry run unless --confirm (operator role)
Each command takes --help and --url GATEWAY. Give the token in PORTCULLIS_TOKEN (a --token on the
command line is visible to other processes on this machine).
exit: 0 done, 1 refused (403 not allowed, 404 no such run) or steps remain, 2 usage, 3 unreachable or other`,
  list: `usage: portcullis runs list --url GATEWAY [--principal P] [--team T] [--limit N] [--json]
  --principal P   only P's runs (an operator or auditor)
  --team T        another team's runs (admin)
  --limit N       at most N runs (1-500, default 100)
  --json          print the gateway's answer {"runs": [...]} as JSON
exit: 0 listed, 1 refused, 2 usage, 3 unreachable or other`,
  show: `usage: portcullis runs show RUN --url GATEWAY [--principal P] [--team T] [--json]
exit: 0 shown, 1 refused or no such run, 2 usage, 3 unreachable or other`,
  rollback: `usage: portcullis runs rollback RUN --url GATEWAY [--confirm] [--approve-compensations] [--principal P] [--team T] [--json]
  --confirm                 execute (operator role); without it, a dry run that calls nothing
  --approve-compensations   also run compensations whose mapping requires approval
Each compensation runs on its upstream newest first, up to 3 attempts, with an idempotency key per
step (a repeated rollback never compensates twice), then is read back: verified, verification_failed
or unverified. Every step is a ledger record.
exit: 0 every planned compensation ran (or, dry run, the plan was shown), 1 refused or steps remain, 2 usage, 3 unreachable or other`,
};

const WHOSE = { url: STRING, token: STRING, principal: STRING, team: STRING } as const;
const LIST_OPTIONS = { ...WHOSE, limit: STRING, json: FLAG, ...HELP_OPTION } as const;
const SHOW_OPTIONS = { ...WHOSE, json: FLAG, ...HELP_OPTION } as const;
const ROLLBACK_OPTIONS = { ...WHOSE, confirm: FLAG, "approve-compensations": FLAG, json: FLAG, ...HELP_OPTION } as const;

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { list: namesOf(LIST_OPTIONS), show: namesOf(SHOW_OPTIONS), rollback: namesOf(ROLLBACK_OPTIONS) };

const help = (cmd: Exclude<keyof typeof HELP, "runs">): number => helpWithToken(HELP[cmd]);
const oneRun = (a: { _: string[] }, cmd: string): string => oneArgument(a, `give one run id: runs ${cmd} RUN --url GATEWAY`);

/** Calls the gateway with this command's timeout; the answer's object (empty when it is none). */
const call = jsonCaller(TIMEOUT_MS);

const listOf = (v: unknown): JsonObject[] => (Array.isArray(v) ? v.map(objectOf) : []);

function printPlan(plan: JsonObject): void {
  const compensations = listOf(plan.compensations);
  if (compensations.length === 0) console.log("  nothing to compensate");
  for (const c of compensations)
    console.log(
      `  undo ${c.step_tool} (${c.decision_id}): ${c.upstream} ${c.tool} ${JSON.stringify(c.arguments)}${c.needs_approval ? "  [needs approval]" : ""}`,
    );
  for (const n of listOf(plan.not_reversible)) console.log(`  cannot undo ${n.tool} (${n.decision_id}): ${n.reason}`);
  const undone = listOf(plan.already_compensated);
  if (undone.length) console.log(`  already undone: ${undone.length} step(s)`);
}

async function listCommand(a: Options<typeof LIST_OPTIONS>): Promise<number> {
  if (a.help) return help("list");
  const base = gatewayOf(a.url);
  const limit = limitArg(a.limit);
  if (a._.length) throw new UsageError(`unexpected argument ${a._[0]}`);
  const out = await call(base, "GET", "/v1/runs", tokenOf(a), { query: { principal: a.principal, team: a.team, limit } });
  const runs = listOf(out.runs);
  if (a.json) console.log(JSON.stringify(out, null, 2));
  else if (runs.length === 0) console.log("no runs");
  else
    table(
      ["run", "principal", "steps", "started", "last"],
      runs.map((r) => [r.run, r.principal, r.steps, r.started_at, r.last_at]),
    );
  return 0;
}

async function showCommand(a: Options<typeof SHOW_OPTIONS>): Promise<number> {
  if (a.help) return help("show");
  const base = gatewayOf(a.url);
  const run = oneRun(a, "show");
  const out = await call(base, "GET", `/v1/runs/${encodeURIComponent(run)}`, tokenOf(a), { query: { principal: a.principal, team: a.team } });
  if (a.json) {
    console.log(JSON.stringify(out, null, 2));
    return 0;
  }
  const v = objectOf(out.run);
  const steps = listOf(v.steps);
  console.log(`run ${v.run} of ${v.principal} (team ${v.team}), ${steps.length} step(s), ${v.started_at} – ${v.last_at}`);
  table(
    ["seq", "tool", "outcome", "compensation", "rollback"],
    steps.map((s) => {
      const comp = isObject(s.compensation) ? s.compensation : undefined;
      const back = isObject(s.rollback) ? s.rollback : undefined;
      return [
        s.seq,
        `${s.upstream} ${s.tool}`,
        s.status,
        comp ? (comp.status === "planned" ? comp.tool : comp.status) : "-",
        back ? `${back.state}${back.verification ? ` (${back.verification})` : ""}` : "-",
      ];
    }),
  );
  console.log("plan (newest first):");
  printPlan(objectOf(out.plan));
  return 0;
}

async function rollbackCommand(a: Options<typeof ROLLBACK_OPTIONS>): Promise<number> {
  if (a.help) return help("rollback");
  const base = gatewayOf(a.url);
  const run = oneRun(a, "rollback");
  const body = {
    confirm: a.confirm === true,
    approve_compensations: a["approve-compensations"] === true,
    ...(a.principal !== undefined ? { principal: a.principal } : {}),
    ...(a.team !== undefined ? { team: a.team } : {}),
  };
  const out = await call(base, "POST", `/v1/runs/${encodeURIComponent(run)}/rollback`, tokenOf(a), { body });
  const remaining = Array.isArray(out.remaining) ? out.remaining : [];
  if (a.json) console.log(JSON.stringify(out, null, 2));
  else {
    console.log(`run ${out.run} of ${out.principal}: ${out.dry_run ? "dry run (nothing was called; --confirm executes)" : `rollback ${out.rollback_id}`}`);
    const steps = listOf(out.steps);
    if (steps.length === 0) console.log("  nothing to compensate");
    for (const s of steps)
      console.log(
        `  ${String(s.state).padEnd(11)} ${s.upstream} ${s.tool} (${s.decision_id})${s.attempts ? `, ${s.attempts} attempt(s)` : ""}${s.verification ? `, ${s.verification}` : ""}${s.reason ? `: ${s.reason}` : ""}`,
      );
    for (const n of listOf(objectOf(out.plan).not_reversible)) console.log(`  cannot undo ${n.tool} (${n.decision_id}): ${n.reason}`);
    if (!out.dry_run && remaining.length) console.log(`  remaining: ${remaining.join(", ")}`);
  }
  return out.dry_run || remaining.length === 0 ? 0 : 1;
}

const COMMANDS: Record<string, Subcommand> = {
  list: subcommand(LIST_OPTIONS, listCommand),
  show: subcommand(SHOW_OPTIONS, showCommand),
  rollback: subcommand(ROLLBACK_OPTIONS, rollbackCommand),
};

/** Runs `portcullis runs <argv…>`; the exit code (3 for an error the exit codes do not name). */
export const runsCommand = (argv: string[]): Promise<number> => runGroup("runs", HELP.runs, COMMANDS, argv, { unexpected: 3 });
