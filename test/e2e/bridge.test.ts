/**
 * `portcullis bridge`, the real CLI (bin/portcullis.mjs, started with async spawn in its own
 * process group), serving @modelcontextprotocol/server-everything in stdio mode, governed by a
 * gateway on the production build whose upstream is the bridge's URL with the bridge's secret
 * brokered from a `${NAME}` secret: tools listed and echo called through the gateway, a denied
 * tool refused by policy and never reaching the child (the bridge's request log has no line for
 * it), the bearer required (401 with a JSON body without it or with a wrong one, the request
 * served with it), Host/Origin other than loopback refused (403), listening on 127.0.0.1 only,
 * the secret file of mode 0600 and the secret in no output, log or command line, two concurrent
 * sessions with their own children and never each other's answers, sampling, roots and progress
 * relayed to the session that caused them, DELETE of a session stopping its child, a killed child answered clearly (the request in flight gets a JSON-RPC error naming
 * the signal) and restarted with a new pid while its session goes on (through the gateway too),
 * text on a child's stdout that is not MCP logged without harm, a child that keeps crashing
 * restarted with a growing backoff (no hot loop), and SIGTERM leaving no process of the bridge's
 * group. Owns its temporary directory and the processes it starts; all on loopback.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, groupMembers, isLoopbackListen, listeningOn, managed, procStat, root, startPortcullis } from "./harness.ts";
import { closeSessions, connect, sessionClient, texts } from "./mcp.ts";
import { raw } from "./raw.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const CLI = resolve(root, "bin/portcullis.mjs");
const EVERYTHING = resolve(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Bridge {
  child: ChildProcess;
  port: number;
  url: string;
  secretFile: string;
  logFile: string;
  out: () => string;
  err: () => string;
  stop(): Promise<void>;
}

const dir = mkdtempSync(join(tmpdir(), "portcullis-bridge-"));

/** Starts `portcullis bridge` for `command` (its own process group); resolves once it printed its URL. */
async function startBridge(name: string, command: string[]): Promise<Bridge> {
  const port = await freePort();
  const secretFile = join(dir, `${name}.secret`);
  const logFile = join(dir, `${name}.log`);
  const child = spawn(process.execPath, [CLI, "bridge", "--port", String(port), "--secret-file", secretFile, "--log", logFile, "--", ...command], {
    cwd: dir,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  const m = managed(child);
  const url = `http://127.0.0.1:${port}/mcp`;
  const deadline = Date.now() + 30_000;
  while (!out.includes(url)) {
    if (Date.now() > deadline || child.exitCode !== null) {
      await m.stop();
      throw new Error(`bridge ${name} did not start:\n${out}\n${err}`);
    }
    await sleep(100);
  }
  return { child, port, url, secretFile, logFile, out: () => out, err: () => err, stop: m.stop };
}

/** Waits (bounded) until `cond` holds; returns whether it did. */
async function until(cond: () => boolean, ms = 15_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
  return true;
}

/** The pid of the child the bridge started for `session` (a session id), the latest one, from its log lines. */
function childPid(b: Bridge, session: string): number | undefined {
  const lines = [...b.err().matchAll(new RegExp(`session ${session.slice(0, 8)}: (?:started the stdio server|the stdio server is back) \\(pid (\\d+)`, "g"))];
  const last = lines.at(-1);
  return last ? Number(last[1]) : undefined;
}

const alive = (pid: number) => {
  const st = procStat(pid);
  return st !== null && st.state !== "Z" && st.state !== "X";
};

/** An SDK v2 client straight on the bridge (a session of its own), with `bearer`. */
const direct = (b: Bridge, bearer: string) => connect("direct", b.url, bearer);

let bridge: Bridge;
let secret: string;
let gw: Awaited<ReturnType<typeof startPortcullis>>;

beforeAll(async () => {
  bridge = await startBridge("stdio", [process.execPath, EVERYTHING, "stdio"]);
  secret = readFileSync(bridge.secretFile, "utf8").trim();
  const port = await freePort();
  gw = await startPortcullis(
    `
mode: enforce
actor: local:e2e
auth:
  audience: http://127.0.0.1:${port}
egress:
  allow_loopback: true
upstreams:
  - name: stdio
    url: ${bridge.url}
    timeout: 30s
    headers:
      Authorization: "Bearer \${BRIDGE_STDIO_SECRET}"
mappings:
  stdio:
    tools:
      echo: { effect: read_only }
      get-sum: { effect: read_only }
policy:
  rules:
    - id: no-sums
      match: { upstream: stdio, tool: get-sum }
      decision: deny
      reason: sums are not for agents here
      owner: the e2e suite
`,
    port,
    { BRIDGE_STDIO_SECRET: secret },
  );
}, 180_000);

afterAll(async () => {
  await closeSessions();
  await Promise.allSettled([gw?.stop(), bridge?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe("portcullis bridge behind a gateway", () => {
  it("listens on 127.0.0.1 only; the secret is in a 0600 file and in no output, log or command line", async () => {
    const addrs = listeningOn(bridge.port);
    expect(addrs.length).toBeGreaterThan(0);
    expect(addrs.every(isLoopbackListen)).toBe(true);
    expect(statSync(bridge.secretFile).mode & 0o777).toBe(0o600);
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // What the person is told: the config snippet names the secret, the dev line reads the file.
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the snippet quotes the ${NAME} reference literally
    expect(bridge.out()).toContain('Authorization: "Bearer ${BRIDGE_STDIO_SECRET}"');
    expect(bridge.out()).toContain(`export BRIDGE_STDIO_SECRET="$(cat ${bridge.secretFile})"`);
    const pids = groupMembers(bridge.child.pid!);
    expect(pids.length).toBeGreaterThan(0);
    for (const pid of pids) expect(readFileSync(`/proc/${pid}/cmdline`, "utf8")).not.toContain(secret);
    for (const text of [bridge.out(), bridge.err(), readFileSync(bridge.logFile, "utf8"), gw.logs()]) expect(text).not.toContain(secret);
  });

  it("asks for the exact bearer (401 with a JSON body), refuses a foreign Host or Origin (403), serves /mcp with the secret", async () => {
    const init = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
    });
    const base = { "content-type": "application/json", accept: "application/json, text/event-stream" };
    const auths: Record<string, string>[] = [{}, { authorization: "Bearer wrong" }, { authorization: `Bearer ${secret}x` }, { authorization: secret }];
    for (const auth of auths) {
      const r = await raw(bridge.url, "POST", { ...base, ...auth }, init);
      expect(r.status, JSON.stringify(auth).replace(secret, "<secret>")).toBe(401);
      expect(JSON.parse(r.body).error).toBe("unauthorized");
      expect(r.headers["www-authenticate"]).toMatch(/^Bearer /);
    }
    const good = { ...base, authorization: `Bearer ${secret}` };
    const rebound = await raw(bridge.url, "POST", { ...good, host: `evil.example:${bridge.port}` }, init);
    expect(rebound.status).toBe(403);
    expect(JSON.parse(rebound.body).error.message).toContain("evil.example");
    const cross = await raw(bridge.url, "POST", { ...good, origin: "https://evil.example" }, init);
    expect(cross.status).toBe(403);
    const ok = await raw(bridge.url, "POST", good, init);
    expect(ok.status).toBe(200);
    expect(ok.body).toContain('"serverInfo"');
    const sid = ok.headers["mcp-session-id"] as string;
    expect(sid).toBeTruthy();
    // A session of its own, with a child of its own: DELETE stops it.
    expect(await until(() => childPid(bridge, sid) !== undefined)).toBe(true);
    const pid = childPid(bridge, sid)!;
    expect(alive(pid)).toBe(true);
    expect((await raw(bridge.url, "DELETE", { ...good, "mcp-session-id": sid })).status).toBe(200);
    expect(await until(() => !alive(pid))).toBe(true);
    expect((await raw(bridge.url, "POST", { ...good, "mcp-session-id": sid }, init)).status).toBe(404);
    // Not a session, not initialize (the gateway's 2026-07-28 probe): a 400, which it reads as a 2025-11-25 server.
    const discover = await raw(bridge.url, "POST", good, JSON.stringify({ jsonrpc: "2.0", id: 2, method: "server/discover", params: {} }));
    expect(discover.status).toBe(400);
    expect(JSON.parse(discover.body).error.message).toContain("initialize first");
  });

  it("the gateway lists the bridged tools, calls echo, and refuses a denied tool before it reaches the stdio server", async () => {
    const client = await sessionClient("agent", gw.url);
    const { tools } = await client.listTools();
    const names = tools.map((t: Any) => t.name);
    expect(names).toContain("echo");
    // An unconditional deny rule hides the tool from the list too.
    expect(names).not.toContain("get-sum");
    const echoed = await client.callTool({ name: "echo", arguments: { message: "through the bridge" } });
    expect(echoed.isError ?? false).toBe(false);
    expect(texts(echoed)).toContain("through the bridge");
    const denied = await client.callTool({ name: "get-sum", arguments: { a: 1, b: 2 } });
    expect(denied.isError).toBe(true);
    expect(texts(denied), texts(denied)).toContain("no-sums");
    // The bridge logs every request it relays: echo reached the child, get-sum never did.
    expect(bridge.err()).toMatch(/→ tools\/call echo \(id/);
    expect(bridge.err()).not.toMatch(/→ tools\/call get-sum/);
    expect(bridge.err()).toMatch(/→ tools\/list/);
  });

  it("two concurrent sessions have their own children and never get each other's answers", async () => {
    const a = await direct(bridge, secret);
    const b = await direct(bridge, secret);
    try {
      const calls = Array.from({ length: 12 }, (_, i) => {
        const [who, c] = i % 2 ? (["b", b] as const) : (["a", a] as const);
        return c.client.callTool({ name: "echo", arguments: { message: `${who}-${i}` } }).then((r: Any) => ({ want: `${who}-${i}`, got: texts(r) }));
      });
      for (const { want, got } of await Promise.all(calls)) expect(got).toBe(`Echo: ${want}`);
      const sa = (a.client.transport as Any).sessionId as string;
      const sb = (b.client.transport as Any).sessionId as string;
      expect(sa).not.toBe(sb);
      const [pa, pb] = [childPid(bridge, sa), childPid(bridge, sb)];
      expect(pa).toBeDefined();
      expect(pb).toBeDefined();
      expect(pa).not.toBe(pb);
      expect(procStat(pa!)?.ppid).toBe(bridge.child.pid);
      expect(procStat(pb!)?.ppid).toBe(bridge.child.pid);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it("server→client requests and progress reach the session that caused them (sampling, roots, progress)", async () => {
    const client = new Client({ name: "relay", version: "1" }, { versionNegotiation: { mode: "legacy" }, capabilities: { sampling: {}, roots: {} } });
    client.setRequestHandler("sampling/createMessage", async () => ({
      model: "e2e",
      role: "assistant",
      content: { type: "text", text: "sampled by the client" },
    }));
    client.setRequestHandler("roots/list", async () => ({ roots: [{ uri: "file:///bridge/e2e", name: "bridge-root" }] }));
    const transport = new StreamableHTTPClientTransport(new URL(bridge.url), { requestInit: { headers: { authorization: `Bearer ${secret}` } } });
    await client.connect(transport);
    try {
      const sampled = await client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "hello", maxTokens: 10 } });
      expect(JSON.stringify(sampled.content)).toContain("sampled by the client");
      const roots = await client.callTool({ name: "get-roots-list", arguments: {} });
      expect(JSON.stringify(roots.content)).toContain("file:///bridge/e2e");
      const progress: number[] = [];
      await client.callTool(
        { name: "trigger-long-running-operation", arguments: { duration: 1, steps: 3 } },
        { onprogress: (p: Any) => progress.push(p.progress) },
      );
      expect(progress.length).toBeGreaterThanOrEqual(2);
    } finally {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    }
  });

  it("a killed child: the request in flight gets a JSON-RPC error naming it, the child is restarted (new pid) and the session goes on", async () => {
    const s = await direct(bridge, secret);
    try {
      const sid = (s.client.transport as Any).sessionId as string;
      expect((await s.client.callTool({ name: "echo", arguments: { message: "before" } })).content).toBeTruthy();
      const pid = childPid(bridge, sid)!;
      expect(alive(pid)).toBe(true);
      // A call in flight (10 s of work) when the child dies: answered at once with the exit, never left hanging.
      const started = Date.now();
      const inFlight = s.client.callTool({ name: "trigger-long-running-operation", arguments: { duration: 10, steps: 5 } }).then(
        () => "answered",
        (e: Error) => e.message,
      );
      await sleep(500);
      process.kill(pid, "SIGKILL");
      const failure = await inFlight;
      expect(Date.now() - started).toBeLessThan(8000);
      expect(failure).toContain("the stdio server exited (killed by SIGKILL)");
      expect(failure).toContain("restarts it in");
      // The next calls: a clear error while it restarts, then the answer, within a bounded wait.
      let answer = "";
      const deadline = Date.now() + 15_000;
      while (!answer && Date.now() < deadline) {
        try {
          answer = texts(await s.client.callTool({ name: "echo", arguments: { message: "after" } }));
        } catch (e) {
          expect((e as Error).message).toMatch(/the stdio server exited \(killed by SIGKILL\)/);
          await sleep(200);
        }
      }
      expect(answer).toBe("Echo: after");
      const again = childPid(bridge, sid)!;
      expect(again).not.toBe(pid);
      expect(alive(again)).toBe(true);
      expect(alive(pid)).toBe(false);
      expect(bridge.err()).toContain(`session ${sid.slice(0, 8)}: the stdio server is back (pid ${again}, restart 1); the session goes on`);
    } finally {
      await s.close();
    }
    // The gateway's own session with the bridge: its child killed too, and the gateway's next calls come through.
    const agent = await sessionClient("agent-after-crash", gw.url);
    const gatewayChildren = groupMembers(bridge.child.pid!).filter((p) => p !== bridge.child.pid && procStat(p)?.ppid === bridge.child.pid);
    expect(gatewayChildren.length).toBeGreaterThan(0);
    for (const p of gatewayChildren) process.kill(p, "SIGKILL");
    let through = "";
    const deadline = Date.now() + 20_000;
    while (!through && Date.now() < deadline) {
      const r: Any = await agent
        .callTool({ name: "echo", arguments: { message: "gateway after crash" } })
        .catch((e: Error) => ({ isError: true, error: e.message }));
      if (!r.isError) through = texts(r);
      else await sleep(300);
    }
    expect(through).toBe("Echo: gateway after crash");
  });

  it("a child that writes text that is not MCP on stdout is logged and still served; one that keeps crashing is not restarted in a hot loop", async () => {
    const chatty = await startBridge("chatty", [
      process.execPath,
      "--input-type=module",
      "-e",
      `console.log("hello from a chatty server"); await import(${JSON.stringify(pathToFileURL(EVERYTHING).href)});`,
    ]);
    const crashing = await startBridge("crashing", [process.execPath, "-e", "process.exit(3)"]);
    try {
      const c = await direct(chatty, readFileSync(chatty.secretFile, "utf8").trim());
      try {
        expect((await c.client.listTools()).tools.length).toBeGreaterThan(0);
      } finally {
        await c.close();
      }
      expect(chatty.err()).toContain('not MCP on stdout (stdout carries JSON-RPC only; its logs belong on stderr), ignored: "hello from a chatty server"');
      expect(chatty.child.exitCode).toBeNull();

      const err = await direct(crashing, readFileSync(crashing.secretFile, "utf8").trim()).then(
        (s) => s.close().then(() => "connected"),
        (e: Error) => e.message,
      );
      expect(err).toContain("the stdio server exited (exit code 3)");
      await sleep(3000);
      const starts = (crashing.err().match(/started the stdio server/g) ?? []).length;
      // 250 ms, 500 ms, 1 s, 2 s: at most 4 restarts after the first start in 3 s, however fast it dies.
      expect(starts).toBeGreaterThanOrEqual(3);
      expect(starts).toBeLessThanOrEqual(5);
      expect(crashing.err()).toMatch(/restarts it in 1 s \(crash 3 in a row\)/);
      expect(crashing.child.exitCode).toBeNull();
    } finally {
      await Promise.all([chatty.stop(), crashing.stop()]);
    }
  });

  it("SIGTERM stops every child, then the bridge: no process of its group is left", async () => {
    const s = await direct(bridge, secret);
    await s.client.listTools();
    const pid = bridge.child.pid!;
    const before = groupMembers(pid);
    // The bridge, the child of this session and the gateway's.
    expect(before.length).toBeGreaterThanOrEqual(3);
    const exited = new Promise<number | null>((done) => bridge.child.once("exit", (code) => done(code)));
    process.kill(pid, "SIGTERM");
    expect(await Promise.race([exited, sleep(15_000).then(() => "timeout")])).toBe(0);
    expect(await until(() => before.every((p) => !alive(p)), 5000)).toBe(true);
    expect(groupMembers(pid)).toEqual([]);
    expect(bridge.err()).toContain("SIGTERM: stopping");
    await s.close();
  });
});
