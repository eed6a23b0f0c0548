/**
 * E2E harness: starts real upstreams (server-everything in streamableHttp mode, pinned to
 * 127.0.0.1 by the CLI's demo-upstream wrapper) and Portcullis gateways on the production build
 * (built once by `wrangler deploy --dry-run`, served by `wrangler dev --no-bundle` on workerd, no
 * eval), all on loopback. Owns process lifecycle and readiness waits
 * (bounded): every process it starts runs in its own process group (the wrangler shim, the real
 * wrangler, esbuild and workerd share it) and is stopped as a group, SIGTERM then SIGKILL after a
 * bound; a group still running when this process exits is SIGKILLed then. Children are unref'd:
 * they never keep the test runner alive. Also reads the process table and listening sockets
 * (/proc, `ps`) so tests can check both.
 * Must never: leave a process running after teardown, or reach beyond 127.0.0.1.
 */
import { execFileSync, type ChildProcess } from "node:child_process";
import { appendFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { builtWorker, startDemoUpstream, startGateway } from "../../cli/gateway-start.ts";

export const root = resolve(import.meta.dirname, "../..");

/**
 * A port on 127.0.0.1 nothing listens on now, picked at random below Linux's ephemeral range
 * (32768–60999): the ports the OS hands out by itself — a gateway's own internal listeners,
 * outgoing connections — come from that range, so none of them can take this port between the
 * check and its use by the process it is meant for (a free port from the OS's own choice once lost
 * that race to another file's wrangler). Each port is handed out once per process.
 */
const handedOut = new Set<number>();
export async function freePort(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 12_700);
    if (handedOut.has(port) || !(await canListen(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error("freePort: no free port found in 20000–32699 after 200 tries");
}

/** Whether 127.0.0.1:`port` can be listened on right now (it is closed again before this resolves). */
function canListen(port: number): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.unref();
    s.once("error", () => res(false));
    s.listen(port, "127.0.0.1", () => s.close(() => res(true)));
  });
}

/** Polls `url` until `ok` (bounded by `timeoutMs`); `signal` ends the wait early (it then throws). */
export async function waitFor(url: string, timeoutMs = 60_000, ok = (r: Response) => r.ok, signal?: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    if (signal?.aborted) throw new Error(`stopped waiting for ${url}`);
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

export interface Proc {
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Bounds of a stop: SIGTERM to the group, then SIGKILL if anything in it still runs. */
const TERM_GRACE_MS = 8000;
const KILL_GRACE_MS = 3000;

/** One process's state, parent, process group and start time (clock ticks) from /proc; null when it is gone. */
export function procStat(pid: number): { state: string; ppid: number; pgrp: number; start: number } | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
    return { state: f[0]!, ppid: Number(f[1]), pgrp: Number(f[2]), start: Number(f[19]) };
  } catch {
    return null;
  }
}

const hasProc = existsSync("/proc/self/stat");

/** Live (not zombie) members of process group `pgid`: from /proc where there is one, else "some" or none by signal 0. */
export function groupMembers(pgid: number): number[] {
  if (!hasProc) {
    try {
      process.kill(-pgid, 0);
      return [pgid];
    } catch {
      return [];
    }
  }
  const out: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const st = procStat(Number(d));
    if (st && st.pgrp === pgid && st.state !== "Z" && st.state !== "X") out.push(Number(d));
  }
  return out;
}

function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch {
    /* the group is gone */
  }
}

/**
 * Process groups started here and not yet stopped. If this process exits first, each is SIGKILLed
 * (synchronously, in the "exit" hook). While any runs, SIGINT/SIGTERM/SIGHUP stop them all (a
 * terminal's Ctrl-C no longer reaches a detached group): then, if no one else listens for that
 * signal, it is raised again, so the process ends as it would have.
 */
