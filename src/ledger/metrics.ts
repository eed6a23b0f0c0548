/**
 * Metrics derived from what the ledger records, as plain functions: what each committed entry adds
 * to the per-minute rollups (calls by upstream, tool, decision and mode; refusals by check;
 * outcomes by status; upstream time and gateway overhead as histograms; hold events and the time
 * each hold waited for its decision; ledger entries), the series names and histogram buckets, and
 * the two ways they are read: the Prometheus text exposition (cumulative totals, bounded label
 * sets: the top tools per upstream, the rest as `_other`) and per-step JSON series. A draft may
 * carry `metrics` facts the record does not (an outcome's upstream and tool, the gateway's own
 * time, a hold's wait): they feed the rollups and are never chained or stored in an entry.
 * Must never: read an argument or a result, or let a label value grow without bound.
 */
import type { EntryDraft } from "./records.ts";

/** Facts about a draft that only the rollups read (never part of the chained entry). */
export interface DraftMetrics {
  /** An outcome's upstream and upstream tool (its decision has them; the outcome body does not). */
  upstream?: string;
  tool?: string;
  /** The gateway's own time for the call, upstream time excluded (ms). */
  gateway_ms?: number;
  /** How long a hold waited for this event (approved, rejected, expired), from its creation (ms). */
  wait_ms?: number;
}

/** A draft as the LedgerDO commits it, with its optional rollup facts. */
export type MeteredDraft = EntryDraft & { metrics?: DraftMetrics };

/** Histogram upper bounds (ms) of every latency series; `+Inf` is implied. */
export const LATENCY_BUCKETS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000] as const;
/** The minute rows keep the totals of all time under this minute (it never collides with a real one). */
export const ALL_TIME = 0;
/** How long per-minute rows are kept (totals are kept for ever). */
export const MINUTE_RETENTION_MS = 8 * 24 * 60 * 60 * 1000;
/** A label value longer than this is cut (tool and upstream names are bounded already; this bounds anything else). */
const MAX_LABEL = 128;

export type Labels = Record<string, string>;
/** One rollup row: a series (name + labels) in one minute (epoch minute; ALL_TIME for the running total). */
export interface MetricRow {
  minute: number;
  name: string;
  labels: Labels;
  value: number;
}

export const SERIES = {
  calls: "portcullis_calls_total",
  blocked: "portcullis_calls_blocked_total",
  outcomes: "portcullis_call_outcomes_total",
  upstreamMs: "portcullis_upstream_duration_ms",
  gatewayMs: "portcullis_gateway_overhead_ms",
  holds: "portcullis_hold_events_total",
  holdWaitMs: "portcullis_hold_wait_ms",
  entries: "portcullis_ledger_entries_total",
} as const;

const HELP: Record<string, [type: "counter" | "histogram" | "gauge", help: string]> = {
  [SERIES.calls]: ["counter", "Governed tools/call decisions recorded (a call that may run), by team, upstream, tool, decision and mode."],
  [SERIES.blocked]: ["counter", "Governed tools/call refusals recorded (blocked records), by team, tool as called and the check that refused."],
  [SERIES.outcomes]: ["counter", "Outcomes recorded, by team, upstream, tool and status (succeeded, failed, uncertain)."],
  [SERIES.upstreamMs]: ["histogram", "Time spent upstream per governed call (the outcome's duration_ms), by team and upstream."],
  [SERIES.gatewayMs]: ["histogram", "The gateway's own time per governed call, upstream time excluded, by team."],
  [SERIES.holds]: ["counter", "Hold events recorded (created, approved, rejected, expired, consumed), by team."],
  [SERIES.holdWaitMs]: ["histogram", "How long a hold waited from its creation until approved, rejected or expired, by team and event."],
  [SERIES.entries]: ["counter", "Entries appended to the ledger, by chain."],
};

const label = (v: unknown, fallback = ""): string => (typeof v === "string" && v !== "" ? v.slice(0, MAX_LABEL) : fallback);
const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v >= 0;

/** Labels as stored: JSON of their entries in key order (one text per label set). */
export const labelsJson = (labels: Labels): string => JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));

