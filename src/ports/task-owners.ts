/**
 * Task ownership: an upstream task belongs to the principal whose tools/call created it.
 * Owns recording (principal, upstream, upstream task id) in that principal's TasksDO — durably,
 * before the answer carrying the task reaches the client — reading it back before a
 * task-addressed request (tasks/get, tasks/update, tasks/cancel, legacy tasks/result) is
 * forwarded, the one answer every task the caller does not own gets (the answer for a task that
 * does not exist), and cutting a legacy tasks/list down to the caller's own tasks.
 * Must never: forward a task-addressed request for a task the caller does not own, answer a
 * non-owned task differently from a missing one, forward anything when the store cannot be read,
 * or touch the store for a tools/call whose result is not a task.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { LegResult } from "../governance/steps.ts";
import { ErrorCode, type JsonObject, type JsonRpcNotification, type JsonRpcRequest, errorResponse, isObject } from "../wire/jsonrpc.ts";
import type { TasksApi } from "../../durable-objects/contract.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { exposeHandle } from "../protocol/exposed-names.ts";
import { TASKS_EXTENSION } from "../protocol/extensions.ts";
import { META } from "../protocol/versions.ts";

/** An ownership entry lives at least this long after the task was created… */
export const TASK_OWNERSHIP_MIN_MS = 24 * 3600_000;
/** …or the task's own ttl when that is longer, but never longer than this. */
export const TASK_OWNERSHIP_MAX_MS = 30 * 24 * 3600_000;

/** A task a tools/call result hands the client: its upstream task id and the ttl the upstream gave it (ms; null when none). */
export interface CreatedTask {
  taskId: string;
  ttlMs: number | null;
}

const ttl = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : null);

/**
 * The task ids a tools/call result exposes, in both shapes dispatch.ts `exposeTask` maps: the
 * 2026-07-28 flat `CreateTaskResult` (`taskId`, `ttlMs` at the top) and the 2025-11-25
 * experimental `{ task: { taskId, ttl } }`. Empty for every other result: those never reach the store.
 */
export function createdTasks(result: unknown): CreatedTask[] {
  if (!isObject(result)) return [];
  const out: CreatedTask[] = [];
  if (typeof result.taskId === "string") out.push({ taskId: result.taskId, ttlMs: ttl(result.ttlMs) });
  const t = result.task;
  if (isObject(t) && typeof t.taskId === "string" && t.taskId !== result.taskId) out.push({ taskId: t.taskId, ttlMs: ttl(t.ttlMs ?? t.ttl) });
  return out;
}

/** When an entry for a task created at `now` expires: 24 h, or the task's ttl if longer, at most 30 days. */
export function retainUntil(now: number, ttlMs: number | null): number {
  return Math.floor(now + Math.min(TASK_OWNERSHIP_MAX_MS, Math.max(TASK_OWNERSHIP_MIN_MS, ttlMs ?? 0)));
}

function storeOf(ctx: CallContext): TasksApi {
  if (!ctx.stores.tasks) throw new Error("no task ownership store in this context");
  return ctx.stores.tasks();
}

const why = (e: unknown) => (e instanceof Error ? e.message : String(e));

/** The client's protocol metadata of `request` (capabilities, version), without anything tied to that request (progress tokens). */
function protocolMeta(request: JsonRpcRequest): JsonObject | undefined {
  const meta = request.params?._meta;
  if (!isObject(meta)) return undefined;
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(meta)) if (k.startsWith("io.modelcontextprotocol/")) out[k] = v;
  return out;
}

/**
 * The governed leg of a tools/call, wrapped: a result that hands out a task is answered only once
 * the task is recorded as the caller's. If it cannot be recorded, the client gets a failure instead
 * of the task (nobody could reach it), and the task is cancelled upstream, best effort, through `send`.
 */
export async function recordCreatedTasks(
  ctx: CallContext,
  up: UpstreamConfig,
  request: JsonRpcRequest,
  leg: LegResult,
  send: (req: JsonRpcRequest) => Promise<LegResult>,
): Promise<LegResult> {
  if (leg.kind !== "answered" || leg.response.error) return leg;
  const tasks = createdTasks(leg.response.result);
  if (tasks.length === 0) return leg;
  try {
    const store = storeOf(ctx);
    const now = Date.now();
    for (const t of tasks) await store.own(up.name, t.taskId, retainUntil(now, t.ttlMs));
    return leg;
  } catch (e) {
    const meta = protocolMeta(request);
    for (const t of tasks) {
      const params: JsonObject = { taskId: t.taskId };
      if (meta) params._meta = meta;
      await send({ jsonrpc: "2.0", id: `${String(request.id)}:pc-cancel`, method: "tasks/cancel", params }).catch(() => undefined);
    }
    return {
      kind: "failed",
      auth: false,
      reason: `upstream ${up.name} answered with a task, but Portcullis could not record that it is yours (${why(e)}); the task was withheld and cancelled upstream`,
    };
  }
}

