/**
 * `subscriptions/listen` for 2026-07-28 clients: one long-lived SSE answer fanning in every
 * upstream's change notifications — modern upstreams' own listen streams, legacy upstreams' GET
 * streams — with the subscription id rewritten to the client's listen request id.
 * Owns: the acknowledged subset, per-type filtering, URI mapping of resources/updated. The
 * stream ends with its grant (holdOpen, grant-watch.ts). Must never: send a notification type the
 * client did not ask for, anything before the ack, or anything once the stream has ended.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { withoutGatewayMeta } from "../governance/call-answers.ts";
import { type JsonObject, type JsonRpcNotification, type JsonRpcRequest, isNotification, isObject } from "../wire/jsonrpc.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { listChangeFlags, modernLegFor } from "../upstream/legs.ts";
import { noteNotification } from "../upstream/catalog-cache.ts";
import { watchConfigVersion } from "../ports/live-config.ts";
import { exposeUri, splitUri } from "../protocol/exposed-names.ts";

import { holdOpen, sseStream } from "./streams.ts";
import { encodeEvent } from "../wire/sse.ts";
import { openGetStream, requestUpstream } from "../upstream/client.ts";
import { type Frame, upstreamRequestId } from "../upstream/exchange.ts";
import { META } from "../protocol/versions.ts";
import { SSE_HEADERS } from "../wire/http.ts";
import { taskObject } from "../../durable-objects/object-names.ts";
import { ownTaskNotification } from "../ports/task-owners.ts";

const TYPE_OF: Record<string, string> = {
  "notifications/tools/list_changed": "toolsListChanged",
  "notifications/prompts/list_changed": "promptsListChanged",
  "notifications/resources/list_changed": "resourcesListChanged",
};

export async function listen(fc: FrontContext, req: Request, msg: JsonRpcRequest): Promise<Response> {
  const asked = isObject(msg.params?.notifications) ? msg.params.notifications : {};
  const subs = Array.isArray(asked.resourceSubscriptions) ? asked.resourceSubscriptions.filter((u): u is string => typeof u === "string") : [];
  const recs = await Promise.all(fc.cfg.upstreams.map(async (up) => [up, await modernLegFor(fc.env, fc.principal.sub, up).catch(() => ({}))] as const));
  const agreed: JsonObject = {};
  for (const [, r] of recs) {
    for (const k of Object.keys(listChangeFlags("capabilities" in r ? r.capabilities : undefined))) if (asked[k] === true) agreed[k] = true;
  }
  const perUpstreamSubs = new Map<string, string[]>();
  const agreedSubs: string[] = [];
  for (const uri of subs) {
    const t = splitUri(fc.cfg.upstreams, uri);
    if (!t) continue;
    agreedSubs.push(uri);
    perUpstreamSubs.set(t.up.name, [...(perUpstreamSubs.get(t.up.name) ?? []), t.uri]);
  }
  if (agreedSubs.length) agreed.resourceSubscriptions = agreedSubs;
  // A hot reload of the config changes tool lists whatever the upstreams can announce (live-config.ts).
  if (asked.toolsListChanged === true) agreed.toolsListChanged = true;

  const s = sseStream();
  const abort = new AbortController();
  req.signal.addEventListener("abort", () => abort.abort(), { once: true });
  const tag = (n: JsonRpcNotification): JsonRpcNotification => ({
    ...n,
    params: { ...(n.params ?? {}), _meta: { ...(isObject(n.params?._meta) ? n.params._meta : {}), [META.subscriptionId]: msg.id } },
  });
  const send = async (n: JsonRpcNotification) => {
    if (abort.signal.aborted) return; // the client left or the grant ended
    if (!(await s.write(encodeEvent({ data: JSON.stringify(tag(n)) })))) abort.abort();
  };
  // Task status reaches only the principal that created the task, under the id it knows (task-owners.ts).
  const tasks = taskObject(fc.env, fc.principal.sub);
  const wanted = async (n: JsonRpcNotification, up: UpstreamConfig): Promise<JsonRpcNotification | null> => {
    const t = TYPE_OF[n.method];
    if (t) return agreed[t] === true ? n : null;
    if (n.method === "notifications/resources/updated" && isObject(n.params) && typeof n.params.uri === "string") {
      const uri = exposeUri(up, n.params.uri);
      return agreedSubs.includes(uri) ? { ...n, params: { ...n.params, uri } } : null;
    }
    if (n.method === "notifications/tasks") return ownTaskNotification(tasks, up, n);
    return null;
  };
  // Not awaited: the stream has no reader until the Response is returned.
  const acked = send({ jsonrpc: "2.0", method: "notifications/subscriptions/acknowledged", params: { notifications: agreed } });

  const pumps = recs.map(async ([up, rec]) => {
    await acked;
    const leg = "leg" in rec ? rec.leg : undefined;
    if (!leg) return;
    let frames: AsyncGenerator<Frame> | null = null;
    if (leg.era === "modern") {
      const notifications: JsonObject = {};
      for (const k of ["toolsListChanged", "promptsListChanged", "resourcesListChanged"]) if (agreed[k] === true) notifications[k] = true;
      const mine = perUpstreamSubs.get(up.name);
      if (mine?.length) notifications.resourceSubscriptions = mine;
      if (Object.keys(notifications).length === 0) return;
      // The client's `portcullis/` `_meta` keys stay here: that namespace is the gateway's.
      const params: JsonObject = { ...(withoutGatewayMeta(msg.params) ?? {}), notifications };
      frames = requestUpstream(
        up,
        leg,
        { jsonrpc: "2.0", id: upstreamRequestId(), method: "subscriptions/listen", params },
        { signal: abort.signal, stream: true },
      );
    } else {
      frames = await openGetStream(up, leg, abort.signal).catch(() => null);
    }
    if (!frames) return;
    try {
      for await (const f of frames) {
        if (!isNotification(f.message) || f.message.method === "notifications/subscriptions/acknowledged") continue;
        noteNotification(up.name, f.message.method);
        const n = await wanted(f.message, up);
        if (n) await send(n);
      }
    } catch {
      // upstream stream ended or the client left
    }
  });
  // A hot reload (a new live config version) changes the tool list: tell the client once acked.
  watchConfigVersion(fc.env, abort.signal, async () => {
    await acked;
    await send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
  });
  holdOpen(fc, s, abort, pumps);
  return new Response(s.readable, { status: 200, headers: SSE_HEADERS });
}
