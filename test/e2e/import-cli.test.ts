/**
 * `portcullis import | restore | doctor --clients` in Node, as an operator runs them (no gateway
 * needed): the sample client configs under test/fixtures/clients (Claude Code, Claude Desktop,
 * Cursor, VS Code) are copied into a temporary HOME / working directory, imported through
 * bin/portcullis.mjs run as a child process, and checked on disk: the upstreams created in the
 * config (comments kept, and `portcullis doctor --config` accepts it), no inline secret copied
 * anywhere (the written config, stdout, stderr; the rewritten client file keeps only the kept
 * servers' own), the backup written once, `restore` returning the client file byte for byte, and
 * `doctor --clients` finding a server added back directly. A server that signs in with OAuth (by
 * its entry's settings, or by the probe, against loopback servers this file starts: a 401 with
 * resource_metadata, a 401 with RFC 9728 metadata) becomes an `auth: {type: oauth}` upstream, its
 * client settings named but never copied; what import cannot govern — stdio servers, legacy SSE —
 * stays in the client file byte for byte (comments too) and is named with its reason; a server
 * that does not answer the probe, or redirects, is imported; --offline probes nothing.
 * `--gateway` is normalised to /mcp or /mcp/<upstream> in import and doctor --clients alike, any
 * other path refused (exit 2). Every gateway entry written, in every client's format, and every line the
 * commands print for connecting a client, read the agent's grant from PORTCULLIS_AGENT_TOKEN, never
 * PORTCULLIS_TOKEN (the operator CLI's admin and approver grants); doctor --clients reports an
 * entry that still reads PORTCULLIS_TOKEN. Owns only its temporary directories; touches no real
 * client config.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parse, parseDocument } from "yaml";
import { type Run, runScript } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON read loosely in tests
type Any = any;

// biome-ignore-start lint/suspicious/noTemplateCurlyInString: the expected headers quote the ${NAME} reference syntax literally
const ROOT = resolve(import.meta.dirname, "../..");
const CLI = join(ROOT, "bin/portcullis.mjs");
const FIXTURES = join(ROOT, "test/fixtures/clients");
const ENTRY_URL = "http://127.0.0.1:8787/mcp";
/** Every inline secret value in the fixtures: none may appear in anything the commands write or print. */
const SECRETS = [
  "sk-live-4f9a2c7e1b8d3a6f0e5c9b2a7d4e1f8c",
  "sntrys_eyJpYXQiOjE3MDAwMDAwMDB9_k3y",
  "fs-inline-9d8c7b6a5f4e3d2c1b0a",
  "ntn_desktop_inline_51823749aa0b9c",
  "wx-inline-7e6d5c4b3a29f8e7",
  "ctx7sk-cursor-inline-0f1e2d3c4b5a",
  "srch-cursor-inline-8a7b6c5d4e3f2a1b",
  "rogue-inline-secret-123456789abc",
];
const CONFIG = `# my gateway: comments must survive an import
actor: local:me
upstreams:
  - name: github   # already here: an imported "GitHub" must get another name
    url: https://example.com/mcp
`;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A sandbox: `dir` (the working directory) with `home` inside it, and the starting portcullis.yaml unless `config` is false. */
function sandbox(config = true) {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-import-"));
  dirs.push(dir);
  const home = join(dir, "home");
  mkdirSync(home);
  if (config) writeFileSync(join(dir, "portcullis.yaml"), CONFIG);
  return { dir, home };
}

/** `portcullis ARGS` with this process's Node, in `cwd`, HOME = `home`, no token in the environment, killed after 60 s. */
const portcullis = (args: string[], { cwd, home }: { cwd: string; home: string }): Promise<Run> =>
  runScript(CLI, args, { HOME: home }, { cwd, drop: ["PORTCULLIS_AGENT_TOKEN", "XDG_CONFIG_HOME"] });

/** No fixture secret in any of `texts`. */
function expectNoSecret(...texts: string[]) {
  for (const t of texts) for (const s of SECRETS) expect(t).not.toContain(s);
}

/** A rewritten client file: no fixture secret but those of the servers import kept there (`kept`: their own, left in place). */
function expectOnlyKeptSecrets(text: string, kept: string[]) {
  for (const s of SECRETS) if (!kept.includes(s)) expect(text).not.toContain(s);
  for (const s of kept) expect(text).toContain(s);
}

/** The exact text of server `name`'s entry in a JSON(C) client file (from its key to its closing brace, at `indent`). */
function entryText(text: string, name: string, indent = "    "): string {
  const start = text.indexOf(`${indent}${JSON.stringify(name)}: {`);
  expect(start, name).toBeGreaterThanOrEqual(0);
  const end = text.indexOf(`\n${indent}}`, start);
  return text.slice(start, end + indent.length + 2);
}

/** A reference to the operator CLI's variable (`${PORTCULLIS_TOKEN}`, `${env:PORTCULLIS_TOKEN}`, an env key), not PORTCULLIS_AGENT_TOKEN. */
const OPERATOR_TOKEN = /(?<![A-Za-z0-9_])PORTCULLIS_TOKEN(?![A-Za-z0-9_])/;

/** A client file import wrote: its gateway entry reads PORTCULLIS_AGENT_TOKEN, and nothing in it names PORTCULLIS_TOKEN. */
function expectAgentToken(clientText: string) {
  expect(clientText).toContain("PORTCULLIS_AGENT_TOKEN");
  expect(clientText).not.toMatch(OPERATOR_TOKEN);
}

/** import's output: every line that connects a client or sets its grant uses PORTCULLIS_AGENT_TOKEN. */
function expectAgentTokenPrinted(stdout: string) {
  expect(stdout).toContain("PORTCULLIS_AGENT_TOKEN");
  expect(stdout).not.toMatch(/\$\{(env:)?PORTCULLIS_TOKEN\}|export PORTCULLIS_TOKEN|\.PORTCULLIS_TOKEN\b|PORTCULLIS_TOKEN=/);
}

const upstreamsOf = (file: string): Any[] => parse(readFileSync(file, "utf8")).upstreams;
const byName = (ups: Any[], name: string) => ups.find((u) => u.name === name);

