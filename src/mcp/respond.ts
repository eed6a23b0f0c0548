/**
 * Answering one client POST: a JSON body when nothing but the response is sent, an SSE stream
 * as soon as an interim message (progress, log, relayed request) must go out first.
 * Owns: that lazy JSON/SSE choice, priming events with `retry`, event ids and the hand-off of
 * every event to a resumption buffer, and turning pipeline failures into JSON-RPC errors.
 * Must never: drop the final response (a client that went away still has it buffered), or
 * answer a 5xx for a failure the pipeline already explained as a JSON-RPC error.
 */
import type { Outcome } from "./context.ts";
import { ErrorCode, type JsonRpcId, type JsonRpcMessage, errorResponse } from "../wire/jsonrpc.ts";
import { encodeComment, encodeEvent } from "../wire/sse.ts";
import { UpstreamError } from "./upstream.ts";

export interface Resumable {
  streamId: string;
  retryMs: number;
  /** Persists event `seq` (1-based; 0 is the priming event) of this stream. */
  persist(seq: number, data: string): void;
  /** Marks the stream complete in the buffer. */
  finish(): void;
}

export interface RespondOptions {
  headers?: Record<string, string>;
  waitUntil(p: Promise<unknown>): void;
  /** Legacy streams are resumable; modern streams carry no event ids. */
  resumable?: Resumable;
}

export function jsonResponse(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...headers, "content-type": "application/json" } });
}

export const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache, no-transform", "x-accel-buffering": "no" };

/** Explains a pipeline failure to the client as a JSON-RPC error (never a crash). */
export function failureOutcome(id: JsonRpcId, e: unknown): Outcome {
  if (e instanceof UpstreamError) return { response: errorResponse(id, ErrorCode.InternalError, e.message), status: 200 };
  console.error("portcullis: internal error", (e as Error)?.stack ?? String(e));
  return { response: errorResponse(id, ErrorCode.InternalError, "Internal error in Portcullis; the call was not completed"), status: 200 };
}

export function respond(id: JsonRpcId, run: (emit: (m: JsonRpcMessage) => Promise<void>) => Promise<Outcome>, opts: RespondOptions): Promise<Response> {
  return new Promise<Response>((resolve) => {
    let writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
    let clientGone = false;
    let seq = 0;
    const write = async (chunk: Uint8Array) => {
      if (clientGone || !writer) return;
      try {
        await writer.write(chunk);
      } catch {
        clientGone = true;
      }
    };
    const open = () => {
      const ts = new TransformStream<Uint8Array, Uint8Array>();
      writer = ts.writable.getWriter();
      resolve(new Response(ts.readable, { status: 200, headers: { ...opts.headers, ...SSE_HEADERS } }));
      const r = opts.resumable;
      if (r) void write(encodeEvent({ id: `${r.streamId}/0`, retry: r.retryMs, data: "" }));
      else void write(encodeComment("portcullis"));
    };
    const emit = async (m: JsonRpcMessage) => {
      if (!writer) open();
      seq++;
      const data = JSON.stringify(m);
      const r = opts.resumable;
      r?.persist(seq, data);
      await write(encodeEvent(r ? { id: `${r.streamId}/${seq}`, data } : { data }));
    };
    const done = run(emit)
      .catch((e) => failureOutcome(id, e))
      .then(async (out) => {
        if (!writer) {
          resolve(jsonResponse(out.response, out.status, opts.headers));
          return;
        }
        await emit(out.response);
        opts.resumable?.finish();
        if (!clientGone) await (writer as WritableStreamDefaultWriter<Uint8Array>).close().catch(() => undefined);
      });
    opts.waitUntil(done);
  });
}
