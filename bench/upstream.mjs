#!/usr/bin/env node
/**
 * Bench only: the conformance fixture (test/fixtures/conformance-upstream) as the benches'
 * upstream, `node bench/upstream.mjs --port N`, with one change to how Node serves it: idle
 * keep-alive connections are kept 120 s instead of Node's default 5 s. With 5 s, a Worker that
 * comes back to the upstream after a pause (the bench moves from target to target) can reuse a
 * pooled connection at the moment the server closes it, and the call fails with "Network
 * connection lost" — a race of the two idle timeouts, not something a benchmark should sample.
 * Changes nothing else of the fixture; never listens off loopback.
 */
import http from "node:http";
import { syncBuiltinESMExports } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const create = http.createServer;
http.createServer = (...args) => {
  const server = create(...args);
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 125_000;
  return server;
};
syncBuiltinESMExports();

const i = process.argv.indexOf("--port");
const port = i > 0 ? Number(process.argv[i + 1]) : 0;
const fixture = join(dirname(fileURLToPath(import.meta.url)), "../test/fixtures/conformance-upstream/server.ts");
const { startConformanceUpstream } = await import(pathToFileURL(fixture).href);
const up = await startConformanceUpstream({ port, host: "127.0.0.1" });
console.log(up.url);
for (const sig of ["SIGINT", "SIGTERM"]) process.once(sig, () => void up.close().finally(() => process.exit(0)));