describe("portcullis import --client claude-code (~/.claude.json)", () => {
  it("imports the HTTP servers by reference, backs up once, is audited by doctor --clients, and restores byte for byte", async () => {
    const { dir, home } = sandbox();
    const file = join(home, ".claude.json");
    copyFileSync(join(FIXTURES, "claude-code.json"), file);
    const original = readFileSync(file);
    const opts = { cwd: dir, home };

    const r = await portcullis(["import", "--client", "claude-code"], opts);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);

    // Upstreams: every HTTP server (user and project scope), named and deduped, secrets by reference.
    const configFile = join(dir, "portcullis.yaml");
    const configText = readFileSync(configFile, "utf8");
    const ups = upstreamsOf(configFile);
    expect(ups.map((u) => u.name)).toEqual(["github", "github-2", "linear", "sentry-mcp"]);
    expect(byName(ups, "github").url).toBe("https://example.com/mcp");
    expect(byName(ups, "github-2")).toMatchObject({ url: "https://api.githubcopilot.com/mcp/", headers: { Authorization: "Bearer ${GITHUB_2_TOKEN}" } });
    expect(byName(ups, "linear").headers).toEqual({ Authorization: "Bearer ${LINEAR_API_KEY}", "X-Workspace": "acme" });
    expect(byName(ups, "sentry-mcp")).toMatchObject({ url: "https://mcp.sentry.dev/mcp", headers: { "X-Api-Key": "${SENTRY_MCP_X_API_KEY}" } });
    for (const u of ups) expect(u.name).toMatch(/^[a-z][a-z0-9-]{0,30}$/);
    expect(configText).toContain("# my gateway: comments must survive an import");
    expect(configText).toContain('# already here: an imported "GitHub" must get another name');

    // What to set, and what was skipped; the connect-by-hand line.
    expect(r.stdout).toContain("export GITHUB_2_TOKEN=…");
    expect(r.stdout).toContain("npx wrangler secret put GITHUB_2_TOKEN");
    expect(r.stdout).toContain("npx wrangler secret put SENTRY_MCP_X_API_KEY");
    expect(r.stdout).toContain("npx wrangler secret put LINEAR_API_KEY");
    expect(r.stdout).toMatch(
      /stays direct: filesystem \(mcpServers\.filesystem\) is not governed by Portcullis \(not governed: stdio\): a stdio server \(npx /,
    );
    expect(r.stdout).toContain("a Worker cannot spawn processes; import --bridge serves it to the gateway through portcullis bridge");
    expect(r.stdout).toContain(`claude mcp add --transport http portcullis ${ENTRY_URL} --header 'Authorization: Bearer \${PORTCULLIS_AGENT_TOKEN}'`);
    expect(r.stdout).toContain("the client sends PORTCULLIS_AGENT_TOKEN from its environment: export PORTCULLIS_AGENT_TOKEN=$(portcullis token mint");
    expectAgentTokenPrinted(r.stdout);

    // The client file: the stdio server as it was, then the gateway entry; project HTTP servers gone; every other key as it was.
    const text = readFileSync(file, "utf8");
    expectNoSecret(configText, r.stdout, r.stderr);
    expectOnlyKeptSecrets(text, ["fs-inline-9d8c7b6a5f4e3d2c1b0a"]);
    const before = JSON.parse(original.toString("utf8"));
    const after = JSON.parse(text);
    expect(after.mcpServers).toEqual({
      filesystem: before.mcpServers.filesystem,
      portcullis: { type: "http", url: ENTRY_URL, headers: { Authorization: "Bearer ${PORTCULLIS_AGENT_TOKEN}" } },
    });
    expect(text).toContain(entryText(original.toString("utf8"), "filesystem"));
    expectAgentToken(text);
    expect(after.projects["/home/dev/app"].mcpServers).toEqual({});
    const { mcpServers: _a, projects: pa, ...restAfter } = after;
    const { mcpServers: _b, projects: pb, ...restBefore } = before;
    expect(restAfter).toEqual(restBefore);
    expect(Object.keys(after)).toEqual(Object.keys(before));
    for (const p of Object.keys(pb)) expect({ ...pa[p], mcpServers: null }).toEqual({ ...pb[p], mcpServers: null });
    const o = original.toString("utf8");
    expect(text.startsWith(o.slice(0, o.indexOf('"mcpServers"')))).toBe(true);
    expect(text).toContain('      "allowedTools": ["Bash(npm test)"],\n');
    expect(text.endsWith('  "userID": "0a1b2c3d"\n}\n')).toBe(true);

    // The backup: the original bytes.
    const backup = `${file}.portcullis-backup`;
    expect(readFileSync(backup).equals(original)).toBe(true);

    // The written config is a sound Portcullis config.
    const d = await portcullis(["doctor", "--config", "portcullis.yaml"], opts);
    expect(d.stderr).toBe("");
    expect(d.code).toBe(0);

    // The imported file goes through the gateway only.
    const ok = await portcullis(["doctor", "--clients", "--client", "claude-code"], opts);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/claude-code: .*\.claude\.json: ok \(mcpServers\.portcullis; 1 direct, not governed\)/);
    expect(ok.stdout).toContain("UNGOVERNED filesystem (mcpServers.filesystem, stdio npx");
    expect(ok.stdout).toContain("not governed: stdio (a Worker cannot spawn processes");
    expect(ok.stdout).toContain("not counted as a problem");

    // A server added back directly is an ungoverned path: exit 1, named.
    after.mcpServers.rogue = { type: "http", url: "https://rogue.example.com/mcp", headers: { Authorization: "Bearer rogue-inline-secret-123456789abc" } };
    writeFileSync(file, `${JSON.stringify(after, null, 2)}\n`);
    const bad = await portcullis(["doctor", "--clients", "--client", "claude-code"], opts);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/UNGOVERNED rogue \(mcpServers\.rogue, http https:\/\/rogue\.example\.com\/mcp\)/);
    const badAll = await portcullis(["doctor", "--clients", "--json"], opts);
    expect(badAll.code).toBe(1);
    const j = JSON.parse(badAll.stdout);
    expect(j.ok).toBe(false);
    expect(j.clients.map((c: Any) => c.client)).toEqual(["claude-code"]);
    expect(j.clients[0].ungoverned.map((u: Any) => [u.server, u.reason ?? null, u.problem])).toEqual([
      ["filesystem", "stdio", false],
      ["rogue", null, true],
    ]);
    expect(j.clients[0].gateway.map((g: Any) => g.server)).toEqual(["portcullis"]);
    expectNoSecret(bad.stdout, badAll.stdout);

    // A second import takes the new server in, and leaves the first backup as it was.
    const r2 = await portcullis(["import", "--client", "claude-code"], opts);
    expect(r2.code).toBe(0);
    expect(r2.stdout).toContain("kept as it was (from the first import; never overwritten)");
    expect(readFileSync(backup).equals(original)).toBe(true);
    expect(byName(upstreamsOf(configFile), "rogue")).toMatchObject({
      url: "https://rogue.example.com/mcp",
      headers: { Authorization: "Bearer ${ROGUE_TOKEN}" },
    });
    expect(upstreamsOf(configFile).map((u) => u.name)).toEqual(["github", "github-2", "linear", "sentry-mcp", "rogue"]);
    expectNoSecret(readFileSync(configFile, "utf8"), r2.stdout, r2.stderr);
    expectOnlyKeptSecrets(readFileSync(file, "utf8"), ["fs-inline-9d8c7b6a5f4e3d2c1b0a"]);
    expect((await portcullis(["doctor", "--clients", "--client", "claude-code"], opts)).code).toBe(0);

    // restore: the original bytes back, the backup gone; a second restore has nothing to restore.
    const back = await portcullis(["restore", "--client", "claude-code"], opts);
    expect(back.code).toBe(0);
    expect(readFileSync(file).equals(original)).toBe(true);
    expect(existsSync(backup)).toBe(false);
    const again = await portcullis(["restore", "--client", "claude-code"], opts);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("no backup");
    // The original, restored, reaches servers directly again.
    const direct = await portcullis(["doctor", "--clients", "--client", "claude-code"], opts);
    expect(direct.code).toBe(1);
    expect(direct.stdout).toContain("UNGOVERNED filesystem");
    expect(direct.stdout).toContain('MISSING no "portcullis" entry');
    expectNoSecret(direct.stdout);
  });
});

