#!/usr/bin/env node
/**
 * `npm test`: format and lint check (Biome), typecheck, the deploy bundle (`wrangler deploy --dry-run`, offline, its size
 * against the budget), unit tests in workerd, then the end-to-end suite on the production build. Prints one closing line "N passed, M failed" summing every suite, and exits non-zero
 * if anything failed. Runs on the project's Node 22 (npm scripts put it first on PATH).
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const bin = (n) => join(root, "node_modules/.bin", n);
const out = mkdtempSync(join(tmpdir(), "portcullis-test-"));
let passed = 0;
let failed = 0;
let ok = true;

const started = Date.now();
const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

function step(name, cmd, args, env = {}) {
  console.log(`\n=== ${name} ===`);
  const t0 = Date.now();
  const r = spawnSync(cmd, args, {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false", ...env },
  });
  console.log(`=== ${name}: ${r.status === 0 ? "ok" : `exit ${r.status}`} in ${seconds(t0)} ===`);
  if (r.status !== 0) ok = false;
  return r.status === 0;
}

/**
 * Runs the commands at once (each `[name, cmd, args]`), each one's output kept and printed whole
 * when it ends, in the order given; true when every one exited 0. Each failure counts once.
 */
async function together(commands) {
  const t0 = Date.now();
  const runs = commands.map(
    ([name, cmd, args]) =>
      new Promise((res) => {
        const child = spawn(cmd, args, { cwd: root, env: { ...process.env, FORCE_COLOR: process.env.FORCE_COLOR ?? "1" } });
        let out = "";
        child.stdout.on("data", (d) => {
          out += d;
        });
        child.stderr.on("data", (d) => {
          out += d;
        });
        child.on("error", (e) => res({ name, code: 1, out: `${out}${e.message}\n` }));
        child.on("exit", (code) => res({ name, code: code ?? 1, out }));
      }),
  );
  let all = true;
  for (const r of await Promise.all(runs)) {
    console.log(`\n=== ${r.name} ===`);
    process.stdout.write(r.out);
    if (r.code !== 0) {
      all = false;
      ok = false;
      failed += 1;
    }
  }
  console.log(`=== ${commands.map(([n]) => n).join(" + ")}: in ${seconds(t0)} ===`);
  return all;
}

function vitest(name, config, env = {}) {
  const file = join(out, `${name}.json`);
  step(name, bin("vitest"), ["run", "--config", config, "--reporter=default", "--reporter=json", `--outputFile.json=${file}`], env);
  try {
    const j = JSON.parse(readFileSync(file, "utf8"));
    passed += j.numPassedTests;
    failed += j.numFailedTests;
    // A file that failed outside its tests (a hook, an import) fails no test: count each such file once.
    if (j.numFailedTests === 0) failed += j.numFailedTestSuites;
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

/** Gzipped size budget of the deployed Worker bundle (what `wrangler deploy` uploads). */
const BUNDLE_BUDGET_GZIP = 1024 * 1024;
const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;

/**
 * The deploy build, offline: `wrangler deploy --dry-run --outdir` bundles the Worker exactly as a
 * deploy would (no account, no upload; CLOUDFLARE_CF_FETCH_ENABLED=false keeps it off the network),
 * then the modules it wrote (source maps and wrangler's README aside) are measured raw and gzipped.
 * Fails when the dry run fails, writes no module, or the gzipped bundle is over budget.
 */
function bundle() {
  const dir = join(out, "bundle");
  // WRANGLER_LOG=warn: the binding table is noise here; errors and warnings still show.
  if (!step("bundle (wrangler deploy --dry-run)", bin("wrangler"), ["deploy", "--dry-run", "--outdir", dir], { WRANGLER_LOG: "warn" })) return false;
  let files = [];
  try {
    files = readdirSync(dir, { recursive: true })
      .map(String)
      .filter((f) => !f.endsWith(".map") && f !== "README.md" && statSync(join(dir, f)).isFile());
  } catch {
    /* no output directory: reported below */
  }
  if (!files.some((f) => /\.(m?js)$/.test(f))) {
    console.error(`bundle: wrangler wrote no worker module to ${dir}`);
    ok = false;
    return false;
  }
  let raw = 0;
  let gzip = 0;
  for (const f of files) {
    const bytes = readFileSync(join(dir, f));
    raw += bytes.length;
    gzip += gzipSync(bytes).length;
  }
  const over = gzip > BUNDLE_BUDGET_GZIP;
  console.log(`bundle: ${kib(raw)}, gzip ${kib(gzip)} (budget ${BUNDLE_BUDGET_GZIP / 1024} KiB gzip)${files.length > 1 ? ` — ${files.join(", ")}` : ""}`);
  if (over) {
    console.error(`bundle: ${kib(gzip - BUNDLE_BUDGET_GZIP)} gzip over budget`);
    ok = false;
  }
  return !over;
}

const only = process.argv[2];
// `quick` (npm run test:quick): the inner loop — lint, typecheck and the unit tests, no bundle, no e2e.
const quick = only === "quick";
if (!only || quick || only === "lint") {
  // Formatting and lint rules (biome.json); `npm run format` applies the fixes.
  if (!step("format and lint (Biome)", bin("biome"), ["ci", "--max-diagnostics=50", "."])) failed += 1;
}
if (!only || quick || only === "typecheck") {
  // The two projects are checked at once (tsc is single-threaded; the machine has two cores).
  await together([
    ["typecheck (Worker + unit tests)", bin("tsc"), ["--noEmit", "-p", "."]],
    ["typecheck (e2e + fixtures, Node)", bin("tsc"), ["--noEmit", "-p", "tsconfig.node.json"]],
  ]);
}
const bundled = (!only || only === "bundle") && bundle();
if ((!only || only === "bundle") && !bundled) failed += 1;
if (!only || quick || only === "unit") vitest("unit", "vitest.config.ts");
// The e2e gateways serve the bundle the bundle step just built (test/e2e/harness.ts buildGateway).
if (!only || only === "e2e") vitest("e2e", "vitest.e2e.config.ts", bundled ? { PORTCULLIS_E2E_BUNDLE: join(out, "bundle") } : {});
rmSync(out, { recursive: true, force: true });
console.log(`\n${passed} passed, ${failed} failed (${seconds(started)})`);
process.exit(ok && failed === 0 ? 0 : 1);
