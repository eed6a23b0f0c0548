/** @jsxRuntime automatic @jsxImportSource hono/jsx */
/**
 * The console's overview: the last hour at a glance, drawn as server-rendered SVG from the
 * ledger's metric rollups (no script, no image: the CSP allows neither) — calls per minute by
 * decision (a held call counts as `held` when its hold is created; it has a decision of its own
 * once approved and run), the top tools, error rate per upstream, time to a hold's decision — beside the held
 * calls waiting (and the oldest) and the kill switch's state. It refreshes itself every 15 s.
 * The numbers are computed here from plain rows (`overviewOf`), so a test can check them without
 * a browser. Must never: show a number the rollups did not give, or build markup from a value
 * (every label goes through JSX text).
 */
import { LATENCY_BUCKETS_MS, type MetricRow, SERIES } from "../ledger/metrics.ts";
import { age, duration } from "./format.ts";
import { Layout, type Viewer } from "./layout.tsx";

export interface Overview {
  /** The window's minutes, oldest first, each with its count per decision (`blocked` for refusals). */
  minutes: { minute: number; byDecision: Record<string, number> }[];
  decisions: string[];
  topTools: { upstream: string; tool: string; calls: number }[];
  upstreams: { upstream: string; total: number; failed: number }[];
  /** Median and 90th percentile of time to a decision (ms, bucket upper bounds), or null with no decided hold. */
  holdWait: { decided: number; p50: number | null; p90: number | null };
  /** Decisions of calls that may run, refusals, and calls held for an approver (hold.created). */
  totals: { calls: number; blocked: number; held: number };
}

/** The overview's numbers from the window's per-minute rows. */
export function overviewOf(rows: MetricRow[], fromMinute: number, toMinute: number): Overview {
  const minutes = new Map<number, Record<string, number>>();
  for (let m = fromMinute; m <= toMinute; m++) minutes.set(m, {});
  const decisions = new Set<string>();
  const tools = new Map<string, { upstream: string; tool: string; calls: number }>();
  const ups = new Map<string, { upstream: string; total: number; failed: number }>();
  const waits = new Map<string, number>();
  const totals = { calls: 0, blocked: 0, held: 0 };
  for (const r of rows) {
    const slot = minutes.get(r.minute);
    if (r.name === SERIES.calls || r.name === SERIES.blocked) {
      const d = r.name === SERIES.blocked ? "blocked" : (r.labels.decision ?? "?");
      decisions.add(d);
      if (slot) slot[d] = (slot[d] ?? 0) + r.value;
      if (r.name === SERIES.blocked) totals.blocked += r.value;
      else {
        totals.calls += r.value;
        const k = `${r.labels.upstream}\u0000${r.labels.tool}`;
        const t = tools.get(k) ?? { upstream: r.labels.upstream ?? "", tool: r.labels.tool ?? "", calls: 0 };
        t.calls += r.value;
        tools.set(k, t);
      }
    } else if (r.name === SERIES.holds && r.labels.event === "created") {
      // A held call has no decision record until it runs: its hold.created is what the minute saw.
      decisions.add("held");
      if (slot) slot.held = (slot.held ?? 0) + r.value;
      totals.held += r.value;
    } else if (r.name === SERIES.outcomes) {
      const u = ups.get(r.labels.upstream ?? "") ?? { upstream: r.labels.upstream ?? "", total: 0, failed: 0 };
      u.total += r.value;
      if (r.labels.status !== "succeeded") u.failed += r.value;
      ups.set(u.upstream, u);
    } else if (r.name === `${SERIES.holdWaitMs}_bucket` && r.labels.event !== "expired") {
      const le = r.labels.le ?? "+Inf";
      waits.set(le, (waits.get(le) ?? 0) + r.value);
    }
  }
  const order = [...LATENCY_BUCKETS_MS.map(String), "+Inf"];
  const decided = order.reduce((a, le) => a + (waits.get(le) ?? 0), 0);
  const quantile = (q: number): number | null => {
    if (decided === 0) return null;
    let running = 0;
    for (const le of order) {
      running += waits.get(le) ?? 0;
      if (running >= q * decided) return le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le);
    }
    return null;
  };
  const rank = ["allow", "require_approval", "held", "blocked"];
  return {
    minutes: [...minutes.entries()].map(([minute, byDecision]) => ({ minute, byDecision })),
    decisions: [...decisions].sort((a, b) => (rank.indexOf(a) + 1 || 99) - (rank.indexOf(b) + 1 || 99) || (a < b ? -1 : 1)),
    topTools: [...tools.values()].sort((a, b) => b.calls - a.calls || (a.tool < b.tool ? -1 : 1)).slice(0, 10),
    upstreams: [...ups.values()].sort((a, b) => (a.upstream < b.upstream ? -1 : 1)),
    holdWait: { decided, p50: quantile(0.5), p90: quantile(0.9) },
    totals,
  };
}

