/**
 * Identity at the Worker's edge (workerd): grants, roles, 401/403 challenges, revocation, the
 * grants API, the operator endpoint, protected resource metadata and JWKS, the loopback peer
 * rule of the unauthenticated mode, and readable refusals of grants minted for another gateway.
 */
import { env, SELF } from "cloudflare:test";
import fc from "fast-check";
import { SignJWT, exportJWK, generateKeyPair } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { GRANT_TYP, mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet, type KeySet } from "../../src/identity/keys.ts";
import { authenticate, isLoopbackRequest } from "../../src/identity/auth.ts";
import { loadConfig } from "../../src/config/load.ts";
import { isLoopbackAddress } from "../../src/wire/hosts.ts";

const GW = "http://127.0.0.1";
let keys: KeySet;
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
});

async function grant(over: { sub?: string; roles?: string[]; tools?: string[]; ttl?: number; aud?: string; iss?: string } = {}) {
  return mintGrant(
    keys,
    {
      iss: over.iss ?? GW,
      aud: over.aud ?? GW,
      sub: over.sub ?? "agent:a",
      team: "t1",
      roles: (over.roles ?? ["agent"]) as never,
      tools: over.tools ?? ["alpha__*"],
      ttlSeconds: over.ttl ?? 600,
    },
    { maxLifetimeSeconds: 86400 },
  );
}

const MCP_H = { "content-type": "application/json", accept: "application/json, text/event-stream" };
const rpc = (method: string, params: object = {}) => JSON.stringify({ jsonrpc: "2.0", id: 1, method, params });

function op(token: string | null, body: string, path = "/operator/mcp") {
  return SELF.fetch(`${GW}${path}`, { method: "POST", headers: { ...MCP_H, ...(token ? { authorization: `Bearer ${token}` } : {}) }, body });
}

function challenge(r: Response) {
  return r.headers.get("www-authenticate") ?? "";
}

