/**
 * A loopback MCP upstream whose tools misbehave on demand, for the fault e2e tests
 * (faults.test.ts). Hand-written over node:http (no SDK), so every fault is exactly what the
 * wire carries: it serves the 2025-11-25 era at `/legacy/mcp` (initialize, Mcp-Session-Id,
 * `server/discover` refused) and the 2026-07-28 era at `/modern/mcp` (`server/discover`, no
 * sessions, `initialize` refused). `tools/list` is always well-formed; `tools/call` of
 *  - `ok`            answers at once;
 *  - `slow`          answers after `slowMs` (longer than the gateway's configured timeout);
 *  - `stall`         sends its headers and half a body, then nothing more (until `slowMs`);
 *  - `http_500`      HTTP 500 with an HTML body; `http_503` HTTP 503 with an empty body;
 *  - `http_500_rpc`  HTTP 500 carrying a well-formed JSON-RPC error;
 *  - `malformed`     HTTP 200 application/json whose body is truncated JSON;
 *  - `malformed_sse` an SSE stream whose event is not JSON;
 *  - `sse_drop`      an SSE stream that sends one notification, then the connection is destroyed;
 *  - `big`           a result of `bigBytes` (under the gateway's response cap), chunked;
 *  - `huge`          a result of `hugeBytes` with Content-Length; `huge_chunked` the same, chunked;
 * and it counts every tools/call it receives by tool (`calls`), so tests can tell what reached it.
 * `stop()` closes the listening socket (the port then refuses) and `start()` listens again on the
 * same port. Listens on 127.0.0.1 only. Must never: be used outside tests, or listen beyond loopback.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export const FAULT_TOOLS = [
  "ok",
  "slow",
  "stall",
  "http_500",
  "http_503",
  "http_500_rpc",
  "malformed",
  "malformed_sse",
  "sse_drop",
  "big",
  "huge",
  "huge_chunked",
] as const;
export type FaultTool = (typeof FAULT_TOOLS)[number];

export interface FaultyUpstreamOptions {
  /** How long `slow` takes to answer, ms (default 10 s). */
  slowMs?: number;
  /** The size of the text `huge` and `huge_chunked` answer, bytes (default 20 MiB). */
  hugeBytes?: number;
  /** The size of the text `big` answers, bytes (default 8 MiB). */
  bigBytes?: number;
  /** A fixed port (default: an ephemeral one). */
  port?: number;
}

