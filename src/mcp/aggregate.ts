/**
 * List aggregation: tools/list, prompts/list, resources/list and resources/templates/list
 * across every configured upstream, with exposed names and grant/allow-deny filtering.
 * Owns: paging through each upstream, renaming, filtering, the modern caching hints, and the
 * per-isolate tool catalog used to resolve aliased tool names. Must never: touch any field of a
 * tool, prompt or resource other than its name/uri (schemas pass verbatim), or list a tool
 * the caller cannot call.
 */
import type { UpstreamConfig } from "../config/load.ts";
import type { CallContext, Outcome } from "./context.ts";
import { forward } from "./forward.ts";
import { type Json, type JsonObject, type JsonRpcRequest, isObject } from "../wire/jsonrpc.ts";
import { grantAllowsTool, grantReachesUpstream } from "../governance/grant-scope.ts";
import { exposeName, exposeUri } from "./names.ts";
import { toolAllowed } from "../governance/grant-scope.ts";

type ListKind = { method: string; key: string; capability: string };
export const LISTS: Record<string, ListKind> = {
  "tools/list": { method: "tools/list", key: "tools", capability: "tools" },
  "prompts/list": { method: "prompts/list", key: "prompts", capability: "prompts" },
  "resources/list": { method: "resources/list", key: "resources", capability: "resources" },
  "resources/templates/list": { method: "resources/templates/list", key: "resourceTemplates", capability: "resources" },
};

/** exposed name → upstream tool name, per upstream (only aliased names need it). */
const aliases = new Map<string, Map<string, string>>();

export function resolveAlias(up: UpstreamConfig, afterPrefix: string): string {
  return aliases.get(up.name)?.get(afterPrefix) ?? afterPrefix;
}

function renameItem(ctx: CallContext, kind: ListKind, up: UpstreamConfig, item: Json): Json | null {
  if (!isObject(item)) return item;
  if (kind.key === "tools") {
    if (typeof item.name !== "string" || !toolAllowed(up, item.name)) return null;
    const exposed = exposeName(up, item.name);
    if (!grantAllowsTool(ctx.who, exposed)) return null;
    if (up.namespaced && exposed !== `${up.name}__${item.name}`) {
      const m = aliases.get(up.name) ?? new Map<string, string>();
      m.set(exposed.slice(up.name.length + 2), item.name);
      aliases.set(up.name, m);
    }
    return exposed === item.name ? item : { ...item, name: exposed };
  }
  if (!grantReachesUpstream(ctx.who, up)) return null;
  if (!up.namespaced) return item;
  if (kind.key === "prompts" && typeof item.name === "string") return { ...item, name: exposeName(up, item.name, Number.POSITIVE_INFINITY) };
  if (kind.key === "resources" && typeof item.uri === "string") return { ...item, uri: exposeUri(up, item.uri) };
  if (kind.key === "resourceTemplates" && typeof item.uriTemplate === "string") return { ...item, uriTemplate: exposeUri(up, item.uriTemplate) };
  return item;
}

function stampCache(ctx: CallContext, result: JsonObject, ttls: number[], scopes: string[]): JsonObject {
  if (ctx.era !== "modern") return result;
  const ttl = ttls.length ? Math.max(0, Math.min(...ttls)) : 0;
  const scope = ctx.callerFiltered || scopes.includes("private") || scopes.length === 0 ? "private" : "public";
  return { ...result, ttlMs: ttl, cacheScope: scope, resultType: result.resultType ?? "complete" };
}

const MAX_PAGES = 50;

export async function aggregateList(ctx: CallContext, req: JsonRpcRequest): Promise<Outcome> {
  const kind = LISTS[req.method]!;
  const ups = ctx.cfg.upstreams;
  // One transparent upstream: forward the page as is (cursor included), filter and stamp.
  if (ups.length === 1 && !ups[0]!.namespaced) {
    const up = ups[0]!;
    const out = await forward(ctx, up, req);
    const r = out.response.result;
    if (!isObject(r) || !Array.isArray(r[kind.key])) return out;
    const items = (r[kind.key] as Json[]).map((i) => renameItem(ctx, kind, up, i)).filter((i): i is Json => i !== null);
    const ttls = typeof r.ttlMs === "number" ? [r.ttlMs] : [];
    const scopes = typeof r.cacheScope === "string" ? [r.cacheScope] : [];
    return { ...out, response: { ...out.response, result: stampCache(ctx, { ...r, [kind.key]: items }, ttls, scopes) } };
  }
  if (req.params && typeof req.params.cursor === "string") {
    // Aggregated lists are returned whole, so no cursor the gateway issued can exist.
    return { response: { jsonrpc: "2.0", id: req.id, error: { code: -32602, message: "Invalid params: unknown cursor" } }, status: ctx.era === "modern" ? 400 : 200 };
  }
  const ttls: number[] = [];
  const scopes: string[] = [];
  const perUpstream = await Promise.all(ups.map(async (up) => {
    if (!grantReachesUpstream(ctx.who, up)) return [] as Json[];
    const caps = await ctx.capabilities(up).catch(() => undefined);
    if (caps && !isObject(caps[kind.capability])) return [] as Json[];
    const items: Json[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const params: JsonObject = { ...(req.params ?? {}) };
      if (cursor !== undefined) params.cursor = cursor;
      else delete params.cursor;
      let out: Outcome;
      try {
        out = await forward(ctx, up, { jsonrpc: "2.0", id: `${String(req.id)}:${up.name}:${page}`, method: req.method, params });
      } catch {
        return items; // an unreachable upstream contributes nothing; /readyz reports it
      }
      const r = out.response.result;
      if (!isObject(r) || !Array.isArray(r[kind.key])) return items;
      if (typeof r.ttlMs === "number") ttls.push(r.ttlMs);
      if (typeof r.cacheScope === "string") scopes.push(r.cacheScope);
      for (const i of r[kind.key] as Json[]) {
        const renamed = renameItem(ctx, kind, up, i);
        if (renamed !== null) items.push(renamed);
      }
      if (typeof r.nextCursor !== "string" || r.nextCursor === "") break;
      cursor = r.nextCursor;
    }
    return items;
  }));
  const result: JsonObject = { [kind.key]: perUpstream.flat() };
  return { response: { jsonrpc: "2.0", id: req.id, result: stampCache(ctx, result, ttls, scopes) }, status: 200 };
}
