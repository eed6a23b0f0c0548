/**
 * The `portcullis` command end to end: `start` and its demo upstream listen on loopback only;
 * `token mint --port/--gateway` mints for the gateway it names and a grant for another gateway
 * gets a readable 401; the unauthenticated mode refuses a forged loopback Host from a
 * non-loopback peer; the guide `dev` prints for configs the demo never has (auth.required, another
 * signing-key secret), against a stand-in that answers /healthz. Owns the processes it starts (a `start` process group, demo upstreams,
 * gateways) and a temporary dev key (PORTCULLIS_DEV_KEY_FILE), so the repo's .portcullis is never
 * touched. Must never: leave a process running, or send traffic anywhere but this machine's own
 * addresses.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, request } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startDemoUpstream, startGateway } from "../../cli/gateway-start.ts";
import { devGuide } from "../../cli/local.ts";
import { loadConfig } from "../../src/config/load.ts";
import { freePort, isLoopbackListen, listeningOn, root, startPortcullis, waitFor } from "./harness.ts";

const CLI = join(root, "bin", "portcullis.mjs");
const EVERYTHING = join(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const tmp = mkdtempSync(join(tmpdir(), "portcullis-cli-e2e-"));
const keyFile = join(tmp, "dev-signing-key.json");
const repoKey = join(root, ".portcullis", "dev-signing-key.json");
const repoKeyBefore = existsSync(repoKey) ? statSync(repoKey).mtimeMs : null;

/** This machine's own non-loopback addresses (link-local IPv6 with its zone), for "is it reachable from the network?". */
function ownAddresses(): { address: string; family: "IPv4" | "IPv6" }[] {
  const out: { address: string; family: "IPv4" | "IPv6" }[] = [];
  for (const [name, list] of Object.entries(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.internal) continue;
      const family = a.family === "IPv6" ? "IPv6" : "IPv4";
      out.push({ address: family === "IPv6" && /^fe80:/i.test(a.address) ? `${a.address}%${name}` : a.address, family });
    }
  }
  return out;
}
const own = ownAddresses();
if (own.length === 0) console.log("cli.test: this machine has no non-loopback address; only the listening sockets are checked");

/** Connect to host:port: "open", "refused", or another failure code. */
function probe(host: string, port: number): Promise<string> {
  return new Promise((res) => {
    const s = connect({ host, port, timeout: 3000 });
    s.once("connect", () => {
      s.destroy();
      res("open");
    });
    s.once("timeout", () => {
      s.destroy();
      res("timeout");
    });
    s.once("error", (e: NodeJS.ErrnoException) => res(e.code === "ECONNREFUSED" ? "refused" : (e.code ?? e.message)));
  });
}

/** The upstream on `port` answers on 127.0.0.1, listens on loopback only, and refuses every own non-loopback address. */
async function expectLoopbackOnly(port: number) {
  expect(await probe("127.0.0.1", port)).toBe("open");
  const sockets = listeningOn(port);
  expect(sockets.length, `listening sockets on ${port}`).toBeGreaterThan(0);
  expect(
    sockets.filter((a) => !isLoopbackListen(a)),
    `non-loopback listening sockets on ${port}`,
  ).toEqual([]);
  for (const { address } of own) expect(await probe(address, port), `${address}:${port}`).toBe("refused");
}

function stopChild(child: ChildProcess, group = false): Promise<void> {
  return new Promise((res) => {
    if (child.exitCode !== null || child.signalCode !== null) return res();
    const kill = (sig: NodeJS.Signals) => {
      try {
        if (group && child.pid) process.kill(-child.pid, sig);
        else child.kill(sig);
      } catch {
        /* gone */
      }
    };
    const t = setTimeout(() => kill("SIGKILL"), 8000);
    child.once("exit", () => {
      clearTimeout(t);
      res();
    });
    kill("SIGTERM");
  });
}

/** Runs the CLI; resolves to its exit code and output (bounded at 60 s). */
function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      cwd: tmp,
      env: { ...process.env, PORTCULLIS_DEV_KEY_FILE: keyFile, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d;
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d;
    });
    const t = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("exit", (code) => {
      clearTimeout(t);
      res({ code, stdout: stdout.trim(), stderr: stderr.trim() });
    });
  });
}

