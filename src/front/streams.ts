/**
 * Long-lived legacy SSE streams: the session's GET stream (fan-in of every upstream's
 * server-initiated messages) and replay of a broken stream from the SessionDO buffer
 * (Last-Event-ID). Owns: keep-alives, event ids `<stream>/<seq>`, relaying server→client
 * requests that arrive on upstream GET streams, and ending every such stream with its grant
 * (grant-watch.ts: at expiry, on revocation, or when the revocation list cannot be read).
 * Must never: replay events onto a different stream, keep upstream streams open after the
 * client has gone, or deliver anything after the grant that opened the stream has ended.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { ErrorCode, type JsonRpcMessage, type JsonRpcRequest, isNotification, isObject, isRequest } from "../wire/jsonrpc.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { noteNotification } from "../upstream/catalog-cache.ts";
import { exposeUri } from "../protocol/exposed-names.ts";

import type { SessionApi, SessionRecord } from "../../durable-objects/contract.ts";
import { encodeComment, encodeEvent } from "../wire/sse.ts";
import { listChangeFlags } from "../upstream/legs.ts";
import { endWithGrant } from "./grant-watch.ts";
import { watchConfigVersion } from "../ports/live-config.ts";
import { relayServerRequest } from "./relay.ts";
import { openGetStream, requestUpstream } from "../upstream/client.ts";
import { type Frame, upstreamRequestId } from "../upstream/exchange.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import { META } from "../protocol/versions.ts";
import { SSE_HEADERS, refuse } from "../wire/http.ts";

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
    try {
      await writer.write(chunk);
      return true;
    } catch {
      gone = true;
      return false;
    }
  };
  return { readable: ts.readable, write, close: () => writer.close().catch(() => undefined), gone: () => gone };
}

/** GET + Last-Event-ID: replays what the buffer holds after that event, then follows the stream to its end. */
export async function replayStream(fc: FrontContext, store: Store, lastEventId: string, signal: AbortSignal): Promise<Response> {
  const m = /^([A-Za-z0-9]+)\/(\d+)$/.exec(lastEventId.trim());
  if (!m) return refuse(400, ErrorCode.InvalidRequest, "Invalid Last-Event-ID: not an event id this gateway issued");
  const stream = m[1]!;
  let after = Number(m[2]);
  const first = await store.readEvents(fc.principal.sub, stream, after);
  if (!first) return refuse(404, ErrorCode.ServerError, "Unknown stream for Last-Event-ID: it was never issued in this session or has been discarded");
  const s = sseStream();
  // Ends when the client leaves, the stream is done, or the grant ends (then at once).
  const ended = new AbortController();
  const left = () => ended.abort();
  signal.addEventListener("abort", left, { once: true });
  if (signal.aborted) ended.abort();
  const grant = endWithGrant(fc.env, fc.principal, ended);
  ended.signal.addEventListener("abort", () => void s.close(), { once: true });
  const pump = async () => {
    const deadline = Date.now() + REPLAY_MAX_MS;
    let batch: { events: { seq: number; data: string }[]; done: boolean } | null = first;
    let wait = 50;
    try {
      while (batch && !ended.signal.aborted && !s.gone()) {
        for (const e of batch.events) {
          if (ended.signal.aborted || !(await s.write(encodeEvent({ id: `${stream}/${e.seq}`, data: e.data })))) return;
          after = e.seq;
        }
        if (batch.done || Date.now() > deadline) break;
        if (batch.events.length) wait = 50;
        await pause(wait, ended.signal);
        wait = Math.min(wait * 2, 1000);
        if (ended.signal.aborted) break;
        batch = await store.readEvents(fc.principal.sub, stream, after);
      }
    } finally {
      grant.stop();
      signal.removeEventListener("abort", left);
      await s.close();
    }
  };
  fc.waitUntil(pump());
  return new Response(s.readable, { status: 200, headers: SSE_HEADERS });
}

/**
 * A 2026-07-28 upstream's change notifications for a legacy session: one subscriptions/listen
 * asking for the list changes the upstream declares and the resources the session subscribed.
 */
function listenFor(up: UpstreamConfig, leg: Leg & { era: "modern" }, rec: SessionRecord, signal: AbortSignal): AsyncGenerator<Frame> | null {
  const notifications = listChangeFlags(rec.upstreams[up.name]?.capabilities);
  const subs = rec.subscriptions?.[up.name] ?? [];
  if (subs.length) notifications.resourceSubscriptions = subs;
  if (Object.keys(notifications).length === 0) return null;
  const listenMsg: JsonRpcRequest = {
    jsonrpc: "2.0",
    id: upstreamRequestId(),
    method: "subscriptions/listen",
    params: { notifications, _meta: leg.meta },
  };
  return requestUpstream(up, leg, listenMsg, { signal, stream: true });
}

const SUBSCRIPTION_POLL_MS = 1000;

/** Waits `ms`, or less if `signal` aborts first. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((r) => {
    if (signal.aborted) return r();
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      r();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * Resolves with the session record once its subscriptions for `upstream` differ, "ended" when the
 * session is gone, null when `signal` ends the watch.
 */
async function watchSubscriptions(
  store: Store,
  principal: string,
  upstream: string,
  rec: SessionRecord,
  signal: AbortSignal,
): Promise<SessionRecord | "ended" | null> {
  const key = (r: SessionRecord) => JSON.stringify([...(r.subscriptions?.[upstream] ?? [])].sort());
  const was = key(rec);
  while (!signal.aborted) {
    await new Promise<void>((r) => {
      const t = setTimeout(r, SUBSCRIPTION_POLL_MS);
      signal.addEventListener(
        "abort",
        () => {
          clearTimeout(t);
          r();
        },
        { once: true },
      );
    });
    if (signal.aborted) return null;
    const now = await store.open(principal).catch(() => null);
    if (!now) return "ended";
    if (key(now) !== was) return now;
  }
  return null;
}

