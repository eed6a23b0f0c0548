/**
 * The legacy front (2025-11-25, 2025-06-18, 2025-03-26): initialize, Mcp-Session-Id sessions in
 * SessionDO, POST with JSON or SSE answers, the GET stream, resumption by Last-Event-ID, DELETE.
 * Owns: session creation and lookup by principal (and by route: a session opened on
 * `/mcp/<upstream>` lives on that route only, one opened on /mcp on /mcp only), routing client notifications and answers
 * (cancellation via the id map, relayed server→client answers back to their upstream), and the
 * legacy CallContext. Must never: serve a session to a principal that did not open it (404),
 * or accept a JSON-RPC batch.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import type { CallContext, FrontContext } from "../protocol/call-context.ts";
import { dispatch } from "./dispatch.ts";
import {
  ErrorCode,
  type JsonObject,
  type JsonRpcMessage,
  type JsonRpcNotification,
  type JsonRpcRequest,
  type JsonRpcResponse,
  isNotification,
  isObject,
  isRequest,
} from "../wire/jsonrpc.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { withoutGatewayMeta } from "../governance/call-answers.ts";
import { mergeCapabilities, mergeInstructions, openLegacyClientLeg, sessionLeg } from "../upstream/legs.ts";
import { splitUri } from "../protocol/exposed-names.ts";
import { relayServerRequest } from "./relay.ts";
import { respond, type Resumable, type StreamControl } from "./respond.ts";
import { newSessionId, sessionObject } from "../../durable-objects/object-names.ts";
import { type Leg, SESSION_RECORD_VERSION, type SessionApi, type SessionRecord, type UpstreamLegRecord } from "../../durable-objects/contract.ts";
import { relayGetStream, replayStream } from "./streams.ts";
import { forgetSession, idMap, inFlightRequest, openSession, writingStore } from "./session-cache.ts";
import { postUpstream, modernMeta } from "../upstream/client.ts";
import { GATEWAY_INFO, LATEST_LEGACY, LEGACY_VERSIONS, META, isLegacyVersion } from "../protocol/versions.ts";
import { jsonResponse, refuse } from "../wire/http.ts";
import { callerStores } from "./caller-stores.ts";

type Store = SessionApi;

const SESSION_HDR = "mcp-session-id";
/** How long a POST stream may run before its events are kept for resumption (see legacyPost). */
const PERSIST_AFTER_MS = 250;
const BRIDGE = "__bridge__";

/** A session is served only on the route that opened it: /mcp, or the `/mcp/<upstream>` it names (elsewhere it is not found). */
function onThisRoute(fc: FrontContext, rec: SessionRecord): boolean {
  return (rec.route ?? null) === (fc.route?.upstream ?? null);
}

function notFound(id: JsonRpcMessage | null = null): Response {
  const rid = id && "id" in id && (typeof id.id === "string" || typeof id.id === "number") ? id.id : null;
  return refuse(404, ErrorCode.ServerError, "Session not found: it ended or never existed; send initialize to start a new one", rid);
}

/** The leg record's Leg, with the session's current log level on modern legs. */
function legOf(rec: SessionRecord, up: UpstreamConfig): Leg | null {
  const l = rec.upstreams[up.name]?.leg;
  if (!l) return null;
  if (l.era === "modern") {
    return { era: "modern", meta: modernMeta(rec.clientCapabilities, rec.logLevel ? { [META.logLevel]: rec.logLevel } : {}) };
  }
  return l;
}

/** What a session keeps of the client's own description, per field (capabilities, clientInfo). */
export const MAX_SESSION_FIELD_BYTES = 64 * 1024;

/** The first field of initialize too large to keep in a session, as a readable refusal; null when all fit. */
function oversizedField(p: JsonObject): string | null {
  for (const field of ["capabilities", "clientInfo"] as const) {
    if (p[field] === undefined) continue;
    const bytes = new TextEncoder().encode(JSON.stringify(p[field])).byteLength;
    if (bytes > MAX_SESSION_FIELD_BYTES) {
      return `Invalid params: initialize ${field} is ${bytes} bytes; a session keeps at most ${MAX_SESSION_FIELD_BYTES} bytes of it`;
    }
  }
  return null;
}