const MCP_H = { "content-type": "application/json", accept: "application/json, text/event-stream" };
const initialize = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "cli-e2e", version: "1" } },
});

afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
});

/** One 2026-07-28 tools/call to `origin`/mcp with no grant (the loopback actor), as the curl line `start` prints; the JSON-RPC result. */
async function actorCall(origin: string, name: string, args: Record<string, unknown>): Promise<{ isError?: boolean; content: { text?: string }[] }> {
  const r = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: { ...MCP_H, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": name },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name, arguments: args, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
    }),
    signal: AbortSignal.timeout(30_000),
  });
  const body = await r.text();
  const json = (r.headers.get("content-type") ?? "").includes("text/event-stream")
    ? JSON.parse(
        body
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trim())
          .filter((l) => l.includes('"id":1'))
          .at(-1) ?? "{}",
      )
    : JSON.parse(body);
  expect(json.result, `tools/call ${name}: ${body.slice(0, 300)}`).toBeDefined();
  return json.result;
}

/**
 * What `start` prints once its gateway is up, followed step by step against that gateway: the demo
 * policy (get-sum over 100 held, get-env denied, the rest allowed), the approver grant (for this
 * gateway, team local, never on a command line) signing in to the console (POST /console/login with
 * the gateway's Origin) where the loopback actor's hold is listed, approval through
 * POST /v1/holds/:id/resolve with that grant, the retry running once, and `ledger verify --url`.
 */
