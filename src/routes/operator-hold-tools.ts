/**
 * The hold tools of /operator/mcp: `portcullis.list_holds {status?, team?}`,
 * `portcullis.get_hold {id}` (approver, auditor, operator, admin) and `portcullis.resolve_hold
 * {id, decision, reason?}` (approver, admin), over src/services/approvals.ts — the same
 * visibility and separation of duties as /v1/holds. A refusal is thrown as an Error with the
 * service's readable message (operator.ts turns it into an isError result). The `resolved`
 * webhooks run in the invocation's waitUntil (from `cloudflare:workers`: the operator context
 * carries no execution context). Must never: take the approver's identity from the arguments
 * (only the verified principal of the operator's grant).
 */
import { waitUntil } from "cloudflare:workers";
import { getHold, type HoldsResult, type HoldView, holdStateFilter, listHolds, resolveHold } from "../services/approvals.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { registerOperatorTool } from "./operator-registry.ts";

function resultValue<T>(r: HoldsResult<T>): T {
  if (!r.ok) throw new Error(r.message);
  return r.value;
}

const asJson = (v: HoldView): JsonObject => v as unknown as JsonObject;

registerOperatorTool({
  name: "portcullis.list_holds",
  description:
    "Held calls you may see, newest first: your team's (or `team`, for an admin or a resolver of that team), filtered by `status` (pending, approved, rejected, expired, consumed, or all — the default). Each says whether you may resolve it and links its console page.",
  inputSchema: {
    type: "object",
    properties: {
      status: { type: "string", enum: ["pending", "approved", "rejected", "expired", "consumed", "all"] },
      team: { type: "string" },
      limit: { type: "integer", minimum: 1, maximum: 500 },
    },
    additionalProperties: false,
  },
  roles: ["approver", "auditor", "operator", "admin"],
  run: async (args, { env, cfg, principal }) => {
    if (args.status !== undefined && typeof args.status !== "string") throw new Error("status must be a string");
    const state = holdStateFilter(args.status as string | undefined);
    if (!state.ok) throw new Error(state.message);
    if (args.team !== undefined && typeof args.team !== "string") throw new Error("team must be a string");
    if (args.limit !== undefined && (typeof args.limit !== "number" || !Number.isInteger(args.limit) || args.limit < 1 || args.limit > 500))
      throw new Error("limit must be a whole number from 1 to 500");
    const holds = resultValue(
      await listHolds(env, cfg, principal, {
        state: state.state,
        ...(typeof args.team === "string" ? { team: args.team } : {}),
        ...(typeof args.limit === "number" ? { limit: args.limit } : {}),
      }),
    );
    return { holds: holds.map(asJson) };
  },
});

registerOperatorTool({
  name: "portcullis.get_hold",
  description:
    "One held call by its id (`<team>~<hex>`): the exact canonical action that was hashed, its action hash, rule, reason, state, expiry, whether you may resolve it, and its console page.",
  inputSchema: { type: "object", properties: { id: { type: "string" } }, required: ["id"], additionalProperties: false },
  roles: ["approver", "auditor", "operator", "admin"],
  run: async (args, { env, cfg, principal }) => {
    if (typeof args.id !== "string") throw new Error("id must be a hold id (<team>~<hex>)");
    return asJson(resultValue(await getHold(env, cfg, principal, args.id)));
  },
});

registerOperatorTool({
  name: "portcullis.resolve_hold",
  description:
    "Approves or rejects a held call as you (your grant's principal; never the one that raised it). A rejection needs a reason (the agent is told it); at most 500 characters. The approval is on the ledger before this answers; the identical retry then runs once.",
  inputSchema: {
    type: "object",
    properties: {
      id: { type: "string" },
      decision: { type: "string", enum: ["approve", "reject"] },
      reason: { type: "string", maxLength: 500 },
    },
    required: ["id", "decision"],
    additionalProperties: false,
  },
  roles: ["approver", "admin"],
  run: async (args, { env, cfg, principal }) => {
    if (typeof args.id !== "string") throw new Error("id must be a hold id (<team>~<hex>)");
    if (args.decision !== "approve" && args.decision !== "reject") throw new Error('decision must be "approve" or "reject"');
    if (args.reason !== undefined && typeof args.reason !== "string") throw new Error("reason must be a string");
    const r = await resolveHold(env, cfg, principal, args.id, args.decision, args.reason ?? "", null, (p) => waitUntil(p));
    return asJson(resultValue(r));
  },
});