/** The key of a series in one minute: minute, name and labels in key order. */
export const rowKey = (minute: number, name: string, labels: Labels): string => `${minute}\u0000${name}\u0000${labelsJson(labels)}`;

/** Labels from a row key's labels part. */
export const labelsOf = (json: string): Labels => Object.fromEntries(JSON.parse(json) as [string, string][]);

/** Adds `value` to a series in `minute` and in the all-time total. */
function add(out: Map<string, MetricRow>, minute: number, name: string, labels: Labels, value: number): void {
  for (const m of [minute, ALL_TIME]) {
    const k = rowKey(m, name, labels);
    const r = out.get(k);
    if (r) r.value += value;
    else out.set(k, { minute: m, name, labels, value });
  }
}

/** A histogram observation: its bucket (non-cumulative here; the exposition sums them), its sum. */
function observe(out: Map<string, MetricRow>, minute: number, name: string, labels: Labels, ms: number): void {
  const le = LATENCY_BUCKETS_MS.find((b) => ms <= b);
  add(out, minute, `${name}_bucket`, { ...labels, le: le === undefined ? "+Inf" : String(le) }, 1);
  add(out, minute, `${name}_sum`, labels, ms);
}

const minuteOf = (at: string): number => {
  const t = Date.parse(at);
  return Number.isFinite(t) ? Math.floor(t / 60_000) : Math.floor(Date.now() / 60_000);
};

/** What a batch of committed drafts of `chain` adds to the rollups, summed by series and minute. */
export function rollupOf(chain: string, drafts: MeteredDraft[]): MetricRow[] {
  const out = new Map<string, MetricRow>();
  for (const d of drafts) {
    const minute = minuteOf(d.at);
    const b = d.body;
    const team = label(b.team, chain);
    const m = d.metrics ?? {};
    add(out, minute, SERIES.entries, { chain }, 1);
    if (d.kind === "decision") {
      add(out, minute, SERIES.calls, { team, upstream: label(b.upstream), tool: label(b.tool), decision: label(b.decision), mode: label(b.mode) }, 1);
    } else if (d.kind === "blocked") {
      add(out, minute, SERIES.blocked, { team, tool: label(b.tool), check: label(b.check) }, 1);
    } else if (d.kind === "outcome") {
      const upstream = label(m.upstream, "_unknown");
      add(out, minute, SERIES.outcomes, { team, upstream, tool: label(m.tool, "_unknown"), status: label(b.status) }, 1);
      if (finite(b.duration_ms)) observe(out, minute, SERIES.upstreamMs, { team, upstream }, b.duration_ms);
      if (finite(m.gateway_ms)) observe(out, minute, SERIES.gatewayMs, { team }, m.gateway_ms);
    } else if (d.kind.startsWith("hold.")) {
      const event = d.kind.slice(5);
      add(out, minute, SERIES.holds, { team, event }, 1);
      if (finite(m.wait_ms) && (event === "approved" || event === "rejected" || event === "expired"))
        observe(out, minute, SERIES.holdWaitMs, { team, event }, m.wait_ms);
    }
  }
  return [...out.values()];
}

/** The DraftMetrics of an RPC copy, checked (anything else is dropped): bounded strings, finite non-negative numbers. */
export function draftMetricsOf(v: unknown): DraftMetrics | undefined {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
  const x = v as Record<string, unknown>;
  const out: DraftMetrics = {};
  if (typeof x.upstream === "string") out.upstream = x.upstream.slice(0, MAX_LABEL);
  if (typeof x.tool === "string") out.tool = x.tool.slice(0, MAX_LABEL);
  if (finite(x.gateway_ms)) out.gateway_ms = x.gateway_ms;
  if (finite(x.wait_ms)) out.wait_ms = x.wait_ms;
  return Object.keys(out).length ? out : undefined;
}

// ---- reading ----

/** Rows with the same series summed (across chains, or minutes). */
export function sumRows(rows: MetricRow[], minuteOfRow: (r: MetricRow) => number = (r) => r.minute): MetricRow[] {
  const out = new Map<string, MetricRow>();
  for (const r of rows) {
    const minute = minuteOfRow(r);
    const k = rowKey(minute, r.name, r.labels);
    const cur = out.get(k);
    if (cur) cur.value += r.value;
    else out.set(k, { minute, name: r.name, labels: { ...r.labels }, value: r.value });
  }
  return [...out.values()];
}

