/**
 * The gateway's own agent tools on /mcp (`gateway.agent_tools`, on by default):
 * `portcullis.preview_impact` — would this call be allowed, held or blocked, by which rule, with
 * which obligations — about the caller's own grant only. Owns their definitions as tools/list
 * shows them and the check of their arguments. Must never: execute, record or change anything
 * (a preview runs steps 4–8 of the governed path read-only), or answer for another principal.
 */
import type { GatewayConfig } from "../config/load.ts";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";

export const PREVIEW_TOOL_NAME = "portcullis.preview_impact";

export const PREVIEW_TOOL: JsonObject = {
  name: PREVIEW_TOOL_NAME,
  title: "Preview a tool call's governance",
  description:
    "Would this tool call be allowed, held for approval or blocked by Portcullis — by which check or rule, with which obligations? Executes nothing, records nothing and changes no history. About your own grant only.",
  inputSchema: {
    type: "object",
    properties: {
      name: { type: "string", description: "the tool's name as tools/list shows it" },
      arguments: { type: "object", description: "the arguments the call would carry" },
    },
    required: ["name"],
    additionalProperties: false,
  },
  annotations: { readOnlyHint: true, idempotentHint: true, openWorldHint: false },
};

/** The agent tools this config offers on /mcp. */
export function agentTools(cfg: GatewayConfig): JsonObject[] {
  return cfg.agentTools ? [PREVIEW_TOOL] : [];
}

/** `{name, arguments}` of a preview request, or why they are not usable. */
export function previewArgs(args: unknown): { name: string; arguments: JsonObject | undefined } | string {
  if (!isObject(args)) return "arguments must be an object {name, arguments?}";
  if (typeof args.name !== "string" || args.name.length === 0 || args.name.length > 256) return "name must be the tool's name (a string)";
  if (args.arguments !== undefined && !isObject(args.arguments)) return "arguments must be an object";
  for (const k of Object.keys(args)) if (k !== "name" && k !== "arguments") return `unknown argument ${k}`;
  return { name: args.name, arguments: isObject(args.arguments) ? args.arguments : undefined };
}
