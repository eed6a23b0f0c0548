/**
 * Portcullis as a team gets it: the packed tarball installed into an empty directory (offline,
 * test/e2e/package-install.ts), `npx portcullis init`, then (1) `npx portcullis dev` there serving
 * a governed call, a held call approved from the CLI and a ledger that `ledger verify` accepts;
 * (2) `deploy --dry-run` building a config of more than 40 KB (the GitHub starter mapping and a
 * 50-rule policy) into the bundle, and that bundle, served by Miniflare, answering with exactly
 * that config; (3) `deploy` against a fake wrangler on PATH doing the documented steps in order,
 * every secret on standard input and none on a command line; (4) the README's Deploy section,
 * its offline part walked as written. Owns its temporary directories and the processes it starts.
 * Must never: reach the network (npm offline; every upstream, gateway and probe on loopback).
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse, stringify } from "yaml";
import { builtWorker } from "../../cli/gateway-start.ts";
import { freePort, managed, type Proc, root, startEverything, waitFor } from "./harness.ts";
import { installPackage, npmEnv, packTree } from "./package-install.ts";

const work = mkdtempSync(join(tmpdir(), "portcullis-package-"));
let tgz = "";
const stops: (() => Promise<void>)[] = [];

beforeAll(() => {
  tgz = packTree();
}, 180_000);

afterAll(async () => {
  for (const s of stops.reverse()) await s().catch(() => {});
  rmSync(work, { recursive: true, force: true });
  rmSync(resolve(tgz, ".."), { recursive: true, force: true });
});

/** A fresh directory with the tarball installed in it. */
function installed(name: string): string {
  const dir = join(work, name);
  mkdirSync(dir);
  installPackage(dir, tgz);
  return dir;
}

interface Run {
  code: number | null;
  out: string;
  err: string;
}
/**
 * Runs a command to its end without blocking this process: the upstreams, gateways and probe
 * servers this file starts talk through it (a spawnSync would stall their pipes and sockets).
 */
function run(
  cmd: string,
  args: string[],
  { cwd, env = {}, timeoutMs = 180_000 }: { cwd: string; env?: Record<string, string>; timeoutMs?: number },
): Promise<Run> {
  return new Promise((done, fail) => {
    const child = spawn(cmd, args, { cwd, env: npmEnv(env), stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      err += d.toString();
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", fail);
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code, out, err });
    });
  });
}

/** `npx portcullis …` in `dir`, as a team member types it. */
const npx = (dir: string, args: string[], env: Record<string, string> = {}) => run("npx", ["--offline", "portcullis", ...args], { cwd: dir, env });

