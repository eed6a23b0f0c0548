/**
 * Canonical hashing: RFC 8785 JSON (`canonicalize`) and SHA-256 (`@noble/hashes`, synchronous,
 * so a LedgerDO can hash inside one storage transaction). The one implementation behind tool
 * schema hashes and ledger hashes, shared by the gateway and the offline verifier. Must never: hash anything but the canonical form, or accept a value
 * RFC 8785 cannot represent (non-finite numbers) without saying so.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { bytesToHex, utf8ToBytes } from "@noble/hashes/utils.js";
import canonicalize from "canonicalize";

/** RFC 8785 canonical JSON of `value`; throws for values JSON cannot hold (undefined, non-finite numbers). */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (typeof text !== "string") throw new Error("value has no canonical JSON form");
  return text;
}

/** Hex SHA-256 of a UTF-8 string. */
export function sha256Hex(text: string): string {
  return bytesToHex(sha256(utf8ToBytes(text)));
}

/** Hex SHA-256 of the canonical JSON of `value`. */
export function canonicalHash(value: unknown): string {
  return sha256Hex(canonicalJson(value));
}
