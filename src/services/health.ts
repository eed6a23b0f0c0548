/**
 * /readyz and /summary: upstream reachability (cached ≤ 2 s) and a schema-free catalogue whose
 * tool counts are what the caller can list (upstream listings cached ≤ 2 s); the uncached tool
 * names of one upstream (`listTools`, the reload's policy check, policy-live.ts). Owns the probe (one `server/discover` POST: any
 * JSON-RPC answer means the upstream is up) and that count. Must never: include tool schemas or
 * upstream credentials in what it returns, or count a tool the caller could not list.
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

let readyCache: { at: number; key: string; body: { ok: boolean; upstreams: { name: string; ok: boolean }[] } } | null = null;
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

export async function readiness(cfg: GatewayConfig) {
  const key = cfg.upstreams.map((u) => u.name + u.url).join("|");
  if (readyCache && readyCache.key === key && Date.now() - readyCache.at < READY_TTL_MS) return readyCache.body;
  const upstreams = await Promise.all(cfg.upstreams.map(async (u) => ({ name: u.name, ok: await probe(u) })));
  const body = { ok: upstreams.every((u) => u.ok), upstreams };
  readyCache = { at: Date.now(), key, body };
  return body;
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
  const scope = up.credentials.mode === "per_principal" ? `p:${sub}` : "shared";
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
