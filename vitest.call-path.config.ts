// The call-path measurement (scripts/call-path.mjs): test/unit/call-path.measure.ts alone, in workerd through
// the Cloudflare vitest plugin like the unit tests, with istanbul instrumentation of src/** and durable-objects/**
// (the test reads the counters itself; no report is written) and a gateway config of one upstream, a grant
// required and an enforce policy that allows the one tool the measurement calls. It reaches the Worker through
// wrangler.toml's main (src/index.ts) only and imports nothing from src/, so it measures any layout of src/.
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { exportJWK, generateKeyPair } from "jose";
import { defineConfig } from "vitest/config";

const CONFIG = `
actor: local:measure
auth:
  required: true
  max_token_lifetime: 24h
egress:
  allow_loopback: true
mode: enforce
policy:
  rules:
    - id: measured-call
      match: { tool: "echo" }
      decision: allow
      reason: the call the measurement makes
upstreams:
  - name: fake
    url: http://127.0.0.1:9/mcp
    timeout: 10s
`;

// A fresh Ed25519 signing key per run: the test signs its grant with it through env.PORTCULLIS_SIGNING_KEY.
const { privateKey } = await generateKeyPair("EdDSA", { extractable: true });
const jwk = { ...(await exportJWK(privateKey)), kid: "call-path-1", alg: "EdDSA", use: "sig" };

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: { bindings: { PORTCULLIS_CONFIG: CONFIG, PORTCULLIS_SIGNING_KEY: JSON.stringify(jwk), PORTCULLIS_ORIGIN: "http://127.0.0.1" } },
    }),
  ],
  test: {
    include: ["test/unit/call-path.measure.ts"],
    testTimeout: 60_000,
    coverage: {
      enabled: true,
      provider: "istanbul",
      include: ["src/**", "durable-objects/**"],
      reporter: [],
      reportsDirectory: process.env.CALL_PATH_COVERAGE_DIR ?? "/tmp/portcullis-call-path-coverage",
      thresholds: {},
    },
  },
});
