/**
 * A loopback 2026-07-28 MCP upstream over raw HTTP/1.1 (node:net, no http module, no SDK) that
 * keeps its connections alive and, when told, drops one: for the connection-lost e2e test
 * (connection-lost.test.ts). It answers `server/discover`, `tools/list` (the tools it is given) and
 * `tools/call` (a text result naming the tool and the call's number) with stateless JSON answers
 * and `Connection: keep-alive`, several requests per connection; `drop(tool, nth)` makes the
 * nth tools/call of that tool (counted from 1, over the upstream's life) destroy its socket right
 * after the request was read, without writing a byte of response — what a keep-alive connection the
 * upstream closed while idle looks like to a client that reused it. It counts tools/call requests
 * per tool (dropped ones included) and the connections it accepted. Listens on 127.0.0.1 only.
 * Must never: be used outside tests, listen beyond loopback, or keep the test process alive after
 * `close()`.
 */
import { createServer, type AddressInfo, type Socket } from "node:net";

type Obj = Record<string, unknown>;
const MODERN = "2026-07-28";
/** Bounds of one request this server accepts (it is a test fixture, not a general server). */
const MAX_HEAD = 64 * 1024;
const MAX_BODY = 1024 * 1024;

export interface DroppingUpstream {
  /** The 2026-07-28 MCP endpoint. */
  url: string;
  /** tools/call requests received (read in full), by tool, dropped ones included. */
  calls: Map<string, number>;
  /** tools/call requests dropped, by tool. */
  dropped: Map<string, number>;
  /** Connections accepted so far. */
  connections(): number;
  /** The `nth` tools/call of `tool` (1-based, over this upstream's life) gets its socket destroyed and no answer. */
  drop(tool: string, nth: number): void;
  close(): Promise<void>;
}

interface Request {
  method: string;
  path: string;
  headers: Map<string, string>;
  body: Buffer;
}

/** One complete request at the start of `buf`, and how many bytes it took; null while it is incomplete. Throws on a malformed one. */
function parseRequest(buf: Buffer): { req: Request; used: number } | null {
  const end = buf.indexOf("\r\n\r\n");
  if (end < 0) {
    if (buf.length > MAX_HEAD) throw new Error("request head too large");
    return null;
  }
  const lines = buf.subarray(0, end).toString("latin1").split("\r\n");
  const [method, path] = lines[0]!.split(" ");
  const headers = new Map<string, string>();
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
  }
  let at = end + 4;
  if ((headers.get("transfer-encoding") ?? "").toLowerCase().includes("chunked")) {
    const parts: Buffer[] = [];
    let size = 0;
    for (;;) {
      const eol = buf.indexOf("\r\n", at);
      if (eol < 0) return null;
      const n = Number.parseInt(buf.subarray(at, eol).toString("latin1"), 16);
      if (!Number.isFinite(n) || n < 0) throw new Error("bad chunk size");
      if (buf.length < eol + 2 + n + 2) return null;
      if (n === 0) {
        // No trailers from the clients that talk to this fixture: the last chunk ends with CRLF.
        at = eol + 4;
        break;
      }
      parts.push(buf.subarray(eol + 2, eol + 2 + n));
      size += n;
      if (size > MAX_BODY) throw new Error("request body too large");
      at = eol + 2 + n + 2;
    }
    return { req: { method: method ?? "", path: path ?? "", headers, body: Buffer.concat(parts) }, used: at };
  }
  const length = Number(headers.get("content-length") ?? "0");
  if (!Number.isSafeInteger(length) || length < 0 || length > MAX_BODY) throw new Error("bad content-length");
  if (buf.length < at + length) return null;
  return { req: { method: method ?? "", path: path ?? "", headers, body: buf.subarray(at, at + length) }, used: at + length };
}

function response(status: number, reason: string, body: string, type = "application/json"): string {
  return [
    `HTTP/1.1 ${status} ${reason}`,
    ...(body !== "" ? [`Content-Type: ${type}`] : []),
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Connection: keep-alive",
    "Keep-Alive: timeout=60",
    "",
    body,
  ].join("\r\n");
}

const rpc = (id: unknown, result: Obj) => response(200, "OK", JSON.stringify({ jsonrpc: "2.0", id, result: { resultType: "complete", ...result } }));
const rpcError = (id: unknown, code: number, message: string) => response(200, "OK", JSON.stringify({ jsonrpc: "2.0", id, error: { code, message } }));

/** Starts the upstream on an ephemeral loopback port, serving `tools` (names only; every tool takes an empty object). */
export async function startDroppingUpstream(tools: string[]): Promise<DroppingUpstream> {
  const calls = new Map<string, number>();
  const dropped = new Map<string, number>();
  const drops = new Map<string, Set<number>>();
  const sockets = new Set<Socket>();
  let accepted = 0;

  /** What to write for one request: a response, or null to destroy the socket without one. */
  function answer(req: Request): string | null {
    if (req.path.split("?")[0] !== "/mcp") return response(404, "Not Found", "");
    if (req.method === "DELETE") return response(200, "OK", "");
    if (req.method !== "POST") return response(405, "Method Not Allowed", "");
    let msg: Obj;
    try {
      msg = JSON.parse(req.body.toString("utf8")) as Obj;
    } catch {
      return response(400, "Bad Request", JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }));
    }
    const id = msg.id;
    if (id === undefined) return response(202, "Accepted", "");
    const method = typeof msg.method === "string" ? msg.method : "";
    const params = (msg.params ?? {}) as Obj;
    switch (method) {
      case "initialize":
        return response(
          400,
          "Bad Request",
          JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32022, message: `Unsupported protocol version; supported: ${MODERN}` } }),
        );
      case "server/discover":
        return rpc(id, {
          supportedVersions: [MODERN],
          capabilities: { tools: {} },
          _meta: { "io.modelcontextprotocol/serverInfo": { name: "dropping-upstream", version: "1" } },
          ttlMs: 0,
          cacheScope: "public",
        });
      case "ping":
        return rpc(id, {});
      case "tools/list":
        return rpc(id, {
          tools: tools.map((name) => ({ name, description: `test tool ${name}`, inputSchema: { type: "object", properties: {} } })),
          ttlMs: 0,
          cacheScope: "public",
        });
      case "tools/call": {
        const name = String(params.name ?? "");
        const n = (calls.get(name) ?? 0) + 1;
        calls.set(name, n);
        if (drops.get(name)?.has(n)) {
          dropped.set(name, (dropped.get(name) ?? 0) + 1);
          return null;
        }
        if (!tools.includes(name)) return rpcError(id, -32602, `Unknown tool: ${name}`);
        return rpc(id, { content: [{ type: "text", text: `${name} #${n}` }] });
      }
      default:
        return rpcError(id, -32601, "Method not found");
    }
  }

  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined);
    let buf = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      try {
        for (;;) {
          const parsed = parseRequest(buf);
          if (!parsed) return;
          buf = buf.subarray(parsed.used);
          const out = answer(parsed.req);
          if (out === null) {
            // The request was read; the connection goes away before any response byte.
            socket.destroy();
            return;
          }
          socket.write(out);
        }
      } catch (e) {
        socket.end(response(400, "Bad Request", String((e as Error).message), "text/plain"));
      }
    });
  });
  server.unref();
  const port = await new Promise<number>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
  });
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    dropped,
    connections: () => accepted,
    drop(tool, nth) {
      const s = drops.get(tool) ?? new Set<number>();
      s.add(nth);
      drops.set(tool, s);
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