/** Whether this 2026-07-28 request declares the tasks extension in its per-request client capabilities. */
function declaresTasks(msg: JsonRpcRequest): boolean {
  const meta = msg.params?._meta;
  const caps = isObject(meta) ? meta[META.clientCapabilities] : undefined;
  return isObject(caps) && isObject(caps.extensions) && caps.extensions[TASKS_EXTENSION] !== undefined;
}

/**
 * The answer to a task-addressed request for a task the caller does not own — the same answer a
 * task that does not exist gets, decided here without asking any upstream: -32602 "Unknown task",
 * or for a 2026-07-28 client that did not declare the tasks extension, -32021 as a tasks server answers it.
 */
export function unknownTask(ctx: CallContext, msg: JsonRpcRequest, taskId: string): Outcome {
  if (ctx.era === "modern" && !declaresTasks(msg)) {
    return {
      response: errorResponse(msg.id, ErrorCode.MissingRequiredClientCapability, `${msg.method} requires the ${TASKS_EXTENSION} extension`, {
        requiredCapabilities: { extensions: { [TASKS_EXTENSION]: {} } },
      }),
      status: 400,
    };
  }
  return { response: errorResponse(msg.id, ErrorCode.InvalidParams, `Unknown task: ${taskId}`), status: 200 };
}

function unreadable(msg: JsonRpcRequest, e: unknown): Outcome {
  return {
    response: errorResponse(
      msg.id,
      ErrorCode.InternalError,
      `Portcullis could not read who owns its tasks (${why(e)}); the request was refused to fail closed`,
    ),
    status: 200,
  };
}

/**
 * Forwards a task-addressed request only for the caller's own task: `forward` runs when the store
 * says the caller owns (upstream, upstream task id); otherwise the unknown-task answer, and when
 * the store cannot answer, an error. In neither case does the upstream see anything.
 */
export async function forOwnerOnly(
  ctx: CallContext,
  msg: JsonRpcRequest,
  exposedId: string,
  up: UpstreamConfig,
  upstreamTaskId: string,
  forward: () => Promise<Outcome>,
): Promise<Outcome> {
  let mine: boolean;
  try {
    mine = await storeOf(ctx).owns(up.name, upstreamTaskId);
  } catch (e) {
    return unreadable(msg, e);
  }
  return mine ? forward() : unknownTask(ctx, msg, exposedId);
}

/**
 * A legacy tasks/list: the caller's own task ids are read first (nothing is forwarded if they
 * cannot be), then the upstream's page is cut down to them. `nextCursor` and every other field pass unchanged.
 */
export async function ownTasksOnly(ctx: CallContext, msg: JsonRpcRequest, up: UpstreamConfig, forward: () => Promise<Outcome>): Promise<Outcome> {
  let mine: Set<string>;
  try {
    mine = new Set(await storeOf(ctx).owned(up.name));
  } catch (e) {
    return unreadable(msg, e);
  }
  const out = await forward();
  const r = out.response.result;
  if (!isObject(r) || !Array.isArray(r.tasks)) return out;
  const tasks = r.tasks.filter((t) => isObject(t) && typeof t.taskId === "string" && mine.has(t.taskId));
  return { ...out, response: { ...out.response, result: { ...r, tasks } } };
}

/**
 * A `notifications/tasks` status notification from `up`, for one principal's listen stream: only
 * for a task that principal owns, with the task id exposed as the client knows it; null for any
 * other task, one without a task id, or when the store cannot answer (fail closed).
 */
export async function ownTaskNotification(store: TasksApi | undefined, up: UpstreamConfig, n: JsonRpcNotification): Promise<JsonRpcNotification | null> {
  const taskId = isObject(n.params) ? n.params.taskId : undefined;
  if (!store || typeof taskId !== "string") return null;
  const mine = await store.owns(up.name, taskId).catch(() => false);
  return mine ? { ...n, params: { ...n.params, taskId: exposeHandle(up, taskId) } } : null;
}
