/**
 * The 2026-07-28 front: stateless requests carrying `_meta`, SEP-2243 routing headers,
 * `server/discover`, removed methods, and the CallContext for modern clients.
 * Owns: the statuses and codes of the modern error table (-32602/400, -32020/400,
 * -32022/400, 404 + -32601) and per-request log gating. Must never: emit a server→client
 * request on a request's stream, or a notifications/message to a request without logLevel.
 */
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { dispatch } from "./dispatch.ts";

import { postUpstream } from "../upstream/client.ts";
import { ErrorCode, type JsonObject, type JsonRpcMessage, type JsonRpcRequest, errorResponse, isNotification, isObject, isRequest } from "../wire/jsonrpc.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { roundObject, runObject } from "../../durable-objects/object-names.ts";
import { applyLogLevel, mergeCapabilities, mergeInstructions, modernLegFor } from "../upstream/legs.ts";
import { listen } from "./listen.ts";
import { type StreamControl, respond } from "./respond.ts";
import type { UpstreamLegRecord } from "../../durable-objects/contract.ts";
import { routingName } from "../upstream/exchange.ts";
import { GATEWAY_INFO, META, MODERN_VERSION, REMOVED_IN_MODERN, SUPPORTED_VERSIONS } from "../protocol/versions.ts";
import { jsonResponse, refuse } from "../wire/http.ts";
import { callerStores } from "./caller-stores.ts";

/** Decodes a SEP-2243 header value (`=?base64?…?=` or literal); null when malformed. */
export function decodeHeaderValue(v: string): string | null {
  const t = v.trim();
  const m = /^=\?base64\?(.*)\?=$/.exec(t);
  if (!m) return t;
  const b64 = m[1]!;
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return null;
  try {
    const bin = atob(b64);
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(Uint8Array.from(bin, (c) => c.charCodeAt(0)));
  } catch {
    return null;
  }
}

function mismatch(id: JsonRpcRequest["id"] | null, what: string): Response {
  return refuse(400, ErrorCode.HeaderMismatch, `Header mismatch: ${what}`, id);
}

/** The checks of the modern error table, in the order the spec lists them. Null when all pass. */
export function checkModernRequest(req: Request, msg: JsonRpcRequest | { method: string; params?: JsonObject; id?: undefined }): Response | null {
  const id = msg.id ?? null;
  const meta = msg.params?._meta;
  if (!isObject(meta)) return refuse(400, ErrorCode.InvalidParams, "Invalid params: params._meta is required in the 2026-07-28 era", id);
  const version = meta[META.protocolVersion];
  if (typeof version !== "string") return refuse(400, ErrorCode.InvalidParams, `Invalid params: _meta["${META.protocolVersion}"] is required`, id);
  if (!isObject(meta[META.clientCapabilities]))
    return refuse(400, ErrorCode.InvalidParams, `Invalid params: _meta["${META.clientCapabilities}"] is required`, id);
  // Header/body agreement first: a request whose header and _meta disagree is malformed
  // whatever the version (conformance sep-2575-http-server-header-mismatch-400).
  const hv = req.headers.get("mcp-protocol-version");
  if (hv === null) return mismatch(id, "MCP-Protocol-Version header is required");
  if (hv.trim() !== version) return mismatch(id, `MCP-Protocol-Version header "${hv.trim()}" differs from _meta protocolVersion "${version}"`);
  if (version !== MODERN_VERSION) {
    return jsonResponse(
      errorResponse(id, ErrorCode.UnsupportedProtocolVersion, `Unsupported protocol version: ${version}`, { supported: [MODERN_VERSION], requested: version }),
      400,
    );
  }
  const hm = req.headers.get("mcp-method");
  if (hm === null) return mismatch(id, "Mcp-Method header is required");
  if (hm.trim() !== msg.method) return mismatch(id, `Mcp-Method header "${hm.trim()}" differs from the body method "${msg.method}"`);
  const name = routingName(msg.method, msg.params);
  const hn = req.headers.get("mcp-name");
  if (name !== undefined) {
    if (hn === null) return mismatch(id, `Mcp-Name header is required for ${msg.method}`);
    const decoded = decodeHeaderValue(hn);
    if (decoded === null) return mismatch(id, "Mcp-Name header is not valid base64 encoding");
    if (decoded !== name) return mismatch(id, `Mcp-Name header "${decoded}" differs from the body`);
  }
  for (const [k, v] of req.headers) {
    if (k.toLowerCase().startsWith("mcp-param-") && decodeHeaderValue(v) === null) return mismatch(id, `${k} header is not valid base64 encoding`);
  }
  return null;
}

