/**
 * The gateway as an MCP client of one HTTP upstream, in either era: the protocol half. The
 * exchange itself (error classes, request ids, headers, sending through the egress guard, reading
 * an answer as frames) is in exchange.ts, whose public names are re-exported here. Owns: one
 * request and every message of its answer, resuming a legacy SSE stream the upstream closed early
 * (GET + Last-Event-ID) and, on request, signalling that stream's opening and early close to the
 * caller (StreamSignal), notifications and responses sent upstream, the legacy GET stream, legacy
 * `initialize`, modern `server/discover`, and the per-upstream era verdict. Must never: send the
 * client's own headers or credentials upstream (every header is built from config), follow a
 * redirect, or wait without a timeout.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { type JsonObject, type JsonRpcMessage, type JsonRpcRequest, type JsonRpcResponse, isObject } from "../wire/jsonrpc.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import {
  answers,
  baseHeaders,
  type Frame,
  readAnswer,
  readFrames,
  type SendOptions,
  send,
  sleep,
  type StreamSignal,
  timeoutSignal,
  UpstreamAuthError,
  UpstreamError,
  type UpstreamFrame,
  upstreamRequestId,
  UpstreamSessionGone,
  UpstreamUncertain,
} from "./exchange.ts";
import { GATEWAY_INFO, META, MODERN_VERSION } from "../protocol/versions.ts";

import { Memo } from "../wire/memo.ts";
import { traceHeaders } from "../wire/trace-context.ts";

/**
 * Sends one request upstream and yields every message that arrives for it, ending with its
 * response. A legacy SSE stream that ends without the response is resumed with GET +
 * Last-Event-ID after the upstream's retry hint (bounded attempts). With `control: true` it also
 * yields a StreamSignal when the upstream answers with a stream and each time it closes a
 * resumable stream early, so a front can mirror both (the resumption goes on regardless).
 */
