/**
 * Grant tokens: minting and verifying the gateway's EdDSA-signed JWTs (header `alg: EdDSA`,
 * `typ: portcullis-grant+jwt`, `kid`; claims in claims.ts). Owns the verification order: size
 * cap before parsing, strict compact-JWS syntax and canonical base64url, a header of exactly
 * {alg, typ, kid} with alg allow-listed to EdDSA, the exact typ and a kid known to the key set,
 * then the signature (jose, `algorithms: ["EdDSA"]`, an Ed25519 public CryptoKey only), then the
 * claims, then revocation; the signature check is done once per token text and key per isolate
 * (a bounded memo), every other check on every request. Must never: throw on hostile input, honour `jku`/`jwk`/`x5u`/`x5c`/
 * `crit` (their presence rejects), hand jose an HMAC key or a key named by the token, fetch
 * anything, or echo the token in a reason. Key sets themselves are keys.ts's.
 */
import { compactVerify, SignJWT } from "jose";
import type { CryptoKey } from "jose";
import { decodeCanonical, encode } from "./base64url.ts";
import { checkClaims, type ForeignClaim } from "./claims.ts";
import type { Budget, Grant, Role } from "../config/roles.ts";
import { GRANT_ALG, KID_PATTERN, type KeySet } from "./keys.ts";
import { Memo } from "../wire/memo.ts";

/** The JOSE `typ` every grant token carries; any other token (even from the same issuer) is refused. */
export const GRANT_TYP = "portcullis-grant+jwt";
/** Tokens longer than this (characters = bytes for a valid token) are refused before parsing. */
export const MAX_TOKEN_BYTES = 8192;
/** Clock skew tolerated on exp/nbf/iat, and its ceiling. */
const DEFAULT_CLOCK_SKEW_SECONDS = 60;
export const MAX_CLOCK_SKEW_SECONDS = 60;

const HEADER_ALLOWED = new Set(["alg", "typ", "kid"]);
/** Header parameters that would let the token pick its own key or extensions; their presence rejects. */
const HEADER_FORBIDDEN = ["jku", "jwk", "x5u", "x5c", "x5t", "x5t#S256", "crit", "b64"] as const;

export type GrantClaimsInput = {
  iss: string;
  aud: string;
  sub: string;
  team: string;
  roles: Role[];
  tools: string[];
  budget?: Budget;
  ttlSeconds: number;
  /** The grant's id; default a fresh random one. An OAuth grant keeps one jti across its access tokens, so revoking it ends them all. */
  jti?: string;
};

export type MintOptions = {
  maxLifetimeSeconds: number;
  /** Seconds since the epoch; defaults to the current time (for tests and the CLI). */
  now?: number;
};

export type VerifyOptions = {
  /** Accepted `iss` value(s). */
  issuer: string | string[];
  /** This gateway's canonical URL; several accepted forms may be given. The token's `aud` must contain one. */
  audience: string | string[];
  maxLifetimeSeconds: number;
  /** Default 60; clamped to [0, 60]. */
  clockSkewSeconds?: number;
  /** Seconds since the epoch; defaults to the current time. */
  now?: number;
  /** Revocation lookup; a throw counts as revoked (fail closed). */
  isRevoked?: (jti: string) => Promise<boolean>;
};

/** `foreign`: a validly signed grant minted for another gateway (its `iss` or `aud` is not this one's; the reason names both). */
export type VerifyResult = { ok: true; grant: Grant } | { ok: false; error: "invalid_token"; reason: string; foreign?: ForeignClaim };

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

function randomJti(): string {
  const bytes = new Uint8Array(16); // 128 bits
  crypto.getRandomValues(bytes);
  return encode(bytes);
}