export function modernContext(
  fc: FrontContext,
  req: Request,
  msg: JsonRpcRequest,
  runId: string | null,
  emit: (m: JsonRpcMessage) => Promise<void>,
  stream?: StreamControl,
): CallContext {
  const meta = isObject(msg.params?._meta) ? msg.params._meta : {};
  const rawLevel = meta[META.logLevel];
  const logLevel = typeof rawLevel === "string" ? rawLevel : undefined;
  const paramHeaders: [string, string][] = [];
  for (const [k, v] of req.headers) if (k.toLowerCase().startsWith("mcp-param-")) paramHeaders.push([k, v]);
  // A legacy-only upstream gets a session per set of the client's relayable capabilities, so it asks only what this client can answer.
  const caps = isObject(meta[META.clientCapabilities]) ? (meta[META.clientCapabilities] as JsonObject) : {};
  const legs = new Map<string, Promise<UpstreamLegRecord>>();
  const legRec = (name: string, p: () => Promise<UpstreamLegRecord>) => {
    let r = legs.get(name);
    if (!r) {
      r = p();
      legs.set(name, r);
    }
    return r;
  };
  return {
    cfg: fc.cfg,
    ...(fc.route ? { route: fc.route } : {}),
    era: "modern",
    principal: fc.principal,
    signal: req.signal,
    paramHeaders,
    callerFiltered: fc.principal.tools !== null,
    runId,
    ...(fc.trace ? { trace: fc.trace } : {}),
    ...(isObject(meta[META.clientCapabilities]) ? { clientCapabilities: meta[META.clientCapabilities] as JsonObject } : {}),
    stores: callerStores(fc),
    legs: {
      leg: async (up) => {
        const rec = await legRec(up.name, () => modernLegFor(fc.env, fc.principal.sub, up, false, caps));
        if (logLevel !== undefined) await applyLogLevel(up, fc.principal.sub, rec, logLevel).catch(() => undefined);
        return rec.leg ?? null;
      },
      renew: async (up) => {
        const r = modernLegFor(fc.env, fc.principal.sub, up, true, caps);
        legs.set(up.name, r);
        return (await r).leg ?? null;
      },
      capabilities: async (up) => (await legRec(up.name, () => modernLegFor(fc.env, fc.principal.sub, up, false, caps))).capabilities,
      recordRequest: async () => undefined,
      rounds: <T>() => roundObject<T>(fc.env, fc.principal.sub),
    },
    relay: {
      send: async (m) => {
        if (isRequest(m)) return; // never on a modern request stream
        if (isNotification(m) && m.method === "notifications/message" && logLevel === undefined) return;
        await emit(m);
      },
      keepAlive: async () => {
        await stream?.keepAlive();
      },
      upstreamRequest: async (up, leg, r) => {
        const why = `Portcullis cannot relay ${r.method} to a ${MODERN_VERSION} client: that era has no server-initiated requests (servers return input_required results instead)`;
        await postUpstream(up, leg, errorResponse(r.id, ErrorCode.MethodNotFound, why)).catch(() => undefined);
      },
    },
  };
}

async function discover(fc: FrontContext, req: JsonRpcRequest): Promise<Response> {
  const recs: Record<string, UpstreamLegRecord> = {};
  await Promise.all(
    fc.cfg.upstreams.map(async (up) => {
      recs[up.name] = await modernLegFor(fc.env, fc.principal.sub, up).catch(() => ({}));
    }),
  );
  const result: JsonObject = {
    supportedVersions: SUPPORTED_VERSIONS,
    capabilities: mergeCapabilities(fc.cfg, recs),
    _meta: { [META.serverInfo]: { ...GATEWAY_INFO } },
    ttlMs: 0,
    cacheScope: "private",
    resultType: "complete",
  };
  const instructions = mergeInstructions(fc.cfg, recs);
  if (instructions) result.instructions = instructions;
  return jsonResponse({ jsonrpc: "2.0", id: req.id, result });
}

export async function modernPost(fc: FrontContext, req: Request, msg: JsonRpcMessage): Promise<Response> {
  if (!("method" in msg)) {
    return refuse(400, ErrorCode.InvalidRequest, "Invalid Request: the 2026-07-28 era has no server-initiated requests to answer");
  }
  if (!isRequest(msg)) return new Response(null, { status: 202 });
  const problem = checkModernRequest(req, msg);
  if (problem) return problem;
  if (REMOVED_IN_MODERN.has(msg.method)) {
    return refuse(404, ErrorCode.MethodNotFound, `Method not found: ${msg.method} does not exist in ${MODERN_VERSION}`, msg.id);
  }
  const run = req.headers.get("portcullis-run-id");
  if (run !== null) {
    const runStore = runObject(fc.env, run);
    if (!runStore) return refuse(400, ErrorCode.InvalidRequest, "Invalid Portcullis-Run-Id: use 8–128 characters of [A-Za-z0-9_-]", msg.id);
    const owned = await runStore.claimRun(fc.principal.sub, run, fc.cfg.sessionTtlS);
    if (!owned) return refuse(404, ErrorCode.ServerError, "Run not found: this run belongs to another principal or has ended", msg.id);
  }
  if (msg.method === "server/discover") return discover(fc, msg);
  if (msg.method === "subscriptions/listen") return listen(fc, req, msg);
  return respond(msg.id, async (emit, stream) => withResultType(await dispatch(modernContext(fc, req, msg, run, emit, stream), msg)), {
    waitUntil: fc.waitUntil,
  });
}

/** Every 2026-07-28 result carries resultType; the gateway's own results (denials, refusals) are complete. */
function withResultType(out: Outcome): Outcome {
  const r = out.response.result;
  if (!isObject(r) || r.resultType !== undefined) return out;
  return { ...out, response: { ...out.response, result: { ...r, resultType: "complete" } } };
}
