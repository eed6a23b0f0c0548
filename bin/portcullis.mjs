#!/usr/bin/env node
/**
 * The `portcullis` command, the package's bin: a launcher that checks this Node can run the CLI,
 * then runs cli/main.ts. The CLI is TypeScript that Node runs as it is, without a build step, from
 * Node 22.18 (type stripping on by default; on the 23 line from 23.6). Owns only that check: under
 * a Node that cannot strip types it prints one line naming the Node needed and exits 1.
 * Must never: import anything before the check (a .ts import would fail on an older Node with a
 * stack trace instead of the line).
 */
const [major = 0, minor = 0] = process.versions.node.split(".").map(Number);
if (!process.features.typescript) {
  const able = major > 23 || (major === 23 && minor >= 6) || (major === 22 && minor >= 18);
  console.error(
    `portcullis: needs Node.js 22.18 or later (23.6 or later on the 23 line); this is Node.js ${process.version}, ${able ? "with type stripping turned off (--no-experimental-strip-types)" : "which cannot run the CLI's TypeScript files"}`,
  );
  process.exit(1);
}
const { main } = await import("../cli/main.ts");
await main(process.argv.slice(2));
