/**
 * Answering one client POST: a JSON body when nothing but the response is sent, an SSE stream
 * as soon as an interim message (progress, log, relayed request) must go out first or the
 * upstream answered with a stream of its own.
 * Owns: that lazy JSON/SSE choice, priming events with `retry`, event ids and the hand-off of
 * every event to a resumption buffer, closing a resumable client stream early where the upstream
 * closed its own (SEP-1699 polling: the call runs on and its later events reach only the
 * buffer), and turning pipeline failures into JSON-RPC errors.
 * Must never: drop the final response (a client that went away, or whose stream was closed
 * early, still has it buffered), close a stream early before its events are in the buffer, or
 * answer a 5xx for a failure the pipeline already explained as a JSON-RPC error.
 */
import type { Outcome } from "../protocol/call-context.ts";
import { ErrorCode, type JsonRpcId, type JsonRpcMessage, errorResponse } from "../wire/jsonrpc.ts";
import { encodeComment, encodeEvent } from "../wire/sse.ts";
import { UpstreamError } from "../upstream/exchange.ts";
import { jsonResponse, SSE_HEADERS } from "../wire/http.ts";

export interface Resumable {
  streamId: string;
  retryMs: number;
  /**
   * Whether the client's protocol version takes a priming event (an id with empty data:
   * 2025-11-25 and later; older clients may fail on empty data). Only a primed stream, from
   * which the client can always resume, is ever closed early.
   */
  priming: boolean;
  /** The stream opened (the buffer keeps it from then on, or once it proves long-lived; see legacy.ts). */
  open(): void;
  /** A write to the client failed: it went away, and everything from now on must be resumable. */
  lost(): void;
  /** Persists event `seq` (1-based; 0 is the priming event) of this stream. */
  persist(seq: number, data: string, final: boolean): void;
  /** Resolves once everything handed to open() and persist() so far is stored. */
  flushed(): Promise<void>;
  /** Marks the stream complete in the buffer. */
  finish(): void;
}

/** What the pipeline may do to the client's stream besides emitting messages on it. */
export interface StreamControl {
  /** The upstream answered with a stream: the client's answer becomes a stream now (idempotent). */
  open(): void;
  /**
   * The upstream closed its resumable stream before the response: close the client's stream
   * too, once every event sent on it is in the buffer. Later events and the response then go to
   * the buffer only, for the client's GET + Last-Event-ID. False (and nothing closed) when the
   * client's stream is not resumable; the call then answers on the open stream as before.
   */
  closeEarly(): Promise<boolean>;
  /**
   * The upstream's stream opened with a priming event (SEP-1699): the client's stream opens with
   * one too (an id of this gateway's and `retry`), even where its version alone would not have
   * one, and becomes one the gateway may close early. Idempotent; never after another event.
   */
  prime(): void;
  /** Keeps an idle answer alive: opens the stream (idempotent) and writes an SSE comment, which carries no event. */
  keepAlive(): Promise<void>;
}

export interface RespondOptions {
  headers?: Record<string, string>;
  waitUntil(p: Promise<unknown>): void;
  /** Legacy streams are resumable; modern streams carry no event ids. */
  resumable?: Resumable;
}

/** Explains a pipeline failure to the client as a JSON-RPC error (never a crash). */
function failureOutcome(id: JsonRpcId, e: unknown): Outcome {
  if (e instanceof UpstreamError) return { response: errorResponse(id, ErrorCode.InternalError, e.message), status: 200 };
  console.error("portcullis: internal error", (e as Error)?.stack ?? String(e));
  return { response: errorResponse(id, ErrorCode.InternalError, "Internal error in Portcullis; the call was not completed"), status: 200 };
}

export function respond(
  id: JsonRpcId,
  run: (emit: (m: JsonRpcMessage) => Promise<void>, stream: StreamControl) => Promise<Outcome>,
  opts: RespondOptions,
): Promise<Response> {
  return new Promise<Response>((resolve) => {
    let writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
    /** The client went away, or its stream was closed early: nothing more is written to it. */
    let clientGone = false;
    let closedEarly = false;
    let primed = false;
    let seq = 0;
    const write = async (chunk: Uint8Array) => {
      if (clientGone || !writer) return;
      try {
        await writer.write(chunk);
      } catch {
        clientGone = true;
        opts.resumable?.lost();
      }
    };
    const open = () => {
      if (writer) return;
      const ts = new TransformStream<Uint8Array, Uint8Array>();
      writer = ts.writable.getWriter();
      resolve(new Response(ts.readable, { status: 200, headers: { ...opts.headers, ...SSE_HEADERS } }));
      const r = opts.resumable;
      r?.open();
      if (r?.priming) {
        primed = true;
        void write(encodeEvent({ id: `${r.streamId}/0`, retry: r.retryMs, data: "" }));
      } else void write(encodeComment("portcullis"));
    };
    const prime = () => {
      const r = opts.resumable;
      open();
      if (!r || primed || seq > 0) return;
      primed = true;
      void write(encodeEvent({ id: `${r.streamId}/0`, retry: r.retryMs, data: "" }));
    };
    const emit = async (m: JsonRpcMessage, final = false) => {
      open();
      seq++;
      const data = JSON.stringify(m);
      const r = opts.resumable;
      r?.persist(seq, data, final);
      await write(encodeEvent(r ? { id: `${r.streamId}/${seq}`, data } : { data }));
    };
    const closeEarly = async (): Promise<boolean> => {
      const r = opts.resumable;
      if (!r || !primed) return false;
      if (closedEarly) return true;
      closedEarly = true;
      open();
      const w = writer as WritableStreamDefaultWriter<Uint8Array> | null;
      if (!w) return false;
      // The client comes back with GET + Last-Event-ID as soon as the stream ends: the buffer
      // must already hold the stream and every event it was sent.
      await r.flushed();
      if (clientGone) return true;
      clientGone = true;
      // Not awaited: the close follows the queued writes, and the call must not wait on a slow reader.
      void w.close().catch(() => undefined);
      return true;
    };
    const keepAlive = async () => {
      open();
      await write(encodeComment("keep-alive"));
    };
    const done = run(emit, { open, closeEarly, prime, keepAlive })
      .catch((e) => failureOutcome(id, e))
      .then(async (out) => {
        if (!writer) {
          resolve(jsonResponse(out.response, out.status, opts.headers));
          return;
        }
        await emit(out.response, true);
        opts.resumable?.finish();
        if (!clientGone) await (writer as WritableStreamDefaultWriter<Uint8Array>).close().catch(() => undefined);
      });
    opts.waitUntil(done);
  });
}
