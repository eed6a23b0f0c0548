/**
 * One HTTP exchange of the gateway with an upstream: the wire half of upstream.ts (which
 * re-exports its public names). Owns: the upstream error classes and which failure is which
 * (refused, credential refused, uncertain, connection lost before any answer), the ids upstream
 * requests carry (upstreamRequestId), the request headers built from config (protocol version,
 * session, SEP-2243 routing headers), sending one request through the egress guard (send), and
 * reading one answer, JSON or SSE, as frames (readAnswer, bodyError). `baseHeaders`,
 * `timeoutSignal`, `send`, `readAnswer` and `sleep` are for upstream.ts only. Must never: send the
 * client's own headers or credentials upstream (every header here is built from config), follow a
 * redirect, wait without a timeout, or let a failure escape as a plain Error.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { type JsonObject, type JsonRpcMessage, type JsonRpcRequest, type JsonRpcResponse, isResponse, parseMessage } from "../wire/jsonrpc.ts";
import { EgressError, guardedFetch } from "../egress/guarded-fetch.ts";
import { parseSse, type SseEvent } from "../wire/sse.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import { MODERN_VERSION } from "../protocol/versions.ts";
import type { TraceContext } from "../wire/trace-context.ts";

/**
 * Why an upstream gave no usable answer, as operators and clients are told it (unavailable.ts
 * classifies every failure into one): no connection (`unreachable`), no answer in time
 * (`timeout`), an HTTP error status (`http_status`), a body that is no usable answer
 * (`invalid_answer`), a JSON-RPC error where a result was needed (`error_answer`), the credential
 * refused (`credential_refused`), the egress rules refusing the URL (`egress_refused`), the
 * connection lost mid-answer (`connection_lost`), the caller's own abort (`aborted`), or no leg
 * to the upstream and no known reason (`unavailable`).
 */
export type FailureKind =
  | "unreachable"
  | "timeout"
  | "http_status"
  | "invalid_answer"
  | "error_answer"
  | "credential_refused"
  | "egress_refused"
  | "connection_lost"
  | "aborted"
  | "unavailable";

export class UpstreamError extends Error {
  readonly upstream: string;
  /** The reason alone, without the `upstream <name>: ` the message starts with. */
  readonly detail: string;
  /** Set where the class, status and `answered` do not tell the kind of failure by themselves (unavailable.ts failureKind). */
  readonly kind: FailureKind | undefined;
  readonly status: number | undefined;
  /**
   * The HTTP status the upstream answered with, when that answer is itself the failure: an error
   * status (an empty body, a refused credential or message, a session gone) or a body that holds
   * no JSON-RPC message — the upstream is there and speaks HTTP. Undefined when no such answer
   * came: unreachable, timed out, aborted, refused by the gateway, or a stream cut or broken.
   */
  readonly answered: number | undefined;
  constructor(upstream: string, message: string, status?: number, answered?: number, kind?: FailureKind) {
    super(`upstream ${upstream}: ${message}`);
    this.upstream = upstream;
    this.detail = message;
    this.kind = kind;
    this.status = status;
    this.answered = answered;
  }
}
export class UpstreamSessionGone extends UpstreamError {}
/** The upstream refused its credential (401/403), or the principal has none for it. */
export class UpstreamAuthError extends UpstreamError {}
/** Nothing was sent: the caller has not connected this OAuth upstream (services/connections.ts); `url` is where a person does. */
export class UpstreamNotConnected extends UpstreamAuthError {
  readonly connectUrl: string;
  constructor(upstream: string, detail: string, connectUrl: string) {
    super(upstream, detail, 401);
    this.connectUrl = connectUrl;
  }
}
/** The request reached the upstream but no response came back (timeout, stream closed early): it may have run. */
export class UpstreamUncertain extends UpstreamError {}
/**
 * fetch itself failed at the network level before any response header (refused, reset, or a
 * pooled keep-alive connection the upstream had closed while idle — workerd's "Network connection
 * lost."): not a timeout, an abort, an egress refusal, or an HTTP status. The message stays
 * "unreachable (…)"; safe tools are retried once on it (governance/call.ts forwardWithRetry).
 */