/**
 * Bounds the `tool` label: per (name, upstream) the `top` tools by value keep their label, every
 * other tool's rows are summed under `tool="_other"` (histogram-free series only carry tools).
 */
export function boundTools(rows: MetricRow[], top: number): MetricRow[] {
  const weight = new Map<string, Map<string, number>>();
  for (const r of rows) {
    if (r.labels.tool === undefined) continue;
    const group = `${r.name}\u0000${r.labels.upstream ?? ""}`;
    const g = weight.get(group) ?? new Map<string, number>();
    g.set(r.labels.tool, (g.get(r.labels.tool) ?? 0) + r.value);
    weight.set(group, g);
  }
  const kept = new Map<string, Set<string>>();
  for (const [group, g] of weight) {
    const ranked = [...g.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, top);
    kept.set(group, new Set(ranked.map(([t]) => t)));
  }
  return sumRows(
    rows.map((r) => {
      if (r.labels.tool === undefined) return r;
      const keep = kept.get(`${r.name}\u0000${r.labels.upstream ?? ""}`)?.has(r.labels.tool);
      return keep ? r : { ...r, labels: { ...r.labels, tool: "_other" } };
    }),
  );
}

const escapeLabel = (v: string): string => v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
const labelText = (l: Labels): string => {
  const parts = Object.entries(l).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
  return parts.length ? `{${parts.join(",")}}` : "";
};
const num = (v: number): string => (Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000));

/** A gauge read at scrape time (kill switch, ledger heads), with its help. */
export interface Gauge {
  name: string;
  help: string;
  values: { labels: Labels; value: number }[];
}

/**
 * The Prometheus text exposition (version 0.0.4) of all-time totals and `gauges`: counters as
 * they are, histograms with cumulative `_bucket` series (every bucket, `+Inf` last), `_sum` and
 * `_count`. Each family once, with its HELP and TYPE.
 */
export function prometheusText(totals: MetricRow[], gauges: Gauge[]): string {
  const lines: string[] = [];
  const byName = new Map<string, MetricRow[]>();
  for (const r of totals) byName.set(r.name, [...(byName.get(r.name) ?? []), r]);
  for (const name of Object.values(SERIES)) {
    const [type, help] = HELP[name]!;
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    if (type !== "histogram") {
      for (const r of (byName.get(name) ?? []).sort((a, b) => labelText(a.labels).localeCompare(labelText(b.labels))))
        lines.push(`${name}${labelText(r.labels)} ${num(r.value)}`);
      continue;
    }
    // Histogram: group the bucket rows by their labels without `le`.
    const groups = new Map<string, { labels: Labels; buckets: Map<string, number>; sum: number }>();
    for (const r of byName.get(`${name}_bucket`) ?? []) {
      const { le, ...rest } = r.labels;
      const k = labelText(rest);
      const g = groups.get(k) ?? { labels: rest, buckets: new Map(), sum: 0 };
      g.buckets.set(le ?? "+Inf", (g.buckets.get(le ?? "+Inf") ?? 0) + r.value);
      groups.set(k, g);
    }
    for (const r of byName.get(`${name}_sum`) ?? []) {
      const k = labelText(r.labels);
      const g = groups.get(k) ?? { labels: r.labels, buckets: new Map(), sum: 0 };
      g.sum += r.value;
      groups.set(k, g);
    }
    for (const [, g] of [...groups.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      let running = 0;
      for (const le of [...LATENCY_BUCKETS_MS.map(String), "+Inf"]) {
        running += g.buckets.get(le) ?? 0;
        lines.push(`${name}_bucket${labelText({ ...g.labels, le })} ${running}`);
      }
      lines.push(`${name}_sum${labelText(g.labels)} ${num(g.sum)}`, `${name}_count${labelText(g.labels)} ${running}`);
    }
  }
  for (const g of gauges) {
    lines.push(`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`);
    for (const v of g.values) lines.push(`${g.name}${labelText(v.labels)} ${num(v.value)}`);
  }
  return `${lines.join("\n")}\n`;
}