/** Signs a grant with the set's active key. Throws on a ttl above the maximum or claims verifyGrant would refuse. */
export async function mintGrant(keys: KeySet, claims: GrantClaimsInput, opts: MintOptions): Promise<{ token: string; jti: string; exp: number }> {
  if (!keys.active) throw new Error("the key set has no active private key to sign with");
  const { maxLifetimeSeconds } = opts;
  if (!Number.isSafeInteger(maxLifetimeSeconds) || maxLifetimeSeconds <= 0) throw new Error("maxLifetimeSeconds must be a positive integer");
  const { ttlSeconds } = claims;
  if (!Number.isSafeInteger(ttlSeconds) || ttlSeconds <= 0) throw new Error("ttlSeconds must be a positive integer");
  if (ttlSeconds > maxLifetimeSeconds) throw new Error(`ttl ${ttlSeconds}s is above the maximum token lifetime of ${maxLifetimeSeconds}s`);
  if (typeof claims.iss !== "string" || claims.iss === "") throw new Error("iss must be a non-empty string");
  if (typeof claims.aud !== "string" || claims.aud === "") throw new Error("aud must be a non-empty string");
  const iat = Math.floor(opts.now ?? nowSeconds());
  const exp = iat + ttlSeconds;
  const jti = claims.jti ?? randomJti();
  const payload: Record<string, unknown> = {
    iss: claims.iss,
    aud: claims.aud,
    sub: claims.sub,
    team: claims.team,
    roles: claims.roles,
    tools: claims.tools,
    iat,
    nbf: iat,
    exp,
    jti,
  };
  if (claims.budget !== undefined) payload.budget = claims.budget;
  // Refuse to mint anything verifyGrant would refuse.
  const check = checkClaims(payload, { issuers: [claims.iss], audiences: [claims.aud], now: iat, skew: 0, maxLifetimeSeconds });
  if ("reason" in check) throw new Error(`cannot mint this grant: ${check.reason}`);
  const token = await new SignJWT(payload).setProtectedHeader({ alg: GRANT_ALG, typ: GRANT_TYP, kid: keys.active.kid }).sign(keys.active.key);
  if (token.length > MAX_TOKEN_BYTES) throw new Error(`the grant token would exceed ${MAX_TOKEN_BYTES} bytes (too many tool globs?)`);
  return { token, jti, exp };
}

function fail(reason: string): VerifyResult {
  return { ok: false, error: "invalid_token", reason };
}

/** A claim value as a reason shows it: quoted, printable ASCII only (others become `?`), at most 100 characters. */
function shown(v: unknown): string {
  const text = String(v);
  return `"${text.slice(0, 100).replace(/[^\x20-\x7e]|["\\]/g, "?")}${text.length > 100 ? "..." : ""}"`;
}

/**
 * A signed grant minted for another gateway: the reason names the `iss` or `aud` it carries and
 * the one this gateway expects, so the operator can mint the right one. Runs only after the
 * signature verified, and shows claim values, never the token.
 */
function explained(foreign: ForeignClaim, payload: Record<string, unknown>, issuers: string[], audiences: string[]): VerifyResult {
  const aud = Array.isArray(payload.aud) ? payload.aud.join(", ") : payload.aud;
  const reason =
    foreign === "iss"
      ? `token iss ${shown(payload.iss)} is not this gateway's issuer (expected ${shown(issuers[0])})`
      : `token aud ${shown(aud)} is not this gateway's audience (expected ${shown(audiences[0])})`;
  return { ok: false, error: "invalid_token", reason, foreign };
}

function jsonObject(bytes: Uint8Array): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

function toList(v: unknown): string[] | null {
  const list = typeof v === "string" ? [v] : Array.isArray(v) ? (v as unknown[]) : null;
  if (!list || list.length === 0 || !list.every((s) => typeof s === "string" && s !== "")) return null;
  return list as string[];
}

function checkHeader(h: Record<string, unknown>, keys: KeySet): { key: CryptoKey } | { reason: string } {
  for (const name of HEADER_FORBIDDEN) if (Object.hasOwn(h, name)) return { reason: `forbidden header parameter ${name}` };
  for (const name of Object.keys(h)) if (!HEADER_ALLOWED.has(name)) return { reason: "unexpected header parameter" };
  if (h.alg !== GRANT_ALG) return { reason: "alg not allowed" };
  if (h.typ === undefined) return { reason: "missing typ" };
  if (h.typ !== GRANT_TYP) return { reason: "wrong typ" };
  if (h.kid === undefined) return { reason: "missing kid" };
  if (typeof h.kid !== "string" || !KID_PATTERN.test(h.kid)) return { reason: "malformed kid" };
  const key = keys.verifiers.get(h.kid);
  return key ? { key } : { reason: "unknown kid" };
}

