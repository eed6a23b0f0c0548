/**
 * The opt-in legacy HTTP+SSE endpoint (MCP 2024-11-05 transport, `gateway.legacy_sse: true`) on
 * the production build (wrangler dev, workerd, no eval), with grants required, in front of
 * server-everything, the conformance fixture and a recording upstream whose request log proves
 * what reached it. Shows: an SDK v2 client (`SSEClientTransport`) connects to /sse, lists tools
 * and calls one — the right answer, with a receipt whose decision and outcome are in the ledger;
 * a policy-denied call is refused (isError) and never reaches the upstream; another grant
 * (another principal, or the same principal's other grant) cannot POST into the session (404,
 * nothing forwarded); concurrent calls in one session each get their own answer, progress
 * included; an answer the upstream delivers after closing its stream (SEP-1699) still arrives;
 * the wire itself (endpoint event first, a 2024-11-05 initialize negotiated to 2025-03-26, bad
 * input refused with 400); the end of the stream ends the session (later POSTs 404); and with the
 * setting off (the shared gateway), /sse and /messages are 404 like any unknown route.
 * Owns the gateway and the recording upstream it starts. Must never: leave them running, or
 * reach beyond 127.0.0.1.
 */
import { Client, SSEClientTransport } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { grantFor, ledgerKinds, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

let jwk = "";
let gw: Proc & { url: string };
let origin = "";
let rec: Awaited<ReturnType<typeof startModernOnlyUpstream>>;

const config = (recUrl: string) => `
actor: local:sse
auth:
  required: true
egress:
  allow_loopback: true
gateway:
  legacy_sse: true
upstreams:
  - name: ev
    url: ${inject("everythingUrl")}
    timeout: 30s
  - name: conf
    url: ${inject("conformanceUrl")}
    timeout: 30s
  - name: rec
    url: ${recUrl}
    timeout: 30s
mappings:
  ev:
    tools:
      get-sum: { effect: read_only, verb: add }
  conf:
    tools:
      test_slow_cancellable: { effect: read_only }
      test_reconnection: { effect: read_only }
  rec:
    tools:
      bump: { effect: idempotent }
policy:
  rules:
    - id: no-restricted-bumps
      match: { tool: rec__bump }
      when: 'principal.sub.startsWith("agent:restricted")'
      decision: deny
      reason: restricted agents may not bump
`;

const grant = async (sub: string, roles: ("agent" | "auditor")[] = ["agent"]) =>
  (await grantFor(jwk, origin, { sub, team: "sse", roles, tools: ["*"], ttlSeconds: 900 })).token;
const bumps = () => rec.log.filter((s) => s.method === "tools/call" && s.name === "bump").length;

const clients: Client[] = [];
/** An SDK v2 client on the legacy HTTP+SSE transport, closed after the test. */
async function sseClient(token: string, name = "sse-e2e"): Promise<Client> {
  const client = new Client({ name, version: "1" });
  const transport = new SSEClientTransport(new URL(`${origin}/sse`), { requestInit: { headers: { authorization: `Bearer ${token}` } } });
  await client.connect(transport);
  clients.push(client);
  return client;
}

interface Ev {
  event?: string;
  data: string;
}

/** A raw HTTP+SSE session: the GET stream read event by event, POSTs to its endpoint. */
async function rawSession(token: string) {
  const ac = new AbortController();
  const res = await fetch(`${origin}/sse`, { headers: { accept: "text/event-stream", authorization: `Bearer ${token}` }, signal: ac.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const queue: Ev[] = [];
  const pump = (async () => {
    const reader = (res.body as ReadableStream<BufferSource>).pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    try {
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
            if (k === "event") ev.event = v;
            if (k === "data") data.push(v);
            any = true;
          }
          ev.data = data.join("\n");
          if (any) queue.push(ev);
        }
      }
    } catch {
      // aborted
    }
  })();
  /** The next event (bounded: 30 s). */
  const next = async (): Promise<Ev> => {
    for (let i = 0; i < 300; i++) {
      const ev = queue.shift();
      if (ev) return ev;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("no event within 30 s");
  };
  /** The next `message` event's JSON if one arrives within `ms`, else null (nothing left waiting). */
  const within = async (ms: number): Promise<Any | null> => {
    for (const end = Date.now() + ms; Date.now() < end; ) {
      const ev = queue.shift();
      if (ev) return ev.event === "message" ? JSON.parse(ev.data) : null;
      await new Promise((r) => setTimeout(r, 50));
    }
    return null;
  };
  const first = await next();
  const post = (body: unknown, bearer = token, path = first.data, contentType = "application/json") =>
    fetch(new URL(path, `${origin}/sse`), {
      method: "POST",
      headers: { "content-type": contentType, authorization: `Bearer ${bearer}` },
      body: typeof body === "string" ? body : JSON.stringify(body),
      signal: AbortSignal.timeout(60_000),
    });
  /** The next `message` event's JSON. */
  const message = async (): Promise<Any> => {
    const ev = await next();
    expect(ev.event).toBe("message");
    return JSON.parse(ev.data);
  };
  /** Messages until the answer to request `id` (bounded by next()); the answer and what came before it. */
  const answerTo = async (id: number): Promise<{ answer: Any; before: Any[] }> => {
    const before: Any[] = [];
    for (let i = 0; i < 50; i++) {
      const m = await message();
      if (!("method" in m) && m.id === id) return { answer: m, before };
      before.push(m);
    }
    throw new Error(`no answer to ${id} among 50 messages`);
  };
  const init = async (version = "2025-11-25") => {
    const r = await post({
      jsonrpc: "2.0",
      id: 0,
      method: "initialize",
      params: { protocolVersion: version, capabilities: {}, clientInfo: { name: "raw", version: "1" } },
    });
    expect(r.status).toBe(202);
    await r.text();
    const answer = await message();
    expect((await post({ jsonrpc: "2.0", method: "notifications/initialized" })).status).toBe(202);
    return answer;
  };
  const close = async () => {
    ac.abort();
    await pump;
  };
  return { first, post, next, message, within, answerTo, init, close };
}

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("legacy-sse-e2e")).privateJwk);
  rec = await startModernOnlyUpstream();
  const port = await freePort();
  gw = await startPortcullis(config(rec.url), port, { PORTCULLIS_SIGNING_KEY: jwk });
  origin = `http://127.0.0.1:${port}`;
}, 180_000);
afterEach(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => undefined);
});
afterAll(async () => {
  await gw?.stop();
  await rec?.close();
});

