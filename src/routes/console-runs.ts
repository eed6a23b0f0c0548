/**
 * The console's run pages ([R]), mounted by src/routes/console.ts: `/console/runs` (the runs the
 * viewer may see; admins pick a team), `/console/runs/:id` (its steps, their compensation,
 * rollback state and read-back, and the rollback plan), `POST …/dry-run` (calls nothing) and
 * `POST …/rollback` (operators and admins, confirm required) through src/services/runs.ts. Must never:
 * run a rollback without the operator role, the confirm box, the Origin and the CSRF token, or
 * show a run of another team.
 */
import { Hono } from "hono";
import { principalHas } from "../config/principal.ts";
import { RunPage, type RunScope, RunsPage, runPath } from "../console/runs-page.tsx";
import type { Notice } from "../console/layout.tsx";
import { htmlResponse, seeOther } from "../console/render.ts";
import { listRuns, runDetail } from "../services/run-records.ts";
import { type RollbackReport, rollbackRun } from "../services/run-rollback.ts";
import { requestConfig } from "./config-view.ts";
import { type C, type ConsoleEnv, errorPage, postedForm, signedIn, unavailable, waitUntil } from "./console-gate.ts";
import { rollbackContext } from "./runs-api.ts";

export const consoleRunsRoutes = new Hono<ConsoleEnv>();

// ---- runs ----------------------------------------------------------------------------------------

const MAX_SCOPE = 200;

/** The run's principal and team, from the query or a form (empty means unset); null when one is too long. */
function scopeOf(get: (k: string) => string | null | undefined): RunScope | null {
  const scope: RunScope = {};
  for (const k of ["principal", "team"] as const) {
    const v = (get(k) ?? "").trim();
    if (v.length > MAX_SCOPE) return null;
    if (v !== "") scope[k] = v;
  }
  return scope;
}

const ROLLED_BACK = /^\d{1,4}$/;

/** What the rollback redirect's query says ran (the steps' states themselves come from the ledger). */
function rolledBackNotice(c: C): Notice | null {
  const done = c.req.query("rolled_back");
  const left = c.req.query("remaining");
  if (done === undefined || left === undefined || !ROLLED_BACK.test(done) || !ROLLED_BACK.test(left)) return null;
  const text = `Rollback executed: ${done} step${done === "1" ? "" : "s"} compensated; ${left === "0" ? "nothing remains" : `${left} remain${left === "1" ? "s" : ""} (see each step's state)`}. Every step is on the ledger.`;
  return { kind: left === "0" ? "good" : "error", text };
}

async function runPage(c: C, run: string, scope: RunScope, status: number, notice: Notice | null, dryRun: RollbackReport | null): Promise<Response> {
  const r = await runDetail(c.env, c.var.principal, run, scope);
  if (!r.ok)
    return errorPage(c.var.viewer, r.status, r.status === 404 ? "Run not found" : "Run", notice ? `${notice.text} (${r.message})` : r.message, {
      href: "/console/runs",
      label: "← Runs",
    });
  // The forms post back the run's own principal, so a run of several principals stays the one shown.
  const formScope: RunScope = { principal: r.value.run.principal, ...(scope.team !== undefined ? { team: scope.team } : {}) };
  const operator = principalHas(c.var.principal, "operator");
  return htmlResponse(RunPage({ viewer: c.var.viewer, detail: r.value, scope: formScope, operator, notice, dryRun }), status);
}

consoleRunsRoutes.get("/console/runs", signedIn, async (c) => {
  const scope = scopeOf((k) => c.req.query(k));
  if (!scope) return errorPage(c.var.viewer, 400, "Bad request", `team is over ${MAX_SCOPE} characters`);
  try {
    const r = await listRuns(c.env, c.var.principal, { ...(scope.team !== undefined ? { team: scope.team } : {}), limit: 200 });
    if (!r.ok) return errorPage(c.var.viewer, r.status, "Runs", r.message, { href: "/console/runs", label: "← Runs" });
    return htmlResponse(
      RunsPage({ viewer: c.var.viewer, runs: r.value, team: scope.team ?? c.var.principal.team, admin: principalHas(c.var.principal, "admin") }),
    );
  } catch (e) {
    return unavailable(c.var.viewer, "the ledger", e);
  }
});

consoleRunsRoutes.get("/console/runs/:id", signedIn, async (c) => {
  const scope = scopeOf((k) => c.req.query(k));
  if (!scope) return errorPage(c.var.viewer, 400, "Bad request", `principal and team are at most ${MAX_SCOPE} characters`);
  try {
    return await runPage(c, c.req.param("id"), scope, 200, rolledBackNotice(c), null);
  } catch (e) {
    return unavailable(c.var.viewer, "the ledger", e);
  }
});

consoleRunsRoutes.post("/console/runs/:id/dry-run", signedIn, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  const run = c.req.param("id");
  const scope = scopeOf((k) => form.get(k));
  if (!scope) return errorPage(c.var.viewer, 400, "Bad request", `principal and team are at most ${MAX_SCOPE} characters`);
  try {
    // A dry run calls nothing: every console role may make one.
    const cfg = await requestConfig(c.env, c.var.cfg, c.req.raw);
    const r = await rollbackRun(rollbackContext(c.env, cfg, c.var.principal, c.req.raw, waitUntil(c)), run, {
      confirm: false,
      approveCompensations: false,
      ...scope,
    });
    if (!r.ok)
      return errorPage(c.var.viewer, r.status, r.status === 404 ? "Run not found" : "Dry run", r.message, {
        href: runPath(run, scope),
        label: "← Back to the run",
      });
    const n = r.value.steps.filter((s) => s.state === "would_run").length;
    const notice: Notice = { kind: "info", text: `Dry run: nothing was called. The rollback would call ${n} compensation${n === 1 ? "" : "s"}; see below.` };
    return await runPage(c, run, scope, 200, notice, r.value);
  } catch (e) {
    return unavailable(c.var.viewer, "the rollback service", e);
  }
});

consoleRunsRoutes.post("/console/runs/:id/rollback", signedIn, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  const run = c.req.param("id");
  const scope = scopeOf((k) => form.get(k));
  if (!scope) return errorPage(c.var.viewer, 400, "Bad request", `principal and team are at most ${MAX_SCOPE} characters`);
  const back = { href: runPath(run, scope), label: "← Back to the run" };
  if (!principalHas(c.var.principal, "operator")) return errorPage(c.var.viewer, 403, "Not allowed", "rolling a run back needs the operator role", back);
  if (form.get("confirm") !== "yes")
    return errorPage(c.var.viewer, 400, "Bad request", "tick the confirm box to roll back (the Dry run button shows what would run, calling nothing)", back);
  try {
    // Every upstream, marked with this request's loopback vantage (as the REST route's gate does): compensations bypass grant globs.
    const cfg = await requestConfig(c.env, c.var.cfg, c.req.raw);
    const r = await rollbackRun(rollbackContext(c.env, cfg, c.var.principal, c.req.raw, waitUntil(c)), run, {
      confirm: true,
      approveCompensations: form.get("approve_compensations") === "yes",
      ...scope,
    });
    if (!r.ok)
      return errorPage(c.var.viewer, r.status, r.status === 403 ? "Not allowed" : r.status === 404 ? "Run not found" : "Not rolled back", r.message, back);
    const done = r.value.steps.filter((s) => s.state === "compensated").length;
    return seeOther(runPath(run, scope, { rolled_back: String(done), remaining: String(r.value.remaining.length) }));
  } catch (e) {
    return unavailable(c.var.viewer, "the rollback service", e);
  }
});