async function initialize(fc: FrontContext, req: JsonRpcRequest): Promise<Response> {
  const p = req.params ?? {};
  const tooBig = oversizedField(p);
  if (tooBig) return refuse(400, ErrorCode.InvalidParams, tooBig, req.id);
  const requested = typeof p.protocolVersion === "string" ? p.protocolVersion : LATEST_LEGACY;
  const version = isLegacyVersion(requested) ? requested : LATEST_LEGACY;
  const clientCaps = isObject(p.capabilities) ? p.capabilities : {};
  const clientInfo = isObject(p.clientInfo) ? p.clientInfo : undefined;
  const upstreams: Record<string, UpstreamLegRecord> = {};
  await Promise.all(
    fc.cfg.upstreams.map(async (up) => {
      const opened = await openLegacyClientLeg(up, version, clientCaps, clientInfo);
      // Wanting the caller's credential (an OAuth upstream not connected yet) is not kept: the first use after it is there opens the leg.
      if (opened.leg || !up.credentialProblem) upstreams[up.name] = opened;
    }),
  );
  const id = newSessionId();
  const now = Date.now();
  const rec: SessionRecord = {
    v: SESSION_RECORD_VERSION,
    id,
    principal: fc.principal.sub,
    protocolVersion: version,
    clientCapabilities: clientCaps,
    upstreams,
    createdAt: now,
    touchedAt: now,
    ttlS: fc.cfg.sessionTtlS,
  };
  if (clientInfo) rec.clientInfo = clientInfo;
  if (fc.route) rec.route = fc.route.upstream;
  await sessionObject(fc.env, id)!.create(rec);
  const result: JsonObject = { protocolVersion: version, capabilities: mergeCapabilities(fc.cfg, upstreams), serverInfo: { ...GATEWAY_INFO } };
  const instructions = mergeInstructions(fc.cfg, upstreams);
  if (instructions) result.instructions = instructions;
  return jsonResponse({ jsonrpc: "2.0", id: req.id, result }, 200, { "mcp-session-id": id });
}

function legacyContext(
  fc: FrontContext,
  store: Store,
  rec: SessionRecord,
  signal: AbortSignal,
  emit: (m: JsonRpcMessage) => Promise<void>,
  stream?: StreamControl,
  ids?: ReturnType<typeof idMap>,
): CallContext {
  return {
    cfg: fc.cfg,
    ...(fc.route ? { route: fc.route } : {}),
    era: "legacy",
    principal: fc.principal,
    signal,
    paramHeaders: [],
    callerFiltered: fc.principal.tools !== null,
    runId: rec.id,
    ...(fc.trace ? { trace: fc.trace } : {}),
    clientCapabilities: rec.clientCapabilities,
    stores: callerStores(fc),
    legs: {
      // An upstream a hot reload added after initialize gets its leg on first use (legs.ts sessionLeg).
      leg: async (up) => ((await sessionLeg(store, rec, up)) ? legOf(rec, up) : null),
      renew: async (up) => {
        const fresh = await openLegacyClientLeg(up, rec.protocolVersion, rec.clientCapabilities, rec.clientInfo);
        rec.upstreams[up.name] = fresh;
        await store.update(fc.principal.sub, { upstreams: { [up.name]: fresh } });
        return legOf(rec, up);
      },
      capabilities: async (up) => (await sessionLeg(store, rec, up))?.capabilities,
      // Here at once, in the SessionDO once the call has run a while (session-cache.ts idMap): a fast call writes nothing.
      recordRequest: async (id, up, upstreamId) => {
        if (ids) ids.record(JSON.stringify(id), up.name, upstreamId);
        else await store.begin(fc.principal.sub, JSON.stringify(id), up.name, upstreamId);
      },
    },
    relay: {
      send: emit,
      // SEP-1699 as the upstream does it: its stream makes this answer a stream (priming event
      // first), and where it closes its stream early the client's stream closes too, while the
      // call runs on into the buffer the client resumes from with GET + Last-Event-ID.
      streamOpened: () => stream?.open(),
      streamPrimed: () => stream?.prime(),
      keepAlive: async () => {
        await stream?.keepAlive();
      },
      mirrorClose: async () => {
        await stream?.closeEarly();
      },
      upstreamRequest: (up, leg, req) => relayServerRequest(store, fc.principal.sub, rec.clientCapabilities, up, leg, req, emit),
      ask: async (method, params) => {
        const gid = `pc-${crypto.randomUUID()}`;
        await store.addPending(fc.principal.sub, { id: gid, upstream: BRIDGE, upId: gid });
        await emit({ jsonrpc: "2.0", id: gid, method, params });
        const answer = await store.awaitAnswer(fc.principal.sub, gid, 120_000);
        if (!answer) throw new Error(`the client did not answer ${method} in time`);
        if (answer.error) return { error: answer.error } as unknown as JsonObject;
        return answer.result ?? {};
      },
    },
  };
}

