/**
 * The gateway's metrics, read from the ledger's rollups (src/ledger/metrics.ts; each LedgerDO
 * keeps its chain's beside its entries): `GET /metrics`, the Prometheus text exposition of the
 * all-time totals with gauges read at scrape time (the kill switch, each chain's head, checkpoint
 * lag and D1 flush lag), and `GET /v1/metrics?team=&from=&to=&step=`, the per-minute rows summed
 * into steps as JSON, for the console and scripts. Both for an auditor, operator or admin: an
 * auditor or operator sees its own team's chain, an admin every chain (or the team asked for).
 * The `tool` label keeps the top tools per upstream (`top`, default 20, at most 200) and sums the
 * rest as `_other`, so a scrape stays small however many tools the upstreams have. Must never:
 * show a chain outside the caller's scope, read entries (only rollups and status), or wait on a
 * chain without a bound.
 */
import { ledgerObject } from "../../durable-objects/object-names.ts";
import type { LedgerStatus } from "../../durable-objects/contract-ledger.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { ALL_TIME, boundTools, type Gauge, type MetricRow, prometheusText, sumRows } from "../ledger/metrics.ts";
import { killSwitchStatus } from "../ports/killswitch-client.ts";
import { bounded } from "../wire/bounded.ts";
import { jsonResponse } from "../wire/http.ts";
import { chainsInScope } from "./ledger-api.ts";

const READ_TIMEOUT_MS = 5000;
const DEFAULT_TOP = 20;
const MAX_TOP = 200;
/** /v1/metrics returns at most this many steps (a day of minutes). */
const MAX_STEPS = 1440;

const bad = (message: string, status = 400) => jsonResponse({ error: message }, status);

/** The team chains the caller may read, as the ledger's read API scopes them. */
const chainsFor = (env: Env, principal: Principal, team: string | null) => chainsInScope(env, principal, team, "metrics");

/**
 * The rollup rows the caller may read for epoch minutes [fromMinute, toMinute], summed over chains
 * (the console's overview reads this too); a Response when the team asked for is out of scope.
 */
export async function metricsWindow(
  env: Env,
  principal: Principal,
  team: string | null,
  fromMinute: number,
  toMinute: number,
): Promise<{ rows: MetricRow[]; chains: string[]; unavailable: string[] } | Response> {
  const chains = await chainsFor(env, principal, team);
  if (chains instanceof Response) return chains;
  const { rows, unavailable } = await rowsOf(env, chains, Math.max(fromMinute, 1), toMinute);
  return { rows: sumRows(rows), chains, unavailable };
}

/** Every chain's rows for the window (or totals), with the chains that did not answer. */
async function rowsOf(env: Env, chains: string[], from: number, to: number): Promise<{ rows: MetricRow[]; unavailable: string[] }> {
  const rows: MetricRow[] = [];
  const unavailable: string[] = [];
  await Promise.all(
    chains.map(async (chain) => {
      const ledger = ledgerObject(env, chain);
      try {
        if (!ledger) throw new Error("no ledger");
        rows.push(...(await bounded(ledger.metrics(from, to), READ_TIMEOUT_MS, `the ledger of ${chain}`)));
      } catch {
        unavailable.push(chain);
      }
    }),
  );
  return { rows, unavailable: unavailable.sort() };
}

function topOf(q: URLSearchParams): number | Response {
  const raw = q.get("top");
  if (raw === null) return DEFAULT_TOP;
  const n = Number(raw);
  return Number.isInteger(n) && n >= 1 && n <= MAX_TOP ? n : bad(`top must be an integer from 1 to ${MAX_TOP}`);
}

