/**
 * Signed checkpoints in the C2SP formats: a signed note (c2sp.org/signed-note) whose text is a
 * tlog-checkpoint body `<origin>\n<size>\n<base64 head hash>\n` — the hash being the chain's head
 * hash (the last entry's `hash`), not an RFC 6962 Merkle root — followed by a blank line and one
 * signature line `— <key name> <base64(key id ‖ Ed25519 signature)>`. The key name is the origin
 * (tlog-checkpoint: it SHOULD match), and the key id is the first 4 bytes of SHA-256(key name ‖
 * "\n" ‖ 0x01 ‖ 32-byte public key). Also the generic note operations (`signNote`, `openNote`),
 * which reproduce golang.org/x/mod/sumdb/note's vectors. Shared by the LedgerDO (signing) and the
 * offline verifier. Must never: sign with anything but an Ed25519 private JWK, report a note as
 * verified without a good signature by a given key, or accept a note a known key's signature
 * fails on.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import { Memo } from "../wire/memo.ts";

/** One signed checkpoint of a chain: `size` entries whose last hash is `hash`. */
export interface Checkpoint {
  chain: string;
  size: number;
  hash: string;
  /** ISO 8601 time it was signed (informational: the signature does not cover it). */
  at: string;
  /** The signed note text (body and signature lines). */
  note: string;
}

/** An Ed25519 private key as a JWK, with its key id. */
export interface SigningKey {
  kid: string;
  privateJwk: JsonWebKey;
}

type PublicJwk = JsonWebKey & { kid?: string };

/** A key a note may be signed by: its key name and 32-byte Ed25519 public key. */
export interface NoteVerifier {
  name: string;
  publicKey: Uint8Array;
  /** The JWK's kid, when the verifier came from a JWKS. */
  kid?: string;
}

/** Signature lines a note may carry (the spec asks verifiers to accept at least 16; Go's package stops at 100). */
const MAX_SIGNATURES = 100;
/** Notes larger than this are refused before any parsing. */
const MAX_NOTE_BYTES = 64 * 1024;
const HEX64 = /^[0-9a-f]{64}$/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

const b64 = (bytes: Uint8Array): string => {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
};
/** Strict standard base64 (RFC 4648 §4, padded, canonical): null when `text` is anything else. */
function unb64(text: string): Uint8Array | null {
  if (text.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return null;
  let bytes: Uint8Array;
  try {
    bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
  return b64(bytes) === text ? bytes : null;
}
const hexToBytes = (hex: string): Uint8Array => Uint8Array.from(hex.match(/../g) ?? [], (h) => Number.parseInt(h, 16));
const bytesToHex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
const b64urlToBytes = (s: string): Uint8Array | null => {
  if (!/^[A-Za-z0-9_-]*$/.test(s)) return null;
  const std = s.replace(/-/g, "+").replace(/_/g, "/");
  return unb64(std.padEnd(Math.ceil(std.length / 4) * 4, "="));
};

/** Key names: non-empty, no Unicode spaces, no plus signs (signed-note). */
const validName = (name: string): boolean => name.length > 0 && !/[\s+]/u.test(name);

/** The origin line of a chain's checkpoints: `<gateway host and path>/ledger/<chain>` (a schema-less URL; `+` escaped). */
export function checkpointOrigin(gateway: string, chain: string): string {
  let base = gateway;
  try {
    const u = new URL(gateway);
    base = `${u.host}${u.pathname}`;
  } catch {
    // already a bare origin
  }
  return `${base.replace(/\/+$/, "")}/ledger/${chain}`.replace(/\+/g, "%2B").replace(/\s/gu, "_");
}

/** The signed-note key id: the first 4 bytes of SHA-256(name ‖ "\n" ‖ 0x01 ‖ Ed25519 public key). */
export function noteKeyId(name: string, publicKey: Uint8Array): Uint8Array {
  const prefix = utf8ToBytes(`${name}\n`);
  const material = new Uint8Array(prefix.length + 1 + publicKey.length);
  material.set(prefix, 0);
  material[prefix.length] = 0x01; // Ed25519
  material.set(publicKey, prefix.length + 1);
  return sha256(material).slice(0, 4);
}

/** Why a note's text cannot be signed or opened: not UTF-8-clean text ending in a newline, or a control character. */
function textProblem(text: string): string | null {
  if (!text.endsWith("\n")) return "the note text does not end in a newline";
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 && c !== 0x0a) return "the note contains a control character";
  }
  if (LONE_SURROGATE.test(text)) return "the note is not valid Unicode";
  return null;
}

