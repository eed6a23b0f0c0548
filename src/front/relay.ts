/**
 * Relaying an upstream's server→client request (sampling, elicitation, roots) to a legacy
 * client: a fresh gateway id, the pending entry in SessionDO (so the client's answer finds its
 * upstream and original id), or a refusal sent back upstream with the reason.
 * Must never: relay a request for a capability the client did not declare, or reuse the
 * upstream's id toward the client (ids from several upstreams would collide).
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { ErrorCode, type JsonObject, type JsonRpcRequest, errorResponse } from "../wire/jsonrpc.ts";
import type { SessionApi } from "../../durable-objects/contract.ts";
import { postUpstream } from "../upstream/client.ts";
import { CAPABILITY_FOR } from "../upstream/rounds.ts";
import type { Leg } from "../../durable-objects/contract.ts";

export async function relayServerRequest(
  store: SessionApi,
  principal: string,
  clientCaps: JsonObject,
  up: UpstreamConfig,
  leg: Leg,
  msg: JsonRpcRequest,
  send: (m: JsonRpcRequest) => Promise<void>,
): Promise<void> {
  const cap = CAPABILITY_FOR[msg.method];
  if (leg.era === "legacy" && (cap === undefined || clientCaps[cap] !== undefined)) {
    const id = `pc-${crypto.randomUUID()}`;
    await store.addPending(principal, { id, upstream: up.name, upId: msg.id });
    await send({ ...msg, id });
    return;
  }
  const why = cap ? `the client did not declare the ${cap} capability` : "it cannot be routed back";
  await postUpstream(up, leg, errorResponse(msg.id, ErrorCode.MethodNotFound, `Portcullis did not relay ${msg.method}: ${why}`)).catch(() => undefined);
}