describe("401 and 403 challenges", () => {
  it("asks for a token with resource_metadata and scope, and the metadata is found from it (RFC 9728)", async () => {
    const r = await op(null, rpc("tools/list"));
    expect(r.status).toBe(401);
    const c = challenge(r);
    expect(c).toMatch(/^Bearer /);
    expect(c).toMatch(/scope="agent"/);
    const url = /resource_metadata="([^"]+)"/.exec(c)![1]!;
    expect(url).toBe(`${GW}/.well-known/oauth-protected-resource/operator/mcp`);
    const meta = (await (await SELF.fetch(url)).json()) as { resource: string; authorization_servers?: string[] };
    expect(meta.resource).toBe(`${GW}/operator/mcp`);
    // auth.oauth is off in the unit config: no authorization server of the gateway's (metadata.test.ts).
    expect(meta.authorization_servers).toBeUndefined();
    const mcpMeta = (await (await SELF.fetch(`${GW}/.well-known/oauth-protected-resource/mcp`)).json()) as { resource: string };
    expect(mcpMeta.resource).toBe(`${GW}/mcp`);
  });

  it("refuses an agent grant on /operator/mcp with 403 insufficient_scope", async () => {
    const r = await op((await grant()).token, rpc("tools/list"));
    expect(r.status).toBe(403);
    expect(challenge(r)).toMatch(/error="insufficient_scope"/);
    expect(challenge(r)).toMatch(/resource_metadata=/);
  });

  it("answers a bad grant with 401 invalid_token, whatever is wrong with it", async () => {
    const good = await grant();
    const { privateKey: rsa } = await generateKeyPair("RS256");
    const { privateKey: ec } = await generateKeyPair("ES256");
    const { privateKey: other, publicKey: otherPub } = await generateKeyPair("EdDSA", { extractable: true });
    const pubJson = JSON.stringify((await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string)).publicKeys[0]);
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: GW,
      aud: GW,
      sub: "agent:x",
      team: "t",
      roles: ["agent"],
      tools: ["*"],
      jti: "jti-0123456789abcdef",
      iat: now,
      nbf: now,
      exp: now + 600,
    };
    const kid = "unit-key-1";
    const sign = (alg: string, key: CryptoKey | Uint8Array, header: Record<string, unknown> = {}) =>
      new SignJWT(claims).setProtectedHeader({ alg, typ: GRANT_TYP, kid, ...header }).sign(key);
    const realSign = (over: Record<string, unknown>, header: Record<string, unknown> = {}) => {
      const h: Record<string, unknown> = { alg: "EdDSA", typ: GRANT_TYP, kid, ...header };
      for (const k of Object.keys(h)) if (h[k] === undefined) delete h[k];
      return new SignJWT({ ...claims, ...over }).setProtectedHeader(h as never).sign(keys.active!.key);
    };
    const b64 = (o: object) => btoa(JSON.stringify(o)).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
    const jwkOther = await exportJWK(otherPub);
    const cases: Record<string, string> = {
      "alg none": `${b64({ alg: "none", typ: GRANT_TYP, kid })}.${b64(claims)}.`,
      "HS256 with the public key as secret": await sign("HS256", new TextEncoder().encode(pubJson)),
      RS256: await sign("RS256", rsa),
      ES256: await sign("ES256", ec),
      "EdDSA by another key, same kid": await sign("EdDSA", other),
      "embedded jwk header": await sign("EdDSA", other, { jwk: { kty: jwkOther.kty, crv: jwkOther.crv, x: jwkOther.x } }),
      "jku header": await sign("EdDSA", other, { jku: "https://evil.example.com/jwks" }),
      "unknown kid": await sign("EdDSA", other, { kid: "nope" }),
      "wrong typ": await sign("EdDSA", other, { typ: "JWT" }),
      "wrong audience": (await grant({ aud: "https://elsewhere.example.com" })).token,
      "wrong issuer": (await grant({ iss: "https://evil.example.com" })).token,
      "expired (beyond skew), real key": await realSign({ iat: now - 900, nbf: now - 900, exp: now - 120 }),
      "nbf in the future, real key": await realSign({ nbf: now + 600, exp: now + 900 }),
      "lifetime above the maximum, real key": await realSign({ exp: now + 2 * 86400 }),
      "missing typ, real key": await realSign({}, { typ: undefined }),
      "x5u header, real key": await realSign({}, { x5u: "https://evil.example.com/cert" }),
      "revoked-looking garbage jti, real key, wrong iss": await realSign({ iss: "https://evil.example.com" }),
      truncated: good.token.slice(0, -10),
      malformed: "abc.def",
      oversized: `${good.token}${"A".repeat(9000)}`,
    };
    for (const [name, token] of Object.entries(cases)) {
      const r = await SELF.fetch(`${GW}/mcp`, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${token}` }, body: rpc("ping") });
      expect(r.status, name).toBe(401);
      expect(challenge(r), name).toMatch(/error="invalid_token"/);
      expect(challenge(r), name).not.toContain(token.slice(0, 20));
    }
  });

  it("never answers 5xx to mangled tokens", async () => {
    const { token } = await grant();
    await fc.assert(
      fc.asyncProperty(fc.nat(token.length - 1), fc.string({ maxLength: 4 }), fc.nat(3), async (at, insert, del) => {
        const t = token.slice(0, at) + insert + token.slice(at + del);
        const r = await SELF.fetch(`${GW}/operator/mcp`, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${t}` }, body: rpc("ping") });
        expect(r.status).toBeLessThan(500);
        if (t !== token) expect([401, 403]).toContain(r.status);
      }),
      { numRuns: 60 },
    );
  });
});

