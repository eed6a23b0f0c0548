/**
 * Runs as the ledger records them ([R]): a run's records read from the ledger alone — the shared
 * D1 store queried by team and run, plus the chain's LedgerDO tail not yet flushed to D1 — and
 * rebuilt into steps and a rollback plan by src/governance/rollback.ts; who may see which run (an
 * agent its own runs only, another principal's run is "not found"; an operator, auditor or
 * approver its team's; an admin any team's, by `team`). Execution lives in ./runs.ts.
 * Must never: read a store other than the ledger to build a run, or tell a caller that a run it
 * may not see exists.
 */
import { type Principal, principalHas } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { planRollback, type RollbackPlan, type RunEntry, type RunView, runView } from "../governance/rollback.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
export type RunsResult<T> = { ok: true; value: T } | { ok: false; status: 400 | 403 | 404 | 409 | 503; message: string };

export const RUN_ID = /^[A-Za-z0-9_-]{1,128}$/;
const MAX_TAIL_PAGES = 20;
const TAIL_PAGE = 1000;
const MAX_RUN_ROWS = 5000;

/** An agent sees only itself; readers of the team (and admins) see the team's principals. */
export function isTeamReader(p: Principal): boolean {
  return principalHas(p, "operator") || principalHas(p, "auditor") || principalHas(p, "approver");
}

/** The team whose chain the caller reads: its own, or — for an admin — the one it names. */
export function teamOf(caller: Principal, team: string | undefined): RunsResult<string> {
  if (team === undefined || team === caller.team) return { ok: true, value: caller.team };
  if (!principalHas(caller, "admin")) return { ok: false, status: 403, message: `a grant of team ${caller.team} cannot read team ${team}'s runs` };
  return { ok: true, value: team };
}

interface Row {
  seq: number;
  id: string;
  kind: string;
  at: string;
  body: string;
}

/** Whether D1 holds the ledger_entries table yet (a LedgerDO's first flush creates it); true when D1 cannot say. */
async function hasEntriesTable(env: Env): Promise<boolean> {
  try {
    const t = await env.LEDGER_DB.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ledger_entries'").first();
    return t !== null;
  } catch {
    return true;
  }
}

/**
 * Every record of the chain's runs that `match` selects: D1 rows (`where` over ledger_entries)
 * and the LedgerDO's entries after its flushed seq (not in D1 yet), de-duplicated by seq.
 */
async function chainEntries(
  env: Env,
  team: string,
  where: string,
  args: unknown[],
  tailMatch: (e: RunEntry, decisions: ReadonlySet<string>) => boolean,
): Promise<RunEntry[]> {
  const ledger = ledgerObject(env, team);
  if (!ledger) return [];
  // The flushed seq first: D1 then holds at least everything up to it, and the tail covers the rest.
  const flushed = (await ledger.status()).flushedSeq;
  let rows: Row[];
  try {
    rows = (
      await env.LEDGER_DB.prepare(`SELECT seq, id, kind, at, body FROM ledger_entries WHERE chain = ? AND (${where}) ORDER BY seq LIMIT ${MAX_RUN_ROWS}`)
        .bind(team, ...args)
        .all<Row>()
    ).results;
  } catch (e) {
    // Before any LedgerDO's first flush the table does not exist yet: nothing is flushed, the tail holds it all.
    if (flushed !== 0 || (await hasEntriesTable(env))) throw e;
    rows = [];
  }
  const out = new Map<number, RunEntry>();
  for (const r of rows) out.set(r.seq, { seq: r.seq, id: r.id, kind: r.kind, at: r.at, body: JSON.parse(r.body) as JsonObject });
  const tail: RunEntry[] = [];
  let after = flushed;
  for (let i = 0; i < MAX_TAIL_PAGES; i++) {
    const page = await ledger.read(after, TAIL_PAGE);
    for (const e of page) tail.push({ seq: e.seq, id: e.id, kind: e.kind, at: e.at, body: e.body });
    if (page.length < TAIL_PAGE) break;
    after = page.at(-1)!.seq;
  }
  // Decisions first (the tail's own, then the rest may name them or one D1 already holds).
  for (const e of tail) if (e.kind === "decision" && !out.has(e.seq) && tailMatch(e, new Set())) out.set(e.seq, e);
  const decisions = new Set([...out.values()].filter((e) => e.kind === "decision").map((e) => e.id));
  for (const e of tail) if (e.kind !== "decision" && !out.has(e.seq) && tailMatch(e, decisions)) out.set(e.seq, e);
  return [...out.values()].sort((a, b) => a.seq - b.seq);
}

const RUN_DECISIONS = "SELECT id FROM ledger_entries WHERE chain = ? AND kind = 'decision' AND json_extract(body, '$.run') = ?";

