/**
 * The console's Connections routes (a Hono sub-app of ./console.ts): the list of the viewer's
 * OAuth upstreams, the connect form (discovery and registration run now; the answer is a page
 * with the link to the authorization server, because the console's CSP lets forms post only to
 * itself), the return from the authorization server (the state's pending authorization checked
 * against this browser's connect cookie), and the disconnect form; plus the gateway's client ID
 * metadata document. Owns the HTTP shape and the connect cookie (`__Host-portcullis-connect`,
 * SameSite=Lax so that it comes back on the authorization server's redirect); the flow is
 * services/connections.ts and connections-consent.ts. Must never: accept a form without its Origin and CSRF checks, put a
 * token, code or state in a page or log, or connect for a browser that did not start the attempt.
 */
import { Hono } from "hono";
import { ConnectionsPage, ContinuePage, ReturnedPage } from "../console/connections-page.tsx";
import { readCookie } from "../console/cookie-session.ts";
import { consoleSession } from "../console/signin.ts";
import type { Notice } from "../console/layout.tsx";
import { htmlResponse, seeOther } from "../console/render.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import { CALLBACK_PATH } from "../services/connections.ts";
import { clientMetadataDocument, disconnect, finishConnect, listConnections, startConnect } from "../services/connections-consent.ts";
import { jsonResponse } from "../wire/http.ts";
import { servableConfig } from "./config-view.ts";
import { type ConsoleEnv, errorPage, postedForm, signedInForConnections, unavailable } from "./console-gate.ts";

export const connectionsRoutes = new Hono<ConsoleEnv>();

const CONNECT_COOKIE = "__Host-portcullis-connect";
const connectCookie = (nonce: string) => `${CONNECT_COOKIE}=${nonce}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=600`;
const clearedConnectCookie = () => `${CONNECT_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0`;

const CHANGED: Record<string, Notice> = {
  disconnected: { kind: "good", text: "Disconnected: the tokens are deleted (and revoked at the authorization server where it offers revocation)." },
};

const back = { href: "/console/connections", label: "← Connections" };

connectionsRoutes.get("/console/connections", signedInForConnections, async (c) => {
  try {
    const connections = await listConnections(c.env, c.var.cfg, c.var.principal);
    const asked = c.req.query("upstream") ?? null;
    let notice = CHANGED[c.req.query("changed") ?? ""] ?? null;
    if (!notice && asked && connections.some((x) => x.upstream === asked && !x.connected))
      notice = { kind: "info", text: `A call needs ${asked}: connect it below, then the call can be retried.` };
    return htmlResponse(ConnectionsPage({ viewer: c.var.viewer, connections, asked, notice }));
  } catch (e) {
    return unavailable(c.var.viewer, "the connection store", e);
  }
});

connectionsRoutes.post("/console/connections/:upstream/connect", signedInForConnections, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  const name = c.req.param("upstream");
  try {
    const r = await startConnect(c.env, c.var.cfg, c.var.principal, name, isLoopbackRequest(c.req.raw));
    if (!r.ok) return errorPage(c.var.viewer, r.status, "Not connected", r.message, back);
    return htmlResponse(ContinuePage({ viewer: c.var.viewer, upstream: name, location: r.value.location }), 200, {
      "set-cookie": connectCookie(r.value.nonce),
    });
  } catch (e) {
    return unavailable(c.var.viewer, "connecting", e);
  }
});

connectionsRoutes.post("/console/connections/:upstream/disconnect", signedInForConnections, async (c) => {
  const form = await postedForm(c, c.var.cfg, c.var.session);
  if (form instanceof Response) return form;
  try {
    const r = await disconnect(c.env, c.var.cfg, c.var.principal, c.req.param("upstream"), isLoopbackRequest(c.req.raw));
    if (!r.ok) return errorPage(c.var.viewer, r.status, "Not disconnected", r.message, back);
    return seeOther("/console/connections?changed=disconnected");
  } catch (e) {
    return unavailable(c.var.viewer, "disconnecting", e);
  }
});

// The authorization server's redirect: a cross-site navigation, so the Strict session cookie may be
// absent; the Lax connect cookie binds the browser, the pending authorization names the principal.
connectionsRoutes.get(CALLBACK_PATH, async (c) => {
  const cfg = await servableConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  const s = await consoleSession(c.env, cfg, c.req.raw);
  const signedIn = s.ok ? s.session.principal : null;
  const viewer = s.ok
    ? {
        sub: signedIn!.sub,
        team: signedIn!.team,
        roles: [...signedIn!.roles],
        via: s.session.via,
        csrf: "",
        ...(s.session.connectionsOnly ? { connectionsOnly: true } : {}),
      }
    : null;
  const done = { "set-cookie": clearedConnectCookie() };
  try {
    const r = await finishConnect(c.env, cfg, {
      state: c.req.query("state") ?? null,
      code: c.req.query("code") ?? null,
      error: c.req.query("error") ?? null,
      nonce: readCookie(c.req.raw, CONNECT_COOKIE),
      signedIn,
      onLoopback: isLoopbackRequest(c.req.raw),
    });
    if (!r.ok) return htmlResponse(ReturnedPage({ viewer, ok: false, upstream: null, text: r.message, status: r.status }), r.status, done);
    const text = `Calls to ${r.value.upstream} now run with this connection${r.value.scopes.length ? ` (scopes ${r.value.scopes.join(" ")})` : ""}. Retry the call in your agent.`;
    return htmlResponse(ReturnedPage({ viewer, ok: true, upstream: r.value.upstream, text, status: 200 }), 200, done);
  } catch (e) {
    return unavailable(viewer, "connecting", e);
  }
});

/** The gateway's client ID metadata document (auth.registration: metadata_document): public, like any client's. */
export async function clientMetadataRoute(env: ConsoleEnv["Bindings"], req: Request): Promise<Response> {
  const cfg = await servableConfig(env, req);
  if (cfg instanceof Response) return cfg;
  try {
    return jsonResponse(clientMetadataDocument(cfg));
  } catch (e) {
    return jsonResponse({ error: "unavailable", error_description: (e as Error).message }, 503);
  }
}
