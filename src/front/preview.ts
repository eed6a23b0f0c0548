/**
 * Previews for the operator endpoint and `POST /v1/preview` — the verdict the governed path would
 * give one principal's call (governance/call.ts previewToolCall), computed in a 2026-07-28 call
 * context of that principal — its catalog, its history — with nothing executed, recorded or
 * changed — and the classification banner of the upstreams (`portcullis.classify`). Owns building
 * that context. Must never: forward the call, write history or the ledger,
 * or let a caller preview for another principal without the route having checked its role.
 */
import { isObject, type JsonObject, type JsonRpcRequest } from "../wire/jsonrpc.ts";
import { type Preview, previewToolCall } from "../governance/call-decide.ts";
import type { FrontContext } from "../protocol/call-context.ts";
import { governance } from "./governance-ports.ts";
import { modernContext } from "./modern.ts";
import { allPages } from "./aggregate.ts";
import { catalogEntry, type CatalogTool } from "../governance/catalog-entry.ts";
import { type Banner, classificationBanner, classifyTool } from "../governance/classify.ts";
import { compiledPolicy, mappingsOf } from "../governance/engine.ts";
import { type ToolPolicy, toolPolicy } from "../governance/policy-view.ts";
import { toolAllowed } from "../governance/grant-scope.ts";
import { exposeName } from "../protocol/exposed-names.ts";
import { modernMeta } from "../upstream/client.ts";
import type { Unavailable } from "../upstream/unavailable.ts";

/** What `fc.principal`'s call of `name` with `args` would get. */
export async function previewFor(fc: FrontContext, req: Request, name: string, args: JsonObject | undefined): Promise<Preview> {
  const msg: JsonRpcRequest = { jsonrpc: "2.0", id: "portcullis-preview", method: "tools/call", params: { name, ...(args ? { arguments: args } : {}) } };
  const ctx = modernContext(fc, req, msg, null, async () => undefined);
  return previewToolCall(governance(ctx), { principal: fc.principal, era: "modern", request: msg, exposedName: name, arguments: args, runId: null });
}

/**
 * The classification banner (OK / NOTE / WARN / BLOCK per tool, with totals) of every upstream
 * `fc.principal` reaches, from each upstream's own tools/list as a 2026-07-28 client of it reads
 * it — what `portcullis classify` prints, served by the gateway (operator tool) — with the
 * upstreams whose list could not be read whole (`unlisted`) and why each gave no answer
 * (`unavailable`). Lists nothing to the ledger and changes nothing.
 */
export async function classificationOf(
  fc: FrontContext,
  req: Request,
): Promise<{ banner: Banner; unlisted: string[]; unavailable: Unavailable[]; policies: ToolPolicy[] }> {
  // A 2026-07-28 request carries its protocol metadata itself (modern legs add none).
  const msg: JsonRpcRequest = { jsonrpc: "2.0", id: "portcullis-classify", method: "tools/list", params: { _meta: modernMeta({}) } };
  const ctx = modernContext(fc, req, msg, null, async () => undefined);
  const unlisted: string[] = [];
  const unavailable: Unavailable[] = [];
  const tools: { upstream: string; tool: CatalogTool; up: (typeof fc.cfg.upstreams)[number] }[] = [];
  await Promise.all(
    fc.cfg.upstreams.map(async (up) => {
      const pages = await allPages(ctx, up, msg, "tools", (i) => i).catch(() => null);
      if (!pages?.complete) unlisted.push(up.name);
      if (pages?.failure) unavailable.push(pages.failure);
      for (const item of pages?.items ?? []) {
        if (!isObject(item) || typeof item.name !== "string" || !toolAllowed(up, item.name)) continue;
        const entry = catalogEntry(item, exposeName(up, item.name));
        if (entry) tools.push({ upstream: up.name, tool: entry, up });
      }
    }),
  );
  tools.sort((a, b) => a.tool.exposedName.localeCompare(b.tool.exposedName));
  const mappings = mappingsOf(fc.cfg);
  // Beside each tool's classification, what the policy makes of it (the mapping alone does not decide).
  const policy = compiledPolicy(fc.cfg);
  const policies = tools.map((t) =>
    toolPolicy(policy, {
      exposedName: t.tool.exposedName,
      upstream: t.upstream,
      tool: t.tool.name,
      classification: classifyTool({ upstream: t.up, tool: t.tool }, mappings),
      mapping: mappings.get(t.upstream, t.tool.name),
      annotations: t.tool.annotations,
    }),
  );
  unavailable.sort((a, b) => a.upstream.localeCompare(b.upstream));
  return { banner: classificationBanner(tools, mappings), unlisted: unlisted.sort(), unavailable, policies };
}