/** The records of run `run` on `team`'s chain: its decisions, and every record naming one of them (outcomes, rollback steps, holds). */
async function runEntries(env: Env, team: string, run: string): Promise<RunEntry[]> {
  return chainEntries(
    env,
    team,
    `(kind = 'decision' AND json_extract(body, '$.run') = ?) OR decision_id IN (${RUN_DECISIONS})`,
    [run, team, run],
    (e, decisions) => {
      if (e.kind === "decision") return e.body.run === run;
      const d = e.body.decision_id;
      return typeof d === "string" && decisions.has(d);
    },
  );
}

export interface RunSummary {
  run: string;
  principal: string;
  steps: number;
  started_at: string;
  last_at: string;
  /** What the run touched: each `upstream/tool` it called, in first-call order (at most TOUCHED_SHOWN; `touched_more` counts the rest). */
  touched: string[];
  touched_more: number;
}

/** How many distinct tools a run summary names (the run's page has them all). */
export const TOUCHED_SHOWN = 8;

/** GET /v1/runs: the runs the caller may see, newest first (`principal` narrows a team reader's list). */
export async function listRuns(env: Env, caller: Principal, q: { principal?: string; team?: string; limit?: number }): Promise<RunsResult<RunSummary[]>> {
  const team = teamOf(caller, q.team);
  if (!team.ok) return team;
  const own = !isTeamReader(caller) && !principalHas(caller, "admin");
  if (own && q.principal !== undefined && q.principal !== caller.sub) return { ok: false, status: 403, message: "an agent grant lists only its own runs" };
  const who = own ? caller.sub : q.principal;
  const limit = Math.min(Math.max(q.limit ?? 100, 1), 500);
  let entries: RunEntry[];
  try {
    entries = await chainEntries(
      env,
      team.value,
      `kind = 'decision' AND json_extract(body, '$.run') IS NOT NULL${who !== undefined ? " AND principal = ?" : ""}`,
      who !== undefined ? [who] : [],
      (e) => e.kind === "decision" && typeof e.body.run === "string" && (who === undefined || e.body.principal === who),
    );
  } catch (e) {
    return { ok: false, status: 503, message: `the ledger could not be read (${(e as Error).message})` };
  }
  const runs = new Map<string, RunSummary>();
  for (const e of entries) {
    const run = e.body.run as string;
    const principal = String(e.body.principal);
    const key = `${principal}\u0000${run}`;
    const tool = `${String(e.body.upstream ?? "?")}/${String(e.body.tool ?? "?")}`;
    const r = runs.get(key) ?? { run, principal, steps: 0, started_at: e.at, last_at: e.at, touched: [], touched_more: 0 };
    r.steps++;
    r.last_at = e.at;
    if (!r.touched.includes(tool)) {
      if (r.touched.length < TOUCHED_SHOWN) r.touched.push(tool);
      else r.touched_more++;
    }
    runs.set(key, r);
  }
  return { ok: true, value: [...runs.values()].sort((a, b) => (a.last_at < b.last_at ? 1 : -1)).slice(0, limit) };
}

/** The run as the caller may see it: an agent's own only; another principal's run is not found (not forbidden: its existence is not told). */
export async function visibleRun(env: Env, caller: Principal, run: string, q: { principal?: string; team?: string }): Promise<RunsResult<RunView>> {
  if (!RUN_ID.test(run)) return { ok: false, status: 400, message: "a run id is 1–128 characters of [A-Za-z0-9_-]" };
  const team = teamOf(caller, q.team);
  if (!team.ok) return team;
  let entries: RunEntry[];
  try {
    entries = await runEntries(env, team.value, run);
  } catch (e) {
    return { ok: false, status: 503, message: `the ledger could not be read (${(e as Error).message})` };
  }
  const principals = [...new Set(entries.filter((e) => e.kind === "decision").map((e) => String(e.body.principal)))];
  const reader = isTeamReader(caller) || principalHas(caller, "admin");
  const notFound: RunsResult<RunView> = { ok: false, status: 404, message: `no run ${run} ${reader ? `in team ${team.value}'s ledger` : "of yours"}` };
  let principal: string;
  if (!reader) {
    if (!principals.includes(caller.sub)) return notFound;
    principal = caller.sub;
  } else if (q.principal !== undefined) {
    if (!principals.includes(q.principal)) return notFound;
    principal = q.principal;
  } else if (principals.length === 1) principal = principals[0]!;
  else if (principals.length === 0) return notFound;
  else return { ok: false, status: 409, message: `run ${run} has steps of several principals (${principals.join(", ")}): name one with principal` };
  const view = runView(run, principal, entries, Date.now());
  return view ? { ok: true, value: view } : notFound;
}

export interface RunDetail {
  run: RunView;
  plan: RollbackPlan;
}

/** GET /v1/runs/:id: the run's steps (what each changed, its outcome, its compensation and how far its rollback got) and its rollback plan. */
export async function runDetail(env: Env, caller: Principal, run: string, q: { principal?: string; team?: string } = {}): Promise<RunsResult<RunDetail>> {
  const v = await visibleRun(env, caller, run, q);
  if (!v.ok) return v;
  return { ok: true, value: { run: v.value, plan: planRollback(v.value) } };
}