/** Imported Ed25519 public keys, by hex (a handful per gateway; bounded). Keys, not promises: a Worker may share them across requests. */
const imported = new Memo<string, CryptoKey>({ max: 64 });
async function publicKeyOf(raw: Uint8Array): Promise<CryptoKey> {
  const hex = bytesToHex(raw);
  const cached = imported.get(hex);
  if (cached) return cached;
  const key = await crypto.subtle.importKey("raw", new Uint8Array(raw), { name: "Ed25519" }, false, ["verify"]);
  imported.set(hex, key);
  return key;
}

async function ed25519Verify(publicKey: Uint8Array, sig: Uint8Array, message: Uint8Array): Promise<boolean> {
  try {
    return await crypto.subtle.verify({ name: "Ed25519" }, await publicKeyOf(publicKey), new Uint8Array(sig), new Uint8Array(message));
  } catch {
    return false;
  }
}

/** Signs `text` (which must end in a newline) as `name` with an Ed25519 private JWK: the signed note. */
export async function signNote(text: string, name: string, privateJwk: JsonWebKey): Promise<string> {
  const problem = textProblem(text);
  if (problem) throw new Error(problem);
  if (!validName(name)) throw new Error("a key name must be non-empty, without spaces or plus signs");
  const x = typeof privateJwk.x === "string" ? b64urlToBytes(privateJwk.x) : null;
  if (x?.length !== 32) throw new Error("the signing JWK has no valid public part (x)");
  const priv = await crypto.subtle.importKey("jwk", privateJwk, { name: "Ed25519" }, false, ["sign"]);
  const sig = new Uint8Array(await crypto.subtle.sign({ name: "Ed25519" }, priv, utf8ToBytes(text)));
  const id = noteKeyId(name, x);
  const blob = new Uint8Array(id.length + sig.length);
  blob.set(id, 0);
  blob.set(sig, id.length);
  return `${text}\n\u2014 ${name} ${b64(blob)}\n`;
}

export type OpenedNote = { ok: true; text: string; signer: NoteVerifier } | { ok: false; reason: string };

/**
 * Opens a signed note the way c2sp.org/signed-note (and Go's `note.Open`) does: the text is
 * everything up to the last blank line; every signature line must be well formed; signatures by
 * unknown keys (name and key id) are ignored; a known key's signature that fails rejects the
 * whole note; at least one known key must have signed.
 */
export async function openNote(note: string, verifiers: NoteVerifier[]): Promise<OpenedNote> {
  const malformed = (why: string): OpenedNote => ({ ok: false, reason: `malformed note: ${why}` });
  if (note.length > MAX_NOTE_BYTES) return malformed("too large");
  const problem = textProblem(note);
  if (problem) return malformed(problem);
  const split = note.lastIndexOf("\n\n");
  if (split < 0) return malformed("no blank line before the signatures");
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split("\n");
  if (lines.length > MAX_SIGNATURES) return malformed(`more than ${MAX_SIGNATURES} signatures`);
  const known = verifiers.map((v) => ({ v, id: bytesToHex(noteKeyId(v.name, v.publicKey)) }));
  let signer: NoteVerifier | null = null;
  for (const line of lines) {
    if (!line.startsWith("\u2014 ")) return malformed("a signature line does not start with an em dash and a space");
    const rest = line.slice(2);
    const space = rest.indexOf(" ");
    const name = space < 0 ? "" : rest.slice(0, space);
    const blob = space < 0 ? null : unb64(rest.slice(space + 1));
    if (!validName(name) || !blob || blob.length < 5) return malformed("a signature line is not `— <key name> <base64 signature>`");
    const id = bytesToHex(blob.slice(0, 4));
    for (const { v, id: vid } of known) {
      if (v.name !== name || vid !== id) continue;
      const good = blob.length === 68 && (await ed25519Verify(v.publicKey, blob.slice(4), utf8ToBytes(text)));
      if (!good) return { ok: false, reason: `invalid signature for key ${name}+${id}` };
      signer ??= v;
    }
  }
  return signer ? { ok: true, text, signer } : { ok: false, reason: "no signature by a known key (note has no verifiable signatures)" };
}

