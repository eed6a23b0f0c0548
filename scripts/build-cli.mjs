/**
 * `npm pack`'s prepack step: builds the CLI (cli/main.ts and everything it loads, the lazily
 * loaded commands as their own chunks) into dist/cli/ as plain JavaScript with esbuild, because
 * Node strips no types from files under node_modules, where an installed package lives. Packages
 * stay imports (the package's dependencies). `--clean` (postpack) removes dist/cli again, so a
 * checkout keeps running cli/*.ts. Must never: bundle a dependency, or leave a half-written build
 * (it builds into a fresh directory and renames it into place).
 */
import { rmSync, renameSync } from "node:fs";
import { resolve } from "node:path";
import { build } from "esbuild";

const root = resolve(import.meta.dirname, "..");
const out = resolve(root, "dist", "cli");
rmSync(out, { recursive: true, force: true });
if (!process.argv.includes("--clean")) {
  const tmp = resolve(root, "dist", `cli-${process.pid}`);
  await build({
    entryPoints: [resolve(root, "cli", "main.ts")],
    outdir: tmp,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node22",
    packages: "external",
    logLevel: "warning",
  });
  renameSync(tmp, out);
}