describe("roles and the operator endpoint", () => {
  it("lists portcullis.* tools by role; auditors see the ledger tools, an admin also revoke_grant", async () => {
    const names = async (roles: string[]) => {
      const r = await op((await grant({ roles })).token, rpc("tools/list"));
      expect(r.status).toBe(200);
      return ((await r.json()) as { result: { tools: { name: string }[] } }).result.tools.map((t) => t.name);
    };
    // Holds (operator-hold-tools.ts), the kill switch (operator-killswitch-tools.ts) and runs (operator-runs-tools.ts) register theirs by role too.
    expect(await names(["operator"])).toEqual([
      "portcullis.classify",
      "portcullis.dry_run_rollback",
      "portcullis.execute_rollback",
      "portcullis.get_action_trace",
      "portcullis.get_hold",
      "portcullis.get_run",
      "portcullis.list_holds",
      "portcullis.list_runs",
      "portcullis.plan_rollback",
      "portcullis.preview_impact",
      "portcullis.status",
      "portcullis.upstreams",
      "portcullis.validate_mapping",
      "portcullis.whoami",
    ]);
    expect(await names(["approver"])).toEqual([
      "portcullis.dry_run_rollback",
      "portcullis.get_action_trace",
      "portcullis.get_hold",
      "portcullis.get_run",
      "portcullis.list_holds",
      "portcullis.list_runs",
      "portcullis.plan_rollback",
      "portcullis.preview_impact",
      "portcullis.resolve_hold",
      "portcullis.status",
      "portcullis.whoami",
    ]);
    expect(await names(["auditor"])).toEqual([
      "portcullis.classify",
      "portcullis.dry_run_rollback",
      "portcullis.get_action_trace",
      "portcullis.get_hold",
      "portcullis.get_run",
      "portcullis.ledger_search",
      "portcullis.ledger_trace",
      "portcullis.list_holds",
      "portcullis.list_runs",
      "portcullis.plan_rollback",
      "portcullis.status",
      "portcullis.upstreams",
      "portcullis.whoami",
    ]);
    expect(await names(["admin"])).toEqual([
      "portcullis.classify",
      "portcullis.dry_run_rollback",
      "portcullis.execute_rollback",
      "portcullis.get_action_trace",
      "portcullis.get_hold",
      "portcullis.get_run",
      "portcullis.halt",
      "portcullis.ledger_search",
      "portcullis.ledger_trace",
      "portcullis.list_holds",
      "portcullis.list_runs",
      "portcullis.plan_rollback",
      "portcullis.preview_impact",
      "portcullis.reload",
      "portcullis.resolve_hold",
      "portcullis.resume",
      "portcullis.revoke_grant",
      "portcullis.status",
      "portcullis.upstreams",
      "portcullis.validate_mapping",
      "portcullis.whoami",
    ]);
    const who = await op((await grant({ roles: ["auditor"], sub: "human:leo" })).token, rpc("tools/call", { name: "portcullis.whoami", arguments: {} }));
    expect(((await who.json()) as { result: { structuredContent: { sub: string } } }).result.structuredContent.sub).toBe("human:leo");
    const hidden = await op(
      (await grant({ roles: ["operator"] })).token,
      rpc("tools/call", { name: "portcullis.revoke_grant", arguments: { jti: "abcdefgh" } }),
    );
    expect(((await hidden.json()) as { error: { code: number } }).error.code).toBe(-32602);
  });

  it("answers an operator tool called on /mcp as an unknown tool", async () => {
    const r = await SELF.fetch(`${GW}/mcp`, {
      method: "POST",
      headers: { ...MCP_H, authorization: `Bearer ${(await grant({ roles: ["admin"], tools: ["*"] })).token}` },
      body: rpc("initialize", { protocolVersion: "2025-11-25", capabilities: {} }),
    });
    const sid = r.headers.get("mcp-session-id")!;
    await r.text();
    const call = await SELF.fetch(`${GW}/mcp`, {
      method: "POST",
      headers: { ...MCP_H, "mcp-session-id": sid, authorization: `Bearer ${(await grant({ roles: ["admin"], tools: ["*"] })).token}` },
      body: rpc("tools/call", { name: "portcullis.whoami", arguments: {} }),
    });
    expect(((await call.json()) as { error: { code: number; message: string } }).error).toMatchObject({
      code: -32602,
      message: "Unknown tool: portcullis.whoami",
    });
  });
});

