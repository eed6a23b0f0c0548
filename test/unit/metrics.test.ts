/**
 * Metrics from the ledger: what committed drafts add to the rollups (src/ledger/metrics.ts), the
 * Prometheus exposition (cumulative buckets, `_sum`/`_count`, every family with HELP and TYPE,
 * label values escaped), the bounded tool label (top N per upstream, the rest `_other`, totals
 * unchanged), and a real LedgerDO: appends through the group commit leave per-minute rows and
 * all-time totals equal to what its entries say, the rollup facts never reach the chain, and the
 * alarm's prune keeps the totals.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { LedgerApi, LedgerSigning } from "../../durable-objects/contract-ledger.ts";
import type { LedgerDO } from "../../durable-objects/ledger.ts";
import { pruneRollup, readRollup } from "../../durable-objects/ledger-metrics.ts";
import dashboard from "../../docs/dashboards/grafana-portcullis.json";
import { ALL_TIME, boundTools, type MeteredDraft, type MetricRow, prometheusText, rollupOf, SERIES, sumRows } from "../../src/ledger/metrics.ts";

const AT = "2026-12-06T10:00:30.000Z";
const MINUTE = Math.floor(Date.parse(AT) / 60_000);

const decision = (id: string, tool: string, decision = "allow", at = AT): MeteredDraft => ({
  kind: "decision",
  id,
  at,
  body: { principal: "agent:a", team: "t1", upstream: "up", tool, decision, mode: "enforce" },
});
const outcome = (id: string, tool: string, status: string, ms: number, gatewayMs: number, at = AT): MeteredDraft => ({
  kind: "outcome",
  id: `o-${id}`,
  at,
  body: { decision_id: id, status, duration_ms: ms },
  metrics: { upstream: "up", tool, gateway_ms: gatewayMs },
});
const sorted = (l: Record<string, string>) => JSON.stringify(Object.entries(l).sort());
const value = (rows: MetricRow[], minute: number, name: string, labels: Record<string, string>) =>
  rows.filter((r) => r.minute === minute && r.name === name && sorted(r.labels) === sorted(labels)).reduce((a, r) => a + r.value, 0);

describe("rollups", () => {
  it("a batch adds calls, refusals, outcomes, both latency histograms, hold events and waits, and entries — per minute and all time", () => {
    const rows = rollupOf("t1", [
      decision("d1", "read"),
      decision("d2", "read"),
      decision("d3", "write", "hold"),
      { kind: "blocked", id: "b1", at: AT, body: { principal: "agent:a", team: "t1", tool: "up__drop", check: "rule" } },
      outcome("d1", "read", "succeeded", 7, 2),
      outcome("d2", "read", "failed", 120, 3),
      { kind: "hold.created", id: "h1", at: AT, body: { team: "t1" } },
      { kind: "hold.approved", id: "h2", at: AT, body: { team: "t1" }, metrics: { wait_ms: 42_000 } },
    ]);
    for (const m of [MINUTE, ALL_TIME]) {
      expect(value(rows, m, SERIES.calls, { team: "t1", upstream: "up", tool: "read", decision: "allow", mode: "enforce" })).toBe(2);
      expect(value(rows, m, SERIES.calls, { team: "t1", upstream: "up", tool: "write", decision: "hold", mode: "enforce" })).toBe(1);
      expect(value(rows, m, SERIES.blocked, { team: "t1", tool: "up__drop", check: "rule" })).toBe(1);
      expect(value(rows, m, SERIES.outcomes, { team: "t1", upstream: "up", tool: "read", status: "succeeded" })).toBe(1);
      expect(value(rows, m, SERIES.outcomes, { team: "t1", upstream: "up", tool: "read", status: "failed" })).toBe(1);
      expect(value(rows, m, `${SERIES.upstreamMs}_bucket`, { team: "t1", upstream: "up", le: "10" })).toBe(1);
      expect(value(rows, m, `${SERIES.upstreamMs}_bucket`, { team: "t1", upstream: "up", le: "250" })).toBe(1);
      expect(value(rows, m, `${SERIES.upstreamMs}_sum`, { team: "t1", upstream: "up" })).toBe(127);
      expect(value(rows, m, `${SERIES.gatewayMs}_sum`, { team: "t1" })).toBe(5);
      expect(value(rows, m, SERIES.holds, { team: "t1", event: "created" })).toBe(1);
      expect(value(rows, m, SERIES.holds, { team: "t1", event: "approved" })).toBe(1);
      expect(value(rows, m, `${SERIES.holdWaitMs}_bucket`, { team: "t1", event: "approved", le: "60000" })).toBe(1);
      expect(value(rows, m, SERIES.entries, { chain: "t1" })).toBe(8);
    }
  });

  it("the exposition: one family each with HELP and TYPE, cumulative buckets ending in +Inf, _sum and _count, escaped label values", () => {
    const rows = sumRows(
      rollupOf("t1", [
        decision("d1", 'we"ird\\name'),
        outcome("d1", "read", "succeeded", 7, 2),
        outcome("d1", "read", "succeeded", 700, 2),
        outcome("d1", "read", "succeeded", 99_999, 2),
      ]),
    ).filter((r) => r.minute === ALL_TIME);
    const text = prometheusText(rows, [{ name: "portcullis_ledger_head_seq", help: "head", values: [{ labels: { chain: "t1" }, value: 9 }] }]);
    for (const name of Object.values(SERIES)) {
      expect(text.split("\n").filter((l) => l === `# TYPE ${name} ${name.endsWith("_total") ? "counter" : "histogram"}`)).toHaveLength(1);
      expect(text).toContain(`# HELP ${name} `);
    }
    expect(text).toContain('portcullis_calls_total{team="t1",upstream="up",tool="we\\"ird\\\\name",decision="allow",mode="enforce"} 1');
    const bucket = (le: string) =>
      Number(new RegExp(`portcullis_upstream_duration_ms_bucket\\{team="t1",upstream="up",le="${le.replace("+", "\\+")}"\\} (\\d+)`).exec(text)?.[1]);
    expect([bucket("5"), bucket("10"), bucket("500"), bucket("1000"), bucket("60000"), bucket("+Inf")]).toEqual([0, 1, 1, 2, 2, 3]);
    expect(text).toContain('portcullis_upstream_duration_ms_sum{team="t1",upstream="up"} 100706');
    expect(text).toContain('portcullis_upstream_duration_ms_count{team="t1",upstream="up"} 3');
    expect(text).toContain('# TYPE portcullis_ledger_head_seq gauge\nportcullis_ledger_head_seq{chain="t1"} 9');
    expect(text.endsWith("\n")).toBe(true);
  });

  it("the tool label is bounded: the top N per upstream keep it, the rest sum under _other, totals unchanged", () => {
    const drafts = Array.from({ length: 500 }, (_, i) => decision(`d${i}`, `tool_${i}`));
    // tool_0 called 5 more times, tool_1 3 more.
    drafts.push(...Array.from({ length: 5 }, (_, i) => decision(`x${i}`, "tool_0")), ...Array.from({ length: 3 }, (_, i) => decision(`y${i}`, "tool_1")));
    const totals = rollupOf("t1", drafts).filter((r) => r.minute === ALL_TIME);
    const bounded = boundTools(totals, 2);
    const calls = bounded.filter((r) => r.name === SERIES.calls);
    expect(calls.map((r) => [r.labels.tool, r.value]).sort()).toEqual([
      ["_other", 498],
      ["tool_0", 6],
      ["tool_1", 4],
    ]);
    expect(bounded.filter((r) => r.name === SERIES.entries)[0]!.value).toBe(508);
    const text = prometheusText(boundTools(totals, 20), []);
    expect(text.split("\n").filter((l) => l.startsWith("portcullis_calls_total{"))).toHaveLength(21);
  });
});

describe("the Grafana dashboard (docs/dashboards/grafana-portcullis.json)", () => {
  it("queries only series the gateway exports, every panel has a query, and the team selector reads a real label", () => {
    const exported = new Set<string>();
    for (const name of Object.values(SERIES)) {
      exported.add(name);
      for (const part of ["_bucket", "_sum", "_count"]) exported.add(`${name}${part}`);
    }
    // The scrape-time gauges, by the names /metrics writes (src/routes/metrics-api.ts).
    for (const g of [
      "portcullis_killswitch_halts",
      "portcullis_ledger_head_seq",
      "portcullis_ledger_checkpoint_lag_entries",
      "portcullis_ledger_flush_lag_entries",
    ])
      exported.add(g);
    const panels = (dashboard as { panels: { title: string; targets: { expr: string }[] }[] }).panels;
    expect(panels.length).toBeGreaterThanOrEqual(8);
    const used = new Set<string>();
    for (const p of panels) {
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets) for (const m of t.expr.matchAll(/portcullis_[a-z_]+/g)) used.add(m[0]);
    }
    expect([...used].filter((n) => !exported.has(n))).toEqual([]);
    for (const must of [SERIES.calls, SERIES.blocked, `${SERIES.gatewayMs}_bucket`, `${SERIES.holdWaitMs}_bucket`, "portcullis_killswitch_halts"])
      expect(used.has(must), must).toBe(true);
    expect(JSON.stringify(dashboard)).toContain("label_values(portcullis_calls_total, team)");
  });
});

const SIGNING: LedgerSigning = { secret: "PORTCULLIS_SIGNING_KEY", gateway: "https://gw.example.com" };

describe("a LedgerDO keeps its chain's rollups beside its entries", () => {
  it("appends through the group commit leave per-minute rows and totals equal to the entries; the facts never reach the chain; prune keeps totals", async () => {
    const name = `metrics-${Date.now().toString(36)}`;
    const raw = env.LEDGER.get(env.LEDGER.idFromName(`chain:${name}`)) as DurableObjectStub<LedgerDO>;
    const api = raw as unknown as LedgerApi;
    const now = new Date().toISOString();
    const minute = Math.floor(Date.parse(now) / 60_000);
    const appended = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        api.append(
          [
            {
              ...decision(`d${i}`, i % 3 === 0 ? "write" : "read", "allow", now),
              body: { ...decision(`d${i}`, "x").body, team: name, tool: i % 3 === 0 ? "write" : "read" },
            },
            { ...outcome(`d${i}`, i % 3 === 0 ? "write" : "read", i % 5 === 0 ? "failed" : "succeeded", 10 + i, 1, now) },
          ] as never,
          SIGNING,
        ),
      ),
    );
    const entries = appended.flat();
    expect(entries).toHaveLength(60);
    expect(entries.every((e) => !("metrics" in e))).toBe(true);
    expect(JSON.stringify(await api.read(0, 100))).not.toContain("gateway_ms");
    const totals = await api.metrics(0, 0);
    const perMinute = await api.metrics(minute - 1, minute + 1);
    for (const rows of [totals, perMinute]) {
      const at = rows[0]!.minute;
      expect(value(rows, at, SERIES.entries, { chain: name })).toBe(60);
      expect(value(rows, at, SERIES.calls, { team: name, upstream: "up", tool: "write", decision: "allow", mode: "enforce" })).toBe(10);
      expect(value(rows, at, SERIES.calls, { team: name, upstream: "up", tool: "read", decision: "allow", mode: "enforce" })).toBe(20);
      expect(rows.filter((r) => r.name === SERIES.outcomes && r.labels.status === "failed").reduce((a, r) => a + r.value, 0)).toBe(6);
      expect(value(rows, at, `${SERIES.upstreamMs}_sum`, { team: name, upstream: "up" })).toBe(
        Array.from({ length: 30 }, (_, i) => 10 + i).reduce((a, b) => a + b),
      );
    }
    await runInDurableObject(raw, async (_o, state) => {
      expect(pruneRollup(state.storage.sql, minute + 10)).toBeGreaterThan(0);
      expect(readRollup(state.storage.sql, minute - 1, minute + 1)).toEqual([]);
      expect(readRollup(state.storage.sql, 0, 0).length).toBe(totals.length);
    });
  });
});
