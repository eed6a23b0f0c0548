#!/usr/bin/env node
/**
 * `npm exec -- node scripts/call-path.mjs [--json] [--functions]`: measures which source files (src/**,
 * durable-objects/**) one ordinary governed tools/call executes code in, and which Durable Object classes it
 * touches, from the HTTP request arriving at the Worker to the answer, once per MCP era (2026-07-28 stateless and
 * 2025-11-25 in a session). How: runs test/unit/call-path.measure.ts in workerd (vitest.call-path.config.ts: the
 * Cloudflare vitest plugin, istanbul instrumentation of src/** and durable-objects/**, one fake upstream served
 * in-process, a grant, an enforce policy allowing the call). Per era the test makes a warm-up call, waits until
 * nothing runs and the gateway's ≤ 1 s caches have expired, zeroes every counter, makes ONE call and reads the
 * counters at its answer. A file counts as visited when at least one of its FUNCTIONS ran (module loading does not
 * count); a Durable Object class counts when a function in its own class body ran (the classes are the ones the
 * Worker's main module exports). Also shown: work that ran after the answer (waitUntil), and a second call made
 * at once with the caches still fresh ("hot"). Independent of where files live under src/: the app is reached
 * through wrangler.toml's main only. Installs nothing permanently: when @vitest/coverage-istanbul is missing it runs
 * `npm install --no-save` of the version matching vitest (a later plain `npm install` removes it again); with
 * --no-install it only says so. Must never: edit the tree, or count a file whose code did not run in that call.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const args = new Set(process.argv.slice(2));
const asJson = args.has("--json");
const withFunctions = args.has("--functions");
const log = (...a) => (asJson ? console.error(...a) : console.log(...a));

// ---- the coverage provider ---------------------------------------------------------------------

const versionOf = (pkg) => {
  const file = join(root, "node_modules", pkg, "package.json");
  return existsSync(file) ? JSON.parse(readFileSync(file, "utf8")).version : null;
};
const vitestVersion = versionOf("vitest");
if (!vitestVersion) {
  console.error("call-path: vitest is not installed; run `npm install` first");
  process.exit(2);
}
if (versionOf("@vitest/coverage-istanbul") !== vitestVersion) {
  const spec = `@vitest/coverage-istanbul@${vitestVersion}`;
  if (args.has("--no-install")) {
    console.error(`call-path: ${spec} is missing; install it with \`npm install --no-save ${spec}\``);
    process.exit(2);
  }
  log(`call-path: installing ${spec} (npm install --no-save: package.json and the lock file stay as they are)`);
  const npm = process.env.npm_execpath ? [process.execPath, [process.env.npm_execpath]] : ["npm", []];
  const r = spawnSync(npm[0], [...npm[1], "install", "--no-save", "--no-audit", "--no-fund", spec], { cwd: root, stdio: ["ignore", "inherit", "inherit"] });
  if (r.status !== 0 || versionOf("@vitest/coverage-istanbul") !== vitestVersion) {
    console.error(`call-path: could not install ${spec}`);
    process.exit(2);
  }
}

// ---- the measurement ---------------------------------------------------------------------------

const reports = mkdtempSync(join(tmpdir(), "portcullis-call-path-"));
const run = spawnSync(join(root, "node_modules/.bin/vitest"), ["run", "--config", "vitest.call-path.config.ts"], {
  cwd: root,
  encoding: "utf8",
  maxBuffer: 64 * 1024 * 1024,
  env: { ...process.env, NO_COLOR: "1", FORCE_COLOR: "0", CALL_PATH_COVERAGE_DIR: reports, WRANGLER_SEND_METRICS: "false" },
});
rmSync(reports, { recursive: true, force: true });
const MARK = "CALL-PATH-JSON ";
const eras = (run.stdout ?? "")
  .split("\n")
  .filter((l) => l.startsWith(MARK))
  .map((l) => JSON.parse(l.slice(MARK.length)));
if (run.status !== 0 || eras.length !== 2) {
  process.stderr.write(run.stdout ?? "");
  process.stderr.write(run.stderr ?? "");
  console.error(`call-path: the measurement failed (vitest exit ${run.status}, ${eras.length} of 2 eras measured)`);
  process.exit(1);
}

/** Source files (repo-relative, src/ and durable-objects/ only) → the names of the functions that ran, sorted. */
function filesOf(raw) {
  const out = new Map();
  for (const [abs, fns] of Object.entries(raw)) {
    const rel = relative(root, abs).split(sep).join("/");
    if (!rel.startsWith("src/") && !rel.startsWith("durable-objects/")) continue;
    out.set(rel, [...new Set(fns.map(([name]) => name))].sort());
  }
  return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
const count = (files, dir) => [...files.keys()].filter((f) => f.startsWith(dir)).length;

const results = eras.map((e) => {
  const answer = filesOf(e.answer.files);
  const after = filesOf(e.after.files);
  const hot = filesOf(e.hot.files);
  return {
    era: e.era,
    files: [...answer.keys()],
    src: count(answer, "src/"),
    durableObjectFiles: count(answer, "durable-objects/"),
    durableObjects: Object.keys(e.answer.dos).sort(),
    functions: Object.fromEntries(answer),
    doMethods: e.answer.dos,
    afterAnswer: { files: [...after.keys()], durableObjects: Object.keys(e.after.dos).sort(), settled: e.after.settled },
    hot: {
      files: hot.size,
      notVisitedWhenHot: [...answer.keys()].filter((f) => !hot.has(f)),
      onlyWhenHot: [...hot.keys()].filter((f) => !answer.has(f)),
      durableObjects: Object.keys(e.hot.dos).sort(),
      cacheAgeMs: e.hot.cacheAgeMs,
    },
    exportedDurableObjectClasses: e.doClasses.length,
  };
});

if (asJson) {
  console.log(JSON.stringify(results, null, 2));
  process.exit(0);
}

const sha = spawnSync("git", ["rev-parse", "--short", "HEAD"], { cwd: root, encoding: "utf8" }).stdout?.trim() || "?";
const dirty = spawnSync("git", ["status", "--porcelain", "--", "src", "durable-objects"], { cwd: root, encoding: "utf8" }).stdout?.trim()
  ? " (src/ or durable-objects/ modified)"
  : "";
console.log(`One governed tools/call, files whose functions ran from the request to the answer — tree ${sha}${dirty}\n`);
for (const r of results) {
  console.log(
    `== ${r.era}: ${r.files.length} source files (src ${r.src}, durable-objects ${r.durableObjectFiles}); ` +
      `${r.durableObjects.length} of ${r.exportedDurableObjectClasses} Durable Object classes: ${r.durableObjects.join(", ")}`,
  );
  for (const f of r.files) console.log(`   ${f}${withFunctions ? `  [${r.functions[f].join(", ")}]` : ""}`);
  if (withFunctions) for (const [c, m] of Object.entries(r.doMethods)) console.log(`   ${c}: ${m.join(", ")}`);
  const a = r.afterAnswer;
  console.log(
    `   after the answer (waitUntil): ${a.files.length ? `${a.files.length} files: ${a.files.join(", ")}` : "nothing ran"}` +
      `${a.durableObjects.length ? `; objects: ${a.durableObjects.join(", ")}` : ""}${a.settled ? "" : " (still running after 10 s)"}`,
  );
  const h = r.hot;
  console.log(
    `   hot (caches ${h.cacheAgeMs} ms old${h.cacheAgeMs >= 1000 ? ", NOT fresh: this figure is not a hot call" : ""}): ${h.files} files, ` +
      `${h.durableObjects.length} Durable Object classes (${h.durableObjects.join(", ")})` +
      `${h.notVisitedWhenHot.length ? `; not visited: ${h.notVisitedWhenHot.join(", ")}` : ""}${h.onlyWhenHot.length ? `; only then: ${h.onlyWhenHot.join(", ")}` : ""}\n`,
  );
}
console.log("era         files  src  durable-objects/  DO classes");
for (const r of results)
  console.log(
    `${r.era.padEnd(10)}  ${String(r.files.length).padStart(5)}  ${String(r.src).padStart(3)}  ${String(r.durableObjectFiles).padStart(16)}  ${r.durableObjects.length}`,
  );
