/**
 * The kill switch's JSON API: `GET /v1/killswitch` (auditor, approver, operator, admin) answers
 * the real state `{version, halts}` read from KillSwitchDO, or 503 with the reason it could not
 * be read; `POST /v1/killswitch/halt` and `/v1/killswitch/resume` with `{scope, target?, reason}`
 * (admin) change it — the `killswitch.changed` ledger record is durable before the 200 — and
 * answer the new state. Owns body validation for both. Must never: answer a state it did not
 * read (no "unknown", no default), or take the actor from anything but the verified grant.
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { type HaltScopeName, type KillSwitchSnapshot, killSwitchChangeProblem } from "../../durable-objects/contract-killswitch.ts";
import { changeKillSwitch, killSwitchStatus } from "../ports/killswitch-client.ts";
import { readJsonBody } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import { type AppEnv, gate } from "./gate.ts";

export const killSwitchRoutes = new Hono<AppEnv>();

const readers = gate({ path: "/", role: ["auditor", "approver", "operator", "admin"], allowActor: false });
const admin = gate({ path: "/", role: "admin", allowActor: false });

const NO_STORE = { "cache-control": "no-store" };
const ERRORS: Record<number, string> = { 400: "invalid_request", 403: "insufficient_scope", 503: "unavailable" };
const bad = (message: string, status: number) => jsonResponse({ error: ERRORS[status] ?? "error", error_description: message }, status, NO_STORE);

/** What the API answers for a state: the version and every halt with its reason, actor and time. */
export function stateBody(s: KillSwitchSnapshot, changed?: boolean) {
  return {
    ...(changed === undefined ? {} : { changed }),
    version: s.version,
    halted: s.halts.length > 0,
    halts: s.halts.map((h) => ({ scope: h.scope, target: h.target, reason: h.reason, by: h.by, at: new Date(h.at).toISOString() })),
  };
}

killSwitchRoutes.get("/v1/killswitch", readers, async (c) => {
  const r = await killSwitchStatus(c.env);
  return r.ok ? jsonResponse(stateBody(r.snapshot), 200, NO_STORE) : bad(r.message, r.status);
});

async function change(c: Context<AppEnv>, action: "halt" | "resume"): Promise<Response> {
  const read = await readJsonBody(c.req.raw);
  if (read instanceof Response) return read;
  const b = read.value;
  if (b === null || typeof b !== "object" || Array.isArray(b)) return bad(`the body must be a JSON object {scope, target?, reason}`, 400);
  const body = b as Record<string, unknown>;
  const unknown = Object.keys(body).filter((k) => k !== "scope" && k !== "target" && k !== "reason");
  if (unknown.length) return bad(`unknown field${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")}: the body is {scope, target?, reason}`, 400);
  const target = body.target === undefined ? null : body.target;
  const problem = killSwitchChangeProblem(body.scope, target, body.reason);
  if (problem) return bad(problem, 400);
  const r = await changeKillSwitch(c.env, c.var.cfg, c.var.principal, action, body.scope as HaltScopeName, target as string | null, body.reason as string);
  return r.ok ? jsonResponse(stateBody(r.snapshot, r.changed), 200, NO_STORE) : bad(r.message, r.status);
}

killSwitchRoutes.post("/v1/killswitch/halt", admin, (c) => change(c, "halt"));
killSwitchRoutes.post("/v1/killswitch/resume", admin, (c) => change(c, "resume"));
