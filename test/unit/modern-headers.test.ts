import { describe, expect, it } from "vitest";
import { checkModernRequest, decodeHeaderValue } from "../../src/front/modern.ts";
import { encodeHeaderValue } from "../../src/upstream/exchange.ts";

const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

function req(headers: Record<string, string>) {
  return new Request("http://127.0.0.1/mcp", { method: "POST", headers });
}
const base = { "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo" };
const call = (params: Record<string, unknown> = {}) => ({
  jsonrpc: "2.0" as const,
  id: 9,
  method: "tools/call",
  params: { name: "echo", _meta: META, ...params } as never,
});

async function verdict(r: Response | null) {
  if (!r) return null;
  const body = (await r.json()) as { id: unknown; error: { code: number; data?: unknown } };
  return { status: r.status, code: body.error.code, id: body.id, data: body.error.data };
}

describe("modern request checks", () => {
  it("accepts a well-formed request, lowercase names and padded values", async () => {
    expect(checkModernRequest(req(base), call())).toBeNull();
    expect(checkModernRequest(req({ ...base, "mcp-name": "  echo " }), call())).toBeNull();
    expect(checkModernRequest(req({ ...base, "mcp-name": "=?base64?ZWNobw==?=" }), call())).toBeNull();
  });
  it("answers the spec's codes and statuses, echoing the id", async () => {
    const noMeta = { jsonrpc: "2.0" as const, id: 9, method: "tools/call", params: { name: "echo" } as never };
    expect(await verdict(checkModernRequest(req(base), noMeta))).toMatchObject({ status: 400, code: -32602, id: 9 });
    const noCaps = call({ _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } });
    expect(await verdict(checkModernRequest(req(base), noCaps))).toMatchObject({ status: 400, code: -32602 });
    const old = call({ _meta: { ...META, "io.modelcontextprotocol/protocolVersion": "2099-01-01" } });
    expect(await verdict(checkModernRequest(req({ ...base, "mcp-protocol-version": "2099-01-01" }), old))).toMatchObject({
      status: 400,
      code: -32022,
      data: { supported: ["2026-07-28"], requested: "2099-01-01" },
    });
    expect(await verdict(checkModernRequest(req({ ...base, "mcp-protocol-version": "2025-11-25" }), call()))).toMatchObject({ status: 400, code: -32020 });
    const { "mcp-method": _m, ...noMethod } = base;
    expect(await verdict(checkModernRequest(req(noMethod), call()))).toMatchObject({ status: 400, code: -32020 });
    expect(await verdict(checkModernRequest(req({ ...base, "mcp-method": "TOOLS/CALL" }), call()))).toMatchObject({ status: 400, code: -32020 });
    const { "mcp-name": _n, ...noName } = base;
    expect(await verdict(checkModernRequest(req(noName), call()))).toMatchObject({ status: 400, code: -32020 });
    expect(await verdict(checkModernRequest(req({ ...base, "mcp-name": "other" }), call()))).toMatchObject({ status: 400, code: -32020 });
    expect(await verdict(checkModernRequest(req({ ...base, "mcp-param-region": "=?base64?SGVsbG8?=" }), call()))).toMatchObject({ status: 400, code: -32020 });
  });
  it("decodes and encodes SEP-2243 header values", () => {
    expect(decodeHeaderValue("=?base64?SGVsbG8=?=")).toBe("Hello");
    expect(decodeHeaderValue("=?base64?SGVsbG8?=")).toBeNull();
    expect(decodeHeaderValue("=?base64?SGV$bG8=?=")).toBeNull();
    expect(decodeHeaderValue("=?base64?SGVsbG8=")).toBe("=?base64?SGVsbG8=");
    for (const v of ["plain", " lead", "ünïcode", "new\nline", "=?base64?x?="]) expect(decodeHeaderValue(encodeHeaderValue(v))).toBe(v);
    expect(encodeHeaderValue("plain")).toBe("plain");
  });
});
