// End-to-end suite: Node-side tests against `wrangler dev` (the production build on workerd)
// with real upstream MCP servers on loopback. Files run one at a time: the machine has 2 cores.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    globalSetup: ["test/e2e/global-setup.ts"],
    environment: "node",
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
