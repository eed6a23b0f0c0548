/**
 * `portcullis classify`, `portcullis suggest-manifest` and the classification banner of
 * `portcullis dev` (and the guide it prints after it, as start does: its --persist-to state, the
 * approver sign-in that opens the console, the try-it recipe's tools/list run as printed), end to end against real upstreams on loopback: the bundled demo upstream
 * (server-everything, legacy era) mapped by the repo's mappings/everything.yaml, and the
 * 2026-07-28-only fixture behind a bearer header taken from the environment. The tool lists the
 * commands read are checked against an independent MCP client's (the SDK's) and their schema
 * hashes against src/governance/catalog-entry.ts `schemaHash`; drafts against mappingFileSchema. Owns
 * the processes it starts (the demo upstream, the fixture, one `dev` process group) and a
 * temporary directory (configs, mapping dirs, drafts, a dev key), so nothing in the repo is
 * written. Must never: leave a process running, or send traffic anywhere but 127.0.0.1.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mappingFileSchema } from "../../src/config/mapping-schema.ts";
import { schemaHash } from "../../src/governance/catalog-entry.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, groupMembers, type Proc, root, startEverything, waitFor } from "./harness.ts";

const CLI = join(root, "bin", "portcullis.mjs");
const tmp = mkdtempSync(join(tmpdir(), "portcullis-classify-e2e-"));
const emptyDir = join(tmp, "empty-mappings");
mkdirSync(emptyDir);

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in the temporary directory; its exit code and output (bounded at 60 s). */
function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((res) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: tmp, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
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
      res({ code, stdout, stderr });
    });
  });
}

function config(name: string, mappingsDir: string | null, upstreams: string): string {
  const file = join(tmp, name);
  writeFileSync(
    file,
    `actor: local:classify-e2e\negress:\n  allow_loopback: true\n${mappingsDir ? `mappings_dir: ${mappingsDir}\n` : ""}upstreams:\n${upstreams}`,
  );
  return file;
}

/** The banner's line for one tool: `  <LEVEL> <upstream>/<tool>  <why>`. */
function line(out: string, upstream: string, tool: string): string | undefined {
  return out.split("\n").find((l) => new RegExp(`^  (OK|NOTE|WARN|BLOCK) +${upstream}/${tool.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `).test(l));
}
const levelOf = (out: string, upstream: string, tool: string) => line(out, upstream, tool)?.trim().split(/\s+/)[0];

let everything: Proc;
let evUrl = "";
/** What server-everything lists to a client declaring no capabilities, read by the SDK's client. */
let listed: JsonObject[] = [];
let mapped: Record<string, unknown> = {};

beforeAll(async () => {
  const port = await freePort();
  everything = await startEverything(port);
  evUrl = `http://127.0.0.1:${port}/mcp`;
  const client = new Client({ name: "classify-e2e", version: "1" }, { versionNegotiation: { mode: "legacy" } });
  await client.connect(new StreamableHTTPClientTransport(new URL(evUrl)));
  try {
    listed = (await client.listTools()).tools as unknown as JsonObject[];
  } finally {
    await client.close().catch(() => undefined);
  }
  mapped = (parse(readFileSync(join(root, "mappings", "everything.yaml"), "utf8")) as { tools: Record<string, unknown> }).tools;
});

