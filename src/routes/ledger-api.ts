/**
 * The ledger's read API for auditors: `GET /v1/ledger` (search over the shared D1 store, cursor
 * paginated), `GET /v1/ledger/:id/trace` (one call's records, from its chain's LedgerDO) and
 * `GET /v1/ledger/export` (NDJSON of the chains with their signed checkpoints, streamed). An
 * auditor sees only its own team's chain; an admin sees every chain. Must never: show a chain
 * outside the caller's scope, or buffer a whole export in memory.
 */
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { GLOBAL_CHAIN } from "../ledger/records.ts";
import type { Principal } from "../config/principal.ts";
import { principalHas } from "../config/principal.ts";
import type { Env } from "../env.ts";
import type { LedgerEntry } from "../ledger/records.ts";
import { jsonResponse } from "../wire/http.ts";

const PAGE = 500;
/** A decision older than this with no outcome is reported `uncertain` (the gateway may have died after forwarding). */
const OUTCOME_GRACE_MS = 15 * 60_000;

const bad = (message: string, status = 400) => jsonResponse({ error: message }, status);

/**
 * The chains the caller may read: its team's, or — for an admin — the one asked for, or every
 * chain D1 knows (and its own). `what` names what is read, for the refusal (the metrics read the same scope).
 */
export async function chainsInScope(env: Env, principal: Principal, team: string | null, what = "ledger"): Promise<string[] | Response> {
  const admin = principalHas(principal, "admin");
  if (team !== null && team !== principal.team && !admin) return bad(`a grant of team ${principal.team} cannot read team ${team}'s ${what}`, 403);
  if (team !== null || !admin) return [team ?? principal.team];
  const rows = await env.LEDGER_DB.prepare("SELECT DISTINCT chain FROM ledger_entries WHERE chain != ?")
    .bind(GLOBAL_CHAIN)
    .all<{ chain: string }>()
    .catch(() => ({ results: [] as { chain: string }[] }));
  const chains = rows.results.map((r) => r.chain);
  if (!chains.includes(principal.team)) chains.push(principal.team);
  return chains.sort();
}

/**
 * GET /v1/ledger/export[?team=T]: a header line, then the global chain and each chain in scope,
 * each chain's signed checkpoints before its entries — so an export cut short anywhere is
 * detectably incomplete, not merely unanchored — and after them a checkpoint of exactly the entries
 * exported, so a verifier finds every entry under a signature. The header says which teams it was
 * limited to.
 */
export async function exportRoute(env: Env, principal: Principal, team: string | null, gateway: string): Promise<Response> {
  const chains = await chainsInScope(env, principal, team);
  if (chains instanceof Response) return chains;
  const limited = team !== null || !principalHas(principal, "admin");
  const all = [GLOBAL_CHAIN, ...chains];
  const encoder = new TextEncoder();
  const line = (o: unknown) => encoder.encode(`${JSON.stringify(o)}\n`);
  let i = -1;
  let after = 0;
  let chainDone = true;
  /** Sizes of the current chain's checkpoint lines already sent. */
  let sent = new Set<number>();
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(line({ export: { v: 1, gateway, generated_at: new Date().toISOString(), chains: all, ...(limited ? { teams: chains } : {}) } }));
    },
    async pull(c) {
      for (;;) {
        if (chainDone) {
          i++;
          if (i >= all.length) return c.close();
          after = 0;
          chainDone = false;
          const ledger = ledgerObject(env, all[i]!);
          if (!ledger) {
            chainDone = true;
            continue;
          }
          sent = new Set();
          for (const checkpoint of await ledger.checkpoints(0)) {
            sent.add(checkpoint.size);
            c.enqueue(line({ checkpoint }));
          }
          return;
        }
        const ledger = ledgerObject(env, all[i]!)!;
        const page = await ledger.read(after, PAGE);
        if (page.length === 0) {
          chainDone = true;
          // The chain ends with a checkpoint of exactly what was exported, so every entry of the
          // export is under a signature (none when the gateway has no signing key: the verifier
          // then reports the unanchored tail).
          const last = after > 0 && !sent.has(after) ? await ledger.checkpointAt(after) : null;
          if (last) {
            c.enqueue(line({ checkpoint: last }));
            return;
          }
          continue;
        }
        after = page.at(-1)!.seq;
        c.enqueue(encoder.encode(`${page.map((entry) => JSON.stringify({ entry })).join("\n")}\n`));
        return;
      }
    },
  });
  return new Response(body, { headers: { "content-type": "application/x-ndjson", "cache-control": "no-store" } });
}

