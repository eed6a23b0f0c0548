/**
 * SseDO: one legacy HTTP+SSE session (the MCP 2024-11-05 transport, `gateway.legacy_sse`), named
 * `sse:<id>` (durable-objects/object-names.ts). A Worker isolate holds the client's `GET /sse` and the
 * `POST /messages` that follow may land on any other isolate, so the stream itself lives here: the
 * GET handler opens it (fetch `POST /open`), every POST handler pushes its answers into it (RPC).
 * Owns, in memory only: the stream's owner (principal `sub` and grant `jti`), its writer (the
 * `endpoint` event first, then `message` events in the order they were pushed, keep-alive
 * comments between), the Mcp-Session-Id of the legacy session it wraps once initialize bound
 * one, and its end. Stores nothing durable: the stream cannot outlive the object, so neither can
 * its state; an evicted or restarted object is a closed session (a new instance was never opened).
 * Must never: write for, or reveal the wrapped session to, anyone but the owner; accept anything
 * after the stream ended; open twice; or run any protocol logic (src/front/http-sse.ts does).
 */
import { DurableObject } from "cloudflare:workers";
import { SSE_HEADERS } from "../src/wire/http.ts";
import { encodeComment, encodeEvent } from "../src/wire/sse.ts";
import type { SseApi, SseBind, SseOpenRequest, SseOwner } from "./contract.ts";

/** Keep-alive bounds the object accepts (the front asks for 15 s; tests for less). */
const MIN_KEEPALIVE_MS = 10;
const MAX_KEEPALIVE_MS = 60_000;

function isOwner(v: unknown): v is SseOwner {
  if (typeof v !== "object" || v === null) return false;
  const o = v as Record<string, unknown>;
  return typeof o.sub === "string" && o.sub.length > 0 && (o.jti === null || typeof o.jti === "string");
}

/** The open request's fields when they are well-formed; null otherwise. */
export function parseOpen(v: unknown): SseOpenRequest | null {
  if (typeof v !== "object" || v === null) return null;
  const o = v as Record<string, unknown>;
  if (!isOwner(o.owner) || typeof o.endpoint !== "string" || !o.endpoint.startsWith("/") || /[\r\n]/.test(o.endpoint)) return null;
  if (typeof o.keepAliveMs !== "number" || !Number.isFinite(o.keepAliveMs)) return null;
  const keepAliveMs = Math.min(Math.max(Math.round(o.keepAliveMs), MIN_KEEPALIVE_MS), MAX_KEEPALIVE_MS);
  return { owner: { sub: o.owner.sub, jti: o.owner.jti }, endpoint: o.endpoint, keepAliveMs };
}

/**
 * The state machine of one stream, without the object around it: open once → (bound) → closed.
 * Writes are queued in call order; a failed write (the reader went away) closes the stream.
 */
export class SseChannel {
  private owner: SseOwner | null = null;
  private writer: WritableStreamDefaultWriter<Uint8Array> | null = null;
  private sid: string | null = null;
  private closed = false;
  private waiters: ((sid: string | null) => void)[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  private timer: ReturnType<typeof setInterval> | undefined;

  /** The stream (its first event names `endpoint`); null when this channel was opened before. */
  open(owner: SseOwner, endpoint: string, keepAliveMs: number): ReadableStream<Uint8Array> | null {
    if (this.owner || this.closed) return null;
    const ts = new TransformStream<Uint8Array, Uint8Array>();
    this.owner = owner;
    this.writer = ts.writable.getWriter();
    // The reader cancelled (the client left): the stream is over, whether or not a write was pending.
    this.writer.closed.catch(() => this.end());
    void this.write(encodeEvent({ event: "endpoint", data: endpoint }));
    this.timer = setInterval(() => void this.write(encodeComment("keep-alive")), keepAliveMs);
    return ts.readable;
  }

  private matches(o: SseOwner): boolean {
    return this.owner !== null && this.owner.sub === o.sub && this.owner.jti === o.jti;
  }

  private live(o: SseOwner): boolean {
    return !this.closed && this.matches(o);
  }

  session(o: SseOwner): { sid: string | null } | null {
    return this.live(o) ? { sid: this.sid } : null;
  }

  bind(o: SseOwner, sid: string, answer: string): SseBind {
    if (!this.live(o)) return "gone";
    if (this.sid !== null) return "already";
    this.sid = sid;
    // Queued before the waiters learn the id: nothing they push can overtake the initialize answer.
    void this.write(encodeEvent({ event: "message", data: answer }));
    for (const w of this.waiters.splice(0)) w(sid);
    return "bound";
  }

  waitBound(o: SseOwner): Promise<string | null> {
    if (!this.live(o)) return Promise.resolve(null);
    if (this.sid !== null) return Promise.resolve(this.sid);
    return new Promise((r) => this.waiters.push(r));
  }

  push(o: SseOwner, data: string): Promise<boolean> {
    if (!this.live(o)) return Promise.resolve(false);
    return this.write(encodeEvent({ event: "message", data }));
  }

  /** Ends the stream; the bound session id for the owner (also after the stream ended by itself), null for anyone else. */
  close(o: SseOwner): string | null {
    if (!this.matches(o)) return null;
    this.end();
    return this.sid;
  }

  isClosed(): boolean {
    return this.closed;
  }

  private write(chunk: Uint8Array): Promise<boolean> {
    const next = this.queue.then(async () => {
      const w = this.writer;
      if (this.closed || !w) return false;
      try {
        await w.write(chunk);
        return true;
      } catch {
        this.end();
        return false;
      }
    });
    this.queue = next;
    return next;
  }

  private end(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    for (const w of this.waiters.splice(0)) w(null);
    const w = this.writer;
    this.writer = null;
    // After the writes already handed to the writer (close queues behind them).
    void w?.close().catch(() => undefined);
  }
}

export class SseDO extends DurableObject implements SseApi {
  private channel = new SseChannel();

  /** `POST /open` with an SseOpenRequest: the stream. Anything else is refused. */
  override async fetch(req: Request): Promise<Response> {
    if (req.method !== "POST" || new URL(req.url).pathname !== "/open") return new Response("not found", { status: 404 });
    let body: unknown;
    try {
      body = await req.json();
    } catch {
      return new Response("bad open request", { status: 400 });
    }
    const open = parseOpen(body);
    if (!open) return new Response("bad open request", { status: 400 });
    const readable = this.channel.open(open.owner, open.endpoint, open.keepAliveMs);
    if (!readable) return new Response("this SSE session was opened before", { status: 409 });
    return new Response(readable, { status: 200, headers: SSE_HEADERS });
  }

  async session(owner: SseOwner): Promise<{ sid: string | null } | null> {
    return this.channel.session(owner);
  }

  async bind(owner: SseOwner, sid: string, answer: string): Promise<SseBind> {
    return this.channel.bind(owner, sid, answer);
  }

  async waitBound(owner: SseOwner): Promise<string | null> {
    return this.channel.waitBound(owner);
  }

  async push(owner: SseOwner, data: string): Promise<boolean> {
    return this.channel.push(owner, data);
  }

  async close(owner: SseOwner): Promise<string | null> {
    return this.channel.close(owner);
  }
}
