/**
 * Upstream credentials: which header each upstream gets, per mode — `brokered` (configured
 * headers with `${SECRET}` values), `per_principal` (a token the calling principal registered,
 * sealed with AES-GCM under a Worker secret, bound to principal and upstream), `none`.
 * Owns sealing/unsealing and resolving each upstream's headers for one principal.
 * Must never: log or return a credential value, let one principal's credential reach a request
 * of another, or pass the client's own Authorization through.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import { credentialsObject } from "../../durable-objects/object-names.ts";

const b64 = (b: Uint8Array) => btoa(String.fromCharCode(...b));
const unb64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));

let keyCache: { text: string; key: Promise<CryptoKey> } | null = null;

/** The sealing key: 32 random bytes, base64, in the configured Worker secret. */
function sealingKey(env: Env, cfg: GatewayConfig): Promise<CryptoKey> {
  const text = env[cfg.credentialsKeySecret];
  if (typeof text !== "string" || text.trim() === "") throw new Error(`the ${cfg.credentialsKeySecret} secret is not set`);
  if (!keyCache || keyCache.text !== text) {
    const raw = unb64(text.trim());
    if (raw.byteLength !== 32) throw new Error(`the ${cfg.credentialsKeySecret} secret must be 32 bytes, base64-encoded`);
    keyCache = { text, key: crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]) };
  }
  return keyCache.key;
}

/** Bound to principal, upstream name and URL: a credential never unseals for another upstream that later takes the name. */
const aad = (principal: string, up: UpstreamConfig) => new TextEncoder().encode(`portcullis-credential\u0000${principal}\u0000${up.name}\u0000${up.url}`);

export async function sealCredential(
  env: Env,
  cfg: GatewayConfig,
  principal: string,
  upstream: UpstreamConfig,
  value: string,
): Promise<{ iv: string; ct: string }> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const ct = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: aad(principal, upstream) },
    await sealingKey(env, cfg),
    new TextEncoder().encode(value),
  );
  return { iv: b64(iv), ct: b64(new Uint8Array(ct)) };
}

async function unsealCredential(
  env: Env,
  cfg: GatewayConfig,
  principal: string,
  upstream: UpstreamConfig,
  sealed: { iv: string; ct: string },
): Promise<string> {
  const pt = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: unb64(sealed.iv), additionalData: aad(principal, upstream) },
    await sealingKey(env, cfg),
    unb64(sealed.ct),
  );
  return new TextDecoder().decode(pt);
}

/**
 * The upstreams as one principal's requests see them: per_principal upstreams get that
 * principal's registered credential, or a `credentialProblem` that makes every request to
 * them fail with a reason (never a request without the credential).
 */
export async function upstreamsFor(env: Env, cfg: GatewayConfig, principal: string): Promise<UpstreamConfig[]> {
  if (!cfg.upstreams.some((u) => u.credentials.mode === "per_principal")) return cfg.upstreams;
  return Promise.all(
    cfg.upstreams.map(async (up): Promise<UpstreamConfig> => {
      const c = up.credentials;
      if (c.mode !== "per_principal") return up;
      try {
        const sealed = await credentialsObject(env, principal).get(up.name);
        if (!sealed)
          return { ...up, credentialProblem: `no credential is registered for upstream ${up.name}; register one with POST /v1/credentials/${up.name}` };
        const value = await unsealCredential(env, cfg, principal, up, sealed);
        return { ...up, headers: { ...up.headers, [c.header]: `${c.prefix}${value}` } };
      } catch (e) {
        return { ...up, credentialProblem: `the credential for upstream ${up.name} could not be read (${(e as Error).message})` };
      }
    }),
  );
}