export class UpstreamConnectionLost extends UpstreamError {}

/** Per-isolate part of upstream request ids: drawn on first use (Workers refuse random values at global scope). */
let isolateTag: string | undefined;
let requestCounter = 0;

/**
 * A fresh id for one request the gateway sends upstream: `pc:<isolate>:<n>`, 96 random bits per
 * isolate and a per-isolate counter (base 36). Upstream legs are shared — a 2026-07-28
 * principal's one legacy session per upstream serves all its runs and requests, from any isolate,
 * and a legacy client's session serves all its concurrent requests and fan-outs — and upstreams
 * route answers by id, so no id sent upstream may be derived from a client's id (two clients may
 * choose the same, or one that a fan-out would derive): every request sent upstream, client or
 * gateway-made, carries one of these, and the client's own id goes back on the answer. They never
 * collide with each other (counter), across isolates (random part), or with the `pc-<uuid>` ids
 * of requests relayed to clients.
 */
export function upstreamRequestId(): string {
  if (isolateTag === undefined) {
    let tag = "";
    for (const b of crypto.getRandomValues(new Uint8Array(12))) tag += b.toString(36).padStart(2, "0");
    isolateTag = tag;
  }
  requestCounter++;
  return `pc:${isolateTag}:${requestCounter.toString(36)}`;
}

export interface Frame {
  message: JsonRpcMessage;
  /** HTTP status of the upstream answer that carried the message. */
  status: number;
}

/**
 * What the upstream did with its answer stream besides sending messages (only with
 * `SendOptions.control`): it answered with an SSE stream, or it closed a resumable legacy stream
 * (one whose events carry ids) before the response — SEP-1699 polling — and the gateway is
 * resuming it with GET + Last-Event-ID. A stream closed without an event id is not resumable
 * and yields no signal (the request fails as before).
 */
export type StreamSignal =
  | { kind: "stream-opened"; status: number }
  | { kind: "stream-primed"; retryMs?: number }
  | { kind: "stream-closed-early"; lastEventId: string; retryMs?: number };

/** The upstream's stream opened with a priming event (an event id with empty data, SEP-1699), read by readFrames. */
export interface Primed {
  kind: "primed";
}

/** A message frame or a stream signal (requestUpstream with `control: true`). */
export type UpstreamFrame = Frame | StreamSignal;

export interface SendOptions {
  signal?: AbortSignal;
  /** Mcp-Param-* headers to forward verbatim (modern leg). */
  paramHeaders?: [string, string][];
  /** The client request's trace: the request carries its traceparent (and tracestate), the gateway's span as parent. */
  trace?: TraceContext;
  /** A long-lived stream (subscriptions/listen): bounded by time, not size. */
  stream?: boolean;
  /** Also yield StreamSignal frames (requestUpstream only). */
  control?: boolean;
}

const HEADER_SAFE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;
/** SEP-2243: values that are not plain header-safe ASCII travel base64-wrapped. */
export function encodeHeaderValue(v: string): string {
  if (HEADER_SAFE.test(v) && !/^=\?base64\?.*\?=$/.test(v)) return v;
  const bytes = new TextEncoder().encode(v);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return `=?base64?${btoa(bin)}?=`;
}

/** Mcp-Name per SEP-2243: the name/uri/taskId the request targets, if any. */
export function routingName(method: string, params: JsonObject | undefined): string | undefined {
  if (!params) return undefined;
  if (method === "tools/call" || method === "prompts/get") return typeof params.name === "string" ? params.name : undefined;
  if (method === "resources/read") return typeof params.uri === "string" ? params.uri : undefined;
  if (method === "tasks/get" || method === "tasks/update" || method === "tasks/cancel") {
    return typeof params.taskId === "string" ? params.taskId : undefined;
  }
  return undefined;
}

