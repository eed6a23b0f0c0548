/**
 * Secrets never on a command line: a gateway started by `startGateway` (through the harness, as
 * every e2e gateway and `portcullis dev`/`start` are) gets its config, its signing key and every
 * configured secret through a private env file (`--env-file`, mode 0600 in a 0700 directory),
 * and no /proc/<pid>/cmdline on the machine holds the key's `d`, the key JSON or the secret while
 * it runs; each value arrives exactly (the config by the SHA-256 the ledger records of it, the
 * secret in the header the upstream receives, the key by the grants it verifies, every var of
 * the file through wrangler's own dotenv code); the file's directory is gone once the gateway
 * stops. Also runs `envFileText` over awkward values through the dotenv parser and expander
 * that wrangler bundles (taken from node_modules/wrangler/wrangler-dist/cli.js, run as wrangler
 * runs them for `wrangler dev --env-file`). Owns the gateway and upstream it starts. Must never:
 * leave a process running, print a secret, or send traffic anywhere but loopback.
 */
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { runInNewContext } from "node:vm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envFileText, gatewayOrigin } from "../../cli/gateway-start.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, groupMembers, root, startPortcullis, waitFor } from "./harness.ts";

type LoadDotEnv = (paths: string[], opts: { includeProcessEnv: boolean; silent: boolean }) => Record<string, string>;

/**
 * wrangler's `loadDotEnv` (src/config/dot-env.ts) with the dotenv and dotenv-expand modules it
 * bundles, cut out of its bundle and run unchanged; what `wrangler dev --env-file F` binds is
 * `loadDotEnv([F], { includeProcessEnv: false })` (CLOUDFLARE_INCLUDE_PROCESS_ENV is false).
 */
