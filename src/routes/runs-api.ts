/**
 * The runs JSON API, as a Hono sub-app mounted at "/" by src/index.ts: `GET /v1/runs?principal=&team=&limit=`,
 * `GET /v1/runs/:id?principal=&team=` (the run's steps and its rollback plan) and
 * `POST /v1/runs/:id/rollback {confirm?, approve_compensations?, principal?, team?}` (a dry run
 * unless `confirm: true`). An agent grant reads and dry-runs its own runs; executing needs the
 * operator (or admin) role. Owns only the HTTP shape — query and body parsing, 400s with a
 * readable error, the service's statuses as HTTP statuses; who sees and undoes what is
 * src/services/runs.ts. Must never: take the caller's identity from the body, or run unauthenticated.
 */
import { Hono } from "hono";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { Env } from "../env.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { modernContext } from "../front/modern.ts";
import { listRuns, runDetail, type RunsResult } from "../services/run-records.ts";
import { type RollbackContext, rollbackRun } from "../services/run-rollback.ts";
import { modernMeta } from "../upstream/client.ts";
import { readBodyText } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import { type AppEnv, gate, waitUntilOf } from "./gate.ts";

export const runsRoutes = new Hono<AppEnv>();

/** Where `caller`'s rollback runs: its 2026-07-28 call context (upstream legs) made from its request, only when a compensation is about to run. */
export function rollbackContext(env: Env, cfg: GatewayConfig, caller: Principal, req: Request, waitUntil: (p: Promise<unknown>) => void): RollbackContext {
  return {
    env,
    cfg,
    caller,
    callContext: () =>
      modernContext(
        { env, cfg, principal: caller, gateway: canonicalUrl(cfg), waitUntil },
        req,
        { jsonrpc: "2.0", id: "portcullis-rollback", method: "tools/call", params: { name: "", _meta: modernMeta({}) } },
        null,
        async () => undefined,
      ),
  };
}

const readers = gate({ path: "/", role: ["agent", "auditor", "approver", "operator", "admin"], allowActor: false });

const MAX_BODY = 16 * 1024;
const bad = (error: string) => jsonResponse({ error }, 400);

function answer<T>(r: RunsResult<T>, wrap: (v: T) => unknown): Response {
  return r.ok ? jsonResponse(wrap(r.value), 200, { "cache-control": "no-store" }) : jsonResponse({ error: r.message }, r.status);
}

const opt = (v: string | undefined) => (v === undefined || v === "" ? {} : { value: v });

runsRoutes.get("/v1/runs", readers, async (c) => {
  const limitText = c.req.query("limit");
  if (limitText !== undefined && (!/^\d{1,3}$/.test(limitText) || Number(limitText) < 1)) return bad("limit must be a whole number from 1 to 500");
  const principal = opt(c.req.query("principal")).value;
  const team = opt(c.req.query("team")).value;
  const r = await listRuns(c.env, c.var.principal, {
    ...(principal !== undefined ? { principal } : {}),
    ...(team !== undefined ? { team } : {}),
    ...(limitText !== undefined ? { limit: Number(limitText) } : {}),
  });
  return answer(r, (runs) => ({ runs }));
});

runsRoutes.get("/v1/runs/:id", readers, async (c) => {
  const principal = opt(c.req.query("principal")).value;
  const team = opt(c.req.query("team")).value;
  const r = await runDetail(c.env, c.var.principal, c.req.param("id"), {
    ...(principal !== undefined ? { principal } : {}),
    ...(team !== undefined ? { team } : {}),
  });
  return answer(r, (v) => v);
});

runsRoutes.post("/v1/runs/:id/rollback", readers, async (c) => {
  const read = await readBodyText(c.req.raw, MAX_BODY);
  if (!read.ok)
    return jsonResponse(
      { error: read.reason === "timeout" ? "the body did not arrive in time" : `the body is over ${MAX_BODY} bytes` },
      read.reason === "timeout" ? 408 : 413,
    );
  let body: unknown = {};
  if (read.text.trim() !== "") {
    try {
      body = JSON.parse(read.text);
    } catch {
      return bad('the body is not JSON; send {"confirm": true} to execute, or {} for a dry run');
    }
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return bad("the body must be a JSON object {confirm?, approve_compensations?, principal?, team?}");
  const { confirm, approve_compensations: approve, principal, team, ...rest } = body as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return bad(`unknown field ${JSON.stringify(extra[0]!.slice(0, 40))} (allowed: confirm, approve_compensations, principal, team)`);
  if (confirm !== undefined && typeof confirm !== "boolean") return bad("confirm must be true or false");
  if (approve !== undefined && typeof approve !== "boolean") return bad("approve_compensations must be true or false");
  if (principal !== undefined && typeof principal !== "string") return bad("principal must be a string");
  if (team !== undefined && typeof team !== "string") return bad("team must be a string");
  const r = await rollbackRun(rollbackContext(c.env, c.var.cfg, c.var.principal, c.req.raw, waitUntilOf(c)), c.req.param("id"), {
    confirm: confirm === true,
    approveCompensations: approve === true,
    ...(typeof principal === "string" ? { principal } : {}),
    ...(typeof team === "string" ? { team } : {}),
  });
  return answer(r, (v) => v);
});
