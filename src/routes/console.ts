/**
 * The approver and auditor web console at /console, as a Hono sub-app mounted at "/" by
 * src/index.ts: server-rendered pages (Hono JSX, src/console/), no script. Sign-in by pasting a
 * grant (kept in the `__Host-portcullis` cookie) or by Cloudflare Access; every request
 * re-verifies it (src/console/signin.ts). Pages: pending holds, one hold with its exact action
 * and the approve / reject form (or a notification's signed decision link, proposing one), the
 * ledger and one call's trace (auditor, admin), tool classification, the run pages of
 * ./console-runs.ts, the overview and the kill switch of ./console-status.ts, and the Connections
 * pages of ./console-connections.ts; the shared gate, form checks and error pages are
 * ./console-gate.ts's. Every POST needs the gateway's own Origin and the session's CSRF token. Owns the HTTP shape only:
 * holds, the kill switch and the ledger are their services'. Must never: render a value as
 * markup, put the token in a page, URL, log or redirect, take the approver's identity from a
 * form, or say "approved" before the hold service said ok (it does so only once the ledger
 * record is durable).
 */
import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import type { HoldState } from "../../durable-objects/contract-holds.ts";
import { principalHas } from "../config/principal.ts";
import { withSecurityHeaders } from "../console/headers.ts";
import { HOLD_STATES, HoldPage, HoldsPage, holdPath } from "../console/holds-page.tsx";
import { LoginPage, type Notice } from "../console/layout.tsx";
import { LedgerPage, TracePage } from "../console/ledger-page.tsx";
import { htmlResponse, seeOther } from "../console/render.ts";
import { clearedSessionCookie, sessionCookie } from "../console/cookie-session.ts";
import { verifyConsoleGrant } from "../console/signin.ts";
import { type ToolRow, ToolsPage } from "../console/tools.tsx";
import type { BannerLevel } from "../governance/classify.ts";
import { grantAllowsTool } from "../governance/grant-scope.ts";
import { mayResolve } from "../governance/approvers.ts";
import type { ToolPolicy } from "../governance/policy-view.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { ENTRY_KINDS, type LedgerEntry } from "../ledger/records.ts";
import { getHold, listHolds, resolveHold } from "../services/approvals.ts";
import { holdLinkValid, type LinkDecision } from "../ports/hold-links.ts";
import { exposeName } from "../protocol/exposed-names.ts";
import { classificationOf } from "../front/preview.ts";
import { requestConfig, servableConfig } from "./config-view.ts";
import { type EntryIndex, searchRoute, traceRoute } from "./ledger-api.ts";
import {
  type C,
  type ConsoleEnv,
  errorPage,
  MAX_REASON,
  postedForm,
  returnPath,
  signedIn,
  signedInForConnections,
  unavailable,
  waitUntil,
} from "./console-gate.ts";
import { consoleRunsRoutes } from "./console-runs.ts";
import { connectionsRoutes } from "./console-connections.ts";
import { consoleStatusRoutes } from "./console-status.ts";

export const consoleRoutes = new Hono<ConsoleEnv>();

// Every console answer — pages, redirects, errors, unknown paths — carries the security headers.
consoleRoutes.use("/console/*", async (c, next) => {
  await next();
  c.res = withSecurityHeaders(c.res);
});

// ---- sign-in ---------------------------------------------------------------------------------

consoleRoutes.get("/console/login", async (c) => {
  const cfg = await servableConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  return htmlResponse(LoginPage({ access: cfg.auth.access !== undefined, next: returnPath(c.req.query("next")) }));
});

