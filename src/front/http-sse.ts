/**
 * The legacy HTTP+SSE front (the MCP 2024-11-05 transport, opt-in by `gateway.legacy_sse`) for
 * clients that speak nothing newer: `GET /sse` opens a stream whose first event, `endpoint`, names
 * `/messages?sessionId=<id>`; each `POST` there carries one JSON-RPC message, is answered 202, and
 * the answer — with any notification or server→client request produced while handling it —
 * arrives as a `message` event on the stream. An SSE session wraps one ordinary legacy session
 * (Mcp-Session-Id, SessionDO) opened by the client's own `initialize`: every message is served by
 * the legacy front (legacy.ts legacyPost / legacyGet / legacyDelete, called, never copied), so
 * governance, the ledger, holds and relays are exactly those of /mcp. Owns: the stream's life
 * (held by SseDO, durable-objects/http-sse.ts, because the POSTs land on other isolates than the
 * GET), who may post into it (the principal `sub` and grant `jti` that opened it), relaying the
 * legacy front's JSON or SSE answers (and the wrapped session's GET stream) onto it, following an
 * answer the legacy front closed early (SEP-1699) with GET + Last-Event-ID, and ending the wrapped
 * session when the stream ends (client gone, grant ended). Protocol version: the legacy front
 * speaks 2025-03-26 and later; an `initialize` asking for an older version (2024-11-05, the
 * transport's own) is negotiated to the oldest the front speaks, 2025-03-26, and the answer says
 * so: the gateway never claims a version it does not implement, and the client decides.
 * Must never: forward anything for a sessionId its caller did not open, accept a batch, fork
 * the legacy front's logic, or keep the wrapped session alive after its stream ended.
 */
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { bodyRefusal, readBodyText } from "../wire/body.ts";
import { refuse, SSE_HEADERS } from "../wire/http.ts";
import { ErrorCode, errorResponse, type JsonRpcId, type JsonRpcMessage, type JsonRpcRequest, isObject, isRequest, parseMessage } from "../wire/jsonrpc.ts";
import { parseSse } from "../wire/sse.ts";
import { newSessionId, sseObject } from "../../durable-objects/object-names.ts";
import type { SseApi, SseOwner } from "../../durable-objects/contract.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { MAX_BODY_BYTES } from "./edge.ts";
import { endWithGrant } from "./grant-watch.ts";
import { legacyDelete, legacyGet, legacyPost } from "./legacy.ts";
import { isLegacyVersion, LEGACY_VERSIONS } from "../protocol/versions.ts";

/** Keep-alive comments on the stream (proxies and the edge drop idle streams). */
export const SSE_KEEPALIVE_MS = 15_000;
/** How many times one answer is followed with GET + Last-Event-ID after the legacy front closed its stream early. */
export const MAX_RESUMES = 20;
/** The oldest version the legacy front speaks: what an initialize asking for anything older is negotiated to. */
export const OLDEST_LEGACY: string = [...LEGACY_VERSIONS].sort()[0]!;
/** The URL of the requests this front hands the legacy front (only their headers and signal are read). */
const INTERNAL_URL = "http://portcullis.internal/mcp";

/** What the front calls: the legacy front, the SseDO of an id, the grant watch. Tests hand in fakes. */
export interface SseDeps {
  channel(env: Env, id: string): SseApi | null;
  newId(): string;
  legacyPost(fc: FrontContext, req: Request, msg: JsonRpcMessage): Promise<Response>;
  legacyGet(fc: FrontContext, req: Request): Promise<Response>;
  legacyDelete(fc: FrontContext, req: Request): Promise<Response>;
  /** Aborts `stream` when the grant that opened it ends (expiry, revocation: grant-watch.ts). */
  watchGrant(fc: FrontContext, stream: AbortController): { stop(): void };
  keepAliveMs: number;
}

export const sseDeps: SseDeps = {
  channel: sseObject,
  newId: newSessionId,
  legacyPost,
  legacyGet,
  legacyDelete,
  watchGrant: (fc, stream) => endWithGrant(fc.env, fc.principal, stream),
  keepAliveMs: SSE_KEEPALIVE_MS,
};

