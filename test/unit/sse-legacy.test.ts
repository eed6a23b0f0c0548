/**
 * The legacy HTTP+SSE front (src/front/http-sse.ts) with fakes for the legacy front (recording
 * every message it is handed and answering what each test scripts) and an in-process channel
 * (SseChannel, the state machine SseDO wraps): bad input gets a 400/415 JSON-RPC refusal; an
 * unknown session id, another principal's and another grant's get 404 and reach nothing; the
 * initialize of a 2024-11-05 client is negotiated to the oldest version the legacy front speaks;
 * answers (JSON, SSE, an SSE stream closed early and resumed with Last-Event-ID) arrive on the
 * stream in order, priming events dropped; the wrapped session's GET stream is relayed; the end of
 * the stream (client gone, grant ended) ends the wrapped session, after which POSTs get 404.
 * Then SseDO itself through its binding (owner checks, one open, keep-alive comments, close), and,
 * through the Worker, that both paths are the app's plain 404 while `gateway.legacy_sse` is off.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { parseOpen, SseChannel } from "../../durable-objects/http-sse.ts";
import { SESSION_ID, sseObject } from "../../durable-objects/object-names.ts";
import type { SseApi, SseOwner } from "../../durable-objects/contract.ts";
import type { GatewayConfig } from "../../src/config/gateway-config.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import type { FrontContext } from "../../src/protocol/call-context.ts";
import { endpointFor, MAX_RESUMES, negotiated, OLDEST_LEGACY, type SseDeps, sseOpen, ssePost } from "../../src/front/http-sse.ts";
import { SSE_HEADERS } from "../../src/wire/http.ts";
import type { JsonRpcMessage, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { parseSse, type SseEvent } from "../../src/wire/sse.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits (bounded: 3 s) until `ok()`; throws with `what` otherwise. */
async function until(ok: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (ok()) return;
    await sleep(10);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** An SseApi over the plain state machine, in this isolate (what SseDO does, without the object). */
class FakeChannel implements SseApi {
  inner = new SseChannel();
  opens: unknown[] = [];
  async fetch(req: Request): Promise<Response> {
    const body = await req.json();
    this.opens.push(body);
    const o = parseOpen(body);
    const r = o && this.inner.open(o.owner, o.endpoint, o.keepAliveMs);
    return r ? new Response(r, { headers: SSE_HEADERS }) : new Response(null, { status: 409 });
  }
  async session(o: SseOwner) {
    return this.inner.session(o);
  }
  async bind(o: SseOwner, sid: string, answer: string) {
    return this.inner.bind(o, sid, answer);
  }
  async waitBound(o: SseOwner) {
    return this.inner.waitBound(o);
  }
  async push(o: SseOwner, data: string) {
    return this.inner.push(o, data);
  }
  async close(o: SseOwner) {
    return this.inner.close(o);
  }
}

/** Every event of `stream` as it arrives. */
function reader(stream: ReadableStream<Uint8Array>) {
  const events: SseEvent[] = [];
  let ended = false;
  // Read through a reader of our own, so the test can cancel the stream as a client that leaves does.
  const src = stream.getReader();
  const copy = new ReadableStream<Uint8Array>({
    async pull(c) {
      const { value, done } = await src.read();
      if (done) c.close();
      else c.enqueue(value);
    },
  });
  const done = (async () => {
    try {
      for await (const ev of parseSse(copy)) events.push(ev);
    } catch {
      // cancelled
    }
    ended = true;
  })();
  return {
    events,
    done,
    ended: () => ended,
    /** The client leaves. */
    cancel: () => src.cancel().catch(() => undefined),
    /** The JSON of every `message` event so far. */
    messages: (): Any[] => events.filter((e) => e.event === "message").map((e) => JSON.parse(e.data)),
  };
}

const sseBody = (...events: { id?: string; data: string }[]) =>
  new Response(events.map((e) => `${e.id !== undefined ? `id: ${e.id}\n` : ""}data: ${e.data}\n\n`).join(""), { headers: SSE_HEADERS });
const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });

const SID = "5".repeat(48);
const ALICE: Principal = { sub: "agent:alice", team: "t", roles: ["agent"], tools: ["*"], authenticated: true, jti: "jti-alice-1" };

interface Scripted {
  post?: (req: Request, msg: JsonRpcMessage) => Promise<Response> | Response;
  get?: (req: Request) => Promise<Response> | Response;
}