async function expectDemoGuideWorks(origin: string, logs: () => string) {
  // The guide follows the classification banner (bounded wait: both come once /healthz answers).
  const TOKEN = /^(eyJ[\w-]+\.[\w-]+\.[\w-]+)$/m;
  for (let i = 0; i < 240 && !(TOKEN.test(logs()) && logs().includes("ledger verify --url")); i++) await new Promise((r) => setTimeout(r, 500));
  const out = logs();
  const token = TOKEN.exec(out)?.[1];
  expect(token, `no approver grant in start's output:\n${out}`).toBeDefined();
  if (!token) return;
  expect(out).toContain(`Console: ${origin}/console`);
  expect(out).toContain(`Sign in at ${origin}/console/login by pasting this approver grant`);
  expect(out).toContain(`npx portcullis ledger verify --url ${origin}`);
  expect(out).toContain("npx @modelcontextprotocol/inspector");
  // Shown on the terminal only: no process on this machine carries it in its argv.
  expect(execFileSync("ps", ["-A", "-o", "args="], { encoding: "utf8" })).not.toContain(token.slice(-40));
  const claims = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
  expect(claims).toMatchObject({ iss: origin, aud: origin, sub: "human:demo-approver", team: "local", roles: ["approver", "auditor"] });

  // The policy: get-env denied with its reason (and not listed), a small sum allowed, a big one held.
  const denied = await actorCall(origin, "get-env", {});
  expect(denied.isError).toBe(true);
  expect(denied.content[0]?.text).toMatch(/^Blocked by Portcullis: rule demo-no-env: get-env returns the demo server's whole environment, secrets included/);
  const list = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: { ...MCP_H, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/list",
      params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
    }),
  }).then((r) => r.text());
  expect(list).toContain('"get-sum"');
  expect(list).not.toContain('"get-env"');
  expect((await actorCall(origin, "get-sum", { a: 1, b: 2 })).content[0]?.text).toBe("The sum of 1 and 2 is 3.");
  const held = await actorCall(origin, "get-sum", { a: 60, b: 50 });
  expect(held.isError).toBe(true);
  expect(held.content[0]?.text).toContain("this call needs approval (rule demo-big-sums");
  const holdId = /held as (local~[0-9a-f]+)/.exec(held.content[0]?.text ?? "")?.[1];
  expect(holdId, held.content[0]?.text).toBeDefined();
  expect((await actorCall(origin, "get-sum", { a: 60, b: 50 })).content[0]?.text).toContain(`held as ${holdId}`);

  // The printed grant signs in to the console, whose pending holds show the actor's hold.
  const login = await fetch(`${origin}/console/login`, {
    method: "POST",
    redirect: "manual",
    headers: { origin, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token }).toString(),
  });
  expect(login.status).toBe(303);
  expect(login.headers.get("location")).toBe("/console");
  const cookie = /^(__Host-portcullis=[^;]+)/.exec(login.headers.get("set-cookie") ?? "")?.[1];
  expect(cookie).toBeDefined();
  const page = await fetch(`${origin}/console`, { headers: { cookie: cookie ?? "" }, redirect: "manual" });
  expect(page.status).toBe(200);
  const html = await page.text();
  expect(html).toContain(holdId);
  expect(html).toContain("get-sum");
  expect(html).toContain("human:demo-approver");

  // Approve with the same grant (another principal than the actor, so not self-approval), then the retry runs once.
  const bearer = { authorization: `Bearer ${token}` };
  const hold = (await (await fetch(`${origin}/v1/holds/${encodeURIComponent(holdId ?? "")}`, { headers: bearer })).json()) as {
    hold: { principal: string; actionHash: string };
  };
  expect(hold.hold.principal).toBe("local:demo");
  const resolved = await fetch(`${origin}/v1/holds/${encodeURIComponent(holdId ?? "")}/resolve`, {
    method: "POST",
    headers: { ...bearer, "content-type": "application/json" },
    body: JSON.stringify({ decision: "approve", reason: "cli e2e: the demo recipe", action_hash: hold.hold.actionHash }),
  });
  expect(resolved.status, await resolved.clone().text()).toBe(200);
  const ran = await actorCall(origin, "get-sum", { a: 60, b: 50 });
  expect(ran.isError).toBeFalsy();
  expect(ran.content[0]?.text).toBe("The sum of 60 and 50 is 110.");
  const ranMeta = (ran as { _meta?: Record<string, { seq: number }> })._meta?.["portcullis/receipt"];
  const again = await actorCall(origin, "get-sum", { a: 60, b: 50 });
  expect(again.content[0]?.text).toBe("The sum of 60 and 50 is 110.");
  // Replayed, not run again: the same receipt.
  expect((again as { _meta?: Record<string, { seq: number }> })._meta?.["portcullis/receipt"]).toEqual(ranMeta);
  const approved = (await (await fetch(`${origin}/v1/holds/${encodeURIComponent(holdId ?? "")}`, { headers: bearer })).json()) as { hold: { state?: string } };
  expect(approved.hold.state).toBe("consumed");

  // Step 3's last line: the ledger verifies with that grant, given in PORTCULLIS_TOKEN.
  const verify = await cli(["ledger", "verify", "--url", origin], { PORTCULLIS_TOKEN: token });
  expect(verify.code, `${verify.stdout}\n${verify.stderr}`).toBe(0);
  expect(verify.stdout).toMatch(/VALID/);
  expect(verify.stdout).toMatch(/\blocal\s+\d+/);
}

