/**
 * Per-principal upstream credentials are sealed to (principal, upstream name, upstream URL): a
 * credential registered for one upstream never reaches an upstream that later takes its name
 * at another URL, nor another principal — they get a readable credential problem instead.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { credentialsObject } from "../../durable-objects/object-names.ts";
import type { GatewayConfig, UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import { sealCredential, upstreamsFor } from "../../src/egress/upstream-credentials.ts";
import type { Env } from "../../src/env.ts";

const key = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))));
const withKey = { ...env, PORTCULLIS_CREDENTIALS_KEY: key } as unknown as Env;
const vault = (url: string): UpstreamConfig => ({
  name: "vault",
  url,
  namespaced: false,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 1000,
  credentials: { mode: "per_principal", header: "Authorization", prefix: "Bearer " },
  egress: DEFAULT_EGRESS_RULES,
  onLoopback: true,
});
const cfg = (up: UpstreamConfig) => ({ credentialsKeySecret: "PORTCULLIS_CREDENTIALS_KEY", upstreams: [up] }) as unknown as GatewayConfig;

describe("credential binding", () => {
  it("unseals only for the same principal, upstream name and URL", async () => {
    const original = vault("https://vault.example.com/mcp");
    await credentialsObject(withKey, "agent:owner").put("vault", await sealCredential(withKey, cfg(original), "agent:owner", original, "tok-123"));
    const [same] = await upstreamsFor(withKey, cfg(original), "agent:owner");
    expect(same!.headers.Authorization).toBe("Bearer tok-123");
    expect(same!.credentialProblem).toBeUndefined();
    const moved = vault("https://other.example.net/mcp");
    const [elsewhere] = await upstreamsFor(withKey, cfg(moved), "agent:owner");
    expect(elsewhere!.headers.Authorization).toBeUndefined();
    expect(elsewhere!.credentialProblem).toMatch(/could not be read/);
    const [stranger] = await upstreamsFor(withKey, cfg(original), "agent:stranger");
    expect(stranger!.headers.Authorization).toBeUndefined();
    expect(stranger!.credentialProblem).toMatch(/no credential is registered/);
  });
});
