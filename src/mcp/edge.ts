/**
 * Edge checks every /mcp POST passes before any state is touched (Host/Origin came first, in
 * the gate): body size, Content-Type and Accept, and JSON-RPC shape. Owns the HTTP statuses of those refusals.
 * Must never: read more than the body cap into memory, or let a refusal look like a 5xx.
 */
import { ErrorCode, type JsonRpcMessage, parseMessage } from "../wire/jsonrpc.ts";
import { refuse } from "../wire/http.ts";

export const MAX_BODY_BYTES = 4 * 1024 * 1024;

/** Reads at most MAX_BODY_BYTES; null when over the cap. */
async function readCapped(req: Request): Promise<string | null> {
  const declared = Number(req.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) return null;
  if (!req.body) return "";
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > MAX_BODY_BYTES) {
      await reader.cancel().catch(() => undefined);
      return null;
    }
    chunks.push(value);
  }
  const buf = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    buf.set(c, off);
    off += c.byteLength;
  }
  return new TextDecoder().decode(buf);
}

export type PostVerdict = { ok: true; message: JsonRpcMessage } | { ok: false; response: Response };

/** Content-Type, Accept, size and JSON-RPC shape of a POST body. */
export async function readPost(req: Request, acceptBoth: boolean): Promise<PostVerdict> {
  const ct = (req.headers.get("content-type") ?? "").toLowerCase();
  if (!ct.startsWith("application/json")) {
    return { ok: false, response: refuse(415, ErrorCode.InvalidRequest, "Unsupported Media Type: Content-Type must be application/json") };
  }
  const accept = (req.headers.get("accept") ?? "").toLowerCase();
  const json = accept.includes("application/json") || accept.includes("*/*");
  const sse = accept.includes("text/event-stream") || accept.includes("*/*");
  if (acceptBoth ? !(json && sse) : !json) {
    const need = acceptBoth ? "both application/json and text/event-stream" : "application/json";
    return { ok: false, response: refuse(406, ErrorCode.InvalidRequest, `Not Acceptable: Accept must list ${need}`) };
  }
  const text = await readCapped(req);
  if (text === null) {
    return { ok: false, response: refuse(413, ErrorCode.InvalidRequest, `Payload Too Large: the body cap is ${MAX_BODY_BYTES} bytes`) };
  }
  const v = parseMessage(text);
  if (!v.ok) return { ok: false, response: refuse(v.status, v.code, v.reason, v.id) };
  return { ok: true, message: v.message };
}
