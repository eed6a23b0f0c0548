/**
 * Sealing what the gateway keeps for upstreams: AES-256-GCM under the credentials key (a Worker
 * secret named by `gateway.credentials_key_secret`), with additional data that binds a sealed
 * value to what it is for (its owner, upstream, authorization server), and the key's version (a
 * fingerprint, so a row sealed under another key is told apart instead of misread). Owns the key
 * import and its per-isolate cache. Must never: log, return or store a key or a plaintext, or
 * seal without additional data.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";

const b64 = (b: Uint8Array) => btoa(String.fromCharCode(...b));
const unb64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

let keyCache: { text: string; key: Promise<CryptoKey>; version: Promise<string> } | null = null;

function keyOf(env: Env, cfg: GatewayConfig): NonNullable<typeof keyCache> {
  const text = env[cfg.credentialsKeySecret];
  if (typeof text !== "string" || text.trim() === "") throw new Error(`the ${cfg.credentialsKeySecret} secret is not set`);
  if (!keyCache || keyCache.text !== text) {
    const raw = unb64(text.trim());
    if (raw.byteLength !== 32) throw new Error(`the ${cfg.credentialsKeySecret} secret must be 32 bytes, base64-encoded`);
    const version = crypto.subtle
      .digest("SHA-256", new Uint8Array([...new TextEncoder().encode("portcullis-key-version\u0000"), ...raw]))
      .then((d) => Array.from(new Uint8Array(d).slice(0, 6), (x) => x.toString(16).padStart(2, "0")).join(""));
    keyCache = { text, key: crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]), version };
  }
  return keyCache;
}

/** The version of the current credentials key: 12 hex characters of a hash of it (not the key). */
export function keyVersion(env: Env, cfg: GatewayConfig): Promise<string> {
  return keyOf(env, cfg).version;
}

export async function seal(env: Env, cfg: GatewayConfig, aad: string, value: string): Promise<{ iv: string; ct: string }> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: new TextEncoder().encode(aad) },
    await keyOf(env, cfg).key,
    new TextEncoder().encode(value),
  );
  return { iv: b64(iv), ct: b64(new Uint8Array(ct)) };
}

/** The plaintext; throws when the key, the additional data or the ciphertext differ from the sealing. */
export async function unseal(env: Env, cfg: GatewayConfig, aad: string, sealed: { iv: string; ct: string }): Promise<string> {
  const pt = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: unb64(sealed.iv), additionalData: new TextEncoder().encode(aad) },
    await keyOf(env, cfg).key,
    unb64(sealed.ct),
  );
  return new TextDecoder().decode(pt);
}