describe("the packed package in an empty directory", () => {
  it("installs with the CLI built into it, and an older Node gets one line", async () => {
    const dir = installed("plain");
    const pkg = join(dir, "node_modules", "portcullis");
    expect(existsSync(join(pkg, "dist", "cli", "main.js"))).toBe(true);
    // The package carries what a project needs, and nothing of the checkout's tests.
    for (const f of ["src/worker.ts", "src/objects.ts", "migrations/0001_ledger.sql", "mappings/github.yaml", "templates/project/worker.js", "wrangler.toml"])
      expect(existsSync(join(pkg, f)), f).toBe(true);
    expect(existsSync(join(pkg, "test"))).toBe(false);
    const help = await npx(dir, ["--help"]);
    expect(help.code).toBe(0);
    expect(help.out).toMatch(/portcullis init \[DIR\]/);
    // The machine's own Node (20 here) is older than the CLI needs: one line, exit 1, no stack trace.
    const old = spawnSync("/usr/bin/node", ["--version"], { encoding: "utf8" });
    if (old.status === 0 && Number(/^v(\d+)/.exec(old.stdout)?.[1]) < 22) {
      const r = spawnSync("/usr/bin/node", [join(pkg, "bin", "portcullis.mjs"), "--help"], { encoding: "utf8" });
      expect(r.status).toBe(1);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(/^portcullis: needs Node\.js 22\.18 or later .*this is Node\.js v\d+/);
    }
  }, 120_000);

  it("init, then dev: a governed call, a hold approved from the CLI, the ledger verified", async () => {
    const dir = installed("local");
    const init = await npx(dir, ["init", "."]);
    expect(init.code, init.err).toBe(0);
    for (const f of ["wrangler.toml", "worker.js", "portcullis.yaml", "policy.yaml", "mappings/everything.yaml", ".gitignore", "README.md"])
      expect(existsSync(join(dir, f)), f).toBe(true);
    expect(init.out).toMatch(/kept {2}package\.json|wrote package\.json/);
    // init never overwrites: a second run keeps every file.
    const again = await npx(dir, ["init", "."]);
    expect(again.code).toBe(0);
    expect(again.out).not.toMatch(/\bwrote\b/);
    const toml = readFileSync(join(dir, "wrangler.toml"), "utf8");
    expect(toml).toMatch(/^main = "worker\.js"$/m);
    expect(toml).toMatch(/migrations_dir = "node_modules\/portcullis\/migrations"/);
    expect(toml).not.toMatch(/^\[\[kv_namespaces\]\]/m);

    const upstreamPort = await freePort();
    const upstream = await startEverything(upstreamPort);
    stops.push(() => upstream.stop());
    const cfg = join(dir, "portcullis.yaml");
    writeFileSync(cfg, readFileSync(cfg, "utf8").replaceAll("http://127.0.0.1:3001/mcp", `http://127.0.0.1:${upstreamPort}/mcp`));

    const port = await freePort();
    let out = "";
    const child: ChildProcess = spawn("npx", ["--offline", "portcullis", "dev", "--port", String(port), "--persist-to", join(dir, "state")], {
      cwd: dir,
      env: npmEnv(),
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr?.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const dev: Proc = managed(child);
    stops.push(() => dev.stop());
    const gw = `http://127.0.0.1:${port}`;
    await waitFor(`${gw}/healthz`, 120_000).catch((e: Error) => {
      throw new Error(`${e.message}\n${out}`);
    });
    expect(out).toContain(`gateway on ${gw}/mcp`);
    // The project's bundle serves the config built from its portcullis.yaml.
    expect(existsSync(join(dir, ".portcullis", "build", "config.js"))).toBe(true);

    const call = (args: string[]) =>
      run(process.execPath, [join(root, "examples", "call.mjs"), "--url", `${gw}/mcp`, ...args], { cwd: dir, timeoutMs: 60_000 });
    const ok = await call(["get-sum", "a=1", "b=2"]);
    expect(ok.code, `${ok.err}${ok.out}\n--- dev:\n${out}`).toBe(0);
    expect(ok.out).toMatch(/The sum of 1 and 2 is 3/);
    expect(ok.out).toMatch(/receipt: ledger chain local/);
    const denied = await call(["get-env"]);
    expect(denied.out).toMatch(/no-env/);
    const held = await call(["get-sum", "a=60", "b=50"]);
    const hold = /local~[0-9a-f]+/.exec(held.out)?.[0];
    expect(hold, held.out + held.err + out).toBeTruthy();

    // The approver's grant, minted with the project's own dev key, goes in PORTCULLIS_TOKEN.
    const mint = await npx(dir, [
      "token",
      "mint",
      "--sub",
      "human:approver",
      "--team",
      "local",
      "--role",
      "approver,auditor",
      "--port",
      String(port),
      "--ttl",
      "1h",
    ]);
    expect(mint.code, mint.err).toBe(0);
    const token = { PORTCULLIS_TOKEN: mint.out.trim() };
    const approve = await npx(dir, ["holds", "approve", hold!, "--url", gw, "--reason", "checked: 60 + 50"], token);
    expect(approve.code, approve.err + approve.out).toBe(0);
    const ran = await call(["--save", join(dir, "approved.json"), "get-sum", "a=60", "b=50"]);
    expect(ran.code, ran.err).toBe(0);
    expect(ran.out).toMatch(/The sum of 60 and 50 is 110/);

    const exp = await npx(dir, ["ledger", "export", "--url", gw, "--out", join(dir, "ledger.ndjson")], token);
    expect(exp.code, exp.err).toBe(0);
    writeFileSync(join(dir, "jwks.json"), await (await fetch(`${gw}/.well-known/jwks.json`)).text());
    const verify = await npx(dir, [
      "ledger",
      "verify",
      "--file",
      join(dir, "ledger.ndjson"),
      "--key",
      join(dir, "jwks.json"),
      "--receipt",
      join(dir, "approved.json"),
    ]);
    expect(verify.code, verify.out + verify.err).toBe(0);
    const records = readFileSync(join(dir, "ledger.ndjson"), "utf8")
      .split("\n")
      .filter(Boolean)
      .flatMap((l) => {
        const e = (JSON.parse(l) as { entry?: { kind: string; body: { hold_id?: string } } }).entry;
        return e ? [e] : [];
      });
    // Ran once: one hold.consumed for that hold.
    expect(records.filter((r) => r.kind === "hold.consumed" && r.body.hold_id === hold)).toHaveLength(1);
    await dev.stop();
  }, 300_000);
});

/** A GET to `url` with `headers` as given, Host included (fetch would set its own). */
function hostedGet(url: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  return new Promise((done, fail) => {
    const req = request(url, { headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => {
        text += d;
      });
      res.on("end", () => done({ status: res.statusCode ?? 0, text }));
    });
    req.on("error", fail);
    req.end();
  });
}

/** The GitHub starter mapping's tool names. */
function githubTools(): string[] {
  const m = parse(readFileSync(join(root, "mappings", "github.yaml"), "utf8")) as { tools?: Record<string, unknown> | { name: string }[] };
  const tools = m.tools ?? {};
  return Array.isArray(tools) ? tools.map((t) => t.name) : Object.keys(tools);
}

/** A deployable project: auth on, the GitHub upstream with its starter mapping, a policy of `rules` rules. */
async function deployable(dir: string, { rules = 50, oauth = false } = {}): Promise<void> {
  const init = await npx(dir, ["init", ".", "--name", "gw"]);
  expect(init.code, init.err).toBe(0);
  cpSync(join(dir, "node_modules", "portcullis", "mappings", "github.yaml"), join(dir, "mappings", "github.yaml"));
  rmSync(join(dir, "mappings", "everything.yaml"));
  const tools = githubTools();
  const policy = {
    rules: Array.from({ length: rules }, (_, i) => ({
      id: `rule-${i}`,
      match: { upstream: "github", tool: tools[i % tools.length] },
      when: `size(args) > ${10 + i}`,
      decision: i % 2 ? "deny" : "require_approval",
      reason: `rule ${i}: a call to ${tools[i % tools.length]} with more than ${10 + i} arguments is unusual for our agents, so a person looks at it first (the platform team's review queue; generated for the deploy test)`,
      owner: "the platform team",
    })),
  };
  writeFileSync(join(dir, "policy.yaml"), stringify(policy));
  writeFileSync(
    join(dir, "portcullis.yaml"),
    `auth:
  required: true
  audience: https://gw.example.com
${oauth ? "  oauth:\n    enabled: true\n    sign_in:\n      enrollment:\n        template: {tools: ['*'], roles: [agent], team: default, lifetime: 8h}\n" : ""}mappings_dir: mappings
policy: policy.yaml
upstreams:
  - name: github
    url: https://api.githubcopilot.com/mcp/
    headers: { Authorization: "Bearer \${GITHUB_TOKEN}" }
`,
  );
}

describe("deploy", () => {
  let project = "";
  beforeAll(async () => {
    project = installed("deployed");
    await deployable(project);
  }, 180_000);

  it("--dry-run builds a config of over 40 KB into the bundle, and that bundle serves it", async () => {
    const r = await npx(project, ["deploy", "--dry-run", "--json"]);
    expect(r.code, r.out + r.err).toBe(0);
    const report = JSON.parse(r.out) as { ok: boolean; steps: { step: string; ok: boolean; detail: string }[] };
    expect(report.ok).toBe(true);
    expect(report.steps.map((s) => s.step)).toEqual(["wrangler.toml", "config", "bundle", "would"]);
    expect(report.steps[2]!.detail).toMatch(/KiB/);
    expect(report.steps[3]!.detail).toMatch(/create the D1 database gw-ledger/);
    expect(report.steps[3]!.detail).toMatch(/bind no KV namespace/);
    const text = (await import(pathToFileURL(join(project, ".portcullis", "build", "config.js")).href)).default as string;
    expect(Buffer.byteLength(text)).toBeGreaterThan(40 * 1024);
    const sha = createHash("sha256").update(text).digest("hex");
    expect(report.steps[1]!.detail).toContain(sha.slice(0, 12));

    // The bundle the dry run built, served by Miniflare with a signing key and the one secret the config names.
    const keyFile = join(project, "key.json");
    const gen = await npx(project, ["keys", "generate", "--out", keyFile, "--kid", "test-1", "--json"]);
    expect(gen.code, gen.err).toBe(0);
    const { serveBuilt } = (await import(pathToFileURL(join(root, "bench", "miniflare.mjs")).href)) as {
      serveBuilt: (c: string, o: object) => Promise<{ mf: { dispose(): Promise<void> }; url: URL }>;
    };
    const served = builtWorker(join(project, "wrangler.toml"), mkdtempSync(join(work, "mf-")), { prebuilt: join(project, ".portcullis", "build", "dist") });
    const { mf, url } = await serveBuilt(served.file, {
      port: await freePort(),
      persistTo: mkdtempSync(join(work, "mf-state-")),
      vars: { PORTCULLIS_SIGNING_KEY: readFileSync(keyFile, "utf8").trim(), GITHUB_TOKEN: "not-a-real-token" },
    });
    stops.push(() => mf.dispose());
    const mint = await npx(project, [
      "token",
      "mint",
      "--key",
      keyFile,
      "--gateway",
      "https://gw.example.com",
      "--sub",
      "human:auditor",
      "--team",
      "ops",
      "--role",
      "auditor",
      "--ttl",
      "10m",
    ]);
    expect(mint.code, mint.err).toBe(0);
    // Sent to Miniflare's socket with the Host the gateway serves (its audience), as Cloudflare's edge would.
    const headers = { authorization: `Bearer ${mint.out.trim()}`, host: "gw.example.com" };
    let last = "";
    const exportLines = async () => {
      const res = await hostedGet(`${url}v1/ledger/export`, headers);
      last = `${res.status} ${res.text.slice(0, 1500)}`;
      return res.text
        .split("\n")
        .filter(Boolean)
        .flatMap((l) => {
          const e = (JSON.parse(l) as { entry?: { kind?: string; body?: { to?: string; upstreams?: string[]; by?: string } } }).entry;
          return e ? [e] : [];
        });
    };
    // The first authenticated request records the config it serves (config.changed, by its SHA-256).
    let changed: { body?: { to?: string; upstreams?: string[]; by?: string } } | undefined;
    for (let i = 0; i < 20 && !changed; i++) {
      changed = (await exportLines()).find((e) => e.kind === "config.changed");
      if (!changed) await new Promise((r) => setTimeout(r, 250));
    }
    expect(changed?.body?.to, last).toBe(sha);
    expect(changed?.body?.upstreams).toEqual(["github"]);
    expect(changed?.body?.by).toBe("deploy");
  }, 240_000);

  it("names what wrangler.toml lacks of a newer portcullis, before anything else", async () => {
    const dir = join(work, "old-toml");
    cpSync(project, dir, { recursive: true, verbatimSymlinks: true });
    // As if the project were made by a version without SseDO: its binding and migration v10 are missing.
    const toml = readFileSync(join(dir, "wrangler.toml"), "utf8");
    writeFileSync(
      join(dir, "wrangler.toml"),
      toml
        .replace(/\[\[durable_objects\.bindings\]\]\nname = "SSE"\nclass_name = "SseDO"\n/, "")
        .replace(/\[\[migrations\]\]\ntag = "v10"\nnew_sqlite_classes = \["SseDO"\]\n/, ""),
    );
    const r = await npx(dir, ["deploy", "--dry-run"]);
    expect(r.code).toBe(1);
    expect(r.err).toContain("FAIL wrangler.toml: lacks what this version of portcullis needs; add:");
    expect(r.err).toContain('[[durable_objects.bindings]]\nname = "SSE"\nclass_name = "SseDO"');
    expect(r.err).toContain('[[migrations]]\ntag = "v10"\nnew_sqlite_classes = ["SseDO"]');
    expect(existsSync(join(dir, ".portcullis", "build", "dist"))).toBe(existsSync(join(project, ".portcullis", "build", "dist")));
  }, 60_000);

  /** A fake wrangler: records each call (argv, and what came on stdin) and answers as wrangler would. */
  function fakeWrangler(dir: string, { secrets, probe }: { secrets: string[]; probe: string }): { bin: string; log: string } {
    const bin = join(dir, "fake-bin");
    mkdirSync(bin, { recursive: true });
    const log = join(dir, "wrangler-calls.ndjson");
    writeFileSync(
      join(bin, "wrangler"),
      `#!${process.execPath}
const fs = require("node:fs");
const argv = process.argv.slice(2);
let stdin = "";
try { if (argv[0] === "secret" && argv[1] === "put") stdin = fs.readFileSync(0, "utf8"); } catch {}
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify({ argv, stdin }) + "\\n");
const w = argv.join(" ");
if (w.startsWith("deploy --dry-run")) console.log("Total Upload: 2245.53 KiB / gzip: 475.73 KiB\\n--dry-run: exiting now.");
else if (w.startsWith("d1 create")) console.log('✅ Successfully created DB\\n[[d1_databases]]\\nbinding = "DB"\\ndatabase_name = "' + argv[2] + '"\\ndatabase_id = "4a3c1f2e-7b6d-4e5f-9a8b-0c1d2e3f4a5b"');
else if (w.startsWith("kv namespace create")) console.log('{ binding = "OAUTH_KV", id = "0123456789abcdef0123456789abcdef" }');
else if (w.startsWith("d1 migrations apply")) console.log("Migrations to be applied: 0001_ledger.sql\\n✅ applied");
else if (w.startsWith("secret list")) console.log(JSON.stringify(${JSON.stringify(secrets)}.map((name) => ({ name, type: "secret_text" }))));
else if (w.startsWith("secret put")) console.log("✨ Success! Uploaded secret " + argv[2]);
else if (w.startsWith("deploy")) console.log("Uploaded gw (1.2 sec)\\nDeployed gw triggers (0.5 sec)\\n  ${probe}\\nCurrent Version ID: x");
else { console.error("fake wrangler: unexpected " + w); process.exit(3); }
`,
    );
    chmodSync(join(bin, "wrangler"), 0o755);
    return { bin, log };
  }

  async function probeServer(): Promise<{ url: string; hits: string[]; server: Server }> {
    const hits: string[] = [];
    const server = createServer((req, res) => {
      hits.push(req.url ?? "");
      res.writeHead(200, { "content-type": "application/json" }).end('{"ok":true}');
    });
    const port = await freePort();
    await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
    stops.push(() => new Promise((r) => server.close(() => r())));
    return { url: `http://127.0.0.1:${port}`, hits, server };
  }

  const calls = (log: string) =>
    readFileSync(log, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { argv: string[]; stdin: string });

  it("runs the documented steps through wrangler in order, every secret on standard input", async () => {
    const dir = join(work, "fake-deploy");
    cpSync(project, dir, { recursive: true, verbatimSymlinks: true });
    const probe = await probeServer();
    const fake = fakeWrangler(dir, { secrets: ["GITHUB_TOKEN"], probe: probe.url });
    const env = { PATH: `${fake.bin}:${process.env.PATH}` };
    const cli = join(dir, "node_modules", ".bin", "portcullis");
    const r = await run(cli, ["deploy", "--generate-key"], { cwd: dir, env });
    expect(r.code, r.out + r.err).toBe(0);
    const seen = calls(fake.log);
    expect(seen.map((c) => c.argv.slice(0, c.argv[0] === "deploy" ? (c.argv[1] === "--dry-run" ? 2 : 1) : 3).join(" "))).toEqual([
      "deploy --dry-run",
      "d1 create gw-ledger",
      "d1 migrations apply",
      "secret list --format",
      "secret put PORTCULLIS_SIGNING_KEY",
      "deploy",
    ]);
    // The new key went on stdin only; no argument of any call carries it (nor any other secret).
    const keyFile = join(dir, ".portcullis", "signing-key.json");
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    const key = JSON.parse(readFileSync(keyFile, "utf8")) as { d: string; kty: string };
    expect(key.kty).toBe("OKP");
    const put = seen.find((c) => c.argv[1] === "put")!;
    expect(JSON.parse(put.stdin)).toEqual(key);
    for (const c of seen) expect(c.argv.join(" ")).not.toContain(key.d);
    expect(r.out + r.err).not.toContain(key.d);
    expect(seen.find((c) => c.argv[0] === "d1" && c.argv[1] === "migrations")?.argv).toContain("--remote");
    // The database id is written into wrangler.toml; no KV namespace without auth.oauth.
    const toml = readFileSync(join(dir, "wrangler.toml"), "utf8");
    expect(toml).toContain('database_id = "4a3c1f2e-7b6d-4e5f-9a8b-0c1d2e3f4a5b"');
    expect(toml).not.toMatch(/^\[\[kv_namespaces\]\]/m);
    expect(probe.hits).toEqual(expect.arrayContaining(["/healthz", "/readyz"]));
    expect(r.out).toContain(`the gateway is at ${probe.url}`);
    expect(r.out).toMatch(/token mint --key .*signing-key\.json --gateway https:\/\/gw\.example\.com/);

    // Run again: the database exists now and the key is set, so only migrations, the check and the deploy run.
    const fake2 = fakeWrangler(join(dir, "again"), { secrets: ["GITHUB_TOKEN", "PORTCULLIS_SIGNING_KEY"], probe: probe.url });
    const rerun = await run(cli, ["deploy"], { cwd: dir, env: { PATH: `${fake2.bin}:${process.env.PATH}` } });
    expect(rerun.code, rerun.out + rerun.err).toBe(0);
    expect(calls(fake2.log).map((c) => c.argv.slice(0, 2).join(" "))).toEqual(["deploy --dry-run", "d1 migrations", "secret list", "deploy --config"]);
  }, 180_000);

  it("stops before deploying when a secret the config names is not set, naming it", async () => {
    const dir = join(work, "fake-missing");
    cpSync(project, dir, { recursive: true, verbatimSymlinks: true });
    const probe = await probeServer();
    const fake = fakeWrangler(dir, { secrets: ["PORTCULLIS_SIGNING_KEY"], probe: probe.url });
    const r = await run(join(dir, "node_modules", ".bin", "portcullis"), ["deploy"], { cwd: dir, env: { PATH: `${fake.bin}:${process.env.PATH}` } });
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/not set on the Worker: GITHUB_TOKEN/);
    expect(r.err).toContain("npx wrangler secret put GITHUB_TOKEN");
    expect(calls(fake.log).some((c) => c.argv[0] === "deploy" && c.argv[1] !== "--dry-run")).toBe(false);
    expect(probe.hits).toEqual([]);
  }, 180_000);

  it("creates the OAUTH_KV namespace only when auth.oauth is on", async () => {
    const dir = join(work, "fake-oauth");
    cpSync(project, dir, { recursive: true, verbatimSymlinks: true });
    await deployable(dir, { rules: 2, oauth: true });
    const probe = await probeServer();
    const fake = fakeWrangler(dir, { secrets: ["PORTCULLIS_SIGNING_KEY", "GITHUB_TOKEN"], probe: probe.url });
    const r = await run(join(dir, "node_modules", ".bin", "portcullis"), ["deploy"], { cwd: dir, env: { PATH: `${fake.bin}:${process.env.PATH}` } });
    expect(r.code, r.out + r.err).toBe(0);
    expect(calls(fake.log).map((c) => c.argv.slice(0, 3).join(" "))).toContain("kv namespace create");
    expect(readFileSync(join(dir, "wrangler.toml"), "utf8")).toMatch(/\[\[kv_namespaces\]\]\nbinding = "OAUTH_KV"\nid = "0123456789abcdef0123456789abcdef"/);
  }, 180_000);
});