/** A client notification or answer on a session. */
async function clientMessage(fc: FrontContext, store: Store, rec: SessionRecord, msg: JsonRpcNotification | JsonRpcResponse): Promise<Response> {
  const accepted = () => new Response(null, { status: 202 });
  if (isNotification(msg)) {
    // Forwarded notifications lose the client's `portcullis/` `_meta` keys (that namespace is the gateway's).
    if (msg.method === "notifications/cancelled" && msg.params && (typeof msg.params.requestId === "string" || typeof msg.params.requestId === "number")) {
      // The upstream knows the request by the gateway-made id it was sent under (forward.ts), kept in the id map.
      const downId = JSON.stringify(msg.params.requestId);
      const sent = inFlightRequest(rec.id, downId) ?? (await store.lookupRequest(fc.principal.sub, downId));
      const up = sent ? fc.cfg.upstreams.find((u) => u.name === sent.upstream) : undefined;
      const leg = up ? legOf(rec, up) : null;
      if (up && leg?.era === "legacy" && sent?.upstreamId) {
        fc.waitUntil(postUpstream(up, leg, { ...msg, params: { ...withoutGatewayMeta(msg.params), requestId: sent.upstreamId } }).catch(() => undefined));
      }
      return accepted();
    }
    if (msg.method === "notifications/roots/list_changed") {
      for (const up of fc.cfg.upstreams) {
        const leg = legOf(rec, up);
        if (leg?.era === "legacy")
          fc.waitUntil(postUpstream(up, leg, { ...msg, ...(msg.params ? { params: withoutGatewayMeta(msg.params)! } : {}) }).catch(() => undefined));
      }
    }
    return accepted();
  }
  // An answer to a request the gateway relayed.
  if (typeof msg.id !== "string") return refuse(400, ErrorCode.InvalidRequest, "Invalid Request: no relayed request has this id");
  const pending = await store.takePending(fc.principal.sub, msg.id);
  if (!pending) return refuse(400, ErrorCode.InvalidRequest, `Invalid Request: no relayed request with id ${msg.id} is waiting`);
  if (pending.upstream === BRIDGE) {
    await store.putAnswer(fc.principal.sub, msg.id, msg);
    return accepted();
  }
  const up = fc.cfg.upstreams.find((u) => u.name === pending.upstream);
  const leg = up ? legOf(rec, up) : null;
  if (up && leg) fc.waitUntil(postUpstream(up, leg, { ...msg, id: pending.upId }).catch(() => undefined));
  return accepted();
}

/**
 * resources/subscribe and unsubscribe for an upstream reached in 2026-07-28 (which removed them):
 * the gateway holds the subscription in the session and the GET stream's listen carries it.
 */
async function heldSubscription(fc: FrontContext, store: Store, rec: SessionRecord, msg: JsonRpcRequest): Promise<Response | null> {
  if (msg.method !== "resources/subscribe" && msg.method !== "resources/unsubscribe") return null;
  const uri = msg.params?.uri;
  const target = typeof uri === "string" ? splitUri(fc.cfg.upstreams, uri) : null;
  if (!target || !grantReachesUpstream(fc.principal, target.up) || legOf(rec, target.up)?.era !== "modern") return null;
  const current = new Set(rec.subscriptions?.[target.up.name] ?? []);
  if (msg.method === "resources/subscribe") current.add(target.uri);
  else current.delete(target.uri);
  await store.update(fc.principal.sub, { subscriptions: { [target.up.name]: [...current] } });
  return jsonResponse({ jsonrpc: "2.0", id: msg.id, result: {} });
}

function versionHeaderProblem(req: Request): Response | null {
  const v = req.headers.get("mcp-protocol-version");
  if (v !== null && !isLegacyVersion(v.trim())) {
    return refuse(400, ErrorCode.ServerError, `Bad Request: unsupported MCP-Protocol-Version "${v}" for a session (supported: ${LEGACY_VERSIONS.join(", ")})`);
  }
  return null;
}

