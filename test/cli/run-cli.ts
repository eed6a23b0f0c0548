/**
 * The `portcullis` CLI run two ways for table tests that need no gateway: `runCli` calls
 * cli/main.ts's `main` in this process (what bin/portcullis.mjs does after its Node check), with
 * `process.exit` turned into a thrown signal, console and stdout/stderr captured and `fetch`
 * refused, so a command that would reach the network fails loudly instead of hanging; `spawnCli`
 * runs bin/portcullis.mjs as a child process (the real thing, a Node start each run), which help.test.ts uses
 * to show both give the same answers. Owns only these patches, and restores every one after each
 * run. Must never: run two in-process commands at once (the patches are process-wide; runCli
 * queues them), or let a command's exit end the test process.
 */
import { resolve } from "node:path";
import { format } from "node:util";
import { type Run, runScript } from "../e2e/mcp.ts";

export type { Run };

export const ROOT = resolve(import.meta.dirname, "../..");
const CLI = resolve(ROOT, "bin/portcullis.mjs");

/** What `process.exit(code)` throws while a command runs in this process. */
class Exited extends Error {
  readonly code: number;
  constructor(code: number) {
    super(`process.exit(${code})`);
    this.code = code;
  }
}

let queue: Promise<unknown> = Promise.resolve();

/** `portcullis ARGS` in this process with `env` set for the run: its exit code (process.exit, process.exitCode, or 0) and what it printed. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const run = queue.then(() => inProcess(args, env));
  queue = run.catch(() => undefined);
  return run;
}

async function inProcess(args: string[], env: Record<string, string>): Promise<Run> {
  const { main } = (await import("../../cli/main.ts")) as { main: (argv: string[]) => Promise<void> };
  let stdout = "";
  let stderr = "";
  const saved = {
    log: console.log,
    info: console.info,
    warn: console.warn,
    error: console.error,
    out: process.stdout.write,
    err: process.stderr.write,
    exit: process.exit,
    fetch: globalThis.fetch,
    exitCode: process.exitCode,
  };
  // As spawnCli: no PORTCULLIS_TOKEN from the test's environment (the operator CLI's grants).
  const savedEnv = Object.fromEntries(["PORTCULLIS_TOKEN", ...Object.keys(env)].map((k) => [k, process.env[k]]));
  const toOut = (...a: unknown[]) => {
    stdout += `${format(...a)}\n`;
  };
  const toErr = (...a: unknown[]) => {
    stderr += `${format(...a)}\n`;
  };
  console.log = toOut;
  console.info = toOut;
  console.warn = toErr;
  console.error = toErr;
  process.stdout.write = ((chunk: string | Uint8Array) => {
    stdout += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => {
    stderr += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString();
    return true;
  }) as typeof process.stderr.write;
  process.exit = ((code?: number | string | null) => {
    throw new Exited(Number(code ?? process.exitCode ?? 0));
  }) as typeof process.exit;
  globalThis.fetch = (async (input: unknown) => {
    throw new Error(`runCli: a command tried to reach the network (${String(input)})`);
  }) as typeof fetch;
  process.exitCode = undefined;
  delete process.env.PORTCULLIS_TOKEN;
  for (const [k, v] of Object.entries(env)) process.env[k] = v;
  let code: number;
  try {
    await main(args);
    code = Number(process.exitCode ?? 0);
  } catch (e) {
    if (!(e instanceof Exited)) throw e;
    code = e.code;
  } finally {
    console.log = saved.log;
    console.info = saved.info;
    console.warn = saved.warn;
    console.error = saved.error;
    process.stdout.write = saved.out;
    process.stderr.write = saved.err;
    process.exit = saved.exit;
    globalThis.fetch = saved.fetch;
    process.exitCode = saved.exitCode;
    for (const [k, v] of Object.entries(savedEnv)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
  return { code, stdout, stderr };
}

/** `portcullis ARGS` as a child process of this Node (no PORTCULLIS_TOKEN in its environment), killed after 60 s. */
export const spawnCli = (args: string[], env: Record<string, string> = {}): Promise<Run> => runScript(CLI, args, env);
