/**
 * The skills extension (SEP-2640, `io.modelcontextprotocol/skills`) across several upstreams, and
 * which extensions the gateway advertises when it aggregates. Owns: `skills/list` aggregated over
 * every upstream that declares the extension and the caller's grant reaches (all pages of each,
 * returned whole), `skills/get` and `resources/directory/read` routed by namespaced URI
 * (`<upstream>+<uri>`, as resources are) with every URI in the answer mapped back, the caching
 * fields a 2026-07-28 client needs on those results, and the merged extension settings.
 * With one transparent upstream everything passes verbatim. Must never: advertise an extension
 * or setting the gateway cannot serve, forward a skills request to an upstream that did not
 * declare the extension (or a directory read to one without `directoryRead`), or list skills of
 * an upstream the caller's grant does not reach. Skill files themselves are resources:
 * `resources/read` of `<upstream>+skill://…` goes through dispatch.ts's URI routing.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { type Json, type JsonObject, type JsonRpcRequest, ErrorCode, errorResponse, isObject } from "../wire/jsonrpc.ts";
import { allPages, stampCache } from "./aggregate.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { forward } from "../upstream/forward.ts";
import { exposeUri, splitUri } from "../protocol/exposed-names.ts";
import { SKILLS_EXTENSION } from "../protocol/extensions.ts";

/** The forwarder (a seam for unit tests). */
export type Send = typeof forward;

/** The skills extension settings an upstream declared, or undefined when it declared none. */
function skillsCapability(caps: JsonObject | undefined): JsonObject | undefined {
  const ext = caps?.extensions;
  if (!isObject(ext)) return undefined;
  const s = ext[SKILLS_EXTENSION];
  return isObject(s) ? s : undefined;
}

/** A skill entry as the client sees it: its `uri` and every `resources[].uri` namespaced. */
export function exposeSkill(up: UpstreamConfig, skill: Json): Json {
  if (!up.namespaced || !isObject(skill)) return skill;
  const out: JsonObject = { ...skill };
  if (typeof skill.uri === "string") out.uri = exposeUri(up, skill.uri);
  // `resources` is a list of {uri, digest, size} or the string "dynamic" (kept as is).
  if (Array.isArray(skill.resources))
    out.resources = skill.resources.map((r) => (isObject(r) && typeof r.uri === "string" ? { ...r, uri: exposeUri(up, r.uri) } : r));
  return out;
}

function transparentUpstream(ctx: CallContext): UpstreamConfig | null {
  const ups = ctx.cfg.upstreams;
  return ups.length === 1 && !ups[0]!.namespaced ? ups[0]! : null;
}

/** An error answer; `modernStatus` is the HTTP status a 2026-07-28 client gets (legacy: 200), as in dispatch.ts. */
function fail(ctx: CallContext, msg: JsonRpcRequest, code: number, message: string, modernStatus: number, data?: JsonObject): Outcome {
  return { response: errorResponse(msg.id, code, message, data), status: ctx.era === "modern" ? modernStatus : 200 };
}

const methodNotFound = (ctx: CallContext, msg: JsonRpcRequest) => fail(ctx, msg, ErrorCode.MethodNotFound, `Method not found: ${msg.method}`, 404);

/**
 * 2026-07-28 results of skills/list, skills/get and resources/directory/read carry `ttlMs` and
 * `cacheScope`; a 2025-11-25 upstream gives none, so the conservative ones are stamped (as
 * forward.ts does for the core cacheable results). Present fields pass verbatim.
 */
function withCacheFields(ctx: CallContext, out: Outcome): Outcome {
  const r = out.response.result;
  if (ctx.era !== "modern" || !isObject(r) || r.ttlMs !== undefined) return out;
  return { ...out, response: { ...out.response, result: { ...r, ttlMs: 0, cacheScope: "private" } } };
}

/** One transparent upstream: the request as is, as any method reaches it (only the era's caching fields added). */
async function passThrough(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest, send: Send): Promise<Outcome> {
  if (!grantReachesUpstream(ctx.principal, up)) return methodNotFound(ctx, msg);
  return withCacheFields(ctx, await send(ctx, up, msg));
}

/** The upstreams whose skills this caller may list: reachable by the grant and declaring the extension. */
async function skillsUpstreams(ctx: CallContext): Promise<{ up: UpstreamConfig; settings: JsonObject }[]> {
  const found = await Promise.all(
    ctx.cfg.upstreams.map(async (up) => {
      if (!grantReachesUpstream(ctx.principal, up)) return null;
      const settings = skillsCapability(await ctx.legs.capabilities(up).catch(() => undefined));
      return settings ? { up, settings } : null;
    }),
  );
  return found.filter((f) => f !== null);
}

