#!/usr/bin/env node
/**
 * `npm test`: format and lint check (Biome), typecheck, unit tests in workerd, then the end-to-end suite on the production
 * build. Prints one closing line "N passed, M failed" summing every suite, and exits non-zero
 * if anything failed. Runs on the project's Node 22 (npm scripts put it first on PATH).
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const bin = (n) => join(root, "node_modules/.bin", n);
const out = mkdtempSync(join(tmpdir(), "portcullis-test-"));
let passed = 0;
let failed = 0;
let ok = true;

function step(name, cmd, args) {
  console.log(`\n=== ${name} ===`);
  const r = spawnSync(cmd, args, {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" },
  });
  if (r.status !== 0) ok = false;
  return r.status === 0;
}

function vitest(name, config) {
  const file = join(out, `${name}.json`);
  step(name, bin("vitest"), ["run", "--config", config, "--reporter=default", "--reporter=json", `--outputFile.json=${file}`]);
  try {
    const j = JSON.parse(readFileSync(file, "utf8"));
    passed += j.numPassedTests;
    failed += j.numFailedTests;
    if (j.numTotalTests === 0) {
      console.error(`${name}: no tests ran`);
      ok = false;
    }
  } catch {
    console.error(`${name}: no report was written`);
    failed += 1;
    ok = false;
  }
}

const only = process.argv[2];
if (!only || only === "lint") {
  // Formatting and lint rules (biome.json); `npm run format` applies the fixes.
  if (!step("format and lint (Biome)", bin("biome"), ["ci", "--max-diagnostics=50", "."])) failed += 1;
}
if (!only || only === "typecheck") {
  if (!step("typecheck (Worker + unit tests)", bin("tsc"), ["--noEmit", "-p", "."])) failed += 1;
  if (!step("typecheck (e2e + fixtures, Node)", bin("tsc"), ["--noEmit", "-p", "tsconfig.node.json"])) failed += 1;
}
if (!only || only === "unit") vitest("unit", "vitest.config.ts");
if (!only || only === "e2e") vitest("e2e", "vitest.e2e.config.ts");
rmSync(out, { recursive: true, force: true });
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(ok && failed === 0 ? 0 : 1);