/** Deps with fakes; every call the front makes is recorded. */
function world(script: Scripted = {}) {
  const channels = new Map<string, FakeChannel>();
  let n = 0;
  const calls = {
    post: [] as { sid: string | null; msg: Any }[],
    get: [] as { sid: string | null; last: string | null; accept: string | null }[],
    del: [] as string[],
  };
  const grants: AbortController[] = [];
  const deps: SseDeps = {
    channel: (_env, id) => {
      if (!SESSION_ID.test(id)) return null;
      let c = channels.get(id);
      if (!c) {
        c = new FakeChannel();
        channels.set(id, c);
      }
      return c;
    },
    newId: () => (++n).toString(16).padStart(48, "0"),
    legacyPost: async (_fc, req, msg) => {
      calls.post.push({ sid: req.headers.get("mcp-session-id"), msg });
      if (script.post) return script.post(req, msg);
      if ("method" in msg && msg.method === "initialize") {
        return json({ jsonrpc: "2.0", id: (msg as JsonRpcRequest).id, result: { protocolVersion: (msg as Any).params.protocolVersion } }, 200, {
          "mcp-session-id": SID,
        });
      }
      return new Response(null, { status: 202 });
    },
    legacyGet: async (_fc, req) => {
      calls.get.push({ sid: req.headers.get("mcp-session-id"), last: req.headers.get("last-event-id"), accept: req.headers.get("accept") });
      if (script.get) return script.get(req);
      // A GET stream that stays open until the request's signal aborts.
      const ts = new TransformStream<Uint8Array, Uint8Array>();
      req.signal.addEventListener("abort", () => void ts.writable.close().catch(() => undefined));
      return new Response(ts.readable, { headers: SSE_HEADERS });
    },
    legacyDelete: async (_fc, req) => {
      calls.del.push(req.headers.get("mcp-session-id") ?? "");
      return new Response(null, { status: 200 });
    },
    watchGrant: (_fc, stream) => {
      grants.push(stream);
      return { stop: () => undefined };
    },
    keepAliveMs: 60_000,
  };
  const pending: Promise<unknown>[] = [];
  const fc = (p: Principal = ALICE): FrontContext => ({
    env: {} as Env,
    cfg: {} as GatewayConfig,
    principal: p,
    gateway: "http://127.0.0.1",
    waitUntil: (x) => void pending.push(x),
  });
  /** Opens an SSE session for `p` with the real sseOpen; its id and its stream's reader. */
  const open = async (p: Principal = ALICE) => {
    const res = await sseOpen(deps, fc(p), new Request("http://127.0.0.1/sse", { headers: { accept: "text/event-stream" } }));
    expect(res.status).toBe(200);
    const r = reader(res.body as ReadableStream<Uint8Array>);
    await until(() => r.events.length >= 1, "the endpoint event");
    const id = new URL(r.events[0]!.data, "http://127.0.0.1").searchParams.get("sessionId")!;
    return { id, r, res };
  };
  const post = (id: string | null, body: unknown, p: Principal = ALICE, contentType = "application/json") =>
    ssePost(
      deps,
      fc(p),
      new Request(`http://127.0.0.1/messages${id === null ? "" : `?sessionId=${id}`}`, {
        method: "POST",
        headers: { "content-type": contentType },
        body: typeof body === "string" ? body : JSON.stringify(body),
      }),
    );
  const init = (id: string, version = "2025-11-25", p: Principal = ALICE) =>
    post(
      id,
      { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "t", version: "1" } } },
      p,
    );
  const settle = () => Promise.allSettled(pending.splice(0));
  return { deps, calls, channels, grants, fc, open, post, init, settle };
}

