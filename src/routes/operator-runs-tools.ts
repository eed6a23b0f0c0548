/**
 * Runs and rollback as operator tools on /operator/mcp ([R]): `portcullis.list_runs`,
 * `portcullis.get_run`, `portcullis.get_action_trace`, `portcullis.plan_rollback`,
 * `portcullis.dry_run_rollback` (operator, auditor, approver, admin: the team's runs; admin any
 * team), `portcullis.execute_rollback` and `portcullis.validate_mapping` (operator, admin), each through the same service as
 * `/v1/runs` (src/services/runs.ts). Must never: take the actor from the arguments (it is the caller's
 * grant), or execute anything from a tool other than execute_rollback.
 */
import { validateMapping } from "../services/runs.ts";
import { listRuns, runDetail, type RunsResult } from "../services/run-records.ts";
import { rollbackRun } from "../services/run-rollback.ts";
import type { JsonObject } from "../wire/jsonrpc.ts";
import { traceRoute } from "./ledger-api.ts";
import { type OperatorContext, registerOperatorTool } from "./operator-registry.ts";
import { rollbackContext } from "./runs-api.ts";

const READERS = ["operator", "auditor", "approver", "admin"] as const;

function value<T>(r: RunsResult<T>): JsonObject {
  if (!r.ok) throw new Error(r.message);
  return r.value as unknown as JsonObject;
}

const s = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
const who = (args: JsonObject) => {
  const principal = s(args.principal);
  const team = s(args.team);
  return { ...(principal !== undefined ? { principal } : {}), ...(team !== undefined ? { team } : {}) };
};
const runArgs: JsonObject = {
  type: "object",
  properties: {
    run: { type: "string", minLength: 1, maxLength: 128, description: "the run id (legacy session id or Portcullis-Run-Id)" },
    principal: { type: "string", description: "the run's principal, when several used the same id" },
    team: { type: "string", description: "admin only: another team's chain" },
  },
  required: ["run"],
  additionalProperties: false,
};

registerOperatorTool({
  name: "portcullis.list_runs",
  description:
    "The team's runs (a legacy session or a Portcullis-Run-Id of one principal), newest first, from the ledger: principal, steps, first and last time.",
  inputSchema: {
    type: "object",
    properties: { principal: { type: "string" }, team: { type: "string" }, limit: { type: "integer", minimum: 1, maximum: 500 } },
    additionalProperties: false,
  },
  roles: [...READERS],
  run: async (args, { env, principal }) => ({
    runs: value(await listRuns(env, principal, { ...who(args), ...(typeof args.limit === "number" ? { limit: args.limit } : {}) })) as unknown as JsonObject[],
  }),
});

registerOperatorTool({
  name: "portcullis.get_run",
  description: "One run rebuilt from the ledger: each step's tool, outcome, recorded compensation and rollback state, and the rollback plan.",
  inputSchema: runArgs,
  roles: [...READERS],
  run: async (args, { env, principal }) => value(await runDetail(env, principal, String(args.run), who(args))),
});

registerOperatorTool({
  name: "portcullis.plan_rollback",
  description:
    "What rolling a run back would do: the compensations newest first (tool, arguments, read-back; each step's idempotency key is derived only when it runs), which need approval, which steps cannot be undone and why, which are already undone. Calls nothing.",
  inputSchema: runArgs,
  roles: [...READERS],
  run: async (args, { env, principal }) => {
    const d = value(await runDetail(env, principal, String(args.run), who(args)));
    return d.plan as JsonObject;
  },
});

registerOperatorTool({
  name: "portcullis.get_action_trace",
  description: "Every ledger record of one step of a run (its decision, outcome, holds and rollback steps) by its decision id.",
  inputSchema: { type: "object", properties: { id: { type: "string" }, team: { type: "string" } }, required: ["id"], additionalProperties: false },
  roles: [...READERS],
  run: async (args, { env, principal }) => {
    const r = await traceRoute(env, principal, String(args.id), s(args.team) ?? null);
    const body = (await r.json()) as JsonObject;
    if (!r.ok) throw new Error(typeof body.error === "string" ? body.error : `HTTP ${r.status}`);
    return body;
  },
});

const rollbackCtx = (ctx: OperatorContext) => rollbackContext(ctx.env, ctx.cfg, ctx.principal, ctx.req, (p) => void p.catch(() => undefined));

registerOperatorTool({
  name: "portcullis.dry_run_rollback",
  description: "A rollback's dry run: each compensation it would call, in order, and which would be skipped for want of approval. Reaches no upstream.",
  inputSchema: { ...runArgs, properties: { ...(runArgs.properties as JsonObject), approve_compensations: { type: "boolean" } } },
  roles: [...READERS],
  run: async (args, ctx) =>
    value(await rollbackRun(rollbackCtx(ctx), String(args.run), { confirm: false, approveCompensations: args.approve_compensations === true, ...who(args) })),
});

registerOperatorTool({
  name: "portcullis.execute_rollback",
  description:
    "Rolls a run back: each compensation on its upstream, newest first, up to 3 attempts, with an idempotency key per step (a repeated rollback never compensates twice), then its read-back (verified | verification_failed | unverified). Every step is a ledger record. approve_compensations: true also runs compensations whose mapping requires approval.",
  inputSchema: { ...runArgs, properties: { ...(runArgs.properties as JsonObject), approve_compensations: { type: "boolean" } } },
  roles: ["operator", "admin"],
  run: async (args, ctx) =>
    value(await rollbackRun(rollbackCtx(ctx), String(args.run), { confirm: true, approveCompensations: args.approve_compensations === true, ...who(args) })),
});

registerOperatorTool({
  name: "portcullis.validate_mapping",
  description:
    "Checks a mapping file's contents ({tools: …}) for a configured upstream: every field and compensation reference, as the loader does, and — from the upstream's own tools/list, which the loader cannot read — that each mapped tool, compensation tool and read-back tool exists. Changes nothing.",
  inputSchema: {
    type: "object",
    properties: { upstream: { type: "string", minLength: 1, maxLength: 31 }, mapping: { type: "object", description: "the mapping file's contents, as JSON" } },
    required: ["upstream", "mapping"],
    additionalProperties: false,
  },
  roles: ["operator", "admin"],
  run: async (args, ctx) => value(await validateMapping(rollbackCtx(ctx).callContext(), ctx.cfg, String(args.upstream), args.mapping)),
});
