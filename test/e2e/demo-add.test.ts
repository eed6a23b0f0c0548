/**
 * The new user's path that used to fail open, on the production build: the `npm start` demo
 * config (its starter mapping and its two rules: get-sum over 100 held, get-env denied) in front
 * of server-everything, an SDK client on a legacy session that has listed `get-sum`, then
 * `portcullis add --gateway` of a second upstream. The add keeps the first upstream's names
 * (`namespace: false` written on it) and prefixes the new one's, so the open session keeps every
 * name it listed, the demo's hold and deny decide the same calls, and the new tools come as
 * `conf__…`. All on loopback.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { inlineConfigFiles } from "../../cli/config-files.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { freePort, root, startPortcullis } from "./harness.ts";
import { connect, grantFor, runScript } from "./mcp.ts";

let gw: Awaited<ReturnType<typeof startPortcullis>>;
let origin = "";
let dir = "";
let file = "";
let admin = "";

beforeAll(async () => {
  const jwk = JSON.stringify((await generateSigningKey("demo-add")).privateJwk);
  const port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  dir = mkdtempSync(join(tmpdir(), "portcullis-demo-add-"));
  file = join(dir, "portcullis.yaml");
  // The demo config as shipped, pointed at the suite's server-everything, its mappings from the repo.
  const demo = readFileSync(join(root, "portcullis.yaml"), "utf8")
    .replace(/url: http:\/\/127\.0\.0\.1:3001\/mcp/, `url: ${inject("everythingUrl")}`)
    .replace(/^mappings_dir: mappings$/m, `mappings_dir: ${join(root, "mappings")}`);
  expect(demo).toContain(inject("everythingUrl"));
  writeFileSync(file, demo);
  // The gateway gets the text `portcullis dev` would give it: mappings inlined.
  const inlined = inlineConfigFiles(demo, file);
  expect(inlined.problems).toEqual([]);
  gw = await startPortcullis(inlined.text, port, { PORTCULLIS_SIGNING_KEY: jwk });
  admin = (await grantFor(jwk, origin, { sub: "human:demo-admin", team: "local", roles: ["admin"], tools: ["*"], ttlSeconds: 1800 })).token;
}, 180_000);
afterAll(async () => {
  await gw?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const add = (...extra: string[]) =>
  runScript(
    resolve(root, "bin/portcullis.mjs"),
    ["add", "--config", file, "--local", "--name", "conf", "--url", inject("conformanceUrl"), "--gateway", origin, ...extra],
    { PORTCULLIS_TOKEN: admin },
  );
const text = (r: { content?: { text?: string }[] }) => r.content?.[0]?.text ?? "";

describe("the demo, then portcullis add --gateway of a second upstream", () => {
  it("no tool an open session listed is renamed: the demo's hold and deny still apply, the new upstream's tools come prefixed", async () => {
    const session = await connect("demo-add", `${origin}/mcp`);
    try {
      const listed = (await session.client.listTools()).tools.map((t) => t.name);
      expect(listed).toContain("get-sum");
      expect(listed).not.toContain("get-env"); // denied unconditionally: not even listed

      const added = await add();
      expect(added.code, added.stdout + added.stderr).toBe(0);
      expect(added.stdout).toContain("everything keeps its own tool names (namespace: false written on it); conf's tools are conf__<tool>");
      expect(added.stdout).toMatch(/reloaded: config version 1/);
      const written = readFileSync(file, "utf8");
      expect(written).toMatch(/- name: everything\n\s+namespace: false/);
      expect(written).toMatch(/- name: conf\n\s+url: .*\n\s+namespace: true/);

      // The same session, once the gateway serves the new config: every name it listed is still there, conf's beside them.
      let now: string[] = [];
      for (let i = 0; i < 40 && !now.some((n) => n.startsWith("conf__")); i++) {
        if (i) await new Promise((r) => setTimeout(r, 250));
        now = (await session.client.listTools()).tools.map((t) => t.name);
      }
      expect(now.filter((n) => !n.startsWith("conf__"))).toEqual(listed);
      expect(now).toContain("conf__test_simple_text");
      // The demo's rules decide the same tools under the same names, in the same session.
      const held = await session.client.callTool({ name: "get-sum", arguments: { a: 500, b: 500 } });
      expect(held.isError).toBe(true);
      expect(text(held as never)).toContain("this call needs approval (rule demo-big-sums");
      const small = await session.client.callTool({ name: "get-sum", arguments: { a: 1, b: 2 } });
      expect(text(small as never)).toBe("The sum of 1 and 2 is 3.");
      const denied = await session.client.callTool({ name: "get-env", arguments: {} });
      expect(denied.isError).toBe(true);
      expect(text(denied as never)).toMatch(/^Blocked by Portcullis: rule demo-no-env/);
      // conf's tools are governed under their new names too: unmapped, so the enforce baseline blocks them.
      const other = await session.client.callTool({ name: "conf__test_simple_text", arguments: {} });
      expect(other.isError).toBe(true);
      expect(text(other as never)).toContain("conf/test_simple_text is unclassified (no mapping");
    } finally {
      await session.close();
    }
    // Adding again is refused (a duplicate name) and changes nothing.
    const before = readFileSync(file, "utf8");
    const again = await add();
    expect(again.code).toBe(1);
    expect(readFileSync(file, "utf8")).toBe(before);
  }, 180_000);
});