describe("portcullis import: the other clients", () => {
  it("claude-desktop (--path, --json): the mcp-remote bridge is an HTTP server, its inline env secret is not copied, the gateway entry is a bridge", async () => {
    const { dir, home } = sandbox();
    const file = join(dir, "claude_desktop_config.json");
    copyFileSync(join(FIXTURES, "claude-desktop.json"), file);
    const original = readFileSync(file);
    const opts = { cwd: dir, home };
    const r = await portcullis(["import", "--client", "claude-desktop", "--path", file, "--gateway", "https://gw.example.com/mcp", "--json"], opts);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.upstreams).toEqual([
      {
        name: "notion",
        url: "https://mcp.notion.com/mcp",
        description: "notion, imported from claude-desktop (mcpServers.notion)",
        headers: { Authorization: "Bearer ${NOTION_TOKEN}" },
      },
    ]);
    expect(j.secrets.map((s: Any) => [s.name, s.deploy])).toEqual([["NOTION_TOKEN", "npx wrangler secret put NOTION_TOKEN"]]);
    expect(j.kept).toEqual([
      { name: "weather", where: "mcpServers.weather", reason: "stdio", detail: expect.stringContaining("a stdio server (uvx mcp-weather --api-key …)") },
    ]);
    expect(j.backup).toEqual({ path: `${file}.portcullis-backup`, written: true, existed: false });
    const after = JSON.parse(readFileSync(file, "utf8"));
    expect(after.globalShortcut).toBe("Ctrl+Space");
    expect(Object.keys(after.mcpServers)).toEqual(["weather", "portcullis"]);
    expect(readFileSync(file, "utf8")).toContain(entryText(original.toString("utf8"), "weather"));
    expect(after.mcpServers.portcullis.args).toEqual([
      "-y",
      "mcp-remote",
      "https://gw.example.com/mcp",
      "--header",
      "Authorization:Bearer ${PORTCULLIS_AGENT_TOKEN}",
    ]);
    expect(after.mcpServers.portcullis.env).toEqual({ PORTCULLIS_AGENT_TOKEN: "PASTE-AN-AGENT-GRANT-HERE" });
    expectAgentToken(readFileSync(file, "utf8"));
    expect(j.connect).toBe("claude mcp add --transport http portcullis https://gw.example.com/mcp --header 'Authorization: Bearer ${PORTCULLIS_AGENT_TOKEN}'");
    expectNoSecret(r.stdout, r.stderr, readFileSync(join(dir, "portcullis.yaml"), "utf8"));
    expectOnlyKeptSecrets(readFileSync(file, "utf8"), ["wx-inline-7e6d5c4b3a29f8e7"]);
    expect(byName(upstreamsOf(join(dir, "portcullis.yaml")), "notion")).toBeDefined();
    const ok = await portcullis(["doctor", "--clients", "--client", "claude-desktop", "--path", file, "--gateway", "https://gw.example.com/mcp"], opts);
    expect(ok.code).toBe(0);
    expect((await portcullis(["restore", "--client", "claude-desktop", "--path", file], opts)).code).toBe(0);
    expect(readFileSync(file).equals(original)).toBe(true);
  });

  it("cursor (~/.cursor/mcp.json): ${env:X} becomes ${X}, inline keys become references, the entry uses ${env:PORTCULLIS_AGENT_TOKEN}", async () => {
    const { dir, home } = sandbox();
    mkdirSync(join(home, ".cursor"));
    const file = join(home, ".cursor", "mcp.json");
    copyFileSync(join(FIXTURES, "cursor.json"), file);
    const original = readFileSync(file);
    const opts = { cwd: dir, home };
    const r = await portcullis(["import", "--client", "cursor"], opts);
    expect(r.code).toBe(0);
    const ups = upstreamsOf(join(dir, "portcullis.yaml"));
    expect(ups.map((u) => u.name)).toEqual(["github", "context7", "search", "internal-docs"]);
    // A header name Portcullis cannot send is left out (and said so), never copied.
    expect(byName(ups, "context7").headers).toBeUndefined();
    expect(r.stdout).toContain('header "CONTEXT7_API_KEY" not imported');
    expect(byName(ups, "search").headers).toEqual({ "X-Api-Key": "${SEARCH_X_API_KEY}" });
    expect(byName(ups, "internal-docs").headers).toEqual({ Authorization: "Bearer ${DOCS_TOKEN}", "X-Team": "platform" });
    expect(r.stdout).toContain("npx wrangler secret put SEARCH_X_API_KEY");
    expect(r.stdout).toContain("npx wrangler secret put DOCS_TOKEN");
    expect(JSON.parse(readFileSync(file, "utf8")).mcpServers).toEqual({
      portcullis: { url: ENTRY_URL, headers: { Authorization: "Bearer ${env:PORTCULLIS_AGENT_TOKEN}" } },
    });
    expectAgentToken(readFileSync(file, "utf8"));
    expectAgentTokenPrinted(r.stdout);
    expectNoSecret(r.stdout, r.stderr, readFileSync(file, "utf8"), readFileSync(join(dir, "portcullis.yaml"), "utf8"));
    expect(readFileSync(`${file}.portcullis-backup`).equals(original)).toBe(true);
    expect((await portcullis(["doctor", "--clients", "--client", "cursor"], opts)).code).toBe(0);
    expect((await portcullis(["restore", "--client", "cursor"], opts)).code).toBe(0);
    expect(readFileSync(file).equals(original)).toBe(true);
  });

  it("vscode (./.vscode/mcp.json, JSONC): servers with type http, an ${input:…} header becomes a secret, comments and inputs kept, a missing config is created", async () => {
    const { dir, home } = sandbox(false);
    mkdirSync(join(dir, ".vscode"));
    const file = join(dir, ".vscode", "mcp.json");
    // A comment before the stdio server and a trailing comma: both stay with it.
    const fixture = readFileSync(join(FIXTURES, "vscode.jsonc"), "utf8");
    writeFileSync(
      file,
      fixture
        .replace('    "fetch": {', '    // fetch runs on this machine\n    "fetch": {')
        .replace('["mcp-server-fetch"]\n    }', '["mcp-server-fetch"]\n    },'),
    );
    const original = readFileSync(file);
    const opts = { cwd: dir, home };
    const r = await portcullis(["import", "--client", "vscode", "--config", "gw.yaml"], opts);
    expect(r.code).toBe(0);
    const configText = readFileSync(join(dir, "gw.yaml"), "utf8");
    expect(parseDocument(configText).errors).toEqual([]);
    expect(upstreamsOf(join(dir, "gw.yaml"))).toEqual([
      {
        name: "github",
        url: "https://api.githubcopilot.com/mcp/",
        description: "github, imported from vscode (servers.github)",
        headers: { Authorization: "Bearer ${GITHUB_TOKEN}" },
      },
    ]);
    expect(r.stdout).toContain("GITHUB_TOKEN: upstreams.github.headers.Authorization; the client filled it in itself");
    expect(r.stdout).toMatch(/stays direct: fetch \(servers\.fetch\) is not governed by Portcullis \(not governed: stdio\)/);
    const text = readFileSync(file, "utf8");
    const o = original.toString("utf8");
    expect(text.startsWith(o.slice(0, o.indexOf('"servers"')))).toBe(true); // the comment and inputs, byte for byte
    expect(text).toContain('"Authorization": "Bearer ${env:PORTCULLIS_AGENT_TOKEN}"');
    expectAgentToken(text);
    expectAgentTokenPrinted(r.stdout);
    expect(text).toContain(`    // fetch runs on this machine\n${entryText(original.toString("utf8"), "fetch")},`);
    expect(text).not.toContain('"github"');
    expect(JSON.parse(text.replace(/^\s*\/\/.*$/gm, "").replace(/,(\s*[}\]])/g, "$1")).servers.fetch).toEqual({
      type: "stdio",
      command: "uvx",
      args: ["mcp-server-fetch"],
    });
    const d = await portcullis(["doctor", "--config", "gw.yaml"], opts);
    expect(d.code).toBe(0);
    expect((await portcullis(["doctor", "--clients", "--client", "vscode"], opts)).code).toBe(0);
    expect((await portcullis(["restore", "--client", "vscode"], opts)).code).toBe(0);
    expect(readFileSync(file).equals(original)).toBe(true);
  });
});

