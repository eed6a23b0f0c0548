/**
 * Reading a request body within bounds: at most `maxBytes` (by Content-Length and by what
 * actually arrives) and within `timeoutMs` of starting to read — a client that opens a request
 * and trickles (or never sends) its body gets 408, not a held connection. Owns those two limits
 * and the refusals they produce. Must never: buffer more than the cap, or wait without a bound.
 */
import { ErrorCode } from "./jsonrpc.ts";
import { jsonResponse, refuse } from "./http.ts";

/** How long a request body may take to arrive in full. */
export const BODY_TIMEOUT_MS = 30_000;

export type BodyRead = { ok: true; text: string } | { ok: false; reason: "too_large" | "timeout" };

/** The body as text, or why it was not read. */
export async function readBodyText(req: Request, maxBytes: number, timeoutMs = BODY_TIMEOUT_MS): Promise<BodyRead> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > maxBytes) return { ok: false, reason: "too_large" };
  if (!req.body) return { ok: true, text: "" };
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), timeoutMs);
  });
  try {
    for (;;) {
      const next = await Promise.race([reader.read(), late]);
      if (next === "timeout") {
        await reader.cancel().catch(() => undefined);
        return { ok: false, reason: "timeout" };
      }
      if (next.done) break;
      total += next.value.byteLength;
      if (total > maxBytes) {
        await reader.cancel().catch(() => undefined);
        return { ok: false, reason: "too_large" };
      }
      chunks.push(next.value);
    }
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
  const buf = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    buf.set(c, off);
    off += c.byteLength;
  }
  return { ok: true, text: new TextDecoder().decode(buf) };
}

/** The JSON-RPC refusal (408 / 413) for a body that was not read. */
export function bodyRefusal(reason: "too_large" | "timeout", maxBytes: number): Response {
  return reason === "timeout"
    ? refuse(408, ErrorCode.InvalidRequest, `Request Timeout: the body did not arrive within ${BODY_TIMEOUT_MS / 1000} s`)
    : refuse(413, ErrorCode.InvalidRequest, `Payload Too Large: the body cap is ${maxBytes} bytes`);
}

/**
 * A JSON body of a REST route (grants, credentials): the parsed value (undefined when empty or
 * not JSON — the route's schema then says what is wrong), or the 408 / 413 OAuth-style refusal.
 */
export async function readJsonBody(req: Request, maxBytes = 64 * 1024): Promise<{ value: unknown } | Response> {
  const r = await readBodyText(req, maxBytes);
  if (!r.ok) {
    return r.reason === "timeout"
      ? jsonResponse({ error: "invalid_request", error_description: `the body did not arrive within ${BODY_TIMEOUT_MS / 1000} s` }, 408)
      : jsonResponse({ error: "invalid_request", error_description: `the body is over ${maxBytes} bytes` }, 413);
  }
  try {
    return { value: r.text.trim() === "" ? undefined : JSON.parse(r.text) };
  } catch {
    return { value: undefined };
  }
}
