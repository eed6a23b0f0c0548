/**
 * One MCP session of `portcullis bridge` (cli/bridge.ts): the SDK's Streamable HTTP server
 * transport on one side, the SDK's stdio client transport on the other, and one child process of
 * its own. One child per session, because a stdio server serves one client: the gateway opens
 * one upstream session per principal, so each principal gets its own server process (its own
 * state, its own answers), and JSON-RPC ids pass through unchanged without ever meeting another
 * session's. Messages are relayed as they are: the client's requests, notifications and answers
 * to the child; the child's answers back by id (the transport puts each on the stream of the
 * request it answers), its progress on the stream of the request that set the progress token,
 * its other requests and notifications (sampling, elicitation, roots, logging, list changes) on
 * the stream of the one request in flight, else on the session's GET stream. When the child
 * exits, every request in flight and every new one gets a JSON-RPC error naming the exit (code or
 * signal) and the restart, and the child is started again after a bounded exponential backoff
 * (250 ms doubling to 30 s; a child that stayed up 10 s starts the count again); the new child
 * gets the session's recorded `initialize` (under a bridge-made id, its answer kept from the
 * client) and `notifications/initialized`, so the session goes on. A line on the child's stdout
 * that is not JSON-RPC is logged, never relayed. Closing the session (DELETE, or the bridge
 * stopping) stops its child: stdin closed, then SIGTERM, then SIGKILL. Must never: relay a message
 * to another session, leave a request without an answer when its child is gone, restart a child
 * faster than the backoff, or leave a child running after its session closed.
 */
import { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import type { Writable } from "node:stream";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import {
  isJSONRPCErrorResponse,
  isJSONRPCNotification,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type JSONRPCRequest,
  type RequestId,
  SUPPORTED_PROTOCOL_VERSIONS,
  WebStandardStreamableHTTPServerTransport,
} from "@modelcontextprotocol/server";

/** The stdio server a bridge runs, one per session. */
export interface ChildSpec {
  command: string;
  args: string[];
  env: Record<string, string>;
}

/** What a session reports to its bridge. */
export interface SessionHooks {
  /** One line of the bridge's own log (never a message's arguments or a secret). */
  log(line: string): void;
  /** Where the child's stderr goes (the log file). */
  stderr: Writable;
  /** The transport gave the session its id (after `initialize`). */
  opened(session: BridgeSession): void;
  /** The session closed and its child is stopped. */
  closed(session: BridgeSession): void;
}

/** The restart backoff: the first delay, the bound, and how long a child must stay up for the count to start again. */
export const BACKOFF = { firstMs: 250, maxMs: 30_000, stableMs: 10_000 } as const;
/** How long a restarted child has to answer the replayed `initialize`; past it, the child counts as crashed. */
const REPLAY_TIMEOUT_MS = 15_000;
/** The JSON-RPC error code of an answer the bridge gives for its stdio server. */
export const BRIDGE_ERROR = -32000;

const seconds = (ms: number) => (ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(ms % 1000 ? 1 : 0)} s`);

/**
 * The child process of a started stdio transport. The SDK gives its pid but not its exit status,
 * which the bridge's answers name: read once from the transport's process field, checked to be a
 * ChildProcess (absent, the exit is reported as unknown).
 */
function processOf(t: StdioClientTransport): ChildProcess | undefined {
  const p: unknown = Reflect.get(t, "_process");
  return p instanceof ChildProcess ? p : undefined;
}

/** Calls `onText` with each stdout line that is not JSON (the SDK's reader skips those silently). */
function tapStdout(proc: ChildProcess, onText: (line: string) => void): void {
  let buf = "";
  proc.stdout?.on("data", (chunk: Buffer) => {
    buf += chunk.toString("utf8");
    for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
      const line = buf.slice(0, i).replace(/\r$/, "");
      buf = buf.slice(i + 1);
      if (!line.trim()) continue;
      if (!/^\s*[[{]/.test(line)) onText(line);
      else
        try {
          JSON.parse(line);
        } catch {
          onText(line);
        }
    }
    // A line longer than the SDK's read buffer is its error to report; keep only a tail here.
    if (buf.length > 1 << 20) buf = buf.slice(-4096);
  });
}

const progressTokenOf = (m: JSONRPCRequest): unknown => (m.params?._meta as { progressToken?: unknown } | undefined)?.progressToken;

export class BridgeSession {
  readonly transport: WebStandardStreamableHTTPServerTransport;
  /** A short name for log lines: the start of the session id. */
  readonly label: string;
  /** How many times this session's child was restarted. */
  restarts = 0;
  private child: StdioClientTransport | undefined;
  private proc: ChildProcess | undefined;
  private state: "up" | "replaying" | "down" | "closed" = "down";
  /** The client's requests the child has not answered: method and progress token. */
  private readonly pending = new Map<RequestId, { method: string; progressToken: unknown }>();
  /** What the client sent while a restarted child was being initialized again. */
  private queued: JSONRPCMessage[] = [];
  private init: JSONRPCRequest | undefined;
  private initialized = false;
  private replayId: string | undefined;
  private lastExit = "the stdio server exited";
  private crashes = 0;
  private startedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private readonly spec: ChildSpec;
  private readonly hooks: SessionHooks;

  // No parameter properties: Node runs cli/*.ts by stripping types, which cannot strip those.
  private constructor(spec: ChildSpec, hooks: SessionHooks) {
    this.spec = spec;
    this.hooks = hooks;
    // The id is made now (the transport hands it out at initialize), so the child's first lines already name it.
    const id = randomUUID();
    this.label = `session ${id.slice(0, 8)}`;
    this.transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: () => id, onsessioninitialized: () => hooks.opened(this) });
    this.transport.onmessage = (m) => this.fromClient(m);
    this.transport.onerror = (e) => hooks.log(`${this.label}: ${e.message}`);
    this.transport.onclose = () => void this.close();
  }

  /** A new session with its child started; throws (the spawn's error) when the child cannot start. */
  static async open(spec: ChildSpec, hooks: SessionHooks): Promise<BridgeSession> {
    const s = new BridgeSession(spec, hooks);
    await s.transport.start();
    await s.spawn();
    // A child that already exited has scheduled its restart (state "down"): that stays.
    if (s.child) s.state = "up";
    return s;
  }

  /** The pid of the child now running, if one is. */
  get pid(): number | undefined {
    return this.child?.pid ?? undefined;
  }

  private async spawn(): Promise<void> {
    const child = new StdioClientTransport({ ...this.spec, stderr: "pipe" });
    child.stderr?.pipe(this.hooks.stderr, { end: false });
    child.onmessage = (m) => this.fromChild(child, m);
    child.onerror = (e) => this.hooks.log(`${this.label}: the stdio server's stdout: ${e.message.split("\n")[0]}`);
    let exit = "exit code unknown";
    child.onclose = () => this.exited(child, exit);
    await child.start();
    const proc = processOf(child);
    proc?.once("exit", (code, signal) => {
      exit = signal ? `killed by ${signal}` : `exit code ${code}`;
    });
    if (proc)
      tapStdout(proc, (line) =>
        this.hooks.log(
          `${this.label}: the stdio server wrote text that is not MCP on stdout (stdout carries JSON-RPC only; its logs belong on stderr), ignored: ${JSON.stringify(line.slice(0, 200))}`,
        ),
      );
    this.child = child;
    this.proc = proc;
    this.startedAt = Date.now();
    this.hooks.log(`${this.label}: started the stdio server (pid ${child.pid})`);
  }

  private fromClient(m: JSONRPCMessage): void {
    if (this.state === "closed") return;
    if (isJSONRPCRequest(m)) {
      if (m.method === "initialize") this.init = m;
      if (this.state === "down") {
        this.answerError(m.id, `${this.lastExit}; retry once it is back`);
        return;
      }
      this.pending.set(m.id, { method: m.method, progressToken: progressTokenOf(m) });
      const name = typeof m.params?.name === "string" ? ` ${m.params.name}` : "";
      this.hooks.log(`${this.label}: → ${m.method}${name} (id ${JSON.stringify(m.id)})`);
    } else if (isJSONRPCNotification(m)) {
      if (m.method === "notifications/initialized") this.initialized = true;
      if (this.state === "down") return;
    } else if (this.state === "down") {
      this.hooks.log(`${this.label}: an answer to the stdio server's request ${JSON.stringify(m.id)} is dropped: the server that asked has exited`);
      return;
    }
    if (this.state === "replaying") this.queued.push(m);
    else this.toChild(m);
  }

  private toChild(m: JSONRPCMessage): void {
    const child = this.child;
    if (!child) return;
    child.send(m).catch((e: unknown) => {
      this.hooks.log(`${this.label}: could not write to the stdio server: ${e instanceof Error ? e.message : String(e)}`);
      if (isJSONRPCRequest(m) && this.pending.delete(m.id)) this.answerError(m.id, "the bridge could not write to the stdio server (it is exiting)");
    });
  }

  private fromChild(child: StdioClientTransport, m: JSONRPCMessage): void {
    if (child !== this.child || this.state === "closed") return;
    if (isJSONRPCResultResponse(m) || isJSONRPCErrorResponse(m)) {
      if (this.replayId !== undefined && m.id === this.replayId) {
        this.replayed(m);
        return;
      }
      const asked = m.id === undefined ? undefined : this.pending.get(m.id);
      if (!asked || m.id === undefined) {
        this.hooks.log(`${this.label}: dropped an answer of the stdio server to ${JSON.stringify(m.id)}, which no request in flight has`);
        return;
      }
      this.pending.delete(m.id);
      if (asked.method === "initialize" && isJSONRPCResultResponse(m)) this.negotiated(m.result.protocolVersion);
      this.toClient(m);
      return;
    }
    this.toClient(m, this.relatedRequest(m));
  }

  /** The client request a message of the child belongs with: its progress token's, else the one request in flight. */
  private relatedRequest(m: JSONRPCMessage): RequestId | undefined {
    if (isJSONRPCNotification(m) && m.method === "notifications/progress") {
      const token = m.params?.progressToken;
      for (const [id, p] of this.pending) if (p.progressToken !== undefined && p.progressToken === token) return id;
    }
    if (this.pending.size === 1) return this.pending.keys().next().value;
    return undefined;
  }

  /** The transport checks MCP-Protocol-Version against what it knows: the version the child chose is one. */
  private negotiated(version: unknown): void {
    if (typeof version === "string" && !SUPPORTED_PROTOCOL_VERSIONS.includes(version))
      this.transport.setSupportedProtocolVersions([...SUPPORTED_PROTOCOL_VERSIONS, version]);
  }

  private toClient(m: JSONRPCMessage, relatedRequestId?: RequestId): void {
    this.transport
      .send(m, relatedRequestId === undefined ? undefined : { relatedRequestId })
      .catch((e: unknown) => this.hooks.log(`${this.label}: could not deliver a message to the client: ${e instanceof Error ? e.message : String(e)}`));
  }

  private answerError(id: RequestId, message: string): void {
    this.toClient({ jsonrpc: "2.0", id, error: { code: BRIDGE_ERROR, message, data: { bridge: "stdio server unavailable" } } });
  }

  /** The child's process closed (`exit` says how): every request in flight is answered, and a restart is scheduled. */
  private exited(child: StdioClientTransport, exit: string): void {
    if (child !== this.child) return;
    this.child = undefined;
    this.proc = undefined;
    this.crashed(`the stdio server exited (${exit})`);
  }

  /** The child is gone (`why`): answer what waits, then restart after the backoff. */
  private crashed(why: string): void {
    if (this.state === "closed") return;
    const lived = Date.now() - this.startedAt;
    this.crashes = lived >= BACKOFF.stableMs ? 1 : this.crashes + 1;
    const delay = Math.min(BACKOFF.firstMs * 2 ** (this.crashes - 1), BACKOFF.maxMs);
    this.lastExit = `${why}; the bridge restarts it in ${seconds(delay)}`;
    this.state = "down";
    this.replayId = undefined;
    this.hooks.log(`${this.label}: ${this.lastExit}${this.crashes > 1 ? ` (crash ${this.crashes} in a row)` : ""}`);
    const waiting = [...this.pending.keys(), ...this.queued.filter(isJSONRPCRequest).map((q) => q.id)];
    this.pending.clear();
    this.queued = [];
    for (const id of new Set(waiting)) this.answerError(id, `${why} before it answered; the bridge restarts it in ${seconds(delay)}`);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.restart(), delay);
    this.timer.unref();
  }

  private async restart(): Promise<void> {
    if (this.state !== "down") return;
    this.restarts++;
    try {
      await this.spawn();
    } catch (e) {
      this.crashed(`the stdio server could not start again (${e instanceof Error ? e.message : String(e)})`);
      return;
    }
    if (this.state !== "down" || !this.child) return;
    if (!this.init) {
      this.state = "up";
      return;
    }
    // The new child is initialized as the first was, under an id of the bridge's own; its answer stays here.
    this.state = "replaying";
    this.replayId = `portcullis-bridge-replay-${this.restarts}`;
    const replay = this.replayId;
    this.toChild({ jsonrpc: "2.0", id: replay, method: "initialize", params: this.init.params });
    setTimeout(() => {
      if (this.state === "replaying" && this.replayId === replay) {
        this.hooks.log(`${this.label}: the restarted stdio server did not answer initialize within ${seconds(REPLAY_TIMEOUT_MS)}: stopping it`);
        void this.child?.close();
      }
    }, REPLAY_TIMEOUT_MS).unref();
  }

  private replayed(m: JSONRPCMessage): void {
    this.replayId = undefined;
    if (isJSONRPCErrorResponse(m)) {
      this.hooks.log(`${this.label}: the restarted stdio server refused the session's initialize (${m.error.message}): stopping it`);
      void this.child?.close();
      return;
    }
    if (this.initialized) this.toChild({ jsonrpc: "2.0", method: "notifications/initialized" });
    this.state = "up";
    this.hooks.log(`${this.label}: the stdio server is back (pid ${this.child?.pid}, restart ${this.restarts}); the session goes on`);
    for (const q of this.queued.splice(0)) this.toChild(q);
  }

  /** Ends the session: its streams closed, its child stopped (stdin closed, SIGTERM, SIGKILL), waited for. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.state = "closed";
      clearTimeout(this.timer);
      const child = this.child;
      const proc = this.proc;
      this.child = undefined;
      this.proc = undefined;
      await this.transport.close().catch(() => undefined);
      if (child) {
        await child.close().catch(() => undefined);
        if (proc && proc.exitCode === null && proc.signalCode === null)
          await new Promise<void>((done) => {
            proc.once("exit", () => done());
            setTimeout(done, 3000).unref();
          });
        this.hooks.log(`${this.label}: closed; stopped its stdio server (pid ${proc?.pid ?? child.pid})`);
      } else this.hooks.log(`${this.label}: closed`);
      this.hooks.closed(this);
    })();
    return this.closing;
  }

  /** At a second signal: the child killed at once. */
  kill(): void {
    this.proc?.kill("SIGKILL");
  }
}