describe("portcullis import: dry run, help and usage", () => {
  it("--dry-run writes nothing", async () => {
    const { dir, home } = sandbox();
    const file = join(home, ".claude.json");
    copyFileSync(join(FIXTURES, "claude-code.json"), file);
    const original = readFileSync(file);
    const r = await portcullis(["import", "--client", "claude-code", "--dry-run"], { cwd: dir, home });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(dry run: nothing written)");
    expect(r.stdout).toContain("would add 3 upstreams");
    expect(readFileSync(file).equals(original)).toBe(true);
    expect(existsSync(`${file}.portcullis-backup`)).toBe(false);
    expect(readFileSync(join(dir, "portcullis.yaml"), "utf8")).toBe(CONFIG);
    expectNoSecret(r.stdout, r.stderr);
  });

  it("every command has --help (exit 0); a wrong call exits 2 and says what to do", async () => {
    const { dir, home } = sandbox();
    const opts = { cwd: dir, home };
    for (const args of [
      ["import", "--help"],
      ["restore", "--help"],
      ["doctor", "--clients", "--help"],
    ]) {
      const r = await portcullis(args, opts);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/^usage: portcullis /);
    }
    const cases: [string[], string][] = [
      [["import"], "give --client"],
      [["import", "--client", "emacs"], "--client must be one of"],
      [["import", "--client", "cursor", "--bogus"], "unknown option --bogus"],
      [["restore"], "give --client"],
      [["doctor", "--clients", "--path", "x.json"], "--path needs --client"],
      [["import", "--client", "cursor", "--gateway", "ftp://x"], "--gateway must be"],
      [["import", "--client", "cursor", "--gateway", "http://127.0.0.1:9301/api"], "--gateway must be the gateway's MCP endpoint, and /api is not"],
      [["import", "--client", "cursor", "--gateway", "http://127.0.0.1:9301/mcp/GitHub"], "an upstream name matches ^[a-z][a-z0-9-]{0,30}$"],
      [["import", "--client", "cursor", "--gateway", "http://127.0.0.1:9301/mcp/a/b"], "its MCP endpoint (…/mcp), or one upstream's route (…/mcp/<upstream>)"],
      [["import", "--client", "cursor", "--gateway", "http://127.0.0.1:9301/mcp?x=1"], "without ?query"],
      [["doctor", "--clients", "--gateway", "http://127.0.0.1:9301/v1/mcp"], "the gateway's origin (http://127.0.0.1:8787: /mcp is added)"],
    ];
    for (const [args, says] of cases) {
      const r = await portcullis(args, opts);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toContain(says);
    }
  });

  it("doctor --clients: no client config found, or a client without the gateway entry, is exit 1", async () => {
    const { dir, home } = sandbox();
    const opts = { cwd: dir, home };
    const none = await portcullis(["doctor", "--clients"], opts);
    expect(none.code).toBe(1);
    expect(none.stdout).toContain("no client config found");
    const missing = await portcullis(["doctor", "--clients", "--client", "cursor"], opts);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toContain("MISSING no config file");
    writeFileSync(join(dir, ".mcp.json"), `${JSON.stringify({ mcpServers: { docs: { type: "http", url: "https://docs.example.com/mcp" } } }, null, 2)}\n`);
    // --offline: the server is not probed (it would be: no credential header), so it is one import would move.
    const direct = await portcullis(["doctor", "--clients", "--json", "--offline"], opts);
    expect(direct.code).toBe(1);
    const j = JSON.parse(direct.stdout);
    expect(j.clients).toHaveLength(1);
    expect(j.offline).toBe(true);
    expect(j.clients[0]).toMatchObject({ client: "claude-code", file: join(dir, ".mcp.json"), ungoverned: [{ server: "docs", problem: true }] });
    expect(j.clients[0].problems[0]).toContain('no "portcullis" entry');
  });
});
/** What a loopback test server answers. */
interface Answer {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

/** One request a loopback test server saw. */
interface Seen {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
}

/** A loopback HTTP server answering with `answer`; `seen` has every request it got. */
async function loopback(answer: (req: Seen, port: number) => Answer) {
  const seen: Seen[] = [];
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const r: Seen = { method: req.method ?? "", path: req.url ?? "", headers: req.headers };
      seen.push(r);
      const a = answer(r, port);
      res.writeHead(a.status, a.headers ?? {});
      res.end(a.body ?? "");
    });
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const port = (server.address() as AddressInfo).port;
  servers.push(server);
  return { url: `http://127.0.0.1:${port}`, port, seen };
}
const servers: Server[] = [];
afterAll(async () => {
  for (const s of servers) await new Promise((done) => s.close(done));
});