describe("revocation and the grants API", () => {
  it("mints through POST /v1/grants for admins only, and a revoked grant stops working at once", async () => {
    const admin = (await grant({ roles: ["admin"], sub: "human:root" })).token;
    const agent = (await grant()).token;
    const refused = await SELF.fetch(`${GW}/v1/grants`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${agent}` },
      body: JSON.stringify({ sub: "agent:new" }),
    });
    expect(refused.status).toBe(403);
    const mint = await SELF.fetch(`${GW}/v1/grants`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
      body: JSON.stringify({ sub: "human:ops", roles: ["operator"], ttl_seconds: 300 }),
    });
    expect(mint.status).toBe(201);
    const minted = (await mint.json()) as { token: string; jti: string; exp: number };
    expect((await op(minted.token, rpc("tools/list"))).status).toBe(200);
    const tooLong = await SELF.fetch(`${GW}/v1/grants`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
      body: JSON.stringify({ sub: "x", ttl_seconds: 90000 }),
    });
    expect(tooLong.status).toBe(400);
    const revoke = await SELF.fetch(`${GW}/v1/grants/${minted.jti}/revoke`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
      body: JSON.stringify({ exp: minted.exp }),
    });
    expect(revoke.status).toBe(200);
    const after = await op(minted.token, rpc("tools/list"));
    expect(after.status).toBe(401);
    expect(challenge(after)).toMatch(/revoked/);
  });

  it("publishes only public keys", async () => {
    const jwks = (await (await SELF.fetch(`${GW}/.well-known/jwks.json`)).json()) as { keys: Record<string, unknown>[] };
    expect(jwks.keys).toHaveLength(1);
    expect(jwks.keys[0]).toMatchObject({ kty: "OKP", crv: "Ed25519", kid: "unit-key-1", alg: "EdDSA" });
    expect(jwks.keys[0]!.d).toBeUndefined();
  });
});

describe("unauthenticated mode", () => {
  it("exists only on loopback: a configured public host without auth.required is refused", async () => {
    const r = await SELF.fetch("http://gw.example.com/mcp", { method: "POST", headers: MCP_H, body: rpc("ping") });
    expect(r.status).toBe(503);
    expect(await r.text()).toMatch(/loopback/);
  });
  it("never serves /operator/mcp or the grants API without a token, even on loopback", async () => {
    expect((await op(null, rpc("tools/list"))).status).toBe(401);
    expect((await SELF.fetch(`${GW}/v1/grants`, { method: "POST", body: "{}" })).status).toBe(401);
  });
});

describe("the loopback peer rule", () => {
  const cfgOf = (required: boolean) =>
    loadConfig(
      `
actor: local:unit
auth: { required: ${required} }
upstreams:
  - name: alpha
    url: https://alpha.example.com/mcp
`,
      // What \`portcullis dev --port 8787\` hands the gateway.
      { PORTCULLIS_ORIGIN: "http://127.0.0.1:8787" },
    );
  const at = (url: string, peer?: string, token?: string) =>
    new Request(url, {
      method: "POST",
      headers: { ...MCP_H, ...(peer === undefined ? {} : { "cf-connecting-ip": peer }), ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: rpc("ping"),
    });
  const auth = (req: Request, required = false) => authenticate(req, env, cfgOf(required), { path: "/mcp", role: "agent", allowActor: true });

  it("classifies peer addresses: 127.0.0.0/8, ::1 and ::ffff:127.x are loopback; nothing else is", () => {
    for (const a of ["127.0.0.1", "127.9.8.7", "127.255.255.254", "::1", "[::1]", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "::ffff:7f00:2", " 127.0.0.1 "])
      expect(isLoopbackAddress(a), a).toBe(true);
    for (const a of [
      "192.0.2.2",
      "203.0.113.5",
      "10.0.0.1",
      "0.0.0.0",
      "128.0.0.1",
      "fd00::2",
      "fe80::1",
      "::",
      "::2",
      "::127.0.0.1",
      "::ffff:10.0.0.1",
      "64:ff9b::127.0.0.1",
      "",
      "localhost",
      "127.1",
      "0x7f.0.0.1",
      "127.0.0.1:8787",
      "127.0.0.1, 203.0.113.5",
      "::1%lo",
      "garbage",
    ])
      expect(isLoopbackAddress(a), a).toBe(false);
  });

  it("runs the actor on a loopback Host when the peer is loopback or not reported", async () => {
    for (const peer of [undefined, "127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"]) {
      const r = await auth(at("http://127.0.0.1:8787/mcp", peer));
      expect(r.ok, String(peer)).toBe(true);
      if (r.ok) expect(r.principal).toMatchObject({ sub: "local:unit", authenticated: false, tools: null });
      expect(isLoopbackRequest(at("http://localhost:8787/mcp", peer)), String(peer)).toBe(true);
    }
  });

  it("refuses a forged loopback Host from a non-loopback peer: 503 with the reason, or 401 when auth.required", async () => {
    for (const peer of ["192.0.2.2", "203.0.113.5", "fd00::2", "::ffff:10.0.0.1", "", "127.0.0.1, 203.0.113.5"]) {
      const req = at("http://127.0.0.1:8787/mcp", peer);
      expect(isLoopbackRequest(req), peer).toBe(false);
      const r = await auth(req);
      expect(r.ok, peer).toBe(false);
      if (r.ok) continue;
      expect(r.response.status, peer).toBe(503);
      const body = (await r.response.json()) as { error: string; error_description: string };
      expect(body.error).toBe("temporarily_unavailable");
      expect(body.error_description).toContain("auth.required is false, which is only allowed while the gateway listens on loopback");
      expect(body.error_description).toContain(`this request came from ${JSON.stringify(peer)} (CF-Connecting-IP), not a loopback address`);
      const strict = await auth(at("http://127.0.0.1:8787/mcp", peer), true);
      expect(strict.ok).toBe(false);
      if (!strict.ok) expect(strict.response.status, peer).toBe(401);
    }
    // Off loopback by Host, the reason stays the one it always was.
    const host = await auth(at("http://gw.example.com/mcp", "203.0.113.5"));
    expect(host.ok).toBe(false);
    if (!host.ok)
      expect(((await host.response.json()) as { error_description: string }).error_description).toBe(
        "refusing to serve: auth.required is false, which is only allowed while the gateway listens on loopback",
      );
  });

  it("a grant still works from a non-loopback peer (auth.required)", async () => {
    const { token } = await grant({ iss: "http://127.0.0.1:8787", aud: "http://127.0.0.1:8787" });
    const r = await auth(at("http://127.0.0.1:8787/mcp", "203.0.113.5", token), true);
    expect(r.ok).toBe(true);
    if (r.ok) expect(r.principal).toMatchObject({ sub: "agent:a", authenticated: true });
  });

  it("through the Worker: the same unauthenticated initialize is served on a loopback peer and refused from another", async () => {
    const init = (peer?: string) =>
      SELF.fetch(`${GW}/mcp`, {
        method: "POST",
        headers: { ...MCP_H, ...(peer ? { "cf-connecting-ip": peer } : {}) },
        body: rpc("initialize", { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "unit", version: "1" } }),
      });
    for (const peer of [undefined, "127.0.0.1"]) {
      const r = await init(peer);
      expect(r.status, String(peer)).toBe(200);
      expect(r.headers.get("mcp-session-id"), String(peer)).toBeTruthy();
      await r.text();
    }
    const refused = await init("192.0.2.2");
    expect(refused.status).toBe(503);
    expect(await refused.text()).toMatch(/loopback/);
  });
});

describe("grants minted for another gateway", () => {
  const call = (url: string, token: string) => SELF.fetch(url, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${token}` }, body: rpc("ping") });
  /** A gateway `portcullis dev --port 9000` started: its origin is http://127.0.0.1:9000, whatever a request's Host says. */
  const at9000 = loadConfig("auth: { required: true }\nupstreams:\n  - name: alpha\n    url: https://alpha.example.com/mcp\n", {
    PORTCULLIS_ORIGIN: "http://127.0.0.1:9000",
  });
  const authAt9000 = async (url: string, token: string): Promise<Response> => {
    const r = await authenticate(new Request(url, { method: "POST", headers: { ...MCP_H, authorization: `Bearer ${token}` } }), env, at9000, {
      path: "/mcp",
      role: "agent",
      allowActor: true,
    });
    return r.ok ? new Response(null, { status: 200 }) : r.response;
  };

  it("a grant for the gateway on another port is refused, whatever Host the request names", async () => {
    // The attack: a grant minted for :8854, sent to the gateway on :9000 with `Host: 127.0.0.1:8854`.
    const { token } = await grant({ iss: "http://127.0.0.1:8854", aud: "http://127.0.0.1:8854" });
    expect((await authAt9000("http://127.0.0.1:8854/mcp", token)).status).toBe(401);
    expect((await authAt9000("http://127.0.0.1:9000/mcp", token)).status).toBe(401);
    // Through the Worker (started on http://127.0.0.1): a Host naming another port is not this gateway.
    expect((await call("http://127.0.0.1:8854/mcp", token)).status).toBe(403);
    const own = await grant({ iss: "http://127.0.0.1:9000", aud: "http://127.0.0.1:9000" });
    expect((await authAt9000("http://localhost:9000/mcp", own.token)).status).toBe(200);
    expect((await authAt9000("http://127.0.0.1:8854/mcp", own.token)).status).toBe(200);
  });

  it("names the token's issuer, the expected one, and how to mint for this gateway", async () => {
    const { token } = await grant({ iss: "http://127.0.0.1:8787", aud: "http://127.0.0.1:8787" });
    const r = await authAt9000("http://127.0.0.1:9000/mcp", token);
    expect(r.status).toBe(401);
    const body = (await r.json()) as { error: string; error_description: string };
    const expected = `token iss "http://127.0.0.1:8787" is not this gateway's issuer (expected "http://127.0.0.1:9000"); mint with: npx portcullis token mint --port 9000 (or --gateway http://127.0.0.1:9000)`;
    expect(body).toEqual({ error: "invalid_token", error_description: expected });
    expect(challenge(r)).toContain(`error="invalid_token", error_description="${expected.replaceAll('"', "'")}"`);
    for (const seg of token.split(".")) {
      expect(challenge(r)).not.toContain(seg.slice(0, 20));
      expect(body.error_description).not.toContain(seg.slice(0, 20));
    }
  });

  it("names a wrong audience the same way", async () => {
    const { token } = await grant({ iss: "http://127.0.0.1:9000", aud: "http://127.0.0.1:8787" });
    const r = await authAt9000("http://127.0.0.1:9000/mcp", token);
    expect(r.status).toBe(401);
    expect(((await r.json()) as { error_description: string }).error_description).toBe(
      `token aud "http://127.0.0.1:8787" is not this gateway's audience (expected "http://127.0.0.1:9000"); mint with: npx portcullis token mint --port 9000 (or --gateway http://127.0.0.1:9000)`,
    );
    expect(challenge(r)).toMatch(/error_description="token aud 'http:\/\/127\.0\.0\.1:8787' is not this gateway's audience/);
  });

  it("suggests --gateway where no port names the gateway, and keeps the challenge printable ASCII", async () => {
    const { token } = await grant({ iss: "https://gw.example.com", aud: "https://gw.example.com" });
    const r = await call(`${GW}/mcp`, token);
    expect(((await r.json()) as { error_description: string }).error_description).toBe(
      `token iss "https://gw.example.com" is not this gateway's issuer (expected "http://127.0.0.1"); mint with: npx portcullis token mint --gateway http://127.0.0.1`,
    );
    const odd = await grant({ iss: 'https://gw\u00e9.example/"x"\\y', aud: GW });
    const o = await call(`${GW}/mcp`, odd.token);
    expect(o.status).toBe(401);
    expect(challenge(o)).toMatch(/^[\x20-\x7e]+$/);
    expect(((await o.json()) as { error_description: string }).error_description).toMatch(
      /^token iss "https:\/\/gw\?\.example\/\?x\?\?y" is not this gateway's issuer/,
    );
  });
});
