/**
 * List aggregation: tools/list, prompts/list, resources/list and resources/templates/list
 * across every configured upstream, with exposed names and grant/allow-deny filtering.
 * Owns: paging through each upstream (the page walk skills/list shares, see skills.ts), renaming
 * (prefixed upstreams' names, beside at most one transparent upstream's own, exposed-names.ts),
 * filtering, the modern caching hints, and handing every complete tools/list to the tool
 * catalog (catalog.ts) so tools/call resolves from what was listed; hiding what policy denies
 * unconditionally, and adding the gateway's agent tools the grant covers; and the upstreams a list
 * went without (unreachable, timed out, an HTTP error, an invalid answer: unavailable.ts): the
 * others' list is answered with each gap under `_meta["portcullis/unavailable"]`, and when no
 * upstream the route reaches answered — one upstream, or `/mcp/<upstream>` — a JSON-RPC error
 * naming it and its reason, never an empty list; each gap logged and noted for /readyz.
 * Must never: touch any field of a tool, prompt or resource other than its name/uri (schemas
 * pass verbatim), list a tool the caller cannot call, answer an empty list for an upstream that
 * did not answer, or change what a transparent upstream that answers its list gets through.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { forwardList, type ListAnswer } from "../upstream/forward.ts";
import { ErrorCode, errorResponse, type Json, type JsonObject, type JsonRpcRequest, isObject } from "../wire/jsonrpc.ts";
import { gapJson, listAnswerProblem, logListGap, noteListOutcome, type Unavailable } from "../upstream/unavailable.ts";
import { grantAllowsTool, grantReachesUpstream } from "../governance/grant-scope.ts";
import { exposeName, exposeUri, governedName, shadowed } from "../protocol/exposed-names.ts";
import { toolAllowed } from "../governance/grant-scope.ts";
import { rememberTools } from "../upstream/tool-catalog.ts";
import { watchPolicy } from "../services/policy-watch.ts";
import { agentTools } from "./agent-tools.ts";
import { catalogEntry } from "../governance/catalog-entry.ts";
import { classifyTool } from "../governance/classify.ts";
import { mappingsOf, policyEngine } from "../governance/engine.ts";

type ListKind = { method: string; key: string; capability: string };
export const LISTS: Record<string, ListKind> = {
  "tools/list": { method: "tools/list", key: "tools", capability: "tools" },
  "prompts/list": { method: "prompts/list", key: "prompts", capability: "prompts" },
  "resources/list": { method: "resources/list", key: "resources", capability: "resources" },
  "resources/templates/list": { method: "resources/templates/list", key: "resourceTemplates", capability: "resources" },
};

function renameItem(ctx: CallContext, kind: ListKind, up: UpstreamConfig, item: Json): Json | null {
  if (!isObject(item)) return item;
  if (kind.key === "tools") {
    if (typeof item.name !== "string" || !toolAllowed(up, item.name) || shadowed(ctx.cfg.upstreams, up, item.name, "name")) return null;
    const exposed = exposeName(up, item.name);
    // The grant and the policy judge the governed name (on /mcp/<upstream>: the one /mcp shows).
    const governed = governedName(up, item.name, ctx.route);
    if (!grantAllowsTool(ctx.principal, governed)) return null;
    if (!policyLists(ctx, up, item, governed)) return null;
    return exposed === item.name ? item : { ...item, name: exposed };
  }
  if (!grantReachesUpstream(ctx.principal, up)) return null;
  if (!up.namespaced) return shadowedItem(ctx.cfg.upstreams, up, kind, item) ? null : item;
  if (kind.key === "prompts" && typeof item.name === "string") return { ...item, name: exposeName(up, item.name, Number.POSITIVE_INFINITY) };
  if (kind.key === "resources" && typeof item.uri === "string") return { ...item, uri: exposeUri(up, item.uri) };
  if (kind.key === "resourceTemplates" && typeof item.uriTemplate === "string") return { ...item, uriTemplate: exposeUri(up, item.uriTemplate) };
  return item;
}

/** A transparent upstream's prompt or resource whose own name or URI reads as a prefixed upstream's (exposed-names.ts `shadowed`). */
function shadowedItem(ups: readonly UpstreamConfig[], up: UpstreamConfig, kind: ListKind, item: JsonObject): boolean {
  if (kind.key === "prompts") return typeof item.name === "string" && shadowed(ups, up, item.name, "name");
  const uri = kind.key === "resources" ? item.uri : item.uriTemplate;
  return typeof uri === "string" && shadowed(ups, up, uri, "uri");
}