describe("POST /messages: bad input and ownership", () => {
  it("refuses a missing sessionId, a wrong Content-Type, non-JSON and a batch with a JSON-RPC error, forwarding nothing", async () => {
    const w = world();
    const { id } = await w.open();
    const cases: [Response, number, number, RegExp][] = [
      [await w.post(null, { jsonrpc: "2.0", id: 1, method: "tools/list" }), 400, -32600, /sessionId query parameter is required/],
      [await w.post(id, { jsonrpc: "2.0", id: 1, method: "tools/list" }, ALICE, "text/plain"), 415, -32600, /Content-Type must be application\/json/],
      [await w.post(id, "{not json"), 400, -32700, /not valid JSON/],
      [await w.post(id, [{ jsonrpc: "2.0", id: 1, method: "tools/list" }]), 400, -32600, /batch/],
    ];
    for (const [res, status, code, message] of cases) {
      expect(res.status).toBe(status);
      const body = (await res.json()) as Any;
      expect(body.jsonrpc).toBe("2.0");
      expect(body.error.code).toBe(code);
      expect(body.error.message).toMatch(message);
    }
    expect(w.calls.post).toEqual([]);
  });

  it("answers 404 for an unknown or malformed session id, and for another principal's or another grant's session; nothing reaches the legacy front", async () => {
    const w = world();
    const { id, r } = await w.open();
    expect((await w.init(id)).status).toBe(202);
    await until(() => r.messages().length === 1, "the initialize answer");
    const before = w.calls.post.length;
    const list = { jsonrpc: "2.0", id: 9, method: "tools/list" };
    const mallory: Principal = { ...ALICE, sub: "agent:mallory", jti: "jti-mallory" };
    const aliceOtherGrant: Principal = { ...ALICE, jti: "jti-alice-2" };
    const actor: Principal = { sub: ALICE.sub, team: "t", roles: ["agent"], tools: null, authenticated: false };
    for (const [sessionId, who] of [
      ["e".repeat(48), ALICE],
      ["not-an-id", ALICE],
      [id, mallory],
      [id, aliceOtherGrant],
      [id, actor],
    ] as const) {
      const res = await w.post(sessionId, list, who);
      expect(res.status, `${sessionId} ${who.sub} ${who.jti}`).toBe(404);
      const body = (await res.json()) as Any;
      expect(body.id).toBe(9);
      expect(body.error.message).toMatch(/^Session not found/);
    }
    expect(w.calls.post.length).toBe(before);
    // The owner's stream carried nothing for them.
    await sleep(20);
    expect(r.messages()).toHaveLength(1);
  });
});

