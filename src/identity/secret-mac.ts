/**
 * The gateway's own MACs under its signing secret, in one place: a key derived per purpose
 * (SHA-256 over a label and the secret, never the secret itself), HMAC-SHA256 of a text under it as
 * unpadded base64url, and the constant-time comparison a check of one needs. The console's CSRF
 * tokens, OAuth consent offers and hold decision links each name their own label, so a MAC made
 * for one purpose never passes for another. Must never: use the secret itself as a key, or
 * compare a MAC in time that depends on where it differs.
 */
import { hmac } from "@noble/hashes/hmac.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes } from "@noble/hashes/utils.js";
import { Memo } from "../wire/memo.ts";
import { encode } from "./base64url.ts";

/** Derived keys by label and secret (a new secret replaces the old ones). */
const keys = new Memo<string, Uint8Array>({ max: 8 });

function keyOf(secret: string, label: string): Uint8Array {
  const id = `${label}\n${secret}`;
  let k = keys.get(id);
  if (!k) {
    k = sha256(utf8ToBytes(id));
    keys.set(id, k);
  }
  return k;
}

/** base64url(HMAC-SHA256(SHA-256("<label>\n<secret>"), text)). */
export function labelledMac(secret: string, label: string, text: string): string {
  return encode(hmac(sha256, keyOf(secret, label), utf8ToBytes(text)));
}

/** Whether `given` is `want` (constant time over want's length; anything not a string of that length is not). */
export function sameMac(want: string, given: unknown): boolean {
  if (typeof given !== "string" || given.length !== want.length) return false;
  let diff = 0;
  for (let i = 0; i < want.length; i++) diff |= want.charCodeAt(i) ^ given.charCodeAt(i);
  return diff === 0;
}
