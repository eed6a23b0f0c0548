/**
 * The new user's path that used to fail open, on the production build: the `npm start` demo
 * config (its starter mapping and its two rules: get-sum over 100 held, get-env denied) in front
 * of server-everything, an SDK client on a legacy session that has listed `get-sum`, then
 * `portcullis add --gateway` of a second upstream. Without --force the add is refused and nothing
 * changes: the file is byte for byte as it was and the session's names, the hold and the deny stay.
 * With --force the rename is accepted on purpose, and the demo's rules — written by stable identity,
 * `{upstream: everything, tool: …}` — still hold the big sum and deny get-env under their new names.
 * All on loopback.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
// @ts-expect-error -- plain ESM helper shared with the CLI
import { inlineConfigFiles } from "../../bin/config-files.mjs";
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
  it("without --force: refused, nothing changed; with --force: the demo's hold and deny still apply under the new names", async () => {
    const session = await connect("demo-add", `${origin}/mcp`);
    try {
      const listed = (await session.client.listTools()).tools.map((t) => t.name);
      expect(listed).toContain("get-sum");
      expect(listed).not.toContain("get-env"); // denied unconditionally: not even listed
      const before = readFileSync(file, "utf8");

      const refused = await add();
      expect(refused.code, refused.stdout + refused.stderr).toBe(1);
      expect(refused.stderr).toContain("upstream everything: this change renames every tool of everything for agents (<tool> becomes everything__<tool>)");
      expect(readFileSync(file, "utf8")).toBe(before);
      // Nothing changed under the open session: the same names, the hold, the deny.
      expect((await session.client.listTools()).tools.map((t) => t.name)).toEqual(listed);
      const held = await session.client.callTool({ name: "get-sum", arguments: { a: 500, b: 500 } });
      expect(held.isError).toBe(true);
      expect(text(held as never)).toContain("this call needs approval (rule demo-big-sums");
      const denied = await session.client.callTool({ name: "get-env", arguments: {} });
      expect(text(denied as never)).toMatch(/^Blocked by Portcullis: rule demo-no-env/);

      const forced = await add("--force");
      expect(forced.code, forced.stdout + forced.stderr).toBe(0);
      expect(forced.stdout).toContain("--force: everything's tools are now exposed as everything__<tool>");
      expect(forced.stdout).toMatch(/reloaded: config version 1/);
    } finally {
      await session.close();
    }
    // A new session sees the new names; the rules, written as {upstream, tool}, still decide them.
    let names: string[] = [];
    for (let i = 0; i < 40 && !names.includes("everything__get-sum"); i++) {
      if (i) await new Promise((r) => setTimeout(r, 250));
      const s = await connect("demo-add-2", `${origin}/mcp`);
      names = (await s.client.listTools()).tools.map((t) => t.name);
      await s.close();
    }
    expect(names).toContain("everything__get-sum");
    expect(names).not.toContain("everything__get-env");
    const after = await connect("demo-add-3", `${origin}/mcp`);
    try {
      const held = await after.client.callTool({ name: "everything__get-sum", arguments: { a: 500, b: 500 } });
      expect(held.isError).toBe(true);
      expect(text(held as never)).toContain("this call needs approval (rule demo-big-sums");
      const small = await after.client.callTool({ name: "everything__get-sum", arguments: { a: 1, b: 2 } });
      expect(text(small as never)).toBe("The sum of 1 and 2 is 3.");
      const denied = await after.client.callTool({ name: "everything__get-env", arguments: {} });
      expect(denied.isError).toBe(true);
      expect(text(denied as never)).toMatch(/^Blocked by Portcullis: rule demo-no-env/);
    } finally {
      await after.close();
    }
  }, 180_000);
});
