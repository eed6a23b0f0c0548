/**
 * E2E harness: starts real upstreams (server-everything in streamableHttp mode, the conformance
 * upstream fixture) and Portcullis gateways on the production build (`wrangler dev`, workerd,
 * no eval), all on loopback. Owns process lifecycle and readiness waits (bounded).
 * Must never: leave a process running after teardown, or reach beyond 127.0.0.1.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
// @ts-expect-error -- plain ESM helper shared with the CLI
import { startGateway } from "../../bin/portcullis.mjs";

export const root = resolve(import.meta.dirname, "../..");

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => res(port));
    });
  });
}

export async function waitFor(url: string, timeoutMs = 60_000, ok = (r: Response) => r.ok): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    try {
      const r = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (ok(r)) return;
      last = `HTTP ${r.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out waiting for ${url} (${last})`);
}

export interface Proc { child: ChildProcess; stop(): Promise<void> }

function managed(child: ChildProcess, cleanup?: () => void): Proc {
  return {
    child,
    stop: () => new Promise<void>((res) => {
      if (child.exitCode !== null || child.signalCode !== null) { cleanup?.(); return res(); }
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      child.once("exit", () => { clearTimeout(t); cleanup?.(); res(); });
      child.kill("SIGTERM");
    }),
  };
}

export async function startEverything(port: number): Promise<Proc> {
  const child = spawn(process.execPath, [join(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp"], {
    cwd: root, env: { ...process.env, PORT: String(port) }, stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr?.resume();
  await waitFor(`http://127.0.0.1:${port}/mcp`, 30_000, (r) => r.status > 0);
  return managed(child);
}

/** Starts a gateway; everything it prints also goes to `logFile` when given (tests grep it). */
export async function startPortcullis(configText: string, port: number, extraVars: Record<string, string> = {}, logFile?: string): Promise<Proc & { url: string; logs: () => string }> {
  const persistTo = mkdtempSync(join(tmpdir(), "portcullis-e2e-"));
  const child: ChildProcess = startGateway({ configText, port, persistTo, stdio: ["ignore", "pipe", "pipe"], extraVars });
  let logs = "";
  const keep = (d: Buffer) => { logs += d.toString(); if (logFile) appendFileSync(logFile, d); };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  try {
    await waitFor(`http://127.0.0.1:${port}/healthz`, 90_000);
  } catch (e) {
    child.kill("SIGKILL");
    throw new Error(`${(e as Error).message}\n${logs}`);
  }
  const m = managed(child, () => rmSync(persistTo, { recursive: true, force: true }));
  return { ...m, url: `http://127.0.0.1:${port}/mcp`, logs: () => logs };
}
