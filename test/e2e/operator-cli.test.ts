/**
 * cli/operator.ts through the `portcullis` command, as an operator runs it: `token revoke`
 * against the shared namespaced gateway (the revoked grant then gets 401; a grant signed offline
 * is revoked with a warning that the gateway has no record of it, one it minted without; a
 * non-admin token is refused, exit 1; a port nothing listens on is exit 3 naming the URL tried and
 * that the gateway may not be running, for revoke, holds list and token mint --url alike; a bad
 * call exit 2); `keys generate` (mode 0600, the
 * public JWKS without `d`, never overwriting) and `keys rotate` (a grant signed by the old key still
 * verifies against the rotated set, new grants carry the new kid — offline through the TS modules,
 * and on a gateway started with the rotated set); `check --self-probe --port N` (PASS on that port,
 * the probe's upstream saw no tools/call, its gateway is gone afterwards; a taken port is exit 3); `doctor --live` naming an unreachable
 * upstream (exit 1) beside a reachable one, and exit 0 when all answer. Owns the temp files and the
 * one gateway it starts. Must never: leave a process running, or reach beyond 127.0.0.1.
 */
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { mintGrant, verifyGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { freePort, listeningOn, root, startPortcullis } from "./harness.ts";
import { grantFor, modernRaw, type Run, runScript } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const CLI = join(root, "bin/portcullis.mjs");
const cli = (args: string[], env: Record<string, string> = {}): Promise<Run> => runScript(CLI, args, env);
const dir = mkdtempSync(join(tmpdir(), "operator-cli-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** As runScript, with a longer bound (the self-probe starts a gateway). */
function cliLong(args: string[], ms = 240_000): Promise<Run> {
  return new Promise((done, fail) => {
    const { PORTCULLIS_TOKEN: _drop, ...env } = process.env;
    const child = spawn(process.execPath, [CLI, ...args], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGINT"), ms);
    child.on("error", fail);
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

const kidOf = (token: string): string => JSON.parse(Buffer.from(token.split(".")[0]!, "base64url").toString()).kid;

describe("portcullis token revoke", () => {
  const url = inject("namespacedUrl");
  const origin = new URL(url).origin;
  const key = inject("signingKey");

  it("revokes a grant: it worked before and gets 401 after; refusals and usage say what to do", async () => {
    const admin = (await grantFor(key, origin, { sub: "human:revoke-admin", team: "ops", roles: ["admin"], tools: [], ttlSeconds: 600 })).token;
    const agent = await grantFor(key, origin, { sub: "agent:to-revoke", team: "ops", roles: ["agent"], tools: ["*"], ttlSeconds: 600 });
    const listTools = async () =>
      await fetch(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          authorization: `Bearer ${agent.token}`,
          "mcp-protocol-version": "2026-07-28",
          "mcp-method": "tools/list",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/list",
          params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
        }),
        signal: AbortSignal.timeout(30_000),
      }).then(async (r) => {
        await r.body?.cancel();
        return r.status;
      });
    expect(await listTools()).toBe(200);

    // Not an admin: refused by the gateway, exit 1, the reason and what to do named.
    const notAdmin = await cli(["token", "revoke", agent.jti, "--url", origin], { PORTCULLIS_TOKEN: agent.token });
    expect(notAdmin.code).toBe(1);
    expect(notAdmin.stderr).toMatch(/403/);
    expect(notAdmin.stderr).toMatch(/admin role/);
    expect(await listTools()).toBe(200);

    // The agent's grant was signed here with the key, never minted by the gateway: revoked all the
    // same (a valid grant), with known false and a warning that the gateway has no record of it.
    const r = await cli(["token", "revoke", agent.jti, "--url", origin, "--exp", String(agent.exp), "--json"], { PORTCULLIS_TOKEN: admin });
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.revoked).toBe(agent.jti);
    expect(j.until).toBeGreaterThanOrEqual(agent.exp);
    expect(j.known).toBe(false);
    expect(r.stderr).toMatch(/^portcullis token revoke: warning: this gateway has no record of this jti: .*token mint --key/m);
    expect(r.stdout + r.stderr).not.toContain(admin);
    expect(await listTools()).toBe(401);

    // Revoked before: known now, no warning.
    const text = await cli(["token", "revoke", agent.jti, "--url", origin], { PORTCULLIS_TOKEN: admin });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^revoked ${agent.jti}: refused on its next request`));
    expect(text.stderr).toBe("");

    // A grant the gateway minted (token mint --url, POST /v1/grants) is known at its first revocation.
    const mintedHere = await cli(["token", "mint", "--url", origin, "--sub", "agent:minted-here", "--team", "ops", "--json"], { PORTCULLIS_TOKEN: admin });
    expect(mintedHere.code, mintedHere.stderr).toBe(0);
    const { jti: hereJti } = JSON.parse(mintedHere.stdout) as { jti: string };
    const known = await cli(["token", "revoke", hereJti, "--url", origin, "--json"], { PORTCULLIS_TOKEN: admin });
    expect(known.code, known.stderr).toBe(0);
    expect(JSON.parse(known.stdout)).toMatchObject({ revoked: hereJti, known: true });
    expect(known.stderr).toBe("");

    // Usage (exit 2) and an unreachable gateway (exit 3).
    const noUrl = await cli(["token", "revoke", agent.jti], { PORTCULLIS_TOKEN: admin });
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toMatch(/give --url GATEWAY/);
    const badJti = await cli(["token", "revoke", "no!", "--url", origin], { PORTCULLIS_TOKEN: admin });
    expect(badJti.code).toBe(2);
    const noToken = await cli(["token", "revoke", agent.jti, "--url", origin]);
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toMatch(/PORTCULLIS_TOKEN/);
    const closed = await freePort();
    // Nothing listens there: the URL tried, and that the gateway may not be running (the shared helper, for every command).
    const notRunning = "(connection refused): is it running? (npx portcullis dev --config FILE, or npx portcullis start)";
    const down = await cli(["token", "revoke", agent.jti, "--url", `http://127.0.0.1:${closed}`], { PORTCULLIS_TOKEN: admin });
    expect(down.code).toBe(3);
    expect(down.stderr).toContain(
      `portcullis token revoke: cannot reach the gateway at http://127.0.0.1:${closed}/v1/grants/${agent.jti}/revoke ${notRunning}`,
    );
    const holdsDown = await cli(["holds", "list", "--url", `http://127.0.0.1:${closed}`], { PORTCULLIS_TOKEN: admin });
    expect(holdsDown.code).toBe(3);
    expect(holdsDown.stderr).toContain(`portcullis holds list: cannot reach the gateway at http://127.0.0.1:${closed}/v1/holds ${notRunning}`);
    const mintDown = await cli(["token", "mint", "--url", `http://127.0.0.1:${closed}`, "--sub", "agent:x"], { PORTCULLIS_TOKEN: admin });
    expect(mintDown.code).toBe(1);
    expect(mintDown.stderr).toContain(`portcullis: cannot reach the gateway at http://127.0.0.1:${closed}/v1/grants ${notRunning}`);
    expect(noUrl.stderr).toContain("(npx portcullis token revoke --help for the options)");
    const help = await cli(["token", "revoke", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: portcullis token revoke JTI --url GATEWAY/);
  });
});

describe("portcullis keys", () => {
  it("generate writes a 0600 key file, prints the public JWKS and the secret line, and never overwrites", async () => {
    const file = join(dir, "signing.json");
    const r = await cli(["keys", "generate", "--out", file, "--kid", "old-1"]);
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const jwk = JSON.parse(readFileSync(file, "utf8"));
    expect(jwk).toMatchObject({ kty: "OKP", crv: "Ed25519", kid: "old-1" });
    expect(typeof jwk.d).toBe("string");
    expect(r.stdout).not.toContain(jwk.d);
    expect(r.stdout).toContain(jwk.x);
    expect(r.stdout).toContain(`npx wrangler secret put PORTCULLIS_SIGNING_KEY < ${file}`);
    expect((await parseKeySet(readFileSync(file, "utf8"))).active?.kid).toBe("old-1");

    const before = readFileSync(file, "utf8");
    const again = await cli(["keys", "generate", "--out", file]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/exists: it is never overwritten/);
    expect(readFileSync(file, "utf8")).toBe(before);

    const json = await cli(["keys", "generate", "--out", join(dir, "other.json"), "--json", "--secret", "MY_KEY"]);
    expect(json.code).toBe(0);
    const report = JSON.parse(json.stdout);
    expect(report.jwks.keys).toHaveLength(1);
    expect(report.jwks.keys[0].d).toBeUndefined();
    expect(report.secret_command).toBe(`npx wrangler secret put MY_KEY < ${join(dir, "other.json")}`);

    const piped = await cli(["keys", "generate", "--stdout"]);
    expect(piped.code).toBe(0);
    expect(JSON.parse(piped.stdout).d).toBeTypeOf("string");
    expect(piped.stderr).toMatch(/public JWKS/);

    expect((await cli(["keys", "generate", "--kid", "not a kid"])).code).toBe(2);
    expect((await cli(["keys", "nope"])).code).toBe(2);
    expect((await cli(["keys", "generate", "--help"])).stdout).toMatch(/^usage: portcullis keys generate/);
  });

  it("rotate: the new key signs, grants signed by the old one still verify (offline and on a gateway)", async () => {
    const old = join(dir, "rot-old.json");
    expect((await cli(["keys", "generate", "--out", old, "--kid", "rot-old"])).code).toBe(0);
    const oldKeys = await parseKeySet(readFileSync(old, "utf8"));
    const claims = { iss: "http://gw.test", aud: "http://gw.test", sub: "agent:a", team: "t", roles: ["agent" as const], tools: ["*"], ttlSeconds: 600 };
    const oldGrant = await mintGrant(oldKeys, claims, { maxLifetimeSeconds: 3600 });

    const rotated = join(dir, "rot-new.json");
    const r = await cli(["keys", "rotate", "--key", old, "--out", rotated, "--kid", "rot-new", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(statSync(rotated).mode & 0o777).toBe(0o600);
    const report = JSON.parse(r.stdout);
    expect(report.kid).toBe("rot-new");
    expect(report.verify_only).toEqual(["rot-old"]);
    expect(report.jwks.keys.map((k: Any) => k.kid)).toEqual(["rot-new", "rot-old"]);
    expect(report.jwks.keys.every((k: Any) => k.d === undefined)).toBe(true);

    // Exactly the format src/identity/keys.ts parses: { keys, active }, the old key public only.
    const secret = JSON.parse(readFileSync(rotated, "utf8"));
    expect(secret.active).toBe("rot-new");
    expect(secret.keys.find((k: Any) => k.kid === "rot-old").d).toBeUndefined();
    expect(typeof secret.keys.find((k: Any) => k.kid === "rot-new").d).toBe("string");
    const set = await parseKeySet(readFileSync(rotated, "utf8"));
    expect(set.active?.kid).toBe("rot-new");
    const opts = { issuer: claims.iss, audience: claims.aud, maxLifetimeSeconds: 3600 };
    expect(await verifyGrant(oldGrant.token, set, opts)).toMatchObject({ ok: true });
    const newGrant = await mintGrant(set, claims, { maxLifetimeSeconds: 3600 });
    expect(kidOf(newGrant.token)).toBe("rot-new");
    expect(await verifyGrant(newGrant.token, set, opts)).toMatchObject({ ok: true });
    expect(await verifyGrant(newGrant.token, oldKeys, opts)).toMatchObject({ ok: false, reason: "unknown kid" });

    // Never overwrites; a file that is not a key is refused (exit 1); rotating the set again keeps every old kid.
    expect((await cli(["keys", "rotate", "--key", old, "--out", rotated])).code).toBe(1);
    writeFileSync(join(dir, "junk.json"), '{"kty":"RSA"}');
    const junk = await cli(["keys", "rotate", "--key", join(dir, "junk.json"), "--out", join(dir, "junk-out.json")]);
    expect(junk.code).toBe(1);
    expect(junk.stderr).toMatch(/not a usable signing-key secret/);
    expect(existsSync(join(dir, "junk-out.json"))).toBe(false);
    const twice = await cli(["keys", "rotate", "--key", rotated, "--kid", "rot-3", "--json"]);
    expect(twice.code, twice.stderr).toBe(0);
    expect(JSON.parse(twice.stdout).verify_only).toEqual(["rot-new", "rot-old"]);
    expect(existsSync(join(dir, "rot-new.rotated.json"))).toBe(true);

    // On a gateway started with the rotated set: a grant minted before the rotation is accepted,
    // one minted now (token mint --key) carries the new kid and is accepted, the JWKS has both.
    const port = await freePort();
    const gwOrigin = `http://127.0.0.1:${port}`;
    const before = await mintGrant(oldKeys, { ...claims, iss: gwOrigin, aud: gwOrigin }, { maxLifetimeSeconds: 3600 });
    const gw = await startPortcullis(
      `actor: local:rotate\negress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${inject("conformanceUrl")}\n    timeout: 30s\n`,
      port,
      {
        PORTCULLIS_SIGNING_KEY: readFileSync(rotated, "utf8"),
      },
    );
    try {
      const minted = await cli(["token", "mint", "--sub", "agent:b", "--tools", "*", "--port", String(port), "--key", rotated]);
      expect(minted.code, minted.stderr).toBe(0);
      const after = minted.stdout.trim();
      expect(kidOf(after)).toBe("rot-new");
      expect(kidOf(before.token)).toBe("rot-old");
      for (const token of [before.token, after]) {
        const { answer } = await modernRaw(gw.url, token, "tools/list", {});
        expect(answer.result?.tools?.length, JSON.stringify(answer)).toBeGreaterThan(0);
      }
      const jwks = await (await fetch(`${gwOrigin}/.well-known/jwks.json`)).json();
      expect(jwks.keys.map((k: Any) => k.kid).sort()).toEqual(["rot-new", "rot-old"]);
    } finally {
      await gw.stop();
    }
  });
});

describe("portcullis check --self-probe", () => {
  it("PASS: a tools/call is refused when the ledger cannot be written, and never reaches the upstream", async () => {
    // --port: the probe's gateway on that port (without it, a free one).
    const port = await freePort();
    const r = await cliLong(["check", "--self-probe", "--port", String(port), "--json"]);
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report.verdict).toBe("PASS");
    expect(report.method).toMatch(/not a valid ledger chain name/);
    expect(report.probe.refused_by_ledger).toBe(true);
    expect(report.probe.answer).toMatch(/^Blocked by Portcullis: .*ledger.*\(check: ledger\)/);
    expect(report.probe.upstream_tools_calls).toBe(0);
    expect(report.control.reached_upstream).toBe(true);
    expect(report.control.upstream_tools_calls).toBe(1);
    // Progress lines while it starts, and nothing left running on the probe's port.
    expect(report.gateway).toBe(`http://127.0.0.1:${port}`);
    expect(r.stderr).toContain(`portcullis check: starting a gateway on http://127.0.0.1:${port} `);
    expect(r.stderr).toMatch(/portcullis check: gateway up after/);
    expect(listeningOn(Number(new URL(report.gateway).port))).toEqual([]);
    expect(listeningOn(Number(new URL(report.upstream).port))).toEqual([]);

    const usage = await cli(["check", "--self-probe", "--config", "portcullis.yaml"]);
    expect(usage.code).toBe(2);
    const badPort = await cli(["check", "--self-probe", "--port", "70000"]);
    expect(badPort.code).toBe(2);
    expect(badPort.stderr).toContain("--port: use a port number (1-65535), not 70000");
    // A port that is taken: the probe is not run (exit 3), saying which port and why.
    const taken = createServer();
    await new Promise<void>((ok) => taken.listen(0, "127.0.0.1", ok));
    const busy = (taken.address() as AddressInfo).port;
    try {
      const inUse = await cli(["check", "--self-probe", "--port", String(busy), "--json"]);
      expect(inUse.code, inUse.stderr).toBe(3);
      expect(JSON.parse(inUse.stdout).reason).toBe(
        `--port ${busy}: 127.0.0.1:${busy} cannot be listened on (EADDRINUSE): choose another port, or leave --port out for a free one`,
      );
    } finally {
      await new Promise<void>((ok) => taken.close(() => ok()));
    }
    const help = await cli(["check", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--self-probe/);
  });
});

describe("portcullis doctor --live", () => {
  it("reports each upstream's reachability; an unreachable one is exit 1", async () => {
    const closed = await freePort();
    const file = join(dir, "doctor.yaml");
    writeFileSync(
      file,
      `egress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${inject("conformanceUrl")}\n  - name: gone\n    url: http://127.0.0.1:${closed}/mcp\n`,
    );
    const r = await cli(["doctor", "--config", file, "--live", "--timeout", "3s"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/REACHABLE {3}conf \(http:\/\/127\.0\.0\.1:\d+\/mcp, (modern|legacy) [\d-]+\): \d+ tools? listed/);
    expect(r.stdout).toContain(`UNREACHABLE gone (http://127.0.0.1:${closed}/mcp): connection refused (ECONNREFUSED)`);
    expect(r.stdout).toMatch(/1 upstream unreachable/);

    const j = await cli(["doctor", "--config", file, "--live", "--json"]);
    expect(j.code).toBe(1);
    const report = JSON.parse(j.stdout);
    expect(report.ok).toBe(false);
    expect(report.upstreams.map((u: Any) => [u.name, u.reachable])).toEqual([
      ["conf", true],
      ["gone", false],
    ]);
    expect(report.problems).toEqual([`upstream gone unreachable: connection refused (ECONNREFUSED)`]);

    // Without --live the same config is statically sound (exit 0); with only reachable upstreams --live is exit 0.
    expect((await cli(["doctor", "--config", file])).code).toBe(0);
    const good = join(dir, "doctor-good.yaml");
    writeFileSync(good, `egress:\n  allow_loopback: true\nupstreams:\n  - name: conf\n    url: ${inject("conformanceUrl")}\n`);
    const ok = await cli(["doctor", "--config", good, "--live"]);
    expect(ok.code, ok.stdout + ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^.*: sound/);

    // An upstream the egress rules refuse is reported and not contacted.
    const refused = join(dir, "doctor-egress.yaml");
    writeFileSync(refused, `upstreams:\n  - name: conf\n    url: ${inject("conformanceUrl")}\n`);
    const e = await cli(["doctor", "--config", refused, "--live", "--json"]);
    expect(e.code).toBe(1);
    expect(JSON.parse(e.stdout).upstreams[0]).toMatchObject({ name: "conf", reachable: false, contacted: false });
  });

  it("a rule that matches no real tool: in enforce a deny is a problem (exit 1) naming the rule and the nearest real name; in observe a warning", async () => {
    const config = (mode: string) =>
      [
        `mode: ${mode}`,
        "egress:\n  allow_loopback: true",
        `upstreams:\n  - name: conf\n    url: ${inject("conformanceUrl")}`,
        "policy:\n  rules:",
        // A typo: no tool is called test_simple_textt.
        "    - id: no-text\n      match: { tool: test_simple_textt }\n      decision: deny\n      reason: typo",
        // The stable form, right: it matches.
        "    - id: no-image\n      match: { upstream: conf, tool: test_image_content }\n      decision: deny\n      reason: fine",
        // An upstream that does not exist, on an allow rule: reported, never a problem.
        "    - id: other\n      match: { upstream: nowhere }\n      decision: allow\n      reason: dead but harmless",
        "",
      ].join("\n");
    const enforce = join(dir, "doctor-dead-enforce.yaml");
    writeFileSync(enforce, config("enforce"));
    const r = await cli(["doctor", "--config", enforce, "--live"]);
    expect(r.code, r.stdout + r.stderr).toBe(1);
    expect(r.stdout).toContain("refused");
    expect(r.stdout).toMatch(
      /rule no-text \(deny\): match names "test_simple_textt", which matches no tool of the \d+ known — did you mean "test_simple_text"\?/,
    );
    expect(r.stdout).not.toContain("rule no-image");
    expect(r.stdout).toMatch(/warning: rule other \(allow\): match names "upstream nowhere"/);
    const j = JSON.parse((await cli(["doctor", "--config", enforce, "--live", "--json"])).stdout);
    expect(j.ok).toBe(false);
    expect(j.unmatched_rules.map((u: Any) => [u.rule, u.blocking, u.nearest])).toEqual([
      ["no-text", true, ["test_simple_text"]],
      ["other", false, []],
    ]);
    const observe = join(dir, "doctor-dead-observe.yaml");
    writeFileSync(observe, config("observe"));
    const o = await cli(["doctor", "--config", observe, "--live"]);
    expect(o.code, o.stdout).toBe(0);
    expect(o.stdout).toMatch(/warning: rule no-text \(deny\): .* did you mean "test_simple_text"\?/);

    // Gateway start: `dev` checks the same before it starts a gateway, and in enforce does not start one.
    const port = await freePort();
    const dev = await cli(["dev", "--config", enforce, "--port", String(port)]);
    expect(dev.code, dev.stdout + dev.stderr).toBe(1);
    expect(dev.stderr).toContain("portcullis dev: not started: in enforce, a rule matches no real tool");
    expect(dev.stderr).toMatch(/rule no-text \(deny\): match names "test_simple_textt", .* did you mean "test_simple_text"\?/);
    expect(dev.stderr).toMatch(/portcullis dev: warning: rule other \(allow\)/);
    expect(dev.stdout).not.toContain("gateway on");
    expect(listeningOn(port)).toEqual([]);
  });
});
