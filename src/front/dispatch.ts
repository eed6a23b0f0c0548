/**
 * Method routing for client requests, shared by both eras: which upstream serves a request,
 * how its names map back, and what the gateway answers itself.
 * Owns: the method table (lists, tools/call handed to the governed path with this caller's
 * ports from governance-ports.ts, prompts, resources, completion, logging fan-out, tasks by id and the verbatim
 * pass-through of unknown methods to a single transparent upstream — both through
 * governedPassThrough; a task reaches its upstream only for the principal that created it,
 * task-owners.ts). On `/mcp/<upstream>` a tools/call is governed under the name /mcp gives the
 * tool (exposed-names.ts governedFromEdge), and answered under the name the client used. Every other
 * request loses the client's `portcullis/` `_meta` keys here, before it is routed (that namespace
 * is the gateway's; a governed tools/call loses them in the governed path, which records it).
 * Must never: forward a tools/call itself, route a name to an upstream that
 * does not own it, forward a task-addressed request for a task the caller does not own, or
 * forward a client's `portcullis/` `_meta` key.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { governedPassThrough, governToolCall } from "../governance/call.ts";
import { previewToolCall } from "../governance/call-decide.ts";
import { withoutGatewayMeta } from "../governance/call-answers.ts";
import type { ToolCall } from "../governance/steps.ts";
import { governance } from "./governance-ports.ts";
import { HOLD_TASK_PREFIX, holdTaskRequest } from "../ports/hold-tasks.ts";
import { grantReachesUpstream } from "../governance/grant-scope.ts";
import { aggregateList, LISTS } from "./aggregate.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { callLeg, forward } from "../upstream/forward.ts";
import { ErrorCode, type JsonObject, type JsonRpcRequest, errorResponse, isObject } from "../wire/jsonrpc.ts";
import { exposeHandle, governedFromEdge, splitHandle, splitName, splitUri } from "../protocol/exposed-names.ts";
import { directoryRead, skillsGet, skillsList } from "./skills.ts";
import { forOwnerOnly, ownTasksOnly, unknownTask } from "../ports/task-owners.ts";
import { offersAgentTool, PREVIEW_TOOL_NAME, previewArgs } from "./agent-tools.ts";
import { agentRunTool } from "../services/runs.ts";

function fail(msg: JsonRpcRequest, code: number, message: string, status = 200, data?: JsonObject): Outcome {
  return { response: errorResponse(msg.id, code, message, data), status };
}
function ok(msg: JsonRpcRequest, result: JsonObject): Outcome {
  return { response: { jsonrpc: "2.0", id: msg.id, result }, status: 200 };
}

function withParam(msg: JsonRpcRequest, key: string, value: unknown): JsonRpcRequest {
  return { ...msg, params: { ...(msg.params ?? {}), [key]: value as JsonObject[string] } };
}

/** Maps task ids in a result back to exposed handles when several upstreams share the front. */
function exposeTask(up: UpstreamConfig, out: Outcome): Outcome {
  const r = out.response.result;
  if (!up.namespaced || !isObject(r)) return out;
  // A held call's task is the gateway's own (hold-tasks.ts), not the upstream's: its id is not namespaced.
  const fix = (o: JsonObject): JsonObject =>
    typeof o.taskId === "string" && !o.taskId.startsWith(HOLD_TASK_PREFIX) ? { ...o, taskId: exposeHandle(up, o.taskId) } : o;
  const result = fix(r);
  if (isObject(result.task)) result.task = fix(result.task);
  return { ...out, response: { ...out.response, result } };
}

function toolCallOf(ctx: CallContext, msg: JsonRpcRequest, exposedName: string): ToolCall {
  return {
    principal: ctx.principal,
    era: ctx.era,
    request: msg,
    exposedName,
    arguments: isObject(msg.params?.arguments) ? msg.params.arguments : undefined,
    runId: ctx.runId,
    urlElicitation: declaresUrlElicitation(ctx.clientCapabilities),
    ...(ctx.trace ? { trace: ctx.trace } : {}),
    receivedAt: Date.now(),
  };
}

/** `elicitation: {url: {}}` (2025-11-25 and later); a bare `elicitation: {}` is form mode only. */
function declaresUrlElicitation(caps: JsonObject | undefined): boolean {
  const e = caps?.elicitation;
  return isObject(e) && isObject(e.url);
}

/** `portcullis.preview_impact` (agent_tools): the governed path's verdict for the caller's own call; nothing runs. */
async function previewImpact(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const args = previewArgs(msg.params?.arguments);
  if (typeof args === "string") return ok(msg, { content: [{ type: "text", text: `portcullis.preview_impact: ${args}` }], isError: true });
  const call = toolCallOf(ctx, { ...msg, params: { name: args.name, ...(args.arguments ? { arguments: args.arguments } : {}) } }, args.name);
  const preview = await previewToolCall(governance(ctx), { ...call, arguments: args.arguments });
  return ok(msg, { content: [{ type: "text", text: JSON.stringify(preview) }], structuredContent: preview as unknown as JsonObject });
}

