/**
 * The official conformance suites (0.1.16 --suite all; 0.2.0-alpha.12 --requirements 2025-11-25
 * and 2026-07-28), first directly against the conformance upstream, then through Portcullis in
 * transparent mode, then through `/mcp/conf` of a gateway that fronts two upstreams (the
 * conformance upstream and server-everything, namespaced on /mcp): the per-upstream route must be
 * exactly as transparent as a single-upstream gateway. Each run must exit 0 with its baseline,
 * every scenario that passes directly must pass through the gateway, and the gateway must run as
 * many checks to SUCCESS as the upstream does (in total and per scenario), with no more failures
 * or warnings: a scenario that "passes" by running fewer checks (JSON where the upstream streams,
 * say) is a transparency loss; 0.1.16 server-sse-polling runs its 3 checks both ways. A fourth
 * target: the 2026-07-28 requirements through a gateway in front of the fixture in legacy-only
 * mode, where every input-required-result-* scenario must pass (the gateway turns the upstream's
 * server→client requests into input rounds) and only what its baseline names may fail. The
 * targets run at once (each its suites in order). Owns the gateways and fixture it starts.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";

type Counts = Record<"SUCCESS" | "FAILURE" | "WARNING" | "SKIPPED" | "INFO" | "OTHER", number>;
type Report = Record<string, { exit: number; scenarios: number; clean: string[]; failing: string[]; counts: Counts; perScenario: Record<string, Counts> }>;
const dir = mkdtempSync(join(tmpdir(), "portcullis-conformance-e2e-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** dns-rebinding-protection wants a localhost URL. */
const localhost = (u: string) => u.replace("127.0.0.1", "localhost");

function runSuites(name: string, url: string, baselines: string, only: string[] = []): Promise<{ code: number; report: Report; output: string }> {
  const json = join(dir, `${name}.json`);
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      [
        join(root, "scripts/conformance.mjs"),
        "--url",
        localhost(url),
        "--out",
        join(dir, name),
        "--baselines",
        baselines,
        "--json",
        json,
        "--timeout",
        "400",
        ...only.flatMap((o) => ["--only", o]),
      ],
      { cwd: root },
    );
    let output = "";
    child.stdout.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      output += d.toString();
    });
    child.on("exit", (code) => {
      let report: Report = {};
      try {
        report = JSON.parse(readFileSync(json, "utf8")) as Report;
      } catch {
        /* reported below */
      }
      resolve({ code: code ?? 1, report, output });
    });
  });
}

/** The scenarios whose SUCCESS/FAILURE/WARNING counts differ, as "name S/F/W → S/F/W". */
function checkDiff(d: Report[string], t: Report[string]): string {
  const sfw = (c: Counts | undefined) => (c ? `${c.SUCCESS}/${c.FAILURE}/${c.WARNING}` : "absent");
  const names = [...new Set([...Object.keys(d.perScenario), ...Object.keys(t.perScenario)])].sort();
  const rows = names.filter((s) => sfw(d.perScenario[s]) !== sfw(t.perScenario[s])).map((s) => `${s} ${sfw(d.perScenario[s])} → ${sfw(t.perScenario[s])}`);
  return rows.length ? rows.join("; ") : "none differ";
}

/** A run through the gateway matches the direct run: exit 0, no scenario lost, the same passing checks (in total and per scenario), no more failures or warnings. */
function expectAsDirect(direct: Awaited<ReturnType<typeof runSuites>>, through: Awaited<ReturnType<typeof runSuites>>, via: string): void {
  for (const [run, d] of Object.entries(direct.report)) {
    const t = through.report[run]!;
    expect(t, `${via} ${run}`).toBeDefined();
    expect(t.exit, `${via} ${run}`).toBe(0);
    const lost = d.clean.filter((s) => !t.clean.includes(s));
    expect(lost, `${via} ${run}: scenarios passing directly but not through the gateway`).toEqual([]);
    expect(t.clean.length, `${via} ${run}`).toBeGreaterThan(25);
    // Check counts: every directly passing check passes through the gateway too, nothing more fails.
    expect(t.scenarios, `${via} ${run}: scenario results`).toBe(d.scenarios);
    const differ = checkDiff(d, t);
    console.log(`${via} ${run}: direct ${JSON.stringify(d.counts)}; through ${JSON.stringify(t.counts)}`);
    expect(t.counts.SUCCESS, `${via} ${run}: passing checks through the gateway vs directly; per scenario (direct → through): ${differ}`).toBe(
      d.counts.SUCCESS,
    );
    expect(t.counts.FAILURE, `${via} ${run}: failing checks; ${differ}`).toBeLessThanOrEqual(d.counts.FAILURE);
    expect(t.counts.WARNING, `${via} ${run}: warnings; ${differ}`).toBeLessThanOrEqual(d.counts.WARNING);
    expect(t.counts.OTHER, `${via} ${run}: checks with an unknown status`).toBe(0);
    expect(d.counts.SUCCESS, `${run}: the direct run passes checks at all`).toBeGreaterThan(40);
    const perScenario = Object.keys(d.perScenario).filter((s) => t.perScenario[s]?.SUCCESS !== d.perScenario[s]!.SUCCESS);
    expect(perScenario, `${via} ${run}: scenarios with fewer or more passing checks through the gateway: ${differ}`).toEqual([]);
  }
}

