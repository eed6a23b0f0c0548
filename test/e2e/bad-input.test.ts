/**
 * The bad-input table: every row is a hostile or malformed request with its exact expected HTTP
 * status and JSON-RPC error code, sent to the production build. No row may answer 5xx.
 */
import { beforeAll, describe, expect, inject, it } from "vitest";
import { raw } from "./raw.ts";

const url = inject("namespacedUrl");
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const ACCEPT = "application/json, text/event-stream";
let session = "";
let ended = "";

async function initialize(): Promise<string> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: ACCEPT },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "bad-input", version: "1" } },
    }),
  });
  expect(r.status).toBe(200);
  await r.text();
  return r.headers.get("mcp-session-id")!;
}

beforeAll(async () => {
  session = await initialize();
  ended = await initialize();
  const d = await fetch(url, { method: "DELETE", headers: { "mcp-session-id": ended } });
  expect(d.status).toBe(200);
});

interface Row {
  name: string;
  method?: string;
  headers?: () => Record<string, string>;
  body?: () => string | undefined;
  path?: string;
  status: number;
  code?: number;
  id?: unknown;
}

const legacy = () => ({ "content-type": "application/json", accept: ACCEPT, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" });
const modern = (method = "tools/list", extra: Record<string, string> = {}) => ({
  "content-type": "application/json",
  accept: ACCEPT,
  "mcp-protocol-version": "2026-07-28",
  "mcp-method": method,
  ...extra,
});
const rpc = (method: string, params: Record<string, unknown> = {}, id: unknown = 5) => JSON.stringify({ jsonrpc: "2.0", id, method, params });
const mrpc = (method: string, params: Record<string, unknown> = {}) => rpc(method, { ...params, _meta: MODERN_META });

const rows: Row[] = [
  { name: "malformed JSON", headers: legacy, body: () => "{not json", status: 400, code: -32700, id: null },
  { name: "JSON-RPC batch array", headers: legacy, body: () => `[${rpc("ping")}]`, status: 400, code: -32600 },
  { name: "empty batch", headers: legacy, body: () => "[]", status: 400, code: -32600 },
  { name: "jsonrpc 1.0", headers: legacy, body: () => JSON.stringify({ jsonrpc: "1.0", id: 3, method: "ping" }), status: 400, code: -32600, id: 3 },
  { name: "method not a string", headers: legacy, body: () => JSON.stringify({ jsonrpc: "2.0", id: 3, method: 42 }), status: 400, code: -32600, id: 3 },
  {
    name: "params is an array",
    headers: legacy,
    body: () => JSON.stringify({ jsonrpc: "2.0", id: 3, method: "ping", params: [1] }),
    status: 400,
    code: -32600,
    id: 3,
  },
  { name: "body is a bare string", headers: legacy, body: () => '"hello"', status: 400, code: -32600 },
  {
    name: "id is an object",
    headers: legacy,
    body: () => JSON.stringify({ jsonrpc: "2.0", id: { a: 1 }, method: "ping" }),
    status: 400,
    code: -32600,
    id: null,
  },
  { name: "oversized body (5 MiB)", headers: legacy, body: () => rpc("tools/list", { pad: "x".repeat(5 * 1024 * 1024) }), status: 413, code: -32600 },
  { name: "Content-Type text/plain", headers: () => ({ ...legacy(), "content-type": "text/plain" }), body: () => rpc("ping"), status: 415, code: -32600 },
  {
    name: "no Content-Type",
    headers: () => {
      const { "content-type": _c, ...h } = legacy();
      return h;
    },
    body: () => rpc("ping"),
    status: 415,
    code: -32600,
  },
  {
    name: "Accept without text/event-stream",
    headers: () => ({ ...legacy(), accept: "application/json" }),
    body: () => rpc("ping"),
    status: 406,
    code: -32600,
  },
  {
    name: "Accept missing",
    headers: () => {
      const { accept: _a, ...h } = legacy();
      return h;
    },
    body: () => rpc("ping"),
    status: 406,
    code: -32600,
  },
  {
    name: "request without session",
    headers: () => {
      const { "mcp-session-id": _s, ...h } = legacy();
      return h;
    },
    body: () => rpc("tools/list"),
    status: 400,
    code: -32000,
    id: 5,
  },
  {
    name: "unknown session",
    headers: () => ({ ...legacy(), "mcp-session-id": "f".repeat(48) }),
    body: () => rpc("tools/list"),
    status: 404,
    code: -32000,
    id: 5,
  },
  { name: "ended session", headers: () => ({ ...legacy(), "mcp-session-id": ended }), body: () => rpc("tools/list"), status: 404, code: -32000, id: 5 },
  {
    name: "unsupported MCP-Protocol-Version on a session",
    headers: () => ({ ...legacy(), "mcp-protocol-version": "1999-01-01" }),
    body: () => rpc("ping"),
    status: 400,
    code: -32000,
  },
  {
    name: "initialize on an existing session",
    headers: legacy,
    body: () => rpc("initialize", { protocolVersion: "2025-11-25", capabilities: {} }),
    status: 400,
    code: -32600,
    id: 5,
  },
  { name: "unknown method (legacy)", headers: legacy, body: () => rpc("no/such/method"), status: 200, code: -32601, id: 5 },
  { name: "unknown tool (legacy)", headers: legacy, body: () => rpc("tools/call", { name: "nope__tool" }), status: 200, code: -32602, id: 5 },
  {
    name: "tool denied by config is unknown",
    headers: legacy,
    body: () => rpc("tools/call", { name: "conf__test_error_handling" }),
    status: 200,
    code: -32602,
    id: 5,
  },
  { name: "tools/call without a name", headers: legacy, body: () => rpc("tools/call", {}), status: 200, code: -32602, id: 5 },
  {
    name: "answer to a request never relayed",
    headers: legacy,
    body: () => JSON.stringify({ jsonrpc: "2.0", id: "pc-unknown", result: {} }),
    status: 400,
    code: -32600,
  },
  { name: "modern: _meta missing", headers: () => modern(), body: () => rpc("tools/list"), status: 400, code: -32602, id: 5 },
  {
    name: "modern: clientCapabilities missing",
    headers: () => modern(),
    body: () => rpc("tools/list", { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } }),
    status: 400,
    code: -32602,
    id: 5,
  },
  {
    name: "modern: unsupported protocol version",
    headers: () => modern("tools/list", { "mcp-protocol-version": "2031-01-01" }),
    body: () => rpc("tools/list", { _meta: { ...MODERN_META, "io.modelcontextprotocol/protocolVersion": "2031-01-01" } }),
    status: 400,
    code: -32022,
    id: 5,
  },
  {
    name: "modern: version header differs from _meta",
    headers: () => modern("tools/list", { "mcp-protocol-version": "2025-11-25" }),
    body: () => mrpc("tools/list"),
    status: 400,
    code: -32020,
    id: 5,
  },
  { name: "modern: Mcp-Method differs from body", headers: () => modern("prompts/list"), body: () => mrpc("tools/list"), status: 400, code: -32020, id: 5 },
  {
    name: "modern: Mcp-Method missing",
    headers: () => {
      const { "mcp-method": _m, ...h } = modern();
      return h;
    },
    body: () => mrpc("tools/list"),
    status: 400,
    code: -32020,
    id: 5,
  },
  {
    name: "modern: Mcp-Name missing on tools/call",
    headers: () => modern("tools/call"),
    body: () => mrpc("tools/call", { name: "everything__echo" }),
    status: 400,
    code: -32020,
    id: 5,
  },
  {
    name: "modern: Mcp-Name differs",
    headers: () => modern("tools/call", { "mcp-name": "other" }),
    body: () => mrpc("tools/call", { name: "everything__echo" }),
    status: 400,
    code: -32020,
    id: 5,
  },
  { name: "modern: removed method ping", headers: () => modern("ping"), body: () => mrpc("ping"), status: 404, code: -32601, id: 5 },
  { name: "modern: removed method initialize", headers: () => modern("initialize"), body: () => mrpc("initialize"), status: 404, code: -32601, id: 5 },
  { name: "modern: unknown method", headers: () => modern("no/such"), body: () => mrpc("no/such"), status: 404, code: -32601, id: 5 },
  {
    name: "modern: unknown tool",
    headers: () => modern("tools/call", { "mcp-name": "nope__x" }),
    body: () => mrpc("tools/call", { name: "nope__x" }),
    status: 200,
    code: -32602,
    id: 5,
  },
  { name: "modern: GET", method: "GET", headers: () => ({ accept: "text/event-stream", "mcp-protocol-version": "2026-07-28" }), status: 405, code: -32600 },
  { name: "GET stream without session", method: "GET", headers: () => ({ accept: "text/event-stream" }), status: 400, code: -32000 },
  {
    name: "GET stream with a forged Last-Event-ID",
    method: "GET",
    headers: () => ({ ...legacy(), accept: "text/event-stream", "last-event-id": "../../etc" }),
    status: 400,
    code: -32600,
  },
  {
    name: "GET stream with an unknown stream id",
    method: "GET",
    headers: () => ({ ...legacy(), accept: "text/event-stream", "last-event-id": "sdeadbeef/3" }),
    status: 404,
    code: -32000,
  },
  { name: "DELETE an unknown session", method: "DELETE", headers: () => ({ "mcp-session-id": "e".repeat(48) }), status: 404, code: -32000 },
  { name: "PUT /mcp", method: "PUT", headers: legacy, body: () => rpc("ping"), status: 405, code: -32600 },
  { name: "evil Host (DNS rebinding)", headers: () => ({ ...legacy(), host: "evil.example.com" }), body: () => rpc("ping"), status: 403, code: -32000 },
  { name: "evil Origin", headers: () => ({ ...legacy(), origin: "http://evil.example.com" }), body: () => rpc("ping"), status: 403, code: -32000 },
  { name: "malformed Origin", headers: () => ({ ...legacy(), origin: "not a url" }), body: () => rpc("ping"), status: 403, code: -32000 },
];

describe("bad input never crashes and gets a precise answer", () => {
  it("has at least 25 rows", () => expect(rows.length).toBeGreaterThanOrEqual(25));
  for (const row of rows) {
    it(row.name, async () => {
      const r = await raw(url, row.method ?? "POST", row.headers?.() ?? {}, row.body?.());
      expect(r.status).toBeLessThan(500);
      expect(r.status).toBe(row.status);
      const json = JSON.parse(r.body) as { id?: unknown; error?: { code: number; message: string } };
      if (row.code !== undefined) {
        expect(json.error?.code).toBe(row.code);
        expect(json.error?.message.length).toBeGreaterThan(5);
      }
      if ("id" in row) expect(json.id).toEqual(row.id);
    });
  }
});