export interface FaultyUpstream {
  /** The 2025-11-25 endpoint. */
  legacyUrl: string;
  /** The 2026-07-28 endpoint. */
  modernUrl: string;
  port: number;
  /** tools/call requests received, by tool (both eras together). */
  calls: Map<string, number>;
  /** tools/call requests received in total. */
  total(): number;
  /** Stops listening (open connections are destroyed): the port refuses connections. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
  close(): Promise<void>;
}

type Obj = Record<string, unknown>;
const LEGACY = "2025-11-25";
const MODERN = "2026-07-28";

const TOOLS = FAULT_TOOLS.map((name) => ({
  name,
  description: `fault injection: ${name}`,
  inputSchema: { type: "object", properties: {} },
}));

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

export async function startFaultyUpstream(opts: FaultyUpstreamOptions = {}): Promise<FaultyUpstream> {
  const slowMs = opts.slowMs ?? 10_000;
  const hugeBytes = opts.hugeBytes ?? 20 * 1024 * 1024;
  const bigBytes = opts.bigBytes ?? 8 * 1024 * 1024;
  const calls = new Map<string, number>();
  const timers = new Set<ReturnType<typeof setTimeout>>();
  const later = (ms: number, f: () => void) => {
    const t = setTimeout(() => {
      timers.delete(t);
      f();
    }, ms);
    timers.add(t);
  };

  /** Answers one tools/call as its tool misbehaves (the returned value means nothing). */
  function toolCall(res: ServerResponse, id: unknown, name: string, era: "legacy" | "modern"): unknown {
    calls.set(name, (calls.get(name) ?? 0) + 1);
    const result = (r: Obj) => json(res, 200, { jsonrpc: "2.0", id, result: era === "modern" ? { resultType: "complete", ...r } : r });
    switch (name as FaultTool) {
      case "ok":
        return result({ content: [{ type: "text", text: "ok" }] });
      case "slow":
        return later(slowMs, () => {
          if (!res.destroyed) result({ content: [{ type: "text", text: "slow but done" }] });
        });
      case "stall":
        res.writeHead(200, { "content-type": "application/json" });
        res.write(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[`);
        return later(slowMs, () => res.end("]}}"));
      case "http_500":
        res.writeHead(500, { "content-type": "text/html" });
        res.end("<html><body>Internal Server Error</body></html>");
        return;
      case "http_503":
        res.writeHead(503, { "retry-after": "5" });
        res.end();
        return;
      case "http_500_rpc":
        return json(res, 500, { jsonrpc: "2.0", id, error: { code: -32603, message: "the upstream's database is down" } });
      case "malformed":
        res.writeHead(200, { "content-type": "application/json" });
        res.end(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"te`);
        return;
      case "malformed_sse":
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        res.end("event: message\ndata: {this is not json\n\n");
        return;
      case "sse_drop":
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        res.write(
          `event: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/message", params: { level: "info", data: "working on it" } })}\n\n`,
        );
        // Mid-call: the connection is torn down before any response (no event id: nothing to resume from).
        return later(200, () => res.socket?.destroy());
      case "big":
      case "huge":
      case "huge_chunked": {
        const size = name === "big" ? bigBytes : hugeBytes;
        const text = JSON.stringify({ jsonrpc: "2.0", id, result: { content: [{ type: "text", text: "x".repeat(size) }] } });
        if (name === "huge") {
          res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) });
          res.end(text);
          return;
        }
        res.writeHead(200, { "content-type": "application/json" }); // no Content-Length: chunked
        const CHUNK = 1 << 20;
        let off = 0;
        const pump = () => {
          while (off < text.length) {
            const ok = res.write(text.slice(off, off + CHUNK));
            off += CHUNK;
            if (!ok) return void res.once("drain", pump);
          }
          res.end();
        };
        res.on("error", () => undefined);
        pump();
        return;
      }
      default:
        return json(res, 200, { jsonrpc: "2.0", id, error: { code: -32602, message: `Unknown tool: ${name}` } });
    }
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const era = path === "/legacy/mcp" ? "legacy" : path === "/modern/mcp" ? "modern" : null;
    if (!era) return void res.writeHead(404).end();
    if (req.method === "DELETE") return void res.writeHead(200).end();
    if (req.method !== "POST") return void res.writeHead(405, { allow: "POST" }).end();
    let msg: Obj;
    try {
      msg = JSON.parse(await readBody(req)) as Obj;
    } catch {
      return json(res, 400, { jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } });
    }
    const id = msg.id;
    const method = typeof msg.method === "string" ? msg.method : "";
    if (id === undefined) return void res.writeHead(202).end(); // a notification
    const params = (msg.params ?? {}) as Obj;
    if (era === "legacy") {
      if (method === "server/discover") return json(res, 200, { jsonrpc: "2.0", id, error: { code: -32601, message: "Method not found" } });
      if (method === "initialize") {
        return json(
          res,
          200,
          { jsonrpc: "2.0", id, result: { protocolVersion: LEGACY, capabilities: { tools: {} }, serverInfo: { name: "faulty-legacy", version: "1" } } },
          { "mcp-session-id": randomUUID() },
        );
      }
    } else {
      if (method === "initialize")
        return json(res, 400, { jsonrpc: "2.0", id, error: { code: -32022, message: `Unsupported protocol version; supported: ${MODERN}` } });
      if (method === "server/discover") {
        return json(res, 200, {
          jsonrpc: "2.0",
          id,
          result: {
            resultType: "complete",
            supportedVersions: [MODERN],
            capabilities: { tools: {} },
            _meta: { "io.modelcontextprotocol/serverInfo": { name: "faulty-modern", version: "1" } },
            ttlMs: 0,
            cacheScope: "public",
          },
        });
      }
    }
    if (method === "ping") return json(res, 200, { jsonrpc: "2.0", id, result: {} });
    if (method === "tools/list") {
      const r: Obj = { tools: TOOLS };
      return json(res, 200, { jsonrpc: "2.0", id, result: era === "modern" ? { resultType: "complete", ...r, ttlMs: 0, cacheScope: "public" } : r });
    }
    if (method === "tools/call") {
      toolCall(res, id, String(params.name ?? ""), era);
      return;
    }
    return json(res, 200, { jsonrpc: "2.0", id, error: { code: -32601, message: "Method not found" } });
  }

  let server: Server;
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server = createServer((req, res) => {
        handle(req, res).catch((e) => {
          if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
          res.end(String(e));
        });
      });
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
  const port = await listen(opts.port ?? 0);
  const stop = () =>
    new Promise<void>((resolve) => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return {
    legacyUrl: `http://127.0.0.1:${port}/legacy/mcp`,
    modernUrl: `http://127.0.0.1:${port}/modern/mcp`,
    port,
    calls,
    total: () => [...calls.values()].reduce((a, b) => a + b, 0),
    stop,
    start: async () => {
      await listen(port);
    },
    close: stop,
  };
}
