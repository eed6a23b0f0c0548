/**
 * JSON-RPC 2.0 message shapes, parsing and error construction for the MCP front.
 * Owns: classifying a parsed body (request / notification / response), the error codes the
 * gateway emits, and building error responses that always echo the request id.
 * Must never: throw on hostile input (every parse path returns a typed verdict), or invent
 * fields on messages it forwards.
 */
export type JsonRpcId = string | number;
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

export interface JsonRpcRequest {
  jsonrpc: "2.0";
  id: JsonRpcId;
  method: string;
  params?: JsonObject;
}
export interface JsonRpcNotification {
  jsonrpc: "2.0";
  method: string;
  params?: JsonObject;
}
export interface JsonRpcResponse {
  jsonrpc: "2.0";
  id: JsonRpcId | null;
  result?: JsonObject;
  error?: { code: number; message: string; data?: Json };
}
export type JsonRpcMessage = JsonRpcRequest | JsonRpcNotification | JsonRpcResponse;

export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /** Legacy-era generic server error (SDK "Bad Request", session problems). */
  ServerError: -32000,
  HeaderMismatch: -32020,
  MissingRequiredClientCapability: -32021,
  UnsupportedProtocolVersion: -32022,
  /** Legacy-era "resource not found"; mapped to -32602 for modern clients. */
  ResourceNotFoundLegacy: -32002,
} as const;

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
export function isRequest(m: JsonRpcMessage): m is JsonRpcRequest {
  return "method" in m && "id" in m && m.id !== undefined;
}
export function isNotification(m: JsonRpcMessage): m is JsonRpcNotification {
  return "method" in m && !("id" in m);
}
export function isResponse(m: JsonRpcMessage): m is JsonRpcResponse {
  return !("method" in m) && ("result" in m || "error" in m);
}

export type ParseVerdict = { ok: true; message: JsonRpcMessage } | { ok: false; status: number; code: number; reason: string; id: JsonRpcId | null };

function validId(v: unknown): v is JsonRpcId {
  return typeof v === "string" || (typeof v === "number" && Number.isFinite(v));
}

/** Parses one HTTP body into exactly one JSON-RPC message, or a verdict naming why not. */
export function parseMessage(text: string): ParseVerdict {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { ok: false, status: 400, code: ErrorCode.ParseError, reason: "Parse error: body is not valid JSON", id: null };
  }
  if (Array.isArray(raw)) {
    return {
      ok: false,
      status: 400,
      code: ErrorCode.InvalidRequest,
      id: null,
      reason: "Invalid Request: JSON-RPC batch arrays are not supported (removed in MCP 2025-06-18); send one message per POST",
    };
  }
  if (!isObject(raw)) return invalid("body must be a JSON-RPC object", null);
  const id = "id" in raw ? raw.id : undefined;
  const echo = validId(id) ? id : null;
  if (raw.jsonrpc !== "2.0") return invalid('"jsonrpc" must be "2.0"', echo);
  if ("method" in raw) {
    if (typeof raw.method !== "string" || raw.method.length === 0) return invalid('"method" must be a non-empty string', echo);
    if ("params" in raw && raw.params !== undefined && !isObject(raw.params)) return invalid('"params" must be an object', echo);
    if ("id" in raw) {
      if (!validId(id)) return invalid('"id" must be a string or a number', null);
      return { ok: true, message: raw as unknown as JsonRpcRequest };
    }
    return { ok: true, message: raw as unknown as JsonRpcNotification };
  }
  if ("result" in raw || "error" in raw) {
    if (!("id" in raw) || !(validId(id) || id === null)) return invalid("a response needs an id", null);
    if ("result" in raw && "error" in raw) return invalid("a response carries result or error, not both", echo);
    if ("result" in raw && !isObject(raw.result)) return invalid('"result" must be an object', echo);
    if ("error" in raw && !(isObject(raw.error) && typeof raw.error.code === "number" && typeof raw.error.message === "string")) {
      return invalid('"error" needs a numeric code and a message', echo);
    }
    return { ok: true, message: raw as unknown as JsonRpcResponse };
  }
  return invalid("message has neither method nor result/error", echo);
}

function invalid(reason: string, id: JsonRpcId | null): ParseVerdict {
  return { ok: false, status: 400, code: ErrorCode.InvalidRequest, reason: `Invalid Request: ${reason}`, id };
}

export function errorResponse(id: JsonRpcId | null, code: number, message: string, data?: Json): JsonRpcResponse {
  const error: JsonRpcResponse["error"] = { code, message };
  if (data !== undefined) error.data = data;
  return { jsonrpc: "2.0", id, error };
}