/** The checkpoint body the signature covers. */
export function checkpointBody(origin: string, size: number, headHash: string): string {
  return `${origin}\n${size}\n${b64(hexToBytes(headHash))}\n`;
}

/** Signs a checkpoint of `size` entries ending in `headHash` (key name = origin); the signed note text. */
export async function signCheckpoint(origin: string, size: number, headHash: string, key: SigningKey): Promise<string> {
  if (!Number.isSafeInteger(size) || size < 0) throw new Error("a checkpoint size is a non-negative integer");
  if (!HEX64.test(headHash)) throw new Error("a checkpoint hash is 64 lowercase hex digits");
  if (!validName(origin) || origin.includes("\n")) throw new Error("a checkpoint origin must be non-empty, without spaces or plus signs");
  return signNote(checkpointBody(origin, size, headHash), origin, key.privateJwk);
}

export type NoteVerdict = { ok: true; origin: string; size: number; hash: string; kid: string } | { ok: false; reason: string };

/** The Ed25519 public keys of a JWKS as note verifiers named `name`. */
function verifiersOf(jwks: { keys: PublicJwk[] }, name: string): NoteVerifier[] {
  const out: NoteVerifier[] = [];
  for (const jwk of Array.isArray(jwks?.keys) ? jwks.keys : []) {
    if (jwk?.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.x !== "string") continue;
    const publicKey = b64urlToBytes(jwk.x);
    if (publicKey?.length === 32) out.push({ name, publicKey, kid: jwk.kid ?? "" });
  }
  return out;
}

/**
 * Verifies a checkpoint note against public keys (a JWKS): the signature of one of them under the
 * key name = origin, and a tlog-checkpoint body (origin, size without leading zeros, base64 of a
 * 32-byte hash, optional non-empty extension lines). The checkpoint it states when it verifies.
 */
export async function verifyCheckpoint(note: string, jwks: { keys: PublicJwk[] }): Promise<NoteVerdict> {
  if (typeof note !== "string") return { ok: false, reason: "the checkpoint note is not text" };
  const origin = note.slice(0, Math.max(0, note.indexOf("\n")));
  if (!origin) return { ok: false, reason: "the checkpoint has no origin line" };
  const opened = await openNote(note, verifiersOf(jwks, origin));
  if (!opened.ok) return opened;
  const lines = opened.text.slice(0, -1).split("\n");
  if (lines.length < 3) return { ok: false, reason: "checkpoint body needs origin, size and hash lines" };
  const [, sizeText, hashB64, ...extensions] = lines as [string, string, string, ...string[]];
  if (!/^(0|[1-9][0-9]*)$/.test(sizeText) || !Number.isSafeInteger(Number(sizeText)))
    return { ok: false, reason: "checkpoint size is not a decimal number without leading zeros" };
  const hash = unb64(hashB64);
  if (!hash) return { ok: false, reason: "checkpoint hash is not base64" };
  if (hash.length !== 32) return { ok: false, reason: "checkpoint hash is not 32 bytes" };
  if (extensions.some((l) => l === "")) return { ok: false, reason: "checkpoint extension lines must not be empty" };
  return { ok: true, origin, size: Number(sizeText), hash: bytesToHex(hash), kid: opened.signer.kid ?? "" };
}

/** The active signing key from a Worker secret: a private Ed25519 JWK, or a key set `{keys, active}`. */
export function signingKeyFrom(secretText: string): SigningKey {
  const parsed = JSON.parse(secretText) as JsonWebKey & { kid?: string; keys?: (JsonWebKey & { kid?: string })[]; active?: string };
  const jwk = Array.isArray(parsed.keys) ? (parsed.keys.find((k) => k.kid === parsed.active) ?? parsed.keys[0]) : parsed;
  if (jwk?.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.d !== "string") throw new Error("the signing secret holds no Ed25519 private key");
  return { kid: jwk.kid ?? "key", privateJwk: jwk };
}
