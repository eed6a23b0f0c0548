/**
 * Grant signing keys: parsing the signing-key secret into a key set, publishing its public half
 * as a JWKS, and generating a dev key. Owns the key-rotation model: the secret is one private
 * Ed25519 JWK, or `{ "keys": [...private or public JWKs...], "active": "<kid>" }`; the active
 * private key signs, every key in the set verifies, and an old kid keeps verifying until it is
 * removed from the secret. Must never: keep or publish private key material (`d` is imported
 * into a non-extractable CryptoKey and dropped), accept a key that is not OKP/Ed25519, accept a
 * private key whose `x` does not match its `d`, or put any part of the secret in an error.
 */
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK } from "jose";
import type { CryptoKey } from "jose";
import { decodeCanonical } from "./base64url.ts";

/** The one JWS algorithm grant tokens use (Ed25519 via WebCrypto). */
export const GRANT_ALG = "EdDSA";

/** Key ids: 1–128 characters of `[A-Za-z0-9._:-]` (RFC 7638 thumbprints fit). Checked before any lookup. */
export const KID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

export type PublicJwk = {
  kty: "OKP";
  crv: "Ed25519";
  x: string;
  kid: string;
  alg: typeof GRANT_ALG;
  use: "sig";
};

export type PrivateJwk = PublicJwk & { d: string };

export type KeySet = {
  /** The key that signs new grants; null for a verify-only set (public keys only). */
  readonly active: { readonly kid: string; readonly key: CryptoKey } | null;
  /** kid → public key; every key in the set verifies. */
  readonly verifiers: ReadonlyMap<string, CryptoKey>;
  readonly publicKeys: readonly PublicJwk[];
};

/** A problem with the signing-key secret; the message never quotes the secret. */
export class KeySetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KeySetError";
  }
}

type ParsedJwk = { pub: PublicJwk; d: string | null };

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function checkJwk(raw: unknown, index: number): ParsedJwk {
  const where = `key #${index + 1}`;
  if (!isRecord(raw)) throw new KeySetError(`${where}: not a JWK object`);
  const { kty, crv, x, d, kid, alg, use } = raw;
  if (kty !== "OKP" || crv !== "Ed25519") throw new KeySetError(`${where}: must be an OKP Ed25519 key`);
  if (typeof kid !== "string" || !KID_PATTERN.test(kid)) throw new KeySetError(`${where}: needs a kid of 1-128 characters [A-Za-z0-9._:-]`);
  if (alg !== undefined && alg !== "EdDSA" && alg !== "Ed25519") throw new KeySetError(`${where} (${kid}): alg must be EdDSA`);
  if (use !== undefined && use !== "sig") throw new KeySetError(`${where} (${kid}): use must be sig`);
  if (typeof x !== "string" || decodeCanonical(x)?.length !== 32) throw new KeySetError(`${where} (${kid}): x is not a 32-byte base64url value`);
  if (d !== undefined && (typeof d !== "string" || decodeCanonical(d)?.length !== 32)) {
    throw new KeySetError(`${where} (${kid}): d is not a 32-byte base64url value`);
  }
  return { pub: { kty: "OKP", crv: "Ed25519", x, kid, alg: GRANT_ALG, use: "sig" }, d: typeof d === "string" ? d : null };
}

async function importPublic(jwk: PublicJwk): Promise<CryptoKey> {
  try {
    return await importJWK({ kty: "OKP", crv: "Ed25519", x: jwk.x }, GRANT_ALG);
  } catch {
    throw new KeySetError(`key ${jwk.kid}: the public key does not import`);
  }
}

async function importPrivate(pub: PublicJwk, d: string, publicKey: CryptoKey): Promise<CryptoKey> {
  let key: CryptoKey;
  try {
    key = await importJWK({ kty: "OKP", crv: "Ed25519", x: pub.x, d }, GRANT_ALG, { extractable: false });
  } catch {
    throw new KeySetError(`key ${pub.kid}: the private key does not import`);
  }
  // WebCrypto does not promise to check that x belongs to d: sign once and verify with x.
  const probe = new TextEncoder().encode(`portcullis key check ${pub.kid}`);
  const ok = await crypto.subtle
    .sign("Ed25519", key, probe)
    .then((sig) => crypto.subtle.verify("Ed25519", publicKey, sig, probe))
    .catch(() => false);
  if (!ok) throw new KeySetError(`key ${pub.kid}: x does not match the private key`);
  return key;
}

