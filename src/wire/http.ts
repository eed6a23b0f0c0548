/**
 * HTTP answers every layer builds: a JSON body with a status, a JSON-RPC error carried over
 * HTTP (`refuse`), the OAuth bearer challenge of 401/403 (RFC 6750), and the SSE response
 * headers. Must never: put a token or a secret in a body or a header it builds.
 */
import { errorResponse, type JsonRpcId } from "./jsonrpc.ts";

export function jsonResponse(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...headers, "content-type": "application/json" } });
}

/** A JSON-RPC error as the whole HTTP answer. */
export function refuse(status: number, code: number, message: string, id: JsonRpcId | null = null, headers: Record<string, string> = {}): Response {
  return jsonResponse(errorResponse(id, code, message), status, headers);
}

export const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache, no-transform", "x-accel-buffering": "no" };

/**
 * A quoted-string for a challenge. RFC 6750 allows only printable ASCII without `"` and `\` in
 * error_description: double quotes become single ones (reasons quote claim values), anything else
 * outside that set becomes a space.
 */
export function quoteParam(v: string): string {
  return `"${v.replace(/"/g, "'").replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, " ")}"`;
}

/** An OAuth error answer: `{error, error_description}` with a `WWW-Authenticate: Bearer …` challenge. */
export function bearerChallenge(status: 401 | 403, params: string[], error: string, description: string): Response {
  return new Response(JSON.stringify({ error, error_description: description }), {
    status,
    headers: { "content-type": "application/json", "www-authenticate": `Bearer ${params.join(", ")}` },
  });
}
