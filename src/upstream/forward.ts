/**
 * Forwarding one client request to one upstream and relaying what comes back.
 * Owns: giving each upstream request its own gateway-made id (upstreamRequestId; the client's id
 * goes back on the answer), relaying interim messages (progress, logs, resource
 * updates, server→client requests), renewing an expired legacy upstream session once, and the
 * MRTR bridge for legacy clients of 2026-07-28-only upstreams; a list page's failure handed back
 * classified (forwardList, unavailable.ts) rather than as an error answer. Must never: change a result's
 * fields other than the exposed names it is told to map, lose the client's request id, or send a
 * client's id (or anything derived from it) upstream.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import {
  ErrorCode,
  type JsonObject,
  type JsonRpcMessage,
  type JsonRpcNotification,
  type JsonRpcRequest,
  type JsonRpcResponse,
  errorResponse,
  isNotification,
  isObject,
  isRequest,
} from "../wire/jsonrpc.ts";
import { noteNotification } from "./catalog-cache.ts";
import { exposeUri } from "../protocol/exposed-names.ts";
import type { LegResult } from "../governance/steps.ts";
import { requestUpstream } from "./client.ts";
import { classifyFailure, LegUnavailable, type Unavailable } from "./unavailable.ts";
import {
  answers,
  credentialRefusal,
  UpstreamAuthError,
  UpstreamConnectionLost,
  UpstreamError,
  UpstreamNotConnected,
  UpstreamSessionGone,
  UpstreamUncertain,
  upstreamRequestId,
} from "./exchange.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import { META } from "../protocol/versions.ts";
import {
  bindingDigest,
  isRoundToken,
  newRoundId,
  openRoundToken,
  relayableCapabilities,
  ROUND_METHODS,
  type RoundBinding,
  type RoundReply,
  readRoundLines,
  type RoundsApi,
  roundToken,
} from "./rounds.ts";

/** Relays one interim upstream message to the client (names mapped), or answers it. */
async function relayInterim(ctx: CallContext, up: UpstreamConfig, leg: Leg, msg: JsonRpcMessage): Promise<void> {
  if (isRequest(msg)) return ctx.relay.upstreamRequest(up, leg, msg);
  if (isNotification(msg)) return relayNotification(ctx, up, msg);
}

/** Relays one upstream notification to the client (resource URIs in their exposed names). */
async function relayNotification(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcNotification): Promise<void> {
  noteNotification(up.name, msg.method);
  if (msg.method === "notifications/resources/updated" && isObject(msg.params) && typeof msg.params.uri === "string") {
    return ctx.relay.send({ ...msg, params: { ...msg.params, uri: exposeUri(up, msg.params.uri) } });
  }
  return ctx.relay.send(msg);
}

const MAX_MRTR_ROUNDS = 8;
/** Requests a client may cancel: their upstream and upstream id are recorded so notifications/cancelled can follow. */
const TRACKED = new Set(["tools/call", "prompts/get", "resources/read", "completion/complete"]);
/** Results that carry ttlMs/cacheScope in 2026-07-28 (SEP-2549). */
const CACHEABLE = new Set(["tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"]);

