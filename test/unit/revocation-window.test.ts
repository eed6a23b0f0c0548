/**
 * A revocation is kept at least as long as any grant can still live: an `exp` given with the
 * revoke (by mistake or on purpose) can extend it, never end it early — through the grants API
 * and through the portcullis.revoke_grant operator tool.
 */
import { env, runDurableObjectAlarm, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet, type KeySet } from "../../src/identity/keys.ts";
import { REVOCATION_SHARDS } from "../../durable-objects/object-names.ts";

const GW = "http://127.0.0.1";
const DAY = 86400; // the unit config's max_token_lifetime
let keys: KeySet;
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
});

const mint = (roles: string[], sub: string) =>
  mintGrant(keys, { iss: GW, aud: GW, sub, team: "t", roles: roles as never, tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: DAY });

describe("revocation window", () => {
  it("an early exp is raised to the longest grant lifetime; a later one is kept", async () => {
    const admin = (await mint(["admin"], "human:root")).token;
    const victim = await mint(["agent"], "agent:v");
    const now = Math.floor(Date.now() / 1000);
    const revoke = (jti: string, exp: number) =>
      SELF.fetch(`${GW}/v1/grants/${jti}/revoke`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
        body: JSON.stringify({ exp }),
      });
    const early = (await (await revoke(victim.jti, now - 10)).json()) as { until: number };
    expect(early.until).toBeGreaterThanOrEqual(now + DAY);
    const later = (await (await revoke("jti-later-0123456789", now + 3 * DAY)).json()) as { until: number };
    expect(later.until).toBe(now + 3 * DAY);
    const r = await SELF.fetch(`${GW}/operator/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${admin}` },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "portcullis.revoke_grant", arguments: { jti: "jti-operator-0123456789", exp: 1 } },
      }),
    });
    const out = (await r.json()) as { result: { structuredContent: { until: number } } };
    expect(out.result.structuredContent.until).toBeGreaterThanOrEqual(now + DAY);
  });

  it("{exp: 0} and a past exp leave the grant refused, after the cleanup alarm too", async () => {
    const admin = (await mint(["admin"], "human:root")).token;
    const call = (token: string) =>
      SELF.fetch(`${GW}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } },
        }),
      });
    const zero = await mint(["agent"], "agent:zero");
    const past = await mint(["agent"], "agent:past");
    const now = Math.floor(Date.now() / 1000);
    for (const [g, exp] of [
      [zero, 0],
      [past, now - 3600],
    ] as const) {
      const r = await SELF.fetch(`${GW}/v1/grants/${g.jti}/revoke`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
        body: JSON.stringify({ exp }),
      });
      expect(r.status).toBe(200);
      // Kept until no grant with this jti can verify: the longest lifetime plus twice the clock skew.
      expect(((await r.json()) as { until: number }).until).toBeGreaterThanOrEqual(now + DAY + 120);
    }
    // The cleanup alarm of every shard runs (it drops only entries whose grants can no longer verify).
    for (let i = 0; i < REVOCATION_SHARDS; i++) await runDurableObjectAlarm(env.REVOCATIONS.get(env.REVOCATIONS.idFromName(`shard-${i}`)));
    for (const g of [zero, past]) {
      const r = await call(g.token);
      expect(r.status).toBe(401);
      expect(r.headers.get("www-authenticate")).toContain("revoked");
    }
  });
});