/** GET /metrics: Prometheus text of the totals and the scrape-time gauges. */
export async function prometheusRoute(env: Env, principal: Principal, q: URLSearchParams): Promise<Response> {
  const top = topOf(q);
  if (top instanceof Response) return top;
  const chains = await chainsFor(env, principal, q.get("team"));
  if (chains instanceof Response) return chains;
  const [{ rows, unavailable }, statuses, ks] = await Promise.all([
    rowsOf(env, chains, ALL_TIME, ALL_TIME),
    Promise.all(
      chains.map(async (chain): Promise<[string, LedgerStatus | null]> => {
        const ledger = ledgerObject(env, chain);
        return [chain, ledger ? await bounded(ledger.status(), READ_TIMEOUT_MS, `the ledger of ${chain}`).catch(() => null) : null];
      }),
    ),
    killSwitchStatus(env),
  ]);
  const known = statuses.filter((s): s is [string, LedgerStatus] => s[1] !== null);
  const gauges: Gauge[] = [
    {
      name: "portcullis_killswitch_halts",
      help: "Halts in force by scope (global, team, upstream, tool, principal, grant); -1 when the kill switch could not be read.",
      values: ks.ok
        ? ["global", "team", "upstream", "tool", "principal", "grant"].map((scope) => ({
            labels: { scope },
            value: ks.snapshot.halts.filter((h) => h.scope === scope).length,
          }))
        : [{ labels: { scope: "unknown" }, value: -1 }],
    },
    {
      name: "portcullis_ledger_head_seq",
      help: "The newest entry's seq, by chain.",
      values: known.map(([chain, s]) => ({ labels: { chain }, value: s.head.seq })),
    },
    {
      name: "portcullis_ledger_checkpoint_lag_entries",
      help: "Entries after the newest signed checkpoint, by chain.",
      values: known.map(([chain, s]) => ({ labels: { chain }, value: Math.max(0, s.head.seq - s.checkpointSize) })),
    },
    {
      name: "portcullis_ledger_flush_lag_entries",
      help: "Entries not yet in the shared D1 store, by chain.",
      values: known.map(([chain, s]) => ({ labels: { chain }, value: Math.max(0, s.head.seq - s.flushedSeq) })),
    },
    {
      name: "portcullis_metrics_chains_unavailable",
      help: "Chains whose rollups or status did not answer this scrape.",
      values: [{ labels: {}, value: new Set([...unavailable, ...statuses.filter((s) => s[1] === null).map((s) => s[0])]).size }],
    },
  ];
  const totals = boundTools(sumRows(rows), top);
  return new Response(prometheusText(totals, gauges), {
    status: 200,
    headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8", "cache-control": "no-store" },
  });
}

const isoMinute = (m: number) => new Date(m * 60_000).toISOString();

/**
 * GET /v1/metrics?team=&from=&to=&step=&top=: the per-minute rows of [from, to] (ISO times or epoch
 * ms; default the last hour) summed into steps of `step` minutes (default 1; at most 1440 steps),
 * tools bounded as in /metrics. `{from, to, step, chains, unavailable, series: [{name, labels,
 * points: [[t, value], …]}]}`, each point at its step's start.
 */
export async function metricsJsonRoute(env: Env, principal: Principal, q: URLSearchParams, now = Date.now()): Promise<Response> {
  const top = topOf(q);
  if (top instanceof Response) return top;
  const time = (name: string, fallback: number): number | Response => {
    const raw = q.get(name);
    if (raw === null) return fallback;
    const t = /^\d+$/.test(raw) ? Number(raw) : Date.parse(raw);
    return Number.isFinite(t) ? t : bad(`${name} must be an ISO 8601 time or epoch milliseconds`);
  };
  const to = time("to", now);
  if (to instanceof Response) return to;
  const from = time("from", (to as number) - 3600_000);
  if (from instanceof Response) return from;
  const stepRaw = q.get("step") ?? "1";
  const step = Number(stepRaw);
  if (!Number.isInteger(step) || step < 1 || step > 10_080) return bad("step must be a whole number of minutes from 1 to 10080");
  const fromMinute = Math.floor(from / 60_000);
  const toMinute = Math.floor(to / 60_000);
  if (toMinute < fromMinute) return bad("from must not be after to");
  if ((toMinute - fromMinute + 1) / step > MAX_STEPS) return bad(`at most ${MAX_STEPS} steps: widen step or narrow from..to`);
  const chains = await chainsFor(env, principal, q.get("team"));
  if (chains instanceof Response) return chains;
  const { rows, unavailable } = await rowsOf(env, chains, Math.max(fromMinute, 1), toMinute);
  const stepStart = (m: number) => fromMinute + Math.floor((m - fromMinute) / step) * step;
  const summed = boundTools(
    sumRows(rows, (r) => stepStart(r.minute)),
    top,
  );
  const series = new Map<string, { name: string; labels: Record<string, string>; points: [string, number][] }>();
  for (const r of summed.sort((a, b) => a.minute - b.minute)) {
    const k = `${r.name}\u0000${JSON.stringify(Object.entries(r.labels).sort())}`;
    const s = series.get(k) ?? { name: r.name, labels: r.labels, points: [] };
    s.points.push([isoMinute(r.minute), Math.round(r.value * 1000) / 1000]);
    series.set(k, s);
  }
  return jsonResponse(
    {
      from: isoMinute(fromMinute),
      to: isoMinute(toMinute),
      step,
      chains,
      unavailable,
      series: [...series.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    },
    200,
    { "cache-control": "no-store" },
  );
}