describe("POST /messages: initialize and answers on the stream", () => {
  it("negotiates a 2024-11-05 initialize to the oldest version the legacy front speaks, binds the session, and puts the answer on the stream", async () => {
    expect(OLDEST_LEGACY).toBe("2025-03-26");
    const w = world();
    const { id, r } = await w.open();
    expect(r.events[0]).toEqual({ event: "endpoint", data: endpointFor(id) });
    const res = await w.init(id, "2024-11-05");
    expect(res.status).toBe(202);
    expect(w.calls.post[0]!.sid).toBeNull();
    expect(w.calls.post[0]!.msg.params.protocolVersion).toBe("2025-03-26");
    await until(() => r.messages().length === 1, "the initialize answer");
    expect(r.messages()[0]).toEqual({ jsonrpc: "2.0", id: 0, result: { protocolVersion: "2025-03-26" } });
    expect(await w.channels.get(id)!.session({ sub: ALICE.sub, jti: ALICE.jti! })).toEqual({ sid: SID });
    // A second initialize is refused and ends nothing.
    const again = await w.init(id);
    expect(again.status).toBe(400);
    expect(((await again.json()) as Any).error.message).toMatch(/already initialized/);
    expect(w.calls.del).toEqual([]);
    // Versions the legacy front speaks, and newer ones, go through unchanged.
    for (const v of ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]) {
      const m: JsonRpcRequest = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: v } };
      expect(negotiated(m)).toBe(m);
    }
    expect(negotiated({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2024-10-07" } }).params?.protocolVersion).toBe("2025-03-26");
  });

  it("refuses a request before initialize (400), and relays a JSON answer on the stream with the wrapped session's id", async () => {
    const w = world({
      post: (_req, msg) =>
        "method" in msg && msg.method === "initialize"
          ? json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID })
          : json({ jsonrpc: "2.0", id: (msg as JsonRpcRequest).id, result: { tools: [{ name: "t1" }] } }),
    });
    const { id, r } = await w.open();
    const early = await w.post(id, { jsonrpc: "2.0", id: 1, method: "tools/list" });
    expect(early.status).toBe(400);
    expect(((await early.json()) as Any).error.message).toMatch(/not initialized/);
    expect(w.calls.post).toEqual([]);
    await w.init(id);
    const res = await w.post(id, { jsonrpc: "2.0", id: 2, method: "tools/list" });
    expect(res.status).toBe(202);
    // The 202's body closes once the answer is on the stream.
    expect(await res.text()).toBe("Accepted");
    expect(r.messages().at(-1)).toEqual({ jsonrpc: "2.0", id: 2, result: { tools: [{ name: "t1" }] } });
    expect(w.calls.post.at(-1)!.sid).toBe(SID);
    expect(w.calls.post.at(-1)!.msg).toEqual({ jsonrpc: "2.0", id: 2, method: "tools/list" });
  });

  it("relays an SSE answer in order without its priming event", async () => {
    const w = world({
      post: (_req, msg) =>
        "method" in msg && msg.method === "initialize"
          ? json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID })
          : sseBody(
              { id: "s1/0", data: "" },
              { id: "s1/1", data: JSON.stringify({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "p", progress: 1 } }) },
              { id: "s1/2", data: JSON.stringify({ jsonrpc: "2.0", id: 3, result: { content: [] } }) },
            ),
    });
    const { id, r } = await w.open();
    await w.init(id);
    const res = await w.post(id, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "x", _meta: { progressToken: "p" } } });
    expect(res.status).toBe(202);
    await res.text();
    expect(r.messages().slice(1)).toEqual([
      { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: "p", progress: 1 } },
      { jsonrpc: "2.0", id: 3, result: { content: [] } },
    ]);
    expect(r.events.filter((e) => e.data === "")).toEqual([]);
    expect(w.calls.get.filter((g) => g.last !== null)).toEqual([]);
  });

  it("follows an answer the legacy front closed early with GET + Last-Event-ID, and reports one that is lost", async () => {
    let mode: "resume" | "lost" = "resume";
    const w = world({
      post: (_req, msg) => {
        if ("method" in msg && msg.method === "initialize") return json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID });
        // SEP-1699: the priming event, then the stream ends before the answer.
        return mode === "resume"
          ? sseBody({ id: "s9/0", data: "" })
          : sseBody({ data: JSON.stringify({ jsonrpc: "2.0", method: "notifications/message", params: {} }) });
      },
      get: (req) =>
        req.headers.get("last-event-id") === "s9/0"
          ? sseBody(
              { id: "s9/1", data: JSON.stringify({ jsonrpc: "2.0", method: "notifications/progress", params: { progress: 1 } }) },
              { id: "s9/2", data: JSON.stringify({ jsonrpc: "2.0", id: 4, result: { ok: true } }) },
            )
          : new Response(new ReadableStream(), { headers: SSE_HEADERS }),
    });
    const { id, r } = await w.open();
    await w.init(id);
    await (await w.post(id, { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "slow" } })).text();
    const resumes = w.calls.get.filter((g) => g.last !== null);
    expect(resumes).toEqual([{ sid: SID, last: "s9/0", accept: "text/event-stream" }]);
    expect(r.messages().slice(1)).toEqual([
      { jsonrpc: "2.0", method: "notifications/progress", params: { progress: 1 } },
      { jsonrpc: "2.0", id: 4, result: { ok: true } },
    ]);
    // No event id to resume from: the request gets an error answer, not silence.
    mode = "lost";
    await (await w.post(id, { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "slow" } })).text();
    const last = r.messages().at(-1);
    expect(last.id).toBe(5);
    expect(last.error.code).toBe(-32603);
    expect(last.error.message).toMatch(/lost/);
    expect(MAX_RESUMES).toBeGreaterThan(0);
  });

  it("answers a request whose handling failed with a JSON-RPC error on the stream, never with silence", async () => {
    const w = world({
      post: (_req, msg) => {
        if ("method" in msg && msg.method === "initialize") return json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID });
        throw new Error("the session store did not answer");
      },
    });
    const { id, r } = await w.open();
    await w.init(id);
    const res = await w.post(id, { jsonrpc: "2.0", id: 11, method: "tools/list" });
    expect(res.status).toBe(202);
    await res.text();
    const last = r.messages().at(-1);
    expect(last.id).toBe(11);
    expect(last.error.code).toBe(-32603);
  });

  it("passes notifications and answers to the legacy front, and its refusal back as the POST's status", async () => {
    const w = world({
      post: (_req, msg) => {
        if ("method" in msg && msg.method === "initialize") return json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID });
        if ("method" in msg) return new Response(null, { status: 202 });
        return json({ jsonrpc: "2.0", id: null, error: { code: -32600, message: "Invalid Request: no relayed request with id x is waiting" } }, 400);
      },
    });
    const { id, r } = await w.open();
    await w.init(id);
    const note = await w.post(id, { jsonrpc: "2.0", method: "notifications/initialized" });
    expect(note.status).toBe(202);
    const answer = await w.post(id, { jsonrpc: "2.0", id: "x", result: {} });
    expect(answer.status).toBe(400);
    expect(((await answer.json()) as Any).error.message).toMatch(/no relayed request/);
    expect(w.calls.post.slice(1).map((c) => [c.sid, c.msg])).toEqual([
      [SID, { jsonrpc: "2.0", method: "notifications/initialized" }],
      [SID, { jsonrpc: "2.0", id: "x", result: {} }],
    ]);
    expect(r.messages()).toHaveLength(1);
  });

  it("ends the SSE session when the wrapped session is gone (its 404 is the answer; later POSTs get 404)", async () => {
    const w = world({
      post: (_req, msg) =>
        "method" in msg && msg.method === "initialize"
          ? json({ jsonrpc: "2.0", id: 0, result: {} }, 200, { "mcp-session-id": SID })
          : json({ jsonrpc: "2.0", id: 6, error: { code: -32000, message: "Session not found" } }, 404),
    });
    const { id, r } = await w.open();
    await w.init(id);
    await (await w.post(id, { jsonrpc: "2.0", id: 6, method: "tools/list" })).text();
    expect(r.messages().at(-1).error.message).toBe("Session not found");
    await until(() => r.ended(), "the stream's end");
    await w.settle();
    expect(w.calls.del).toEqual([SID]);
    expect((await w.post(id, { jsonrpc: "2.0", id: 7, method: "tools/list" })).status).toBe(404);
  });
});

