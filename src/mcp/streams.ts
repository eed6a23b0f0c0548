/**
 * Long-lived legacy SSE streams: the session's GET stream (fan-in of every upstream's
 * server-initiated messages) and replay of a broken stream from the SessionDO buffer
 * (Last-Event-ID). Owns: keep-alives, event ids `<stream>/<seq>`, relaying server→client
 * requests that arrive on upstream GET streams. Must never: replay events onto a different
 * stream, or keep upstream streams open after the client has gone.
 */
import type { UpstreamConfig } from "../config/load.ts";
import { ErrorCode, type JsonRpcMessage, isNotification, isObject, isRequest } from "./jsonrpc.ts";
import type { FrontContext } from "./legacy.ts";
import { exposeUri } from "./names.ts";
import { SSE_HEADERS } from "./respond.ts";
import type { SessionApi, SessionRecord } from "./session-types.ts";
import { encodeComment, encodeEvent } from "./sse.ts";
import { relayServerRequest } from "./relay.ts";
import { openGetStream, type Leg } from "./upstream.ts";
import { refuse } from "./edge.ts";

type Store = SessionApi;

const KEEPALIVE_MS = 25_000;
const REPLAY_MAX_MS = 10 * 60_000;

/** A writable SSE body whose writes report (instead of throw) when the client has gone. */
export function sseStream() {
  const ts = new TransformStream<Uint8Array, Uint8Array>();
  const writer = ts.writable.getWriter();
  let gone = false;
  const write = async (chunk: Uint8Array) => {
    if (gone) return false;
    try { await writer.write(chunk); return true; } catch { gone = true; return false; }
  };
  return { readable: ts.readable, write, close: () => writer.close().catch(() => undefined), gone: () => gone };
}

/** GET + Last-Event-ID: replays what the buffer holds after that event, then follows the stream to its end. */
export async function replayStream(fc: FrontContext, store: Store, lastEventId: string, signal: AbortSignal): Promise<Response> {
  const m = /^([A-Za-z0-9]+)\/(\d+)$/.exec(lastEventId.trim());
  if (!m) return refuse(400, ErrorCode.InvalidRequest, "Invalid Last-Event-ID: not an event id this gateway issued");
  const stream = m[1]!;
  let after = Number(m[2]);
  const first = await store.readEvents(fc.principal, stream, after);
  if (!first) return refuse(404, ErrorCode.ServerError, "Unknown stream for Last-Event-ID: it was never issued in this session or has been discarded");
  const s = sseStream();
  const pump = async () => {
    const deadline = Date.now() + REPLAY_MAX_MS;
    let batch: { events: { seq: number; data: string }[]; done: boolean } | null = first;
    let wait = 50;
    while (batch && !signal.aborted && !s.gone()) {
      for (const e of batch.events) {
        if (!(await s.write(encodeEvent({ id: `${stream}/${e.seq}`, data: e.data })))) return;
        after = e.seq;
      }
      if (batch.done || Date.now() > deadline) break;
      if (batch.events.length) wait = 50;
      await new Promise((r) => setTimeout(r, wait));
      wait = Math.min(wait * 2, 1000);
      batch = await store.readEvents(fc.principal, stream, after);
    }
    await s.close();
  };
  fc.waitUntil(pump());
  return new Response(s.readable, { status: 200, headers: SSE_HEADERS });
}

/** The session's GET stream: every legacy upstream leg's GET stream, fanned in. */
export async function relayGetStream(
  fc: FrontContext, store: Store, rec: SessionRecord, signal: AbortSignal, legOf: (up: UpstreamConfig) => Leg | null,
): Promise<Response> {
  const s = sseStream();
  const streamId = `g${crypto.randomUUID().replace(/-/g, "")}`;
  let seq = 0;
  const abort = new AbortController();
  signal.addEventListener("abort", () => abort.abort(), { once: true });
  const send = async (m: JsonRpcMessage) => {
    seq++;
    const data = JSON.stringify(m);
    void store.appendEvents(streamId, [{ seq, data }], false).catch(() => undefined);
    if (!(await s.write(encodeEvent({ id: `${streamId}/${seq}`, data })))) abort.abort();
  };
  await store.appendEvents(streamId, [], false);
  // Not awaited: the stream has no reader until the Response is returned.
  const primed = s.write(encodeEvent({ id: `${streamId}/0`, retry: fc.cfg.sseRetryMs, data: "" }));
  const pumps = fc.cfg.upstreams.map(async (up) => {
    await primed;
    const leg = legOf(up);
    if (leg?.era !== "legacy") return;
    const frames = await openGetStream(up, leg, abort.signal).catch(() => null);
    if (!frames) return;
    try {
      for await (const f of frames) {
        const msg = f.message;
        if (isRequest(msg)) {
          await relayServerRequest(store, fc.principal, rec.clientCapabilities, up, leg, msg, send);
        } else if (isNotification(msg)) {
          if (msg.method === "notifications/resources/updated" && isObject(msg.params) && typeof msg.params.uri === "string") {
            await send({ ...msg, params: { ...msg.params, uri: exposeUri(up, msg.params.uri) } });
          } else await send(msg);
        }
      }
    } catch {
      // The upstream stream broke or the client left; the other upstreams carry on.
    }
  });
  holdOpen(fc, s, abort, pumps);
  return new Response(s.readable, { status: 200, headers: SSE_HEADERS });
}

/**
 * Keeps a fan-in stream open until the client leaves: `: keep-alive` comments every 25 s
 * (the edge drops idle streams), then aborts the upstream pumps and closes the stream.
 */
export function holdOpen(fc: FrontContext, s: ReturnType<typeof sseStream>, abort: AbortController, pumps: Promise<unknown>[]): void {
  const left = new Promise<void>((r) => (abort.signal.aborted ? r() : abort.signal.addEventListener("abort", () => r(), { once: true })));
  const keepalive = (async () => {
    while (!abort.signal.aborted) {
      await Promise.race([new Promise((r) => setTimeout(r, KEEPALIVE_MS)), left]);
      if (!abort.signal.aborted && !(await s.write(encodeComment("keep-alive")))) abort.abort();
    }
  })();
  fc.waitUntil(Promise.all([Promise.all(pumps), keepalive]).finally(() => { abort.abort(); void s.close(); }));
}
