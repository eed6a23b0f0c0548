/**
 * Every answer goes to the request that caused it, on the production build, with a legacy-only
 * upstream whose SDK server routes each answer by its JSON-RPC id (test/fixtures/slow-legacy-upstream.ts):
 * two concurrent 2026-07-28 runs of one principal (which share one upstream session) both using
 * id 7; a legacy session whose `tools/call` carries the id a `tools/list` fan-out in flight would
 * have derived from its own (`"9:slow:0"`); and a legacy client's `notifications/cancelled`
 * reaching the upstream under the id the upstream request really carried. The ids the upstream
 * saw are gateway-made (`pc:<isolate>:<n>`), all distinct, none the client's.
 * Starts its own upstream and gateway; all on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type SlowLegacyUpstream, startSlowLegacyUpstream } from "../fixtures/slow-legacy-upstream.ts";
import { freePort, startPortcullis } from "./harness.ts";

const LIST_DELAY_MS = 1500;
let upstream: SlowLegacyUpstream;
let gw: Awaited<ReturnType<typeof startPortcullis>>;

beforeAll(async () => {
  upstream = await startSlowLegacyUpstream({ listDelayMs: LIST_DELAY_MS });
  const port = await freePort();
  gw = await startPortcullis(
    `
actor: local:e2e
auth:
  audience: http://127.0.0.1:${port}
egress:
  allow_loopback: true
upstreams:
  - name: slow
    url: ${upstream.url}
    namespace: true
    timeout: 60s
`,
    port,
  );
}, 180_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), upstream?.close()]);
});

type Msg = { jsonrpc: "2.0"; id?: string | number | null; result?: { content?: { text?: string }[]; tools?: { name: string }[] }; error?: unknown };

/** Reads the answer to `id` from a JSON or SSE response body. */
async function answerOf(r: Response, id: string | number): Promise<Msg> {
  if (!(r.headers.get("content-type") ?? "").includes("text/event-stream")) return (await r.json()) as Msg;
  const reader = (r.body as ReadableStream<BufferSource>).pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`stream ended without an answer to ${JSON.stringify(id)}`);
      buf += value;
      for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
        const data = buf
          .slice(0, i)
          .split("\n")
          .filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, ""))
          .join("\n");
        buf = buf.slice(i + 2);
        if (!data.trim()) continue;
        const m = JSON.parse(data) as Msg;
        if (m.id === id && (m.result !== undefined || m.error !== undefined)) return m;
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

/** One 2026-07-28 tools/call in run `run`; its answer and how long it took. */
async function modernCall(run: string, id: number, args: { tag: string; ms: number }): Promise<{ msg: Msg; ms: number }> {
  const started = Date.now();
  const r = await fetch(gw.url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "tools/call",
      "mcp-name": "slow__slow_echo",
      "portcullis-run-id": run,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "slow__slow_echo", arguments: args, _meta: META } }),
    signal: AbortSignal.timeout(20_000),
  });
  expect(r.status).toBe(200);
  return { msg: await answerOf(r, id), ms: Date.now() - started };
}

/** A fresh 2025-11-25 session; the headers for its requests. */
async function legacySession(): Promise<Record<string, string>> {
  const base = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  const init = await fetch(gw.url, {
    method: "POST",
    headers: base,
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "crossed", version: "1" } },
    }),
  });
  const sid = init.headers.get("mcp-session-id");
  await init.text();
  expect(sid).toBeTruthy();
  const h = { ...base, "mcp-session-id": sid!, "mcp-protocol-version": "2025-11-25" };
  (await fetch(gw.url, { method: "POST", headers: h, body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) })).body?.cancel();
  return h;
}

async function legacyRequest(
  h: Record<string, string>,
  id: string | number,
  method: string,
  params: object,
  signal?: AbortSignal,
): Promise<{ msg: Msg; ms: number }> {
  const started = Date.now();
  const r = await fetch(gw.url, {
    method: "POST",
    headers: h,
    body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
    signal: signal ?? AbortSignal.timeout(20_000),
  });
  expect(r.status).toBe(200);
  return { msg: await answerOf(r, id), ms: Date.now() - started };
}