/** GET /v1/ledger/:id/trace[?team=T]: a call's decision, enforcement, outcome and hold records, with its status. */
export async function traceRoute(env: Env, principal: Principal, id: string, team: string | null): Promise<Response> {
  if (!/^[A-Za-z0-9-]{8,64}$/.test(id)) return bad("the id is not a ledger record id");
  const chains = await chainsInScope(env, principal, team);
  if (chains instanceof Response) return chains;
  for (const chain of chains) {
    const ledger = ledgerObject(env, chain);
    const records = ledger ? await ledger.traceCall(id) : [];
    if (records.length) return jsonResponse({ chain, id, status: traceStatus(records), records });
  }
  return bad(`no record ${id} in ${chains.length === 1 ? `team ${chains[0]}'s ledger` : "the ledgers you can read"}`, 404);
}

/** What became of a call: its outcome, blocked, or — a decision with no outcome past the grace period — uncertain. */
export function traceStatus(records: LedgerEntry[], now = Date.now()): string {
  const outcome = records.find((r) => r.kind === "outcome");
  if (outcome) return String(outcome.body.status);
  if (records.some((r) => r.kind === "blocked")) return "blocked";
  const decision = records.find((r) => r.kind === "decision");
  if (decision && now - Date.parse(decision.at) > OUTCOME_GRACE_MS) return "uncertain";
  return decision ? "pending" : "unknown";
}

interface SearchRow {
  chain: string;
  seq: number;
  v: number;
  id: string;
  kind: string;
  at: string;
  prev: string;
  hash: string;
  body: string;
  principal: string | null;
  tool: string | null;
  upstream: string | null;
  status: string | null;
}

/** What the store indexed for an entry (an outcome's principal, tool and upstream come from its decision): beside the entry, never in it. */
export interface EntryIndex {
  principal: string | null;
  tool: string | null;
  upstream: string | null;
  status: string | null;
}

const entryOf = (r: SearchRow): LedgerEntry => ({
  v: r.v,
  chain: r.chain,
  seq: r.seq,
  prev: r.prev,
  kind: r.kind as LedgerEntry["kind"],
  id: r.id,
  at: r.at,
  body: JSON.parse(r.body),
  hash: r.hash,
});

/** GET /v1/ledger?team&principal&tool&kind&status&since&until&after&limit — newest first; `next` continues. */
export async function searchRoute(env: Env, principal: Principal, q: URLSearchParams): Promise<Response> {
  const chains = await chainsInScope(env, principal, q.get("team"));
  if (chains instanceof Response) return chains;
  const limit = Math.min(Math.max(Number(q.get("limit") ?? 100) || 100, 1), 1000);
  const where: string[] = [`chain IN (${chains.map(() => "?").join(", ")})`];
  const args: unknown[] = [...chains];
  for (const [param, column] of [
    ["principal", "principal"],
    ["tool", "tool"],
    ["kind", "kind"],
    ["status", "status"],
  ] as const) {
    const v = q.get(param);
    if (v !== null) {
      where.push(`${column} = ?`);
      args.push(v);
    }
  }
  const since = q.get("since");
  const until = q.get("until");
  if (since !== null) {
    if (Number.isNaN(Date.parse(since))) return bad("since must be an ISO 8601 time");
    where.push("at >= ?");
    args.push(since);
  }
  if (until !== null) {
    if (Number.isNaN(Date.parse(until))) return bad("until must be an ISO 8601 time");
    where.push("at < ?");
    args.push(until);
  }
  const after = q.get("after");
  if (after !== null) {
    const m = /^(.+):(\d+)$/.exec(after);
    if (!m) return bad("after must be a cursor from a previous page (chain:seq)");
    where.push("(at, chain, seq) < (SELECT at, chain, seq FROM ledger_entries WHERE chain = ? AND seq = ?)");
    args.push(m[1], Number(m[2]));
  }
  const sql = `SELECT chain, seq, v, id, kind, at, prev, hash, body, principal, tool, upstream, status FROM ledger_entries WHERE ${where.join(" AND ")} ORDER BY at DESC, chain DESC, seq DESC LIMIT ?`;
  let rows: SearchRow[];
  try {
    rows = (
      await env.LEDGER_DB.prepare(sql)
        .bind(...args, limit + 1)
        .all<SearchRow>()
    ).results;
  } catch (e) {
    return bad(`the ledger store could not be searched (${(e as Error).message})`, 503);
  }
  const page = rows.slice(0, limit);
  const last = page.at(-1);
  // `index`, one per entry in the same order: the store's indexed facts, so a reader needs no second query for an outcome's tool.
  const index: EntryIndex[] = page.map((r) => ({
    principal: r.principal ?? null,
    tool: r.tool ?? null,
    upstream: r.upstream ?? null,
    status: r.status ?? null,
  }));
  return jsonResponse({ entries: page.map(entryOf), index, next: rows.length > limit && last ? `${last.chain}:${last.seq}` : null });
}