const live = new Map<number, { stop(): Promise<void>; kill(): void }>();
const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
let exitHooked = false;
let signalsHooked = false;
function onSignal(sig: NodeJS.Signals): void {
  unhookSignals();
  void stopEveryProcess().finally(() => {
    if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
  });
}
function hookSignals(): void {
  if (signalsHooked) return;
  signalsHooked = true;
  for (const sig of SIGNALS) process.on(sig, onSignal);
}
function unhookSignals(): void {
  if (!signalsHooked) return;
  signalsHooked = false;
  for (const sig of SIGNALS) process.off(sig, onSignal);
}
function register(pgid: number, group: { stop(): Promise<void>; kill(): void }): void {
  live.set(pgid, group);
  if (!exitHooked) {
    exitHooked = true;
    process.on("exit", () => {
      for (const g of live.values()) g.kill();
      live.clear();
    });
  }
  hookSignals();
}
function unregister(pgid: number): void {
  live.delete(pgid);
  if (live.size === 0) unhookSignals();
}

/** Stops every process group this harness started and has not stopped yet (those still starting too). */
export async function stopEveryProcess(): Promise<void> {
  await Promise.allSettled([...live.values()].map((g) => g.stop()));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function groupGone(pgid: number, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (groupMembers(pgid).length === 0) return true;
    await sleep(100);
  }
  return groupMembers(pgid).length === 0;
}

/**
 * Wraps a child started with `detached: true` (leader of its own process group). The child and
 * its pipes are unref'd; `stop()` signals the whole group (SIGTERM, SIGKILL after the bound) and
 * resolves once no process of the group runs any more and the leader's exit has been seen.
 * `exited` rejects if the leader exits before `stop()` (a start that failed).
 */