/**
 * Lists follow policy: a tool the policy denies this caller unconditionally (a deny rule with no
 * condition, history, magnitude or window, in enforce) is not listed; anything whose outcome
 * depends on the call is listed and decided at call time. Classified only when the policy can hide.
 */
function policyLists(ctx: CallContext, up: UpstreamConfig, item: JsonObject, governed: string): boolean {
  const policy = policyEngine(ctx.cfg);
  if (!policy.mayHide) return true;
  const tool = catalogEntry(item, governed);
  if (!tool) return true;
  const target = { upstream: up, tool };
  return policy.listed(ctx.principal, target, classifyTool(target, mappingsOf(ctx.cfg)));
}

/** The gateway's agent tools the caller's grant covers (agent-tools.ts) go at the end of a complete tools/list (the last page). */
function withAgentTools(ctx: CallContext, kind: ListKind, items: Json[], lastPage: boolean): Json[] {
  if (kind.key !== "tools" || !lastPage) return items;
  const own = agentTools(ctx.cfg, ctx.principal);
  return own.length ? [...items, ...own] : items;
}

export function stampCache(ctx: CallContext, result: JsonObject, ttls: number[], scopes: string[]): JsonObject {
  if (ctx.era !== "modern") return result;
  const ttl = ttls.length ? Math.max(0, Math.min(...ttls)) : 0;
  const scope = ctx.callerFiltered || scopes.includes("private") || scopes.length === 0 ? "private" : "public";
  return { ...result, ttlMs: ttl, cacheScope: scope, resultType: result.resultType ?? "complete" };
}

const MAX_PAGES = 50;

/** Every page of one upstream's list, each item mapped (null drops it), with the pages' caching hints. */
export interface Pages {
  items: Json[];
  ttls: number[];
  scopes: string[];
  /** The walk reached the last page (or the upstream lists none of these: Method not found). */
  complete: boolean;
  /** Why the walk stopped before the last page: the upstream gave no usable answer (unavailable.ts). */
  failure?: Unavailable;
}

/** The forwarder of one list page (a seam for tests): the answer, or why there was none. */
export type PageSend = (ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest) => Promise<ListAnswer>;

/**
 * Walks every page (at most MAX_PAGES) of list method `msg.method` on `up`, items under `key`.
 * An upstream that gives no usable answer — unreachable, timed out, an HTTP error, an error or a
 * page without the list — ends the walk with what was gathered and the reason (`failure`); one
 * that answers Method not found lists none of these (complete, empty).
 */
export async function allPages(
  ctx: CallContext,
  up: UpstreamConfig,
  msg: JsonRpcRequest,
  key: string,
  map: (item: Json) => Json | null,
  send: PageSend = forwardList,
): Promise<Pages> {
  const pages: Pages = { items: [], ttls: [], scopes: [], complete: false };
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const params: JsonObject = { ...(msg.params ?? {}) };
    if (cursor !== undefined) params.cursor = cursor;
    else delete params.cursor;
    // The page goes upstream under an id of its own (forward.ts); nothing is derived from the client's id.
    const got = await send(ctx, up, { jsonrpc: "2.0", id: msg.id, method: msg.method, params });
    if ("failed" in got) {
      pages.failure = got.failed;
      return pages;
    }
    const problem = listAnswerProblem(up, msg.method, got.answered.response, key);
    if (problem === "none" && page === 0) {
      pages.complete = true;
      return pages;
    }
    if (problem !== null) {
      pages.failure =
        problem === "none"
          ? { upstream: up.name, reason: "error_answer", code: -32601, detail: `answered a later page of ${msg.method} with Method not found` }
          : problem;
      return pages;
    }
    const r = got.answered.response.result as JsonObject;
    if (typeof r.ttlMs === "number") pages.ttls.push(r.ttlMs);
    if (typeof r.cacheScope === "string") pages.scopes.push(r.cacheScope);
    for (const i of r[key] as Json[]) {
      const mapped = map(i);
      if (mapped !== null) pages.items.push(mapped);
    }
    if (typeof r.nextCursor !== "string" || r.nextCursor === "") {
      pages.complete = true;
      break;
    }
    cursor = r.nextCursor;
  }
  return pages;
}

