/**
 * The registry of `portcullis.*` operator tools served on /operator/mcp, each with the roles
 * that may see and call it. Later issues register their tools here (holds, ledger, kill switch,
 * classification). Must never: list or run a tool for a principal without one of its roles.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Env } from "../env.ts";
import { principalHas, type Principal } from "../config/principal.ts";
import type { Role } from "../config/roles.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";

export interface OperatorContext {
  env: Env;
  cfg: GatewayConfig;
  principal: Principal;
  /** The gateway's canonical URL. */
  gateway: string;
  /** The operator's request (previews build a call context from it). */
  req: Request;
}

export interface OperatorTool {
  name: `portcullis.${string}`;
  description: string;
  inputSchema: JsonObject;
  /** Any one of these roles may see and call the tool (admin holds every role). */
  roles: Role[];
  run(args: JsonObject, ctx: OperatorContext): Promise<JsonObject>;
}

const tools = new Map<string, OperatorTool>();

export function registerOperatorTool(t: OperatorTool): void {
  if (tools.has(t.name)) throw new Error(`operator tool ${t.name} registered twice`);
  tools.set(t.name, t);
}

export function operatorToolsFor(principal: Principal): OperatorTool[] {
  return [...tools.values()].filter((t) => t.roles.some((r) => principalHas(principal, r))).sort((a, b) => a.name.localeCompare(b.name));
}

export function operatorTool(name: string, principal: Principal): OperatorTool | undefined {
  const t = tools.get(name);
  return t?.roles.some((r) => principalHas(principal, r)) ? t : undefined;
}
