/**
 * Tasks that stand for held calls (the SEP-2848 tool-approval draft's shape): a client that can
 * take a task gets one for a call that needs approval, `working` while the hold is pending; when
 * the client polls an approved hold's task the call runs — through the whole governed path again,
 * so the current policy and kill switch are re-checked before it executes, and the hold is
 * consumed once — and the task completes with the result inlined (modern `tasks/get`) or handed
 * out by `tasks/result` (2025-11-25); a rejected or expired hold's task fails. Task ids are
 * `portcullis-hold:<hold id>`; only the principal whose call was held can read one.
 * Must never: run a call whose hold is not approved, answer another principal's task differently
 * from a missing one, or run the call a second time once its answer is recorded.
 */
import type { HoldRecord, HoldsApi } from "../../durable-objects/contract-holds.ts";
import type { ToolCall } from "../governance/steps.ts";
import { ErrorCode, type JsonObject, type JsonRpcRequest, type JsonRpcResponse, errorResponse, isObject } from "../wire/jsonrpc.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { TASKS_EXTENSION } from "../protocol/extensions.ts";
import { META } from "../protocol/versions.ts";

export const HOLD_TASK_PREFIX = "portcullis-hold:";
/** How often a client should poll a held call's task. */
const POLL_INTERVAL_MS = 2000;
/** Longest a 2025-11-25 `tasks/result` waits for the approver before answering "still held". */
const RESULT_WAIT_MS = 60_000;

export const holdTaskId = (holdId: string): string => `${HOLD_TASK_PREFIX}${holdId}`;

type Status = "working" | "completed" | "failed";

function statusOf(h: HoldRecord): { status: Status; message: string } {
  switch (h.state) {
    case "pending":
      return { status: "working", message: `waiting for an approver (hold ${h.id}, until ${new Date(h.expiresAt).toISOString()})` };
    case "approved":
      return { status: "working", message: `approved by ${h.approver ?? "an approver"}; runs on the next poll` };
    case "consumed":
      if (!h.result) return { status: "working", message: "approved; the call is running" };
      return h.result.error ? { status: "failed", message: h.result.error.message } : { status: "completed", message: "approved and run" };
    case "rejected":
      return { status: "failed", message: `rejected by ${h.approver ?? "an approver"}: ${h.resolveReason ?? "no reason given"}` };
    case "expired":
      return { status: "failed", message: `hold ${h.id} expired before anyone approved it` };
  }
}

function envelope(era: CallContext["era"], h: HoldRecord): JsonObject {
  const { status, message } = statusOf(h);
  const ttl = Math.max(0, h.expiresAt - h.createdAt);
  const updated = new Date(Math.max(h.createdAt, h.resolvedAt ?? 0, h.consumedAt ?? 0)).toISOString();
  const base: JsonObject = { taskId: holdTaskId(h.id), status, statusMessage: message, createdAt: new Date(h.createdAt).toISOString(), lastUpdatedAt: updated };
  return era === "modern" ? { ...base, ttlMs: ttl, pollIntervalMs: POLL_INTERVAL_MS } : { ...base, ttl, pollInterval: POLL_INTERVAL_MS };
}

/** The answer to a held tools/call for a client that takes tasks: the task, in the client's era's shape. */
export function holdTaskCreated(call: ToolCall, h: HoldRecord): JsonRpcResponse {
  const task = envelope(call.era, h);
  return { jsonrpc: "2.0", id: call.request.id, result: call.era === "modern" ? { resultType: "task", ...task } : { task } };
}

/** The held call's result as a task result (what it got, or a readable isError for a refusal). */
function finalResult(h: HoldRecord, taskId: string): JsonObject {
  const { status, message } = statusOf(h);
  const related = { "io.modelcontextprotocol/related-task": { taskId } };
  if (status === "completed" && h.result?.result)
    return { ...h.result.result, _meta: { ...((h.result.result._meta as JsonObject | undefined) ?? {}), ...related } };
  return { content: [{ type: "text", text: `Blocked by Portcullis: ${message} (check: hold)` }], isError: true, _meta: related };
}

