/**
 * Strict base64url for tokens and keys. Owns the rule that a base64url string is accepted only
 * in its one canonical form: unpadded, URL alphabet only, no whitespace, and zero trailing bits,
 * so that re-encoding the decoded bytes gives back exactly the input. Must never: accept two
 * spellings of the same bytes (a JWS signature with altered unused bits would otherwise verify
 * as a different token), or throw — failure is `null`.
 */
import { base64url } from "jose";

const ALPHABET = /^[A-Za-z0-9_-]*$/;

/** Decodes canonical unpadded base64url, or returns null for anything else. */
export function decodeCanonical(text: string): Uint8Array | null {
  if (!ALPHABET.test(text) || text.length % 4 === 1) return null;
  try {
    const bytes = base64url.decode(text);
    return base64url.encode(bytes) === text ? bytes : null;
  } catch {
    return null;
  }
}

/** Encodes bytes as unpadded base64url. */
export function encode(bytes: Uint8Array): string {
  return base64url.encode(bytes);
}
