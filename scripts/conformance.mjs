#!/usr/bin/env node
/**
 * Runs the official MCP conformance suites against one server URL, each with its
 * expected-failure baseline, and summarises the checks.
 *
 *   node scripts/conformance.mjs --url http://localhost:8787/mcp [--out DIR] [--only stable|alpha-2025|alpha-2026]
 *   node scripts/conformance.mjs --fixture [...]   # start test/fixtures/conformance-upstream and test it directly
 *
 * Runs (in order; --only may be repeated or comma-separated):
 *   stable      conformance 0.1.16          server --suite all               conformance/baseline-0.1.16.yml
 *   alpha-2025  conformance 0.2.0-alpha.12  server --requirements 2025-11-25 conformance/baseline-0.2.0-alpha.12-2025-11-25.yml
 *   alpha-2026  conformance 0.2.0-alpha.12  server --requirements 2026-07-28 conformance/baseline-0.2.0-alpha.12-2026-07-28.yml
 *
 * --baselines DIR takes the same baseline file names from DIR (conformance/gateway/ holds the baselines for
 * runs through Portcullis); --json FILE writes {run: {exit, counts, scenarios, clean[], failing[], perScenario}}
 * for tests to compare: `counts` is the number of checks per status (SUCCESS, FAILURE, WARNING, SKIPPED, INFO,
 * OTHER for any other status) over every checks.json of the run, `scenarios` the number of scenario results,
 * `perScenario` the same counts per scenario name.
 * Each run writes its checks.json files under DIR/<run>/ (DIR defaults to a fresh temp directory), is killed
 * after --timeout seconds (default 600), and the script exits non-zero if any run exits non-zero or times out.
 * The suites need Node >= 22.18; under an older Node the script re-runs itself with node_modules/node.
 * Traffic is restricted to loopback URLs unless --allow-remote is given (dns-rebinding-protection needs a
 * localhost URL anyway).
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");

const RUNS = [
  {
    name: "stable",
    label: "conformance 0.1.16 --suite all",
    cli: "node_modules/conformance-stable/dist/index.js",
    args: ["--suite", "all"],
    baseline: "conformance/baseline-0.1.16.yml",
  },
  {
    name: "alpha-2025",
    label: "conformance 0.2.0-alpha.12 --requirements 2025-11-25",
    cli: "node_modules/conformance-alpha/dist/index.js",
    args: ["--requirements", "2025-11-25"],
    baseline: "conformance/baseline-0.2.0-alpha.12-2025-11-25.yml",
  },
  {
    name: "alpha-2026",
    label: "conformance 0.2.0-alpha.12 --requirements 2026-07-28",
    cli: "node_modules/conformance-alpha/dist/index.js",
    args: ["--requirements", "2026-07-28"],
    baseline: "conformance/baseline-0.2.0-alpha.12-2026-07-28.yml",
  },
];

const USAGE = `usage: node scripts/conformance.mjs (--url URL | --fixture) [--out DIR] [--only stable|alpha-2025|alpha-2026]
                                   [--baselines DIR] [--json FILE]
                                   [--timeout SECONDS] [--verbose] [--allow-remote]`;

function fail(message) {
  process.stderr.write(`${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { only: [], timeout: 600, verbose: false, allowRemote: false, fixture: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const next = argv[++i];
      if (next === undefined) fail(`${arg} needs a value`);
      return next;
    };
    if (arg === "--url") opts.url = value();
    else if (arg === "--out") opts.out = value();
    else if (arg === "--only")
      opts.only.push(
        ...value()
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean),
      );
    else if (arg === "--timeout") opts.timeout = Number(value());
    else if (arg === "--verbose") opts.verbose = true;
    else if (arg === "--allow-remote") opts.allowRemote = true;
    else if (arg === "--fixture") opts.fixture = true;
    else if (arg === "--baselines") opts.baselines = value();
    else if (arg === "--json") opts.json = value();
    else if (arg === "--help" || arg === "-h") {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else fail(`unknown argument: ${arg}`);
  }
  if (!opts.url && !opts.fixture) fail("--url or --fixture is required");
  if (opts.url && opts.fixture) fail("--url and --fixture are exclusive");
  if (!Number.isFinite(opts.timeout) || opts.timeout <= 0) fail("--timeout must be a positive number of seconds");
  for (const name of opts.only) {
    if (!RUNS.some((run) => run.name === name)) fail(`--only: unknown run '${name}'`);
  }
  return opts;
}

/** Node >= 22.18 runs the suites (fs.globSync) and imports the TypeScript fixture (type stripping). */
function nodeIsRecentEnough() {
  const [major, minor] = process.versions.node.split(".").map(Number);
  return major > 22 || (major === 22 && minor >= 18);
}

