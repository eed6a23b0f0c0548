/**
 * Previews for the operator endpoint and `POST /v1/preview`: the verdict the governed path would
 * give one principal's call (governance/call.ts previewToolCall), computed in a 2026-07-28 call
 * context of that principal — its catalog, its history — with nothing executed, recorded or
 * changed. Owns building that context. Must never: forward the call, write history or the ledger,
 * or let a caller preview for another principal without the route having checked its role.
 */
import type { JsonObject, JsonRpcRequest } from "../wire/jsonrpc.ts";
import { type Preview, previewToolCall } from "../governance/call.ts";
import type { FrontContext } from "./context.ts";
import { governance } from "./dispatch.ts";
import { modernContext } from "./modern.ts";

/** What `fc.principal`'s call of `name` with `args` would get. */
export async function previewFor(fc: FrontContext, req: Request, name: string, args: JsonObject | undefined): Promise<Preview> {
  const msg: JsonRpcRequest = { jsonrpc: "2.0", id: "portcullis-preview", method: "tools/call", params: { name, ...(args ? { arguments: args } : {}) } };
  const ctx = modernContext(fc, req, msg, null, async () => undefined);
  return previewToolCall(governance(ctx), { principal: fc.principal, era: "modern", request: msg, exposedName: name, arguments: args, runId: null });
}