describe("the demo upstream listens on loopback only", () => {
  it("startDemoUpstream (what `start` runs): 127.0.0.1 answers; no own non-loopback address does", async () => {
    const port = await freePort();
    const demo: ChildProcess = startDemoUpstream({ port, stdio: ["ignore", "ignore", "pipe"] });
    demo.stderr?.resume();
    try {
      await waitFor(`http://127.0.0.1:${port}/mcp`, 30_000, (r) => r.status > 0);
      await expectLoopbackOnly(port);
    } finally {
      await stopChild(demo);
    }
  });

  it("control: server-everything started bare (as `start` used to) listens on every interface, so the probes above can see exposure", async () => {
    const port = await freePort();
    const bare = spawn(process.execPath, [EVERYTHING, "streamableHttp"], {
      cwd: root,
      env: { ...process.env, PORT: String(port) },
      stdio: ["ignore", "ignore", "pipe"],
    });
    bare.stderr?.resume();
    try {
      await waitFor(`http://127.0.0.1:${port}/mcp`, 30_000, (r) => r.status > 0);
      expect(listeningOn(port).filter((a) => !isLoopbackListen(a)).length).toBeGreaterThan(0);
      for (const { address } of own) expect(await probe(address, port), `${address}:${port}`).toBe("open");
    } finally {
      await stopChild(bare);
    }
  });

  it("`portcullis start`: the gateway reaches its demo upstream, neither listens beyond loopback, and the printed demo guide works as it says", async () => {
    const [port, upPort] = [await freePort(), await freePort()];
    const persist = mkdtempSync(join(tmp, "start-state-"));
    const start = spawn(process.execPath, [CLI, "start", "--port", String(port), "--upstream-port", String(upPort), "--persist-to", persist], {
      cwd: root,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, PORTCULLIS_DEV_KEY_FILE: keyFile, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" },
    });
    let logs = "";
    start.stdout?.on("data", (d: Buffer) => {
      logs += d;
    });
    start.stderr?.on("data", (d: Buffer) => {
      logs += d;
    });
    try {
      await waitFor(`http://127.0.0.1:${port}/readyz`, 120_000).catch((e: Error) => {
        throw new Error(`${e.message}\n${logs}`);
      });
      const ready = (await (await fetch(`http://127.0.0.1:${port}/readyz`)).json()) as {
        ok: boolean;
        status: string;
        upstreams: { name: string; ok: boolean }[];
      };
      expect(ready).toMatchObject({ ok: true, status: "ready", upstreams: [{ name: "everything", ok: true }] });
      await expectLoopbackOnly(upPort);
      await expectLoopbackOnly(port);
      await expectDemoGuideWorks(`http://127.0.0.1:${port}`, () => logs);
    } finally {
      await stopChild(start, true);
    }
    // Stopping `start` stops both (bounded wait: its children exit just after it).
    for (const p of [upPort, port]) {
      let state = "open";
      for (let i = 0; i < 40 && state === "open"; i++) {
        state = await probe("127.0.0.1", p);
        if (state === "open") await new Promise((r) => setTimeout(r, 250));
      }
      expect(state, `127.0.0.1:${p} after stop`).toBe("refused");
    }
  }, 300_000);
});