const textOf = (m: Msg) => m.result?.content?.[0]?.text;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("answers go to the request that caused them", () => {
  it("two concurrent modern runs of one principal, both id 7, to a legacy-only upstream: each gets its own result, promptly", async () => {
    const before = upstream.log.length;
    const suffix = Math.random().toString(36).slice(2, 10);
    const first = modernCall(`run-a-${suffix}`, 7, { tag: "from-run-a", ms: 1200 });
    await sleep(150);
    const second = modernCall(`run-b-${suffix}`, 7, { tag: "from-run-b", ms: 300 });
    const [a, b] = await Promise.all([first, second]);
    expect(a.msg.id).toBe(7);
    expect(b.msg.id).toBe(7);
    expect(textOf(a.msg)).toBe("from-run-a");
    expect(textOf(b.msg)).toBe("from-run-b");
    expect(a.ms).toBeLessThan(10_000);
    expect(b.ms).toBeLessThan(10_000);
    // Both reached the one upstream session the principal shares, each under its own gateway-made id.
    const calls = upstream.log.slice(before).filter((s) => s.method === "tools/call");
    expect(calls).toHaveLength(2);
    expect(calls[0]!.session).toBe(calls[1]!.session);
    expect(calls[0]!.id).not.toBe(calls[1]!.id);
    for (const c of calls) expect(String(c.id)).toMatch(/^pc:[0-9a-z]+:[0-9a-z]+$/);
  });

  it("a legacy tools/call whose id is what a tools/list fan-out in flight would derive ('9:slow:0'): both get their own results", async () => {
    const h = await legacySession();
    // Warm the tool catalog, so the call reaches the upstream while the next listing still runs.
    const warm = await legacyRequest(h, 1, "tools/list", {});
    // (the gateway's own agent tools come last, preview_impact the very last: gateway.agent_tools)
    expect(warm.msg.result?.tools?.map((t) => t.name)).toEqual([
      "slow__slow_echo",
      "portcullis.list_runs",
      "portcullis.get_run",
      "portcullis.get_action_trace",
      "portcullis.plan_rollback",
      "portcullis.dry_run_rollback",
      "portcullis.validate_mapping",
      "portcullis.preview_impact",
    ]);
    const before = upstream.log.length;
    const list = legacyRequest(h, 9, "tools/list", {});
    await sleep(200);
    const call = legacyRequest(h, "9:slow:0", "tools/call", { name: "slow__slow_echo", arguments: { tag: "the-call", ms: 2500 } });
    const [l, c] = await Promise.all([list, call]);
    expect(l.msg.id).toBe(9);
    expect(l.msg.result?.tools?.map((t) => t.name)).toEqual([
      "slow__slow_echo",
      "portcullis.list_runs",
      "portcullis.get_run",
      "portcullis.get_action_trace",
      "portcullis.plan_rollback",
      "portcullis.dry_run_rollback",
      "portcullis.validate_mapping",
      "portcullis.preview_impact",
    ]);
    expect(c.msg.id).toBe("9:slow:0");
    expect(textOf(c.msg)).toBe("the-call");
    expect(l.ms).toBeLessThan(10_000);
    expect(c.ms).toBeLessThan(10_000);
    const seen = upstream.log.slice(before).filter((s) => s.method === "tools/list" || s.method === "tools/call");
    expect(seen.map((s) => s.method).sort()).toEqual(["tools/call", "tools/list"]);
    expect(seen[0]!.id).not.toBe(seen[1]!.id);
    for (const s of seen) expect(String(s.id)).not.toContain("9:slow:0");
  });

  it("a legacy client's notifications/cancelled reaches the upstream under the id its request carried there", async () => {
    const h = await legacySession();
    const before = upstream.log.length;
    const abandon = new AbortController();
    const running = legacyRequest(h, 5, "tools/call", { name: "slow__slow_echo", arguments: { tag: "to-cancel", ms: 30_000 } }, abandon.signal).catch(
      () => null,
    );
    let wire: string | number | undefined;
    for (let i = 0; i < 50 && wire === undefined; i++) {
      await sleep(100);
      wire = upstream.log.slice(before).find((s) => s.method === "tools/call")?.id;
    }
    expect(wire).toBeDefined();
    const r = await fetch(gw.url, {
      method: "POST",
      headers: h,
      body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 5, reason: "user" } }),
    });
    expect(r.status).toBe(202);
    await r.body?.cancel();
    for (let i = 0; i < 50 && !upstream.cancelled.includes(wire!); i++) await sleep(100);
    expect(upstream.cancelled).toContain(wire);
    abandon.abort();
    await running;
  });
});
