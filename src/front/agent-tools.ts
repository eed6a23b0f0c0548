/**
 * The gateway's own agent tools on /mcp (`gateway.agent_tools`, on by default):
 * `portcullis.preview_impact` — would this call be allowed, held or blocked, by which rule, with
 * which obligations — about the caller's own grant only; and the run tools ([R], answered by
 * src/services/runs.ts agentRunTool) — `portcullis.list_runs`, `get_run`, `get_action_trace`,
 * `plan_rollback`, `dry_run_rollback` about the caller's own runs, and `validate_mapping`. Owns
 * their definitions as tools/list shows them, the check of their arguments, and the rule that a
 * grant decides them like any tool: an agent tool is listed and callable only where the grant's tool
 * globs cover its name (`portcullis.*`, or one name such as `portcullis.plan_rollback`); `*`, the
 * "everything" glob, covers them too (so wide grants keep them), and a grant without globs (the
 * unauthenticated loopback actor) reaches every tool. Must never: execute, record or change
 * anything (a preview runs steps 4–8 of the governed path read-only; a dry run calls nothing),
 * answer for another principal, or be offered to a grant whose globs do not cover it.
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { grantAllowsTool } from "../governance/grant-scope.ts";
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

const READ_ONLY = { readOnlyHint: true, idempotentHint: true, openWorldHint: false };
const RUN_ARG = { run: { type: "string", minLength: 1, maxLength: 128, description: "the run id: your legacy session id, or the Portcullis-Run-Id you sent" } };

/** The run tools ([R]): the caller's own runs, from the ledger; nothing is executed. */
export const RUN_TOOLS: JsonObject[] = [
  {
    name: "portcullis.list_runs",
    title: "List your runs",
    description: "Your runs (a session or a Portcullis-Run-Id), newest first, from the ledger: steps, first and last time.",
    inputSchema: { type: "object", properties: { limit: { type: "integer", minimum: 1, maximum: 500 } }, additionalProperties: false },
    annotations: READ_ONLY,
  },
  {
    name: "portcullis.get_run",
    title: "Show one of your runs",
    description: "One of your runs rebuilt from the ledger: each step's tool, outcome, recorded compensation and rollback state, and the rollback plan.",
    inputSchema: { type: "object", properties: RUN_ARG, required: ["run"], additionalProperties: false },
    annotations: READ_ONLY,
  },
  {
    name: "portcullis.get_action_trace",
    title: "Trace one of your calls",
    description: "Every ledger record of one of your calls (decision, outcome, holds, rollback steps) by its decision id (the receipt's decision_id).",
    inputSchema: { type: "object", properties: { id: { type: "string", minLength: 8, maxLength: 64 } }, required: ["id"], additionalProperties: false },
    annotations: READ_ONLY,
  },
  {
    name: "portcullis.plan_rollback",
    title: "Plan rolling back one of your runs",
    description:
      "What rolling one of your runs back would do: the compensations newest first, which need approval, which steps cannot be undone and why. Calls nothing; only an operator can execute a rollback.",
    inputSchema: { type: "object", properties: RUN_ARG, required: ["run"], additionalProperties: false },
    annotations: READ_ONLY,
  },
  {
    name: "portcullis.dry_run_rollback",
    title: "Dry-run rolling back one of your runs",
    description: "A rollback's dry run of one of your runs: each compensation it would call, in order. Reaches no upstream.",
    inputSchema: { type: "object", properties: RUN_ARG, required: ["run"], additionalProperties: false },
    annotations: READ_ONLY,
  },
  {
    name: "portcullis.validate_mapping",
    title: "Validate a mapping",
    description:
      "Checks a mapping file's contents ({tools: …}) for an upstream you reach: every field and compensation reference, and — from the upstream's own tools/list — that each mapped tool, compensation tool and read-back tool exists. Changes nothing.",
    inputSchema: {
      type: "object",
      properties: {
        upstream: { type: "string", minLength: 1, maxLength: 31 },
        mapping: { type: "object", description: "the mapping file's contents, as JSON" },
      },
      required: ["upstream", "mapping"],
      additionalProperties: false,
    },
    annotations: READ_ONLY,
  },
];
export const RUN_TOOL_NAMES: ReadonlySet<string> = new Set(RUN_TOOLS.map((t) => String(t.name)));

/** Every agent tool's name. */
export const AGENT_TOOL_NAMES: ReadonlySet<string> = new Set([...RUN_TOOL_NAMES, PREVIEW_TOOL_NAME]);

/**
 * Whether `name` is an agent tool this config offers to `p`: agent tools on (`gateway.agent_tools`)
 * and the grant's globs cover the name, exactly as for an upstream tool (grant-scope.ts). A name
 * this answers false for goes the governed path, which refuses it as outside the grant (or unknown).
 */
export function offersAgentTool(cfg: GatewayConfig, p: Principal, name: string): boolean {
  return cfg.agentTools && AGENT_TOOL_NAMES.has(name) && grantAllowsTool(p, name);
}

/** The agent tools this config offers `p` on /mcp: those its grant covers (preview_impact last, where clients have always found it). */
export function agentTools(cfg: GatewayConfig, p: Principal): JsonObject[] {
  return cfg.agentTools ? [...RUN_TOOLS, PREVIEW_TOOL].filter((t) => grantAllowsTool(p, String(t.name))) : [];
}

/** `{name, arguments}` of a preview request, or why they are not usable. */
export function previewArgs(args: unknown): { name: string; arguments: JsonObject | undefined } | string {
  if (!isObject(args)) return "arguments must be an object {name, arguments?}";
  if (typeof args.name !== "string" || args.name.length === 0 || args.name.length > 256) return "name must be the tool's name (a string)";
  if (args.arguments !== undefined && !isObject(args.arguments)) return "arguments must be an object";
  for (const k of Object.keys(args)) if (k !== "name" && k !== "arguments") return `unknown argument ${k}`;
  return { name: args.name, arguments: isObject(args.arguments) ? args.arguments : undefined };
}