describe("token mint for the gateway it names", () => {
  let port = 0;
  let gw: Awaited<ReturnType<typeof startPortcullis>>;
  let origin = "";
  let first = "";

  beforeAll(async () => {
    port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    // The first mint creates the dev key (in the temporary file); the gateway is then started with it, as `portcullis dev` does.
    const m = await cli(["token", "mint", "--sub", "agent:cli", "--tools", "*", "--port", String(port)]);
    expect(m.stderr).toBe("");
    expect(m.code).toBe(0);
    first = m.stdout;
    expect(existsSync(keyFile)).toBe(true);
    gw = await startPortcullis(
      `
actor: local:cli
egress:
  allow_loopback: true
upstreams:
  - name: everything
    url: ${inject("everythingUrl")}
    timeout: 30s
`,
      port,
      { PORTCULLIS_SIGNING_KEY: readFileSync(keyFile, "utf8") },
    );
  });
  afterAll(async () => {
    await gw?.stop();
  });

  it("--port N: a grant the gateway on N accepts, and a tool call through it succeeds", async () => {
    const payload = JSON.parse(Buffer.from(first.split(".")[1]!, "base64url").toString()) as { iss: string; aud: string };
    expect(payload).toMatchObject({ iss: origin, aud: origin });
    const client = new Client({ name: "cli-e2e", version: "1" }, { versionNegotiation: { mode: "legacy" } });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url), { requestInit: { headers: { authorization: `Bearer ${first}` } } });
    await client.connect(transport);
    try {
      expect((await client.callTool({ name: "echo", arguments: { message: "minted for this port" } })).content).toEqual([
        { type: "text", text: "Echo: minted for this port" },
      ]);
    } finally {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    }
  });

  it("a grant minted for 8787 (the default) gets a 401 that names both issuers and how to mint; following it works", async () => {
    const other = await cli(["token", "mint", "--sub", "agent:cli", "--tools", "*"]);
    expect(other.code).toBe(0);
    const r = await fetch(gw.url, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${other.stdout}` }, body: initialize });
    expect(r.status).toBe(401);
    const expected = `token iss "http://127.0.0.1:8787" is not this gateway's issuer (expected "${origin}"); mint with: npx portcullis token mint --port ${port} (or --gateway ${origin})`;
    const challenge = r.headers.get("www-authenticate") ?? "";
    expect(await r.json()).toEqual({ error: "invalid_token", error_description: expected });
    expect(challenge).toContain(`error="invalid_token", error_description="${expected.replaceAll('"', "'")}"`);
    for (const seg of other.stdout.split(".")) expect(challenge).not.toContain(seg.slice(0, 24));
    // The hint's other spelling: --gateway with the gateway's /mcp URL.
    const again = await cli(["token", "mint", "--sub", "agent:cli", "--tools", "*", "--gateway", gw.url]);
    expect(again.code).toBe(0);
    const ok = await fetch(gw.url, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${again.stdout}` }, body: initialize });
    expect(ok.status).toBe(200);
    expect(ok.headers.get("mcp-session-id")).toBeTruthy();
    await ok.text();
  });

  it("refuses --aud together with --port or --gateway, and the help names the flags", async () => {
    for (const extra of [
      ["--port", String(port)],
      ["--gateway", origin],
    ]) {
      const r = await cli(["token", "mint", "--sub", "agent:cli", "--aud", origin, ...extra]);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr).toContain(`--aud and ${extra[0]} both name the gateway`);
    }
    const help = await cli([]);
    expect(help.code).toBe(0);
    expect(help.stderr).toContain("[--port N | --gateway URL | --aud URL]");
    expect(help.stderr).toContain("--port N       the local gateway on port N: iss = aud = http://127.0.0.1:N");
  });

  it("the unauthenticated actor still works from a loopback peer", async () => {
    const r = await fetch(gw.url, { method: "POST", headers: MCP_H, body: initialize });
    expect(r.status).toBe(200);
    await r.text();
  });

  it("never touched the repo's .portcullis dev key", () => {
    expect(existsSync(repoKey) ? statSync(repoKey).mtimeMs : null).toBe(repoKeyBefore);
  });
});

const ownV4 = own.find((a) => a.family === "IPv4")?.address;
describe("a dev gateway exposed beyond loopback", () => {
  it.runIf(ownV4 !== undefined)("without auth.audience it refuses to serve anyone, a forged loopback Host included", async () => {
    const port = await freePort();
    const persist = mkdtempSync(join(tmp, "exposed-state-"));
    // No signing key, an upstream that is never contacted: the gateway can serve nobody but the loopback actor.
    const child: ChildProcess = startGateway({
      ip: ownV4,
      port,
      persistTo: persist,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      configText: `
actor: local:exposed
upstreams:
  - name: remote
    url: https://upstream.example.com/mcp
`,
    });
    let logs = "";
    child.stdout?.on("data", (d: Buffer) => {
      logs += d;
    });
    child.stderr?.on("data", (d: Buffer) => {
      logs += d;
    });
    try {
      await waitFor(`http://${ownV4}:${port}/healthz`, 90_000).catch((e: Error) => {
        throw new Error(`${e.message}\n${logs}`);
      });
      const answer = await new Promise<{ status: number; body: string }>((res, rej) => {
        const req = request({ host: ownV4, port, method: "POST", path: "/mcp", headers: { ...MCP_H, host: `127.0.0.1:${port}` } }, (r) => {
          let body = "";
          r.on("data", (d: Buffer) => {
            body += d;
          });
          r.on("end", () => res({ status: r.statusCode ?? 0, body }));
        });
        req.on("error", rej);
        req.setTimeout(10_000, () => req.destroy(new Error("timed out")));
        req.end(initialize);
      });
      // Started beyond loopback without auth.audience, it does not know which URL is its own:
      // it serves nothing (a forged loopback Host included) and says what to set.
      expect(answer.status).toBe(503);
      expect(JSON.parse(answer.body)).toEqual({
        ok: false,
        error: "configuration invalid",
        problems: [`the gateway listens on http://${ownV4}:${port}, beyond loopback: set auth.audience to the URL clients use (its grants' audience)`],
      });
    } finally {
      await stopChild(child, true);
    }
  });
});

