/**
 * Mirroring the upstream's SSE stream to a legacy client (SEP-1699), in two halves, offline:
 * requestUpstream's stream signals against a scripted upstream (answered with a stream; closed a
 * resumable stream early, then resumed with GET + Last-Event-ID; closed without an event id), and
 * respond()'s client side (the stream opens on the signal with a priming event, closes early only
 * after its events are in the buffer, and everything later still reaches the buffer).
 * Must never: reach a network (the upstream is a stub of the global fetch).
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { egressSchema } from "../../src/config/egress-schema.ts";
import { requestUpstream } from "../../src/upstream/client.ts";
import { UpstreamError, type UpstreamFrame } from "../../src/upstream/exchange.ts";
import { respond, type Resumable } from "../../src/front/respond.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import type { Leg } from "../../durable-objects/contract.ts";

const up: UpstreamConfig = {
  name: "u",
  url: "http://127.0.0.1:9/mcp",
  namespaced: false,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 2000,
  credentials: { mode: "none", header: "authorization", prefix: "" },
  egress: egressSchema.parse({ allow_loopback: true }),
  onLoopback: true,
};
const leg: Leg = { era: "legacy", protocolVersion: "2025-11-25", sessionId: "up-1" };
const req: JsonRpcRequest = { jsonrpc: "2.0", id: "c:n:1", method: "tools/call", params: { name: "test_reconnection", arguments: {} } };
const result = { jsonrpc: "2.0", id: "c:n:1", result: { content: [{ type: "text", text: "done" }] } };

const sse = (body: string) => new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });

/** Scripts the upstream: `answer(method, lastEventId)` per request; records what was asked. */
function upstream(answer: (method: string, lastEventId: string | null) => Response) {
  const seen: { method: string; lastEventId: string | null }[] = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (_input, init) => {
    const h = new Headers(init?.headers);
    const r = { method: init?.method ?? "GET", lastEventId: h.get("last-event-id") };
    seen.push(r);
    return answer(r.method, r.lastEventId);
  });
  return seen;
}

async function all<T>(gen: AsyncGenerator<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const f of gen) out.push(f);
  return out;
}

const describeFrame = (f: UpstreamFrame) => ("kind" in f ? f.kind : `message ${"id" in f.message ? String(f.message.id) : "?"}`);

afterEach(() => vi.restoreAllMocks());

describe("requestUpstream: stream signals", () => {
  const polling = (method: string, last: string | null) => {
    if (method === "POST") return sse("id: e1\nretry: 5\ndata: \n\n"); // priming, then the upstream closes
    expect(last).toBe("e1");
    return sse(`id: e2\ndata: ${JSON.stringify(result)}\n\n`);
  };

  it("signals the stream, its priming event, its early close (with the upstream's id and retry), then resumes to the result", async () => {
    const seen = upstream(polling);
    const frames = await all(requestUpstream(up, leg, req, { control: true }));
    expect(frames.map(describeFrame)).toEqual(["stream-opened", "stream-primed", "stream-closed-early", "message c:n:1"]);
    expect(frames[1]).toEqual({ kind: "stream-primed", retryMs: 5 });
    expect(frames[2]).toEqual({ kind: "stream-closed-early", lastEventId: "e1", retryMs: 5 });
    expect(seen).toEqual([
      { method: "POST", lastEventId: null },
      { method: "GET", lastEventId: "e1" },
    ]);
  });

  it("yields only messages to callers that did not ask for signals", async () => {
    upstream(polling);
    const frames = await all(requestUpstream(up, leg, req));
    expect(frames.map(describeFrame)).toEqual(["message c:n:1"]);
  });

  it("gives no signal for a JSON answer", async () => {
    upstream(() => new Response(JSON.stringify(result), { status: 200, headers: { "content-type": "application/json" } }));
    const frames = await all(requestUpstream(up, leg, req, { control: true }));
    expect(frames.map(describeFrame)).toEqual(["message c:n:1"]);
  });

  it("fails, with no early-close signal, when the upstream closes a stream that has no event id", async () => {
    const seen = upstream(() =>
      sse(`data: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: 1, progress: 1 } })}\n\n`),
    );
    const frames: UpstreamFrame[] = [];
    await expect(
      (async () => {
        for await (const f of requestUpstream(up, leg, req, { control: true })) frames.push(f);
      })(),
    ).rejects.toBeInstanceOf(UpstreamError);
    expect(frames.map(describeFrame)).toEqual(["stream-opened", "message ?"]);
    expect(seen).toHaveLength(1);
  });
});

/** An in-memory resumption buffer that logs what happens when. */
function buffer(priming: boolean, log: string[]) {
  const events: { seq: number; data: string }[] = [];
  let registered = false;
  let finished = false;
  const r: Resumable = {
    streamId: "sabc",
    retryMs: 750,
    priming,
    open: () => {
      registered = true;
      log.push("registered");
    },
    persist: (seq, data) => {
      events.push({ seq, data });
      log.push(`persisted ${seq}`);
    },
    lost: () => {
      log.push("lost");
    },
    flushed: () =>
      new Promise<void>((res) =>
        setTimeout(() => {
          log.push("flushed");
          res();
        }, 30),
      ),
    finish: () => {
      finished = true;
      log.push("finished");
    },
  };
  return { r, events, registered: () => registered, finished: () => finished };
}

