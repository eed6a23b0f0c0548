/**
 * The holds JSON API for approvers, as a Hono sub-app mounted at "/" by src/index.ts:
 * `GET /v1/holds?status=&team=&limit=` and `GET /v1/holds/:id` (approver, auditor, operator,
 * admin) and `POST /v1/holds/:id/resolve {decision: "approve"|"reject", reason, action_hash?}`
 * (approver, admin). Owns only the HTTP shape — query and body parsing, 400s with a readable
 * error, the service's status codes as HTTP statuses; who sees and who resolves what is
 * src/services/approvals.ts. Answers: `{holds: [HoldView…]}` and a HoldView
 * `{hold, resolvable, why?, url}`; failures `{error}`. Must never: take the approver's identity
 * from the body (only the gate's verified principal), or run unauthenticated (no actor, loopback too).
 */
import { Hono } from "hono";
import { getHold, type HoldsResult, holdStateFilter, listHolds, resolveHold } from "../services/approvals.ts";
import { readBodyText } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import { type AppEnv, gate, waitUntilOf } from "./gate.ts";

export const holdsRoutes = new Hono<AppEnv>();

const readers = gate({ path: "/", role: ["approver", "auditor", "operator", "admin"], allowActor: false });
const resolvers = gate({ path: "/", role: ["approver", "admin"], allowActor: false });

const MAX_BODY = 16 * 1024;
const bad = (error: string) => jsonResponse({ error }, 400);

function answer<T>(r: HoldsResult<T>, wrap: (v: T) => unknown): Response {
  return r.ok ? jsonResponse(wrap(r.value), 200, { "cache-control": "no-store" }) : jsonResponse({ error: r.message }, r.status);
}

holdsRoutes.get("/v1/holds", readers, async (c) => {
  const state = holdStateFilter(c.req.query("status") ?? c.req.query("state"));
  if (!state.ok) return bad(state.message);
  const team = c.req.query("team");
  const limitText = c.req.query("limit");
  let limit: number | undefined;
  if (limitText !== undefined) {
    if (!/^\d{1,4}$/.test(limitText) || Number(limitText) < 1) return bad("limit must be a whole number from 1 to 500");
    limit = Number(limitText);
  }
  const r = await listHolds(c.env, c.var.cfg, c.var.principal, { state: state.state, ...(team ? { team } : {}), ...(limit !== undefined ? { limit } : {}) });
  return answer(r, (holds) => ({ holds }));
});

holdsRoutes.get("/v1/holds/:id", readers, async (c) => answer(await getHold(c.env, c.var.cfg, c.var.principal, c.req.param("id")), (v) => v));

holdsRoutes.post("/v1/holds/:id/resolve", resolvers, async (c) => {
  const read = await readBodyText(c.req.raw, MAX_BODY);
  if (!read.ok)
    return jsonResponse(
      { error: read.reason === "timeout" ? "the body did not arrive in time" : `the body is over ${MAX_BODY} bytes` },
      read.reason === "timeout" ? 408 : 413,
    );
  let body: unknown;
  try {
    body = JSON.parse(read.text);
  } catch {
    return bad('the body is not JSON; send {"decision": "approve"|"reject", "reason": "…"}');
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return bad('the body must be a JSON object {"decision": "approve"|"reject", "reason": "…"}');
  const { decision, reason, action_hash: hash, ...rest } = body as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return bad(`unknown field ${JSON.stringify(extra[0]!.slice(0, 40))} (allowed: decision, reason, action_hash)`);
  if (decision !== "approve" && decision !== "reject")
    return bad(`decision must be "approve" or "reject"${decision === undefined ? "" : `, not ${JSON.stringify(decision).slice(0, 40)}`}`);
  if (reason !== undefined && typeof reason !== "string") return bad("reason must be a string");
  if (hash !== undefined && hash !== null && typeof hash !== "string") return bad("action_hash must be a string");
  const r = await resolveHold(
    c.env,
    c.var.cfg,
    c.var.principal,
    c.req.param("id"),
    decision,
    reason ?? "",
    typeof hash === "string" ? hash : null,
    waitUntilOf(c),
  );
  return answer(r, (v) => v);
});