export function managed(child: ChildProcess, cleanup: () => void = () => {}): Proc & { exited: Promise<never> } {
  const pgid = child.pid;
  let spawnError: Error | undefined;
  child.on("error", (e) => {
    spawnError = e;
  });
  const exit = new Promise<void>((res) => {
    if (child.exitCode !== null || child.signalCode !== null) return res();
    child.once("exit", () => res());
    child.once("error", () => {
      if (child.pid === undefined) res();
    });
  });
  let stopping: Promise<void> | undefined;
  const exited = exit.then(() => {
    throw new Error(spawnError ? `could not start: ${spawnError.message}` : `exited while starting (code ${child.exitCode}, signal ${child.signalCode})`);
  });
  exited.catch(() => {
    /* only a start waits on it */
  });
  child.unref();
  for (const s of [child.stdout, child.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();
  let cleaned = false;
  const clean = () => {
    if (!cleaned) {
      cleaned = true;
      cleanup();
    }
  };
  const stop = () =>
    (stopping ??= (async () => {
      if (pgid === undefined) {
        clean();
        return;
      }
      // The signal goes out synchronously, at the call: an interrupted runner still sends it.
      signalGroup(pgid, "SIGTERM");
      if (!(await groupGone(pgid, TERM_GRACE_MS))) {
        signalGroup(pgid, "SIGKILL");
        await groupGone(pgid, KILL_GRACE_MS);
      }
      await Promise.race([exit, sleep(KILL_GRACE_MS)]);
      unregister(pgid);
      clean();
    })());
  if (pgid !== undefined)
    register(pgid, {
      stop,
      kill: () => {
        signalGroup(pgid, "SIGKILL");
        try {
          clean();
        } catch {
          /* at exit: best effort */
        }
      },
    });
  return { child, stop, exited };
}

/** Waits for `url` unless the process exits first; on failure stops the process (its whole group) and throws with its output. */
async function ready(
  m: ReturnType<typeof managed>,
  url: string,
  timeoutMs: number,
  ok: ((r: Response) => boolean) | undefined,
  logs: () => string,
): Promise<void> {
  const abort = new AbortController();
  try {
    await Promise.race([waitFor(url, timeoutMs, ok, abort.signal), m.exited]);
  } catch (e) {
    abort.abort();
    await m.stop();
    throw new Error(`${(e as Error).message}\n${logs()}`);
  }
  abort.abort();
}

/** server-everything (streamableHttp) on 127.0.0.1:`port` only, through the CLI's demo-upstream wrapper. */
export async function startEverything(port: number): Promise<Proc> {
  const child: ChildProcess = startDemoUpstream({ port, stdio: ["ignore", "ignore", "pipe"], detached: true });
  let logs = "";
  child.stderr?.on("data", (d: Buffer) => {
    logs += d.toString();
  });
  const m = managed(child);
  await ready(
    m,
    `http://127.0.0.1:${port}/mcp`,
    30_000,
    (r) => r.status > 0,
    () => logs,
  );
  return { child: m.child, stop: m.stop };
}

/**
 * The production build every gateway of the suite serves: `wrangler deploy --dry-run --outdir`
 * once (global-setup.ts), then `wrangler dev --no-bundle` on it at each start. Returns the path of
 * a wrangler config beside the bundle (the repository's wrangler.toml with `main` pointing at it).
 */
export function buildGateway(dir: string, prebuilt = process.env.PORTCULLIS_E2E_BUNDLE): string {
  // `npm test` has just built the same bundle (its bundle step) and names it here: served as it is.
  return builtWorker(resolve(root, "wrangler.toml"), dir, { prebuilt }).file;
}

/** The built gateway's wrangler config: set by global-setup.ts in its process, provided to test files (inject). */
let built: string | undefined;
export function useBuiltGateway(config: string): void {
  built = config;
}
async function builtConfig(): Promise<string | undefined> {
  if (built) return built;
  try {
    const { inject } = await import("vitest");
    return inject("builtGatewayConfig") || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Starts a gateway; everything it prints also goes to `logFile` when given (tests grep it). Its
 * state lives in a fresh temporary directory, removed at stop — or in `keepState`, which is kept
 * (a second gateway started on it resumes the first one's state).
 */
export async function startPortcullis(
  configText: string,
  port: number,
  extraVars: Record<string, string> = {},
  logFile?: string,
  keepState?: string,
): Promise<Proc & { url: string; logs: () => string }> {
  const persistTo = keepState ?? mkdtempSync(join(tmpdir(), "portcullis-e2e-"));
  const child: ChildProcess = startGateway({
    configText,
    port,
    persistTo,
    stdio: ["ignore", "pipe", "pipe"],
    extraVars,
    detached: true,
    builtConfig: await builtConfig(),
  });
  let logs = "";
  const keep = (d: Buffer) => {
    logs += d.toString();
    if (logFile) appendFileSync(logFile, d);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const m = managed(child, () => (keepState ? undefined : rmSync(persistTo, { recursive: true, force: true })));
  await ready(m, `http://127.0.0.1:${port}/healthz`, 90_000, undefined, () => logs);
  return { child: m.child, stop: m.stop, url: `http://127.0.0.1:${port}/mcp`, logs: () => logs };
}

/** `pid` and all its descendants, from `ps -eo pid=,ppid=` (the process table as ps reads it). */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const line of execFileSync("ps", ["-eo", "pid=,ppid="], { encoding: "utf8" }).split("\n")) {
    const [c, p] = line.trim().split(/\s+/).map(Number);
    if (!c || p === undefined || Number.isNaN(p)) continue;
    children.set(p, [...(children.get(p) ?? []), c]);
  }
  const out: number[] = [];
  const todo = [pid];
  while (todo.length) {
    const p = todo.pop()!;
    out.push(p);
    todo.push(...(children.get(p) ?? []));
  }
  return out;
}

/** IPv4 or IPv6 text from /proc/net/tcp(6)'s hex (IPv6: four 32-bit words, each in host byte order). */
function procAddress(hex: string): string {
  if (hex.length === 8) return [6, 4, 2, 0].map((i) => parseInt(hex.slice(i, i + 2), 16)).join(".");
  const bytes: number[] = [];
  for (let w = 0; w < 4; w++) for (const i of [6, 4, 2, 0]) bytes.push(parseInt(hex.slice(w * 8 + i, w * 8 + i + 2), 16));
  return Array.from({ length: 8 }, (_, i) => ((bytes[2 * i]! << 8) | bytes[2 * i + 1]!).toString(16)).join(":");
}

/** Local addresses of the TCP sockets listening on `port` (from /proc/net/tcp and tcp6). */
export function listeningOn(port: number): string[] {
  const out: string[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, "utf8").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f.length < 4 || f[3] !== "0A") continue; // 0A = LISTEN
      const [addr, p] = f[1]!.split(":");
      if (parseInt(p!, 16) === port) out.push(procAddress(addr!));
    }
  }
  return out;
}

/** A listening address on loopback: 127.0.0.0/8, ::1, or IPv4-mapped 127.x. */
export const isLoopbackListen = (a: string) => /^127\./.test(a) || a === "0:0:0:0:0:0:0:1" || /^0:0:0:0:0:ffff:7f/.test(a);
