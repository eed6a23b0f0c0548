/**
 * Edge checks every /mcp POST passes before any state is touched (Host/Origin came first, in
 * the gate): body size and arrival time (wire/body.ts), Content-Type and Accept, and JSON-RPC shape. Owns the HTTP statuses of those refusals.
 * Must never: read more than the body cap into memory, or let a refusal look like a 5xx.
 */
import { ErrorCode, type JsonRpcMessage, parseMessage } from "../wire/jsonrpc.ts";
import { bodyRefusal, readBodyText } from "../wire/body.ts";
import { refuse } from "../wire/http.ts";

export const MAX_BODY_BYTES = 4 * 1024 * 1024;

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
  const body = await readBodyText(req, MAX_BODY_BYTES);
  if (!body.ok) return { ok: false, response: bodyRefusal(body.reason, MAX_BODY_BYTES) };
  const v = parseMessage(body.text);
  if (!v.ok) return { ok: false, response: refuse(v.status, v.code, v.reason, v.id) };
  return { ok: true, message: v.message };
}