/** One attempt at `msg` on `up`: the answer, or what was thrown (logged either way by logCall). */
async function attempt(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<{ out: Outcome } | { error: unknown }> {
  try {
    const out = await forwardOnce(ctx, up, msg);
    logCall(ctx, up, msg, out.response.error ? `error ${out.response.error.code}` : "ok");
    return { out };
  } catch (e) {
    logCall(ctx, up, msg, e instanceof UpstreamError ? `failed: ${e.status ?? "?"}` : "failed", classifyFailure(up, e, ctx.signal).reason);
    return { error: e };
  }
}

/**
 * The upstream leg: sends `msg` (already in the upstream's names) to `up` and reports what
 * happened — never a throw. Interim messages are relayed as they arrive; the response carries
 * `msg.id` (the upstream saw a gateway-made id instead).
 */
export async function callLeg(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<LegResult> {
  const a = await attempt(ctx, up, msg);
  if ("out" in a) return { kind: "answered", response: a.out.response, status: a.out.status, ...(a.out.round ? { round: a.out.round } : {}) };
  const e = a.error;
  if (e instanceof LegUnavailable) return { kind: "failed", reason: e.message, auth: false };
  if (e instanceof UpstreamNotConnected) return { kind: "failed", reason: e.message, auth: true, connect: { upstream: up.name, url: e.connectUrl } };
  if (e instanceof UpstreamAuthError) return { kind: "failed", reason: e.message, auth: true };
  if (e instanceof UpstreamUncertain) return { kind: "uncertain", reason: e.message };
  if (e instanceof UpstreamConnectionLost) return { kind: "failed", reason: e.message, auth: false, connection: true };
  if (e instanceof UpstreamError) return { kind: "failed", reason: e.message, auth: false };
  console.error("portcullis: internal error on the upstream leg", (e as Error)?.stack ?? String(e));
  return { kind: "uncertain", reason: `Internal error in Portcullis while talking to upstream ${up.name}` };
}

/** A request that is not governed (lists, prompts, resources, …): the leg's failures become JSON-RPC errors. */
export async function forward(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<Outcome> {
  const leg = await callLeg(ctx, up, msg);
  if (leg.kind === "answered") return { response: leg.response, status: leg.status };
  return { response: errorResponse(msg.id, ErrorCode.InternalError, leg.reason), status: 200 };
}

/** What a list request got: the upstream's answer, or why there was none (unavailable.ts). */
export type ListAnswer = { answered: Outcome } | { failed: Unavailable };

/**
 * A list request (one page, aggregate.ts): as `forward`, but a failure comes back classified —
 * reason, detail, status — for the list to report, never as an answer of the upstream's.
 */
export async function forwardList(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<ListAnswer> {
  const a = await attempt(ctx, up, msg);
  if ("out" in a) return { answered: a.out };
  if (!(a.error instanceof UpstreamError) && !(a.error instanceof LegUnavailable)) {
    console.error("portcullis: internal error on the upstream leg", (a.error as Error)?.stack ?? String(a.error));
  }
  return { failed: classifyFailure(up, a.error, ctx.signal) };
}

/**
 * One structured line per failed upstream request (or error answer): the credential mode, never
 * its value, and for a failure its kind (unavailable.ts). A request that succeeded prints
 * nothing: no operator asked for a line per call, and the ledger already records every governed call.
 */
function logCall(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest, outcome: string, reason?: string): void {
  if (outcome === "ok") return;
  console.log(
    JSON.stringify({
      event: "upstream_request",
      upstream: up.name,
      method: msg.method,
      principal: ctx.principal.sub,
      credential: up.credentials.mode,
      outcome,
      ...(reason ? { reason } : {}),
      ...(ctx.trace ? { trace_id: ctx.trace.traceId } : {}),
    }),
  );
}

async function forwardOnce(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<Outcome> {
  let leg = await ctx.legs.leg(up);
  if (!leg) {
    if (up.credentialProblem) throw credentialRefusal(up, up.credentialProblem);
    throw new LegUnavailable(up);
  }
  // A modern client's input rounds on a legacy upstream: the call is parked in a RoundsDO (rounds.ts).
  if (ctx.era === "modern" && ROUND_METHODS.has(msg.method) && ctx.legs.rounds) {
    if (isRoundToken(msg.params?.requestState)) return continueRound(ctx, up, msg);
    if (leg.era === "legacy" && Object.keys(relayableCapabilities(ctx.clientCapabilities ?? {})).length > 0) return beginRound(ctx, up, leg, msg);
  }
  // The upstream never sees the client's id: the leg may be shared (see upstreamRequestId). A
  // renewed session gets the same request under the same id (the one recorded for cancellation);
  // each MRTR round is a new request with a new id.
  const firstId = upstreamRequestId();
  if (TRACKED.has(msg.method)) ctx.legs.recordRequest(msg.id, up, firstId).catch(() => undefined);
  let params = withLegMeta(msg.params, leg, ctx);
  for (let round = 0; ; round++) {
    const upMsg: JsonRpcRequest = { jsonrpc: "2.0", id: round === 0 ? firstId : upstreamRequestId(), method: msg.method };
    if (params !== undefined) upMsg.params = params;
    let out: Outcome;
    try {
      out = await once(ctx, up, leg, upMsg, msg.id);
    } catch (e) {
      if (e instanceof UpstreamSessionGone) {
        const renewed = await ctx.legs.renew(up);
        if (!renewed) throw new LegUnavailable(up);
        leg = renewed;
        out = await once(ctx, up, leg, upMsg, msg.id);
      } else throw e;
    }
    const result = out.response.result;
    // Legacy client, modern upstream: answer input_required rounds through server→client requests.
    if (ctx.era === "legacy" && leg.era === "modern" && isObject(result) && result.resultType === "input_required") {
      if (!ctx.relay.ask || round >= MAX_MRTR_ROUNDS) {
        return {
          response: errorResponse(msg.id, ErrorCode.InternalError, `upstream ${up.name} needs more input rounds than Portcullis relays (${MAX_MRTR_ROUNDS})`),
          status: 200,
        };
      }
      const inputs = isObject(result.inputRequests) ? result.inputRequests : {};
      const answers: JsonObject = {};
      for (const [key, ir] of Object.entries(inputs)) {
        if (!isObject(ir) || typeof ir.method !== "string") continue;
        answers[key] = await ctx.relay.ask(ir.method, isObject(ir.params) ? ir.params : {});
      }
      params = { ...(params ?? {}), inputResponses: answers };
      if (result.requestState !== undefined) params.requestState = result.requestState;
      else delete params.requestState;
      continue;
    }
    return out;
  }
}

async function once(ctx: CallContext, up: UpstreamConfig, leg: Leg, upMsg: JsonRpcRequest, clientId: string | number): Promise<Outcome> {
  const opts = { signal: ctx.signal, paramHeaders: ctx.paramHeaders, control: true, ...(ctx.trace ? { trace: ctx.trace } : {}) } as const;
  for await (const f of requestUpstream(up, leg, upMsg, opts)) {
    // The upstream's stream, mirrored to the client where its front can (SEP-1699).
    if ("kind" in f) {
      if (f.kind === "stream-opened") ctx.relay.streamOpened?.();
      else if (f.kind === "stream-primed") ctx.relay.streamPrimed?.();
      else await ctx.relay.mirrorClose?.();
      continue;
    }
    const m = f.message;
    if (answers(m, upMsg.id)) {
      const response: JsonRpcResponse = { ...(m as JsonRpcResponse), id: clientId };
      // 2026-07-28 cacheable results carry caching hints; a legacy upstream gives none, so stamp
      // the conservative ones (resultType is added for every modern answer in modern.ts).
      if (ctx.era === "modern" && leg.era === "legacy" && isObject(response.result) && CACHEABLE.has(upMsg.method) && response.result.ttlMs === undefined) {
        response.result = { ...response.result, ttlMs: 0, cacheScope: "private" };
      }
      return { response, status: f.status };
    }
    await relayInterim(ctx, up, leg, m);
  }
  throw new UpstreamError(up.name, `no response to ${upMsg.method}`, 502, undefined, "invalid_answer");
}

/** What a round token binds for this request: the principal, the upstream, the method and what it names, the arguments. */
function bindingOf(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): RoundBinding {
  const p = msg.params ?? {};
  const name = typeof p.name === "string" ? p.name : typeof p.uri === "string" ? p.uri : "";
  return { principal: ctx.principal.sub, upstream: up.name, method: msg.method, name, arguments: isObject(p.arguments) ? p.arguments : undefined };
}

/** The request as the legacy upstream gets it: no round fields (it never asked in rounds), its own id. */
function firstRoundRequest(ctx: CallContext, leg: Leg, msg: JsonRpcRequest): JsonRpcRequest {
  const params: JsonObject = { ...(msg.params ?? {}) };
  delete params.inputResponses;
  delete params.requestState;
  const upMsg: JsonRpcRequest = { jsonrpc: "2.0", id: upstreamRequestId(), method: msg.method };
  const withMeta = withLegMeta(params, leg, ctx);
  if (withMeta !== undefined) upMsg.params = withMeta;
  return upMsg;
}

/**
 * Parks the call under a fresh round id in the caller's RoundsDO and answers with its first step.
 * An upstream that forgot the legacy session (404) gets a renewed one and the call once more.
 */
async function beginRound(ctx: CallContext, up: UpstreamConfig, leg: Leg, msg: JsonRpcRequest): Promise<Outcome> {
  const obj = ctx.legs.rounds!<RoundsApi>();
  const digest = await bindingDigest(bindingOf(ctx, up, msg));
  const declared = relayableCapabilities(ctx.clientCapabilities ?? {});
  const given = isObject(msg.params?.inputResponses) ? msg.params.inputResponses : {};
  const once = async (l: Leg) => {
    const id = newRoundId();
    const begin = { owner: ctx.principal.sub, digest, up, leg: l, request: firstRoundRequest(ctx, l, msg), declared, given };
    const stream = () => obj.begin(id, ctx.trace ? { ...begin, trace: ctx.trace } : begin);
    return { id, reply: (await whileListening(ctx, obj, id, digest, async () => readRoundLines(await stream(), relay(ctx, up)))) as RoundReply };
  };
  let { id, reply } = await once(leg);
  if (reply.kind === "failed" && reply.sessionGone) {
    const renewed = await ctx.legs.renew(up);
    if (!renewed) throw new LegUnavailable(up);
    ({ id, reply } = await once(renewed));
  }
  return roundAnswer(ctx, up, msg, reply, id, digest);
}

/**
 * Runs one step of a parked call; if this request is aborted meanwhile (the client went away, or
 * the kill switch's in-flight watch cancelled it), the parked call is cancelled upstream too.
 */
async function whileListening<T>(ctx: CallContext, obj: RoundsApi, id: string, digest: string, step: () => Promise<T>): Promise<T> {
  const cancel = () => {
    const why = ctx.signal.reason instanceof Error ? ctx.signal.reason.message : "the client's request was aborted";
    void obj.cancel(id, ctx.principal.sub, digest, why).catch(() => undefined);
  };
  if (ctx.signal.aborted) cancel();
  ctx.signal.addEventListener("abort", cancel, { once: true });
  try {
    return await step();
  } finally {
    ctx.signal.removeEventListener("abort", cancel);
  }
}

/** A parked call's notifications, relayed to the client as they arrive (names mapped, as on the direct path). */
const relay = (ctx: CallContext, up: UpstreamConfig) => (m: JsonRpcNotification) => relayNotification(ctx, up, m);

/** A round token that does not hold for this call (altered, another principal's, another call's, or spent): refused, the upstream untouched. */
function badRound(msg: JsonRpcRequest, why: string): Outcome {
  return { response: errorResponse(msg.id, ErrorCode.InvalidParams, `Invalid params: requestState ${why}`), status: 400 };
}

/** The client's answers to a round: delivered to the parked call, which goes on to its next step. */
async function continueRound(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest): Promise<Outcome> {
  const digest = await bindingDigest(bindingOf(ctx, up, msg));
  const opened = openRoundToken(ctx.cfg.auth.signingKeySecret, String(msg.params?.requestState), digest);
  if (!opened) return badRound(msg, "is not one Portcullis issued for this call and caller, or it was altered");
  const obj = ctx.legs.rounds!<RoundsApi>();
  const responses = isObject(msg.params?.inputResponses) ? msg.params.inputResponses : {};
  const declared = relayableCapabilities(ctx.clientCapabilities ?? {});
  const reply = await whileListening(ctx, obj, opened.id, digest, async () =>
    readRoundLines(await obj.resume(opened.id, ctx.principal.sub, digest, opened.n, responses, declared), relay(ctx, up)),
  );
  if (reply.kind === "gone") return badRound(msg, `cannot be used: ${reply.reason}`);
  return roundAnswer(ctx, up, msg, reply, opened.id, digest);
}

/** A parked call's step as the client's answer: its notifications first, then an input_required round, the result, or the failure. */
async function roundAnswer(ctx: CallContext, up: UpstreamConfig, msg: JsonRpcRequest, reply: RoundReply, id: string, digest: string): Promise<Outcome> {
  for (const n of reply.interim) await relayNotification(ctx, up, n);
  if (reply.kind === "answered") {
    const response: JsonRpcResponse = { ...reply.response, id: msg.id };
    if (isObject(response.result) && CACHEABLE.has(msg.method) && response.result.ttlMs === undefined) {
      response.result = { ...response.result, ttlMs: 0, cacheScope: "private" };
    }
    return { response, status: reply.status };
  }
  if (reply.kind === "failed") {
    if (reply.auth) throw new UpstreamAuthError(up.name, reply.reason, 401);
    if (reply.uncertain) throw new UpstreamUncertain(up.name, reply.reason, 502);
    throw new UpstreamError(up.name, reply.reason, 502);
  }
  const requestState = roundToken(ctx.cfg.auth.signingKeySecret, id, reply.n, digest);
  const asks: Record<string, string> = {};
  for (const [k, r] of Object.entries(reply.requests)) asks[k] = String(r.method);
  return {
    response: { jsonrpc: "2.0", id: msg.id, result: { resultType: "input_required", inputRequests: reply.requests, requestState } },
    status: 200,
    round: { id, n: reply.n, digest, asks },
  };
}

/** The `_meta` the upstream leg needs: modern legs carry per-request protocol metadata. */
function withLegMeta(params: JsonObject | undefined, leg: Leg, ctx: CallContext): JsonObject | undefined {
  if (leg.era !== "modern") {
    if (ctx.era === "modern" && params && isObject(params._meta)) {
      // A legacy upstream does not know the modern per-request keys; drop them, keep the rest.
      const meta: JsonObject = {};
      for (const [k, v] of Object.entries(params._meta)) if (!k.startsWith("io.modelcontextprotocol/")) meta[k] = v;
      return { ...params, _meta: meta };
    }
    return params;
  }
  const incoming = params && isObject(params._meta) ? params._meta : {};
  const meta: JsonObject = { ...incoming, ...leg.meta };
  if (ctx.era === "modern") {
    // The client's own per-request metadata wins: it is the same era.
    for (const k of [META.protocolVersion, META.clientCapabilities, META.clientInfo, META.logLevel]) {
      if (incoming[k] !== undefined) meta[k] = incoming[k]!;
    }
  }
  return { ...(params ?? {}), _meta: meta };
}
