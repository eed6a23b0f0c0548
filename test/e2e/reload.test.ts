/**
 * Hot reload on the production build (auth.required: true, grants minted locally with the
 * gateway's key): a gateway fronting the dual-era conformance upstream with one of its tools
 * denied; an SDK client on a legacy session (its GET stream open) and an SDK client pinned to
 * 2026-07-28 on a `subscriptions/listen` stream. `portcullis reload` stores a config that lifts
 * the deny and adds a second (modern-only) upstream: both clients receive
 * `notifications/tools/list_changed` and then list the un-hidden tool and the new upstream's tools,
 * and call one (the legacy session through a leg opened on first use: it had none to the new
 * upstream at initialize); the time from the reload's answer to the tool being listed is printed.
 * A broken config is refused whole (400, every problem, the CLI exits 1) and the old tools keep
 * serving; the operator tool `portcullis.reload` stores a version too; each stored version is a
 * `config.changed` record naming the version and the actor. In enforce, a config whose deny rule
 * matches no real tool is not sent by `reload` (did you mean …), unless --force; and a config that
 * would rename an upstream's tools for agents is refused by the gateway unless forced. All on loopback.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, root, startPortcullis } from "./harness.ts";
import { api, connect, grantFor, runScript } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

/** Every isolate serves a stored version within this bound (cache ≤ 1 s, stream watch every 1 s, plus a read). */
const SERVE_BOUND_MS = 5000;
const HIDDEN = "conf__test_simple_text";

let conf: ConformanceUpstream;
let modernUp: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let gw: Awaited<ReturnType<typeof startPortcullis>>;
let origin = "";
let jwk = "";
let dir = "";
let admin = "";
let agent = "";

const config = (opts: { deny: boolean; second: boolean; broken?: "secret" | "egress" | "schema" }) => `
actor: local:e2e
auth:
  required: true
  audience: ${origin}
egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${conf.url}
    namespace: true
    timeout: 30s
${opts.deny ? `    deny: ["test_simple_text"]\n` : ""}${
  opts.second
    ? `  - name: modern
    url: ${modernUp.url}
    timeout: 30s
`
    : ""
}${
  opts.broken === "secret"
    ? `  - name: bad
    url: ${conf.url}
    headers:
      authorization: "Bearer \${RELOAD_E2E_MISSING_SECRET}"
`
    : opts.broken === "egress"
      ? `  - name: bad
    url: http://10.1.2.3/mcp
`
      : opts.broken === "schema"
        ? `  - name: bad
    url: ${conf.url}
    timeout: forever
`
        : ""
}`;

