// Unit tests, two projects: "workerd" runs test/unit inside workerd through the Cloudflare vitest
// plugin (note: the plugin allows eval where production does not — the e2e suite covers the
// production build); "node" runs test/cli, the CLI's table tests that need no gateway, in Node.
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { generateSigningKey } from "./src/identity/keys.ts";

const TEST_CONFIG = `
actor: local:unit
gateway:
  allowed_hosts: ["gw.example.com"]
auth:
  max_token_lifetime: 24h
egress:
  allow_loopback: true
upstreams:
  - name: alpha
    url: http://127.0.0.1:9/mcp
    timeout: 2s
  - name: beta
    url: http://127.0.0.1:9/other
    timeout: 2s
`;

// A fresh signing key per run: tests mint grants with it through env.PORTCULLIS_SIGNING_KEY.
const { privateJwk } = await generateSigningKey("unit-key-1");

export default defineConfig({
  test: {
    maxWorkers: 3,
    projects: [
      {
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            // The origin `portcullis dev` would hand the gateway: tests fetch http://127.0.0.1/… (no port).
            miniflare: {
              bindings: { PORTCULLIS_CONFIG: TEST_CONFIG, PORTCULLIS_SIGNING_KEY: JSON.stringify(privateJwk), PORTCULLIS_ORIGIN: "http://127.0.0.1" },
            },
          }),
        ],
        test: { name: "workerd", include: ["test/unit/**/*.test.ts"], testTimeout: 20_000 },
      },
      // The CLI's table tests that need no gateway (test/cli): plain Node, in forked workers.
      { test: { name: "node", include: ["test/cli/**/*.test.ts"], environment: "node", pool: "forks", testTimeout: 60_000 } },
    ],
  },
});
