/**
 * What the governed path answers, and how it fails closed: the JSON-RPC shapes of a result, an
 * unknown tool, a refusal the model can read ("Blocked by Portcullis: … (check, rule, decision);
 * ask …"), a leg that did not answer; the upstream request (the upstream's tool name, the
 * client's own `_meta` keys under `portcullis/` dropped — that namespace is the gateway's — then
 * obligations pushed down in `_meta`); the receipt and advise's advisory block on the way back; and
 * `step`, which turns any throw of a step into StepFailed so that the call is refused. Must never:
 * change a result beyond the receipt and the advisory, let a step's throw pass as anything but a
 * refusal, or forward a `portcullis/` `_meta` key a client sent.
 */
import { ErrorCode, errorResponse, isObject, type JsonObject, type JsonRpcRequest, type JsonRpcResponse } from "../wire/jsonrpc.ts";
import { pushDownMeta } from "./obligations.ts";
import type { Decision, LegResult, Receipt, Refusal, ToolCall } from "./steps.ts";

/** A JSON-RPC answer and the HTTP status that carries it. */
export interface Answer {
  response: JsonRpcResponse;
  status: number;
  /** The gateway's own "Unknown tool" answer (unknownTool), never an upstream's: a front may name the tool as its client spelled it. */
  unknownTool?: true;
}

/** The `_meta` key under which an answer carries its ledger receipt. */
export const RECEIPT_META = "portcullis/receipt";

export class StepFailed extends Error {
  readonly step: string;
  constructor(step: string, cause: unknown) {
    super(`the ${step} step could not answer (${cause instanceof Error ? cause.message : String(cause)})`, { cause });
    this.step = step;
  }
}

/** Runs one step; a throw becomes StepFailed, which refuses the call (fail closed). */
export async function step<T>(name: string, run: () => T | Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (e) {
    throw new StepFailed(name, e);
  }
}

export const result = (call: ToolCall, r: JsonObject): Answer => ({ response: { jsonrpc: "2.0", id: call.request.id, result: r }, status: 200 });
export const unknownTool = (call: ToolCall): Answer => ({
  response: errorResponse(call.request.id, ErrorCode.InvalidParams, `Unknown tool: ${call.exposedName}`),
  status: 200,
  unknownTool: true,
});
/** A refusal is a tool result the model can read (isError), never a protocol error: what refused, by which rule, the record, who to ask. */
export function refused(call: ToolCall, r: Refusal, blockedId?: string | null): Answer {
  const refs = [`check: ${r.check}`, ...(r.rule ? [`rule: ${r.rule}`] : []), ...(blockedId ? [`decision: ${blockedId}`] : [])];
  const ask = r.owner ? `; ask ${r.owner}` : call.principal.authenticated ? "; ask the issuer of your grant" : "";
  return result(call, { content: [{ type: "text", text: `Blocked by Portcullis: ${r.reason} (${refs.join(", ")})${ask}` }], isError: true });
}
/** A leg that did not answer: auth problems are readable isError results; the rest JSON-RPC errors naming the upstream. */
export function notAnswered(call: ToolCall, leg: Exclude<LegResult, { kind: "answered" }>): Answer {
  if (leg.kind === "failed" && leg.connect && call.urlElicitation) return connectElicitation(call, leg.connect, leg.reason);
  if (leg.kind === "failed" && leg.auth) return result(call, { content: [{ type: "text", text: leg.reason }], isError: true });
  const text = leg.kind === "uncertain" ? `${leg.reason}; the call may or may not have run upstream` : leg.reason;
  return { response: errorResponse(call.request.id, ErrorCode.InternalError, text), status: 200 };
}

/** The `inputResponses` key of the gateway's own URL elicitation (its `portcullis/` keys are never forwarded). */
export const CONNECT_INPUT_KEY = "portcullis/connect";
/** The JSON-RPC error a 2025-11-25 server answers when the user must first complete a URL elicitation. */
export const URL_ELICITATION_REQUIRED = -32042;

/**
 * A client that declared URL-mode elicitation is asked to open the connect URL instead of reading
 * it in a tool result: a 2025-11-25 client gets the URL-elicitation-required error, a 2026-07-28
 * client an input_required result with a URL-mode elicitation it answers by retrying the call.
 */