/** Re-run this script under node_modules/node when the current Node is too old; returns true if it did. */
async function reexecIfNeeded() {
  if (nodeIsRecentEnough()) return false;
  const local = join(ROOT, "node_modules", "node", "bin", "node");
  if (!existsSync(local)) {
    fail(`the conformance suites need Node >= 22.18 (this is ${process.version}) and node_modules/node is missing`);
  }
  const child = spawn(local, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: "inherit" });
  for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal));
  const code = await new Promise((resolveCode) => child.on("close", (c) => resolveCode(c ?? 1)));
  process.exit(code);
}

function checkUrl(url, allowRemote) {
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    fail(`--url: not a URL: ${url}`);
  }
  const host = parsed.hostname.toLowerCase();
  const loopback = host === "localhost" || host === "[::1]" || host === "::1" || /^127\./.test(host);
  if (!loopback && !allowRemote) fail(`--url ${url} is not a loopback URL (pass --allow-remote to test it anyway)`);
}

/** Run one suite; resolves with its exit code (124 on timeout). */
function runSuite(node, run, url, outDir, timeoutSec, verbose) {
  return new Promise((resolveRun) => {
    const args = [join(ROOT, run.cli), "server", "--url", url, ...run.args, "--expected-failures", run.baselinePath, "-o", outDir];
    const child = spawn(node, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let output = "";
    const collect = (chunk) => {
      output += chunk;
      if (verbose) process.stdout.write(chunk);
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    }, timeoutSec * 1000);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolveRun({ code: timedOut ? 124 : (code ?? (signal ? 1 : 0)), timedOut, output });
    });
  });
}

function findChecks(dir) {
  const out = [];
  if (!existsSync(dir)) return out;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...findChecks(path));
    else if (entry.name === "checks.json") out.push(path);
  }
  return out;
}

/**
 * Counts every check of every scenario by status, in total and per scenario (a scenario run twice
 * adds up). A status outside the five known ones is counted as OTHER, so no check goes uncounted.
 */
