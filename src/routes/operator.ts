/**
 * /operator/mcp: a small stateless MCP server (both eras) serving only the `portcullis.*`
 * operator tools, filtered by the caller's roles. No sessions are issued (allowed by the spec);
 * GET and DELETE answer 405. Must never: serve an upstream tool, or list a tool the caller's
 * roles do not reach.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import type { Principal } from "../config/principal.ts";
import { readPost } from "../front/edge.ts";
import { ErrorCode, type JsonObject, errorResponse, isObject, isRequest } from "../wire/jsonrpc.ts";
import { checkModernRequest } from "../front/modern.ts";

import { GATEWAY_INFO, LATEST_LEGACY, META, SUPPORTED_VERSIONS, isLegacyVersion } from "../protocol/versions.ts";
import { operatorTool, operatorToolsFor } from "./operator-registry.ts";
import "./operator-tools.ts";
import "./operator-hold-tools.ts";
import "./operator-killswitch-tools.ts";
import "./operator-config-tools.ts";
import "./operator-runs-tools.ts";
import { jsonResponse, refuse } from "../wire/http.ts";
import { canonicalUrl } from "../identity/metadata.ts";

export async function operatorMcp(req: Request, env: Env, cfg: GatewayConfig, principal: Principal): Promise<Response> {
  if (req.method !== "POST") return refuse(405, ErrorCode.InvalidRequest, "Method Not Allowed: /operator/mcp is stateless; use POST", null, { allow: "POST" });
  const v = await readPost(req, false);
  if (!v.ok) return v.response;
  const msg = v.message;
  if (!isRequest(msg)) return new Response(null, { status: 202 });
  const modern = isObject(msg.params?._meta) && msg.params._meta[META.protocolVersion] !== undefined;
  if (modern) {
    const problem = checkModernRequest(req, msg);
    if (problem) return problem;
  }
  const ok = (result: JsonObject) => jsonResponse({ jsonrpc: "2.0", id: msg.id, result: modern ? { resultType: "complete", ...result } : result });
  const capabilities = { tools: { listChanged: false } };
  switch (msg.method) {
    case "initialize": {
      const requested = typeof msg.params?.protocolVersion === "string" ? msg.params.protocolVersion : LATEST_LEGACY;
      return jsonResponse({
        jsonrpc: "2.0",
        id: msg.id,
        result: {
          protocolVersion: isLegacyVersion(requested) ? requested : LATEST_LEGACY,
          capabilities,
          serverInfo: { ...GATEWAY_INFO, name: "portcullis-operator" },
        },
      });
    }
    case "ping":
      return ok({});
    case "server/discover":
      return ok({
        supportedVersions: SUPPORTED_VERSIONS,
        capabilities,
        _meta: { [META.serverInfo]: { ...GATEWAY_INFO, name: "portcullis-operator" } },
        ttlMs: 0,
        cacheScope: "private",
      });
    case "tools/list": {
      const tools = operatorToolsFor(principal).map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema }));
      return ok(modern ? { tools, ttlMs: 0, cacheScope: "private" } : { tools });
    }
    case "tools/call": {
      const name = msg.params?.name;
      const tool = typeof name === "string" ? operatorTool(name, principal) : undefined;
      if (!tool) return jsonResponse(errorResponse(msg.id, ErrorCode.InvalidParams, `Unknown tool: ${String(name)}`));
      const args = isObject(msg.params?.arguments) ? msg.params.arguments : {};
      try {
        const out = await tool.run(args, { env, cfg, principal, gateway: canonicalUrl(cfg), req });
        return ok({ content: [{ type: "text", text: JSON.stringify(out) }], structuredContent: out });
      } catch (e) {
        return ok({ content: [{ type: "text", text: `${tool.name} failed: ${(e as Error).message}` }], isError: true });
      }
    }
  }
  return jsonResponse(errorResponse(msg.id, ErrorCode.MethodNotFound, `Method not found: ${msg.method}`), modern ? 404 : 200);
}