export function baseHeaders(up: UpstreamConfig, leg: Leg | undefined, msg: JsonRpcMessage | undefined): Headers {
  const h = new Headers(up.headers);
  h.set("content-type", "application/json");
  h.set("accept", "application/json, text/event-stream");
  if (!leg) return h;
  if (leg.era === "legacy") {
    h.set("mcp-protocol-version", leg.protocolVersion);
    if (leg.sessionId) h.set("mcp-session-id", leg.sessionId);
  } else {
    h.set("mcp-protocol-version", MODERN_VERSION);
    if (msg && "method" in msg) {
      h.set("mcp-method", msg.method);
      const name = routingName(msg.method, msg.params);
      if (name !== undefined) h.set("mcp-name", encodeHeaderValue(name));
    }
  }
  return h;
}

/** The caller's signal (guardedFetch adds the upstream's timeout); a never-aborting one if none. */
export function timeoutSignal(_up: UpstreamConfig, outer?: AbortSignal): AbortSignal {
  return outer ?? new AbortController().signal;
}

/** The error of a request that cannot be sent for want of the caller's credential (never sent without it). */
export function credentialRefusal(up: UpstreamConfig, problem: string): UpstreamAuthError {
  return up.connect ? new UpstreamNotConnected(up.name, problem, up.connect.url) : new UpstreamAuthError(up.name, problem, 401);
}

/** Long-lived upstream streams (GET, listen) end after a day at most; clients reconnect. */
const STREAM_MAX_MS = 24 * 3600_000;

/**
 * Every upstream request goes through the egress guard: the URL (and any redirect hop, of which
 * none is followed) is checked before the fetch, and the answer is bounded in time and size.
 * Long-lived streams (GET, listen) are bounded by time only.
 */
export async function send(
  up: UpstreamConfig,
  init: { method: string; headers: Headers; body?: string },
  signal: AbortSignal,
  stream = false,
): Promise<Response> {
  if (up.credentialProblem) throw credentialRefusal(up, up.credentialProblem);
  let res: Response;
  try {
    res = await guardedFetch(
      up.url,
      { ...init, signal },
      {
        rules: up.egress,
        gatewayOnLoopback: up.onLoopback,
        maxRedirects: 0,
        timeoutMs: stream ? STREAM_MAX_MS : up.timeoutMs,
        ...(stream ? { maxBytes: Number.MAX_SAFE_INTEGER } : {}),
      },
    );
  } catch (e) {
    const err = e as Error;
    if (e instanceof EgressError) {
      if (e.kind === "timeout") throw new UpstreamUncertain(up.name, `no answer within ${up.timeoutMs} ms`, 504);
      throw new UpstreamError(up.name, `${e.reason}; Portcullis refused the connection`, 502, undefined, "egress_refused");
    }
    if (err.name === "TimeoutError") throw new UpstreamUncertain(up.name, `no answer within ${up.timeoutMs} ms`, 504);
    if (err.name === "AbortError") throw new UpstreamUncertain(up.name, "request aborted", 499);
    // The caller's signal fired with a reason of its own (e.g. the kill switch): not a lost connection.
    if (signal.aborted) throw new UpstreamError(up.name, `unreachable (${err.message})`, 502, undefined, "aborted");
    throw new UpstreamConnectionLost(up.name, `unreachable (${err.message})`, 502);
  }
  if (res.status === 401 || res.status === 403) {
    await res.body?.cancel();
    throw new UpstreamAuthError(
      up.name,
      `refused the gateway's ${up.credentials.mode} credential (HTTP ${res.status}); check the upstream credential configured for it`,
      res.status,
      res.status,
    );
  }
  return res;
}

/**
 * What an error raised while an answer's body is read means (the request reached the upstream):
 * a body over the egress cap fails the request, like a declared length over it (send); the
 * deadline firing, the caller's abort or the connection lost mid-answer leave it uncertain — it
 * may have run. Every case names the upstream and the reason; none escapes as a plain Error.
 */
