/**
 * Era routing on /mcp (REFERENCE §1.1): which front serves a request. A body with
 * `_meta[protocolVersion]`, or a 2026-07-28 header without a session, is modern; `initialize`
 * and `Mcp-Session-Id` are legacy; GET/DELETE without a session from a modern client get 405.
 * Must never: look at anything but the parsed body and the protocol headers to decide.
 */
import { readPost, refuse } from "./edge.ts";
import { ErrorCode, isObject } from "../wire/jsonrpc.ts";
import type { FrontContext } from "./context.ts";
import { legacyDelete, legacyGet, legacyPost } from "./legacy.ts";
import { modernPost } from "./modern.ts";
import { META, MODERN_VERSION } from "./versions.ts";

export async function mcpRoute(fc: FrontContext, req: Request): Promise<Response> {
  const hasSession = req.headers.get("mcp-session-id") !== null;
  const modernHeader = req.headers.get("mcp-protocol-version")?.trim() === MODERN_VERSION;
  if (req.method === "POST") {
    const v = await readPost(req, true);
    if (!v.ok) return v.response;
    const m = v.message;
    const params = "method" in m && isObject(m.params) ? m.params : undefined;
    const metaVersion = params && isObject(params._meta) && params._meta[META.protocolVersion] !== undefined;
    const initialize = "method" in m && m.method === "initialize";
    if (metaVersion || (modernHeader && !hasSession && !initialize)) return modernPost(fc, req, m);
    return legacyPost(fc, req, m);
  }
  if (!hasSession && modernHeader) {
    return refuse(405, ErrorCode.InvalidRequest, `Method Not Allowed: ${MODERN_VERSION} uses POST only`, null, { allow: "POST" });
  }
  return req.method === "GET" ? legacyGet(fc, req) : legacyDelete(fc, req);
}