/** A port nothing listens on: one the system gave a server that has since closed. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((done) => s.listen(0, "127.0.0.1", done));
  const port = (s.address() as AddressInfo).port;
  await new Promise((done) => s.close(done));
  return port;
}

const INIT_RESULT = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  result: { protocolVersion: "2025-11-25", capabilities: {}, serverInfo: { name: "plain", version: "1" } },
});

describe("portcullis import: servers that sign in with OAuth become OAuth upstreams; stdio servers stay", () => {
  it("moves the plain HTTP servers, moves OAuth servers as auth: {type: oauth} upstreams (client settings named, never copied), keeps stdio byte for byte (user and project lists); --offline probes nothing; doctor --clients agrees", async () => {
    // An OAuth server (RFC 9728): 401 + WWW-Authenticate: Bearer resource_metadata=…, and the metadata it names.
    const oauth = await loopback(
      (r, port): Answer =>
        r.path === "/.well-known/oauth-protected-resource"
          ? {
              status: 200,
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ resource: `http://127.0.0.1:${port}/mcp`, authorization_servers: [`http://127.0.0.1:${port}`] }),
            }
          : {
              status: 401,
              headers: { "www-authenticate": `Bearer resource_metadata="http://127.0.0.1:${port}/.well-known/oauth-protected-resource"` },
            },
    );
    // A 401 whose challenge names no metadata, from a server that serves it at the path-inserted RFC 9728 URL.
    const metaOnly = await loopback(
      (r, port): Answer =>
        r.path === "/.well-known/oauth-protected-resource/mcp"
          ? {
              status: 200,
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ resource: `http://127.0.0.1:${port}/mcp`, authorization_servers: ["https://as.example"] }),
            }
          : { status: 401, headers: { "www-authenticate": 'Bearer realm="mcp"' } },
    );
    // A plain MCP server, and one that redirects to the OAuth server (a redirect is never followed).
    const plain = await loopback(() => ({ status: 200, headers: { "content-type": "application/json" }, body: INIT_RESULT }));
    const redirecting = await loopback(() => ({ status: 307, headers: { location: `${oauth.url}/mcp` } }));
    const dead = await deadPort();

    const { dir, home } = sandbox();
    const file = join(home, ".claude.json");
    const clientFile = {
      theme: "dark",
      mcpServers: {
        notes: { type: "http", url: `${oauth.url}/mcp` },
        "local-fs": {
          type: "stdio",
          command: "npx",
          args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
          env: { FS_API_KEY: "fs-inline-9d8c7b6a5f4e3d2c1b0a" },
        },
        plain: { type: "http", url: `${plain.url}/mcp`, headers: { "X-Team": "platform" } },
        wiki: { type: "http", url: `${metaOnly.url}/mcp` },
        atlassian: { type: "http", url: `${plain.url}/settings`, oauth: { clientId: "portcullis-test", callbackPort: 8080 } },
        crm: {
          type: "http",
          url: `${plain.url}/crm`,
          headers: { Authorization: "Bearer ${CRM_TOKEN}" },
          auth: { CLIENT_ID: "crm-client-0a1b", CLIENT_SECRET: "crm-secret-5f4e3d2c1b0a9d8c", scopes: ["crm.read"] },
        },
        moved: { type: "http", url: `${redirecting.url}/mcp` },
        asleep: { type: "http", url: `http://127.0.0.1:${dead}/mcp` },
      },
      projects: {
        "/home/dev/app": {
          allowedTools: [],
          mcpServers: {
            "repo-tool": { command: "node", args: ["tools/mcp.js"] },
            "plain-project": { type: "http", url: `${plain.url}/project` },
          },
        },
      },
    };
    writeFileSync(file, `${JSON.stringify(clientFile, null, 2)}\n`);
    const original = readFileSync(file, "utf8");
    const opts = { cwd: dir, home };
    const requests = () => [oauth, metaOnly, plain, redirecting].map((s) => s.seen.length);

    // --offline --dry-run: nothing reaches a server; only the entry's own settings say OAuth.
    const off = await portcullis(["import", "--client", "claude-code", "--offline", "--dry-run", "--json"], opts);
    expect(off.stderr).toBe("");
    expect(off.code).toBe(0);
    expect(requests()).toEqual([0, 0, 0, 0]);
    const jo = JSON.parse(off.stdout);
    expect(jo.offline).toBe(true);
    expect(jo.kept.map((k: Any) => [k.name, k.reason])).toEqual([
      ["local-fs", "stdio"],
      ["repo-tool", "stdio"],
    ]);
    expect(jo.upstreams.map((u: Any) => [u.name, u.auth?.type ?? null])).toEqual([
      ["notes", null],
      ["plain", null],
      ["wiki", null],
      ["atlassian", "oauth"],
      ["crm", "oauth"],
      ["moved", null],
      ["asleep", null],
      ["plain-project", null],
    ]);
    expect(jo.oauth.map((o: Any) => [o.upstream, o.evidence, o.clientSettings])).toEqual([
      ["atlassian", `its entry's "oauth" setting`, ["clientId", "callbackPort"]],
      ["crm", `its entry's "auth" setting`, ["CLIENT_ID", "CLIENT_SECRET", "scopes"]],
    ]);
    expect(readFileSync(file, "utf8")).toBe(original);

    // Before the import, doctor --clients counts every direct server import would move a problem, OAuth ones too.
    const before = await portcullis(["doctor", "--clients", "--client", "claude-code", "--json"], opts);
    expect(before.code).toBe(1);
    expect(JSON.parse(before.stdout).clients[0].ungoverned.map((u: Any) => [u.server, u.reason ?? null, u.oauth ?? false, u.problem])).toEqual([
      ["notes", null, true, true],
      ["local-fs", "stdio", false, false],
      ["plain", null, false, true],
      ["wiki", null, true, true],
      ["atlassian", null, true, true],
      ["crm", null, true, true],
      ["moved", null, false, true],
      ["asleep", null, false, true],
      ["repo-tool", "stdio", false, false],
      ["plain-project", null, false, true],
    ]);
    const beforeText = await portcullis(["doctor", "--clients", "--client", "claude-code"], opts);
    expect(beforeText.stdout).toContain(
      `UNGOVERNED notes (mcpServers.notes, http ${oauth.url}/mcp): reached directly, not through the gateway (portcullis import --client claude-code moves it, as an OAuth upstream each person connects in the console)`,
    );
    for (const s of [oauth, metaOnly, plain, redirecting]) s.seen.length = 0;

    // The import: one probe each for the servers that send no credential (none of their headers), no redirect followed.
    const r = await portcullis(["import", "--client", "claude-code"], opts);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const probes = (s: { seen: Seen[] }) => s.seen.map((x) => `${x.method} ${x.path}`);
    expect(probes(oauth)).toEqual(["POST /mcp"]);
    expect(probes(metaOnly)).toEqual(["POST /mcp", "GET /.well-known/oauth-protected-resource/mcp"]);
    expect(probes(plain).sort()).toEqual(["POST /mcp", "POST /project"]);
    expect(probes(redirecting)).toEqual(["POST /mcp"]);
    expect(plain.seen.every((x) => x.headers["x-team"] === undefined && x.headers.authorization === undefined)).toBe(true);
    expect(plain.seen.find((x) => x.path === "/mcp")?.headers["content-type"]).toBe("application/json");

    // The config: every HTTP server (also one that redirects, and one that did not answer); the OAuth ones with auth: {type: oauth}.
    const configText = readFileSync(join(dir, "portcullis.yaml"), "utf8");
    const ups = upstreamsOf(join(dir, "portcullis.yaml"));
    expect(ups.map((u) => [u.name, u.url, u.auth ?? null])).toEqual([
      ["github", "https://example.com/mcp", null],
      ["notes", `${oauth.url}/mcp`, { type: "oauth" }],
      ["plain", `${plain.url}/mcp`, null],
      ["wiki", `${metaOnly.url}/mcp`, { type: "oauth" }],
      ["atlassian", `${plain.url}/settings`, { type: "oauth" }],
      ["crm", `${plain.url}/crm`, { type: "oauth" }],
      ["moved", `${redirecting.url}/mcp`, null],
      ["asleep", `http://127.0.0.1:${dead}/mcp`, null],
      ["plain-project", `${plain.url}/project`, null],
    ]);
    expect(byName(ups, "plain").headers).toEqual({ "X-Team": "platform" });
    // The OAuth upstream is sent the connection's token: the entry's Authorization is not imported; its own client settings never are.
    expect(byName(ups, "crm").headers).toBeUndefined();
    for (const v of ["portcullis-test", "8080", "crm-client-0a1b", "crm-secret-5f4e3d2c1b0a9d8c", "CRM_TOKEN"]) {
      expect(configText).not.toContain(v);
      expect(r.stdout).not.toContain(v);
    }
    // The gateway's own check accepts the config the import wrote (on loopback once egress allows it: these servers are on 127.0.0.1).
    writeFileSync(join(dir, "checked.yaml"), `${configText}\negress:\n  allow_loopback: true\n`);
    const checked = await portcullis(["doctor", "--config", join(dir, "checked.yaml")], opts);
    expect(checked.code, checked.stdout + checked.stderr).toBe(0);

    // The client file: the stdio entries byte for byte, the moved ones gone, the gateway entry added.
    const text = readFileSync(file, "utf8");
    expect(text).toContain(entryText(original, "local-fs"));
    expect(text).toContain(entryText(original, "repo-tool", "        "));
    const after = JSON.parse(text);
    expect(Object.keys(after.mcpServers)).toEqual(["local-fs", "portcullis"]);
    expect(after.mcpServers["local-fs"]).toEqual(clientFile.mcpServers["local-fs"]);
    expect(after.projects["/home/dev/app"]).toEqual({ allowedTools: [], mcpServers: { "repo-tool": { command: "node", args: ["tools/mcp.js"] } } });
    expect(after.theme).toBe("dark");
    expectOnlyKeptSecrets(text, ["fs-inline-9d8c7b6a5f4e3d2c1b0a"]);

    // The output names every kept server and its reason, each OAuth server with its evidence and the URL to connect it, and the one that did not answer.
    const line = (name: string) => r.stdout.split("\n").find((l) => l.startsWith(`  stays direct: ${name} (`)) ?? "";
    const note = (name: string, start: string) => r.stdout.split("\n").find((l) => l.startsWith(`  note: ${name}: ${start}`)) ?? "";
    expect(note("notes", "signs in with OAuth")).toBe(
      "  note: notes: signs in with OAuth (401 with WWW-Authenticate: Bearer resource_metadata=…): imported with auth: {type: oauth}; each person connects it once in the console: http://127.0.0.1:8787/console/connections?upstream=notes (until then a call to it reaches nothing and is answered with that URL)",
    );
    expect(note("wiki", "signs in with OAuth")).toContain("(401, and RFC 9728 metadata at /.well-known/oauth-protected-resource/mcp)");
    expect(note("atlassian", "signs in with OAuth")).toContain(`(its entry's "oauth" setting)`);
    expect(note("atlassian", "the entry's")).toContain(
      `the entry's "oauth" setting (clientId, callbackPort) is the client's own sign-in and was not copied: the gateway registers itself (dynamic registration); if the server does not offer it, register a client whose redirect URI is http://127.0.0.1:8787/console/connections/callback and set upstreams.atlassian.auth.client_id`,
    );
    expect(note("crm", "its Authorization header")).toContain("not imported: an OAuth upstream is sent the connection's token");
    expect(note("notes", "the gateway keeps OAuth tokens sealed under the PORTCULLIS_CREDENTIALS_KEY secret")).not.toBe("");
    expect(r.stdout).toContain(`    crm  ${plain.url}/crm  auth: {type: oauth}`);
    for (const name of ["notes", "wiki", "atlassian", "crm"]) expect(line(name), name).toBe("");
    expect(line("local-fs")).toContain(
      "(not governed: stdio): a stdio server (npx -y @modelcontextprotocol/server-filesystem /srv): a Worker cannot spawn processes",
    );
    expect(line("repo-tool")).toMatch(
      /^ {2}stays direct: repo-tool \(projects\["\/home\/dev\/app"\]\.mcpServers\.repo-tool\) is not governed by Portcullis \(not governed: stdio\)/,
    );
    for (const name of ["local-fs", "repo-tool"]) expect(line(name)).toContain("kept in .claude.json as it is");
    expect(r.stdout).toMatch(/note: asleep: asleep did not answer the OAuth probe \(ECONNREFUSED\): imported as an HTTP server/);
    expect(r.stdout).toContain('8 servers moved behind one "portcullis" entry at http://127.0.0.1:8787/mcp, 2 kept as they were');
    expectNoSecret(r.stdout, r.stderr, readFileSync(join(dir, "portcullis.yaml"), "utf8"));

    // doctor --clients probes as import does: what import kept is reported, not a problem.
    const d = await portcullis(["doctor", "--clients", "--client", "claude-code", "--json"], opts);
    expect(d.code, d.stdout).toBe(0);
    const dj = JSON.parse(d.stdout);
    expect(dj.clients[0].ungoverned.map((u: Any) => [u.server, u.reason, u.problem])).toEqual([
      ["local-fs", "stdio", false],
      ["repo-tool", "stdio", false],
    ]);
    const dt = await portcullis(["doctor", "--clients", "--client", "claude-code"], opts);
    expect(dt.code).toBe(0);
    expect(dt.stdout).toContain("UNGOVERNED local-fs (mcpServers.local-fs, stdio");
    expect(dt.stdout).toContain("not governed: stdio");
    // --offline: the same verdict (no probe needed once the OAuth servers are behind the gateway).
    const doff = await portcullis(["doctor", "--clients", "--client", "claude-code", "--offline", "--json"], opts);
    expect(doff.code).toBe(0);

    // Importing again changes nothing; restore brings back the original bytes.
    const again = await portcullis(["import", "--client", "claude-code"], opts);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('already has the "portcullis" entry and no server left to move: not changed');
    expect(readFileSync(file, "utf8")).toBe(text);
    expect((await portcullis(["restore", "--client", "claude-code"], opts)).code).toBe(0);
    expect(readFileSync(file, "utf8")).toBe(original);
  });
});

describe("the OAuth probe gives up after 3 s", () => {
  it("a server that accepts the connection and never answers is imported, and the output says it did not answer", async () => {
    const sockets: Socket[] = [];
    const silent = createServer();
    silent.on("connection", (c) => sockets.push(c));
    silent.on("request", () => undefined); // never answered
    await new Promise<void>((done) => silent.listen(0, "127.0.0.1", done));
    const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/mcp`;
    try {
      const { dir, home } = sandbox();
      const file = join(dir, "mcp.json");
      writeFileSync(file, JSON.stringify({ mcpServers: { quiet: { url } } }));
      const started = Date.now();
      const r = await portcullis(["import", "--client", "cursor", "--path", file, "--dry-run", "--json"], { cwd: dir, home });
      expect(r.code, r.stderr).toBe(0);
      expect(Date.now() - started).toBeGreaterThanOrEqual(3000);
      const j = JSON.parse(r.stdout);
      expect(j.upstreams.map((u: Any) => [u.name, u.url])).toEqual([["quiet", url]]);
      expect(j.kept).toEqual([]);
      expect(j.notes).toEqual([
        "quiet: quiet did not answer the OAuth probe (no answer within 3 s): imported as an HTTP server; if it signs in with OAuth, add auth: {type: oauth} to it",
      ]);
    } finally {
      for (const c of sockets) c.destroy();
      await new Promise((done) => silent.close(done));
    }
  });
});

describe("--gateway names the gateway's MCP endpoint, in import and doctor --clients alike", () => {
  it("an origin (or origin/) gets /mcp, /mcp/ loses its slash, /mcp/<upstream> is kept; doctor --clients finds the entry the same way", async () => {
    const cases: [string, string][] = [
      ["http://127.0.0.1:9301", "http://127.0.0.1:9301/mcp"],
      ["http://127.0.0.1:9301/", "http://127.0.0.1:9301/mcp"],
      ["http://127.0.0.1:9301/mcp/", "http://127.0.0.1:9301/mcp"],
      ["https://gw.example.com/mcp/github", "https://gw.example.com/mcp/github"],
    ];
    for (const [given, written] of cases) {
      const { dir, home } = sandbox();
      mkdirSync(join(home, ".cursor"));
      const file = join(home, ".cursor", "mcp.json");
      copyFileSync(join(FIXTURES, "cursor.json"), file);
      const r = await portcullis(["import", "--client", "cursor", "--gateway", given], { cwd: dir, home });
      expect(r.code, `${given}: ${r.stderr}`).toBe(0);
      expect(JSON.parse(readFileSync(file, "utf8")).mcpServers.portcullis.url, given).toBe(written);
      expect(r.stdout).toContain(`one "portcullis" entry at ${written};`);
      expect(r.stdout).toContain(`claude mcp add --transport http portcullis ${written} --header`);
      expect(r.stdout).toContain(`--gateway ${new URL(written).origin})`);
    }
    // doctor --clients: an entry (not named portcullis) at the endpoint an origin-only --gateway names is the gateway entry.
    const { dir, home } = sandbox();
    const file = join(dir, "mcp.json");
    writeFileSync(
      file,
      JSON.stringify({ mcpServers: { gw: { url: "http://127.0.0.1:9301/mcp", headers: { Authorization: "Bearer ${env:PORTCULLIS_AGENT_TOKEN}" } } } }),
    );
    const d = await portcullis(["doctor", "--clients", "--client", "cursor", "--path", file, "--gateway", "http://127.0.0.1:9301", "--json"], {
      cwd: dir,
      home,
    });
    expect(d.code, d.stdout).toBe(0);
    const j = JSON.parse(d.stdout);
    expect(j.gateway).toBe("http://127.0.0.1:9301/mcp");
    expect(j.clients[0].gateway.map((g: Any) => g.server)).toEqual(["gw"]);
    // An import through --json reports the normalised endpoint too.
    const ij = await portcullis(["import", "--client", "cursor", "--path", file, "--gateway", "http://127.0.0.1:9301/", "--dry-run", "--json"], {
      cwd: dir,
      home,
    });
    expect(ij.code).toBe(0);
    expect(JSON.parse(ij.stdout).gateway).toBe("http://127.0.0.1:9301/mcp");
  });
});

describe("agents and operators never share a credential variable", () => {
  it("doctor --clients reports a gateway entry that reads PORTCULLIS_TOKEN (exit 1, in each client's syntax); import rewrites it to PORTCULLIS_AGENT_TOKEN", async () => {
    const { dir, home } = sandbox();
    const opts = { cwd: dir, home };
    const legacy: [string, string, string, object][] = [
      ["claude-code", ".mcp.json", "mcpServers", { type: "http", url: ENTRY_URL, headers: { Authorization: "Bearer ${PORTCULLIS_TOKEN}" } }],
      ["cursor", "cursor.json", "mcpServers", { url: ENTRY_URL, headers: { Authorization: "Bearer ${env:PORTCULLIS_TOKEN}" } }],
      ["vscode", "vscode.json", "servers", { type: "http", url: ENTRY_URL, headers: { Authorization: "Bearer ${env:PORTCULLIS_TOKEN}" } }],
      [
        "claude-desktop",
        "desktop.json",
        "mcpServers",
        { command: "npx", args: ["-y", "mcp-remote", ENTRY_URL, "--header", "Authorization:Bearer ${PORTCULLIS_TOKEN}"], env: { PORTCULLIS_TOKEN: "x" } },
      ],
    ];
    for (const [client, name, key, entry] of legacy) {
      const file = join(dir, name);
      writeFileSync(file, `${JSON.stringify({ [key]: { portcullis: entry } }, null, 2)}\n`);
      const bad = await portcullis(["doctor", "--clients", "--client", client, "--path", file], opts);
      expect(bad.code, client).toBe(1);
      expect(bad.stdout, client).toContain(`MISSING the "portcullis" entry (${key}.portcullis) reads PORTCULLIS_TOKEN, the operator CLI's variable`);
      expect(bad.stdout, client).toContain(`make it read PORTCULLIS_AGENT_TOKEN (portcullis import --client ${client} rewrites the entry)`);
      const r = await portcullis(["import", "--client", client, "--path", file], opts);
      expect(r.code, client).toBe(0);
      expectAgentToken(readFileSync(file, "utf8"));
      expectAgentTokenPrinted(r.stdout);
      const ok = await portcullis(["doctor", "--clients", "--client", client, "--path", file], opts);
      expect(ok.code, `${client}: ${ok.stdout}`).toBe(0);
    }
    // doctor's own advice to connect by hand reads the agent's variable too.
    const empty = sandbox();
    const none = await portcullis(["doctor", "--clients"], { cwd: empty.dir, home: empty.home });
    expect(none.stdout).toContain("--header 'Authorization: Bearer ${PORTCULLIS_AGENT_TOKEN}'");
    expect(none.stdout).not.toMatch(OPERATOR_TOKEN);
  });
});
// biome-ignore-end lint/suspicious/noTemplateCurlyInString: see biome-ignore-start