/** Reads an SSE body into raw event blocks; logs when it ends. */
async function blocks(res: Response, log: string[]): Promise<string[]> {
  const text = await res.text();
  log.push("client stream ended");
  return text.split("\n\n").filter((b) => b.trim() !== "");
}

describe("respond: the client side of the mirror", () => {
  it("opens the stream on the upstream's signal, priming first, and closes it early only once the buffer holds it", async () => {
    const log: string[] = [];
    const b = buffer(true, log);
    const work: Promise<unknown>[] = [];
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    const res = await respond(
      1,
      async (emit, stream) => {
        stream.open(); // the upstream answered with a stream
        await emit({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "before the close" } });
        expect(await stream.closeEarly()).toBe(true); // the upstream closed its stream
        await later; // the gateway resumes the upstream meanwhile
        await emit({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "after the close" } });
        return { response: { jsonrpc: "2.0", id: 1, result: { ok: true } }, status: 200 };
      },
      { waitUntil: (p) => work.push(p), resumable: b.r },
    );
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const got = await blocks(res, log);
    expect(got[0]).toBe("id: sabc/0\nretry: 750\ndata: ");
    expect(got[1]).toContain("id: sabc/1\n");
    expect(got).toHaveLength(2);
    expect(log.slice(0, 4)).toEqual(["registered", "persisted 1", "flushed", "client stream ended"]);
    release();
    await Promise.all(work);
    expect(b.events.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(JSON.parse(b.events[2]!.data)).toEqual({ jsonrpc: "2.0", id: 1, result: { ok: true } });
    expect(b.finished()).toBe(true);
  });

  it("keeps a stream without priming event open and answers on it (nothing to resume from)", async () => {
    const log: string[] = [];
    const b = buffer(false, log);
    const work: Promise<unknown>[] = [];
    const res = await respond(
      2,
      async (_emit, stream) => {
        stream.open();
        expect(await stream.closeEarly()).toBe(false);
        return { response: { jsonrpc: "2.0", id: 2, result: { ok: true } }, status: 200 };
      },
      { waitUntil: (p) => work.push(p), resumable: b.r },
    );
    const got = await blocks(res, log);
    await Promise.all(work);
    expect(got[0]).toBe(": portcullis");
    expect(got[1]).toBe(`id: sabc/1\ndata: ${JSON.stringify({ jsonrpc: "2.0", id: 2, result: { ok: true } })}`);
    expect(b.registered()).toBe(true);
    expect(b.finished()).toBe(true);
  });

  it("primes a stream its version alone would not prime when the upstream's stream opens with a priming event, and may then close it early", async () => {
    const log: string[] = [];
    const b = buffer(false, log); // an older client version: no priming event of the gateway's own
    const work: Promise<unknown>[] = [];
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    const res = await respond(
      4,
      async (emit, stream) => {
        stream.open();
        stream.prime(); // the upstream's first event was a priming event
        stream.prime(); // idempotent
        expect(await stream.closeEarly()).toBe(true); // the upstream closed its stream
        await later;
        await emit({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "after the close" } });
        return { response: { jsonrpc: "2.0", id: 4, result: { ok: true } }, status: 200 };
      },
      { waitUntil: (p) => work.push(p), resumable: b.r },
    );
    const got = await blocks(res, log);
    expect(got).toEqual([": portcullis", "id: sabc/0\nretry: 750\ndata: "]);
    release();
    await Promise.all(work);
    expect(b.events.map((e) => e.seq)).toEqual([1, 2]);
  });

  it("never primes after an event went out (a priming event is first or not at all)", async () => {
    const log: string[] = [];
    const b = buffer(false, log);
    const res = await respond(
      5,
      async (emit, stream) => {
        await emit({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "first" } });
        stream.prime();
        expect(await stream.closeEarly()).toBe(false);
        return { response: { jsonrpc: "2.0", id: 5, result: { ok: true } }, status: 200 };
      },
      { waitUntil: () => undefined, resumable: b.r },
    );
    const got = await blocks(res, log);
    expect(got.some((g) => g.includes("data: \n") || g.endsWith("data: "))).toBe(false);
    expect(got).toHaveLength(3);
  });

  it("answers JSON when the upstream gave no stream and nothing went out first", async () => {
    const log: string[] = [];
    const b = buffer(true, log);
    const res = await respond(3, async () => ({ response: { jsonrpc: "2.0", id: 3, result: {} }, status: 200 }), {
      waitUntil: () => undefined,
      resumable: b.r,
    });
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(await res.json()).toEqual({ jsonrpc: "2.0", id: 3, result: {} });
    expect(log).toEqual([]);
  });
});