/** skills/list: every page of every skills upstream, entries namespaced, returned whole. */
export async function skillsList(ctx: CallContext, msg: JsonRpcRequest, send: Send = forward): Promise<Outcome> {
  const solo = transparentUpstream(ctx);
  if (solo) return passThrough(ctx, solo, msg, send);
  const serving = await skillsUpstreams(ctx);
  if (serving.length === 0) return methodNotFound(ctx, msg);
  if (msg.params && typeof msg.params.cursor === "string") {
    // The aggregate is returned whole, so no cursor the gateway issued can exist.
    return fail(ctx, msg, ErrorCode.InvalidParams, "Invalid params: unknown cursor", 400);
  }
  const ttls: number[] = [];
  const scopes: string[] = [];
  const per = await Promise.all(
    serving.map(async ({ up }) => {
      const pages = await allPages(
        ctx,
        up,
        msg,
        "skills",
        (s) => exposeSkill(up, s),
        async (c, u, m) => ({ answered: await send(c, u, m) }),
      );
      ttls.push(...pages.ttls);
      scopes.push(...pages.scopes);
      return pages.items;
    }),
  );
  const result: JsonObject = { skills: per.flat() };
  return { response: { jsonrpc: "2.0", id: msg.id, result: stampCache(ctx, result, ttls, scopes) }, status: 200 };
}

/** The upstream that owns a namespaced skill URI, if the caller may reach it and it serves skills. */
async function owner(ctx: CallContext, uri: string): Promise<{ up: UpstreamConfig; uri: string; settings: JsonObject } | null> {
  const t = splitUri(ctx.cfg.upstreams, uri);
  if (!t || !grantReachesUpstream(ctx.principal, t.up)) return null;
  const settings = skillsCapability(await ctx.legs.capabilities(t.up).catch(() => undefined));
  return settings ? { ...t, settings } : null;
}

function uriParam(msg: JsonRpcRequest): string | null {
  const uri = msg.params?.uri;
  return typeof uri === "string" ? uri : null;
}

/**
 * A skills request addressed by a namespaced URI: passed through verbatim to one transparent
 * upstream, else sent to the owning upstream (when `accepts` its settings) with the URI mapped.
 * Returns the outcome to answer as is, or the owner's answer for the caller to map back.
 */
async function byOwner(
  ctx: CallContext,
  msg: JsonRpcRequest,
  send: Send,
  accepts: (settings: JsonObject) => boolean,
  refusal: (uri: string) => string,
): Promise<{ done: Outcome } | { up: UpstreamConfig; out: Outcome; r: JsonObject | undefined }> {
  const solo = transparentUpstream(ctx);
  if (solo) return { done: await passThrough(ctx, solo, msg, send) };
  const uri = uriParam(msg);
  if (uri === null) return { done: fail(ctx, msg, ErrorCode.InvalidParams, `Invalid params: ${msg.method} needs a string uri`, 400) };
  const t = await owner(ctx, uri);
  if (!t || !accepts(t.settings)) return { done: fail(ctx, msg, ErrorCode.InvalidParams, refusal(uri), 200, { uri }) };
  // A cursor, if any, is the owning upstream's own: it round-trips untouched.
  const out = await send(ctx, t.up, { ...msg, params: { ...(msg.params ?? {}), uri: t.uri } });
  return { up: t.up, out, r: isObject(out.response.result) ? out.response.result : undefined };
}

/** skills/get: routed by the namespaced `SKILL.md` URI; the entry's URIs mapped back. */
export async function skillsGet(ctx: CallContext, msg: JsonRpcRequest, send: Send = forward): Promise<Outcome> {
  const o = await byOwner(
    ctx,
    msg,
    send,
    () => true,
    (uri) => `No skill is served at ${uri}`,
  );
  if ("done" in o) return o.done;
  if (!o.r || !isObject(o.r.skill)) return withCacheFields(ctx, o.out);
  return withCacheFields(ctx, { ...o.out, response: { ...o.out.response, result: { ...o.r, skill: exposeSkill(o.up, o.r.skill) } } });
}

/** resources/directory/read: routed by the namespaced directory URI to an upstream that declared `directoryRead`. */
export async function directoryRead(ctx: CallContext, msg: JsonRpcRequest, send: Send = forward): Promise<Outcome> {
  const o = await byOwner(
    ctx,
    msg,
    send,
    (s) => s.directoryRead === true,
    (uri) => `${uri} is not a directory resource`,
  );
  if ("done" in o) return o.done;
  if (!o.r || !Array.isArray(o.r.resources)) return withCacheFields(ctx, o.out);
  const up = o.up;
  const resources = o.r.resources.map((c) => (isObject(c) && typeof c.uri === "string" ? { ...c, uri: exposeUri(up, c.uri) } : c));
  return withCacheFields(ctx, { ...o.out, response: { ...o.out.response, result: { ...o.r, resources } } });
}
