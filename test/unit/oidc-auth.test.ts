/**
 * authenticate() with configs the shared Worker config does not cover: `auth.required: true`,
 * and external OIDC issuers (JWKS served through an injected fetch): claims mapping, a team
 * claim the gateway refuses (`_global`, not lowercase) signing nobody in, principal spaces.
 */
import { env } from "cloudflare:test";
import { SignJWT, exportJWK, generateKeyPair } from "jose";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load.ts";
import { authenticate } from "../../src/identity/auth.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";

const base = `
upstreams:
  - name: alpha
    url: http://127.0.0.1:9/mcp
`;
const req = (headers: Record<string, string> = {}) => new Request("http://127.0.0.1:8787/mcp", { method: "POST", headers });
const opts = { path: "/mcp", role: "agent" as const, allowActor: true };

describe("auth.required: true", () => {
  const cfg = loadConfig(`auth:\n  required: true\n${base}`, { PORTCULLIS_ORIGIN: "http://127.0.0.1:8787" });
  it("refuses the unauthenticated actor even on loopback", async () => {
    const r = await authenticate(req(), env, cfg, opts);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.response.status).toBe(401);
  });
  it("accepts a grant for this gateway, including its loopback spellings", async () => {
    const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
    for (const aud of ["http://127.0.0.1:8787", "http://localhost:8787", "http://127.0.0.1:8787/mcp"]) {
      const { token } = await mintGrant(
        keys,
        { iss: aud.replace(/\/mcp$/, ""), aud, sub: "agent:z", team: "t", roles: ["agent"], tools: ["*"], ttlSeconds: 60 },
        { maxLifetimeSeconds: 3600 },
      );
      const r = await authenticate(req({ authorization: `Bearer ${token}` }), env, cfg, opts);
      expect(r.ok, aud).toBe(true);
      if (r.ok) expect(r.principal).toMatchObject({ sub: "agent:z", team: "t", tools: ["*"], authenticated: true });
    }
  });
  it("refuses a grant for another port", async () => {
    const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
    const { token } = await mintGrant(
      keys,
      { iss: "http://127.0.0.1:9999", aud: "http://127.0.0.1:9999", sub: "agent:z", team: "t", roles: ["agent"], tools: ["*"], ttlSeconds: 60 },
      { maxLifetimeSeconds: 3600 },
    );
    const r = await authenticate(req({ authorization: `Bearer ${token}` }), env, cfg, opts);
    expect(r.ok).toBe(false);
  });
});

describe("external OIDC issuers", async () => {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true });
  const jwk = { ...(await exportJWK(publicKey)), kid: "idp-1", alg: "RS256", use: "sig" };
  const cfg = loadConfig(
    `auth:
  required: true
  external_issuers:
    - issuer: https://idp.example.com
      jwks_url: https://idp.example.com/.well-known/jwks.json
      audience: portcullis
      roles_claim: groups
      team_claim: org
      tools_claim: mcp_tools
${base}`,
    { PORTCULLIS_ORIGIN: "http://127.0.0.1:8787" },
  );
  let fetched = 0;
  const fetcher = async (url: string) => {
    fetched++;
    expect(url).toBe("https://idp.example.com/.well-known/jwks.json");
    return new Response(JSON.stringify({ keys: [jwk] }), { headers: { "content-type": "application/json" } });
  };
  const idToken = (claims: Record<string, unknown>, over: { iss?: string; aud?: string; exp?: string } = {}) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: "RS256", kid: "idp-1" })
      .setIssuer(over.iss ?? "https://idp.example.com")
      .setAudience(over.aud ?? "portcullis")
      .setSubject("u-42")
      .setIssuedAt()
      .setExpirationTime(over.exp ?? "10m")
      .sign(privateKey);

  it("maps sub, roles, team and tools from the configured claims", async () => {
    const t = await idToken({ groups: ["agent", "auditor", "wizard"], org: "acme", mcp_tools: "alpha__* beta__x" });
    const r = await authenticate(req({ authorization: `Bearer ${t}` }), env, cfg, { ...opts, fetcher });
    expect(r.ok).toBe(true);
    if (r.ok)
      expect(r.principal).toEqual({
        sub: "oidc:idp.example.com:u-42",
        team: "acme",
        roles: ["agent", "auditor"],
        tools: ["alpha__*", "beta__x"],
        authenticated: true,
        exp: expect.any(Number),
      });
    expect(fetched).toBe(1);
  });
  it("a team claim the gateway reserves or does not accept signs nobody in (401); the sub keeps its case", async () => {
    for (const org of ["_global", "_anything", "Acme", "acme~1", "chain:acme"]) {
      const r = await authenticate(req({ authorization: `Bearer ${await idToken({ org })}` }), env, cfg, { ...opts, fetcher });
      expect(r.ok, org).toBe(false);
      if (!r.ok) {
        expect(r.response.status, org).toBe(401);
        expect(r.response.headers.get("www-authenticate"), org).toMatch(/its org claim: /);
      }
    }
    const withSub = (sub: string) =>
      new SignJWT({ org: "acme" })
        .setProtectedHeader({ alg: "RS256", kid: "idp-1" })
        .setIssuer("https://idp.example.com")
        .setAudience("portcullis")
        .setSubject(sub)
        .setIssuedAt()
        .setExpirationTime("10m")
        .sign(privateKey);
    // OIDC subs are case-sensitive: two subs differing in case are two people of the issuer, kept apart.
    const upper = await authenticate(req({ authorization: `Bearer ${await withSub("U-42")}` }), env, cfg, { ...opts, fetcher });
    expect(upper.ok && upper.principal.sub).toBe("oidc:idp.example.com:U-42");
    const hidden = await authenticate(req({ authorization: `Bearer ${await withSub("u-42\u200b")}` }), env, cfg, { ...opts, fetcher });
    expect(hidden.ok).toBe(false);
    if (!hidden.ok) expect(hidden.response.status).toBe(401);
  });

  it("refuses a wrong audience, an expired token and an unconfigured issuer", async () => {
    for (const t of [
      await idToken({}, { aud: "someone-else" }),
      await idToken({}, { exp: "-10m" }),
      await idToken({}, { iss: "https://other-idp.example.com" }),
    ]) {
      const r = await authenticate(req({ authorization: `Bearer ${t}` }), env, cfg, { ...opts, fetcher });
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.response.status).toBe(401);
    }
  });
});

