/**
 * /readyz and /summary: upstream reachability (cached ≤ 2 s) with the last outcome of each
 * upstream's lists in this isolate (unavailable.ts) and the readiness verdict (ready, degraded:
 * some upstream down or failing its lists while others serve, unavailable: none reachable), and
 * a schema-free catalogue whose tool counts are what the caller can list (upstream listings
 * cached ≤ 2 s); the uncached tool names of one upstream (`listTools`, the reload's policy check,
 * policy-live.ts). Owns the probe (one `server/discover` POST: any JSON-RPC answer means the
 * upstream is up), the verdict and that count. Must never: include tool schemas or upstream
 * credentials in what it returns, or count a tool the caller could not list.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { grantAllowsTool, toolAllowed } from "../governance/grant-scope.ts";
import { type JsonObject, isObject } from "../wire/jsonrpc.ts";
import { callUpstream, modernMeta } from "../upstream/client.ts";
import { UpstreamAuthError, upstreamRequestId } from "../upstream/exchange.ts";
import { modernClientLeg } from "../upstream/legs.ts";
import { exposeName } from "../protocol/exposed-names.ts";
import { Memo } from "../wire/memo.ts";
import { type ListOutcome, listOutcomes } from "../upstream/unavailable.ts";

let probeCache: { at: number; key: string; up: boolean[] } | null = null;
const READY_TTL_MS = 2000;

async function probe(up: UpstreamConfig): Promise<boolean> {
  try {
    await callUpstream(
      { ...up, timeoutMs: Math.min(up.timeoutMs, 5000) },
      { era: "modern", meta: modernMeta({}) },
      {
        jsonrpc: "2.0",
        id: upstreamRequestId(),
        method: "server/discover",
        params: { _meta: modernMeta({}) },
      },
    );
    return true;
  } catch (e) {
    // An upstream that answers 401/403 is up; it wants a (per-principal) credential.
    return e instanceof UpstreamAuthError;
  }
}

/** One list method's last outcome on one upstream as /readyz shows it (times ISO 8601). */
export interface ListOutcomeView {
  outcome: "ok" | "failing";
  reason?: string;
  detail?: string;
  /** Since when it has been so: the first failure of the current run of failures, or the first success after one. */
  since: string;
  /** When it was last seen so. */
  at: string;
}

export interface Readiness {
  /** Whether the gateway can serve: no upstream configured, or at least one reachable (HTTP 200; else 503). */
  ok: boolean;
  /** `ready`: every upstream reachable and no list failing; `degraded`: some are not, the gateway still serves the others; `unavailable`: none is reachable. */
  status: "ready" | "degraded" | "unavailable";
  upstreams: {
    name: string;
    /** The probe's verdict (cached ≤ 2 s). */
    ok: boolean;
    /** By list method, the last outcome this isolate saw (lists answered by other isolates are not in it). */
    last_list_in_this_isolate: Record<string, ListOutcomeView>;
  }[];
}

function view(o: ListOutcome): ListOutcomeView {
  const times = { since: new Date(o.since).toISOString(), at: new Date(o.at).toISOString() };
  return o.outcome === "ok" ? { outcome: "ok", ...times } : { outcome: "failing", reason: o.reason ?? "unavailable", detail: o.detail ?? "", ...times };
}

/**
 * Each upstream's reachability (one probe each, cached READY_TTL_MS) and the last outcome of each
 * of its lists in this isolate. One unreachable upstream among several leaves the gateway `ok`
 * (serving the others, `degraded`); only when none is reachable is it not.
 */
export async function readiness(cfg: GatewayConfig): Promise<Readiness> {
  const key = cfg.upstreams.map((u) => u.name + u.url).join("|");
  let up: boolean[];
  if (probeCache && probeCache.key === key && Date.now() - probeCache.at < READY_TTL_MS) up = probeCache.up;
  else {
    up = await Promise.all(cfg.upstreams.map(probe));
    probeCache = { at: Date.now(), key, up };
  }
  const upstreams = cfg.upstreams.map((u, i) => {
    const lists: Record<string, ListOutcomeView> = {};
    for (const [method, o] of Object.entries(listOutcomes(u)).sort(([a], [b]) => a.localeCompare(b))) lists[method] = view(o);
    return { name: u.name, ok: up[i]!, last_list_in_this_isolate: lists };
  });
  const ok = upstreams.length === 0 || upstreams.some((u) => u.ok);
  const failing = upstreams.some((u) => !u.ok || Object.values(u.last_list_in_this_isolate).some((l) => l.outcome === "failing"));
  return { ok, status: !ok ? "unavailable" : failing ? "degraded" : "ready", upstreams };
}

/**
 * Tool names each upstream listed, per credential scope, kept READY_TTL_MS: /summary hits do not
 * each list upstream. Only settled listings are kept (a request that finds none fresh lists for
 * itself: Workers never settles for one request a promise whose request has ended).
 */
const MAX_LISTINGS = 256;
const listings = new Memo<string, { names: string[] | null }>({ max: MAX_LISTINGS, ttlMs: READY_TTL_MS });

/** Every tool name `up` lists (null when it cannot be listed), from the cache when fresh. */
async function listedNames(up: UpstreamConfig, sub: string): Promise<string[] | null> {
  const scope = up.credentials.mode === "per_principal" || up.credentials.mode === "oauth" ? `p:${sub}` : "shared";
  const key = `${up.name}\u0000${up.url}\u0000${scope}`;
  const hit = listings.get(key);
  if (hit) return hit.names;
  // Its age counts from when the listing started.
  const at = Date.now();
  const names = await listTools(up, sub);
  listings.set(key, { names }, { at });
  return names;
}

/** Every tool name `up` lists to the gateway under `sub`'s credential scope, read now (null when it cannot be listed). */
export async function listTools(up: UpstreamConfig, sub: string): Promise<string[] | null> {
  try {
    const rec = await modernClientLeg(up, sub);
    if (!rec.leg) return null;
    const names: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 50; page++) {
      const params: JsonObject = rec.leg.era === "modern" ? { _meta: modernMeta({}) } : {};
      if (cursor) params.cursor = cursor;
      const { response } = await callUpstream(up, rec.leg, { jsonrpc: "2.0", id: upstreamRequestId(), method: "tools/list", params });
      const r = response.result;
      if (!isObject(r) || !Array.isArray(r.tools)) break;
      for (const t of r.tools) if (isObject(t) && typeof t.name === "string") names.push(t.name);
      if (typeof r.nextCursor !== "string" || !r.nextCursor) break;
      cursor = r.nextCursor;
    }
    return names;
  } catch {
    return null;
  }
}

/**
 * Each upstream of the per-request config with the number of its tools the caller can list:
 * those the upstream's allow/deny let through and whose exposed name the principal's grant
 * matches — the same filter tools/list applies. With `byGrant: false` it counts every tool
 * allow/deny let through: the operator's view of the upstreams (`portcullis.upstreams`).
 * What each upstream lists is cached READY_TTL_MS (per credential scope); the grant filter runs per call.
 */
export async function summary(cfg: GatewayConfig, principal: Principal, byGrant = true) {
  const visible = (up: UpstreamConfig, name: string): boolean => toolAllowed(up, name) && (!byGrant || grantAllowsTool(principal, exposeName(up, name)));
  const upstreams = await Promise.all(
    cfg.upstreams.map(async (up) => {
      const names = await listedNames(up, principal.sub);
      const tools = names === null ? null : names.filter((n) => visible(up, n)).length;
      return { name: up.name, description: up.description ?? null, namespaced: up.namespaced, tools };
    }),
  );
  return { upstreams };
}
