/**
 * `portcullis add` on the production build (auth.required: true, grants minted locally with the
 * gateway's key): a gateway started from a commented config file with one upstream (the dual-era
 * conformance fixture, `conf`); an SDK client on a legacy session (its GET stream open) and one
 * pinned to 2026-07-28 on a `subscriptions/listen` stream. Refused first, each leaving the file
 * byte for byte as it was and the gateway on its first config: a header carrying an inline secret
 * (the command names the `${NAME}` to write and the `wrangler secret put` to run, never the value),
 * a duplicate name; `--dry-run` prints the result and writes nothing. Then `add --name second
 * --gateway …` appends a second conformance upstream (the file's comments and every original byte
 * kept), reloads it and prints the new version; both sessions get `notifications/tools/list_changed`
 * and then list and call the new upstream's tools — the legacy session too, whose leg to `second`
 * did not exist at its initialize: it is opened lazily, once, even for concurrent first uses, and
 * kept (src/upstream/legs.ts sessionLeg). All on loopback.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type ConformanceUpstream, startConformanceUpstream } from "../fixtures/conformance-upstream/server.ts";
import { freePort, root, startPortcullis } from "./harness.ts";
import { connect, grantFor, runScript, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

/** Every isolate serves a stored version within this bound (cache ≤ 1 s, stream watch every 1 s, plus a read). */
const SERVE_BOUND_MS = 5000;
const LEGACY_CLIENT = "add-legacy";
const INLINE_SECRET = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0";

let conf: ConformanceUpstream;
let second: ConformanceUpstream;
/** What `second` received: each JSON-RPC POST body with its headers. */
const seen: { body: Any; headers: IncomingMessage["headers"] }[] = [];
let gw: Awaited<ReturnType<typeof startPortcullis>>;
let origin = "";
let jwk = "";
let dir = "";
let file = "";
let original = "";
let admin = "";
let agent = "";

beforeAll(async () => {
  conf = await startConformanceUpstream({ port: 0, host: "127.0.0.1" });
  second = await startConformanceUpstream({ port: 0, host: "127.0.0.1", onMessage: (body, headers) => seen.push({ body, headers }) });
  jwk = JSON.stringify((await generateSigningKey("add-e2e")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  dir = mkdtempSync(join(tmpdir(), "portcullis-add-"));
  file = join(dir, "portcullis.yaml");
  original = `# add-cli e2e: every comment and byte of this file must survive portcullis add
actor: local:e2e
auth:
  required: true
  audience: ${origin}
egress:
  allow_loopback: true   # the upstreams of this test listen on loopback

upstreams:
  # the first upstream: tools exposed as conf__<tool>
  - name: conf
    url: ${conf.url}
    namespace: true
    timeout: 30s
`;
  writeFileSync(file, original);
  gw = await startPortcullis(original, port, { PORTCULLIS_SIGNING_KEY: jwk });
  admin = (await grantFor(jwk, origin, { sub: "human:add-admin", team: "ops", roles: ["admin"], tools: ["*"], ttlSeconds: 1800 })).token;
  agent = (await grantFor(jwk, origin, { sub: "agent:add", team: "ops", roles: ["agent"], tools: ["*"], ttlSeconds: 1800 })).token;
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), conf?.close(), second?.close()]);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name);
/** `portcullis add --config FILE … --local`: the egress check as for the loopback gateway this test runs. */
const add = (args: string[], token = admin) =>
  runScript(resolve(root, "bin/portcullis.mjs"), ["add", "--config", file, "--local", ...args], token ? { PORTCULLIS_TOKEN: token } : {});

/** Polls `check` every 50 ms until it is true; the time it took, or null after `ms`. */
async function within(ms: number, check: () => Promise<boolean> | boolean): Promise<number | null> {
  const start = performance.now();
  while (performance.now() - start < ms) {
    if (await check()) return performance.now() - start;
    await new Promise((r) => setTimeout(r, 50));
  }
  return null;
}

/** The initialize requests `second` got from the legacy client's session legs. */
const legacyInitializes = () => seen.filter((m) => m.body?.method === "initialize" && m.body?.params?.clientInfo?.name === LEGACY_CLIENT);