/** Tokens one verification key remembers as correctly signed, at most (the oldest is dropped first). */
export const SIGNATURE_MEMO_MAX = 1024;
const goodSignatures = new WeakMap<CryptoKey, Memo<string, true>>();

/**
 * Whether `token` (its exact text) was already verified as signed by `key` in this isolate. A
 * signature is a pure function of the bytes and the key, so the Ed25519 check is done once per
 * token and key; everything else (header, claims, lifetime, expiry, revocation) is checked on
 * every request. Keyed by the key object: a new key set (rotation, a reload) starts empty.
 */
function signatureKnownGood(key: CryptoKey, token: string): boolean {
  return goodSignatures.get(key)?.has(token) === true;
}
function rememberGoodSignature(key: CryptoKey, token: string): void {
  let known = goodSignatures.get(key);
  if (!known) {
    known = new Memo({ max: SIGNATURE_MEMO_MAX });
    goodSignatures.set(key, known);
  }
  known.set(token, true);
}

async function verify(token: unknown, keys: KeySet, opts: VerifyOptions): Promise<VerifyResult> {
  if (typeof token !== "string") return fail("token is not a string");
  if (token.length > MAX_TOKEN_BYTES) return fail("token too large");
  const issuers = toList(opts.issuer);
  const audiences = toList(opts.audience);
  const maxLifetime = opts.maxLifetimeSeconds;
  if (!issuers || !audiences || typeof maxLifetime !== "number" || !(maxLifetime > 0) || !(keys?.verifiers instanceof Map)) {
    return fail("verifier misconfigured");
  }
  const parts = token.split(".");
  if (parts.length !== 3) return fail("not a compact JWS");
  const [h64, p64, s64] = parts as [string, string, string];
  if (h64 === "" || p64 === "" || s64 === "") return fail("empty JWS segment");
  const headerBytes = decodeCanonical(h64);
  const payloadBytes = decodeCanonical(p64);
  const signature = decodeCanonical(s64);
  if (!headerBytes || !payloadBytes || !signature) return fail("bad base64url");
  const header = jsonObject(headerBytes);
  if (!header) return fail("header is not a JSON object");
  const picked = checkHeader(header, keys);
  if ("reason" in picked) return fail(picked.reason);
  if (signature.length !== 64) return fail("bad signature");
  if (!signatureKnownGood(picked.key, token)) {
    try {
      await compactVerify(token, picked.key, { algorithms: [GRANT_ALG] });
    } catch {
      return fail("bad signature");
    }
    rememberGoodSignature(picked.key, token);
  }
  const payload = jsonObject(payloadBytes);
  if (!payload) return fail("payload is not a JSON object");
  const rawSkew = opts.clockSkewSeconds ?? DEFAULT_CLOCK_SKEW_SECONDS;
  const skew = Number.isFinite(rawSkew) ? Math.min(Math.max(rawSkew, 0), MAX_CLOCK_SKEW_SECONDS) : 0;
  const now = opts.now ?? nowSeconds();
  if (!Number.isFinite(now)) return fail("verifier misconfigured");
  const checked = checkClaims(payload, { issuers, audiences, now, skew, maxLifetimeSeconds: maxLifetime });
  if ("reason" in checked) return checked.foreign ? explained(checked.foreign, payload, issuers, audiences) : fail(checked.reason);
  if (opts.isRevoked) {
    let revoked: boolean;
    try {
      revoked = (await opts.isRevoked(checked.grant.jti)) !== false;
    } catch {
      revoked = true;
    }
    if (revoked) return fail("token revoked");
  }
  return { ok: true, grant: checked.grant };
}

/**
 * Verifies a grant token. Never throws: every failure is `{ ok: false, error: "invalid_token",
 * reason }` with a short fixed reason — except a validly signed grant for another gateway, whose
 * reason names its `iss`/`aud` and the expected one. A throwing `isRevoked` is treated as revoked.
 */
export async function verifyGrant(token: string, keys: KeySet, opts: VerifyOptions): Promise<VerifyResult> {
  try {
    return await verify(token, keys, opts);
  } catch {
    return fail("verification failed");
  }
}
