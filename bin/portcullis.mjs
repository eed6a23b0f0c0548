#!/usr/bin/env node
/**
 * The `portcullis` command, the package's bin: a launcher that checks this Node can run the CLI,
 * then runs it. In a checkout the CLI is cli/main.ts, which Node runs as it is from Node 22.18
 * (type stripping on by default; on the 23 line from 23.6). An installed package carries it built
 * as dist/cli/main.js (`npm pack` builds it: Node strips no types under node_modules). Owns only
 * that check and that choice: under a Node that cannot run the CLI it prints one line naming the
 * Node needed and exits 1. Must never: import anything before the check (an import would fail on
 * an older Node with a stack trace instead of the line).
 */
import { existsSync } from "node:fs";

const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
const able = major > 23 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18);
const built = new URL("../dist/cli/main.js", import.meta.url);
const fromBuild = existsSync(built);
if (!able || (!fromBuild && !process.features.typescript)) {
  console.error(
    `portcullis: needs Node.js 22.18 or later (23.6 or later on the 23 line); this is Node.js ${process.version}${able ? ", with type stripping turned off (--no-experimental-strip-types)" : ""}`,
  );
  process.exit(1);
}
const { main } = await import(fromBuild ? built.href : "../cli/main.ts");
await main(process.argv.slice(2));