function wranglerLoadDotEnv(): LoadDotEnv {
  const cli = readFileSync(path.join(root, "node_modules/wrangler/wrangler-dist/cli.js"), "utf8");
  const cut = (start: string, end: string) => {
    const i = cli.indexOf(start);
    const j = i < 0 ? -1 : cli.indexOf(end, i);
    if (j < 0) throw new Error(`wrangler's bundle changed: no ${JSON.stringify(start)} … ${JSON.stringify(end)} in cli.js; check how it reads --env-file`);
    return cli.slice(i, j + end.length);
  };
  const init = cut('"src/config/dot-env.ts"() {', "\n});");
  const imports = [...init.matchAll(/(\w+) = __toESM\((require_\w+)\(\)\);/g)].map((m) => ({ binding: m[1]!, factory: m[2]! }));
  if (imports.length !== 2) throw new Error(`wrangler's bundle changed: dot-env.ts imports ${imports.length} modules, not dotenv and dotenv-expand`);
  const factories = imports.map(({ factory }) => cut(`var ${factory} = __commonJS({`, "\n});"));
  if (!/dotenv@16\.\d+\.\d+\/node_modules\/dotenv\/lib\/main\.js/.test(factories[0]!) || !/dotenv-expand@\d+\.\d+\.\d+/.test(factories[1]!)) {
    throw new Error("wrangler's bundle changed: dot-env.ts no longer uses dotenv 16 and dotenv-expand");
  }
  const loadDotEnv = cut("function loadDotEnv(envPaths, {", "\n}\n");
  const pathBinding = /(\w+)\.default\.relative\(process\.cwd\(\)/.exec(loadDotEnv)?.[1] ?? "path30__namespace";
  const context: Record<string, unknown> = {
    __commonJS: (mod: Record<string, (exports: object, module: { exports: object }) => void>) => {
      let module: { exports: object } | undefined;
      return () => {
        if (!module) {
          module = { exports: {} };
          Object.values(mod)[0]!(module.exports, module);
        }
        return module.exports;
      };
    },
    __toESM: (m: object) => ({ ...m, default: m }),
    __require: createRequire(import.meta.url),
    __name: (f: unknown) => f,
    init_import_meta_url: () => {},
    require_package: () => ({ version: "16" }),
    logger2: { debug: () => {}, log: () => {} },
    isWindows5: false,
    caseInsensitiveEnv: () => ({}),
    [pathBinding]: { default: path },
    process: { env: {}, cwd: () => process.cwd(), platform: process.platform },
    Buffer,
    console,
  };
  const code = `${factories.join("\n")}\n${imports.map(({ binding, factory }) => `var ${binding} = __toESM(${factory}());`).join("\n")}\n${loadDotEnv}\nloadDotEnv;`;
  return runInNewContext(code, context) as LoadDotEnv;
}

const loadDotEnv = wranglerLoadDotEnv();

/** What wrangler dev binds from `text` as its --env-file. */
function parsed(text: string): Record<string, string> {
  const dir = mkdtempSync(path.join(tmpdir(), "portcullis-secrets-test-"));
  try {
    const file = path.join(dir, "vars.env");
    writeFileSync(file, text, { mode: 0o600 });
    return loadDotEnv([file], { includeProcessEnv: false, silent: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `parsed` holds every var exactly, and nothing else but envFileText's own helpers. */
function expectExact(vars: Record<string, string>, got: Record<string, string>) {
  for (const [k, v] of Object.entries(vars)) expect(got[k], `${k} = ${JSON.stringify(v)}`).toBe(v);
  for (const k of Object.keys(got)) if (!(k in vars)) expect(k).toMatch(/^PORTCULLIS_ENV_[0-9A-F]{12}_\d+$/);
}

/** A small seeded PRNG (mulberry32): the same awkward values on every run. */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("envFileText through wrangler's own dotenv parser and expander", () => {
  it("(the parser as cut out of wrangler: no escapes but \\n/\\r in double quotes, $ expanded, CRLF folded, values trimmed)", () => {
    expect(parsed(`A="x\\"y\\n"\nB='$HOME \${X:-dflt} \\$'\nC=  bare # comment\nD='a\r\nb'\n`)).toEqual({ A: 'x\\"y\n', B: " dflt $", C: "bare", D: "a\nb" });
  });

  it("hands back exactly each value: multi-line YAML (LF and CRLF), JWK JSON, every quote, $, $-braces, #, backslashes anywhere", async () => {
    const jwk = JSON.stringify((await generateSigningKey("parse-test")).privateJwk);
    const yaml = `\n# a comment: it's "quoted" \`ticked\` $HOME \${NOPE} \\$ \\n \\r #\nactor: local:x\nupstreams:\n  - name: a\n    url: https://example.com/mcp\n    headers: { Authorization: "Bearer \${TOKEN}" }\n`;
    const vars: Record<string, string> = {
      PORTCULLIS_CONFIG: yaml,
      CRLF_CONFIG: yaml.replaceAll("\n", "\r\n"),
      PORTCULLIS_SIGNING_KEY: jwk,
      EMPTY: "",
      SPACES: "  padded  ",
      HASH: "#not a comment",
      TRAILING_BACKSLASH: "ends with \\",
      BACKSLASHES_BEFORE_QUOTES: `\\' \\\\" \\\`x\\n\\r\\\\n\r\n\\\r\\`,
      DOLLARS: `$A \${B} \${C:-d} $$ \\$ \\\\$ \${ $`,
      ALL_QUOTES: `'"\``,
      NEWLINE_FIRST: "\n\nx\n",
      EQUALS: "a=b: c",
      UNICODE: "päß ✓ \u2028 \t tab",
    };
    expectExact(vars, parsed(envFileText(vars)));
  });

  it("hands back 600 random values of the awkward characters, twelve to a file", async () => {
    const next = rng(0x5eed);
    const alphabet = ["\\", "\\", "'", '"', "`", "$", "{", "}", "\n", "\r", "#", " ", "n", "r", "a", "=", ":", "-", "+", "\t"];
    for (let file = 0; file < 50; file++) {
      const vars: Record<string, string> = {};
      for (let i = 0; i < 12; i++) {
        const len = Math.floor(next() * 24);
        vars[`V${i}`] = Array.from({ length: len }, () => alphabet[Math.floor(next() * alphabet.length)]).join("");
      }
      const text = envFileText(vars);
      expect(text).not.toContain("\r");
      expectExact(vars, parsed(text));
    }
  });

  it("refuses a name wrangler's parser could not read back", () => {
    expect(() => envFileText({ "BAD NAME": "x" })).toThrow(/var name "BAD NAME"/);
    expect(() => envFileText({ "1X": "x" })).toThrow(/var name/);
  });

  it("the gateway's origin: IPv4 as is, an IPv6 literal in brackets", () => {
    expect(gatewayOrigin("127.0.0.1", 8787)).toBe("http://127.0.0.1:8787");
    expect(gatewayOrigin("::1", 9000)).toBe("http://[::1]:9000");
  });
});

/** Every command line on the machine that this process may read, NUL-separated argv as one string. */
function everyCommandLine(): { pid: number; cmd: string }[] {
  const out: { pid: number; cmd: string }[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      out.push({ pid: Number(d), cmd: readFileSync(`/proc/${d}/cmdline`, "utf8") });
    } catch {
      /* gone, or not ours to read */
    }
  }
  return out;
}

describe.runIf(existsSync("/proc/self/cmdline"))("a running gateway's secrets", () => {
  let upstream: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
  let gw: Awaited<ReturnType<typeof startPortcullis>>;
  let origin = "";
  let jwk = "";
  let d = "";
  let config = "";
  let envFile = "";
  // A configured secret with every character the env file has to carry (and an HTTP header may hold).
  const token = `s3cr3t-${randomBytes(12).toString("hex")}-'"\`$HOME\${NOPE}#\\x\\`;

  beforeAll(async () => {
    upstream = await startModernOnlyUpstream();
    const key = (await generateSigningKey("secrets-e2e")).privateJwk as { d?: string };
    jwk = JSON.stringify(key);
    d = key.d ?? "";
    expect(d.length).toBeGreaterThan(20);
    const port = await freePort();
    origin = `http://127.0.0.1:${port}`;
    // CRLF line ends and a comment full of quotes, `$` and backslashes: the exact text must arrive.
    config = [
      `# secrets e2e: it's "quoted" \`ticked\` $HOME \${NOPE} \\$ \\n and a trailing backslash \\`,
      "actor: local:secrets",
      "auth:",
      "  required: true",
      "egress:",
      "  allow_loopback: true",
      "upstreams:",
      "  - name: rec",
      `    url: ${upstream.url}`,
      `    headers: { Authorization: "Bearer \${UPSTREAM_TOKEN}" }`,
      "    timeout: 30s",
      "",
    ].join("\r\n");
    gw = await startPortcullis(config, port, { PORTCULLIS_SIGNING_KEY: jwk, UPSTREAM_TOKEN: token });
    const argv = readFileSync(`/proc/${gw.child.pid}/cmdline`, "utf8").split("\0");
    const at = argv.indexOf("--env-file");
    envFile = at >= 0 ? (argv[at + 1] ?? "") : "";
  }, 180_000);
  afterAll(async () => {
    await Promise.all([gw?.stop(), upstream?.close()]);
  });

  it("no command line on the machine holds the signing key's d, the key JSON or the configured secret; the gateway's has --env-file and no --var", () => {
    const all = everyCommandLine();
    expect(all.length).toBeGreaterThan(3);
    const leaks = all.filter((p) => p.cmd.includes(d) || p.cmd.includes(jwk) || p.cmd.includes(token) || p.cmd.includes(token.slice(0, 31)));
    expect(leaks.map((p) => `pid ${p.pid}: ${p.cmd.replaceAll("\0", " ").slice(0, 80)}…`)).toEqual([]);
    expect(envFile, "the gateway's wrangler is started with --env-file").not.toBe("");
    const ours = all.filter((p) => p.cmd.includes(envFile));
    expect(ours.length, "the wrangler shim and wrangler name the env file").toBeGreaterThanOrEqual(2);
    for (const p of ours) expect(p.cmd.split("\0")).not.toContain("--var");
  });

  it("the env file is private (0600 in a fresh 0700 directory under the temporary directory) and holds exactly config, origin, key and secret", async () => {
    expect(envFile).toMatch(/portcullis-vars-[^/]+\/gateway\.env$/);
    const dir = path.dirname(envFile);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(envFile).mode & 0o777).toBe(0o600);
    expect(statSync(envFile).uid).toBe(process.getuid?.() ?? statSync(envFile).uid);
    expectExact(
      { PORTCULLIS_CONFIG: config, PORTCULLIS_ORIGIN: origin, PORTCULLIS_SIGNING_KEY: jwk, UPSTREAM_TOKEN: token },
      loadDotEnv([envFile], { includeProcessEnv: false, silent: true }),
    );
  });

  it("the values arrive exactly: the secret in the upstream's header, the key verifying grants, the config by its recorded SHA-256", async () => {
    const keys = await parseKeySet(jwk);
    const grant = async (roles: string[]) =>
      (
        await mintGrant(
          keys,
          { iss: origin, aud: origin, sub: "agent:secrets", team: "secrets", roles: roles as never, tools: ["*"], ttlSeconds: 600 },
          { maxLifetimeSeconds: 3600 },
        )
      ).token;
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const r = await fetch(`${origin}/mcp`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        authorization: `Bearer ${await grant(["agent"])}`,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "bump",
      },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "bump", arguments: {}, _meta: meta } }),
      signal: AbortSignal.timeout(60_000),
    });
    const answer = (await r.json()) as { result?: { isError?: boolean } };
    expect(r.status, JSON.stringify(answer)).toBe(200);
    expect(answer.result?.isError, JSON.stringify(answer)).not.toBe(true);
    const calls = upstream.log.filter((s) => s.method === "tools/call");
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.at(-1)!.headers.authorization).toBe(`Bearer ${token}`);

    const jwks = (await (await fetch(`${origin}/.well-known/jwks.json`)).json()) as { keys: { x?: string }[] };
    expect(jwks.keys.map((k) => k.x)).toContain((JSON.parse(jwk) as { x: string }).x);

    // The first request an isolate serves records `config.changed` named by the SHA-256 of PORTCULLIS_CONFIG.
    const sha = createHash("sha256").update(config, "utf8").digest("hex");
    const admin = await grant(["admin"]);
    let recorded: string[] = [];
    for (let attempt = 0; attempt < 40 && !recorded.includes(sha); attempt++) {
      if (attempt) await new Promise((res) => setTimeout(res, 250));
      const exp = await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(30_000) });
      expect(exp.status).toBe(200);
      recorded = (await exp.text())
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as { entry?: { kind: string; body: { to?: string } } })
        .flatMap((o) => (o.entry?.kind === "config.changed" && typeof o.entry.body.to === "string" ? [o.entry.body.to] : []));
    }
    expect(recorded).toContain(sha);
  });

  it("the env file's directory is gone once the gateway stops", async () => {
    const dir = path.dirname(envFile);
    expect(existsSync(dir)).toBe(true);
    await gw.stop();
    for (let i = 0; i < 50 && existsSync(dir); i++) await new Promise((res) => setTimeout(res, 100));
    expect(existsSync(dir)).toBe(false);
  });
});