beforeAll(async () => {
  conf = await startConformanceUpstream({ port: 0, host: "127.0.0.1" });
  modernUp = await startModernOnlyUpstream();
  jwk = JSON.stringify((await generateSigningKey("reload-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  dir = mkdtempSync(join(tmpdir(), "portcullis-reload-"));
  gw = await startPortcullis(config({ deny: true, second: false }), port, { PORTCULLIS_SIGNING_KEY: jwk });
  admin = (await grantFor(jwk, origin, { sub: "human:reload-admin", team: "ops", roles: ["admin"], tools: ["*"], ttlSeconds: 1800 })).token;
  agent = (await grantFor(jwk, origin, { sub: "agent:reload", team: "ops", roles: ["agent"], tools: ["*"], ttlSeconds: 1800 })).token;
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), conf?.close(), modernUp?.close()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name);
const reload = (file: string) => runScript(resolve(root, "bin/portcullis.mjs"), ["reload", "--config", file, "--url", origin], { PORTCULLIS_TOKEN: admin });

/** Polls `check` every 50 ms until it is true; the time it took, or null after `ms`. */
async function within(ms: number, check: () => Promise<boolean> | boolean): Promise<number | null> {
  const start = performance.now();
  while (performance.now() - start < ms) {
    if (await check()) return performance.now() - start;
    await new Promise((r) => setTimeout(r, 50));
  }
  return null;
}

describe("hot reload", () => {
  it("a reload reaches open sessions of both eras (list_changed, then the new tool); a broken config is refused and the old one keeps serving; each version is on the ledger", async () => {
    const legacy = await connect("reload-legacy", `${origin}/mcp`, agent);
    const modern = await connect("reload-modern", `${origin}/mcp`, agent, { pin: "2026-07-28" });
    try {
      const seen = { legacy: 0, modern: 0 };
      legacy.client.setNotificationHandler("notifications/tools/list_changed", async () => {
        seen.legacy++;
      });
      modern.client.setNotificationHandler("notifications/tools/list_changed", async () => {
        seen.modern++;
      });
      const before = await names(legacy.client);
      expect(before.filter((n) => n.startsWith("conf__")).length).toBeGreaterThan(3); // the upstream's other tools are listed
      expect(before).not.toContain(HIDDEN);
      expect(await names(modern.client)).not.toContain(HIDDEN);
      const sub = await modern.client.listen({ toolsListChanged: true });
      expect(sub.honoredFilter).toMatchObject({ toolsListChanged: true });
      await new Promise((r) => setTimeout(r, 1500)); // the legacy GET stream opens after initialized

      // v1: lift the deny and add a second upstream.
      const file = join(dir, "portcullis.yaml");
      writeFileSync(file, config({ deny: false, second: true }));
      const r1 = await reload(file);
      const answered = performance.now();
      expect(r1.code, r1.stderr).toBe(0);
      expect(r1.stdout).toMatch(/reloaded: config version 1 \(sha256 [0-9a-f]{64}\)/);
      const notified = await within(SERVE_BOUND_MS, () => seen.legacy > 0 && seen.modern > 0);
      expect(notified, `list_changed: ${JSON.stringify(seen)}`).not.toBeNull();
      let legacyNames: string[] = [];
      let modernNames: string[] = [];
      const listed = await within(SERVE_BOUND_MS, async () => {
        legacyNames = await names(legacy.client);
        modernNames = await names(modern.client);
        return legacyNames.includes(HIDDEN) && modernNames.includes(HIDDEN) && modernNames.includes("modern__bump") && legacyNames.includes("modern__bump");
      });
      const sinceAnswer = performance.now() - answered;
      expect(listed, `legacy ${legacyNames.join(",")} | modern ${modernNames.join(",")}`).not.toBeNull();
      console.log(
        `hot reload: list_changed on both streams ${Math.round(notified as number)} ms and the new tool listed by both ${Math.round(sinceAnswer)} ms after the reload's answer`,
      );
      expect(sinceAnswer).toBeLessThan(SERVE_BOUND_MS * 2);
      // The new upstream's tool is callable through both sessions (the legacy one over a 2026-07-28 leg it opened lazily).
      expect((await modern.client.callTool({ name: "modern__bump", arguments: {} })).isError ?? false).toBe(false);
      expect((await legacy.client.callTool({ name: "modern__bump", arguments: {} })).isError ?? false).toBe(false);

      // A broken config: refused whole, every problem named (no secret value), the old one keeps serving.
      const bad = join(dir, "broken.yaml");
      writeFileSync(bad, config({ deny: true, second: false, broken: "secret" }));
      const r2 = await reload(bad);
      expect(r2.code).toBe(1);
      expect(r2.stderr).toMatch(/400: the config was refused; the previous one keeps serving/);
      expect(r2.stderr).toMatch(/RELOAD_E2E_MISSING_SECRET/);
      expect(r2.stderr).not.toContain(jwk.slice(10, 40));
      for (const [kind, why] of [
        ["egress", /10\.1\.2\.3|private|egress/i],
        ["schema", /timeout/],
      ] as const) {
        const put = await api(origin, admin, "/v1/config", { method: "PUT", body: { config: config({ deny: true, second: false, broken: kind }) } });
        expect(put.status, JSON.stringify(put.json)).toBe(400);
        expect(put.json.error).toBe("invalid_config");
        expect(put.json.problems.join("\n")).toMatch(why);
        expect(JSON.stringify(put.json)).not.toContain(jwk.slice(10, 40));
      }
      await new Promise((r) => setTimeout(r, 1500)); // past the cache's second: still version 1
      expect(await names(legacy.client)).toContain(HIDDEN);
      expect(await names(modern.client)).toContain("modern__bump");
      // Only an admin reloads.
      expect((await api(origin, agent, "/v1/config", { method: "PUT", body: { config: config({ deny: true, second: false }) } })).status).toBe(403);

      // v2 through the operator tool: the deny again — the tool disappears from the sessions.
      const before2 = { ...seen };
      const op = await fetch(`${origin}/operator/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${admin}` },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: { name: "portcullis.reload", arguments: { config: config({ deny: true, second: true }) } },
        }),
      });
      const opBody = (await op.json()) as Any;
      expect(opBody.result?.isError ?? false, JSON.stringify(opBody)).toBe(false);
      expect(JSON.stringify(opBody.result)).toMatch(/"version\\?":\s*2/);
      expect(await within(SERVE_BOUND_MS, () => seen.legacy > before2.legacy && seen.modern > before2.modern)).not.toBeNull();
      expect(await within(SERVE_BOUND_MS, async () => !(await names(legacy.client)).includes(HIDDEN))).not.toBeNull();
      expect(await names(modern.client)).not.toContain(HIDDEN);
      await sub.close();

      // Each stored version is a config.changed record on the _global chain naming the version and the actor.
      let stored: Any[] = [];
      for (let attempt = 0; attempt < 40 && stored.length < 2; attempt++) {
        if (attempt) await new Promise((res) => setTimeout(res, 250));
        const exp = await fetch(`${origin}/v1/ledger/export`, { headers: { authorization: `Bearer ${admin}` }, signal: AbortSignal.timeout(30_000) });
        expect(exp.status).toBe(200);
        stored = (await exp.text())
          .split("\n")
          .filter((l) => l !== "")
          .map((l) => JSON.parse(l) as Any)
          .flatMap((o) => (o.entry?.kind === "config.changed" && typeof o.entry.body.version === "number" ? [o.entry.body] : []));
      }
      expect(stored.map((b: Any) => [b.version, b.by])).toEqual([
        [1, "human:reload-admin"],
        [2, "human:reload-admin"],
      ]);
      const v1 = stored.find((b: Any) => b.version === 1);
      const v2 = stored.find((b: Any) => b.version === 2);
      expect(v2.from).toBe(v1.to);
      expect(v1.upstreams).toEqual(["conf", "modern"]);
    } finally {
      await legacy.close();
      await modern.close();
    }
  }, 180_000);

  it("in enforce, a deny rule that matches no real tool is refused by reload with 'did you mean'; the old config keeps serving; --force sends it", async () => {
    const typo = join(dir, "typo.yaml");
    writeFileSync(
      typo,
      `mode: enforce\n${config({ deny: false, second: true })}policy:\n  rules:\n    - id: no-text\n      match: { upstream: conf, tool: test_simple_textt }\n      decision: deny\n      reason: a typo\n`,
    );
    const client = await connect("typo-check", `${origin}/mcp`, agent);
    try {
      const before = await names(client.client);
      expect(before).not.toContain(HIDDEN); // the served config (version 2) denies it
      const r = await reload(typo);
      expect(r.code, r.stdout + r.stderr).toBe(1);
      expect(r.stderr).toContain("not sent: in enforce, a rule matches no real tool");
      expect(r.stderr).toMatch(
        /rule no-text \(deny\): match names "upstream conf", "test_simple_textt", which matches no tool of the \d+ known — did you mean "test_simple_text"\?/,
      );
      expect(r.stderr).toContain("the previous config keeps serving");
      // The gateway makes the same check itself, against what the upstreams list to it: PUT /v1/config is refused too.
      const put = await api(origin, admin, "/v1/config", { method: "PUT", body: { config: readFileSync(typo, "utf8") } });
      expect(put.status, JSON.stringify(put.json)).toBe(400);
      const body = put.json as { error_description: string; problems: string[] };
      expect(body.error_description).toContain("in enforce, a rule that should stop calls matches no real tool");
      expect(body.problems).toEqual([
        expect.stringMatching(/^rule no-text \(deny\): match names "upstream conf", "test_simple_textt", .* did you mean "test_simple_text"\?/),
      ]);
      // Nothing was stored: the served config still hides the tool.
      await new Promise((res) => setTimeout(res, 1500));
      expect(await names(client.client)).not.toContain(HIDDEN);
      const forced = await runScript(resolve(root, "bin/portcullis.mjs"), ["reload", "--config", typo, "--url", origin, "--force"], {
        PORTCULLIS_TOKEN: admin,
      });
      expect(forced.code, forced.stdout + forced.stderr).toBe(0);
      expect(forced.stderr).toMatch(/--force: sent although rule no-text/);
      expect(forced.stdout).toMatch(/reloaded: config version 3/);
      expect(forced.stdout).toMatch(/the gateway reports: forced: stored although rule no-text \(deny\)/);
    } finally {
      await client.close();
    }
  }, 120_000);

  it("a config that renames an upstream's tools for agents (its namespacing changes) is refused by the gateway unless forced", async () => {
    // One upstream, namespace left to the default: served unprefixed, so conf__<tool> would become <tool>.
    const bare = join(dir, "bare.yaml");
    writeFileSync(bare, config({ deny: false, second: false }).replace("    namespace: true\n", ""));
    const client = await connect("rename-check", `${origin}/mcp`, agent);
    try {
      const r = await reload(bare);
      expect(r.code, r.stdout + r.stderr).toBe(1);
      expect(r.stderr).toContain("400: the config was refused; the previous one keeps serving");
      expect(r.stderr).toContain("upstream conf: this change renames every tool of conf for agents (conf__<tool> becomes <tool>)");
      const put = await api(origin, admin, "/v1/config", { method: "PUT", body: { config: readFileSync(bare, "utf8") } });
      expect(put.status).toBe(400);
      await new Promise((res) => setTimeout(res, 1500));
      expect((await names(client.client)).some((n) => n.startsWith("conf__"))).toBe(true);
      const forced = await runScript(resolve(root, "bin/portcullis.mjs"), ["reload", "--config", bare, "--url", origin, "--force"], {
        PORTCULLIS_TOKEN: admin,
      });
      expect(forced.code, forced.stdout + forced.stderr).toBe(0);
      expect(forced.stdout).toMatch(/reloaded: config version 4/);
      expect(await within(SERVE_BOUND_MS, async () => (await names(client.client)).includes("test_simple_text"))).not.toBeNull();

      // A rule that matched under the served config and matches nothing in the new one: the refusal says what it matched.
      const rule = (tool: string) =>
        `mode: enforce\n${readFileSync(bare, "utf8")}policy:\n  rules:\n    - id: no-text\n      match: { tool: ${tool} }\n      decision: deny\n      reason: r\n`;
      const good = await api(origin, admin, "/v1/config", { method: "PUT", body: { config: rule("test_simple_text") } });
      expect(good.status, JSON.stringify(good.json)).toBe(200);
      expect(good.json.version).toBe(5);
      // Once it serves version 5 (its deny hides the tool):
      expect(await within(SERVE_BOUND_MS, async () => !(await names(client.client)).includes("test_simple_text"))).not.toBeNull();
      const typo = await api(origin, admin, "/v1/config", { method: "PUT", body: { config: rule("test_simple_txt") } });
      expect(typo.status).toBe(400);
      expect(typo.json.problems).toEqual([
        expect.stringMatching(
          /^rule no-text \(deny\): match names "test_simple_txt", which matches no tool of the \d+ known \(under the config served now it matched "test_simple_text"\) — did you mean "test_simple_text"\?$/,
        ),
      ]);
    } finally {
      await client.close();
    }
  }, 120_000);
});
