// Types `env` from "cloudflare:test" as the Worker's own Env.
import type { Env as WorkerEnv } from "../../src/env.ts";

declare global {
  namespace Cloudflare {
    interface Env extends WorkerEnv {}
  }
}