describe("the guide `portcullis dev` prints (devGuide), for configs the demo never has", () => {
  /** What devGuide prints for `yaml` once a stand-in gateway (only /healthz, on loopback) answers. */
  async function guide(yaml: (origin: string) => string): Promise<{ out: string; origin: string }> {
    const server = createServer((req, res) => res.writeHead(req.url === "/healthz" ? 200 : 404).end());
    await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
    const port = (server.address() as AddressInfo).port;
    const origin = `http://127.0.0.1:${port}`;
    const before = process.env.PORTCULLIS_DEV_KEY_FILE;
    process.env.PORTCULLIS_DEV_KEY_FILE = keyFile;
    let out = "";
    try {
      await devGuide({ file: "team.yaml", cfg: loadConfig(yaml(origin), {}), port, origin, print: (s) => (out += s) });
    } finally {
      if (before === undefined) delete process.env.PORTCULLIS_DEV_KEY_FILE;
      else process.env.PORTCULLIS_DEV_KEY_FILE = before;
      await new Promise<void>((ok) => server.close(() => ok()));
    }
    return { out, origin };
  }
  const upstreamAndPolicy = `egress: { allow_loopback: true }
mode: enforce
policy:
  rules:
    - { id: big-writes, match: { upstream: notes, tool: write }, when: "size(args.text) > 100", decision: require_approval, reason: long notes need an approver }
    - { id: no-wipe, match: { upstream: notes, tool: wipe }, decision: deny, reason: never }
upstreams:
  - { name: notes, url: "http://127.0.0.1:9/mcp?key=not-printed" }
`;

  it("auth.required: the rules named, an agent grant to mint (not a curl), an approver grant for the configured audience within max_token_lifetime", async () => {
    const { out, origin } = await guide((o) => `auth: { required: true, audience: "${o}", max_token_lifetime: 1h }\n${upstreamAndPolicy}`);
    expect(out).toContain("portcullis: the gateway serves team.yaml (mode enforce; 2 policy rules):");
    expect(out).toContain("  upstreams  notes (http://127.0.0.1:9/mcp?…)");
    expect(out).not.toContain("not-printed");
    expect(out).toContain("  held       rule big-writes (notes/write) when size(args.text) > 100: long notes need an approver");
    expect(out).toContain("  denied     rule no-wipe (notes/wipe): never");
    expect(out).toContain("  agents     every MCP client needs a grant (auth.required)");
    expect(out).toContain(`npx portcullis token mint --sub agent:me --team local --tools '*' --aud ${origin}`);
    expect(out).not.toContain("curl -s");
    expect(out).toContain('A call the policy holds (big-writes) answers "Blocked by Portcullis');
    expect(out).toContain(`Sign in at ${origin}/console/login by pasting this approver grant`);
    const token = /^(eyJ[\w-]+\.[\w-]+\.[\w-]+)$/m.exec(out)?.[1];
    expect(token, out).toBeDefined();
    const claims = JSON.parse(Buffer.from(token!.split(".")[1]!, "base64url").toString()) as {
      aud: string;
      iss: string;
      team: string;
      exp: number;
      iat: number;
    };
    expect(claims).toMatchObject({ iss: origin, aud: origin, team: "local" });
    expect(claims.exp - claims.iat).toBe(3600);
    expect(out).toContain(`npx portcullis ledger verify --url ${origin}`);
  });

  it("another signing-key secret: no approver grant (the gateway would not accept the dev key's), and what to mint instead", async () => {
    const { out, origin } = await guide(() => `auth: { signing_key_secret: TEAM_SIGNING_KEY }\n${upstreamAndPolicy}`);
    expect(out).toContain(`Console: ${origin}/console`);
    expect(out).toContain("no approver sign-in printed: the config signs with the TEAM_SIGNING_KEY secret (auth.signing_key_secret)");
    expect(out).toContain(`npx portcullis token mint --key FILE --sub human:me --team local --role approver,auditor --port ${new URL(origin).port}`);
    expect(out).not.toMatch(/^eyJ/m);
    expect(out).not.toContain("read -rs PORTCULLIS_TOKEN");
    expect(out).toContain("  agents     an MCP client without a grant is the agent");
    expect(out).toContain(`curl -s ${origin}/mcp`);
  });
});
