/**
 * The official conformance suites (0.1.16 --suite all; 0.2.0-alpha.12 --requirements 2025-11-25
 * and 2026-07-28), first directly against the conformance upstream, then through Portcullis in
 * transparent mode. Each run must exit 0 with its baseline, and every scenario that passes
 * directly must pass through the gateway.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { root } from "./harness.ts";

type Report = Record<string, { exit: number; clean: string[]; failing: string[]; counts: Record<string, number> }>;
const dir = mkdtempSync(join(tmpdir(), "portcullis-conformance-e2e-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** dns-rebinding-protection wants a localhost URL. */
const localhost = (u: string) => u.replace("127.0.0.1", "localhost");

function runSuites(name: string, url: string, baselines: string): Promise<{ code: number; report: Report; output: string }> {
  const json = join(dir, `${name}.json`);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [join(root, "scripts/conformance.mjs"), "--url", localhost(url), "--out", join(dir, name), "--baselines", baselines, "--json", json, "--timeout", "400"], { cwd: root });
    let output = "";
    child.stdout.on("data", (d: Buffer) => { output += d.toString(); });
    child.stderr.on("data", (d: Buffer) => { output += d.toString(); });
    child.on("exit", (code) => {
      let report: Report = {};
      try { report = JSON.parse(readFileSync(json, "utf8")) as Report; } catch { /* reported below */ }
      resolve({ code: code ?? 1, report, output });
    });
  });
}

describe("official conformance suites", () => {
  let direct: Awaited<ReturnType<typeof runSuites>>;

  it("pass directly against the conformance upstream", async () => {
    direct = await runSuites("direct", inject("conformanceUrl"), join(root, "conformance"));
    console.log(direct.output.slice(direct.output.lastIndexOf("== summary")));
    expect(direct.code, direct.output.slice(-3000)).toBe(0);
    expect(Object.keys(direct.report).sort()).toEqual(["alpha-2025", "alpha-2026", "stable"]);
  }, 900_000);

  it("pass through Portcullis in transparent mode, every directly passing scenario included", async () => {
    expect(direct, "the direct run must come first").toBeDefined();
    const through = await runSuites("through", inject("transparentUrl"), join(root, "conformance/gateway"));
    console.log(through.output.slice(through.output.lastIndexOf("== summary")));
    expect(through.code, through.output.slice(-3000)).toBe(0);
    for (const [run, d] of Object.entries(direct.report)) {
      const t = through.report[run]!;
      expect(t, run).toBeDefined();
      expect(t.exit, run).toBe(0);
      const lost = d.clean.filter((s) => !t.clean.includes(s));
      expect(lost, `${run}: scenarios passing directly but not through the gateway`).toEqual([]);
      expect(t.clean.length, run).toBeGreaterThan(25);
    }
  }, 900_000);
});