/** tools/call: the governed path (src/governance/call.ts) owns every step from resolve to answer. */
async function toolsCall(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const name = msg.params?.name;
  if (typeof name !== "string") return fail(msg, ErrorCode.InvalidParams, "Invalid params: tools/call needs a string name", ctx.era === "modern" ? 400 : 200);
  // Arguments that are not an object would reach governance as "none" and the upstream as sent: refuse them before either.
  const args = msg.params?.arguments;
  if (args !== undefined && !isObject(args))
    return fail(msg, ErrorCode.InvalidParams, "Invalid params: tools/call arguments must be an object (or absent)", ctx.era === "modern" ? 400 : 200);
  // An agent tool the grant does not cover goes the governed path like any tool: refused there as outside the grant, on the record.
  if (offersAgentTool(ctx.cfg, ctx.principal, name)) return name === PREVIEW_TOOL_NAME ? previewImpact(ctx, msg) : agentRunTool(ctx, msg);
  const governed = governedFromEdge(ctx.cfg.upstreams, name, ctx.route);
  const answer = await governToolCall(governance(ctx), toolCallOf(ctx, msg, governed));
  const target = splitName(ctx.cfg.upstreams, name);
  const out = target ? exposeTask(target.up, answer) : answer;
  return governed === name || !answer.unknownTool ? out : unknownAsSent(out, name);
}

/** On a route, the gateway's unknown-tool answer names the tool as the client sent it (the governed name is /mcp's spelling of it). */
function unknownAsSent(out: Outcome, name: string): Outcome {
  const err = out.response.error;
  if (!err) return out;
  return { ...out, response: { ...out.response, error: { ...err, message: `Unknown tool: ${name}` } } };
}

/** Requests that reach a tool without naming it go through governedPassThrough (kill switch first). */
function passThrough(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest, upstreamReq: JsonRpcRequest): Promise<Outcome> {
  return governedPassThrough(governance(ctx), { call: toolCallOf(ctx, msg, ""), upstream: up }, () => callLeg(ctx, up, upstreamReq));
}

async function byName(ctx: CallContext, msg: JsonRpcRequest, what: string): Promise<Outcome> {
  const name = msg.params?.name;
  if (typeof name !== "string")
    return fail(msg, ErrorCode.InvalidParams, `Invalid params: ${msg.method} needs a string name`, ctx.era === "modern" ? 400 : 200);
  const target = splitName(ctx.cfg.upstreams, name);
  if (!target || !grantReachesUpstream(ctx.principal, target.up)) return fail(msg, ErrorCode.InvalidParams, `Unknown ${what}: ${name}`);
  return forward(ctx, target.up, withParam(msg, "name", target.name));
}

async function byUri(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const uri = msg.params?.uri;
  if (typeof uri !== "string") return fail(msg, ErrorCode.InvalidParams, `Invalid params: ${msg.method} needs a string uri`, ctx.era === "modern" ? 400 : 200);
  const target = splitUri(ctx.cfg.upstreams, uri);
  if (!target || !grantReachesUpstream(ctx.principal, target.up)) return fail(msg, ErrorCode.InvalidParams, `Resource not found: ${uri}`, 200, { uri });
  const out = await forward(ctx, target.up, withParam(msg, "uri", target.uri));
  const err = out.response.error;
  // 2026-07-28 (SEP-2164): -32002 is gone; resource-not-found is -32602 with data.uri.
  if (ctx.era === "modern" && err && err.code === ErrorCode.ResourceNotFoundLegacy) {
    return { ...out, response: errorResponse(msg.id, ErrorCode.InvalidParams, err.message, { uri }) };
  }
  if (isObject(out.response.result) && Array.isArray(out.response.result.contents) && target.up.namespaced) {
    const contents = out.response.result.contents.map((c) => (isObject(c) && c.uri === target.uri ? { ...c, uri } : c));
    return { ...out, response: { ...out.response, result: { ...out.response.result, contents } } };
  }
  return out;
}

