/**
 * SSE resumption on the legacy leg (SEP-1699): a client that loses a POST stream mid-call
 * resumes it with GET + Last-Event-ID and receives every later event, ending with the result.
 * A disconnect is not a cancellation: the call completes upstream. The gateway answers the way
 * the upstream does: SSE (priming event first) where the upstream streams, JSON where it answers
 * JSON, and where the upstream closes its stream mid-call (test_reconnection) the client's stream
 * closes too and the result waits in the buffer for the client's GET + Last-Event-ID.
 */
import { describe, expect, inject, it } from "vitest";

const url = inject("namespacedUrl");
const ACCEPT = "application/json, text/event-stream";

interface Ev {
  id?: string;
  data: string;
  retry?: number;
}

async function* events(body: ReadableStream): AsyncGenerator<Ev> {
  const reader = (body as ReadableStream<BufferSource>).pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev: Ev = { data: "" };
      const data: string[] = [];
      let any = false;
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const [k, ...rest] = line.split(":");
        const v = rest.join(":").replace(/^ /, "");
        if (k === "id") {
          ev.id = v;
          any = true;
        }
        if (k === "data") {
          data.push(v);
          any = true;
        }
        if (k === "retry") ev.retry = Number(v);
      }
      ev.data = data.join("\n");
      if (any) yield ev;
    }
  }
}

async function collect(body: ReadableStream): Promise<Ev[]> {
  const out: Ev[] = [];
  for await (const ev of events(body)) out.push(ev);
  return out;
}

/** A fresh 2025-11-25 session on the namespaced gateway; returns the headers for its requests. */
async function session(version = "2025-11-25"): Promise<Record<string, string>> {
  const init = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: ACCEPT },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "mirror", version: "1" } },
    }),
  });
  const sid = init.headers.get("mcp-session-id")!;
  await init.text();
  expect(sid).toBeTruthy();
  return { "content-type": "application/json", accept: ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": version };
}

const call = (h: Record<string, string>, id: number, method: string, params: object) =>
  fetch(url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", id, method, params }) });

describe("the upstream's stream, mirrored (SEP-1699)", () => {
  it("closes the client's stream where the upstream closes its own; the result waits for GET + Last-Event-ID", async () => {
    const h = await session();
    const post = await call(h, 7, "tools/call", { name: "conf__test_reconnection", arguments: {} });
    expect(post.status).toBe(200);
    expect(post.headers.get("content-type")).toContain("text/event-stream");
    const onPost = await collect(post.body!);
    // Only the priming event: the stream ended before the result, as the upstream's did.
    expect(onPost).toHaveLength(1);
    expect(onPost[0]!.id).toMatch(/^s[0-9a-f]+\/0$/);
    expect(onPost[0]!.data).toBe("");
    expect(onPost[0]!.retry).toBeGreaterThan(0);
    // The upstream answers about a second after its close (its retry hint); no client is connected
    // meanwhile, and the call completes anyway (a disconnect is not a cancellation).
    await new Promise((r) => setTimeout(r, 2500));
    const get = await fetch(url, { method: "GET", headers: { ...h, accept: "text/event-stream", "last-event-id": onPost[0]!.id! } });
    expect(get.status).toBe(200);
    const rest = await collect(get.body!);
    const stream = onPost[0]!.id!.split("/")[0];
    expect(rest.map((e) => e.id)).toEqual([`${stream}/1`]);
    const final = JSON.parse(rest[0]!.data);
    expect(final.id).toBe(7);
    expect(final.result.content[0].text).toMatch(/^Reconnection test completed successfully/);
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": h["mcp-session-id"]! } });
  });

  it("keeps the stream open for a session of an older version (the upstream, on that version too, primes nothing: nothing to resume from)", async () => {
    const h = await session("2025-06-18");
    const post = await call(h, 8, "tools/call", { name: "conf__test_reconnection", arguments: {} });
    expect(post.headers.get("content-type")).toContain("text/event-stream");
    const onPost = await collect(post.body!);
    expect(onPost.some((e) => e.data === "")).toBe(false);
    expect(onPost).toHaveLength(1);
    const final = JSON.parse(onPost[0]!.data);
    expect(final.id).toBe(8);
    expect(final.result.content[0].text).toMatch(/^Reconnection test completed successfully/);
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": h["mcp-session-id"]! } });
  });

  it("primes and closes the stream of a 2025-11-25 session whose request names an older version, as the upstream does its own", async () => {
    // The header alone (2025-06-18, the 0.1.16 suite's bug) would get no priming event; the upstream keeps to its session's version and primes.
    const h: Record<string, string> = { ...(await session()), "mcp-protocol-version": "2025-06-18" };
    const post = await call(h, 11, "tools/call", { name: "conf__test_reconnection", arguments: {} });
    const onPost = await collect(post.body!);
    expect(onPost).toHaveLength(1);
    expect(onPost[0]!.data).toBe("");
    expect(onPost[0]!.retry).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 2500));
    const get = await fetch(url, { method: "GET", headers: { ...h, accept: "text/event-stream", "last-event-id": onPost[0]!.id! } });
    const rest = await collect(get.body!);
    expect(JSON.parse(rest[0]!.data).id).toBe(11);
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": h["mcp-session-id"]! } });
  });

  it("answers SSE, priming event first, where the upstream streams, and JSON where it answers JSON", async () => {
    const h = await session();
    const streamed = await call(h, 9, "tools/call", { name: "conf__test_simple_text", arguments: {} });
    expect(streamed.headers.get("content-type")).toContain("text/event-stream");
    const evs = await collect(streamed.body!);
    expect(evs[0]!.data).toBe("");
    expect(evs[0]!.id).toMatch(/^s[0-9a-f]+\/0$/);
    expect(evs[0]!.retry).toBeGreaterThan(0);
    expect(JSON.parse(evs.at(-1)!.data).id).toBe(9);
    const json = await call(h, 10, "resources/read", { uri: "modern+modern://note" });
    expect(json.headers.get("content-type")).toContain("application/json");
    expect((await json.json()).result.contents[0].text).toBe("a note");
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": h["mcp-session-id"]! } });
  });
});

