/**
 * The console's status pages, as a Hono sub-app the console mounts: the overview (the last hour
 * from the ledger's metric rollups, held calls waiting, the kill switch) and the kill switch (its
 * state, its history from the ledger, and for an admin halt and resume behind a confirmation the
 * server requires). Owns the HTTP shape only: the metrics are ./metrics-api.ts's, holds the
 * approvals service's, the kill switch its client's. Must never: change the kill switch without
 * the admin role, the CSRF token and the confirmation, or show a state the switch did not report.
 */
import { Hono } from "hono";
import { HALT_SCOPES, type HaltScopeName } from "../../durable-objects/contract-killswitch.ts";
import { principalHas } from "../config/principal.ts";
import { type KillSwitchChangeRow, KillSwitchPage } from "../console/killswitch-page.tsx";
import type { Notice } from "../console/layout.tsx";
import { OverviewPage, overviewOf } from "../console/overview-page.tsx";
import { htmlResponse, seeOther } from "../console/render.ts";
import { GLOBAL_CHAIN, type KillSwitchBody } from "../ledger/records.ts";
import { changeKillSwitch, killSwitchStatus } from "../ports/killswitch-client.ts";
import { listHolds } from "../services/approvals.ts";
import { type C, type ConsoleEnv, errorPage, MAX_REASON, postedForm, signedIn, unavailable } from "./console-gate.ts";
import { metricsWindow } from "./metrics-api.ts";

export const consoleStatusRoutes = new Hono<ConsoleEnv>();

// ---- overview -------------------------------------------------------------------------------------

const OVERVIEW_MINUTES = 60;

consoleStatusRoutes.get("/console/overview", signedIn, async (c) => {
  const now = Date.now();
  const toMinute = Math.floor(now / 60_000);
  const fromMinute = toMinute - OVERVIEW_MINUTES + 1;
  const p = c.var.principal;
  const sees = principalHas(p, "auditor") || principalHas(p, "operator");
  const [metrics, holds, ks] = await Promise.all([
    sees ? metricsWindow(c.env, p, null, fromMinute, toMinute).catch(() => null) : Promise.resolve(null),
    listHolds(c.env, c.var.cfg, p, { state: "pending", limit: 500 }).catch(() => null),
    killSwitchStatus(c.env),
  ]);
  const m = metrics instanceof Response ? null : metrics;
  const pendingHolds = holds?.ok ? holds.value : null;
  return htmlResponse(
    OverviewPage({
      viewer: c.var.viewer,
      overview: m ? overviewOf(m.rows, fromMinute, toMinute) : null,
      metricsNote: sees
        ? "The metrics could not be read just now."
        : "Charts need an auditor, operator or admin grant; an approver sees the holds and the kill switch.",
      unavailable: m?.unavailable ?? [],
      pending: pendingHolds
        ? { count: pendingHolds.length, oldest: pendingHolds.length ? Math.min(...pendingHolds.map((h) => h.hold.createdAt)) : null }
        : null,
      halts: ks.ok ? { count: ks.snapshot.halts.length, scopes: [...new Set(ks.snapshot.halts.map((h) => h.scope))] } : null,
      now,
    }),
  );
});

// ---- kill switch --------------------------------------------------------------------------------

const CHANGED: Record<string, Notice> = {
  halt: { kind: "good", text: "Halted. The change is on the ledger and reaches every new call within a second." },
  resume: { kind: "good", text: "Resumed. The change is on the ledger." },
  none: { kind: "info", text: "Nothing changed: that scope was already in that state." },
};

/** The kill switch's last changes from the ledger (the `_global` chain's killswitch.changed records, as D1 holds them), newest first; null when D1 cannot be read. */
async function killSwitchHistory(env: ConsoleEnv["Bindings"], limit = 50): Promise<KillSwitchChangeRow[] | null> {
  try {
    const rows = await env.LEDGER_DB.prepare("SELECT at, body FROM ledger_entries WHERE chain = ? AND kind = ? ORDER BY seq DESC LIMIT ?")
      .bind(GLOBAL_CHAIN, "killswitch.changed", limit)
      .all<{ at: string; body: string }>();
    return rows.results.map((r) => {
      const b = JSON.parse(r.body) as Partial<KillSwitchBody>;
      return {
        at: r.at,
        action: String(b.action ?? "?"),
        scope: String(b.scope ?? "?"),
        target: typeof b.target === "string" ? b.target : null,
        reason: String(b.reason ?? ""),
        by: String(b.by ?? "?"),
        version: Number(b.version ?? 0),
      };
    });
  } catch {
    return null;
  }
}

async function killSwitchPage(c: C, status: number, notice: Notice | null): Promise<Response> {
  const [r, history] = await Promise.all([killSwitchStatus(c.env), killSwitchHistory(c.env)]);
  if (!r.ok) return errorPage(c.var.viewer, r.status, "Kill switch", `the kill switch's state is unknown right now: ${r.message}`);
  return htmlResponse(KillSwitchPage({ viewer: c.var.viewer, snapshot: r.snapshot, admin: principalHas(c.var.principal, "admin"), notice, history }), status);
}

consoleStatusRoutes.get("/console/killswitch", signedIn, async (c) => {
  try {
    return await killSwitchPage(c, 200, CHANGED[c.req.query("changed") ?? ""] ?? null);
  } catch (e) {
    return unavailable(c.var.viewer, "the kill switch", e);
  }
});

consoleStatusRoutes.post("/console/killswitch", signedIn, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  const back = { href: "/console/killswitch", label: "← Kill switch" };
  if (!principalHas(c.var.principal, "admin")) return errorPage(c.var.viewer, 403, "Not allowed", "halting and resuming need the admin role", back);
  const action = form.get("action");
  const scope = form.get("scope") ?? "";
  const target = (form.get("target") ?? "").trim();
  const reason = (form.get("reason") ?? "").trim();
  if (action !== "halt" && action !== "resume") return errorPage(c.var.viewer, 400, "Bad request", "action must be halt or resume", back);
  if (!(HALT_SCOPES as readonly string[]).includes(scope))
    return errorPage(c.var.viewer, 400, "Bad request", `scope must be one of ${HALT_SCOPES.join(", ")}`, back);
  if (reason === "" || reason.length > MAX_REASON)
    return errorPage(c.var.viewer, 400, "Bad request", `a reason of 1 to ${MAX_REASON} characters is required`, back);
  // The form asks for confirmation; a POST without it changes nothing and shows the page again, saying so.
  if (form.get("confirm") !== "yes")
    return killSwitchPage(c, 400, {
      kind: "error",
      text: `Nothing changed: tick the confirmation to ${action} ${scope === "global" ? "everything" : `${scope} ${target}`}`,
    });
  try {
    const r = await changeKillSwitch(c.env, c.var.cfg, c.var.principal, action, scope as HaltScopeName, target === "" ? null : target, reason);
    if (!r.ok) return errorPage(c.var.viewer, r.status, "Kill switch", r.message, back);
    return seeOther(`/console/killswitch?changed=${r.changed ? action : "none"}`);
  } catch (e) {
    return unavailable(c.var.viewer, "the kill switch", e);
  }
});