consoleRoutes.post("/console/login", async (c) => {
  const cfg = await servableConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  const form = await postedForm(c, cfg, null);
  if (form instanceof Response) return form;
  const access = cfg.auth.access !== undefined;
  const next = returnPath(form.get("next"));
  const token = (form.get("token") ?? "").trim();
  if (token === "") return htmlResponse(LoginPage({ access, next, problem: "paste a grant token" }), 400);
  const r = await verifyConsoleGrant(c.env, cfg, c.req.raw, token);
  if (!r.ok) return htmlResponse(LoginPage({ access, next, problem: `not signed in: ${r.reason}` }), r.status);
  const maxAge = (r.session.principal.exp ?? 0) - Math.floor(Date.now() / 1000);
  const to = r.session.connectionsOnly && !next?.startsWith("/console/connections") ? "/console/connections" : (next ?? "/console");
  return seeOther(to, { "set-cookie": sessionCookie(token, maxAge) });
});

consoleRoutes.post("/console/logout", signedInForConnections, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  return seeOther("/console/login", { "set-cookie": clearedSessionCookie() });
});

// ---- holds ------------------------------------------------------------------------------------

consoleRoutes.get("/console", signedIn, async (c) => {
  const asked = c.req.query("state") ?? "pending";
  if (asked !== "all" && !(HOLD_STATES as readonly string[]).includes(asked))
    return errorPage(c.var.viewer, 400, "Bad request", `state must be one of ${HOLD_STATES.join(", ")} or all`);
  const state = asked === "all" ? null : (asked as HoldState);
  try {
    const r = await listHolds(c.env, c.var.cfg, c.var.principal, { state, limit: 200 });
    if (!r.ok) return errorPage(c.var.viewer, r.status, "Holds", r.message);
    return htmlResponse(HoldsPage({ viewer: c.var.viewer, holds: r.value, state, now: Date.now() }));
  } catch (e) {
    return unavailable(c.var.viewer, "the hold service", e);
  }
});

async function holdPage(
  c: C,
  id: string,
  status: number,
  notice: Notice | null,
  reason?: string,
  link?: { decision: LinkDecision; link: string },
): Promise<Response> {
  const r = await getHold(c.env, c.var.cfg, c.var.principal, id);
  if (!r.ok)
    return errorPage(c.var.viewer, notice && r.status === 404 ? status : r.status, "Hold", notice ? `${notice.text} (${r.message})` : r.message, {
      href: "/console",
      label: "← Pending holds",
    });
  let shown = notice;
  let proposed: LinkDecision | undefined;
  if (link) {
    const secret = c.env[c.var.cfg.auth.signingKeySecret];
    const h = r.value.hold;
    const valid = typeof secret === "string" && secret !== "" && holdLinkValid(secret, h, link.decision, link.link);
    if (!valid)
      shown = {
        kind: "error",
        text: "This link does not match this hold (altered, for another action, or from another gateway): decide from the page itself.",
      };
    else if (h.state !== "pending") shown = { kind: "info", text: `The link's hold is already ${h.state}: there is nothing left to decide.` };
    else {
      proposed = link.decision;
      shown = {
        kind: "info",
        text: `You opened the link to ${link.decision} this exact call. Check the action below, then confirm with the ${link.decision === "approve" ? "Approve" : "Reject"} button: nothing is decided until you do.`,
      };
    }
  }
  return htmlResponse(
    HoldPage({
      viewer: c.var.viewer,
      view: r.value,
      now: Date.now(),
      notice: shown,
      ...(reason !== undefined ? { reason } : {}),
      ...(proposed ? { proposed } : {}),
    }),
    status,
  );
}

consoleRoutes.get("/console/holds/:id", signedIn, async (c) => {
  try {
    // Opened from a notification's decision link: propose that decision, once the link is checked against this very hold.
    const decide = c.req.query("decide");
    if (decide === "approve" || decide === "reject")
      return await holdPage(c, c.req.param("id"), 200, null, undefined, { decision: decide, link: c.req.query("link") ?? "" });
    return await holdPage(c, c.req.param("id"), 200, null);
  } catch (e) {
    return unavailable(c.var.viewer, "the hold service", e);
  }
});