function bodyError(up: UpstreamConfig, e: unknown): UpstreamError {
  if (e instanceof UpstreamError) return e;
  if (e instanceof EgressError) {
    if (e.kind === "too_large") return new UpstreamError(up.name, `${e.reason}; Portcullis stopped reading the answer`, 502, undefined, "invalid_answer");
    if (e.kind === "timeout") return new UpstreamUncertain(up.name, `no answer within ${up.timeoutMs} ms`, 504);
    return new UpstreamUncertain(up.name, `${e.reason} while the answer was read`, 502);
  }
  const err = e as Error | undefined;
  if (err?.name === "TimeoutError") return new UpstreamUncertain(up.name, `no answer within ${up.timeoutMs} ms`, 504);
  if (err?.name === "AbortError") return new UpstreamUncertain(up.name, "request aborted", 499);
  const why = String(err?.message ?? e).slice(0, 200);
  return new UpstreamUncertain(up.name, `the connection was lost while the answer was read (${why || "no reason given"})`, 502);
}

/**
 * Reads one upstream answer (JSON or SSE) as frames. Tracks the last event id and retry hint.
 * Errors of the body (cap, deadline, lost connection) become upstream errors (bodyError).
 */
export function readAnswer(up: UpstreamConfig, res: Response, track: { lastEventId?: string; retryMs?: number }): AsyncGenerator<Frame> {
  // Without `primed`, readFrames yields message frames only.
  return readFrames(up, res, track, false) as AsyncGenerator<Frame>;
}

/**
 * readAnswer, and (with `primed`) a Primed marker where the stream's first event is a priming
 * event (an id and empty data), so a front can open its own stream the same way the moment the
 * upstream does.
 */
export async function* readFrames(
  up: UpstreamConfig,
  res: Response,
  track: { lastEventId?: string; retryMs?: number },
  primed = true,
): AsyncGenerator<Frame | Primed> {
  const ct = res.headers.get("content-type") ?? "";
  if (ct.includes("text/event-stream") && res.body) {
    const events = parseSse(res.body, (ms) => (track.retryMs = ms));
    let done = false;
    let first = true;
    try {
      for (;;) {
        let next: IteratorResult<SseEvent>;
        try {
          next = await events.next();
        } catch (e) {
          done = true;
          throw bodyError(up, e);
        }
        if (next.done) {
          done = true;
          return;
        }
        const ev = next.value;
        if (ev.id !== undefined) track.lastEventId = ev.id;
        const wasFirst = first;
        first = false;
        if (ev.data.trim() === "") {
          if (primed && wasFirst && ev.id !== undefined) yield { kind: "primed" };
          continue;
        }
        const v = parseMessage(ev.data);
        if (!v.ok) throw new UpstreamUncertain(up.name, `sent an invalid SSE message (${v.reason})`, 502, undefined, "invalid_answer");
        yield { message: v.message, status: res.status };
      }
    } finally {
      // The consumer stopped early (or the message was invalid): release the stream as for-await would.
      if (!done) await events.return(undefined).catch(() => undefined);
    }
  }
  let text: string;
  try {
    text = await res.text();
  } catch (e) {
    throw bodyError(up, e);
  }
  if (text.trim() === "") return;
  const v = parseMessage(text);
  if (!v.ok) {
    throw new UpstreamError(up.name, `answered HTTP ${res.status} without a JSON-RPC message`, res.status >= 500 ? 502 : res.status, res.status);
  }
  yield { message: v.message, status: res.status };
}

/** Whether `m` answers request `id` (an error with a null id answers the request it could not parse). */
export function answers(m: JsonRpcMessage, id: JsonRpcRequest["id"]): m is JsonRpcResponse {
  return isResponse(m) && (m.id === id || (m.id === null && m.error !== undefined));
}

/** Waits `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}