/** The owner of what `p` opens: its `sub` and its grant's `jti` (null for the loopback actor). */
export function ownerOf(p: Principal): SseOwner {
  return { sub: p.sub, jti: p.jti ?? null };
}

/** The endpoint event's data for SSE session `id` (a path: the client resolves it against the /sse URL, same origin). */
export function endpointFor(id: string): string {
  return `/messages?sessionId=${id}`;
}

/** `initialize` as the legacy front receives it: a version older than any it speaks asks for the oldest it speaks instead. */
export function negotiated(msg: JsonRpcRequest): JsonRpcRequest {
  const v = msg.params?.protocolVersion;
  if (typeof v !== "string" || isLegacyVersion(v) || v >= OLDEST_LEGACY) return msg;
  return { ...msg, params: { ...msg.params, protocolVersion: OLDEST_LEGACY } };
}

function internal(method: "POST" | "GET" | "DELETE", sid: string | null, headers: Record<string, string> = {}, signal?: AbortSignal): Request {
  const h = new Headers({ accept: "application/json, text/event-stream", ...headers });
  if (method === "POST") h.set("content-type", "application/json");
  if (sid) h.set("mcp-session-id", sid);
  return new Request(INTERNAL_URL, signal ? { method, headers: h, signal } : { method, headers: h });
}

const isSse = (r: Response) => (r.headers.get("content-type") ?? "").includes("text/event-stream");

function notFound(id: JsonRpcId | null): Response {
  return refuse(404, ErrorCode.ServerError, "Session not found: this SSE session ended or never existed; open GET /sse for a new one", id);
}

function idOf(msg: JsonRpcMessage): JsonRpcId | null {
  return "id" in msg && (typeof msg.id === "string" || typeof msg.id === "number") ? msg.id : null;
}

/** Ends the wrapped legacy session (and its upstream sessions) through the legacy front. */
async function endWrapped(deps: SseDeps, fc: FrontContext, sid: string): Promise<void> {
  const r = await deps.legacyDelete(fc, internal("DELETE", sid)).catch(() => null);
  await r?.body?.cancel().catch(() => undefined);
}

/**
 * `GET /sse`: opens a stream in a fresh SseDO (endpoint event first) and relays it to the client;
 * once initialize bound a legacy session, that session's GET stream (server-initiated messages:
 * list changes, relayed requests) is pushed into it too. When the client leaves or the grant ends,
 * the stream closes and the wrapped session ends.
 */
export async function sseOpen(deps: SseDeps, fc: FrontContext, req: Request): Promise<Response> {
  if (!(req.headers.get("accept") ?? "").includes("text/event-stream")) {
    return refuse(406, ErrorCode.InvalidRequest, "Not Acceptable: GET /sse needs Accept: text/event-stream");
  }
  const id = deps.newId();
  const ch = deps.channel(fc.env, id);
  if (!ch) throw new Error("sse: a fresh session id addresses no object");
  const owner = ownerOf(fc.principal);
  const opened = await ch.fetch(
    new Request("https://sse.internal/open", { method: "POST", body: JSON.stringify({ owner, endpoint: endpointFor(id), keepAliveMs: deps.keepAliveMs }) }),
  );
  if (!opened.ok || !opened.body) {
    await opened.body?.cancel().catch(() => undefined);
    return refuse(503, ErrorCode.ServerError, "Service Unavailable: the SSE session could not be opened; try again");
  }
  const ended = new AbortController();
  const grant = deps.watchGrant(fc, ended);
  // The grant ended (or the client left): the object closes the stream, which ends the pipe below.
  ended.signal.addEventListener("abort", () => void ch.close(owner).catch(() => null), { once: true });
  const out = new TransformStream<Uint8Array, Uint8Array>();
  const piped = opened.body.pipeTo(out.writable).catch(() => undefined);
  const server = serverMessages(deps, fc, ch, owner, ended.signal);
  fc.waitUntil(
    (async () => {
      await piped;
      ended.abort();
      grant.stop();
      const closedSid = await ch.close(owner).catch(() => null);
      const sid = closedSid ?? (await server.catch(() => null));
      await server.catch(() => null);
      if (sid) await endWrapped(deps, fc, sid);
    })(),
  );
  return new Response(out.readable, { status: 200, headers: SSE_HEADERS });
}