async function complete(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const ref = msg.params?.ref;
  if (!isObject(ref)) return fail(msg, ErrorCode.InvalidParams, "Invalid params: completion/complete needs a ref", ctx.era === "modern" ? 400 : 200);
  if (ref.type === "ref/prompt" && typeof ref.name === "string") {
    const t = splitName(ctx.cfg.upstreams, ref.name);
    if (!t || !grantReachesUpstream(ctx.principal, t.up)) return fail(msg, ErrorCode.InvalidParams, `Unknown prompt: ${ref.name}`);
    return forward(ctx, t.up, withParam(msg, "ref", { ...ref, name: t.name }));
  }
  if (ref.type === "ref/resource" && typeof ref.uri === "string") {
    const t = splitUri(ctx.cfg.upstreams, ref.uri);
    if (!t || !grantReachesUpstream(ctx.principal, t.up)) return fail(msg, ErrorCode.InvalidParams, `Unknown resource: ${ref.uri}`);
    return forward(ctx, t.up, withParam(msg, "ref", { ...ref, uri: t.uri }));
  }
  return fail(msg, ErrorCode.InvalidParams, "Invalid params: ref must be ref/prompt with a name or ref/resource with a uri", ctx.era === "modern" ? 400 : 200);
}

/** logging/setLevel reaches every upstream that declared logging; the client gets {} once all answered. */
async function setLevel(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  await Promise.all(
    ctx.cfg.upstreams.map(async (up) => {
      const caps = await ctx.legs.capabilities(up).catch(() => undefined);
      if (!caps || !isObject(caps.logging)) return;
      const leg = await ctx.legs.leg(up);
      if (leg?.era !== "legacy") return;
      await forward(ctx, up, msg).catch(() => undefined); // upstream under an id of its own (forward.ts)
    }),
  );
  return ok(msg, {});
}

/** tasks/get, tasks/update, tasks/cancel (and legacy tasks/result): to the task's upstream, for the task's owner only. */
async function byTask(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const taskId = msg.params?.taskId;
  if (typeof taskId !== "string")
    return fail(msg, ErrorCode.InvalidParams, `Invalid params: ${msg.method} needs a string taskId`, ctx.era === "modern" ? 400 : 200);
  // A task the gateway made for a held call (hold-tasks.ts): polled here, run through the governed path once approved.
  if (taskId.startsWith(HOLD_TASK_PREFIX))
    return holdTaskRequest(
      ctx,
      msg,
      taskId,
      () => unknownTask(ctx, msg, taskId),
      (call) => governToolCall(governance(ctx), call),
    );
  const t = splitHandle(ctx.cfg.upstreams, taskId);
  if (!t || !grantReachesUpstream(ctx.principal, t.up)) return unknownTask(ctx, msg, taskId);
  return forOwnerOnly(ctx, msg, taskId, t.up, t.name, async () => exposeTask(t.up, await passThrough(ctx, t.up, msg, withParam(msg, "taskId", t.name))));
}

/** Routes one client request. The front has already validated era, session and headers. */
export async function dispatch(ctx: CallContext, request: JsonRpcRequest): Promise<Outcome> {
  // tools/call: the governed path drops the client's `portcullis/` keys (and its decision record names them).
  if (request.method === "tools/call") return toolsCall(ctx, request);
  const params = withoutGatewayMeta(request.params);
  const msg: JsonRpcRequest = params === request.params ? request : { ...request, params: params! };
  if (LISTS[msg.method]) return aggregateList(ctx, msg);
  switch (msg.method) {
    case "prompts/get":
      return byName(ctx, msg, "prompt");
    case "resources/read":
    case "resources/subscribe":
    case "resources/unsubscribe":
      return byUri(ctx, msg);
    case "completion/complete":
      return complete(ctx, msg);
    case "logging/setLevel":
      return setLevel(ctx, msg);
    case "ping":
      return ok(msg, {});
    case "tasks/get":
    case "tasks/update":
    case "tasks/cancel":
      return byTask(ctx, msg);
    case "skills/list":
      return skillsList(ctx, msg);
    case "skills/get":
      return skillsGet(ctx, msg);
    case "resources/directory/read":
      return directoryRead(ctx, msg);
  }
  if (msg.method === "tasks/result" && typeof msg.params?.taskId === "string" && msg.params.taskId.startsWith(HOLD_TASK_PREFIX)) return byTask(ctx, msg);
  const ups = ctx.cfg.upstreams;
  if (ups.length === 1 && !ups[0]!.namespaced && grantReachesUpstream(ctx.principal, ups[0]!)) {
    const up = ups[0]!;
    // 2025-11-25 task methods the 2026-07-28 era removed (modern clients never get here with them).
    if (msg.method === "tasks/result") return byTask(ctx, msg);
    if (msg.method === "tasks/list") return ownTasksOnly(ctx, msg, up, () => passThrough(ctx, up, msg, msg));
    return passThrough(ctx, up, msg, msg);
  }
  return fail(msg, ErrorCode.MethodNotFound, `Method not found: ${msg.method}`, ctx.era === "modern" ? 404 : 200);
}
