/**
 * The config's outbound URLs against the egress rules, as the gateway will check them on each
 * request. Owns that whole-config verdict (used at startup by the CLI and on every request's
 * vantage by the routes). Must never: fetch anything, or pass a config a single URL of which
 * the rules refuse.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import { checkEgress } from "./rules.ts";

/**
 * Every upstream URL and external JWKS URL checked against the egress rules, as the gateway
 * will check them on each request: `upstream <name>: <reason>` for each refusal, all at once.
 */
export function egressProblems(cfg: GatewayConfig, gatewayOnLoopback: boolean): string[] {
  const problems: string[] = [];
  for (const u of cfg.upstreams) {
    const d = checkEgress(u.url, cfg.egress, { gatewayOnLoopback });
    if (!d.ok) problems.push(`upstream ${u.name}: ${d.reason}`);
  }
  cfg.auth.externalIssuers.forEach((e, i) => {
    const d = checkEgress(e.jwksUrl, cfg.egress, { gatewayOnLoopback });
    if (!d.ok) problems.push(`auth.external_issuers[${i}].jwks_url: ${d.reason}`);
  });
  return problems;
}