describe.runIf(existsSync("/proc/self/cmdline"))("`portcullis dev`", () => {
  it("hands the gateway the config's secrets from its environment through the env file, none on a command line, and removes the file when stopped by SIGTERM", async () => {
    const upstream = await startModernOnlyUpstream();
    const dir = mkdtempSync(path.join(tmpdir(), "portcullis-secrets-dev-"));
    const key = (await generateSigningKey("secrets-dev")).privateJwk as { d: string };
    const keyFile = path.join(dir, "dev-signing-key.json");
    writeFileSync(keyFile, JSON.stringify(key), { mode: 0o600 });
    const secret = `dev-${randomBytes(12).toString("hex")}-'"\`$x\\`;
    const configFile = path.join(dir, "portcullis.yaml");
    writeFileSync(
      configFile,
      `actor: local:secrets-dev\negress:\n  allow_loopback: true\nupstreams:\n  - name: rec\n    url: ${upstream.url}\n    headers: { Authorization: "Bearer \${DEV_UPSTREAM_TOKEN}" }\n    timeout: 30s\n`,
    );
    const port = await freePort();
    const dev = spawn(process.execPath, [path.join(root, "bin/portcullis.mjs"), "dev", "--config", configFile, "--port", String(port)], {
      cwd: dir,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, PORTCULLIS_DEV_KEY_FILE: keyFile, DEV_UPSTREAM_TOKEN: secret, WRANGLER_SEND_METRICS: "false" },
    });
    let logs = "";
    dev.stdout?.on("data", (b: Buffer) => {
      logs += b;
    });
    dev.stderr?.on("data", (b: Buffer) => {
      logs += b;
    });
    const exited = new Promise<void>((res) => dev.once("exit", () => res()));
    try {
      await waitFor(`http://127.0.0.1:${port}/healthz`, 90_000).catch((e: Error) => {
        throw new Error(`${e.message}\n${logs}`);
      });
      const all = everyCommandLine();
      expect(all.filter((p) => p.cmd.includes(key.d) || p.cmd.includes(secret.slice(0, 28))).map((p) => p.pid)).toEqual([]);
      const wrangler = all.find((p) => p.cmd.includes(`\0--port\0${port}\0`) && p.cmd.includes("\0--env-file\0"));
      expect(wrangler, logs).toBeDefined();
      const argv = wrangler!.cmd.split("\0");
      const envFile = argv[argv.indexOf("--env-file") + 1]!;
      expect(statSync(path.dirname(envFile)).mode & 0o777).toBe(0o700);
      const vars = loadDotEnv([envFile], { includeProcessEnv: false, silent: true });
      expect(vars.DEV_UPSTREAM_TOKEN).toBe(secret);
      expect(vars.PORTCULLIS_SIGNING_KEY).toBe(JSON.stringify(key));
      expect(vars.PORTCULLIS_ORIGIN).toBe(`http://127.0.0.1:${port}`);

      // The loopback actor calls a tool: the upstream gets the secret from the environment, exactly.
      const r = await fetch(`http://127.0.0.1:${port}/mcp`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": "tools/call",
          "mcp-name": "bump",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: {
            name: "bump",
            arguments: {},
            _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} },
          },
        }),
        signal: AbortSignal.timeout(60_000),
      });
      expect(r.status, await r.clone().text()).toBe(200);
      await r.text();
      expect(upstream.log.filter((s) => s.method === "tools/call").at(-1)?.headers.authorization).toBe(`Bearer ${secret}`);

      // `kill PID` reaches the CLI alone: it stops the gateway, and the env file goes with it.
      dev.kill("SIGTERM");
      await Promise.race([exited, new Promise((res) => setTimeout(res, 20_000))]);
      expect(dev.exitCode ?? dev.signalCode, logs).not.toBeNull();
      expect(existsSync(path.dirname(envFile))).toBe(false);
    } finally {
      if (dev.pid !== undefined && groupMembers(dev.pid).length > 0) {
        try {
          process.kill(-dev.pid, "SIGKILL");
        } catch {
          /* gone */
        }
      }
      for (let i = 0; i < 50 && dev.pid !== undefined && groupMembers(dev.pid).length > 0; i++) await new Promise((res) => setTimeout(res, 100));
      await upstream.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