consoleRoutes.post("/console/holds/:id/resolve", signedIn, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  const id = c.req.param("id");
  const decision = form.get("decision");
  const reason = (form.get("reason") ?? "").trim();
  const hash = form.get("action_hash") ?? "";
  const back = { href: holdPath(id), label: "← Back to the hold" };
  if (decision !== "approve" && decision !== "reject") return errorPage(c.var.viewer, 400, "Bad request", "decision must be approve or reject", back);
  if (!/^[0-9a-f]{64}$/.test(hash))
    return errorPage(c.var.viewer, 400, "Bad request", "the form carries no action hash: open the hold and decide from its page", back);
  if (reason.length > MAX_REASON) return errorPage(c.var.viewer, 400, "Bad request", `the reason is over ${MAX_REASON} characters`, back);
  try {
    // The approver is the session's verified principal, never a form field.
    const r = await resolveHold(c.env, c.var.cfg, c.var.principal, id, decision, reason, hash, waitUntil(c));
    if (r.ok) return seeOther(holdPath(id));
    // Already resolved, expired or changed (a double click's second POST lands here): the hold as it is now.
    if (r.status === 409) return await holdPage(c, id, 409, { kind: "info", text: `Nothing changed: ${r.message}` });
    // A decision the form got wrong (a rejection without its reason): the hold again, the form kept, the reason said inline.
    if (r.status === 400)
      return await holdPage(c, id, 400, { kind: "error", text: `Not ${decision === "approve" ? "approved" : "rejected"}: ${r.message}` }, reason);
    const title = r.status === 403 ? "Not allowed" : r.status === 503 ? "Not recorded" : "Not resolved";
    return errorPage(c.var.viewer, r.status, title, r.message, back);
  } catch (e) {
    return unavailable(c.var.viewer, "the hold service", e);
  }
});

// ---- ledger (auditor, admin) ----------------------------------------------------------------

const auditorOnly = createMiddleware<ConsoleEnv>(async (c, next) => {
  if (!principalHas(c.var.principal, "auditor")) return errorPage(c.var.viewer, 403, "Not allowed", "the ledger pages need the auditor or admin role");
  await next();
});

/** A ledger route's JSON answer, or the error page for its failure. */
async function routeJson<T>(c: C, r: Response): Promise<T | Response> {
  const body = (await r.json().catch(() => ({ error: `HTTP ${r.status}` }))) as T & { error?: unknown };
  if (!r.ok)
    return errorPage(c.var.viewer, r.status, "Ledger", typeof body.error === "string" ? body.error : `HTTP ${r.status}`, {
      href: "/console/ledger",
      label: "← Ledger",
    });
  return body;
}

consoleRoutes.get("/console/ledger", signedIn, auditorOnly, async (c) => {
  const kind = c.req.query("kind") || null;
  const tool = c.req.query("tool")?.trim() || null;
  const after = c.req.query("after") || null;
  if (kind !== null && !(ENTRY_KINDS as readonly string[]).includes(kind))
    return errorPage(c.var.viewer, 400, "Bad request", `kind must be one of ${ENTRY_KINDS.join(", ")}`);
  if (tool !== null && tool.length > 200) return errorPage(c.var.viewer, 400, "Bad request", "tool is too long");
  const q = new URLSearchParams({ limit: "100" });
  if (kind) q.set("kind", kind);
  if (tool) q.set("tool", tool);
  if (after) q.set("after", after);
  const body = await routeJson<{ entries: LedgerEntry[]; index?: EntryIndex[]; next: string | null }>(c, await searchRoute(c.env, c.var.principal, q));
  if (body instanceof Response) return body;
  return htmlResponse(LedgerPage({ viewer: c.var.viewer, entries: body.entries, index: body.index ?? [], kind, tool, next: body.next }));
});

consoleRoutes.get("/console/ledger/:id", signedIn, auditorOnly, async (c) => {
  const body = await routeJson<{ chain: string; id: string; status: string; records: LedgerEntry[] }>(
    c,
    await traceRoute(c.env, c.var.principal, c.req.param("id"), null),
  );
  if (body instanceof Response) return body;
  return htmlResponse(TracePage({ viewer: c.var.viewer, ...body }));
});