describe("two identity providers, one sub", async () => {
  const keyA = await generateKeyPair("RS256", { extractable: true });
  const keyB = await generateKeyPair("RS256", { extractable: true });
  const jwks: Record<string, unknown> = {
    "https://idp-a.example.com/jwks": { keys: [{ ...(await exportJWK(keyA.publicKey)), kid: "a", alg: "RS256" }] },
    "https://idp-b.example.com/realms/x/jwks": { keys: [{ ...(await exportJWK(keyB.publicKey)), kid: "b", alg: "RS256" }] },
  };
  const fetcher = async (url: string) => new Response(JSON.stringify(jwks[url] ?? { keys: [] }), { headers: { "content-type": "application/json" } });
  const issuers = (extraA = "", extraB = "") => `auth:
  required: true
  external_issuers:
    - issuer: https://idp-a.example.com
      jwks_url: https://idp-a.example.com/jwks
      audience: portcullis${extraA}
    - issuer: https://idp-b.example.com/realms/x
      jwks_url: https://idp-b.example.com/realms/x/jwks
      audience: portcullis${extraB}
${base}`;
  const token = (key: CryptoKey, kid: string, iss: string) =>
    new SignJWT({})
      .setProtectedHeader({ alg: "RS256", kid })
      .setIssuer(iss)
      .setAudience("portcullis")
      .setSubject("alice")
      .setIssuedAt()
      .setExpirationTime("10m")
      .sign(key);

  it("gives each issuer's alice a principal of her own by default", async () => {
    const cfg = loadConfig(issuers(), { PORTCULLIS_ORIGIN: "http://127.0.0.1:8787" });
    const a = await authenticate(req({ authorization: `Bearer ${await token(keyA.privateKey, "a", "https://idp-a.example.com")}` }), env, cfg, {
      ...opts,
      fetcher,
    });
    const b = await authenticate(req({ authorization: `Bearer ${await token(keyB.privateKey, "b", "https://idp-b.example.com/realms/x")}` }), env, cfg, {
      ...opts,
      fetcher,
    });
    expect(a.ok && b.ok).toBe(true);
    if (!a.ok || !b.ok) return;
    expect(a.principal.sub).toBe("oidc:idp-a.example.com:alice");
    expect(b.principal.sub).toBe("oidc:idp-b.example.com/realms/x:alice");
    // Another principal's session is "not found": the SessionDO ownership rule on distinct subs.
    const id = "9".repeat(48);
    const store = env.SESSIONS.get(env.SESSIONS.idFromName(`session:${id}`)) as unknown as import("../../durable-objects/contract.ts").SessionApi;
    const now = Date.now();
    expect(
      await store.create({
        v: 1,
        id,
        principal: a.principal.sub,
        protocolVersion: "2025-11-25",
        clientCapabilities: {},
        upstreams: {},
        createdAt: now,
        touchedAt: now,
        ttlS: 600,
      }),
    ).toBe(true);
    expect(await store.open(b.principal.sub)).toBeNull();
    expect(await store.end(b.principal.sub)).toBeNull();
    expect((await store.open(a.principal.sub))?.id).toBe(id);
  });

  it("refuses at load a config in which two issuers share a principal space", () => {
    const same = () => loadConfig(issuers('\n      sub_prefix: "sso:"', '\n      sub_prefix: "sso:"'), {});
    expect(same).toThrow(/map into the same principal space/);
    const nested = () => loadConfig(issuers('\n      sub_prefix: "sso:"', '\n      sub_prefix: "sso:eu:"'), {});
    expect(nested).toThrow(/map into the same principal space/);
    expect(() => loadConfig(issuers('\n      sub_prefix: "a:"', '\n      sub_prefix: "b:"'), {})).not.toThrow();
    expect(() => loadConfig(issuers('\n      sub_prefix: ""'), {})).toThrow();
  });
});
