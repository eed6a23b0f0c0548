/**
 * The tool catalog: per upstream, every tool's schemas, annotations and schema hash, shared by
 * tools/list (which refreshes it with what the upstream listed) and tools/call (which resolves
 * exposed names from it, aliased names included, in any isolate — a miss fills it on demand).
 * Entries live per isolate for CATALOG_TTL_MS and are dropped when the upstream says its tool
 * list changed. Only settled entries are shared between requests: a request that finds none
 * fresh reads the list itself, through its own leg, and the read that lands is kept — no read in
 * flight is shared, because Workers never settles for one request a promise whose request has
 * ended. Keyed by upstream, URL, client era and — for `per_principal` credentials, which can
 * change what an upstream lists — the principal, so one principal's tools never resolve for
 * another. Entries are keyed by governed name (exposed-names.ts: the name /mcp exposes), so /mcp and
 * `/mcp/<upstream>` share one catalog and governance resolves the same name on both.
 * Must never: resolve a name from another credential scope's list, resolve a name of an upstream
 * the request does not serve, or serve an entry past its TTL.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { type CatalogTool, catalogEntry, type ToolCatalog } from "../governance/catalog-entry.ts";
import { CatalogUnreadable } from "../governance/steps.ts";
import { type Json, type JsonObject, isObject } from "../wire/jsonrpc.ts";
import type { CallContext } from "../protocol/call-context.ts";
import { callLeg } from "./forward.ts";
import { governedName, type RouteView, splitGoverned } from "../protocol/exposed-names.ts";
import { cached, credentialScope, type Entry, store } from "./catalog-cache.ts";
import { capabilitiesKey } from "./rounds.ts";
import { modernMeta } from "./client.ts";

const CATALOG_TTL_MS = 30_000;
/** A name the catalog does not know triggers one refill, at most this often per key. */
const MISS_REFILL_MS = 1000;
const MAX_PAGES = 50;

function keyOf(ctx: CallContext, up: UpstreamConfig): string {
  const scope = credentialScope(up, ctx.principal);
  // Its naming is part of the key: a reload that prefixes an upstream does not serve the old names.
  // So are the client's relayable capabilities: a legacy upstream may list tools only to sessions that declared them.
  const caps = capabilitiesKey(ctx.clientCapabilities ?? {});
  return `${up.name}\u0000${up.url}\u0000${up.namespaced}\u0000${ctx.era}\u0000${scope}\u0000${caps}`;
}

function build(up: UpstreamConfig, listed: Json[], route: RouteView | undefined): Map<string, CatalogTool> {
  const tools = new Map<string, CatalogTool>();
  for (const t of listed) {
    if (!isObject(t) || typeof t.name !== "string") continue;
    const entry = catalogEntry(t, governedName(up, t.name, route));
    if (entry) tools.set(entry.exposedName, entry);
  }
  return tools;
}

/** Reads every page of the upstream's tools/list through this caller's leg (nothing is relayed to the client). */
async function fetchTools(ctx: CallContext, up: UpstreamConfig): Promise<Json[]> {
  const quiet: CallContext = { ...ctx, paramHeaders: [], relay: { send: async () => undefined, upstreamRequest: async () => undefined } };
  const items: Json[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const params: JsonObject = ctx.era === "modern" ? { _meta: modernMeta({}) } : {};
    if (cursor !== undefined) params.cursor = cursor;
    const leg = await callLeg(quiet, up, { jsonrpc: "2.0", id: `portcullis-catalog-${crypto.randomUUID()}`, method: "tools/list", params });
    if (leg.kind !== "answered") throw new CatalogUnreadable(up.name, leg);
    const r = leg.response.result;
    if (!isObject(r) || !Array.isArray(r.tools)) {
      throw new Error(`upstream ${up.name} answered tools/list without a tool list${leg.response.error ? ` (${leg.response.error.message})` : ""}`);
    }
    items.push(...r.tools);
    if (typeof r.nextCursor !== "string" || r.nextCursor === "") break;
    cursor = r.nextCursor;
  }
  return items;
}

/** Reads the list through this caller's leg and keeps it (the newest read to land wins). */
async function fill(ctx: CallContext, up: UpstreamConfig, key: string): Promise<Entry> {
  const tools = build(up, await fetchTools(ctx, up), ctx.route);
  return store(key, { at: Date.now(), tools });
}

async function current(ctx: CallContext, up: UpstreamConfig, key: string): Promise<Entry> {
  const e = cached(key);
  if (e && Date.now() - e.at < CATALOG_TTL_MS) return e;
  return fill(ctx, up, key);
}

/** The catalog as this caller sees it: its upstreams, its era, its credentials; names are governed names. */
export function toolCatalog(ctx: CallContext): ToolCatalog {
  return {
    async resolve(governed) {
      const target = splitGoverned(ctx.cfg.upstreams, governed, ctx.route);
      if (!target) return null;
      const up = target.up;
      const key = keyOf(ctx, up);
      let e = await current(ctx, up, key);
      let tool = e.tools.get(governed);
      if (!tool && Date.now() - e.at >= MISS_REFILL_MS) {
        e = await fill(ctx, up, key);
        tool = e.tools.get(governed);
      }
      return tool ? { upstream: up, tool } : null;
    },
  };
}

/** A complete tools/list the gateway just read from `up` for this caller refreshes its catalog entry. */
export function rememberTools(ctx: CallContext, up: UpstreamConfig, listed: Json[]): void {
  store(keyOf(ctx, up), { at: Date.now(), tools: build(up, listed, ctx.route) });
}
