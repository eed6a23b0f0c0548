/**
 * The config as the Worker serves it: the live config (src/ports/live-config.ts: the version stored
 * by a hot reload, else the PORTCULLIS_CONFIG var, parsed once per isolate and version),
 * checked against the egress rules from each request's vantage (loopback or not), and the
 * per-request view a handler gets — each upstream marked with whether the gateway is on
 * loopback and, for `per_principal` upstreams, carrying the caller's own credential; upstreams
 * the caller's grant cannot reach are left out altogether. Must never: serve with a config that
 * failed validation or the egress rules (503 naming every problem), mutate the shared config,
 * or let a resolved credential outlive the request.
 */
import { deployedConfigText } from "../config/deployed.ts";
import { ConfigError } from "../config/load.ts";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { egressProblems } from "../egress/config-check.ts";
import { upstreamsFor } from "../egress/upstream-credentials.ts";
import { withConnections } from "../services/connections.ts";
import type { Env } from "../env.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import { ownUrlProblem } from "../identity/metadata.ts";
import { liveConfig, parseConfigText } from "../ports/live-config.ts";
import { jsonResponse } from "../wire/http.ts";

let cached: { text: string; config: GatewayConfig } | null = null;

/** The parsed deployed config (the PORTCULLIS_CONFIG var, else the one built into the bundle); throws ConfigError naming every problem. */
function varConfig(env: Env): GatewayConfig {
  const text = deployedConfigText(env);
  if (text === undefined) {
    throw new ConfigError([
      "no config: this Worker has no PORTCULLIS_CONFIG var and none built into its bundle (start with `npx portcullis dev`; deploy with `npx portcullis deploy`)",
    ]);
  }
  if (cached && cached.text === text) return cached.config;
  const config = parseConfigText(text, env);
  cached = { text, config };
  return config;
}

function servedOr503(load: () => GatewayConfig): GatewayConfig | Response {
  try {
    const cfg = load();
    const ownUrl = ownUrlProblem(cfg);
    return ownUrl ? jsonResponse({ ok: false, error: "configuration invalid", problems: [ownUrl] }, 503) : cfg;
  } catch (e) {
    const problems = e instanceof ConfigError ? e.problems : [String(e)];
    return jsonResponse({ ok: false, error: "configuration invalid", problems }, 503);
  }
}

/**
 * The PORTCULLIS_CONFIG var's config alone, or 503 naming every problem — a gateway that does not
 * know its own URL (auth.audience) serves nothing. Routes use liveConfigOr503 (a hot reload wins).
 */
export function configOr503(env: Env): GatewayConfig | Response {
  return servedOr503(() => varConfig(env));
}

/** The live config (stored version, else the var), or 503 naming every problem. */
export async function liveConfigOr503(env: Env): Promise<GatewayConfig | Response> {
  let cfg: GatewayConfig;
  try {
    cfg = await liveConfig(env, varConfig);
  } catch (e) {
    return servedOr503(() => {
      throw e;
    });
  }
  return servedOr503(() => cfg);
}

/** The config stored now, read past this isolate's per-second cache (a reload compares against it); throws as liveConfig does. */
export function currentConfig(env: Env): Promise<GatewayConfig> {
  return liveConfig(env, varConfig, true);
}

/**
 * Every problem a candidate config text has for this Worker: the loader (against this env's
 * secrets and vars), the policy compile, the gateway's own URL and the egress rules from this
 * request's vantage — the checks a served config passes. Problems name fields and secret names,
 * never a secret's value. The parsed config when there are none.
 */
export function candidateProblems(text: string, env: Env, req: Request): { ok: true; config: GatewayConfig } | { ok: false; problems: string[] } {
  let cfg: GatewayConfig;
  try {
    cfg = parseConfigText(text, env);
  } catch (e) {
    return { ok: false, problems: e instanceof ConfigError ? e.problems : [String((e as Error)?.message ?? e)] };
  }
  const problems: string[] = [];
  const ownUrl = ownUrlProblem(cfg);
  if (ownUrl) problems.push(ownUrl);
  problems.push(...egressProblems(cfg, isLoopbackRequest(req)));
  return problems.length ? { ok: false, problems } : { ok: true, config: cfg };
}

const checked = new WeakMap<GatewayConfig, Map<boolean, string[]>>();

/** Egress refusals of the config for this request's vantage (cached per config object and loopback-ness). */
export function egressRefusal(cfg: GatewayConfig, req: Request): Response | null {
  const onLoopback = isLoopbackRequest(req);
  const byVantage = checked.get(cfg) ?? new Map<boolean, string[]>();
  checked.set(cfg, byVantage);
  const problems = byVantage.get(onLoopback) ?? egressProblems(cfg, onLoopback);
  byVantage.set(onLoopback, problems);
  if (problems.length === 0) return null;
  return jsonResponse({ ok: false, error: "configuration refused by the egress rules", problems }, 503);
}

/** Config that parsed and passes the egress rules from this request's vantage, or the refusal. */
export async function servableConfig(env: Env, req: Request): Promise<GatewayConfig | Response> {
  const shared = await liveConfigOr503(env);
  if (shared instanceof Response) return shared;
  return egressRefusal(shared, req) ?? shared;
}

/**
 * With a principal, upstreams its grant cannot reach are left out altogether: no list, route,
 * capability, listen or GET stream of this request can touch them.
 */
export async function requestConfig(
  env: Env,
  cfg: GatewayConfig,
  req: Request,
  principal?: Principal,
  waitUntil?: (p: Promise<unknown>) => void,
): Promise<GatewayConfig> {
  const onLoopback = isLoopbackRequest(req);
  const reachable = principal === undefined ? cfg : { ...cfg, upstreams: cfg.upstreams.filter((u) => grantReachesUpstream(principal, u)) };
  let base = principal === undefined ? cfg.upstreams : await upstreamsFor(env, reachable, principal.sub);
  if (principal !== undefined) {
    // OAuth upstreams carry the token of the connection they use (a refresh's record is written in the background, or before returning without one).
    const later: Promise<unknown>[] = [];
    base = await withConnections(env, cfg, principal, base, onLoopback, waitUntil ?? ((p) => later.push(p)));
    await Promise.allSettled(later);
  }
  return { ...cfg, upstreams: base.map((u) => ({ ...u, onLoopback })) };
}
