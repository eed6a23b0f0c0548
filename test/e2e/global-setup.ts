/**
 * Vitest global setup for the e2e suite: the gateway build every file's gateways serve (built
 * once), and one set of upstreams and gateways shared by every e2e file (they are slow to start),
 * handed to tests through `provide`.
 *  - everything: @modelcontextprotocol/server-everything, streamableHttp (legacy-only, SDK 1.x)
 *  - conformance: our dual-era conformance upstream fixture
 *  - gateway "transparent": one upstream (conformance), names unchanged — for the official suites
 *  - modern: a 2026-07-28-only upstream (era bridging)
 *  - gateway "namespaced": all three upstreams, `<name>__<tool>` names
 * Owns their lifetime: if any start fails, or the runner is interrupted (SIGINT/SIGTERM) while
 * they start, everything already started is stopped (process groups, see harness.ts) before the
 * error goes on; the teardown stops them all. Must never leave one running.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { buildGateway, freePort, startEverything, startPortcullis, stopEveryProcess, useBuiltGateway } from "./harness.ts";

declare module "vitest" {
  export interface ProvidedContext {
    everythingUrl: string;
    conformanceUrl: string;
    /** The modern-only upstream's request record (GET). */
    modernLogUrl: string;
    transparentUrl: string;
    namespacedUrl: string;
    /** The namespaced gateway's private signing JWK (JSON): tests mint grants with it. */
    signingKey: string;
    /** The per-principal-credential upstream's request record (GET). */
    vaultLogUrl: string;
    /** Everything the namespaced gateway printed. */
    namespacedLogFile: string;
    /** The wrangler config of the gateway build every e2e gateway serves (harness.ts buildGateway). */
    builtGatewayConfig: string;
  }
}

export default async function setup(project: TestProject) {
  // Everything started so far, as stoppers; stopped together, each at most once.
  const started: (() => Promise<unknown>)[] = [];
  const stopAll = () => Promise.allSettled(started.splice(0).map((stop) => stop()));
  let interrupted: NodeJS.Signals | undefined;
  // A start that completes after an interrupt is stopped at once, and nothing more is started.
  const track = async <T>(value: T, stop: (v: T) => Promise<unknown>): Promise<T> => {
    started.push(() => stop(value));
    if (interrupted) {
      await stopAll();
      throw new Error(`e2e setup interrupted (${interrupted})`);
    }
    return value;
  };
  // Interrupted while starting: stop what runs, the processes still starting included (the first
  // signals go out at once), then let the signal do what it would have done: vitest's own handler
  // exits (and the harness SIGKILLs any group left at exit); with no other listener it is raised again.
  const onSignal = (sig: NodeJS.Signals) => {
    interrupted = sig;
    void Promise.allSettled([stopAll(), stopEveryProcess()]).then(() => {
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    });
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    // One production build for the whole suite; every gateway serves it (`wrangler dev --no-bundle`).
    const buildDir = await track(mkdtempSync(join(tmpdir(), "portcullis-e2e-build-")), async (d) => rmSync(d, { recursive: true, force: true }));
    const builtGatewayConfig = buildGateway(buildDir);
    useBuiltGateway(builtGatewayConfig);
    project.provide("builtGatewayConfig", builtGatewayConfig);
    const evPort = await freePort();
    await track(await startEverything(evPort), (p) => p.stop());
    const conformance = await track(await startConformanceUpstream({ port: 0, host: "127.0.0.1" }), (s) => s.close());
    const modernOnly = await track(await startModernOnlyUpstream(), (s) => s.close());
    const vault = await track(await startModernOnlyUpstream({ requireBearer: "user-" }), (s) => s.close());
    const logFile = join(mkdtempSync(join(tmpdir(), "portcullis-e2e-logs-")), "namespaced.log");
    const [tPort, nPort] = [await freePort(), await freePort()];
    const signingKey = JSON.stringify((await generateSigningKey("e2e-key")).privateJwk);
    const transparent = await track(
      await startPortcullis(
        `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${conformance.url}
    timeout: 30s
`,
        tPort,
      ),
      (p) => p.stop(),
    );
    const namespaced = await track(
      await startPortcullis(
        `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: everything
    url: http://127.0.0.1:${evPort}/mcp
    headers: { X-Upstream-Key: "\${EVERYTHING_KEY}" }
    timeout: 30s
  - name: conf
    url: ${conformance.url}
    headers: { X-Upstream-Key: "\${CONF_KEY}" }
    deny: ["test_error_handling"]
    timeout: 30s
  - name: modern
    url: ${modernOnly.url}
    timeout: 30s
  - name: vault
    url: ${vault.url}
    credentials: { mode: per_principal }
    timeout: 30s
`,
        nPort,
        {
          EVERYTHING_KEY: "ev-secret-1",
          CONF_KEY: "conf-secret-2",
          PORTCULLIS_SIGNING_KEY: signingKey,
          PORTCULLIS_CREDENTIALS_KEY: btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32)))),
        },
        logFile,
      ),
      (p) => p.stop(),
    );
    project.provide("everythingUrl", `http://127.0.0.1:${evPort}/mcp`);
    project.provide("conformanceUrl", conformance.url);
    project.provide("modernLogUrl", modernOnly.url.replace(/\/mcp$/, "/log"));
    project.provide("transparentUrl", transparent.url);
    project.provide("namespacedUrl", namespaced.url);
    project.provide("signingKey", signingKey);
    project.provide("vaultLogUrl", vault.url.replace(/\/mcp$/, "/log"));
    project.provide("namespacedLogFile", logFile);
  } catch (e) {
    await stopAll();
    throw e;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
  return async () => {
    await stopAll();
  };
}
