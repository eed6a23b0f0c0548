/**
 * The package as a team gets it, for test/e2e/package.test.ts: `npm pack` of this working tree
 * (copied first, tracked and untracked-but-not-ignored files, so the checkout never sees the
 * prepack build), and an install of that tarball into a directory, offline and on loopback only:
 * the directory's package.json gains `portcullis` (the tarball) and `wrangler` as devDependencies,
 * a lockfile pins every package they need at this repository's locked versions (copied from its
 * package-lock.json, the tarball's dependency closure), and `npm ci --offline` installs them from
 * the npm cache the repository's own install filled. Owns those temporary trees. Must never: reach
 * the network (npm runs with --offline), or write into this checkout.
 */
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "../..");

type LockEntry = {
  version?: string;
  resolved?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
};

/** npm as this test's Node runs it (the project's Node 22 is first on PATH under `npm test`). */
export const npmEnv = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
  ...process.env,
  npm_config_audit: "false",
  npm_config_fund: "false",
  npm_config_update_notifier: "false",
  ...extra,
});

/** Packs this working tree; returns the tarball's path (in a fresh temporary directory). */
export function packTree(): string {
  const work = mkdtempSync(join(tmpdir(), "portcullis-pack-"));
  const tree = join(work, "tree");
  const files = execFileSync("git", ["ls-files", "-co", "--exclude-standard", "-z"], { cwd: root, encoding: "utf8" })
    .split("\0")
    .filter((f) => f && !f.startsWith("node_modules/") && existsSync(join(root, f)));
  for (const f of files) {
    mkdirSync(dirname(join(tree, f)), { recursive: true });
    cpSync(join(root, f), join(tree, f));
  }
  // prepack (scripts/build-cli.mjs) needs esbuild: the checkout's node_modules, read only.
  symlinkSync(join(root, "node_modules"), join(tree, "node_modules"));
  execFileSync("npm", ["pack", "--pack-destination", work, "--silent"], { cwd: tree, env: npmEnv(), stdio: "pipe", timeout: 120_000 });
  const tgz = readdirSync(work).find((f) => f.endsWith(".tgz"));
  if (!tgz) throw new Error("npm pack wrote no tarball");
  return join(work, tgz);
}

/** The lock entries of `names` and everything they need, resolved as Node would from the repository's lock (hoisted, or nested). */
function closure(packages: Record<string, LockEntry>, names: string[]): Map<string, LockEntry> {
  const find = (from: string, name: string): string | null => {
    for (let p = from; ; ) {
      const at = `${p ? `${p}/` : ""}node_modules/${name}`;
      if (packages[at]) return at;
      if (!p) return null;
      const i = p.lastIndexOf("/node_modules/");
      p = i < 0 ? "" : p.slice(0, i);
    }
  };
  const out = new Map<string, LockEntry>();
  const queue = names.map((n) => find("", n));
  for (let k = queue.pop(); k !== undefined; k = queue.pop()) {
    if (k === null || out.has(k)) continue;
    const e = packages[k]!;
    out.set(k, e);
    for (const d of Object.keys({ ...e.dependencies, ...e.optionalDependencies, ...e.peerDependencies })) queue.push(find(k, d));
  }
  return out;
}

/**
 * Installs `tgz` (and wrangler) into `dir` as `npm install --save-dev portcullis wrangler` would,
 * offline: package.json (created when absent) gains both, the lockfile pins them, `npm ci --offline`.
 */
export function installPackage(dir: string, tgz: string): void {
  const lock = JSON.parse(readFileSync(resolve(root, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry & { devDependencies?: Record<string, string> }>;
  };
  const own = JSON.parse(readFileSync(resolve(root, "package.json"), "utf8")) as {
    version: string;
    dependencies: Record<string, string>;
    engines: unknown;
    bin: Record<string, string>;
  };
  const wrangler = lock.packages[""]?.devDependencies?.wrangler ?? "4";
  cpSync(tgz, join(dir, "portcullis.tgz"));
  const pkgFile = join(dir, "package.json");
  const pkg = existsSync(pkgFile) ? (JSON.parse(readFileSync(pkgFile, "utf8")) as Record<string, unknown>) : { name: "gateway", private: true };
  const devDependencies = { ...((pkg.devDependencies as Record<string, string>) ?? {}), portcullis: "file:portcullis.tgz", wrangler };
  writeFileSync(pkgFile, `${JSON.stringify({ ...pkg, devDependencies }, null, 2)}\n`);
  const packages: Record<string, unknown> = { "": { name: pkg.name, devDependencies } };
  for (const [k, v] of closure(lock.packages, [...Object.keys(own.dependencies), "wrangler"])) packages[k] = { ...v, dev: true };
  packages["node_modules/portcullis"] = {
    version: own.version,
    resolved: "file:portcullis.tgz",
    dev: true,
    dependencies: own.dependencies,
    engines: own.engines,
    bin: own.bin,
  };
  writeFileSync(join(dir, "package-lock.json"), `${JSON.stringify({ name: pkg.name, lockfileVersion: 3, requires: true, packages }, null, 2)}\n`);
  execFileSync("npm", ["ci", "--offline", "--no-audit", "--no-fund", "--loglevel", "error"], { cwd: dir, env: npmEnv(), stdio: "pipe", timeout: 300_000 });
}
