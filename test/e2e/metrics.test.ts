/**
 * Metrics from the ledger on the production build: after a mixed run — 500 calls to 500 distinct
 * allowed tools, a call outside a grant (blocked), a call held then approved and run once, and a
 * call to an upstream that went away (failed) — `GET /metrics` (Prometheus text) and
 * `GET /v1/metrics` (JSON steps) count exactly what the team's ledger export holds: decisions by
 * tool and decision, refusals by check, outcomes by status, hold events by kind, entries; the
 * scrape bounds the tool label (top 20 per upstream, the rest `_other`) and stays under 64 KiB
 * with 500 distinct tools; another team's auditor and an agent are refused. Owns its gateway and
 * three recording upstreams; everything on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { api, grantFor, modern, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON read loosely in tests
type Any = any;
type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;

const TEAM = "metrics";
const TOOLS = 500;
let rec: Upstream;
let many: Upstream;
let flaky: Upstream;
let gw: Proc & { url: string };
let origin: string;
let jwk: string;
const startedAt = Date.now();

const grant = async (sub: string, roles: Role[], tools: string[] = ["*"], team = TEAM) =>
  (await grantFor(jwk, origin, { sub, team, roles, tools, ttlSeconds: 900 })).token;
const call = (bearer: string, name: string) => modern(`${origin}/mcp`, bearer, "tools/call", { name, arguments: {} }, { timeoutMs: 60_000 });

/** `portcullis_<name>{…} value` lines of a scrape, parsed. */
function samples(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  const out: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split("\n")) {
    const m = /^([a-z_]+)(?:\{(.*)\})? (-?[0-9.e+]+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, "$1");
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}
const sum = (xs: { name: string; labels: Record<string, string>; value: number }[], name: string, where: Record<string, string> = {}) =>
  xs.filter((x) => x.name === name && Object.entries(where).every(([k, v]) => x.labels[k] === v)).reduce((a, x) => a + x.value, 0);

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("metrics-e2e")).privateJwk);
  [rec, many, flaky] = await Promise.all([startModernOnlyUpstream(), startModernOnlyUpstream({ manyTools: TOOLS }), startModernOnlyUpstream({ manyTools: 1 })]);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(
    `
actor: local:metrics
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
  wait: 0
upstreams:
  - name: rec
    url: ${rec.url}
    timeout: 10s
  - name: many
    url: ${many.url}
    timeout: 10s
  - name: flaky
    url: ${flaky.url}
    timeout: 5s
mappings:
  rec:
    tools:
      bump: { effect: idempotent }
policy:
  rules:
    - id: bumps-need-a-human
      match: { tool: rec__bump }
      decision: require_approval
      reason: bumps change shared state
    - id: bulk-is-fine
      match: { tool: "many__*" }
      decision: allow
      reason: bulk reads
    - id: flaky-is-fine
      match: { tool: "flaky__*" }
      decision: allow
      reason: it reads
`,
    port,
    { PORTCULLIS_SIGNING_KEY: jwk },
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), rec?.close(), many?.close(), flaky?.close().catch(() => undefined)]);
});