afterAll(async () => {
  await everything?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe("portcullis classify", () => {
  it("with mappings_dir → mappings/: an OK line for every tool server-everything lists (each one mapped), exit 0", async () => {
    expect(listed.length).toBeGreaterThan(5);
    const file = config("mapped.yaml", join(root, "mappings"), `  - name: everything\n    url: ${evUrl}\n`);
    const r = await cli(["classify", "--config", file]);
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toContain(`Portcullis classification: ${listed.length} tools — ${listed.length} OK, 0 NOTE, 0 WARN, 0 BLOCK`);
    for (const t of listed) {
      const name = String(t.name);
      expect(Object.keys(mapped), `${name} is in mappings/everything.yaml`).toContain(name);
      expect(line(r.stdout, "everything", name), name).toMatch(/^ {2}OK {4}\S+ +mapped: (read_only|idempotent|reversible|irreversible)/);
    }
    expect(line(r.stdout, "everything", "echo")).toMatch(/mapped: read_only; policy: allow \(no rule: the baseline\)$/);
    // The mapping says approval required; with no rule the baseline holds it — each line shows what the policy makes of the tool.
    expect(line(r.stdout, "everything", "get-env")).toMatch(/mapped: read_only, approval required; policy: require_approval \(no rule: the baseline\)$/);
    expect(r.stdout).toMatch(/^ {2}everything \(http:\/\/127\.0\.0\.1:\d+\/mcp, legacy 2025-\d\d-\d\d\): \d+ tools listed/m);
    expect(r.stderr).toBe("");

    // The same report as JSON: the hashes are catalog.ts's of the tools the SDK client lists.
    const j = await cli(["classify", "--config", file, "--json"]);
    expect(j.code, j.stderr).toBe(0);
    const report = JSON.parse(j.stdout) as {
      ok: boolean;
      totals: Record<string, number>;
      tools: { tool: string; level: string; mapped: boolean; source: string; schema_hash: string; exposed_name: string }[];
      upstreams: { name: string; reachable: boolean; era: string }[];
    };
    expect(report.ok).toBe(true);
    expect(report.totals).toEqual({ OK: listed.length, NOTE: 0, WARN: 0, BLOCK: 0 });
    expect(report.upstreams).toMatchObject([{ name: "everything", reachable: true, era: "legacy" }]);
    expect(report.tools.map((t) => t.tool).sort()).toEqual(listed.map((t) => String(t.name)).sort());
    expect(report.tools.find((t) => t.tool === "get-env")).toMatchObject({
      policy: { decision: "require_approval", rule: null, hidden: false, sometimes: [] },
    });
    for (const t of report.tools) {
      expect(t).toMatchObject({ level: "OK", mapped: true, source: "mapping", exposed_name: t.tool });
      expect(t.schema_hash).toBe(schemaHash(listed.find((l) => l.name === t.tool)!));
    }
  });

  it("with an empty mappings dir: NOTE for reads, WARN for writes, BLOCK for the unclassified; exit 1 saying why", async () => {
    const file = config("unmapped.yaml", emptyDir, `  - name: everything\n    url: ${evUrl}\n`);
    const r = await cli(["classify", "--config", file]);
    expect(r.code, r.stdout).toBe(1);
    expect(levelOf(r.stdout, "everything", "echo")).toBe("NOTE"); // no verb in its name; readOnlyHint drafts a read
    expect(line(r.stdout, "everything", "echo")).toContain("heuristic:read_hint");
    expect(levelOf(r.stdout, "everything", "get-sum")).toBe("NOTE");
    expect(line(r.stdout, "everything", "get-sum")).toContain("heuristic:read");
    expect(levelOf(r.stdout, "everything", "toggle-simulated-logging")).toBe("WARN");
    expect(levelOf(r.stdout, "everything", "trigger-long-running-operation")).toBe("WARN");
    expect(levelOf(r.stdout, "everything", "gzip-file-as-resource")).toBe("BLOCK");
    expect(line(r.stdout, "everything", "gzip-file-as-resource")).toContain("unclassified");
    const totals = /— 0 OK, (\d+) NOTE, (\d+) WARN, (\d+) BLOCK/.exec(r.stdout);
    expect(totals, r.stdout).not.toBeNull();
    expect(Number(totals![1]) + Number(totals![2]) + Number(totals![3])).toBe(listed.length);
    expect(r.stdout).toContain("mode: observe (no mappings loaded)");
    expect(r.stderr).toMatch(/^portcullis classify: exit 1: \d+ tools? BLOCK/);
  });

  it("a 2026-07-28 upstream is read with server/discover and its bearer header from the environment (never printed); an unreachable one is named with its reason; exit 1", async () => {
    const secret = `user-${Math.random().toString(36).slice(2)}-classify`;
    const modern = await startModernOnlyUpstream({ requireBearer: "user-" });
    const dead = await freePort(); // nothing listens there
    try {
      const file = config(
        "modern.yaml",
        null,
        `  - name: modern\n    url: ${modern.url}\n    headers: { Authorization: "Bearer \${CLASSIFY_E2E_TOKEN}" }\n  - name: dead\n    url: http://127.0.0.1:${dead}/mcp\n`,
      );
      const r = await cli(["classify", "--config", file], { CLASSIFY_E2E_TOKEN: secret });
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/^ {2}modern \(http:\/\/127\.0\.0\.1:\d+\/mcp, modern 2026-07-28\): 4 tools listed$/m);
      for (const t of ["bump", "ask_name", "ask_model", "ask_roots"]) expect(levelOf(r.stdout, "modern", t), t).toBe("BLOCK");
      expect(r.stdout).toContain(`UNREACHABLE dead (http://127.0.0.1:${dead}/mcp): connection refused (ECONNREFUSED)`);
      expect(r.stderr).toContain(`upstream dead unreachable: connection refused`);
      expect(r.stdout + r.stderr).not.toContain(secret);
      // It asked as a modern client: discover, then tools/list, each with the header and its routing headers.
      const seen = modern.log.map((s) => [s.method, s.headers.authorization, s.headers["mcp-method"]]);
      expect(seen).toEqual([
        ["server/discover", `Bearer ${secret}`, "server/discover"],
        ["tools/list", `Bearer ${secret}`, "tools/list"],
      ]);

      // The variable unset: a config problem naming it, exit 2, nothing sent.
      const before = modern.log.length;
      const unset = await cli(["classify", "--config", file]);
      expect(unset.code).toBe(2);
      expect(unset.stderr).toContain(`upstreams[0].headers.Authorization: \${CLASSIFY_E2E_TOKEN} is not set`);
      expect(modern.log.length).toBe(before);
    } finally {
      await modern.close();
    }
  });
});

describe("portcullis suggest-manifest", () => {
  it("drafts a mapping file that parses with mappingFileSchema, pins each listed tool's schemaHash, never overwrites, and classifies OK once moved into mappings_dir", async () => {
    const draftDir = join(tmp, "drafts");
    mkdirSync(draftDir);
    const out = join(draftDir, "everything.yaml");
    const file = config("suggest.yaml", emptyDir, `  - name: everything\n    url: ${evUrl}\n`);
    const r = await cli(["suggest-manifest", "--config", file, "--upstream", "everything", "--out", out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`wrote a DRAFT for ${listed.length} tools of everything to ${out}`);
    const text = readFileSync(out, "utf8");
    const day = new Date().toISOString().slice(0, 10);
    expect(text.split("\n")[0]).toBe(
      `# DRAFT — generated by portcullis suggest-manifest on ${day} from ${evUrl}; never enforced until reviewed: review every effect, then move it into mappings_dir`,
    );
    const parsed = mappingFileSchema.safeParse(parse(text));
    expect(parsed.success, JSON.stringify(parsed.error?.issues)).toBe(true);
    const tools = parsed.data!.tools;
    expect(Object.keys(tools).sort()).toEqual(listed.map((t) => String(t.name)).sort());
    for (const t of listed) expect(tools[String(t.name)]!.schema_hash, String(t.name)).toBe(schemaHash(t));
    // The heuristic's guesses, with the tool's own annotations in a comment.
    expect(tools["get-sum"]).toMatchObject({
      effect: "read_only",
      verb: "get",
      axes: { reversibility: "reversible", blast_radius: "single", externality: "internal" },
    });
    expect(tools["toggle-simulated-logging"]).toMatchObject({ effect: "reversible", verb: "toggle" });
    expect(tools["gzip-file-as-resource"]).toMatchObject({ effect: "irreversible", axes: { reversibility: "irreversible", blast_radius: "systemic" } });
    expect(text).toMatch(/ {2}# ro true, destr false, idem true, open false; guess: heuristic:read_hint\n {2}echo:\n/);

    // Never overwritten: refused, exit 1, the file unchanged; --force replaces it.
    writeFileSync(out, `${text}# reviewed by hand\n`);
    const again = await cli(["suggest-manifest", "--config", file, "--upstream", "everything", "--out", out]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`refused: ${out} exists and is never overwritten (pass --force`);
    expect(readFileSync(out, "utf8")).toBe(`${text}# reviewed by hand\n`);
    const forced = await cli(["suggest-manifest", "--config", file, "--upstream", "everything", "--out", out, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(readFileSync(out, "utf8")).not.toContain("# reviewed by hand");

    // Never written where the gateway would load it unreviewed: the config's mappings_dir, under an upstream's name.
    const live = join(tmp, "live-mappings");
    mkdirSync(live);
    const liveConfig = config("suggest-live.yaml", live, `  - name: everything\n    url: ${evUrl}\n`);
    const into = await cli(["suggest-manifest", "--config", liveConfig, "--upstream", "everything", "--out", join(live, "everything.yaml"), "--force"]);
    expect(into.code).toBe(1);
    expect(into.stderr).toContain("mappings_dir");
    expect(existsSync(join(live, "everything.yaml"))).toBe(false);

    // Reviewed and moved into mappings_dir: every tool is OK (the pinned hashes match what it lists), exit 0.
    copyFileSync(out, join(live, "everything.yaml"));
    const classified = await cli(["classify", "--config", liveConfig]);
    expect(classified.code, classified.stdout + classified.stderr).toBe(0);
    expect(classified.stdout).toContain(`${listed.length} OK, 0 NOTE, 0 WARN, 0 BLOCK`);

    // Without --out the draft goes to stdout; an unknown upstream is a usage error.
    const printed = await cli(["suggest-manifest", "--config", file, "--upstream", "everything"]);
    expect(printed.code).toBe(0);
    expect(mappingFileSchema.safeParse(parse(printed.stdout)).success).toBe(true);
    const unknown = await cli(["suggest-manifest", "--config", file, "--upstream", "nope"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("has no upstream named nope (it has: everything)");
    expect(statSync(join(root, "mappings", "everything.yaml")).isFile()).toBe(true);
  });

  it("--help for both commands, and the usage lists them", async () => {
    for (const cmd of ["classify", "suggest-manifest"]) {
      const h = await cli([cmd, "--help"]);
      expect(h.code).toBe(0);
      expect(h.stdout).toContain(`usage: portcullis ${cmd} --config FILE`);
    }
    const u = await cli([]);
    expect(u.stderr).toContain("portcullis classify --config FILE [--json] [--live]");
    expect(u.stderr).toContain("portcullis suggest-manifest --config FILE --upstream NAME [--out FILE] [--force]");
  });
});

describe("the classification banner of `portcullis dev`", () => {
  it("is printed once the gateway answers /healthz, with a NOTE line for an upstream it cannot reach, and the gateway keeps serving; then the guide, as start prints it", async () => {
    const port = await freePort();
    const dead = await freePort();
    const origin = `http://127.0.0.1:${port}`;
    const persist = join(tmp, "dev-state");
    const file = config("dev.yaml", join(root, "mappings"), `  - name: everything\n    url: ${evUrl}\n  - name: dead\n    url: http://127.0.0.1:${dead}/mcp\n`);
    const dev: ChildProcess = spawn(process.execPath, [CLI, "dev", "--config", file, "--port", String(port), "--persist-to", "dev-state"], {
      cwd: tmp,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, PORTCULLIS_DEV_KEY_FILE: join(tmp, "dev-key.json"), WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" },
    });
    let logs = "";
    dev.stdout?.on("data", (d: Buffer) => {
      logs += d;
    });
    dev.stderr?.on("data", (d: Buffer) => {
      logs += d;
    });
    try {
      await waitFor(`http://127.0.0.1:${port}/healthz`, 120_000).catch((e: Error) => {
        throw new Error(`${e.message}\n${logs}`);
      });
      // The banner follows /healthz within its few-second budget (bounded wait here).
      for (let i = 0; i < 80 && !/upstream dead .*not reachable for the banner/.test(logs); i++) await new Promise((r) => setTimeout(r, 250));
      expect(logs).toContain(`Portcullis classification: ${listed.length} tools — ${listed.length} OK, 0 NOTE, 0 WARN, 0 BLOCK`);
      expect(logs).toMatch(/ {2}OK {4}everything\/echo +mapped: read_only/);
      expect(logs).toMatch(new RegExp(`  NOTE  upstream dead \\(http://127\\.0\\.0\\.1:${dead}/mcp\\) not reachable for the banner: connection refused`));
      expect(dev.exitCode).toBeNull();
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).ok).toBe(true);

      // --persist-to (relative to the current directory): the gateway's local state is there.
      expect(logs).toContain(`portcullis: gateway on ${origin}/mcp (its state in ${persist})`);
      expect(existsSync(persist) && readdirSync(persist).length > 0, `nothing in ${persist}`).toBe(true);
      // The guide follows the banner: what the config governs, the console with an approver sign-in, the try-it recipe.
      const TOKEN = /^(eyJ[\w-]+\.[\w-]+\.[\w-]+)$/m;
      for (let i = 0; i < 120 && !(TOKEN.test(logs) && logs.includes("ledger verify --url")); i++) await new Promise((r) => setTimeout(r, 250));
      const token = TOKEN.exec(logs)?.[1];
      expect(token, `no approver grant in dev's output:\n${logs}`).toBeDefined();
      expect(logs).toContain(`portcullis: the gateway serves ${file} (mode enforce; 0 policy rules):`);
      expect(logs).toContain(`  upstreams  everything (${evUrl}) as everything__<tool>, dead (http://127.0.0.1:${dead}/mcp) as dead__<tool>`);
      expect(logs).toContain("  agents     an MCP client without a grant is the agent local:classify-e2e (team local)");
      expect(logs).toContain(`Console: ${origin}/console`);
      expect(logs).toContain(`Sign in at ${origin}/console/login by pasting this approver grant`);
      expect(logs).toContain(`npx portcullis ledger verify --url ${origin}`);
      const claims = JSON.parse(Buffer.from(token!.split(".")[1]!, "base64url").toString()) as Record<string, unknown>;
      expect(claims).toMatchObject({ iss: origin, aud: origin, sub: "human:demo-approver", team: "local", roles: ["approver", "auditor"] });
      // The grant signs in to the console.
      const login = await fetch(`${origin}/console/login`, {
        method: "POST",
        redirect: "manual",
        headers: { origin, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token: token! }).toString(),
      });
      expect(login.status).toBe(303);
      // Step 1 of the recipe, run as printed: the agent's tools/list through this gateway.
      const curl = logs.split("\n").find((l) => l.trim().startsWith(`curl -s ${origin}/mcp`) && l.includes("tools/list"));
      expect(curl, logs).toBeDefined();
      const listedByCurl = execFileSync("sh", ["-c", curl!.trim()], { encoding: "utf8", timeout: 30_000 });
      expect(listedByCurl).toContain('"everything__echo"');
    } finally {
      if (dev.pid !== undefined) {
        try {
          process.kill(-dev.pid, "SIGTERM");
        } catch {
          /* gone */
        }
        for (let i = 0; i < 80 && groupMembers(dev.pid).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
        if (groupMembers(dev.pid).length > 0) process.kill(-dev.pid, "SIGKILL");
        for (let i = 0; i < 30 && groupMembers(dev.pid).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
      }
    }
  });
});