describe("an SDK v2 client on the HTTP+SSE transport", () => {
  it("lists tools and calls one: the right answer, and a receipt whose decision and outcome are in the ledger", async () => {
    const client = await sseClient(await grant("agent:sse-a"));
    expect(client.getServerVersion()?.name).toBe("portcullis");
    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["ev__get-sum", "rec__bump", "conf__test_slow_cancellable"]));
    const r: Any = await client.callTool({ name: "ev__get-sum", arguments: { a: 2, b: 3 } });
    expect(r.isError ?? false).toBe(false);
    expect(texts(r)).toBe("The sum of 2 and 3 is 5.");
    const receipt = r._meta["portcullis/receipt"];
    expect(receipt.chain).toBe("sse");
    expect(receipt.seq).toBeGreaterThan(0);
    const auditor = await grant("human:sse-auditor", ["auditor"]);
    let trace: Any = null;
    for (let i = 0; i < 60 && trace?.status !== "succeeded"; i++) {
      const t = await fetch(`${origin}/v1/ledger/${receipt.decision_id}/trace`, { headers: { authorization: `Bearer ${auditor}` } });
      trace = t.ok ? await t.json() : null;
      if (trace?.status !== "succeeded") await new Promise((res) => setTimeout(res, 500));
    }
    expect(trace.status).toBe("succeeded");
    expect(trace.records.map((x: Any) => x.kind).sort()).toEqual(["decision", "outcome"]);
    const decision = trace.records.find((x: Any) => x.kind === "decision");
    expect(decision.body).toMatchObject({ principal: "agent:sse-a", upstream: "ev", tool: "get-sum", decision: "allow" });
    // The run is the legacy session the SSE session wraps.
    expect(decision.body.run).toMatch(/^[0-9a-f]{48}$/);
  });

  it("a policy-denied call is refused with isError and never reaches the recording upstream", async () => {
    const allowed = await sseClient(await grant("agent:sse-bumper"));
    const denied = await sseClient(await grant("agent:restricted-sse"));
    const before = bumps();
    const r: Any = await denied.callTool({ name: "rec__bump", arguments: {} });
    expect(r.isError).toBe(true);
    expect(texts(r)).toMatch(/^Blocked by Portcullis: /);
    expect(texts(r)).toContain("rule: no-restricted-bumps");
    expect(bumps()).toBe(before);
    const auditor = await grant("human:sse-auditor-2", ["auditor"]);
    const blocked = await ledgerKinds(origin, auditor, "blocked", (es) => es.some((e) => e.body?.principal === "agent:restricted-sse"));
    expect(blocked.find((e) => e.body?.principal === "agent:restricted-sse")?.body).toMatchObject({ tool: "rec__bump" });
    // The same call by an agent the rule does not name reaches the upstream: the count is live.
    const ok: Any = await allowed.callTool({ name: "rec__bump", arguments: {} });
    expect(ok.isError ?? false).toBe(false);
    expect(bumps()).toBe(before + 1);
  });

  it("two concurrent calls in one session get their own answers (and the slow one its progress)", async () => {
    const client = await sseClient(await grant("agent:sse-concurrent"));
    const order: string[] = [];
    let progress = 0;
    const slow = client.callTool({ name: "conf__test_slow_cancellable", arguments: { ms: 1500 } }, { onprogress: () => void progress++ }).then((r) => {
      order.push("slow");
      return r;
    });
    const sums = [
      [4, 5],
      [70, 8],
    ].map(([a, b]) =>
      client.callTool({ name: "ev__get-sum", arguments: { a, b } }).then((r) => {
        order.push(`sum ${a}`);
        return r;
      }),
    );
    const [s, x, y] = (await Promise.all([slow, ...sums])) as Any[];
    expect(texts(x)).toBe("The sum of 4 and 5 is 9.");
    expect(texts(y)).toBe("The sum of 70 and 8 is 78.");
    expect(s.isError ?? false).toBe(false);
    expect(progress).toBeGreaterThan(0);
    // The quick calls were answered while the slow one was still running.
    expect(order.at(-1)).toBe("slow");
  });

  it("a call the upstream answers after closing its stream (SEP-1699) still completes", async () => {
    const client = await sseClient(await grant("agent:sse-reconnect"));
    const r: Any = await client.callTool({ name: "conf__test_reconnection", arguments: {} });
    expect(texts(r)).toMatch(/^Reconnection test completed successfully/);
  });
});

