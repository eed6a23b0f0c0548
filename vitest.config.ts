// Unit tests: run inside workerd through the Cloudflare vitest plugin (note: the plugin allows
// eval where production does not — the e2e suite covers the production build).
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const TEST_CONFIG = `
actor: local:unit
upstreams:
  - name: alpha
    url: http://127.0.0.1:9/mcp
    timeout: 2s
  - name: beta
    url: http://127.0.0.1:9/other
    timeout: 2s
`;

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: "./wrangler.toml" },
      miniflare: { bindings: { PORTCULLIS_CONFIG: TEST_CONFIG } },
    }),
  ],
  test: {
    include: ["test/unit/**/*.test.ts"],
    testTimeout: 20_000,
  },
});
