/**
 * What a gateway gives away to a client that names another gateway, names nothing, or never
 * finishes its request — end to end on the production build. Two gateways on two loopback ports
 * share one signing key (the attack of security issue item 3): a grant for one is never accepted
 * by the other, whatever Host the request names, and metadata names each one's own origin. With
 * `auth.required`, /readyz says only {ok} to anyone and its detail to operators; /summary needs a
 * grant and lists upstream tools at most once per cache window (a recording upstream counts);
 * /v1/* refuses without a grant; a body that does not arrive is answered 408. Owns the gateways
 * and the upstream it starts. Must never: leave them running, or reach beyond 127.0.0.1.
 */
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { raw } from "./raw.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let upstream: Upstream;
let a: Proc & { url: string };
let b: Proc & { url: string };
let originA = "";
let originB = "";
let jwk = "";

const config = (url: string) => `
actor: local:exposure
auth:
  required: true
egress:
  allow_loopback: true
upstreams:
  - name: m
    url: ${url}
    description: the recording upstream
    timeout: 10s
`;

const grant = async (origin: string, sub: string, roles: string[], tools: string[] = ["*"]) =>
  (
    await mintGrant(
      await parseKeySet(jwk),
      { iss: origin, aud: origin, sub, team: "e2e", roles: roles as never, tools, ttlSeconds: 600 },
      { maxLifetimeSeconds: 3600 },
    )
  ).token;

const ping = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "tools/list",
  params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
});
const mcpHeaders = {
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2026-07-28",
  "mcp-method": "tools/list",
};

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("exposure-key")).privateJwk);
  upstream = await startModernOnlyUpstream();
  const [pa, pb] = [await freePort(), await freePort()];
  [a, b] = await Promise.all([
    startPortcullis(config(upstream.url), pa, { PORTCULLIS_SIGNING_KEY: jwk }),
    startPortcullis(config(upstream.url), pb, { PORTCULLIS_SIGNING_KEY: jwk }),
  ]);
  originA = new URL(a.url).origin;
  originB = new URL(b.url).origin;
}, 180_000);
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await upstream?.close();
});

describe("a grant names one gateway", () => {
  it("a grant minted for gateway B is refused by gateway A, whatever Host the request names", async () => {
    const forB = await grant(originB, "agent:b", ["agent", "admin"]);
    const hostB = new URL(originB).host;
    // The forged Host: A is not B, and says so before looking at the token.
    const forged = await raw(a.url, "POST", { ...mcpHeaders, host: hostB, authorization: `Bearer ${forB}` }, ping);
    expect(forged.status).toBe(403);
    const mintViaA = await raw(
      `${originA}/v1/grants`,
      "POST",
      { "content-type": "application/json", host: hostB, authorization: `Bearer ${forB}` },
      JSON.stringify({ sub: "agent:x", roles: ["admin"] }),
    );
    expect(mintViaA.status).toBe(403);
    // Its own Host: the grant is for another gateway (401, naming how to mint for A).
    const plain = await raw(a.url, "POST", { ...mcpHeaders, host: new URL(originA).host, authorization: `Bearer ${forB}` }, ping);
    expect(plain.status).toBe(401);
    expect(JSON.parse(plain.body).error_description).toContain(`mint with: npx portcullis token mint --port ${new URL(originA).port}`);
    // B itself accepts it; A accepts its own grant under its loopback spellings.
    expect((await raw(b.url, "POST", { ...mcpHeaders, host: hostB, authorization: `Bearer ${forB}` }, ping)).status).toBe(200);
    const forA = await grant(originA, "agent:a", ["agent"]);
    expect((await raw(a.url, "POST", { ...mcpHeaders, host: `localhost:${new URL(originA).port}`, authorization: `Bearer ${forA}` }, ping)).status).toBe(200);
  });

  it("protected-resource metadata names the gateway's own origin, never a reflected Host", async () => {
    for (const path of ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"]) {
      expect((await raw(`${originA}${path}`, "GET", { host: "evil.example.com" })).status, path).toBe(403);
      expect((await raw(`${originA}${path}`, "GET", { host: new URL(originB).host })).status, path).toBe(403);
      const own = await raw(`${originA}${path}`, "GET", { host: `localhost:${new URL(originA).port}` });
      expect(own.status).toBe(200);
      const doc = JSON.parse(own.body) as { resource: string; authorization_servers?: string[] };
      expect(doc.resource).toBe(path.endsWith("/mcp") ? `${originA}/mcp` : originA);
      // auth.oauth is off: the gateway is no authorization server, so none is named.
      expect(doc.authorization_servers).toBeUndefined();
    }
    const challenge = await raw(a.url, "POST", { ...mcpHeaders, host: `localhost:${new URL(originA).port}` }, ping);
    expect(challenge.status).toBe(401);
    expect(String(challenge.headers["www-authenticate"])).toContain(`resource_metadata="${originA}/.well-known/oauth-protected-resource/mcp"`);
    // How to get a grant names the gateway's own URL, never the Host the request used.
    expect(JSON.parse(challenge.body).error_description).toContain(`portcullis token mint --gateway ${originA} --sub agent:<name>`);
  });
});

