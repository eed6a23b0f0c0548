/**
 * What every console page shares (src/routes/console.ts and ./console-runs.ts): the Hono env of a
 * signed-in page, the `signedIn` gate (config, then the session re-verified now, then the typed
 * vars), the checked form of a POST (the gateway's own Origin, a bounded urlencoded body, the
 * session's CSRF token), and the error pages. Must never: let a POST through without its Origin
 * and CSRF checks, or put the grant in a page, URL or log.
 */
import type { Context } from "hono";
import { createMiddleware } from "hono/factory";
import type { GatewayConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import { ErrorPage, type Viewer } from "../console/layout.tsx";
import { htmlResponse, seeOther } from "../console/render.ts";
import { clearedSessionCookie, csrfToken, csrfValid, originProblem } from "../console/cookie-session.ts";
import { type ConsoleSession, consoleSession } from "../console/signin.ts";
import type { Env } from "../env.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { recordConfigOnce } from "../ports/ledger-writer.ts";
import { readBodyText } from "../wire/body.ts";
import { servableConfig } from "./config-view.ts";

export type ConsoleEnv = { Bindings: Env; Variables: { cfg: GatewayConfig; principal: Principal; session: ConsoleSession; viewer: Viewer } };
export type C = Context<ConsoleEnv>;

export const MAX_FORM = 16 * 1024;
export const MAX_REASON = 500;

export const waitUntil = (c: C) => (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
export const signingSecret = (env: Env, cfg: GatewayConfig): string | null => {
  const v = env[cfg.auth.signingKeySecret];
  return typeof v === "string" && v.trim() !== "" ? v : null;
};
export const canonicalOf = (cfg: GatewayConfig): string | null => {
  try {
    return canonicalUrl(cfg);
  } catch {
    return null;
  }
};

export const errorPage = (viewer: Viewer | null, status: number, title: string, message: string, back?: { href: string; label: string }) =>
  htmlResponse(ErrorPage({ viewer, status, title, message, ...(back ? { back } : {}) }), status);

/** A service that threw (not answered): 503, its message on the page, the stack in the log. */
export function unavailable(viewer: Viewer | null, what: string, e: unknown): Promise<Response> {
  console.error(`portcullis console: ${what} failed`, (e as Error)?.stack ?? String(e));
  return errorPage(viewer, 503, "Temporarily unavailable", `${what} did not answer (${(e as Error)?.message ?? String(e)}); nothing was changed. Try again.`);
}

/** A console path (with its query) a sign-in may return to; null for anything else. */
export function returnPath(v: string | null | undefined): string | null {
  // `~` is in hold ids (`<team>~<hex>`), so a hold's page (and its decision link) survives the sign-in.
  return v && v.length <= 300 && /^\/console(\/[A-Za-z0-9/_.~-]*)?(\?[A-Za-z0-9=&%_.+-]*)?$/.test(v) ? v : null;
}

/**
 * The gate of every signed-in page: config, then the session (re-verified now), then the typed
 * vars. A session without a console role (connectionsOnly) passes only where `connections` is set.
 */
const gateFor = (connections: boolean) =>
  createMiddleware<ConsoleEnv>(async (c, next) => {
    const cfg = await servableConfig(c.env, c.req.raw);
    if (cfg instanceof Response) return cfg;
    const s = await consoleSession(c.env, cfg, c.req.raw);
    if (!s.ok) {
      if (s.status === 503) return errorPage(null, 503, "Temporarily unavailable", s.reason);
      const url = new URL(c.req.url);
      const back = c.req.method === "GET" ? returnPath(`${url.pathname}${url.search}`) : null;
      const login = back && back !== "/console" ? `/console/login?next=${encodeURIComponent(back)}` : "/console/login";
      return seeOther(login, s.clearCookie ? { "set-cookie": clearedSessionCookie() } : {});
    }
    recordConfigOnce(c.env, cfg, canonicalUrl(cfg), waitUntil(c));
    const secret = signingSecret(c.env, cfg);
    const p = s.session.principal;
    c.set("cfg", cfg);
    c.set("principal", p);
    c.set("session", s.session);
    const viewer: Viewer = { sub: p.sub, team: p.team, roles: [...p.roles], via: s.session.via, csrf: secret ? csrfToken(secret, s.session.binding) : "" };
    if (s.session.connectionsOnly) viewer.connectionsOnly = true;
    c.set("viewer", viewer);
    if (s.session.connectionsOnly && !connections)
      return errorPage(viewer, 403, "Not allowed", "this grant has no console role; it signs in only to connect its OAuth upstreams", {
        href: "/console/connections",
        label: "Connections →",
      });
    await next();
    if (s.clearCookie) c.res.headers.append("set-cookie", clearedSessionCookie());
  });

export const signedIn = gateFor(false);
/** The gate of the Connections pages: every signed-in session, a connections-only one too. */
export const signedInForConnections = gateFor(true);

/** A console form: the gateway's own Origin, a urlencoded body within bounds, and (signed in) the session's CSRF token. */
export async function postedForm(c: C, cfg: GatewayConfig, session: ConsoleSession | null): Promise<URLSearchParams | Response> {
  const viewer = session ? c.var.viewer : null;
  const bad = originProblem(c.req.raw, canonicalOf(cfg));
  if (bad) return errorPage(viewer, 403, "Refused", bad);
  const type = (c.req.header("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/x-www-form-urlencoded") return errorPage(viewer, 415, "Refused", "console forms are posted as application/x-www-form-urlencoded");
  const read = await readBodyText(c.req.raw, MAX_FORM);
  if (!read.ok)
    return errorPage(
      viewer,
      read.reason === "timeout" ? 408 : 413,
      "Refused",
      read.reason === "timeout" ? "the form did not arrive in time" : "the form is too large",
    );
  const form = new URLSearchParams(read.text);
  if (session) {
    const secret = signingSecret(c.env, cfg);
    if (!secret)
      return errorPage(viewer, 503, "Temporarily unavailable", `no signing key is configured (${cfg.auth.signingKeySecret}), so forms cannot be checked`);
    if (!csrfValid(secret, session.binding, form.get("csrf")))
      return errorPage(viewer, 403, "Refused", "this form does not belong to your session (CSRF token mismatch); reload the page and try again");
  }
  return form;
}