/** The session's GET stream: every upstream's server-initiated messages, fanned in. */
export async function relayGetStream(
  fc: FrontContext,
  store: Store,
  rec: SessionRecord,
  signal: AbortSignal,
  legOf: (up: UpstreamConfig) => Leg | null,
): Promise<Response> {
  const s = sseStream();
  const streamId = `g${crypto.randomUUID().replace(/-/g, "")}`;
  let seq = 0;
  const abort = new AbortController();
  signal.addEventListener("abort", () => abort.abort(), { once: true });
  const send = async (m: JsonRpcMessage) => {
    if (abort.signal.aborted) return; // the stream ended (client gone, grant ended): nothing more goes out
    seq++;
    const data = JSON.stringify(m);
    void store.appendEvents(streamId, [{ seq, data }], false).catch(() => undefined);
    if (!(await s.write(encodeEvent({ id: `${streamId}/${seq}`, data })))) abort.abort();
  };
  await store.appendEvents(streamId, [], false);
  // Not awaited: the stream has no reader until the Response is returned.
  const primed = s.write(encodeEvent({ id: `${streamId}/0`, retry: fc.cfg.sseRetryMs, data: "" }));
  /** Relays frames until the stream ends; false when it ended with an error answer (do not retry). */
  const relayFrames = async (up: UpstreamConfig, leg: Leg, frames: AsyncGenerator<Frame>): Promise<boolean> => {
    try {
      for await (const f of frames) {
        const msg = f.message;
        if (!isRequest(msg) && !isNotification(msg)) {
          if ("error" in msg && msg.error) return false;
          continue;
        }
        if (isRequest(msg)) {
          await relayServerRequest(store, fc.principal.sub, rec.clientCapabilities, up, leg, msg, send);
        } else if (isNotification(msg)) {
          if (msg.method === "notifications/subscriptions/acknowledged") continue;
          noteNotification(up.name, msg.method);
          if (leg.era === "modern") delete (msg.params?._meta as Record<string, unknown> | undefined)?.[META.subscriptionId];
          if (msg.method === "notifications/resources/updated" && isObject(msg.params) && typeof msg.params.uri === "string") {
            await send({ ...msg, params: { ...msg.params, uri: exposeUri(up, msg.params.uri) } });
          } else await send(msg);
        }
      }
    } catch {
      // The upstream stream broke, the client left, or the listen is being renewed.
    }
    return true;
  };
  const pumps = fc.cfg.upstreams.map(async (up) => {
    await primed;
    const leg = legOf(up);
    if (!leg) return;
    if (leg.era === "legacy") {
      const frames = await openGetStream(up, leg, abort.signal).catch(() => null);
      if (frames) await relayFrames(up, leg, frames);
      return;
    }
    // 2026-07-28 upstream: a listen carrying the session's subscriptions, renewed when they
    // change; a listen that drops is retried with backoff, one the upstream refuses is not.
    let current = rec;
    let backoff = 1000;
    while (!abort.signal.aborted) {
      const round = new AbortController();
      const stop = () => round.abort();
      abort.signal.addEventListener("abort", stop, { once: true });
      let changed: SessionRecord | "ended" | null = null;
      const watching = watchSubscriptions(store, fc.principal.sub, up.name, current, round.signal).then((w) => {
        changed = w;
        round.abort();
      });
      const frames = listenFor(up, leg, current, round.signal);
      const usable = frames ? await relayFrames(up, leg, frames) : true;
      if (frames && usable && !changed && !round.signal.aborted) {
        await new Promise((r) => setTimeout(r, backoff)); // the upstream closed the listen: back off, then renew
        backoff = Math.min(backoff * 2, 30_000);
      }
      if (!frames || !usable) await watching; // nothing to listen to until the subscriptions change
      round.abort();
      abort.signal.removeEventListener("abort", stop);
      await watching;
      const w = changed as SessionRecord | "ended" | null;
      if (w === "ended" || (!usable && w === null)) return;
      if (w) {
        current = w;
        backoff = 1000;
      }
    }
  });
  // A hot reload (a new live config version) changes the tool list: tell the client.
  watchConfigVersion(fc.env, abort.signal, async () => {
    await primed;
    await send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
  });
  holdOpen(fc, s, abort, pumps);
  return new Response(s.readable, { status: 200, headers: SSE_HEADERS });
}

/**
 * Keeps a fan-in stream open until the client leaves or the grant that opened it ends (expiry,
 * revocation, an unreadable revocation list: grant-watch.ts): `: keep-alive` comments every 25 s
 * (the edge drops idle streams). Once `abort` fires — for either reason, or because a write
 * failed — the client's stream closes at once and the pumps' upstream streams are aborted with
 * it (they use `abort.signal`); the pumps must send nothing after it.
 */
export function holdOpen(fc: FrontContext, s: ReturnType<typeof sseStream>, abort: AbortController, pumps: Promise<unknown>[]): void {
  endWithGrant(fc.env, fc.principal, abort); // stops by itself once `abort` fires
  if (abort.signal.aborted) void s.close();
  else abort.signal.addEventListener("abort", () => void s.close(), { once: true });
  const keepalive = (async () => {
    while (!abort.signal.aborted) {
      await pause(KEEPALIVE_MS, abort.signal);
      if (!abort.signal.aborted && !(await s.write(encodeComment("keep-alive")))) abort.abort();
    }
  })();
  fc.waitUntil(
    Promise.all([Promise.all(pumps), keepalive]).finally(() => {
      abort.abort();
      void s.close();
    }),
  );
}