/**
 * One `tools.listed` record per tools/list: the names shown, and those the grant, the policy or the
 * upstream's allow/deny hid — governed names (on /mcp/<upstream> the ones /mcp would show), so the
 * record reads the same whichever path listed.
 */
function recordListing(ctx: CallContext, listedBy: (readonly [UpstreamConfig, Json[]])[], shownItems: Json[], complete: boolean): void {
  // Every upstream's whole list in hand: the policy is checked against the real tools (reported, never blocking).
  watchPolicy(ctx, listedBy, complete);
  const seen = new Set(shownItems.flatMap((t) => (isObject(t) && typeof t.name === "string" ? [t.name] : [])));
  const shown: string[] = [];
  const hidden: string[] = [];
  for (const [up, raw] of listedBy) {
    for (const t of raw) {
      if (!isObject(t) || typeof t.name !== "string") continue;
      const listed = seen.has(exposeName(up, t.name)) && !shadowed(ctx.cfg.upstreams, up, t.name, "name");
      (listed ? shown : hidden).push(governedName(up, t.name, ctx.route));
    }
  }
  ctx.stores.ledger.listed(shown, hidden);
}

/** The `_meta` key (on a list result) and `data` key (on the error) naming the upstreams a list went without. */
export const UNAVAILABLE_META = "portcullis/unavailable";

/**
 * Reports the upstreams `method` went without: one log line each, and each upstream's outcome
 * for /readyz (those that answered: ok). `answered` says what the client gets.
 */
function reportGaps(
  ctx: CallContext,
  method: string,
  answeredBy: UpstreamConfig[],
  gaps: [UpstreamConfig, Unavailable][],
  answered: "without_it" | "error",
): void {
  for (const up of answeredBy) noteListOutcome(up, method, null);
  for (const [up, g] of gaps) {
    noteListOutcome(up, method, g);
    logListGap(method, g, { principal: ctx.principal.sub, ...(ctx.route ? { route: ctx.route.upstream } : {}) }, answered);
  }
}

/**
 * The answer when no upstream the route reaches answered the list: a JSON-RPC error naming each
 * and its reason (an empty list would read as "this server has no tools"), the gaps in `data`.
 */
function unavailableAnswer(msg: JsonRpcRequest, gaps: Unavailable[]): Outcome {
  // `unreachable (…)` already says its kind; anything else gets it in front.
  const why = (g: Unavailable) => (g.detail.startsWith(`${g.reason} (`) ? g.detail : `${g.reason} (${g.detail})`);
  const message =
    gaps.length === 1
      ? `upstream ${gaps[0]!.upstream} did not answer ${msg.method}: ${why(gaps[0]!)}`
      : `no upstream answered ${msg.method}: ${gaps.map((g) => `${g.upstream}: ${why(g)}`).join("; ")}`;
  const response = errorResponse(msg.id, ErrorCode.InternalError, message);
  response.error!.data = { [UNAVAILABLE_META]: gaps.map(gapJson) };
  return { response, status: 200 };
}