describe("GET /sse", () => {
  it("needs Accept: text/event-stream", async () => {
    const w = world();
    const res = await sseOpen(w.deps, w.fc(), new Request("http://127.0.0.1/sse"));
    expect(res.status).toBe(406);
    expect(w.channels.size).toBe(0);
  });

  it("opens the stream for its principal and grant, endpoint first, then relays the wrapped session's GET stream after the initialize answer", async () => {
    let serverStream: WritableStreamDefaultWriter<Uint8Array> | null = null;
    const w = world({
      get: (req) => {
        const ts = new TransformStream<Uint8Array, Uint8Array>();
        serverStream = ts.writable.getWriter();
        req.signal.addEventListener("abort", () => void serverStream?.close().catch(() => undefined));
        return new Response(ts.readable, { headers: SSE_HEADERS });
      },
    });
    const { id, r, res } = await w.open();
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(w.channels.get(id)!.opens).toEqual([
      { owner: { sub: "agent:alice", jti: "jti-alice-1" }, endpoint: `/messages?sessionId=${id}`, keepAliveMs: 60_000 },
    ]);
    expect(r.events[0]).toEqual({ event: "endpoint", data: `/messages?sessionId=${id}` });
    expect(w.calls.get).toEqual([]);
    await w.init(id);
    await until(() => serverStream !== null, "the wrapped GET stream");
    expect(w.calls.get).toEqual([{ sid: SID, last: null, accept: "text/event-stream" }]);
    const enc = new TextEncoder();
    await serverStream!.write(enc.encode(`id: g1/0\nretry: 1000\ndata: \n\n`));
    await serverStream!.write(enc.encode(`id: g1/1\ndata: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/tools/list_changed" })}\n\n`));
    await until(() => r.messages().length === 2, "the list change");
    expect(r.messages().map((m) => m.method ?? "answer")).toEqual(["answer", "notifications/tools/list_changed"]);
  });

  it("ends the wrapped session when the client leaves; later POSTs get 404", async () => {
    const w = world();
    const { id, r } = await w.open();
    await w.init(id);
    await r.cancel();
    await until(() => w.calls.del.length === 1, "the DELETE of the wrapped session");
    await w.settle();
    expect(w.calls.del).toEqual([SID]);
    expect(w.channels.get(id)!.inner.isClosed()).toBe(true);
    expect((await w.post(id, { jsonrpc: "2.0", id: 1, method: "tools/list" })).status).toBe(404);
  });

  it("closes the stream when the grant ends, and ends the wrapped session", async () => {
    const w = world();
    const { id, r } = await w.open();
    await w.init(id);
    expect(w.grants).toHaveLength(1);
    w.grants[0]!.abort();
    await until(() => r.ended(), "the stream's end");
    await w.settle();
    expect(w.calls.del).toEqual([SID]);
    expect((await w.post(id, { jsonrpc: "2.0", id: 1, method: "tools/list" })).status).toBe(404);
  });

  it("a session that never initialized ends without a DELETE", async () => {
    const w = world();
    const { r } = await w.open();
    await r.cancel();
    await w.settle();
    expect(w.calls.del).toEqual([]);
  });
});