/** The wrapped session's GET stream, pushed into the SSE stream until either ends; the session id (null when none was bound). */
async function serverMessages(deps: SseDeps, fc: FrontContext, ch: SseApi, owner: SseOwner, signal: AbortSignal): Promise<string | null> {
  const sid = await ch.waitBound(owner).catch(() => null);
  if (!sid || signal.aborted) return sid;
  const res = await deps.legacyGet(fc, internal("GET", sid, { accept: "text/event-stream" }, signal)).catch(() => null);
  if (!res?.ok || !res.body || !isSse(res)) {
    await res?.body?.cancel().catch(() => undefined);
    return sid;
  }
  try {
    for await (const ev of parseSse(res.body)) {
      if (signal.aborted) break;
      if (ev.data === "") continue; // priming events carry nothing for this client
      if (!(await ch.push(owner, ev.data))) break;
    }
  } catch {
    // The stream ended (the signal aborted it, or the session ended).
  }
  await res.body.cancel().catch(() => undefined);
  return sid;
}

/** A 202 whose body stays open until `work` settles: the isolate serving the POST lives as long as the answer is being relayed. */
function acceptedWhile(fc: FrontContext, work: Promise<void>): Response {
  const ts = new TransformStream<Uint8Array, Uint8Array>();
  const w = ts.writable.getWriter();
  const done = work.finally(async () => {
    await w.write(new TextEncoder().encode("Accepted")).catch(() => undefined);
    await w.close().catch(() => undefined);
  });
  fc.waitUntil(done);
  return new Response(ts.readable, { status: 202, headers: { "content-type": "text/plain; charset=utf-8" } });
}

const accepted = () => new Response("Accepted", { status: 202, headers: { "content-type": "text/plain; charset=utf-8" } });

/**
 * Pushes the events of one legacy answer stream; whether the answer to `id` was among them, the
 * last event id seen (to resume from), and whether the SSE stream is gone.
 */
async function relayAnswer(body: ReadableStream<Uint8Array>, id: JsonRpcId, push: (data: string) => Promise<boolean>) {
  let answered = false;
  let gone = false;
  let lastId: string | undefined;
  try {
    for await (const ev of parseSse(body)) {
      if (ev.id !== undefined) lastId = ev.id;
      if (ev.data === "") continue;
      if (!(await push(ev.data))) {
        gone = true;
        break;
      }
      try {
        const m = JSON.parse(ev.data) as unknown;
        if (isObject(m) && !("method" in m) && m.id === id) answered = true;
      } catch {
        // Not JSON: relayed as it came; it answers nothing.
      }
      if (answered) break;
    }
  } catch {
    // The legacy stream broke: resume from lastId below.
  }
  await body.cancel().catch(() => undefined);
  return { answered, gone, lastId };
}

/** Serves one client request through the legacy front and pushes everything it produces, the answer last. */
async function deliver(deps: SseDeps, fc: FrontContext, ch: SseApi, owner: SseOwner, sid: string, msg: JsonRpcRequest): Promise<void> {
  const push = (data: string) => ch.push(owner, data);
  let res = await deps.legacyPost(fc, internal("POST", sid), msg);
  if (!isSse(res) || !res.body) {
    const text = await res.text();
    await push(
      text !== ""
        ? text
        : JSON.stringify(errorResponse(msg.id, ErrorCode.InternalError, `Internal error in Portcullis: the request got HTTP ${res.status} with no answer`)),
    );
    // The wrapped session is gone (it idled out): so is this SSE session.
    if (res.status === 404) await ch.close(owner);
    return;
  }
  for (let round = 0; ; round++) {
    const r = await relayAnswer(res.body as ReadableStream<Uint8Array>, msg.id, push);
    if (r.answered || r.gone) return;
    // The legacy front closed the stream before the answer (SEP-1699): it waits in the session's
    // buffer, and this front is the client that resumes it.
    if (!r.lastId || round >= MAX_RESUMES) break;
    const next = await deps.legacyGet(fc, internal("GET", sid, { accept: "text/event-stream", "last-event-id": r.lastId })).catch(() => null);
    if (!next?.ok || !next.body || !isSse(next)) {
      await next?.body?.cancel().catch(() => undefined);
      break;
    }
    res = next;
  }
  await push(
    JSON.stringify(
      errorResponse(msg.id, ErrorCode.InternalError, "Internal error in Portcullis: the answer to this request was lost on its way to the SSE stream"),
    ),
  );
}