function connectElicitation(call: ToolCall, connect: { upstream: string; url: string }, reason: string): Answer {
  const message = `Connect ${connect.upstream}: sign in to the Portcullis console with your grant and connect it, then the call continues. (${reason})`;
  if (call.era === "legacy") {
    const elicitation = { mode: "url", elicitationId: crypto.randomUUID(), url: connect.url, message };
    return { response: errorResponse(call.request.id, URL_ELICITATION_REQUIRED, message, { elicitations: [elicitation] }), status: 200 };
  }
  return result(call, {
    resultType: "input_required",
    inputRequests: { [CONNECT_INPUT_KEY]: { method: "elicitation/create", params: { mode: "url", url: connect.url, message } } },
  });
}

/** The `_meta` namespace that is the gateway's: what it sends upstream under it (obligations, idempotency keys) no client may send. */
export const GATEWAY_META_PREFIX = "portcullis/";
/** At most this many dropped key names are recorded, each at most this long (a client picks them). */
const STRIPPED_NAMES_MAX = 20;
const STRIPPED_NAME_CHARS = 200;

/** The `portcullis/` keys of a client's `params._meta`, by name (bounded: the names a record keeps); [] when none. */
export function gatewayMetaKeys(params: JsonObject | undefined): string[] {
  const meta = params?._meta;
  if (!isObject(meta)) return [];
  const names = Object.keys(meta).filter((k) => k.startsWith(GATEWAY_META_PREFIX));
  return names.slice(0, STRIPPED_NAMES_MAX).map((k) => (k.length > STRIPPED_NAME_CHARS ? `${k.slice(0, STRIPPED_NAME_CHARS)}…` : k));
}

/** A client's params with every `portcullis/` key of its `_meta` and of its `inputResponses` dropped; every other key (and the params themselves) as sent. */
export function withoutGatewayMeta(params: JsonObject | undefined): JsonObject | undefined {
  const inputs = params?.inputResponses;
  if (params && isObject(inputs) && Object.keys(inputs).some((k) => k.startsWith(GATEWAY_META_PREFIX))) {
    // The answers to the gateway's own input requests are the gateway's: the upstream never asked for them.
    const kept: JsonObject = {};
    for (const [k, v] of Object.entries(inputs)) if (!k.startsWith(GATEWAY_META_PREFIX)) kept[k] = v;
    params = { ...params };
    if (Object.keys(kept).length > 0) params.inputResponses = kept;
    else delete params.inputResponses;
  }
  const meta = params?._meta;
  if (!params || !isObject(meta) || !Object.keys(meta).some((k) => k.startsWith(GATEWAY_META_PREFIX))) return params;
  const kept: JsonObject = {};
  for (const [k, v] of Object.entries(meta)) if (!k.startsWith(GATEWAY_META_PREFIX)) kept[k] = v;
  return { ...params, _meta: kept };
}

/**
 * The client's request with the upstream's own tool name, without the client's `portcullis/`
 * `_meta` keys, and then the obligations a server can push down (the gateway's own keys).
 */
export function upstreamRequest(call: ToolCall, toolName: string, decision: Decision): JsonRpcRequest {
  const params: JsonObject = { ...(withoutGatewayMeta(call.request.params) ?? {}), name: toolName };
  const push = pushDownMeta(decision.obligations);
  if (push) params._meta = { ...((params._meta as JsonObject | undefined) ?? {}), ...push };
  return { ...call.request, params };
}

/** The receipt rides in the result's `_meta`; everything else is the upstream's, unchanged. */
export function withReceipt(response: JsonRpcResponse, receipt: Receipt | null): JsonRpcResponse {
  if (!receipt || !response.result) return response;
  const meta = { ...((response.result._meta as JsonObject | undefined) ?? {}), [RECEIPT_META]: { ...receipt } };
  return { ...response, result: { ...response.result, _meta: meta } };
}

/** advise: the result gets one extra text block naming what enforce would have done. */
export function withAdvisory(response: JsonRpcResponse, decision: Decision): JsonRpcResponse {
  if (decision.mode !== "advise" || !decision.wouldBlock || !response.result) return response;
  const content = Array.isArray(response.result.content) ? response.result.content : [];
  const text = `Portcullis advisory (nothing was blocked): enforce would ${decision.wouldBlock.decision === "deny" ? "block" : "hold"} this call — ${decision.wouldBlock.reason}`;
  return { ...response, result: { ...response.result, content: [...content, { type: "text", text }] } };
}
