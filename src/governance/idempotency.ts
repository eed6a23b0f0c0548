/**
 * The idempotency key of one rollback step ([R]): an HMAC-SHA256 of run and step under a key
 * derived from the gateway's signing secret — the same for every retry of a rollback and
 * computable by no agent — the signing key it is derived from, read from the secret's text, the
 * `_meta` key that carries it upstream, and the hash records keep of it. Must never: do I/O,
 * derive a key from anything an agent can know alone, or put a key (or its secret) in a plan, a
 * record or a problem: records keep only the key's SHA-256 and the id of the signing key it came from.
 */
import { canonicalJson, sha256Hex } from "../wire/canonical.ts";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";

/** The `_meta` key that carries a compensation's idempotency key to the upstream. */
export const IDEMPOTENCY_META = "portcullis/idempotency_key";

/** What the HMAC key of idempotency keys is derived from: SHA-256(this ‖ the signing key's private `d`). */
export const IDEMPOTENCY_KEY_CONTEXT = "portcullis rollback idempotency v1\n";

/** The signing key idempotency keys are derived from: its id, and the private scalar (`d`, base64url) only the gateway holds. */
export interface IdempotencySecret {
  kid: string;
  d: string;
}

/**
 * The signing key in a signing secret's text (a private Ed25519 JWK, or a key set `{keys, active}`)
 * that a step's idempotency key is derived from: the one named `kid` (a step a previous execution
 * started keeps the key it started with, whatever key is active now), else the active key.
 * A reason (never the secret's text) when there is none.
 */
export function idempotencySecretFrom(secretText: unknown, kid: string | null): IdempotencySecret | { problem: string } {
  if (typeof secretText !== "string" || secretText.trim() === "") return { problem: "the signing secret is not set" };
  let parsed: unknown;
  try {
    parsed = JSON.parse(secretText);
  } catch {
    return { problem: "the signing secret is not JSON" };
  }
  if (!isObject(parsed)) return { problem: "the signing secret holds no Ed25519 private key" };
  const usable = (k: unknown): k is JsonObject & { d: string } =>
    isObject(k) && k.kty === "OKP" && k.crv === "Ed25519" && typeof k.d === "string" && k.d.length > 0;
  const keys = Array.isArray(parsed.keys) ? parsed.keys.filter(usable) : usable(parsed) ? [parsed] : [];
  const kidOf = (k: JsonObject) => (typeof k.kid === "string" ? k.kid : "key");
  if (keys.length === 0) return { problem: "the signing secret holds no Ed25519 private key" };
  if (kid !== null) {
    const k = keys.find((x) => kidOf(x) === kid);
    if (!k)
      return {
        problem: `the signing key ${kid} that this step's earlier execution derived its idempotency key from is no longer in the signing secret; a key derived from another could apply the compensation twice`,
      };
    return { kid, d: k.d };
  }
  const active = Array.isArray(parsed.keys) ? (keys.find((x) => kidOf(x) === parsed.active) ?? keys[0]!) : keys[0]!;
  return { kid: kidOf(active), d: active.d };
}

/**
 * The idempotency key of one step of a run's rollback: HMAC-SHA256, under SHA-256(context ‖ d),
 * of the canonical JSON of `{run, step}` — the same for every execution and every attempt, and
 * unpredictable to anyone without the signing secret (an agent knows its run and its decision ids).
 */
export async function idempotencyKey(secret: IdempotencySecret, run: string, step: string): Promise<string> {
  const material = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(IDEMPOTENCY_KEY_CONTEXT + secret.d));
  const key = await crypto.subtle.importKey("raw", material, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(canonicalJson({ run, step })));
  return [...new Uint8Array(mac)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** What records and reports keep of an idempotency key: its SHA-256 (an auditor can match an upstream's log), never the key. */
export const idempotencyKeyHash = (key: string): string => sha256Hex(key);