export function requestUpstream(up: UpstreamConfig, leg: Leg, msg: JsonRpcRequest, opts: SendOptions & { control: true }): AsyncGenerator<UpstreamFrame>;
export function requestUpstream(up: UpstreamConfig, leg: Leg, msg: JsonRpcRequest, opts?: SendOptions): AsyncGenerator<Frame>;
export async function* requestUpstream(up: UpstreamConfig, leg: Leg, msg: JsonRpcRequest, opts: SendOptions = {}): AsyncGenerator<UpstreamFrame> {
  const headers = baseHeaders(up, leg, msg);
  for (const [k, v] of opts.paramHeaders ?? []) headers.set(k, v);
  // W3C trace context: the gateway's own span is the upstream's parent (never a header of the client's as it came).
  if (opts.trace) for (const [k, v] of traceHeaders(opts.trace)) headers.set(k, v);
  const signal = timeoutSignal(up, opts.signal);
  const res = await send(up, { method: "POST", headers, body: JSON.stringify(msg) }, signal, opts.stream ?? false);
  if (res.status === 404 && leg.era === "legacy" && leg.sessionId) {
    await res.body?.cancel();
    throw new UpstreamSessionGone(up.name, "session expired", 404, 404);
  }
  const track: { lastEventId?: string; retryMs?: number } = {};
  let answered = false;
  let sse = (res.headers.get("content-type") ?? "").includes("text/event-stream");
  if (opts.control && sse && res.ok) yield { kind: "stream-opened", status: res.status };
  let frames = 0;
  for await (const f of readFrames(up, res, track)) {
    if (!("message" in f)) {
      if (opts.control) yield track.retryMs !== undefined ? { kind: "stream-primed", retryMs: track.retryMs } : { kind: "stream-primed" };
      continue;
    }
    frames++;
    yield f;
    if (answers(f.message, msg.id)) {
      answered = true;
      break;
    }
  }
  for (let attempt = 0; !answered && sse && leg.era === "legacy" && track.lastEventId !== undefined && attempt < 5; attempt++) {
    if (opts.control) {
      const closed: StreamSignal = { kind: "stream-closed-early", lastEventId: track.lastEventId };
      if (track.retryMs !== undefined) closed.retryMs = track.retryMs;
      yield closed;
    }
    await sleep(Math.min(track.retryMs ?? 1000, 10000), signal);
    const h = baseHeaders(up, leg, undefined);
    h.set("accept", "text/event-stream");
    h.set("last-event-id", track.lastEventId);
    const again = await send(up, { method: "GET", headers: h }, signal);
    if (!again.ok) {
      await again.body?.cancel();
      break;
    }
    sse = (again.headers.get("content-type") ?? "").includes("text/event-stream");
    for await (const f of readAnswer(up, again, track)) {
      yield f;
      if (answers(f.message, msg.id)) {
        answered = true;
        break;
      }
    }
  }
  if (!answered && frames === 0 && !res.ok && !(res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    // An error status with an empty body (a 503 from a proxy or an overloaded server): named as such.
    throw new UpstreamUncertain(up.name, `answered HTTP ${res.status} with an empty body`, res.status >= 500 ? 502 : res.status, res.status);
  }
  if (!answered) throw new UpstreamUncertain(up.name, `closed the stream before answering ${msg.method}`, 502);
}

/** Sends a notification or a response upstream (fire and check). */
export async function postUpstream(up: UpstreamConfig, leg: Leg, msg: JsonRpcMessage, signal?: AbortSignal): Promise<void> {
  const res = await send(up, { method: "POST", headers: baseHeaders(up, leg, msg), body: JSON.stringify(msg) }, timeoutSignal(up, signal));
  await res.body?.cancel();
  if (res.status === 404 && leg.era === "legacy" && leg.sessionId) throw new UpstreamSessionGone(up.name, "session expired", 404, 404);
  if (!res.ok) throw new UpstreamError(up.name, `refused a message (HTTP ${res.status})`, res.status, res.status);
}

/** Opens the upstream's legacy GET stream (server-initiated messages). Null when it has none. */
export async function openGetStream(up: UpstreamConfig, leg: Leg & { era: "legacy" }, signal: AbortSignal): Promise<AsyncGenerator<Frame> | null> {
  const h = baseHeaders(up, leg, undefined);
  h.set("accept", "text/event-stream");
  const res = await send(up, { method: "GET", headers: h }, signal, true);
  if (!res.ok || !(res.headers.get("content-type") ?? "").includes("text/event-stream")) {
    await res.body?.cancel();
    return null;
  }
  return readAnswer(up, res, {});
}

/** One request, collecting the final response (interim messages are handed to `onOther`). */
export async function callUpstream(
  up: UpstreamConfig,
  leg: Leg,
  msg: JsonRpcRequest,
  onOther?: (f: Frame) => Promise<void>,
  opts?: SendOptions,
): Promise<{ response: JsonRpcResponse; status: number }> {
  for await (const f of requestUpstream(up, leg, msg, opts)) {
    if (answers(f.message, msg.id)) return { response: f.message, status: f.status };
    if (onOther) await onOther(f);
  }
  throw new UpstreamError(up.name, `no response to ${msg.method}`, 502, undefined, "invalid_answer");
}

export interface LegacyInit {
  sessionId?: string;
  protocolVersion: string;
  result: JsonObject;
}

/** Legacy initialize + notifications/initialized. Throws UpstreamError if the upstream refuses. */
export async function initializeLegacy(up: UpstreamConfig, protocolVersion: string, capabilities: JsonObject, clientInfo?: JsonObject): Promise<LegacyInit> {
  const msg: JsonRpcRequest = {
    jsonrpc: "2.0",
    id: upstreamRequestId(),
    method: "initialize",
    params: { protocolVersion, capabilities, clientInfo: clientInfo ?? { ...GATEWAY_INFO } },
  };
  const headers = baseHeaders(up, undefined, msg);
  const res = await send(up, { method: "POST", headers, body: JSON.stringify(msg) }, timeoutSignal(up));
  const sessionId = res.headers.get("mcp-session-id") ?? undefined;
  let response: JsonRpcResponse | undefined;
  for await (const f of readAnswer(up, res, {})) {
    if (answers(f.message, msg.id)) {
      response = f.message;
      break;
    }
  }
  if (!response || response.error || !isObject(response.result)) {
    const kind = response?.error ? "error_answer" : res.status >= 400 ? "http_status" : "invalid_answer";
    throw new UpstreamError(up.name, `refused initialize (${response?.error?.message ?? `HTTP ${res.status}`})`, res.status, res.status, kind);
  }
  const negotiated = typeof response.result.protocolVersion === "string" ? response.result.protocolVersion : protocolVersion;
  const init: LegacyInit = { protocolVersion: negotiated, result: response.result };
  if (sessionId) init.sessionId = sessionId;
  await postUpstream(
    up,
    { era: "legacy", protocolVersion: negotiated, ...(sessionId ? { sessionId } : {}) },
    {
      jsonrpc: "2.0",
      method: "notifications/initialized",
    },
  ).catch(() => undefined);
  return init;
}

export function modernMeta(clientCapabilities: JsonObject, extra: JsonObject = {}): JsonObject {
  return {
    [META.protocolVersion]: MODERN_VERSION,
    [META.clientCapabilities]: clientCapabilities,
    [META.clientInfo]: { ...GATEWAY_INFO },
    ...extra,
  };
}

/** Modern `server/discover`; null when the upstream does not speak 2026-07-28. */
async function discoverModern(up: UpstreamConfig): Promise<JsonObject | null> {
  const msg: JsonRpcRequest = {
    jsonrpc: "2.0",
    id: upstreamRequestId(),
    method: "server/discover",
    params: { _meta: modernMeta({}) },
  };
  try {
    const { response } = await callUpstream(up, { era: "modern", meta: modernMeta({}) }, msg);
    return isObject(response.result) && Array.isArray(response.result.supportedVersions) ? response.result : null;
  } catch (e) {
    // Unreachable, timed out, or refused our credential: no verdict (nothing is cached). An upstream
    // that answered discover with an HTTP error or a body that is no message is legacy (`answered`).
    if (e instanceof UpstreamAuthError) throw e;
    if (e instanceof UpstreamError && (e.status === 502 || e.status === 504) && e.answered === undefined) throw e;
    return null;
  }
}

/** Verdicts per upstream and URL: a modern one is kept, a legacy one re-checked after VERDICT_TTL_MS. */
const VERDICT_TTL_MS = 60_000;
const MAX_VERDICTS = 1000;
const verdicts = new Memo<string, { discover: JsonObject | null }>({ max: MAX_VERDICTS });

/** Whether the upstream speaks 2026-07-28 (cached per isolate; legacy verdicts are re-checked after a minute). */
export async function modernDiscovery(up: UpstreamConfig): Promise<JsonObject | null> {
  const key = `${up.name} ${up.url}`;
  const v = verdicts.get(key);
  if (v) return v.discover;
  const discover = await discoverModern(up);
  verdicts.set(key, { discover }, { ttlMs: discover ? null : VERDICT_TTL_MS });
  return discover;
}