/** The held call as the governed path takes it again: the same principal, tool and arguments. */
function heldCall(ctx: CallContext, msg: JsonRpcRequest, h: HoldRecord): ToolCall {
  const parsed = JSON.parse(h.action) as { arguments?: unknown };
  const args = isObject(parsed.arguments) ? parsed.arguments : {};
  // The poll's protocol metadata goes along (a modern leg needs it), without the tasks extension:
  // the call itself runs now, and its answer is the task's result.
  const params: JsonObject = { name: h.exposedName, arguments: args };
  if (isObject(msg.params?._meta)) {
    const meta: JsonObject = { ...msg.params._meta };
    const caps = meta[META.clientCapabilities];
    if (isObject(caps) && isObject(caps.extensions) && caps.extensions[TASKS_EXTENSION] !== undefined) {
      const { [TASKS_EXTENSION]: _tasks, ...extensions } = caps.extensions;
      meta[META.clientCapabilities] = { ...caps, extensions };
    }
    params._meta = meta;
  }
  const request: JsonRpcRequest = { jsonrpc: "2.0", id: msg.id, method: "tools/call", params };
  return { principal: ctx.principal, era: ctx.era, request, exposedName: h.exposedName, arguments: args, runId: ctx.runId };
}

/**
 * tasks/get, tasks/result (2025-11-25) and tasks/cancel for a held call's task. `run` is the
 * governed path (dispatch.ts hands in governToolCall with this caller's collaborators).
 */
export async function holdTaskRequest(
  ctx: CallContext,
  msg: JsonRpcRequest,
  taskId: string,
  unknown: () => Outcome,
  run: (call: ToolCall) => Promise<unknown>,
): Promise<Outcome> {
  const api: HoldsApi | null | undefined = ctx.stores.holds?.();
  const id = taskId.slice(HOLD_TASK_PREFIX.length);
  if (!api) return unknown();
  let h = await api.get(id, Date.now());
  // Another principal's held call is answered exactly like a task that does not exist.
  if (!h || h.principal !== ctx.principal.sub) return unknown();
  if (msg.method === "tasks/cancel") {
    return {
      response: errorResponse(
        msg.id,
        ErrorCode.InvalidParams,
        `a held call cannot be cancelled by its requester: an approver resolves it, or it expires at ${new Date(h.expiresAt).toISOString()}`,
      ),
      status: 200,
    };
  }
  if (msg.method === "tasks/result" && h.state === "pending") {
    const deadline = Date.now() + Math.max(RESULT_WAIT_MS, ctx.cfg.holds.waitMs);
    while (h.state === "pending" && Date.now() < deadline && !ctx.signal.aborted) {
      await ctx.relay.keepAlive?.();
      h = (await api.awaitChange(id, Math.min(10_000, deadline - Date.now()))) ?? h;
    }
  }
  if (h.state === "approved") {
    // Policy and kill switch are decided again; the hold step consumes the approval once.
    await run(heldCall(ctx, msg, h));
    h = (await api.get(id, Date.now())) ?? h;
  }
  if (msg.method === "tasks/result") {
    const { status } = statusOf(h);
    if (status === "working")
      return { response: errorResponse(msg.id, ErrorCode.InvalidRequest, `task ${taskId} is still held: ${statusOf(h).message}`), status: 200 };
    return { response: { jsonrpc: "2.0", id: msg.id, result: finalResult(h, taskId) }, status: 200 };
  }
  const task = envelope(ctx.era, h);
  const { status } = statusOf(h);
  if (ctx.era === "modern" && status !== "working") {
    if (status === "completed" && h.result?.result) task.result = { ...h.result.result, resultType: "complete" };
    else task.error = h.result?.error ? { ...h.result.error } : { code: ErrorCode.InvalidRequest, message: statusOf(h).message };
  }
  return { response: { jsonrpc: "2.0", id: msg.id, result: task }, status: 200 };
}
