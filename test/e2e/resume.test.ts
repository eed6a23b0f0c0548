/**
 * SSE resumption on the legacy leg (SEP-1699): a client that loses a POST stream mid-call
 * resumes it with GET + Last-Event-ID and receives every later event, ending with the result.
 * A disconnect is not a cancellation: the call completes upstream.
 */
import { describe, expect, inject, it } from "vitest";

const url = inject("namespacedUrl");
const ACCEPT = "application/json, text/event-stream";

interface Ev { id?: string; data: string; retry?: number }

async function* events(body: ReadableStream): AsyncGenerator<Ev> {
  const reader = (body as ReadableStream<BufferSource>).pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let i: number;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev: Ev = { data: "" };
      const data: string[] = [];
      let any = false;
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const [k, ...rest] = line.split(":");
        const v = rest.join(":").replace(/^ /, "");
        if (k === "id") { ev.id = v; any = true; }
        if (k === "data") { data.push(v); any = true; }
        if (k === "retry") ev.retry = Number(v);
      }
      ev.data = data.join("\n");
      if (any) yield ev;
    }
  }
}

describe("legacy SSE resumption", () => {
  it("replays a broken POST stream from Last-Event-ID and follows it to the result", async () => {
    const init = await fetch(url, {
      method: "POST", headers: { "content-type": "application/json", accept: ACCEPT },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "resume", version: "1" } } }),
    });
    const sid = init.headers.get("mcp-session-id")!;
    await init.text();
    const h = { "content-type": "application/json", accept: ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25" };
    const ac = new AbortController();
    const post = await fetch(url, {
      method: "POST", headers: h, signal: ac.signal,
      body: JSON.stringify({ jsonrpc: "2.0", id: 42, method: "tools/call", params: { name: "conf__test_slow_cancellable", arguments: { ms: 1500 }, _meta: { progressToken: "tok-1" } } }),
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
    rest.forEach((ev, i) => expect(ev.id).toBe(`${stream}/${i + 3}`));
    const final = JSON.parse(rest.at(-1)!.data);
    expect(final.id).toBe(42);
    expect(final.result.isError ?? false).toBe(false);
    const progress = rest.slice(0, -1).map((e) => JSON.parse(e.data));
    expect(progress.every((p) => p.method === "notifications/progress" && p.params.progressToken === "tok-1")).toBe(true);
    await fetch(url, { method: "DELETE", headers: { "mcp-session-id": sid } });
  });
});