function summarise(outDir) {
  const blank = () => ({ SUCCESS: 0, FAILURE: 0, WARNING: 0, SKIPPED: 0, INFO: 0, OTHER: 0 });
  const counts = blank();
  const perScenario = {};
  const scenarios = { total: 0, clean: 0, failing: [], cleanNames: [], perScenario };
  for (const file of findChecks(outDir)) {
    let checks;
    try {
      checks = JSON.parse(readFileSync(file, "utf8"));
    } catch {
      continue;
    }
    if (!Array.isArray(checks)) continue;
    const scenario = file
      .split(/[\\/]/)
      .at(-2)
      .replace(/^server-/, "")
      .replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, "");
    scenarios.total++;
    perScenario[scenario] ??= blank();
    const mine = perScenario[scenario];
    let bad = false;
    for (const check of checks) {
      const status = check && Object.hasOwn(counts, check.status) && check.status !== "OTHER" ? check.status : "OTHER";
      counts[status]++;
      mine[status]++;
      if (check?.status === "FAILURE" || check?.status === "WARNING") bad = true;
    }
    if (bad) scenarios.failing.push(scenario);
    else {
      scenarios.clean++;
      scenarios.cleanNames.push(scenario);
    }
  }
  return { counts, scenarios };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (await reexecIfNeeded()) return;
  const node = process.execPath;
  let fixture;
  let url = opts.url;
  if (opts.fixture) {
    const mod = await import(pathToFileURL(join(ROOT, "test/fixtures/conformance-upstream/server.ts")).href);
    fixture = await mod.startConformanceUpstream({ port: 0, host: "127.0.0.1" });
    url = fixture.url.replace("127.0.0.1", "localhost");
    process.stdout.write(`started conformance upstream fixture at ${url}\n`);
  }
  checkUrl(url, opts.allowRemote);
  const out = resolve(opts.out ?? mkdtempSync(join(tmpdir(), "portcullis-conformance-")));
  mkdirSync(out, { recursive: true });
  const selected = (opts.only.length > 0 ? RUNS.filter((run) => opts.only.includes(run.name)) : RUNS).map((run) => ({
    ...run,
    // --baselines DIR: the same file names from another directory (e.g. the gateway's own baselines).
    baselinePath: opts.baselines ? resolve(opts.baselines, basename(run.baseline)) : join(ROOT, run.baseline),
  }));

  const results = [];
  try {
    for (const run of selected) {
      const dir = join(out, run.name);
      rmSync(dir, { recursive: true, force: true });
      mkdirSync(dir, { recursive: true });
      process.stdout.write(`\n== ${run.name}: ${run.label} (baseline ${run.baselinePath})\n`);
      const started = Date.now();
      const { code, timedOut, output } = await runSuite(node, run, url, dir, opts.timeout, opts.verbose);
      const seconds = ((Date.now() - started) / 1000).toFixed(1);
      const summary = summarise(dir);
      results.push({ run, code, timedOut, seconds, summary });
      if (code !== 0 && !opts.verbose) {
        // Show the suite's own verdict (baseline diff, failing scenarios) when it failed.
        const tail = output.slice(output.lastIndexOf("=== SUMMARY ===")).trim();
        process.stdout.write(`${tail || output.slice(-4000)}\n`);
      }
      const { counts, scenarios } = summary;
      process.stdout.write(
        `${run.name}: exit ${code}${timedOut ? " (timed out)" : ""} in ${seconds}s — scenarios ${scenarios.total} ` +
          `(${scenarios.clean} clean, ${scenarios.failing.length} with failures/warnings` +
          `${scenarios.failing.length ? `: ${scenarios.failing.join(", ")}` : ""}); checks ${counts.SUCCESS} passed, ` +
          `${counts.FAILURE} failed, ${counts.WARNING} warnings, ${counts.SKIPPED} skipped, ${counts.INFO} info\n`,
      );
    }
  } finally {
    await fixture?.close();
  }

  process.stdout.write(`\n== summary (results in ${out})\n`);
  for (const { run, code, summary } of results) {
    const { counts, scenarios } = summary;
    process.stdout.write(
      `  ${code === 0 ? "PASS" : "FAIL"} ${run.name.padEnd(10)} exit ${code}  scenarios ${scenarios.total}  ` +
        `checks passed ${counts.SUCCESS} failed ${counts.FAILURE} warnings ${counts.WARNING} skipped ${counts.SKIPPED}\n`,
    );
  }
  if (opts.json) {
    const report = Object.fromEntries(
      results.map(({ run, code, summary }) => [
        run.name,
        {
          exit: code,
          counts: summary.counts,
          scenarios: summary.scenarios.total,
          clean: summary.scenarios.cleanNames.sort(),
          failing: summary.scenarios.failing.sort(),
          perScenario: summary.scenarios.perScenario,
        },
      ]),
    );
    writeFileSync(opts.json, JSON.stringify(report, null, 2));
  }
  process.exit(results.some((r) => r.code !== 0) ? 1 : 0);
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
