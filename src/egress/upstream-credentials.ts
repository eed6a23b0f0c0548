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
import { seal, unseal } from "./sealing.ts";

/** Bound to principal, upstream name and URL: a credential never unseals for another upstream that later takes the name. */
const aad = (principal: string, up: UpstreamConfig) => `portcullis-credential\u0000${principal}\u0000${up.name}\u0000${up.url}`;

export function sealCredential(env: Env, cfg: GatewayConfig, principal: string, upstream: UpstreamConfig, value: string): Promise<{ iv: string; ct: string }> {
  return seal(env, cfg, aad(principal, upstream), value);
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
        const value = await unseal(env, cfg, aad(principal, up), sealed);
        return { ...up, headers: { ...up.headers, [c.header]: `${c.prefix}${value}` } };
      } catch (e) {
        return { ...up, credentialProblem: `the credential for upstream ${up.name} could not be read (${(e as Error).message})` };
      }
    }),
  );
}