function parseJson(secretJson: string): unknown {
  try {
    return JSON.parse(secretJson);
  } catch {
    // JSON.parse errors quote the input; never echo the secret.
    throw new KeySetError("the signing-key secret is not valid JSON");
  }
}

/**
 * Parses the signing-key secret. Accepts one private JWK, or `{ keys, active? }`. Without
 * `active`, the set's only private key signs; a set with no private key is verify-only; several
 * private keys need `active`. Throws KeySetError for anything else.
 */
export async function parseKeySet(secretJson: string): Promise<KeySet> {
  if (typeof secretJson !== "string") throw new KeySetError("the signing-key secret must be a JSON string");
  const root = parseJson(secretJson);
  if (!isRecord(root)) throw new KeySetError("the signing-key secret must be a JWK or { keys, active }");
  let rawKeys: unknown[];
  let activeKid: string | null = null;
  if ("keys" in root) {
    if (!Array.isArray(root.keys) || root.keys.length === 0) throw new KeySetError("keys must be a non-empty array of JWKs");
    rawKeys = root.keys;
    if (root.active !== undefined) {
      if (typeof root.active !== "string") throw new KeySetError("active must be a kid string");
      activeKid = root.active;
    }
  } else {
    rawKeys = [root];
    if (root.d === undefined) throw new KeySetError("a single-key secret must be a private JWK (with d)");
  }
  const parsed = rawKeys.map(checkJwk);
  const verifiers = new Map<string, CryptoKey>();
  const signers = new Map<string, CryptoKey>();
  for (const jwk of parsed) {
    if (verifiers.has(jwk.pub.kid)) throw new KeySetError(`duplicate kid ${jwk.pub.kid}`);
    const publicKey = await importPublic(jwk.pub);
    verifiers.set(jwk.pub.kid, publicKey);
    if (jwk.d !== null) signers.set(jwk.pub.kid, await importPrivate(jwk.pub, jwk.d, publicKey));
  }
  if (activeKid === null && signers.size > 1) throw new KeySetError("several private keys: name the signing one in active");
  if (activeKid === null && signers.size === 1) activeKid = [...signers.keys()][0] ?? null;
  let active: KeySet["active"] = null;
  if (activeKid !== null) {
    const key = signers.get(activeKid);
    if (!key) throw new KeySetError(`active kid ${KID_PATTERN.test(activeKid) ? activeKid : "(invalid)"} is not a private key in the set`);
    active = Object.freeze({ kid: activeKid, key });
  }
  return Object.freeze({ active, verifiers, publicKeys: Object.freeze(parsed.map((p) => Object.freeze(p.pub))) });
}

/** The set's public keys as a JWKS document (for /.well-known/jwks.json): never any `d`. */
export function publicJwks(keys: KeySet): { keys: PublicJwk[] } {
  return { keys: keys.publicKeys.map(({ kty, crv, x, kid }) => ({ kty, crv, x, kid, alg: GRANT_ALG, use: "sig" })) };
}

/** A fresh Ed25519 key pair as JWKs (the CLI's dev key). kid defaults to the RFC 7638 thumbprint. */
export async function generateSigningKey(kid?: string): Promise<{ privateJwk: PrivateJwk; publicJwk: PublicJwk }> {
  if (kid !== undefined && !KID_PATTERN.test(kid)) throw new KeySetError("kid must be 1-128 characters [A-Za-z0-9._:-]");
  const { privateKey } = await generateKeyPair(GRANT_ALG, { extractable: true });
  const jwk = await exportJWK(privateKey);
  if (typeof jwk.x !== "string" || typeof jwk.d !== "string") throw new KeySetError("key generation returned no Ed25519 JWK");
  const id = kid ?? (await calculateJwkThumbprint({ kty: "OKP", crv: "Ed25519", x: jwk.x }));
  const publicJwk: PublicJwk = { kty: "OKP", crv: "Ed25519", x: jwk.x, kid: id, alg: GRANT_ALG, use: "sig" };
  return { privateJwk: { ...publicJwk, d: jwk.d }, publicJwk };
}