const COLORS: Record<string, string> = { allow: "chart-ok", blocked: "chart-bad", held: "chart-warn", require_approval: "chart-other" };
const colorOf = (d: string) => COLORS[d] ?? "chart-other";
const waitText = (ms: number | null) => (ms === null ? "—" : ms === Number.POSITIVE_INFINITY ? `over ${duration(60_000)}` : `≤ ${duration(ms)}`);

/** Calls per minute, stacked by decision: one bar per minute. */
function CallsChart(props: { o: Overview }) {
  const { minutes, decisions } = props.o;
  const W = 720;
  const H = 160;
  const max = Math.max(1, ...minutes.map((m) => Object.values(m.byDecision).reduce((a, b) => a + b, 0)));
  const bw = W / Math.max(1, minutes.length);
  return (
    <svg class="chart" id="chart-calls" viewBox={`0 0 ${W} ${H + 20}`} role="img" aria-label="Calls per minute by decision">
      <title>Calls per minute by decision</title>
      <line x1="0" y1={String(H)} x2={String(W)} y2={String(H)} class="chart-axis" />
      {minutes.flatMap((m, i) => {
        let y = H;
        return decisions.map((d) => {
          const v = m.byDecision[d] ?? 0;
          if (v === 0) return null;
          const h = (v / max) * (H - 10);
          y -= h;
          return (
            <rect
              x={(i * bw + 1).toFixed(1)}
              y={y.toFixed(1)}
              width={Math.max(1, bw - 2).toFixed(1)}
              height={h.toFixed(1)}
              class={`bar ${colorOf(d)}`}
              data-decision={d}
            >
              <title>{`${new Date(m.minute * 60_000).toISOString().slice(11, 16)} UTC: ${v} ${d}`}</title>
            </rect>
          );
        });
      })}
      <text x="2" y="12" class="chart-label">{`max ${max}/min`}</text>
      <text x="2" y={String(H + 16)} class="chart-label">
        {minutes.length ? `${new Date(minutes[0]!.minute * 60_000).toISOString().slice(11, 16)} UTC` : ""}
      </text>
      <text x={String(W - 2)} y={String(H + 16)} class="chart-label" text-anchor="end">
        now
      </text>
    </svg>
  );
}

/** Horizontal bars: one per row, scaled to the largest. */
function BarList(props: { id: string; label: string; rows: { name: string; value: number; text: string; cls?: string }[] }) {
  const W = 720;
  const row = 22;
  const max = Math.max(1, ...props.rows.map((r) => r.value));
  return (
    <svg class="chart" id={props.id} viewBox={`0 0 ${W} ${Math.max(1, props.rows.length) * row + 4}`} role="img" aria-label={props.label}>
      <title>{props.label}</title>
      {props.rows.map((r, i) => (
        <g>
          <rect x="260" y={String(i * row + 3)} width={((r.value / max) * (W - 340)).toFixed(1)} height="16" class={`bar ${r.cls ?? "chart-ok"}`} />
          <text x="254" y={String(i * row + 15)} class="chart-label" text-anchor="end">
            {r.name.length > 40 ? `${r.name.slice(0, 39)}…` : r.name}
          </text>
          <text x={String(264 + (r.value / max) * (W - 340))} y={String(i * row + 15)} class="chart-label">
            {r.text}
          </text>
        </g>
      ))}
    </svg>
  );
}

