/**
 * `portcullis import --bridge` and `restore`, through bin/portcullis.mjs as child processes (async
 * spawn) in a temporary HOME and working directory: a Claude Code file with an HTTP server and
 * three stdio servers. The bridgeable stdio server becomes an upstream at http://127.0.0.1:<port>/mcp
 * whose Authorization names its secret (`${BRIDGE_<NAME>_SECRET}`), with egress.allow_loopback set;
 * its port is the first from --bridge-port up that the config does not name and nothing listens
 * on; its secret file has mode 0600 and its value is printed nowhere; its env keeps references as
 * references and never copies an inline credential (start.sh asks for it by name); a stdio server
 * whose command line carries a credential stays in the client file, named; `portcullis check`
 * accepts the config; start.sh really starts the bridge (server-everything over stdio: tools
 * listed with the secret, its environment as planned and without the bridge secret) and stops it
 * on SIGTERM; `restore` gives the client file back byte for byte. Owns its temporary directory and
 * the processes it starts; all on loopback.
 */
import { spawn } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { groupMembers, listeningOn, managed, root } from "./harness.ts";
import { connect, type Run, runScript, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON and YAML read loosely in tests
type Any = any;
// biome-ignore-start lint/suspicious/noTemplateCurlyInString: the files quote the ${NAME} reference syntax literally

const CLI = resolve(root, "bin/portcullis.mjs");
const EVERYTHING = resolve(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const INLINE = "sk-live-bridge-inline-4f9a2c7e1b8d3a6f0e5c";
const ARG_SECRET = "ghp_bridgeArgSecret0123456789abcdefABCD";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), "portcullis-import-bridge-"));
const held: Server[] = [];
afterAll(async () => {
  for (const s of held) s.close();
  rmSync(dir, { recursive: true, force: true });
});

/** `portcullis ARGS` in `dir`, HOME = dir/home, with `env` added, no grant from this environment; killed after 60 s. */
const portcullis = (args: string[], env: Record<string, string> = {}): Promise<Run> =>
  runScript(CLI, args, { HOME: join(dir, "home"), ...env }, { cwd: dir, drop: ["PORTCULLIS_AGENT_TOKEN"] });

/** Something listening on 127.0.0.1:`port` (or null when that port is taken already). */
function hold(port: number): Promise<Server | null> {
  return new Promise((done) => {
    const s = createServer();
    s.once("error", () => done(null));
    s.listen(port, "127.0.0.1", () => {
      held.push(s);
      done(s);
    });
  });
}