describe("legacy SSE resumption", () => {
  it("replays a broken POST stream from Last-Event-ID and follows it to the result", async () => {
    const init = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: ACCEPT },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "resume", version: "1" } },
      }),
    });
    const sid = init.headers.get("mcp-session-id")!;
    await init.text();
    const h = { "content-type": "application/json", accept: ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" };
    const ac = new AbortController();
    const post = await fetch(url, {
      method: "POST",
      headers: h,
      signal: ac.signal,
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 42,
        method: "tools/call",
        params: { name: "conf__test_slow_cancellable", arguments: { ms: 1500 }, _meta: { progressToken: "tok-1" } },
      }),
    });
    expect(post.headers.get("content-type")).toContain("text/event-stream");
    const seen: Ev[] = [];
    for await (const ev of events(post.body!)) {
      seen.push(ev);
      if (seen.length === 3) break;
    }
    ac.abort();
    expect(seen[0]!.data).toBe("");
    expect(seen[0]!.retry).toBeGreaterThan(0);
    const last = seen[2]!.id!;
    expect(last).toMatch(/^s[0-9a-f]+\/2$/);
    expect(JSON.parse(seen[1]!.data).params.progressToken).toBe("tok-1");

    const get = await fetch(url, { method: "GET", headers: { ...h, accept: "text/event-stream", "last-event-id": last } });
    expect(get.status).toBe(200);
    const rest: Ev[] = [];
    for await (const ev of events(get.body!)) rest.push(ev);
    const stream = last.split("/")[0];
    expect(rest.length).toBeGreaterThan(3);
    rest.forEach((ev, i) => {
      expect(ev.id).toBe(`${stream}/${i + 3}`);
    });
    const final = JSON.parse(rest.at(-1)!.data);
    expect(final.id).toBe(42);
    expect(final.result.isError ?? false).toBe(false);
    const progress = rest.slice(0, -1).map((e) => JSON.parse(e.data));
    expect(progress.every((p) => p.method === "notifications/progress" && p.params.progressToken === "tok-1")).toBe(true);
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": sid } });
  });
});
