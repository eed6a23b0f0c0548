// End-to-end suite: Node-side tests against `wrangler dev` (the production build on workerd)
// with real upstream MCP servers on loopback. The files mostly wait (on gateways, upstreams,
// timeouts), so a few run at once; each starts its own gateways on free ports with their own
// state directories, and the shared gateways of global-setup.ts are only read and called, never
// reconfigured.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/e2e/**/*.test.ts"],
    globalSetup: ["test/e2e/global-setup.ts"],
    environment: "node",
    fileParallelism: true,
    maxWorkers: 3,
    testTimeout: 120_000,
    hookTimeout: 180_000,
  },
});