/** `POST /messages?sessionId=<id>`: one JSON-RPC message for the caller's own SSE session. */
export async function ssePost(deps: SseDeps, fc: FrontContext, req: Request): Promise<Response> {
  const id = new URL(req.url).searchParams.get("sessionId");
  if (!id) {
    return refuse(400, ErrorCode.InvalidRequest, "Bad Request: the sessionId query parameter is required (POST to the URL of the endpoint event of GET /sse)");
  }
  const ct = (req.headers.get("content-type") ?? "").toLowerCase();
  if (!ct.startsWith("application/json")) {
    return refuse(415, ErrorCode.InvalidRequest, "Unsupported Media Type: Content-Type must be application/json");
  }
  const body = await readBodyText(req, MAX_BODY_BYTES);
  if (!body.ok) return bodyRefusal(body.reason, MAX_BODY_BYTES);
  const v = parseMessage(body.text);
  if (!v.ok) return refuse(v.status, v.code, v.reason, v.id);
  const msg = v.message;
  const owner = ownerOf(fc.principal);
  const ch = deps.channel(fc.env, id);
  const state = ch && (await ch.session(owner).catch(() => null));
  if (!ch || !state) return notFound(idOf(msg));

  if (isRequest(msg) && msg.method === "initialize") {
    if (state.sid !== null) return refuse(400, ErrorCode.InvalidRequest, "Invalid Request: this SSE session is already initialized", msg.id);
    const res = await deps.legacyPost(fc, internal("POST", null), negotiated(msg));
    const answer = await res.text();
    const sid = res.ok ? res.headers.get("mcp-session-id") : null;
    if (!sid) {
      // Refused (e.g. oversized client fields): the refusal is the answer, on the stream.
      await ch.push(owner, answer);
      return accepted();
    }
    const bound = await ch.bind(owner, sid, answer).catch(() => "gone" as const);
    if (bound === "bound") return accepted();
    await endWrapped(deps, fc, sid);
    return bound === "already" ? refuse(400, ErrorCode.InvalidRequest, "Invalid Request: this SSE session is already initialized", msg.id) : notFound(msg.id);
  }
  if (state.sid === null) {
    return refuse(400, ErrorCode.ServerError, "Bad Request: this SSE session is not initialized; send initialize first", idOf(msg));
  }
  if (!isRequest(msg)) {
    // A notification or an answer to a relayed request: nothing comes back on the stream; the
    // legacy front's status (202, or its refusal) is the answer.
    const res = await deps.legacyPost(fc, internal("POST", state.sid), msg);
    if (res.ok) {
      await res.body?.cancel().catch(() => undefined);
      return accepted();
    }
    if (res.status === 404) await ch.close(owner).catch(() => null);
    return res;
  }
  const work = deliver(deps, fc, ch, owner, state.sid, msg).catch(async (e) => {
    // Never silence: the client waits for an answer to this id on the stream.
    console.error("portcullis: sse relay failed", (e as Error)?.stack ?? String(e));
    const failed = errorResponse(msg.id, ErrorCode.InternalError, "Internal error in Portcullis while serving this request; its answer was not delivered");
    await ch.push(owner, JSON.stringify(failed)).catch(() => false);
  });
  return acceptedWhile(fc, work);
}
