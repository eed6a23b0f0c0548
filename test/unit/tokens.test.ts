// Grant tokens: mint/verify round trip, key rotation, the public JWKS, and the RFC 8725 negative
// matrix (RFC 8725 §3, JWT best current practices). Forged tokens are signed with the gateway's real key wherever the
// property under test is not the signature, so each rejection is caused by that property alone.
import { base64url, exportJWK, generateKeyPair, SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { GRANT_TYP, MAX_TOKEN_BYTES, mintGrant, verifyGrant, type VerifyOptions, type VerifyResult } from "../../src/identity/tokens.ts";
import { KeySetError, generateSigningKey, parseKeySet, publicJwks, type KeySet } from "../../src/identity/keys.ts";
import { hasRole } from "../../src/config/roles.ts";

const ISS = "https://gw.example.com";
const AUD = "https://gw.example.com/mcp";
const NOW = 1_800_000_000;
const MAX = 900;
const KID = "k1";

const enc = (v: unknown): string => base64url.encode(typeof v === "string" ? v : JSON.stringify(v));
const baseHeader = () => ({ alg: "EdDSA", typ: GRANT_TYP, kid: KID });
const basePayload = (): Record<string, unknown> => ({
  iss: ISS,
  aud: AUD,
  sub: "agent:triage-bot",
  team: "core",
  roles: ["agent"],
  tools: ["github__*"],
  iat: NOW - 10,
  nbf: NOW - 10,
  exp: NOW + 290,
  jti: "AAAAAAAAAAAAAAAAAAAAAA",
});

let k1: Awaited<ReturnType<typeof generateSigningKey>>;
let keys: KeySet;

/** Signs header.payload with the gateway's real Ed25519 key, whatever the header says. */
async function forge(header: unknown, payload: unknown): Promise<string> {
  const input = `${enc(header)}.${enc(payload)}`;
  const sig = await crypto.subtle.sign("Ed25519", keys.active!.key, new TextEncoder().encode(input));
  return `${input}.${base64url.encode(new Uint8Array(sig))}`;
}

async function hmac(secret: Uint8Array, header: unknown, payload: unknown): Promise<string> {
  const key = await crypto.subtle.importKey("raw", secret, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const input = `${enc(header)}.${enc(payload)}`;
  const sig = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(input));
  return `${input}.${base64url.encode(new Uint8Array(sig))}`;
}

const opts = (extra: Partial<VerifyOptions> = {}): VerifyOptions => ({ issuer: ISS, audience: AUD, maxLifetimeSeconds: MAX, now: NOW, ...extra });
const check = (token: string, extra: Partial<VerifyOptions> = {}, set: KeySet = keys) => verifyGrant(token, set, opts(extra));

function expectRejected(r: VerifyResult, token: string, reason?: RegExp, maxLength = 80): void {
  expect(r.ok).toBe(false);
  if (r.ok) return;
  expect(r.error).toBe("invalid_token");
  expect(r.reason.length).toBeLessThanOrEqual(maxLength);
  if (token.length > 8) expect(r.reason).not.toContain(token);
  for (const seg of token.split(".")) if (seg.length > 8) expect(r.reason).not.toContain(seg);
  if (reason) expect(r.reason).toMatch(reason);
}

beforeAll(async () => {
  k1 = await generateSigningKey(KID);
  keys = await parseKeySet(JSON.stringify(k1.privateJwk));
});

describe("mint and verify", () => {
  it("round-trips every claim", async () => {
    const m = await mintGrant(
      keys,
      {
        iss: ISS,
        aud: AUD,
        sub: "human:leo",
        team: "core",
        roles: ["approver", "auditor"],
        tools: ["a__*", "b__read"],
        budget: { calls: 5 },
        ttlSeconds: 600,
      },
      { maxLifetimeSeconds: MAX, now: NOW },
    );
    expect(m.exp).toBe(NOW + 600);
    expect(base64url.decode(m.jti).length).toBeGreaterThanOrEqual(16);
    const [h, p] = m.token.split(".");
    expect(JSON.parse(new TextDecoder().decode(base64url.decode(h!)))).toEqual({ alg: "EdDSA", typ: "portcullis-grant+jwt", kid: KID });
    expect(JSON.parse(new TextDecoder().decode(base64url.decode(p!)))).toEqual({
      iss: ISS,
      aud: AUD,
      sub: "human:leo",
      team: "core",
      roles: ["approver", "auditor"],
      tools: ["a__*", "b__read"],
      budget: { calls: 5 },
      iat: NOW,
      nbf: NOW,
      exp: NOW + 600,
      jti: m.jti,
    });
    const r = await check(m.token, { now: NOW + 100 });
    expect(r).toEqual({
      ok: true,
      grant: {
        sub: "human:leo",
        team: "core",
        roles: ["approver", "auditor"],
        tools: ["a__*", "b__read"],
        budget: { calls: 5 },
        jti: m.jti,
        exp: NOW + 600,
        iat: NOW,
        iss: ISS,
        aud: AUD,
      },
    });
  });

  it("uses a fresh random jti per token", async () => {
    const c = { iss: ISS, aud: AUD, sub: "agent:x", team: "t", roles: [], tools: [], ttlSeconds: 60 };
    const a = await mintGrant(keys, c, { maxLifetimeSeconds: MAX });
    const b = await mintGrant(keys, c, { maxLifetimeSeconds: MAX });
    expect(a.jti).not.toBe(b.jti);
    expect((await check(a.token, { now: undefined })).ok).toBe(true);
  });

  it("refuses to mint a ttl above the maximum, or claims verification would refuse", async () => {
    const c = { iss: ISS, aud: AUD, sub: "agent:x", team: "t", roles: ["agent" as const], tools: ["*"], ttlSeconds: 901 };
    await expect(mintGrant(keys, c, { maxLifetimeSeconds: MAX })).rejects.toThrow(/above the maximum/);
    await expect(mintGrant(keys, { ...c, ttlSeconds: 0 }, { maxLifetimeSeconds: MAX })).rejects.toThrow();
    await expect(mintGrant(keys, { ...c, ttlSeconds: 60, sub: "" }, { maxLifetimeSeconds: MAX })).rejects.toThrow(/sub/);
    await expect(mintGrant(keys, { ...c, ttlSeconds: 60, roles: ["root" as "agent"] }, { maxLifetimeSeconds: MAX })).rejects.toThrow(/role/);
    await expect(mintGrant(keys, { ...c, ttlSeconds: 60, tools: ["x".repeat(9000)] }, { maxLifetimeSeconds: MAX })).rejects.toThrow(/exceed/);
    const verifyOnly = await parseKeySet(JSON.stringify({ keys: [{ ...k1.privateJwk, d: undefined }] }));
    await expect(mintGrant(verifyOnly, { ...c, ttlSeconds: 60 }, { maxLifetimeSeconds: MAX })).rejects.toThrow(/no active/);
  });

  it("accepts an aud array containing the gateway, and several accepted issuers or audiences", async () => {
    expect((await check(await forge(baseHeader(), { ...basePayload(), aud: ["https://other", AUD] }))).ok).toBe(true);
    expect((await check(await forge(baseHeader(), basePayload()), { issuer: ["https://old", ISS] })).ok).toBe(true);
    const r = await check(await forge(baseHeader(), { ...basePayload(), aud: "https://gw.example.com" }), { audience: ["https://gw.example.com", AUD] });
    expect(r.ok && r.grant.aud).toBe("https://gw.example.com");
  });

  it("hasRole: admin implies every role, the others only themselves", () => {
    expect(hasRole({ roles: ["admin"] }, "approver")).toBe(true);
    expect(hasRole({ roles: ["admin"] }, "agent")).toBe(true);
    expect(hasRole({ roles: ["operator"] }, "approver")).toBe(false);
    expect(hasRole({ roles: ["approver"] }, "auditor")).toBe(false);
    expect(hasRole({ roles: ["auditor", "agent"] }, "auditor")).toBe(true);
    expect(hasRole({ roles: [] }, "agent")).toBe(false);
  });
});

describe("key sets", () => {
  it("rotation: an old kid verifies while it is in the set, fails after removal; the new active kid signs", async () => {
    const old = await generateSigningKey("old");
    const next = await generateSigningKey("new");
    const claims = { iss: ISS, aud: AUD, sub: "agent:a", team: "t", roles: ["agent" as const], tools: ["*"], ttlSeconds: 300 };
    const o = { maxLifetimeSeconds: MAX, now: NOW };
    const before = await parseKeySet(JSON.stringify(old.privateJwk));
    const t1 = (await mintGrant(before, claims, o)).token;
    const during = await parseKeySet(JSON.stringify({ keys: [old.publicJwk, next.privateJwk], active: "new" }));
    expect(during.active?.kid).toBe("new");
    const t2 = (await mintGrant(during, claims, o)).token;
    expect(JSON.parse(new TextDecoder().decode(base64url.decode(t2.split(".")[0]!))).kid).toBe("new");
    expect((await check(t1, {}, during)).ok).toBe(true);
    expect((await check(t2, {}, during)).ok).toBe(true);
    expect((await check(t2, {}, before)).ok).toBe(false);
    const after = await parseKeySet(JSON.stringify({ keys: [next.privateJwk], active: "new" }));
    expectRejected(await check(t1, {}, after), t1, /unknown kid/);
    expect((await check(t2, {}, after)).ok).toBe(true);
    // Both private keys present: the named one signs.
    const both = await parseKeySet(JSON.stringify({ keys: [old.privateJwk, next.privateJwk], active: "old" }));
    expect(both.active?.kid).toBe("old");
  });

  it("publicJwks publishes public parts only", async () => {
    const other = await generateSigningKey("k2");
    const set = await parseKeySet(JSON.stringify({ keys: [k1.privateJwk, other.publicJwk], active: KID }));
    const jwks = publicJwks(set);
    expect(jwks.keys).toHaveLength(2);
    for (const k of jwks.keys) {
      expect(Object.keys(k).sort()).toEqual(["alg", "crv", "kid", "kty", "use", "x"]);
      expect(k).toMatchObject({ kty: "OKP", crv: "Ed25519", alg: "EdDSA", use: "sig" });
      expect(JSON.stringify(k)).not.toContain('"d"');
    }
    expect(jwks.keys.map((k) => k.kid)).toEqual([KID, "k2"]);
    expect(JSON.stringify(jwks)).not.toContain(k1.privateJwk.d);
  });

  it("generateSigningKey defaults kid to the JWK thumbprint", async () => {
    const g = await generateSigningKey();
    expect(g.publicJwk.kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(g.privateJwk).toMatchObject({ ...g.publicJwk, d: expect.any(String) });
    expect("d" in g.publicJwk).toBe(false);
  });

  it("refuses unusable secrets without echoing them", async () => {
    const other = await generateSigningKey("k9");
    const secret = `{"kty":"OKP","d":"${k1.privateJwk.d}",`;
    const err = await parseKeySet(secret).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KeySetError);
    expect((err as Error).message).not.toContain(k1.privateJwk.d);
    const bad = async (v: unknown) => expect(parseKeySet(JSON.stringify(v))).rejects.toBeInstanceOf(KeySetError);
    await bad({ ...k1.privateJwk, x: other.publicJwk.x }); // x does not belong to d
    await bad(k1.publicJwk); // single key must be private
    await bad({ ...k1.privateJwk, kid: undefined });
    await bad({ ...k1.privateJwk, kid: "bad kid!" });
    await bad({ ...k1.privateJwk, crv: "Ed448" });
    await bad({ kty: "oct", k: "c2VjcmV0", kid: "h" });
    await bad({ ...k1.privateJwk, alg: "HS256" });
    await bad({ keys: [k1.privateJwk, k1.privateJwk] }); // duplicate kid
    await bad({ keys: [k1.privateJwk, other.privateJwk] }); // two signers, no active
    await bad({ keys: [k1.privateJwk, other.publicJwk], active: "k9" }); // active is public only
    await bad({ keys: [] });
    await bad([k1.privateJwk]);
  });
});

describe("negative matrix (RFC 8725)", () => {
  it("accepts the forged baseline (the forger is sound)", async () => {
    expect((await check(await forge(baseHeader(), basePayload()))).ok).toBe(true);
  });

  it("alg none (unsigned), with and without a signature segment", async () => {
    const h = { alg: "none", typ: GRANT_TYP, kid: KID };
    const unsigned = `${enc(h)}.${enc(basePayload())}.`;
    expectRejected(await check(unsigned), unsigned);
    const junk = `${enc(h)}.${enc(basePayload())}.${enc("x")}`;
    expectRejected(await check(junk), junk, /alg/);
    const lower = await forge({ ...h, alg: "None" }, basePayload());
    expectRejected(await check(lower), lower, /alg/);
  });

  it("HS256 with a random secret", async () => {
    const t = await hmac(crypto.getRandomValues(new Uint8Array(32)), { ...baseHeader(), alg: "HS256" }, basePayload());
    expectRejected(await check(t), t, /alg/);
  });

  it("HS256 keyed with the Ed25519 public key bytes, or the public JWK JSON (alg confusion)", async () => {
    const pub = publicJwks(keys).keys[0]!;
    const raw = base64url.decode(pub.x);
    for (const secret of [raw, new TextEncoder().encode(JSON.stringify(pub)), new TextEncoder().encode(pub.x)]) {
      const t = await hmac(secret, { ...baseHeader(), alg: "HS256" }, basePayload());
      expectRejected(await check(t), t, /alg/);
    }
  });

  it("RS256 and ES256 with real keys", async () => {
    for (const alg of ["RS256", "ES256"]) {
      const { privateKey } = await generateKeyPair(alg);
      const t = await new SignJWT(basePayload()).setProtectedHeader({ alg, typ: GRANT_TYP, kid: KID }).sign(privateKey);
      expectRejected(await check(t), t, /alg/);
    }
  });

  it("EdDSA by a key outside the set under a known kid", async () => {
    const intruder = await generateSigningKey(KID);
    const set = await parseKeySet(JSON.stringify(intruder.privateJwk));
    const t = (
      await mintGrant(
        set,
        { iss: ISS, aud: AUD, sub: "agent:evil", team: "core", roles: ["admin"], tools: ["*"], ttlSeconds: 300 },
        { maxLifetimeSeconds: MAX, now: NOW },
      )
    ).token;
    expectRejected(await check(t), t, /signature/);
  });

  it("a bit-flipped signature or payload", async () => {
    const good = await forge(baseHeader(), basePayload());
    const [h, p, s] = good.split(".") as [string, string, string];
    const sig = base64url.decode(s);
    sig[10] = sig[10]! ^ 1;
    const flipped = `${h}.${p}.${base64url.encode(sig)}`;
    expectRejected(await check(flipped), flipped, /signature/);
    const swapped = `${h}.${enc({ ...basePayload(), roles: ["admin"] })}.${s}`;
    expectRejected(await check(swapped), swapped, /signature/);
  });

  it("a non-canonical base64url spelling of the same signature", async () => {
    const good = await forge(baseHeader(), basePayload());
    const [h, p, s] = good.split(".") as [string, string, string];
    // 64 bytes → 86 chars; the last char carries 4 unused bits.
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf(s.at(-1)!);
    const alt = `${h}.${p}.${s.slice(0, -1)}${alphabet[last ^ 1]}`;
    expectRejected(await check(alt), alt, /base64url/);
  });

  it("typ wrong, missing, or differently cased", async () => {
    for (const [typ, why] of [
      ["JWT", /wrong typ/],
      ["at+jwt", /wrong typ/],
      ["grant+jwt", /wrong typ/],
      [GRANT_TYP.toUpperCase(), /wrong typ/],
      [undefined, /missing typ/],
    ] as const) {
      const t = await forge({ ...baseHeader(), typ }, basePayload());
      expectRejected(await check(t), t, why);
    }
  });

  it("kid unknown, missing, or malformed", async () => {
    for (const [kid, why] of [
      ["k2", /unknown kid/],
      [undefined, /missing kid/],
      ["../../etc/passwd", /malformed kid/],
      [7, /malformed kid/],
      ["__proto__", /unknown kid/],
    ] as const) {
      const t = await forge({ ...baseHeader(), kid }, basePayload());
      expectRejected(await check(t), t, why);
    }
  });

  it("jku, jwk (embedded attacker key), x5u, x5c and crit headers are never honoured", async () => {
    const { publicKey, privateKey } = await generateKeyPair("EdDSA");
    const attackerJwk = { ...(await exportJWK(publicKey)), kid: KID };
    const embedded = await new SignJWT({ ...basePayload(), roles: ["admin"] })
      .setProtectedHeader({ alg: "EdDSA", typ: GRANT_TYP, kid: KID, jwk: attackerJwk })
      .sign(privateKey);
    expectRejected(await check(embedded), embedded, /jwk/);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ jku: "https://evil.example/jwks.json" }, /jku/],
      [{ jwk: attackerJwk }, /jwk/],
      [{ x5u: "https://evil.example/cert.pem" }, /x5u/],
      [{ x5c: ["MIIB"] }, /x5c/],
      [{ crit: ["exp"] }, /crit/],
      [{ crit: [] }, /crit/],
      [{ b64: false }, /b64/],
      [{ cty: "JWT" }, /unexpected header/],
    ];
    for (const [extra, why] of cases) {
      // Signed with the real key: only the header parameter can cause the rejection.
      const t = await forge({ ...baseHeader(), ...extra }, basePayload());
      expectRejected(await check(t), t, why);
    }
  });

  it("aud wrong, missing, malformed, or an array without the gateway", async () => {
    const wrong = (shown: string) => new RegExp(`^token aud "${shown}" is not this gateway's audience \\(expected "https://gw\\.example\\.com/mcp"\\)$`);
    for (const [aud, why] of [
      ["https://other.example/mcp", wrong("https://other\\.example/mcp")],
      [undefined, /missing aud/],
      [["https://a", "https://b"], wrong("https://a, https://b")],
      [[], wrong("")],
      [42, /malformed aud/],
      [[AUD, 1], /malformed aud/],
    ] as const) {
      const t = await forge(baseHeader(), { ...basePayload(), aud });
      expectRejected(await check(t), t, why, 250);
    }
  });

  it("a grant for another gateway says so by its data (foreign: iss or aud); no other failure does", async () => {
    const iss = await check(await forge(baseHeader(), { ...basePayload(), iss: "https://evil.example" }));
    expect(iss).toMatchObject({ ok: false, foreign: "iss" });
    const aud = await check(await forge(baseHeader(), { ...basePayload(), aud: "https://other.example/mcp" }));
    expect(aud).toMatchObject({ ok: false, foreign: "aud" });
    for (const payload of [
      { ...basePayload(), iss: undefined },
      { ...basePayload(), aud: 42 },
      { ...basePayload(), exp: NOW - 100 },
    ]) {
      const r = await check(await forge(baseHeader(), payload));
      expect(r.ok).toBe(false);
      expect(r).not.toHaveProperty("foreign");
    }
  });

  it("iss wrong or missing", async () => {
    for (const [iss, why] of [
      ["https://evil.example", /^token iss "https:\/\/evil\.example" is not this gateway's issuer \(expected "https:\/\/gw\.example\.com"\)$/],
      [undefined, /missing iss/],
      [[ISS], /malformed iss/],
    ] as const) {
      const t = await forge(baseHeader(), { ...basePayload(), iss });
      expectRejected(await check(t), t, why, 250);
    }
  });

  it("a grant for another gateway names the first accepted issuer/audience; claim values are shown printable and capped", async () => {
    const other = await forge(baseHeader(), { ...basePayload(), iss: "http://127.0.0.1:8787" });
    expectRejected(
      await check(other, { issuer: ["http://127.0.0.1:9000", "http://localhost:9000"] }),
      other,
      /^token iss "http:\/\/127\.0\.0\.1:8787" is not this gateway's issuer \(expected "http:\/\/127\.0\.0\.1:9000"\)$/,
      250,
    );
    const long = await forge(baseHeader(), { ...basePayload(), iss: `https://${"a".repeat(300)}.example` });
    const r = await check(long);
    expectRejected(r, long, new RegExp(`^token iss "https://${"a".repeat(92)}\\.\\.\\." is not this gateway's issuer`), 250);
    const odd = await forge(baseHeader(), { ...basePayload(), aud: 'https://gw\u00e9.example/"x"\\y\r\n' });
    const o = await check(odd);
    expectRejected(o, odd, /^token aud "https:\/\/gw\?\.example\/\?x\?\?y\?\?" is not this gateway's audience/, 250);
    // An unsigned (or wrongly signed) token never gets that far: its claims are not shown.
    const unsigned = `${enc(baseHeader())}.${enc({ ...basePayload(), iss: "https://evil.example" })}.${"A".repeat(86)}`;
    const u = await check(unsigned);
    expectRejected(u, unsigned, /^bad signature$/);
  });

  it("expiry: beyond the skew is rejected, within the skew is accepted, skew is capped at 60 s", async () => {
    const at = (exp: number) => forge(baseHeader(), { ...basePayload(), iat: exp - 300, nbf: exp - 300, exp });
    const expired = await at(NOW - 61);
    expectRejected(await check(expired), expired, /expired/);
    expect((await check(await at(NOW - 59))).ok).toBe(true);
    expect((await check(await at(NOW - 30), { clockSkewSeconds: 0 })).ok).toBe(false);
    const capped = await at(NOW - 120);
    expectRejected(await check(capped, { clockSkewSeconds: 3600 }), capped, /expired/);
  });

  it("nbf or iat in the future beyond the skew", async () => {
    const nbf = await forge(baseHeader(), { ...basePayload(), nbf: NOW + 61 });
    expectRejected(await check(nbf), nbf, /nbf/);
    expect((await check(await forge(baseHeader(), { ...basePayload(), nbf: NOW + 59 }))).ok).toBe(true);
    const iat = await forge(baseHeader(), { ...basePayload(), iat: NOW + 120, nbf: NOW, exp: NOW + 300 });
    expectRejected(await check(iat), iat, /iat/);
  });

  it("lifetime above the maximum", async () => {
    const t = await forge(baseHeader(), { ...basePayload(), iat: NOW - 10, nbf: NOW - 10, exp: NOW - 10 + MAX + 61 });
    expectRejected(await check(t), t, /lifetime/);
    const day = await forge(baseHeader(), { ...basePayload(), exp: NOW + 86_400 });
    expectRejected(await check(day), day, /lifetime/);
    const backwards = await forge(baseHeader(), { ...basePayload(), exp: NOW - 20, iat: NOW - 10 });
    expectRejected(await check(backwards), backwards);
  });

  it("revoked jti, and a failing revocation store, are rejected", async () => {
    const t = await forge(baseHeader(), basePayload());
    const seen: string[] = [];
    const revoked = await check(t, {
      isRevoked: async (jti) => {
        seen.push(jti);
        return true;
      },
    });
    expectRejected(revoked, t, /revoked/);
    expect(seen).toEqual(["AAAAAAAAAAAAAAAAAAAAAA"]);
    expectRejected(
      await check(t, {
        isRevoked: async () => {
          throw new Error("store down");
        },
      }),
      t,
      /revoked/,
    );
    expect((await check(t, { isRevoked: async () => false })).ok).toBe(true);
  });

  it("malformed: wrong part count, bad base64url, JSON garbage, truncated, empty", async () => {
    const good = await forge(baseHeader(), basePayload());
    const [h, p, s] = good.split(".") as [string, string, string];
    const garbageHeader = `${enc("{not json")}.${p}.${s}`;
    const arrayHeader = `${enc([1, 2])}.${p}.${s}`;
    const garbagePayload = await forge(baseHeader(), '{"iss": ');
    const arrayPayload = await forge(baseHeader(), ["iss"]);
    const nonUtf8 = `${base64url.encode(new Uint8Array([0xff, 0xfe, 0x7b]))}.${p}.${s}`;
    const cases: Array<[string, RegExp]> = [
      ["", /compact JWS/],
      [`${h}.${p}`, /compact JWS/],
      [`${good}.${s}`, /compact JWS/],
      [`${h}..${s}`, /empty/],
      [`${h}.${p}.`, /empty/],
      [`${h}.${p}.${s.slice(0, -1)}*`, /base64url/],
      [`${h}.${p}.${s}=`, /base64url/],
      [`${h}.${p.replace(/./, "+")}.${s}`, /base64url/],
      [` ${good}`, /base64url/],
      [`${good}\n`, /base64url/],
      [garbageHeader, /header/],
      [arrayHeader, /header/],
      [nonUtf8, /header/],
      [garbagePayload, /payload/],
      [arrayPayload, /payload/],
      [good.slice(0, -5), /base64url/],
      [good.slice(0, -4), /base64url|signature/],
      [good.slice(0, -40), /base64url|signature/],
      [good.slice(0, h.length + 5), /compact JWS/],
    ];
    for (const [t, why] of cases) expectRejected(await check(t), t, why);
  });

  it("oversized tokens (9 KiB) are rejected before parsing", async () => {
    const big = await forge(baseHeader(), { ...basePayload(), tools: ["x".repeat(7000)] });
    expect(big.length).toBeGreaterThan(MAX_TOKEN_BYTES);
    expectRejected(await check(big), big, /too large/);
    const nine = "a".repeat(9 * 1024);
    expectRejected(await check(nine), nine, /too large/);
  });

  it("missing or ill-typed sub, team, roles, tools, jti, iat, budget; unknown role", async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ sub: undefined }, /sub/],
      [{ sub: "" }, /sub/],
      [{ sub: 42 }, /sub/],
      [{ team: undefined }, /team/],
      [{ team: ["core"] }, /team/],
      [{ roles: "admin" }, /roles/],
      [{ roles: undefined }, /roles/],
      [{ roles: ["agent", 1] }, /role/],
      [{ roles: ["root"] }, /unknown role/],
      [{ roles: ["Admin"] }, /unknown role/],
      [{ tools: "*" }, /tools/],
      [{ tools: [1] }, /tools/],
      [{ tools: undefined }, /tools/],
      [{ jti: undefined }, /jti/],
      [{ jti: 5 }, /jti/],
      [{ iat: undefined }, /iat/],
      [{ exp: undefined }, /exp/],
      [{ exp: "1900000000" }, /exp/],
      [{ nbf: undefined }, /nbf/],
      [{ budget: 5 }, /budget/],
      [{ budget: { calls: -1 } }, /budget/],
      [{ budget: { calls: 1.5 } }, /budget/],
      [{ budget: { calls: 3, dollars: 10 } }, /budget/],
    ];
    for (const [over, why] of cases) {
      const t = await forge(baseHeader(), { ...basePayload(), ...over });
      expectRejected(await check(t), t, why);
    }
  });

  it("non-string tokens and broken options never throw", async () => {
    for (const v of [undefined, null, 42, {}, ["a.b.c"]]) {
      expectRejected(await verifyGrant(v as unknown as string, keys, opts()), "");
    }
    const t = await forge(baseHeader(), basePayload());
    expectRejected(await verifyGrant(t, keys, { ...opts(), issuer: [] }), t, /misconfigured/);
    expectRejected(await verifyGrant(t, keys, { ...opts(), maxLifetimeSeconds: Number.NaN }), t, /misconfigured/);
    expectRejected(await verifyGrant(t, null as unknown as KeySet, opts()), t, /misconfigured/);
  });
});