export function OverviewPage(props: {
  viewer: Viewer;
  overview: Overview | null;
  /** Why the metrics are not shown (a viewer without auditor, operator or admin; or unavailable). */
  metricsNote?: string;
  unavailable: string[];
  pending: { count: number; oldest: number | null } | null;
  halts: { count: number; scopes: string[] } | null;
  now: number;
}) {
  const o = props.overview;
  return (
    <Layout title="Overview" viewer={props.viewer} refreshSeconds={15}>
      <h1>Overview</h1>
      <p class="muted">The last hour, from the ledger's records; this page refreshes itself every 15 s.</p>
      <div class="tiles">
        <div class="tile" id="tile-halts">
          <span class="tile-label">Kill switch</span>
          <span class={`tile-value ${props.halts && props.halts.count > 0 ? "bad" : "ok"}`}>
            {props.halts === null ? "unknown" : props.halts.count === 0 ? "running" : `${props.halts.count} halt${props.halts.count === 1 ? "" : "s"}`}
          </span>
          {props.halts?.count ? <span class="muted">{props.halts.scopes.join(", ")}</span> : null}
        </div>
        <div class="tile" id="tile-pending">
          <span class="tile-label">Held calls waiting</span>
          <span class={`tile-value ${props.pending && props.pending.count > 0 ? "warn" : ""}`}>
            {props.pending === null ? "unknown" : String(props.pending.count)}
          </span>
          {props.pending?.oldest ? <span class="muted">{`oldest ${age(props.pending.oldest, props.now)}`}</span> : null}
        </div>
        {o ? (
          <div class="tile" id="tile-calls">
            <span class="tile-label">Calls (last hour)</span>
            <span class="tile-value">{String(o.totals.calls + o.totals.blocked + o.totals.held)}</span>
            <span class="muted">{`${o.totals.blocked} refused, ${o.totals.held} held`}</span>
          </div>
        ) : null}
        {o ? (
          <div class="tile" id="tile-wait">
            <span class="tile-label">Time to decision</span>
            <span class="tile-value">{waitText(o.holdWait.p50)}</span>
            <span class="muted">{o.holdWait.decided ? `median of ${o.holdWait.decided}; p90 ${waitText(o.holdWait.p90)}` : "no hold decided"}</span>
          </div>
        ) : null}
      </div>
      {props.unavailable.length ? <div class="notice">{`Not counted: the ledger of ${props.unavailable.join(", ")} did not answer.`}</div> : null}
      {o ? (
        <>
          <h2>Calls per minute</h2>
          <p class="legend">
            {o.decisions.map((d) => (
              <span class={`key ${colorOf(d)}`}>{d}</span>
            ))}
          </p>
          <CallsChart o={o} />
          <h2>Top tools</h2>
          {o.topTools.length ? (
            <BarList
              id="chart-tools"
              label="Top tools by calls"
              rows={o.topTools.map((t) => ({ name: `${t.upstream} · ${t.tool}`, value: t.calls, text: String(t.calls) }))}
            />
          ) : (
            <p class="muted">No call in the last hour.</p>
          )}
          <h2>Error rate per upstream</h2>
          {o.upstreams.length ? (
            <BarList
              id="chart-errors"
              label="Error rate per upstream"
              rows={o.upstreams.map((u) => ({
                name: u.upstream,
                value: u.total ? u.failed / u.total : 0,
                text: `${u.total ? Math.round((u.failed / u.total) * 1000) / 10 : 0}% of ${u.total}`,
                cls: u.failed ? "chart-bad" : "chart-ok",
              }))}
            />
          ) : (
            <p class="muted">No outcome in the last hour.</p>
          )}
        </>
      ) : (
        <p class="muted">{props.metricsNote ?? "Metrics are not available."}</p>
      )}
    </Layout>
  );
}