describe("portcullis import --bridge", () => {
  it("turns a stdio server into a bridged upstream (port, 0600 secret by name, env by reference, start.sh that runs it); restore is byte for byte", async () => {
    // A base port in a range few use; base is named by the config, base+1 is held: the bridge gets a later one.
    const base = 20000 + Math.floor(Math.random() * 20000);
    await hold(base + 1);
    mkdirSync(join(dir, "home"));
    writeFileSync(
      join(dir, "portcullis.yaml"),
      `# comments stay\nupstreams:\n  - name: local-one   # on the base port\n    url: http://127.0.0.1:${base}/mcp\n`,
    );
    const clientText = `${JSON.stringify(
      {
        theme: "dark",
        mcpServers: {
          docs: { type: "http", url: "https://docs.example.com/mcp" },
          everything: {
            type: "stdio",
            command: process.execPath,
            args: [EVERYTHING, "stdio"],
            env: { API_KEY: INLINE, DEBUG_LEVEL: "info", TOKEN_REF: "${MY_TOKEN}" },
          },
          leaky: { command: "npx", args: ["-y", "some-mcp-server", "--token", ARG_SECRET] },
        },
      },
      null,
      2,
    )}\n`;
    const file = join(dir, "home", ".claude.json");
    writeFileSync(file, clientText);

    const r = await portcullis(["import", "--client", "claude-code", "--bridge", "--bridge-port", String(base), "--offline"]);
    expect(r.code, r.stderr).toBe(0);
    const cfg = parse(readFileSync(join(dir, "portcullis.yaml"), "utf8"));
    expect(readFileSync(join(dir, "portcullis.yaml"), "utf8")).toContain("# comments stay");
    expect(cfg.egress.allow_loopback).toBe(true);
    const up = cfg.upstreams.find((u: Any) => u.name === "everything");
    const port = Number(new URL(up.url).port);
    expect(up.url).toBe(`http://127.0.0.1:${port}/mcp`);
    expect(port).toBeGreaterThanOrEqual(base + 2);
    expect(up.headers).toEqual({ Authorization: "Bearer ${BRIDGE_EVERYTHING_SECRET}" });
    expect(cfg.upstreams.map((u: Any) => u.name)).toEqual(["local-one", "docs", "everything"]);

    const bridges = join(dir, ".portcullis", "bridges");
    const secretFile = join(bridges, "everything.secret");
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const secret = readFileSync(secretFile, "utf8").trim();
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    const script = readFileSync(join(bridges, "start.sh"), "utf8");
    expect(statSync(join(bridges, "start.sh")).mode & 0o777).toBe(0o700);
    expect(script).toContain(`bridge --port ${port} --name everything --secret-file '${secretFile}'`);
    expect(script).toContain("export DEBUG_LEVEL='info'; ");
    expect(script).toContain('export TOKEN_REF="${MY_TOKEN:-}"; ');
    expect(script).toContain(': "${API_KEY:?export API_KEY first');
    // No credential anywhere import wrote or printed; the secret itself only in its file.
    for (const t of [r.stdout, r.stderr, script, readFileSync(join(dir, "portcullis.yaml"), "utf8")]) {
      expect(t).not.toContain(INLINE);
      expect(t).not.toContain(ARG_SECRET);
      expect(t).not.toContain(secret);
    }
    expect(r.stdout).toContain(`everything → upstream everything at http://127.0.0.1:${port}/mcp: npx portcullis bridge --port ${port}`);
    expect(r.stdout).toContain(`export BRIDGE_EVERYTHING_SECRET="$(cat '${secretFile}')"`);
    expect(r.stdout).toMatch(/stays direct: leaky .*not bridged: its command line carries a credential/);

    // The client reaches the bridged server only through the gateway; the one not bridged stays as it was.
    const client = JSON.parse(readFileSync(file, "utf8"));
    expect(Object.keys(client.mcpServers).sort()).toEqual(["leaky", "portcullis"]);
    expect(client.mcpServers.leaky.args).toContain(ARG_SECRET);

    // The config is valid once its secrets are set (as portcullis dev would pass them).
    const checked = await portcullis(["check", "--config", "portcullis.yaml"], { BRIDGE_EVERYTHING_SECRET: secret });
    expect(checked.code, checked.stdout + checked.stderr).toBe(0);

    // start.sh starts the bridge: the server answers with the secret, with the environment planned.
    const sh = spawn("sh", [join(bridges, "start.sh")], {
      cwd: dir,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, API_KEY: "exported-by-the-person", MY_TOKEN: "from-my-token", BRIDGE_EVERYTHING_SECRET: secret },
    });
    let shOut = "";
    sh.stdout?.on("data", (d: Buffer) => (shOut += d.toString()));
    sh.stderr?.on("data", (d: Buffer) => (shOut += d.toString()));
    const m = managed(sh);
    try {
      const deadline = Date.now() + 30_000;
      while (listeningOn(port).length === 0 && Date.now() < deadline) await sleep(200);
      expect(listeningOn(port).length, shOut).toBeGreaterThan(0);
      const s = await connect("import-bridge", `http://127.0.0.1:${port}/mcp`, secret);
      try {
        expect((await s.client.listTools()).tools.map((t: Any) => t.name)).toContain("get-env");
        const env = JSON.parse(texts(await s.client.callTool({ name: "get-env", arguments: {} })));
        expect(env.DEBUG_LEVEL).toBe("info");
        expect(env.TOKEN_REF).toBe("from-my-token");
        expect(env.API_KEY).toBe("exported-by-the-person");
        expect(env.BRIDGE_EVERYTHING_SECRET).toBeUndefined();
        expect(JSON.stringify(env)).not.toContain(secret);
      } finally {
        await s.close();
      }
    } finally {
      const pgid = sh.pid!;
      await m.stop();
      expect(groupMembers(pgid)).toEqual([]);
    }
    expect(shOut).not.toContain(secret);

    // restore: the client file byte for byte, the backup gone.
    const back = await portcullis(["restore", "--client", "claude-code"]);
    expect(back.code, back.stderr).toBe(0);
    expect(readFileSync(file).equals(Buffer.from(clientText))).toBe(true);
    expect(existsSync(`${file}.portcullis-backup`)).toBe(false);
  });

  it("portcullis bridge refuses a secret file readable by others, and one that holds no secret (exit 1, nothing printed of it)", async () => {
    const loose = join(dir, "loose.secret");
    writeFileSync(loose, "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG\n", { mode: 0o644 });
    chmodSync(loose, 0o644);
    const r = await portcullis(["bridge", "--port", "9", "--secret-file", loose, "--", process.execPath, EVERYTHING, "stdio"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("has mode 0644: a bridge secret must be readable by its owner only");
    expect(r.stderr + r.stdout).not.toContain("abcdefghijklmnopqrstuvwxyz");
    const junk = join(dir, "junk.secret");
    writeFileSync(junk, "not a secret\n", { mode: 0o600 });
    const j = await portcullis(["bridge", "--port", "9", "--secret-file", junk, "--", process.execPath, EVERYTHING, "stdio"]);
    expect(j.code).toBe(1);
    expect(j.stderr).toContain("does not hold a bridge secret");
  });

  it("--dry-run writes nothing (no secret, no script); --bridge-port needs --bridge", async () => {
    const d = mkdtempSync(join(dir, "dry-"));
    const f = join(d, "mcp.json");
    const text = JSON.stringify({ mcpServers: { ev: { command: process.execPath, args: [EVERYTHING, "stdio"] } } });
    writeFileSync(f, text);
    const r = await portcullis([
      "import",
      "--client",
      "claude-code",
      "--path",
      f,
      "--config",
      join(d, "portcullis.yaml"),
      "--bridge",
      "--dry-run",
      "--offline",
      "--json",
    ]);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.bridges).toHaveLength(1);
    expect(out.bridges[0].url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(existsSync(join(d, ".portcullis"))).toBe(false);
    expect(existsSync(join(d, "portcullis.yaml"))).toBe(false);
    expect(readFileSync(f, "utf8")).toBe(text);
    const bad = await portcullis(["import", "--client", "claude-code", "--path", f, "--bridge-port", "8801"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--bridge-port needs --bridge");
  });
});
// biome-ignore-end lint/suspicious/noTemplateCurlyInString: the files quote the ${NAME} reference syntax literally