describe("the signature is checked once per token and key; everything else on every request", () => {
  it("a token verified once is still refused later when it expired, was revoked, or is presented to a key set whose key under that kid differs", async () => {
    const t = await forge(baseHeader(), basePayload());
    expect((await check(t)).ok).toBe(true);
    expect((await check(t)).ok).toBe(true);
    // Expiry, audience and revocation are re-checked on the remembered token.
    expectRejected(await check(t, { now: NOW + 290 + 61 }), t, /expired/);
    expectRejected(await check(t, { audience: "https://other.example.com/mcp" }), t, /aud/, 300);
    expectRejected(await check(t, { isRevoked: async () => true }), t, /revoked/);
    // The same kid, another key (a rotation that reused the kid): the memo is per key object, so the signature is checked again and fails.
    const other = await parseKeySet(JSON.stringify((await generateSigningKey(KID)).privateJwk));
    expectRejected(await check(t, {}, other), t, /signature/);
    // The same key parsed again (a new key set object, as a reload makes): verified from scratch, and good.
    const reparsed = await parseKeySet(JSON.stringify(k1.privateJwk));
    expect((await check(t, {}, reparsed)).ok).toBe(true);
  });

  it("a token whose signature failed is never remembered, and a changed signature on a remembered payload is refused", async () => {
    const t = await forge(baseHeader(), basePayload());
    const [h, p, s] = t.split(".") as [string, string, string];
    const flipped = `${h}.${p}.${s.slice(0, 10)}${s[10] === "A" ? "B" : "A"}${s.slice(11)}`;
    expectRejected(await check(flipped), flipped, /signature/);
    expectRejected(await check(flipped), flipped, /signature/);
    expect((await check(t)).ok).toBe(true);
    expectRejected(await check(flipped), flipped, /signature/);
  });
});