describe("metrics from the ledger", () => {
  it("after a mixed run, /metrics and /v1/metrics count what the ledger holds; the scrape is bounded with 500 distinct tools", async () => {
    const agent = await grant("agent:metrics", ["agent"]);
    const narrow = await grant("agent:narrow", ["agent"], ["many__*"]);
    const approver = await grant("human:approver", ["approver"]);
    const auditor = await grant("human:auditor", ["auditor"]);

    // 500 distinct allowed tools (8 at a time), many_0 five times more and many_1 three times more.
    const names = [...Array.from({ length: TOOLS }, (_, i) => `many__many_${i}`), ...Array(5).fill("many__many_0"), ...Array(3).fill("many__many_1")];
    let next = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < names.length) {
          const a = await call(agent, names[next++]!);
          expect(a.result !== undefined && a.result.isError !== true, JSON.stringify(a)).toBe(true);
        }
      }),
    );
    // Outside the grant: blocked.
    const refused = await call(narrow, "rec__bump");
    expect(refused.result?.isError ?? refused.error).toBeTruthy();
    // Held, approved, run once.
    const held = await call(agent, "rec__bump");
    const id = /held as (\S+~[0-9a-f]{24})/.exec(texts(held.result))?.[1];
    expect(id, JSON.stringify(held)).toBeTruthy();
    expect(
      (await api(origin, approver, `/v1/holds/${encodeURIComponent(id!)}/resolve`, { method: "POST", body: { decision: "approve", reason: "fine" } })).status,
    ).toBe(200);
    const ran = await call(agent, "rec__bump");
    expect(texts(ran.result)).toContain("bumped");
    // An upstream that answered once, then went away: its second call fails.
    const once = await call(agent, "flaky__many_0");
    expect(once.result !== undefined && once.result.isError !== true, JSON.stringify(once)).toBe(true);
    await flaky.close();
    const failed = await call(agent, "flaky__many_0");
    // The leg failed: a JSON-RPC error naming the upstream (nothing answered).
    expect(failed.error?.message ?? "", JSON.stringify(failed)).toContain("upstream flaky");

    // The team's ledger, as exported, once it stops growing.
    let entries: Any[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await fetch(`${origin}/v1/ledger/export?team=${TEAM}`, { headers: { authorization: `Bearer ${auditor}` } });
      const got = (await r.text())
        .split("\n")
        .filter((l) => l)
        .map((l) => JSON.parse(l))
        .filter((o) => o.entry?.chain === TEAM)
        .map((o) => o.entry);
      if (got.length === entries.length && got.length > 0) break;
      entries = got;
      await new Promise((res) => setTimeout(res, 300));
    }
    const of = (kind: string) => entries.filter((e) => e.kind === kind);
    expect(of("outcome").filter((e) => e.body.status === "failed").length).toBeGreaterThanOrEqual(1);
    expect(of("blocked").length).toBeGreaterThanOrEqual(1);
    expect(of("hold.approved")).toHaveLength(1);

    const scrape = await fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${auditor}` } });
    expect(scrape.status).toBe(200);
    expect(scrape.headers.get("content-type")).toContain("text/plain; version=0.0.4");
    const text = await scrape.text();
    const xs = samples(text);
    // Decisions by decision, refusals by check, outcomes by status, holds by event, entries.
    for (const d of new Set(of("decision").map((e) => e.body.decision)))
      expect(sum(xs, "portcullis_calls_total", { team: TEAM, decision: d }), d).toBe(of("decision").filter((e) => e.body.decision === d).length);
    expect(sum(xs, "portcullis_calls_total")).toBe(of("decision").length);
    for (const c of new Set(of("blocked").map((e) => e.body.check)))
      expect(sum(xs, "portcullis_calls_blocked_total", { check: c }), c).toBe(of("blocked").filter((e) => e.body.check === c).length);
    for (const s of ["succeeded", "failed", "uncertain"])
      expect(sum(xs, "portcullis_call_outcomes_total", { status: s }), s).toBe(of("outcome").filter((e) => e.body.status === s).length);
    for (const ev of ["created", "approved", "rejected", "expired", "consumed"])
      expect(sum(xs, "portcullis_hold_events_total", { event: ev }), ev).toBe(of(`hold.${ev}`).length);
    expect(sum(xs, "portcullis_ledger_entries_total", { chain: TEAM })).toBe(entries.length);
    // Latency histograms: one observation per outcome, upstream time and gateway overhead apart.
    expect(sum(xs, "portcullis_upstream_duration_ms_count")).toBe(of("outcome").length);
    expect(sum(xs, "portcullis_gateway_overhead_ms_count")).toBe(of("outcome").length);
    expect(sum(xs, "portcullis_upstream_duration_ms_bucket", { le: "+Inf" })).toBe(of("outcome").length);
    // The tool label is bounded: 20 tools of `many` by name, the rest as _other; the counts are the same.
    const manyTools = new Set(xs.filter((x) => x.name === "portcullis_calls_total" && x.labels.upstream === "many").map((x) => x.labels.tool));
    expect(manyTools.size).toBe(21);
    expect(manyTools.has("_other")).toBe(true);
    expect(sum(xs, "portcullis_calls_total", { upstream: "many", tool: "many_0" })).toBe(6);
    expect(sum(xs, "portcullis_calls_total", { upstream: "many" })).toBe(names.length);
    expect(text.length).toBeLessThan(64 * 1024);
    // Gauges: nothing halted, the chain's head is the export's last entry.
    expect(sum(xs, "portcullis_killswitch_halts", { scope: "global" })).toBe(0);
    expect(sum(xs, "portcullis_ledger_head_seq", { chain: TEAM })).toBe(entries.at(-1).seq);
    console.log(`metrics e2e: ${entries.length} entries, scrape ${text.length} bytes, ${text.split("\n").length} lines`);

    // The same counts as JSON steps over the run's window.
    const j = await api(origin, auditor, `/v1/metrics?from=${startedAt - 120_000}&to=${Date.now() + 60_000}&step=1`);
    expect(j.status).toBe(200);
    const total = (name: string, where: Record<string, string> = {}) =>
      (j.json.series as Any[])
        .filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v))
        .reduce((a, s) => a + s.points.reduce((b: number, p: [string, number]) => b + p[1], 0), 0);
    expect(total("portcullis_calls_total")).toBe(of("decision").length);
    expect(total("portcullis_call_outcomes_total", { status: "failed" })).toBe(of("outcome").filter((e) => e.body.status === "failed").length);
    expect(total("portcullis_ledger_entries_total")).toBe(entries.length);
    expect(j.json.chains).toEqual([TEAM]);
    expect((await api(origin, auditor, "/v1/metrics?step=0")).status).toBe(400);
    expect((await api(origin, auditor, "/v1/metrics?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")).status).toBe(400);

    // Another team's auditor cannot read this team's; an agent cannot scrape at all.
    const stranger = await grant("human:stranger", ["auditor"], [], "elsewhere");
    expect((await fetch(`${origin}/metrics?team=${TEAM}`, { headers: { authorization: `Bearer ${stranger}` } })).status).toBe(403);
    const theirs = samples(await (await fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${stranger}` } })).text());
    expect(sum(theirs, "portcullis_calls_total")).toBe(0);
    expect((await fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${agent}` } })).status).toBe(403);
    expect((await fetch(`${origin}/metrics`)).status).toBe(401);
  }, 240_000);
});