export async function aggregateList(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const kind = LISTS[msg.method]!;
  const ups = ctx.cfg.upstreams;
  // One transparent upstream: forward the page as is (cursor included), filter and stamp.
  if (ups.length === 1 && !ups[0]!.namespaced) {
    const up = ups[0]!;
    const got = await forwardList(ctx, up, msg);
    if ("failed" in got) {
      reportGaps(ctx, msg.method, [], [[up, got.failed]], "error");
      return unavailableAnswer(msg, [got.failed]);
    }
    const out = got.answered;
    const r = out.response.result;
    // An error the upstream answered passes as it is (a bad cursor is the client's, Method not found its own answer).
    if (out.response.error) return out;
    if (!isObject(r) || !Array.isArray(r[kind.key])) {
      const problem = listAnswerProblem(up, msg.method, out.response, kind.key) as Unavailable;
      reportGaps(ctx, msg.method, [], [[up, problem]], "error");
      return unavailableAnswer(msg, [problem]);
    }
    reportGaps(ctx, msg.method, [up], [], "without_it");
    const listed = r[kind.key] as Json[];
    const whole = typeof msg.params?.cursor !== "string" && (typeof r.nextCursor !== "string" || r.nextCursor === "");
    if (kind.key === "tools" && whole) rememberTools(ctx, up, listed);
    const filtered = listed.map((i) => renameItem(ctx, kind, up, i)).filter((i): i is Json => i !== null);
    if (kind.key === "tools") recordListing(ctx, [[up, listed]], filtered, whole);
    const items = withAgentTools(ctx, kind, filtered, typeof r.nextCursor !== "string" || r.nextCursor === "");
    const ttls = typeof r.ttlMs === "number" ? [r.ttlMs] : [];
    const scopes = typeof r.cacheScope === "string" ? [r.cacheScope] : [];
    return { ...out, response: { ...out.response, result: stampCache(ctx, { ...r, [kind.key]: items }, ttls, scopes) } };
  }
  if (msg.params && typeof msg.params.cursor === "string") {
    // Aggregated lists are returned whole, so no cursor the gateway issued can exist.
    return {
      response: { jsonrpc: "2.0", id: msg.id, error: { code: -32602, message: "Invalid params: unknown cursor" } },
      status: ctx.era === "modern" ? 400 : 200,
    };
  }
  const ttls: number[] = [];
  const scopes: string[] = [];
  const perUpstream = await Promise.all(
    ups.map(async (up) => {
      // `asked`: the upstream had its say (it declared no such capability, or its list was read); `walked`: its list was read.
      const none = { up, raw: [] as Json[], items: [] as Json[], complete: false, failure: undefined as Unavailable | undefined, asked: false, walked: false };
      if (!grantReachesUpstream(ctx.principal, up)) return none;
      const caps = await ctx.legs.capabilities(up).catch(() => undefined);
      // An upstream that declares no tools has none: its empty list is complete.
      if (caps && !isObject(caps[kind.capability])) return { ...none, complete: true, asked: true };
      const raw: Json[] = [];
      const pages = await allPages(ctx, up, msg, kind.key, (i) => {
        raw.push(i);
        return renameItem(ctx, kind, up, i);
      });
      if (kind.key === "tools" && pages.complete) rememberTools(ctx, up, raw);
      ttls.push(...pages.ttls);
      scopes.push(...pages.scopes);
      return { up, raw, items: pages.items, complete: pages.complete, failure: pages.failure, asked: true, walked: true };
    }),
  );
  const gaps = perUpstream.flatMap((p) => (p.failure ? [[p.up, p.failure] as [UpstreamConfig, Unavailable]] : []));
  // No upstream the route reaches answered (one upstream: it did not): an error naming each, never an empty list.
  if (gaps.length > 0 && !perUpstream.some((p) => p.asked && !p.failure)) {
    reportGaps(ctx, msg.method, [], gaps, "error");
    return unavailableAnswer(
      msg,
      gaps.map(([, g]) => g),
    );
  }
  reportGaps(
    ctx,
    msg.method,
    perUpstream.filter((p) => p.walked && !p.failure).map((p) => p.up),
    gaps,
    "without_it",
  );
  const items = perUpstream.flatMap((p) => p.items);
  if (kind.key === "tools")
    recordListing(
      ctx,
      perUpstream.map((p) => [p.up, p.raw] as const),
      items,
      perUpstream.every((p) => p.complete),
    );
  const result: JsonObject = { [kind.key]: withAgentTools(ctx, kind, items, true) };
  if (gaps.length > 0) {
    // The others' list, and the gap named: nothing to keep (ttl 0) until every upstream answers.
    result._meta = { [UNAVAILABLE_META]: gaps.map(([, g]) => gapJson(g)) };
    ttls.push(0);
  }
  return { response: { jsonrpc: "2.0", id: msg.id, result: stampCache(ctx, result, ttls, scopes) }, status: 200 };
}
