// Fuzzing verifyGrant with fast-check: any mangling of a valid grant token (character flips,
// inserts, deletes, truncation, segment swaps, header or payload re-encoded from random JSON,
// several of these in a row) must never throw and never verify unless it is the original token.
import fc from "fast-check";
import { base64url } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { GRANT_TYP, mintGrant, verifyGrant, type VerifyOptions } from "../../src/identity/tokens.ts";
import { generateSigningKey, parseKeySet, type KeySet } from "../../src/identity/keys.ts";

const ISS = "https://gw.example.com";
const AUD = "https://gw.example.com/mcp";
const NOW = 1_800_000_000;
const OPTS: VerifyOptions = { issuer: ISS, audience: AUD, maxLifetimeSeconds: 900, now: NOW + 5 };
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

let keys: KeySet;
let token: string;

const enc = (v: unknown): string => base64url.encode(JSON.stringify(v));
const dec = (s: string): unknown => JSON.parse(new TextDecoder().decode(base64url.decode(s)));

beforeAll(async () => {
  const k = await generateSigningKey("fuzz-1");
  keys = await parseKeySet(JSON.stringify(k.privateJwk));
  token = (
    await mintGrant(
      keys,
      {
        iss: ISS,
        aud: AUD,
        sub: "agent:fuzz",
        team: "core",
        roles: ["agent"],
        tools: ["alpha__*"],
        budget: { calls: 3 },
        ttlSeconds: 300,
      },
      { maxLifetimeSeconds: 900, now: NOW },
    )
  ).token;
});

type Mutation = (t: string) => string;

const anyChar = fc.oneof(
  fc.constantFrom(...ALPHABET.split("")),
  fc.constantFrom(".", "=", "+", "/", " ", "\n", "\u0000", "%", "é", "\u{1F600}"),
  fc.string({ minLength: 1, maxLength: 1, unit: "binary" }),
);

const flip: fc.Arbitrary<Mutation> = fc.tuple(fc.nat(), anyChar).map(([i, c]) => (t) => {
  const at = i % t.length;
  return t.slice(0, at) + c + t.slice(at + 1);
});
const insert: fc.Arbitrary<Mutation> = fc.tuple(fc.nat(), anyChar).map(([i, c]) => (t) => {
  const at = i % (t.length + 1);
  return t.slice(0, at) + c + t.slice(at);
});
const remove: fc.Arbitrary<Mutation> = fc.tuple(fc.nat(), fc.integer({ min: 1, max: 8 })).map(([i, n]) => (t) => {
  const at = i % Math.max(t.length, 1);
  return t.slice(0, at) + t.slice(at + n);
});
const truncate: fc.Arbitrary<Mutation> = fc.nat().map((n) => (t) => t.slice(0, n % Math.max(t.length, 1)));
const swap: fc.Arbitrary<Mutation> = fc
  .constantFrom([0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0], [0, 0, 2], [1, 1, 2], [0, 1, 1])
  .map((order) => (t) => {
    const parts = t.split(".");
    return parts.length === 3 ? order.map((i) => parts[i]).join(".") : t;
  });
const randomHeader: fc.Arbitrary<Mutation> = fc.jsonValue().map((v) => (t) => {
  const parts = t.split(".");
  return [enc(v), ...parts.slice(1)].join(".");
});
// A header that keeps the right alg/typ/kid but adds, drops or changes members.
const tweakedHeader: fc.Arbitrary<Mutation> = fc
  .record({
    extra: fc.dictionary(fc.oneof(fc.constantFrom("jku", "jwk", "x5u", "x5c", "crit", "b64", "cty", "zip"), fc.string()), fc.jsonValue(), { maxKeys: 3 }),
    drop: fc.subarray(["alg", "typ", "kid"]),
    alg: fc.constantFrom("EdDSA", "Ed25519", "none", "HS256", "eddsa"),
    spaced: fc.boolean(),
  })
  .map(({ extra, drop, alg, spaced }) => (t) => {
    const parts = t.split(".");
    if (parts.length !== 3) return t;
    const h: Record<string, unknown> = { alg, typ: GRANT_TYP, kid: "fuzz-1", ...extra };
    for (const k of drop) delete h[k];
    const json = JSON.stringify(h, null, spaced ? 1 : undefined);
    return [base64url.encode(json), parts[1], parts[2]].join(".");
  });
// Payload re-encoded with extra or changed claims: the signature no longer covers it.
const tweakedPayload: fc.Arbitrary<Mutation> = fc
  .dictionary(fc.constantFrom("sub", "roles", "tools", "exp", "aud", "iss", "team", "budget", "jti", "x"), fc.jsonValue(), { maxKeys: 3 })
  .map((over) => (t) => {
    const parts = t.split(".");
    if (parts.length !== 3) return t;
    let payload: unknown;
    try {
      payload = dec(parts[1]!);
    } catch {
      return t;
    }
    return [parts[0], enc({ ...(payload as object), ...over }), parts[2]].join(".");
  });

const mutation = fc.oneof(flip, insert, remove, truncate, swap, randomHeader, tweakedHeader, tweakedPayload);

async function neverAcceptsAChange(mutated: string): Promise<void> {
  let result: Awaited<ReturnType<typeof verifyGrant>> | undefined;
  let threw: unknown = null;
  try {
    result = await verifyGrant(mutated, keys, OPTS);
  } catch (e) {
    threw = e;
  }
  expect(threw).toBeNull();
  expect(result).toBeDefined();
  if (mutated === token) {
    expect(result!.ok).toBe(true);
  } else {
    expect(result!.ok).toBe(false);
    if (!result!.ok) {
      expect(result!.error).toBe("invalid_token");
      expect(result!.reason.length).toBeLessThanOrEqual(80);
      if (mutated.length > 8) expect(result!.reason).not.toContain(mutated);
    }
  }
}

describe("verifyGrant under fuzzing", () => {
  it("the unmangled token verifies", async () => {
    expect((await verifyGrant(token, keys, OPTS)).ok).toBe(true);
  });

  it("one mutation: never throws, never accepts a changed token", async () => {
    await fc.assert(
      fc.asyncProperty(mutation, (m) => neverAcceptsAChange(m(token))),
      { numRuns: 1000 },
    );
  });

  it("a chain of mutations: never throws, never accepts a changed token", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(mutation, { minLength: 2, maxLength: 6 }), (ms) => neverAcceptsAChange(ms.reduce((t, m) => m(t), token))),
      { numRuns: 500 },
    );
  });

  it("each signature character changed: never accepted (no malleable base64url)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.nat(), fc.constantFrom(...ALPHABET.split("")), (i, c) => {
        const sigStart = token.lastIndexOf(".") + 1;
        const at = sigStart + (i % (token.length - sigStart));
        return neverAcceptsAChange(token.slice(0, at) + c + token.slice(at + 1));
      }),
      { numRuns: 300 },
    );
  });

  it("random strings and random three-part strings: never throw, never accepted", async () => {
    const segment = fc.string({ unit: fc.constantFrom(...ALPHABET.split("")), maxLength: 120 });
    const arb = fc.oneof(
      fc.string({ maxLength: 300 }),
      fc.string({ maxLength: 300, unit: "binary" }),
      fc.tuple(segment, segment, segment).map((p) => p.join(".")),
      fc.tuple(fc.jsonValue(), fc.jsonValue(), segment).map(([h, p, s]) => `${enc(h)}.${enc(p)}.${s}`),
    );
    await fc.assert(
      fc.asyncProperty(arb, (t) => neverAcceptsAChange(t)),
      { numRuns: 500 },
    );
  });
});