describe("official conformance suites", () => {
  // The three targets' runs go at once (each runs its three suites in order): the suites mostly wait
  // on the network, and the comparisons below only need every run finished.
  type Run = Awaited<ReturnType<typeof runSuites>>;
  let twoUpstreams: (Proc & { url: string }) | undefined;
  let legacyOnly: { up: ConformanceUpstream; gw: Proc & { url: string } } | undefined;
  let runs: { direct: Promise<Run>; through: Promise<Run>; routed: Promise<Run>; legacyOnly: Promise<Run> };
  beforeAll(async () => {
    const port = await freePort();
    const direct = runSuites("direct", inject("conformanceUrl"), join(root, "conformance"));
    const through = runSuites("through", inject("transparentUrl"), join(root, "conformance/gateway"));
    const routed = startPortcullis(
      `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${inject("conformanceUrl")}
    timeout: 30s
  - name: everything
    url: ${inject("everythingUrl")}
    timeout: 30s
`,
      port,
    ).then((gw) => {
      twoUpstreams = gw;
      return runSuites("route", `http://127.0.0.1:${port}/mcp/conf`, join(root, "conformance/gateway"));
    });
    // A 2025-11-25-only upstream (the fixture without its modern leg) behind a transparent gateway:
    // 2026-07-28 clients get its server→client requests as input rounds.
    const loPort = await freePort();
    const bridged = startConformanceUpstream({ legacyOnly: true }).then(async (up) => {
      const gw = await startPortcullis(
        `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: legacy
    url: ${up.url}
    timeout: 30s
`,
        loPort,
      );
      legacyOnly = { up, gw };
      return runSuites("legacy-only", gw.url, join(root, "conformance/gateway-legacy-only"), ["alpha-2026"]);
    });
    runs = { direct, through, routed, legacyOnly: bridged };
    // Each test awaits its own run; a failed start is reported by the test that needs it.
    for (const r of Object.values(runs)) r.catch(() => undefined);
  }, 180_000);
  afterAll(async () => {
    await Promise.allSettled(Object.values(runs ?? {}));
    await twoUpstreams?.stop();
    await legacyOnly?.gw.stop();
    await legacyOnly?.up.close();
  });

  it("pass directly against the conformance upstream", async () => {
    const direct = await runs.direct;
    console.log(direct.output.slice(direct.output.lastIndexOf("== summary")));
    expect(direct.code, direct.output.slice(-3000)).toBe(0);
    expect(Object.keys(direct.report).sort()).toEqual(["alpha-2025", "alpha-2026", "stable"]);
  }, 900_000);

  it("pass through Portcullis in transparent mode, every directly passing scenario and check included", async () => {
    const [direct, through] = await Promise.all([runs.direct, runs.through]);
    console.log(through.output.slice(through.output.lastIndexOf("== summary")));
    expect(through.code, through.output.slice(-3000)).toBe(0);
    expectAsDirect(direct, through, "transparent");
    // SSE polling as the upstream does it: the priming event, `retry`, and the result after GET + Last-Event-ID.
    for (const r of [direct, through]) expect(r.report.stable!.perScenario["server-sse-polling"]).toMatchObject({ SUCCESS: 3, FAILURE: 0, WARNING: 0 });
  }, 900_000);

  it("pass every input-required-result scenario for 2026-07-28 clients of a 2025-11-25-only upstream, and lose nothing else", async () => {
    const run = await runs.legacyOnly;
    console.log(run.output.slice(run.output.lastIndexOf("== summary")));
    // Exit 0: the failing scenarios are exactly the baseline's (what a legacy-only upstream cannot serve), nothing else.
    expect(run.code, run.output.slice(-3000)).toBe(0);
    const r = run.report["alpha-2026"]!;
    const irr = Object.entries(r.perScenario).filter(([s]) => s.startsWith("input-required-result-"));
    expect(irr.length).toBeGreaterThanOrEqual(14);
    for (const [s, c] of irr) expect(c, s).toMatchObject({ FAILURE: 0, WARNING: 0 });
    for (const [s, c] of irr) expect(c.SUCCESS, s).toBeGreaterThan(0);
    console.log(
      `legacy-only upstream, 2026-07-28 client: ${JSON.stringify(r.counts)}; ${irr.map(([s, c]) => `${s} ${c.SUCCESS}/${c.FAILURE}/${c.WARNING}`).join("; ")}`,
    );
  }, 900_000);

  it("pass through /mcp/conf of a gateway fronting two upstreams exactly as through the transparent gateway", async () => {
    const [direct, routed] = await Promise.all([runs.direct, runs.routed]);
    console.log(routed.output.slice(routed.output.lastIndexOf("== summary")));
    expect(routed.code, routed.output.slice(-3000)).toBe(0);
    expect(Object.keys(routed.report).sort()).toEqual(["alpha-2025", "alpha-2026", "stable"]);
    expectAsDirect(direct, routed, "/mcp/conf");
  }, 900_000);
});