describe("unauthenticated routes say little", () => {
  it("/readyz answers only {ok} without a grant, refuses an agent grant, and gives operators the detail", async () => {
    const anon = await fetch(`${originA}/readyz`);
    expect(anon.status).toBe(200);
    expect(await anon.json()).toEqual({ ok: true });
    const agent = await fetch(`${originA}/readyz`, { headers: { authorization: `Bearer ${await grant(originA, "agent:r", ["agent"])}` } });
    expect(agent.status).toBe(403);
    const op = await fetch(`${originA}/readyz`, { headers: { authorization: `Bearer ${await grant(originA, "human:op", ["operator"])}` } });
    expect(op.status).toBe(200);
    const detail = await op.json();
    expect(detail).toMatchObject({ ok: true, status: "ready", upstreams: [{ name: "m", ok: true }] });
    expect(Object.keys(detail)).toEqual(["ok", "status", "upstreams"]);
    expect(typeof detail.upstreams[0].last_list_in_this_isolate).toBe("object");
  });

  it("/summary needs a grant, counts what that grant can see, and does not list upstream per hit", async () => {
    const anon = await fetch(`${originA}/summary`);
    expect(anon.status).toBe(401);
    const body = await anon.text();
    expect(body).not.toContain("recording upstream");
    const narrow = await grant(originA, "agent:narrow", ["agent"], ["bump"]);
    const wide = await grant(originA, "agent:wide", ["agent"], ["*"]);
    const listsBefore = upstream.log.filter((s) => s.method === "tools/list").length;
    const [n1, n2, w1] = await Promise.all(
      [narrow, narrow, wide].map(async (t) => (await fetch(`${originA}/summary`, { headers: { authorization: `Bearer ${t}` } })).json()),
    );
    const listsAfter = upstream.log.filter((s) => s.method === "tools/list").length;
    // A cold cache: each concurrent hit may list for itself (no request waits on another's
    // promise: Workers never settles it for it once that request ended), at most one each.
    expect(listsAfter - listsBefore).toBeGreaterThanOrEqual(1);
    expect(listsAfter - listsBefore).toBeLessThanOrEqual(3);
    // Then the settled listing serves every hit (the same credential scope, within the 2 s window): no listing per hit.
    const again = await Promise.all(
      [narrow, wide, narrow].map(async (t) => (await fetch(`${originA}/summary`, { headers: { authorization: `Bearer ${t}` } })).json()),
    );
    expect(upstream.log.filter((s) => s.method === "tools/list").length).toBe(listsAfter);
    expect(again[0]).toEqual(n1);
    expect(n1).toEqual(n2);
    const count = (s: { upstreams: { tools: number | null }[] }) => s.upstreams[0]!.tools;
    expect(count(n1)).toBe(1);
    expect(count(w1)).toBeGreaterThan(1);
  });

  it("/v1/* refuses without a grant", async () => {
    for (const [method, path, body] of [
      ["PUT", "/v1/credentials/m", JSON.stringify({ token: "x" })],
      ["DELETE", "/v1/credentials/m", undefined],
      ["POST", "/v1/grants", "{}"],
      ["POST", "/v1/grants/abcdefgh12/revoke", "{}"],
      ["GET", "/v1/ledger", undefined],
    ] as const) {
      const r = await fetch(`${originA}${path}`, { method, headers: body ? { "content-type": "application/json" } : {}, body });
      expect(r.status, `${method} ${path}`).toBe(401);
    }
  });
});

describe("a body that never arrives", () => {
  it("is answered 408 within the bound, and nothing reaches the upstream", async () => {
    const token = await grant(originA, "agent:slow", ["agent"]);
    const before = upstream.log.length;
    const u = new URL(a.url);
    const started = Date.now();
    const answer = await new Promise<string>((resolve, reject) => {
      const sock = connect(Number(u.port), "127.0.0.1");
      let got = "";
      const give = setTimeout(() => {
        sock.destroy();
        reject(new Error(`no answer in 60 s; got ${JSON.stringify(got.slice(0, 200))}`));
      }, 60_000);
      sock.on("connect", () => {
        // Declares 200 bytes, sends 10, then waits.
        sock.write(
          `POST /mcp HTTP/1.1\r\nHost: ${u.host}\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\nauthorization: Bearer ${token}\r\ncontent-length: 200\r\n\r\n{"jsonrpc"`,
        );
      });
      sock.on("data", (d) => {
        got += d.toString();
        if (/\r\n\r\n[\s\S]*\}/.test(got)) {
          clearTimeout(give);
          sock.destroy();
          resolve(got);
        }
      });
      sock.on("error", reject);
    });
    expect(answer.split("\r\n")[0]).toMatch(/^HTTP\/1\.1 408/);
    const took = Date.now() - started;
    expect(took).toBeGreaterThanOrEqual(29_000);
    expect(upstream.log.length).toBe(before);
  }, 90_000);
});