describe("portcullis add", () => {
  it("refuses an inline secret and a duplicate name (file unchanged), --dry-run writes nothing; then adds an upstream that open sessions of both eras list and call at once", async () => {
    const legacy = await connect(LEGACY_CLIENT, `${origin}/mcp`, agent);
    const modern = await connect("add-modern", `${origin}/mcp`, agent, { pin: "2026-07-28" });
    try {
      const changed = { legacy: 0, modern: 0 };
      legacy.client.setNotificationHandler("notifications/tools/list_changed", async () => {
        changed.legacy++;
      });
      modern.client.setNotificationHandler("notifications/tools/list_changed", async () => {
        changed.modern++;
      });
      const before = await names(legacy.client);
      expect(before).toContain("conf__test_simple_text");
      expect(before.some((n) => n.startsWith("second__"))).toBe(false);
      const sub = await modern.client.listen({ toolsListChanged: true });
      expect(sub.honoredFilter).toMatchObject({ toolsListChanged: true });
      await new Promise((r) => setTimeout(r, 1500)); // the legacy GET stream opens after initialized

      // An inline secret: refused with the reference to write and the secret to set; the value never printed; the file byte for byte.
      const secret = await add(["--name", "second", "--url", second.url, "--header", `Authorization: Bearer ${INLINE_SECRET}`, "--gateway", origin]);
      expect(secret.code, secret.stderr).toBe(1);
      expect(secret.stderr).toContain("looks like an inline secret");
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the ${NAME} reference syntax, literally
      expect(secret.stderr).toContain('--header "Authorization: Bearer ${SECOND_TOKEN}"');
      expect(secret.stderr).toContain("npx wrangler secret put SECOND_TOKEN");
      expect(secret.stderr).toContain(`${file} is unchanged`);
      expect(secret.stdout + secret.stderr).not.toContain(INLINE_SECRET);
      expect(secret.stdout + secret.stderr).not.toContain(INLINE_SECRET.slice(8, 24));
      expect(readFileSync(file, "utf8")).toBe(original);
      // The same as JSON: every problem, nothing written.
      const secretJson = await add(["--name", "second", "--url", second.url, "--header", `X-Api-Key: ${INLINE_SECRET}`, "--json"]);
      expect(secretJson.code).toBe(1);
      const sj = JSON.parse(secretJson.stdout);
      expect(sj).toMatchObject({ ok: false, written: false });
      expect(sj.problems.join("\n")).toContain("npx wrangler secret put SECOND_X_API_KEY");
      expect(secretJson.stdout).not.toContain(INLINE_SECRET);
      expect(readFileSync(file, "utf8")).toBe(original);

      // A duplicate name: refused, saying what to do instead; the file unchanged.
      const dup = await add(["--name", "conf", "--url", second.url, "--gateway", origin]);
      expect(dup.code).toBe(1);
      expect(dup.stderr).toContain(`an upstream named "conf" is already in ${file}: choose another --name`);
      expect(readFileSync(file, "utf8")).toBe(original);

      // --dry-run: the resulting file on stdout, nothing written, nothing reloaded.
      const dry = await add(["--name", "second", "--url", second.url, "--header", "X-Test: add-cli", "--dry-run", "--gateway", origin]);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout).toBe(`${original}  - name: second\n    url: ${second.url}\n    namespace: true\n    headers:\n      X-Test: add-cli\n`);
      expect(dry.stderr).toContain("dry run");
      expect(readFileSync(file, "utf8")).toBe(original);
      expect(changed).toEqual({ legacy: 0, modern: 0 });

      // The add: written (every original byte kept, comments included), reloaded, the new version printed.
      const r = await add(["--name", "second", "--url", second.url, "--header", "X-Test: add-cli", "--gateway", origin]);
      const answered = performance.now();
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toContain(`added upstream second (${second.url}) to ${file}`);
      // Version 1: nothing refused above reached the gateway.
      expect(r.stdout).toMatch(/reloaded: config version 1 \(sha256 [0-9a-f]{64}\)/);
      expect(r.stdout + r.stderr).not.toContain(admin.slice(-20));
      const written = readFileSync(file, "utf8");
      expect(written.startsWith(original)).toBe(true);
      expect(written).toContain("# the first upstream: tools exposed as conf__<tool>");
      expect(written).toContain("allow_loopback: true   # the upstreams of this test listen on loopback");
      expect(parse(written).upstreams).toEqual([
        { name: "conf", url: conf.url, namespace: true, timeout: "30s" },
        { name: "second", url: second.url, namespace: true, headers: { "X-Test": "add-cli" } },
      ]);

      // Both open sessions are told, then list the new upstream's tools.
      const notified = await within(SERVE_BOUND_MS, () => changed.legacy > 0 && changed.modern > 0);
      expect(notified, `list_changed: ${JSON.stringify(changed)}`).not.toBeNull();
      expect(legacyInitializes()).toEqual([]); // the legacy session has no leg to second yet

      // The legacy session's first uses of `second`, at once: a list and two calls, three requests. Each
      // request may open the lazy leg itself (no request waits on another's promise: Workers would
      // never settle it for it once that request ended); the session keeps the first leg stored, the
      // others are closed, and every call runs on the kept one.
      const [listed, a, b] = await Promise.all([
        names(legacy.client),
        legacy.client.callTool({ name: "second__test_simple_text", arguments: {} }),
        legacy.client.callTool({ name: "second__test_simple_text", arguments: {} }),
      ]);
      console.log(
        `portcullis add: the legacy session listed and called the new upstream ${Math.round(performance.now() - answered)} ms after the reload's answer`,
      );
      expect(listed).toContain("second__test_simple_text");
      expect(listed).toContain("conf__test_simple_text");
      for (const c of [a, b]) {
        expect(c.isError ?? false, JSON.stringify(c)).toBe(false);
        expect(texts(c)).toMatch(/\S/);
      }
      const opened = legacyInitializes().length;
      expect(opened).toBeGreaterThanOrEqual(1);
      expect(opened).toBeLessThanOrEqual(3);
      // The leg is kept in the session: a later call reuses it (no new initialize, the same upstream session).
      expect((await legacy.client.callTool({ name: "second__test_simple_text", arguments: {} })).isError ?? false).toBe(false);
      expect(legacyInitializes()).toHaveLength(opened);
      const legacyCalls = seen.filter((m) => m.body?.method === "tools/call" && m.headers["mcp-session-id"] !== undefined);
      expect(legacyCalls.length).toBeGreaterThanOrEqual(3);
      expect(new Set(legacyCalls.map((m) => m.headers["mcp-session-id"])).size).toBe(1);
      // The configured header reached the upstream.
      expect(legacyCalls.every((m) => m.headers["x-test"] === "add-cli")).toBe(true);

      // The modern session lists and calls it too.
      let modernNames: string[] = [];
      expect(
        await within(SERVE_BOUND_MS, async () => {
          modernNames = await names(modern.client);
          return modernNames.includes("second__test_simple_text");
        }),
        modernNames.join(","),
      ).not.toBeNull();
      const m = await modern.client.callTool({ name: "second__test_simple_text", arguments: {} });
      expect(m.isError ?? false, JSON.stringify(m)).toBe(false);
      expect(texts(m)).toBe(texts(a));
      await sub.close();

      // Adding it again is a duplicate now.
      const again = await add(["--name", "second", "--url", second.url]);
      expect(again.code).toBe(1);
      expect(readFileSync(file, "utf8")).toBe(written);
    } finally {
      await legacy.close();
      await modern.close();
    }
  }, 180_000);

  it("an add keeps the upstream already there under its own names (namespace: false written on it); in enforce, a deny rule that matches no real tool stops the reload, with did you mean", async () => {
    // One upstream, not namespaced: its tool is test_simple_text, and the rule names it so (by exposed name).
    const other = join(dir, "renames.yaml");
    const base = `mode: enforce\nactor: local:e2e\nauth:\n  required: true\n  audience: ${origin}\negress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${conf.url}\n`;
    const rule = (tool: string) => `policy:\n  rules:\n    - id: no-text\n      match: { tool: ${tool} }\n      decision: deny\n      reason: not this one\n`;
    writeFileSync(other, base + rule("test_simple_text"));
    // The gateway serves that config first (conf alone, under its own names: a rename of the earlier config's conf__…, forced).
    const served = await runScript(resolve(root, "bin/portcullis.mjs"), ["reload", "--config", other, "--url", origin, "--force"], { PORTCULLIS_TOKEN: admin });
    expect(served.code, served.stdout + served.stderr).toBe(0);
    const addThird = (file: string) =>
      runScript(resolve(root, "bin/portcullis.mjs"), ["add", "--config", file, "--local", "--name", "third", "--url", second.url, "--gateway", origin], {
        PORTCULLIS_TOKEN: admin,
      });
    const kept = await addThird(other);
    expect(kept.code, kept.stdout + kept.stderr).toBe(0);
    expect(kept.stdout).toContain("conf keeps its own tool names (namespace: false written on it); third's tools are third__<tool>");
    const written = readFileSync(other, "utf8");
    expect(written).toContain(
      `  - name: conf\n    namespace: false # keeps its own tool names beside other upstreams (portcullis add)\n    url: ${conf.url}\n`,
    );
    expect(written).toContain(`  - name: third\n    url: ${second.url}\n    namespace: true\n`);
    // The rule still names a real tool, so the reload went through; the gateway now serves conf's names beside third__….
    const s = await connect("add-kept", `${origin}/mcp`, admin);
    try {
      let names: string[] = [];
      for (let i = 0; i < 40 && !names.includes("third__test_simple_text"); i++) {
        if (i) await new Promise((r) => setTimeout(r, 250));
        names = (await s.client.listTools()).tools.map((t) => t.name);
      }
      expect(names).toContain("third__test_simple_text");
      expect(names).not.toContain("test_simple_text"); // denied unconditionally by no-text: not listed
      expect(names).toContain("test_image_content");
      const denied = await s.client.callTool({ name: "test_simple_text", arguments: {} });
      expect((denied as { content: { text: string }[] }).content[0]!.text).toMatch(/^Blocked by Portcullis: rule no-text/);
    } finally {
      await s.close();
    }

    // A rule with a typo: in enforce it matches no real tool, so the add writes the file but does not reload.
    const typo = join(dir, "typo.yaml");
    writeFileSync(typo, base + rule("test_simple_txt"));
    const r = await addThird(typo);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stderr).toMatch(/rule no-text \(deny\): match names "test_simple_txt", which matches no tool of the \d+ known — did you mean "test_simple_text"/);
    expect(r.stderr).toContain("was written, but not reloaded");
    expect(readFileSync(typo, "utf8")).toContain("name: third");
  });

  it("without a token for --gateway it is a usage error and writes nothing", async () => {
    const text = readFileSync(file, "utf8");
    const r = await add(["--name", "third", "--url", second.url, "--gateway", origin], "");
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("PORTCULLIS_TOKEN");
    expect(r.stderr).toContain("portcullis add --help");
    expect(readFileSync(file, "utf8")).toBe(text);
  });
});