// ---- runs: ./console-runs.ts ---------------------------------------------------------------

consoleRoutes.route("/", consoleRunsRoutes);

// ---- connections: ./console-connections.ts -------------------------------------------------------

consoleRoutes.route("/", connectionsRoutes);

// ---- the overview and the kill switch: ./console-status.ts ---------------------------------------

consoleRoutes.route("/", consoleStatusRoutes);

// ---- tools ----------------------------------------------------------------------------------------

/** The rules under which a tool's calls may be held: its deciding rule when that is an approval (null: the mapping's), and each conditional approval rule. */
function heldRules(policy: ToolPolicy | null | undefined): (string | null)[] {
  if (!policy) return [];
  const out: (string | null)[] = policy.decision === "require_approval" ? [policy.rule] : [];
  for (const s of policy.sometimes) {
    const m = /^require_approval\b.*\(rule ([^)]+)\)$/.exec(s);
    if (m) out.push(m[1]!);
  }
  return out;
}

consoleRoutes.get("/console/tools", signedIn, async (c) => {
  const p = c.var.principal;
  const cfg = c.var.cfg;
  try {
    // An approver, auditor or operator looks beyond its grant's tools (below): every upstream, listed
    // with the config's own credentials (a per-principal or OAuth upstream then lists only for its own principals).
    const beyondGrant = principalHas(p, "approver") || principalHas(p, "auditor") || principalHas(p, "operator");
    const view = beyondGrant ? await requestConfig(c.env, cfg, c.req.raw) : await requestConfig(c.env, cfg, c.req.raw, p);
    const { banner, unlisted, unavailable, policies } = await classificationOf(
      { env: c.env, cfg: view, principal: p, gateway: canonicalUrl(cfg), waitUntil: waitUntil(c) },
      c.req.raw,
    );
    const ups = new Map(view.upstreams.map((u) => [u.name, u]));
    const totals: Record<BannerLevel, number> = { OK: 0, NOTE: 0, WARN: 0, BLOCK: 0 };
    const rows: ToolRow[] = [];
    // Who sees which tool: the grant's own tools; every tool for an auditor, operator or admin (they
    // oversee them all); for an approver, also each tool whose calls may be held for a rule it may resolve.
    const overseer = principalHas(p, "auditor") || principalHas(p, "operator");
    const mayDecide = (policy: ToolPolicy | null | undefined) =>
      principalHas(p, "approver") &&
      heldRules(policy).some(
        (rule) =>
          // A hold of the approver's team raised by someone else (the requester never resolves its own).
          mayResolve(cfg.holds, p, { principal: "agent:(another principal)", team: p.team, rule }).ok,
      );
    for (const [i, line] of banner.lines.entries()) {
      const up = ups.get(line.upstream);
      const exposedName = up ? exposeName(up, line.tool) : line.tool;
      if (!up || !(overseer || grantAllowsTool(p, exposedName) || mayDecide(policies[i]))) continue;
      rows.push({ ...line, exposedName, policy: policies[i] ?? null });
      totals[line.level]++;
    }
    // Each upstream whose tools could not be listed, with why: it gave no answer, or its list did not end.
    const why = new Map(unavailable.map((g) => [g.upstream, `${g.reason}: ${g.detail}`]));
    const gaps = unlisted.map((upstream) => ({ upstream, why: why.get(upstream) ?? "its list did not end within 50 pages" }));
    return htmlResponse(ToolsPage({ viewer: c.var.viewer, mode: cfg.mode, rows, totals, unlisted: gaps }));
  } catch (e) {
    return unavailable(c.var.viewer, "listing the upstreams' tools", e);
  }
});

consoleRoutes.get("/console/", () => seeOther("/console"));
consoleRoutes.all("/console/*", () => errorPage(null, 404, "Not found", "there is no such console page", { href: "/console", label: "← Console" }));