export async function legacyPost(fc: FrontContext, req: Request, msg: JsonRpcMessage): Promise<Response> {
  const sid = req.headers.get(SESSION_HDR);
  if (isRequest(msg) && msg.method === "initialize") {
    if (sid)
      return refuse(400, ErrorCode.InvalidRequest, "Invalid Request: initialize must not carry Mcp-Session-Id; the session is already initialized", msg.id);
    return initialize(fc, msg);
  }
  if (!sid) {
    const id = isRequest(msg) ? msg.id : null;
    return refuse(400, ErrorCode.ServerError, "Bad Request: Mcp-Session-Id header is required (send initialize first)", id);
  }
  const bad = versionHeaderProblem(req);
  if (bad) return bad;
  const object = sessionObject(fc.env, sid);
  // The session as this isolate read it within SESSION_CACHE_MS, else its SessionDO (session-cache.ts).
  const rec = object && (await openSession(sid, object, fc.principal.sub));
  if (!object || !rec || !onThisRoute(fc, rec)) return notFound(msg);
  const store = writingStore(sid, object);
  if (!isRequest(msg)) return clientMessage(fc, store, rec, msg);
  const held = await heldSubscription(fc, store, rec, msg);
  if (held) return held;
  if (msg.method === "logging/setLevel" && typeof msg.params?.level === "string") {
    rec.logLevel = msg.params.level;
    await store.update(fc.principal.sub, { logLevel: msg.params.level });
  }
  const streamId = `s${crypto.randomUUID().replace(/-/g, "")}`;
  let chain: Promise<unknown> = Promise.resolve();
  const append = (events: { seq: number; data: string }[], done: boolean) => {
    chain = chain.then(() => store.appendEvents(streamId, events, done)).catch(() => undefined);
  };
  // The version this request speaks (the header, else the session's): priming events (empty
  // data) only from 2025-11-25 on, as the SDK's servers do, since older clients may fail on them.
  const version = req.headers.get("mcp-protocol-version")?.trim() || rec.protocolVersion;
  // A stream that carries only its response, quickly, to a client still there, is never written
  // to the buffer: its events wait in memory. They become durable (all of them, and every later
  // one as it comes) at the first interim message — after which a client may resume — or once the
  // stream outlives PERSIST_AFTER_MS, the client goes away, or the stream is closed early.
  let durable = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const waiting: { seq: number; data: string }[] = [];
  const goDurable = () => {
    if (durable) return;
    durable = true;
    if (timer !== undefined) clearTimeout(timer);
    append(waiting.splice(0), false);
    fc.waitUntil(chain);
  };
  const resumable: Resumable = {
    streamId,
    retryMs: fc.cfg.sseRetryMs,
    priming: version >= "2025-11-25",
    open: () => {
      timer = setTimeout(goDurable, PERSIST_AFTER_MS);
    },
    persist: (seq, data, final) => {
      if (!durable && !final) goDurable();
      if (durable) append([{ seq, data }], false);
      else waiting.push({ seq, data });
    },
    lost: goDurable,
    flushed: () => {
      goDurable();
      return chain.then(() => undefined);
    },
    finish: () => {
      if (timer !== undefined) clearTimeout(timer);
      if (!durable) return;
      append([], true);
      fc.waitUntil(chain);
    },
  };
  // A disconnect is not a cancellation: the call runs on and its events stay resumable.
  const signal = new AbortController().signal;
  const ids = idMap(sid, async (downId, upstream, upstreamId) => {
    await object.begin(fc.principal.sub, downId, upstream, upstreamId);
  });
  const run = async (emit: (m: JsonRpcMessage) => Promise<void>, stream: StreamControl) => {
    try {
      return await dispatch(legacyContext(fc, store, rec, signal, emit, stream, ids), msg);
    } finally {
      ids.done();
    }
  };
  return respond(msg.id, run, {
    waitUntil: fc.waitUntil,
    resumable,
  });
}

export async function legacyGet(fc: FrontContext, req: Request): Promise<Response> {
  const sid = req.headers.get(SESSION_HDR);
  if (!sid) return refuse(400, ErrorCode.ServerError, "Bad Request: Mcp-Session-Id header is required for the GET stream");
  if (!(req.headers.get("accept") ?? "").includes("text/event-stream")) {
    return refuse(406, ErrorCode.InvalidRequest, "Not Acceptable: the GET stream needs Accept: text/event-stream");
  }
  const bad = versionHeaderProblem(req);
  if (bad) return bad;
  const store = sessionObject(fc.env, sid);
  const rec = store && (await store.open(fc.principal.sub));
  if (!store || !rec || !onThisRoute(fc, rec)) return notFound();
  const last = req.headers.get("last-event-id");
  if (last) return replayStream(fc, store, last, req.signal);
  return relayGetStream(fc, store, rec, req.signal, (up) => legOf(rec, up));
}

export async function legacyDelete(fc: FrontContext, req: Request): Promise<Response> {
  const sid = req.headers.get(SESSION_HDR);
  if (!sid) return refuse(400, ErrorCode.ServerError, "Bad Request: Mcp-Session-Id header is required to end a session");
  const store = sessionObject(fc.env, sid);
  // Ended only from the route that opened it: a DELETE on another route leaves it running.
  const open = store && (await store.open(fc.principal.sub));
  if (!store || !open || !onThisRoute(fc, open)) return notFound();
  const rec = await store.end(fc.principal.sub);
  forgetSession(sid);
  if (!rec) return notFound();
  for (const up of fc.cfg.upstreams) {
    const leg = rec.upstreams[up.name]?.leg;
    if (leg?.era === "legacy" && leg.sessionId) {
      const h = new Headers(up.headers);
      h.set("mcp-session-id", leg.sessionId);
      h.set("mcp-protocol-version", leg.protocolVersion);
      fc.waitUntil(
        guardedFetch(up.url, { method: "DELETE", headers: h }, { rules: up.egress, gatewayOnLoopback: up.onLoopback, maxRedirects: 0, timeoutMs: 5000 })
          .then((r) => r.body?.cancel())
          .catch(() => undefined),
      );
    }
  }
  return new Response(null, { status: 200 });
}