describe("the README's Deploy section", () => {
  it("its offline part, walked as written from an empty directory", () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const blocks = [...readme.matchAll(/```sh deploy-test\n([\s\S]*?)```/g)].map((m) => m[1] ?? "");
    expect(blocks.length).toBeGreaterThan(0);
    const install = "npm install --save-dev portcullis wrangler";
    const script = blocks.join("\n");
    expect(script).toContain(install);
    const dir = join(work, "readme");
    mkdirSync(dir);
    // The one substitution: that install comes from the packed tarball, offline (package-install.ts).
    const installer = join(work, "install.mjs");
    writeFileSync(
      installer,
      `import { installPackage } from ${JSON.stringify(pathToFileURL(join(root, "test", "e2e", "package-install.ts")).href)};\ninstallPackage(process.cwd(), ${JSON.stringify(tgz)});\n`,
    );
    const walked = script.replace(install, `node ${JSON.stringify(installer)}`);
    const r = spawnSync("bash", ["-euo", "pipefail", "-c", walked], { cwd: dir, env: npmEnv(), encoding: "utf8", timeout: 300_000 });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok {3}bundle: .*KiB/);
    expect(r.stdout).toMatch(/would: create the D1 database/);
    // What init wrote keeps keys and local state out of the team's repository.
    const ignored = readFileSync(join(dir, "my-gateway", ".gitignore"), "utf8");
    for (const p of [".portcullis/", ".wrangler/", "node_modules/"]) expect(ignored).toContain(p);
  }, 300_000);
});