describe("SseDO", () => {
  const owner: SseOwner = { sub: "agent:do", jti: "j1" };
  const openReq = (o: unknown) => new Request("https://sse.internal/open", { method: "POST", body: JSON.stringify(o) });

  it("opens once, writes only for its owner, binds once, and ends on close", async () => {
    const id = "7".repeat(48);
    const ch = sseObject(env, id)!;
    const res = await ch.fetch(openReq({ owner, endpoint: endpointFor(id), keepAliveMs: 60_000 }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const r = reader(res.body as ReadableStream<Uint8Array>);
    expect((await ch.fetch(openReq({ owner, endpoint: "/x", keepAliveMs: 1000 }))).status).toBe(409);
    const stranger: SseOwner = { sub: "agent:do", jti: "j2" };
    expect(await ch.session(stranger)).toBeNull();
    expect(await ch.push(stranger, "{}")).toBe(false);
    expect(await ch.bind(stranger, SID, "{}")).toBe("gone");
    expect(await ch.close(stranger)).toBeNull();
    expect(await ch.session(owner)).toEqual({ sid: null });
    const bound = ch.waitBound(owner);
    expect(await ch.bind(owner, SID, '{"jsonrpc":"2.0","id":0,"result":{}}')).toBe("bound");
    expect(await bound).toBe(SID);
    expect(await ch.bind(owner, "6".repeat(48), "{}")).toBe("already");
    expect(await ch.push(owner, '{"jsonrpc":"2.0","method":"m"}')).toBe(true);
    expect(await ch.close(owner)).toBe(SID);
    await r.done;
    expect(r.events).toEqual([
      { event: "endpoint", data: endpointFor(id) },
      { event: "message", data: '{"jsonrpc":"2.0","id":0,"result":{}}' },
      { event: "message", data: '{"jsonrpc":"2.0","method":"m"}' },
    ]);
    expect(await ch.push(owner, "{}")).toBe(false);
    expect(await ch.session(owner)).toBeNull();
    expect(await ch.waitBound(owner)).toBeNull();
    expect(sseObject(env, "session:abc")).toBeNull();
  });

  it("refuses a malformed open, and writes keep-alive comments while idle", async () => {
    const ch = sseObject(env, "8".repeat(48))!;
    for (const bad of [{}, { owner, endpoint: "https://evil.example/x", keepAliveMs: 10 }, { owner: { sub: "" }, endpoint: "/m", keepAliveMs: 10 }]) {
      expect((await ch.fetch(openReq(bad))).status).toBe(400);
    }
    const res = await ch.fetch(openReq({ owner, endpoint: "/messages?sessionId=x", keepAliveMs: 20 }));
    const rd = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    for (let i = 0; i < 50 && !text.includes(": keep-alive\n\n"); i++) text += (await rd.read()).value ?? "";
    expect(text.startsWith("event: endpoint\ndata: /messages?sessionId=x\n\n")).toBe(true);
    expect(text).toContain(": keep-alive\n\n");
    await rd.cancel();
    // The reader left: the object notices and refuses pushes.
    let gone = false;
    for (let i = 0; i < 100 && !gone; i++) {
      gone = (await ch.session(owner)) === null;
      if (!gone) await sleep(10);
    }
    expect(gone).toBe(true);
    expect(await ch.push(owner, "{}")).toBe(false);
  });
});

describe("gateway.legacy_sse off (the unit config)", () => {
  it("GET /sse and POST /messages answer exactly what an unknown route answers", async () => {
    const unknown = await SELF.fetch("http://127.0.0.1/no-such-route");
    const want = { status: unknown.status, body: await unknown.text() };
    expect(want.status).toBe(404);
    for (const [path, init] of [
      ["/sse", { headers: { accept: "text/event-stream" } }],
      [
        `/messages?sessionId=${"1".repeat(48)}`,
        { method: "POST", headers: { "content-type": "application/json" }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' },
      ],
    ] as const) {
      const res = await SELF.fetch(`http://127.0.0.1${path}`, init);
      expect({ status: res.status, body: await res.text() }, path).toEqual(want);
    }
  });
});
