/**
 * Vitest global setup for the e2e suite: one set of upstreams and gateways shared by every e2e
 * file (they are slow to start), handed to tests through `provide`.
 *  - everything: @modelcontextprotocol/server-everything, streamableHttp (legacy-only, SDK 1.x)
 *  - conformance: our dual-era conformance upstream fixture
 *  - gateway "transparent": one upstream (conformance), names unchanged — for the official suites
 *  - modern: a 2026-07-28-only upstream (era bridging)
 *  - gateway "namespaced": all three upstreams, `<name>__<tool>` names
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, startEverything, startPortcullis } from "./harness.ts";

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
  }
}

export default async function setup(project: TestProject) {
  const evPort = await freePort();
  const everything = await startEverything(evPort);
  const conformance = await startConformanceUpstream({ port: 0, host: "127.0.0.1" });
  const modernOnly = await startModernOnlyUpstream();
  const vault = await startModernOnlyUpstream({ requireBearer: "user-" });
  const logFile = join(mkdtempSync(join(tmpdir(), "portcullis-e2e-logs-")), "namespaced.log");
  const [tPort, nPort] = [await freePort(), await freePort()];
  const signingKey = JSON.stringify((await generateSigningKey("e2e-key")).privateJwk);
  const transparent = await startPortcullis(`
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${conformance.url}
    timeout: 30s
`, tPort);
  const namespaced = await startPortcullis(`
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
`, nPort, { EVERYTHING_KEY: "ev-secret-1", CONF_KEY: "conf-secret-2", PORTCULLIS_SIGNING_KEY: signingKey, PORTCULLIS_CREDENTIALS_KEY: btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32)))) }, logFile);
  project.provide("everythingUrl", `http://127.0.0.1:${evPort}/mcp`);
  project.provide("conformanceUrl", conformance.url);
  project.provide("modernLogUrl", modernOnly.url.replace(/\/mcp$/, "/log"));
  project.provide("transparentUrl", transparent.url);
  project.provide("namespacedUrl", namespaced.url);
  project.provide("signingKey", signingKey);
  project.provide("vaultLogUrl", vault.url.replace(/\/mcp$/, "/log"));
  project.provide("namespacedLogFile", logFile);
  return async () => {
    await Promise.all([transparent.stop(), namespaced.stop(), everything.stop(), conformance.close(), modernOnly.close(), vault.close()]);
  };
}
