/**
 * Runs and rollback ([R]), the service every surface calls (REST `src/routes/runs-api.ts`, the
 * operator tools, the CLI through REST; the console run page should call `runDetail` and
 * `rollbackRun` too): the run views are ./run-records.ts (read from the ledger alone) and the
 * rollback execution ./run-rollback.ts, imported from there; here: `validateMapping`, a mapping file checked
 * as the loader checks it and then against the upstream's own tools/list; and the run agent tools
 * on /mcp (`agentRunTool`: plans, dry runs, traces and mapping checks of the caller's own runs).
 * Who may see which run: an agent its own runs only (another principal's run is "not found"); an
 * operator, auditor or approver its team's; an admin any team's (`team`).
 * Must never: read a store other than the ledger to build a run, show an agent tool another
 * principal's run, or execute a compensation from an agent tool (a dry run calls nothing).
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import { formatMappingPath, parseMappingFile } from "../config/mapping-schema.ts";
import type { Principal } from "../config/principal.ts";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { grantAllowsTool, toolAllowed } from "../governance/grant-scope.ts";
import { isObject, type JsonObject, type JsonRpcRequest } from "../wire/jsonrpc.ts";
import type { CallContext, Outcome } from "../protocol/call-context.ts";
import { exposeName } from "../protocol/exposed-names.ts";
import { rollbackRun, upstreamToolNames } from "./run-rollback.ts";
import { listRuns, runDetail, type RunsResult } from "./run-records.ts";

export interface MappingValidation {
  upstream: string;
  valid: boolean;
  /** Every problem: the schema's (fields, references) and, when the tool list could be read, each unknown tool. */
  problems: string[];
  /** Whether the upstream's tools/list was read whole (tool names were checked against it). */
  tools_checked: boolean;
}

/**
 * `portcullis.validate_mapping`: a mapping file's contents for `upstream`, checked as the loader
 * checks them (src/config/mapping-schema.ts: shape, references), then — the catalog being known
 * here, unlike at load — each mapped tool, compensation tool and read-back tool against the
 * upstream's own tools/list. Changes nothing.
 */
export async function validateMapping(
  ctx: CallContext,
  cfg: GatewayConfig,
  upstream: string,
  raw: unknown,
  /** For an agent: only the tools its grant may see count as offered (it learns nothing of the others). */
  visibleTo?: Principal,
): Promise<RunsResult<MappingValidation>> {
  const up = cfg.upstreams.find((u) => u.name === upstream);
  if (!up) return { ok: false, status: 404, message: `no upstream is named ${upstream}` };
  const where = `mappings/${upstream}.yaml`;
  const parsed = parseMappingFile(raw, where);
  if (parsed.problems.length) return { ok: true, value: { upstream, valid: false, problems: parsed.problems, tools_checked: false } };
  const all = await upstreamToolNames(ctx, up).catch(() => null);
  const names = all && visibleTo ? new Set([...all].filter((n) => toolAllowed(up, n) && grantAllowsTool(visibleTo, exposeName(up, n)))) : all;
  const problems: string[] = [];
  if (names) {
    for (const tool of Object.keys(parsed.tools)) {
      const at = formatMappingPath(where, ["tools", tool]);
      // A compensation's tools are mapped tools of this file (checked at load), so each is checked here as itself.
      if (!names.has(tool)) problems.push(`${at}: upstream ${upstream} offers no tool ${tool}`);
    }
  }
  return { ok: true, value: { upstream, valid: problems.length === 0, problems, tools_checked: names !== null } };
}

const AGENT_ARGS: Record<string, readonly string[]> = {
  "portcullis.list_runs": ["limit"],
  "portcullis.get_run": ["run"],
  "portcullis.get_action_trace": ["id"],
  "portcullis.plan_rollback": ["run"],
  "portcullis.dry_run_rollback": ["run"],
  "portcullis.validate_mapping": ["upstream", "mapping"],
};

/**
 * The run agent tools on /mcp (src/front/agent-tools.ts RUN_TOOLS): about the caller's own runs
 * only — whatever its roles, an agent tool never shows another principal's run (it is "not
 * found") — and nothing executed: plans and dry runs call no upstream; validate_mapping lists tools.
 */
export async function agentRunTool(ctx: CallContext, msg: JsonRpcRequest): Promise<Outcome> {
  const name = String(msg.params?.name);
  const answer = (result: JsonObject): Outcome => ({ response: { jsonrpc: "2.0", id: msg.id, result }, status: 200 });
  const fail = (text: string) => answer({ content: [{ type: "text", text: `${name}: ${text}` }], isError: true });
  const ok = (v: unknown) => answer({ content: [{ type: "text", text: JSON.stringify(v) }], structuredContent: v as JsonObject });
  const args = msg.params?.arguments ?? {};
  if (!isObject(args)) return fail("arguments must be an object");
  const allowed = AGENT_ARGS[name] ?? [];
  for (const k of Object.keys(args)) if (!allowed.includes(k)) return fail(`unknown argument ${k} (allowed: ${allowed.join(", ") || "none"})`);
  const env = ctx.stores.ledgerEnv?.();
  if (!env) return fail("runs cannot be read on this route");
  const me = ctx.principal;
  const own = { principal: me.sub };
  const result = <T>(r: RunsResult<T>, pick: (v: T) => unknown = (v) => v) => (r.ok ? ok(pick(r.value)) : fail(r.message));
  const run = typeof args.run === "string" ? args.run : null;
  switch (name) {
    case "portcullis.list_runs": {
      if (args.limit !== undefined && (typeof args.limit !== "number" || !Number.isInteger(args.limit) || args.limit < 1 || args.limit > 500))
        return fail("limit must be a whole number from 1 to 500");
      return result(await listRuns(env, me, { ...own, ...(typeof args.limit === "number" ? { limit: args.limit } : {}) }), (runs) => ({ runs }));
    }
    case "portcullis.get_run":
      return run === null ? fail("run must be the run id (a string)") : result(await runDetail(env, me, run, own));
    case "portcullis.plan_rollback":
      return run === null ? fail("run must be the run id (a string)") : result(await runDetail(env, me, run, own), (d) => d.plan);
    case "portcullis.dry_run_rollback":
      return run === null
        ? fail("run must be the run id (a string)")
        : result(await rollbackRun({ env, cfg: ctx.cfg, caller: me, callContext: () => ctx }, run, { confirm: false, approveCompensations: false, ...own }));
    case "portcullis.get_action_trace": {
      const id = args.id;
      if (typeof id !== "string" || !/^[A-Za-z0-9-]{8,64}$/.test(id)) return fail("id must be a decision id (the receipt's decision_id)");
      const ledger = ledgerObject(env, me.team);
      let records: Awaited<ReturnType<NonNullable<typeof ledger>["traceCall"]>> = [];
      try {
        records = ledger ? await ledger.traceCall(id) : [];
      } catch (e) {
        return fail(`the ledger could not be read (${(e as Error).message})`);
      }
      const decision = records.find((r) => r.kind === "decision" && r.id === id);
      if (!decision || decision.body.principal !== me.sub) return fail(`no call ${id} of yours`);
      return ok({ id, records });
    }
    case "portcullis.validate_mapping":
      if (typeof args.upstream !== "string") return fail("upstream must be an upstream's name");
      return result(await validateMapping(ctx, ctx.cfg, args.upstream, args.mapping, me));
  }
  return fail("unknown run tool");
}
