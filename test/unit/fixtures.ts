/**
 * Shared test fixtures for unit tests that build configs by hand: one upstream's resolved config
 * (no credential, loopback allowed or not) and the governance part of a gateway config (observe,
 * no policy, no mappings), and every entry of a chain, paged. Owns nothing of the gateway; must never be imported by src/.
 */
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { GatewayConfig, UpstreamConfig } from "../../src/config/gateway-config.ts";
import type { LedgerApi } from "../../durable-objects/contract-ledger.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";

/** A resolved upstream at `url` (default: a closed loopback port), namespaced, without credentials. */
export function testUpstream(name = "alpha", url = "http://127.0.0.1:9/mcp", extra: Partial<UpstreamConfig> = {}): UpstreamConfig {
  return {
    name,
    url,
    namespaced: true,
    headers: {},
    allow: [],
    deny: [],
    timeoutMs: 1000,
    credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
    egress: DEFAULT_EGRESS_RULES,
    onLoopback: true,
    ...extra,
  };
}

/** A gateway config of these upstreams with the governance defaults (observe, no rules, no mappings); agent tools off unless asked. */
export function testConfig(upstreams: UpstreamConfig[], extra: Partial<GatewayConfig> = {}): GatewayConfig {
  return {
    upstreams,
    mode: "observe",
    unclassifiedReads: "block",
    policy: { rules: [] },
    mappings: {},
    agentTools: false,
    holds: { expiresMs: 4 * 3_600_000, waitMs: 0, resolvers: [{ rules: ["*"], roles: ["approver"] }], unresolvable: [], webhooks: [] },
    ...extra,
  } as unknown as GatewayConfig;
}

/** Every entry of a chain, oldest first (read 100 at a time). */
export async function allEntries(chain: Pick<LedgerApi, "read">): Promise<LedgerEntry[]> {
  const out: LedgerEntry[] = [];
  for (let after = 0; ; ) {
    const page = await chain.read(after, 100);
    if (page.length === 0) return out;
    out.push(...page);
    after = page.at(-1)!.seq;
  }
}