describe("the HTTP+SSE wire", () => {
  it("announces the endpoint first, negotiates a 2024-11-05 initialize to 2025-03-26, and answers on the stream", async () => {
    const s = await rawSession(await grant("agent:sse-raw"));
    expect(s.first.event).toBe("endpoint");
    expect(s.first.data).toMatch(/^\/messages\?sessionId=[0-9a-f]{48}$/);
    const init = await s.init("2024-11-05");
    expect(init).toMatchObject({ jsonrpc: "2.0", id: 0, result: { protocolVersion: "2025-03-26", serverInfo: { name: "portcullis" } } });
    const r = await s.post({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "ev__get-sum", arguments: { a: 1, b: 1 } } });
    expect(r.status).toBe(202);
    await r.text();
    const { answer } = await s.answerTo(1);
    expect(texts(answer.result)).toBe("The sum of 1 and 1 is 2.");
    await s.close();
  });

  it("passes the same edge and gate as /mcp: a foreign Origin is 403, no grant is 401 with the /mcp challenge", async () => {
    const token = await grant("agent:sse-edge");
    const evil = await fetch(`${origin}/sse`, { headers: { accept: "text/event-stream", authorization: `Bearer ${token}`, origin: "https://evil.example" } });
    expect(evil.status).toBe(403);
    await evil.text();
    for (const [path, init] of [
      ["/sse", { headers: { accept: "text/event-stream" } }],
      [
        `/messages?sessionId=${"2".repeat(48)}`,
        { method: "POST", headers: { "content-type": "application/json" }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' },
      ],
    ] as const) {
      const r = await fetch(`${origin}${path}`, init);
      expect(r.status, path).toBe(401);
      expect(r.headers.get("www-authenticate"), path).toContain("/.well-known/oauth-protected-resource/mcp");
      await r.text();
    }
  });

  it("refuses non-JSON, a batch and a missing sessionId with 400 and a JSON-RPC error", async () => {
    const token = await grant("agent:sse-bad");
    const s = await rawSession(token);
    await s.init();
    for (const [body, path, code] of [
      ["{nope", s.first.data, -32700],
      [[{ jsonrpc: "2.0", id: 1, method: "tools/list" }], s.first.data, -32600],
      [{ jsonrpc: "2.0", id: 1, method: "tools/list" }, "/messages", -32600],
    ] as const) {
      const r = await s.post(body, token, path);
      expect(r.status).toBe(400);
      const j = await r.json();
      expect(j.jsonrpc).toBe("2.0");
      expect(j.error.code).toBe(code);
    }
    await s.close();
  });

  it("another grant cannot POST into the session (404, nothing forwarded); the owner can", async () => {
    const token = await grant("agent:sse-owner");
    const s = await rawSession(token);
    await s.init();
    const mallory = await grant("agent:sse-mallory");
    const sameSubOtherGrant = await grant("agent:sse-owner");
    const bump = { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "rec__bump", arguments: {} } };
    const before = bumps();
    for (const other of [mallory, sameSubOtherGrant]) {
      const r = await s.post(bump, other);
      expect(r.status).toBe(404);
      const j = await r.json();
      expect(j.error.message).toMatch(/^Session not found/);
      expect(j.id).toBe(5);
    }
    // Unknown session ids too.
    expect((await s.post(bump, token, `/messages?sessionId=${"0".repeat(48)}`)).status).toBe(404);
    expect(bumps()).toBe(before);
    const mine = await s.post(bump, token);
    expect(mine.status).toBe(202);
    await mine.text();
    const { answer } = await s.answerTo(5);
    expect(answer.result.isError ?? false).toBe(false);
    expect(bumps()).toBe(before + 1);
    await s.close();
  });

  it("relays the wrapped session's server-initiated messages: the upstream's tool-list change arrives on the stream", async () => {
    const s = await rawSession(await grant("agent:sse-listener"));
    await s.init();
    // The recording upstream's bump announces a tool-list change on every listen. The wrapped
    // session's listen opens once initialize bound it: bump until one change reached this stream.
    let changed = false;
    for (let i = 0; i < 5 && !changed; i++) {
      const r = await s.post({ jsonrpc: "2.0", id: 100 + i, method: "tools/call", params: { name: "rec__bump", arguments: {} } });
      expect(r.status).toBe(202);
      await r.text();
      const { before } = await s.answerTo(100 + i);
      changed = before.some((m) => m.method === "notifications/tools/list_changed");
      // A change sent just after the answer.
      for (let j = 0; j < 10 && !changed; j++) {
        if ((await s.within(200))?.method === "notifications/tools/list_changed") changed = true;
      }
    }
    expect(changed).toBe(true);
    await s.close();
  });

  it("the end of the stream ends the session: later POSTs get 404", async () => {
    const token = await grant("agent:sse-leaver");
    const s = await rawSession(token);
    await s.init();
    const list = { jsonrpc: "2.0", id: 2, method: "tools/list" };
    const r = await s.post(list);
    expect(r.status).toBe(202);
    await r.text();
    expect((await s.answerTo(2)).answer.result.tools.length).toBeGreaterThan(0);
    await s.close();
    let status = 0;
    for (let i = 0; i < 40 && status !== 404; i++) {
      const again = await s.post(list);
      status = again.status;
      await again.text();
      if (status !== 404) await new Promise((res) => setTimeout(res, 250));
    }
    expect(status).toBe(404);
  });
});

describe("gateway.legacy_sse off", () => {
  it("/sse and /messages are 404 like any unknown route (the shared gateway has the default)", async () => {
    const off = new URL(inject("namespacedUrl")).origin;
    const unknown = await fetch(`${off}/no-such-route`);
    const want = { status: unknown.status, body: await unknown.text() };
    expect(want.status).toBe(404);
    for (const [path, init] of [
      ["/sse", { headers: { accept: "text/event-stream" } }],
      [
        `/messages?sessionId=${"1".repeat(48)}`,
        { method: "POST", headers: { "content-type": "application/json" }, body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' },
      ],
    ] as const) {
      const r = await fetch(`${off}${path}`, init);
      expect({ status: r.status, body: await r.text() }, path).toEqual(want);
    }
  });
});
