/**
 * The OAuth routes hosted MCP clients use (auth.oauth): the RFC 8414 metadata, RFC 7591
 * registration and the token endpoint (the library's, see oauth-token.ts), and the authorization
 * endpoint that is ours — parse and validate the request (the library: client, exact redirect URI
 * with RFC 8252 loopback ports, resource, PKCE), insist on PKCE S256 for every client, check a
 * client metadata document's URL against the egress rules before anything fetches it, sign the
 * person in (Cloudflare Access, an enrollment code, or an OIDC issuer by authorization-code
 * redirect with PKCE and nonce: oauth-oidc.ts), show the consent page with the grant the source's
 * template allows, and on Allow record `grant.minted` and complete the authorization
 * (oauth-complete.ts). Must never: redirect
 * to a redirect URI the library has not validated, issue a grant wider than its template, issue
 * one whose ledger record is not durable, or let a code, token or secret reach a page or a log.
 */
import { AuthorizationError, type AuthRequest, CimdFetchError, type ConsentDescription, authorizationErrorRedirect } from "@cloudflare/workers-oauth-provider";
import { Hono } from "hono";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { type ClientFacts, OAuthConsentPage, OAuthSignInPage, type OfferFacts } from "../console/oauth-page.tsx";
import { htmlResponse } from "../console/render.ts";
import { originProblem } from "../console/cookie-session.ts";
import { EgressError, guardedFetch } from "../egress/guarded-fetch.ts";
import { checkEgress } from "../egress/rules.ts";
import type { Env } from "../env.ts";
import { ACCESS_HEADER, verifyAccess } from "../identity/access.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import { readEnrollment } from "../identity/enrollment.ts";
import { canonicalUrl } from "../identity/metadata.ts";
import { type GrantOffer, coveredTools, enrollmentOffer, openOffer, signOffer, templateOffer } from "../identity/oauth-grant.ts";
import { OAUTH_PATHS, oauthApi, oauthIssuer, oauthServer } from "../identity/oauth-server.ts";
import { readBodyText } from "../wire/body.ts";
import { jsonResponse } from "../wire/http.ts";
import { servableConfig } from "./config-view.ts";
import { signingSecret } from "./console-gate.ts";
import { canonicalRequest, tokenRoute } from "./oauth-token.ts";
import { complete, egressFetch, page } from "./oauth-complete.ts";
import { oidcCallback, startOidc } from "./oauth-oidc.ts";

type OAuthEnv = { Bindings: Env };
export const oauthRoutes = new Hono<OAuthEnv>();

async function enabledConfig(env: Env, req: Request): Promise<GatewayConfig | Response> {
  const cfg = await servableConfig(env, req);
  if (cfg instanceof Response) return cfg;
  if (!cfg.auth.oauth.enabled) return jsonResponse({ error: "not found" }, 404);
  // A Worker deployed without auth.oauth has no KV namespace bound (portcullis deploy creates it only when asked).
  if (!(env as { OAUTH_KV?: unknown }).OAUTH_KV)
    return jsonResponse(
      {
        error: "temporarily_unavailable",
        error_description: "auth.oauth is on, but this Worker has no OAUTH_KV namespace bound: npx portcullis deploy creates it",
      },
      503,
    );
  return cfg;
}

// The library's own endpoints: metadata, registration, token (and RFC 7009 revocation there).
oauthRoutes.get("/.well-known/oauth-authorization-server", async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  return oauthServer(cfg)!.fetch(canonicalRequest(cfg, c.req.raw), c.env, c.executionCtx as ExecutionContext);
});
oauthRoutes.post(OAUTH_PATHS.register, async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  const read = await readBodyText(c.req.raw, 64 * 1024);
  if (!read.ok) return c.json({ error: "invalid_client_metadata", error_description: "the registration is too large or too slow" }, 413);
  return oauthServer(cfg)!.fetch(canonicalRequest(cfg, c.req.raw, read.text), c.env, c.executionCtx as ExecutionContext);
});
oauthRoutes.post(OAUTH_PATHS.token, async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  return tokenRoute(c.req.raw, c.env, cfg, c.executionCtx as ExecutionContext);
});

/**
 * Why a client metadata document URL may not be used (off, outside the egress rules, or answering
 * with a redirect); null when it may. The library fetches the document itself with the Worker's
 * fetch (`global_fetch_strictly_public`: public addresses only), following redirects; so the
 * gateway first fetches it under its own egress rules with no redirects allowed, and refuses a
 * document that is not served at its own URL.
 */
async function metadataDocumentProblem(cfg: GatewayConfig, req: Request, clientId: string | null): Promise<string | null> {
  if (clientId === null || !/^https?:\/\//i.test(clientId)) return null;
  if (!cfg.auth.oauth.clientMetadataDocuments)
    return "this client names itself by a metadata document URL, and client ID metadata documents are not enabled here (auth.oauth.client_metadata_documents)";
  const d = checkEgress(clientId, cfg.egress, { gatewayOnLoopback: isLoopbackRequest(req) });
  if (!d.ok) return `the client's metadata document URL is outside this gateway's egress rules (${d.reason})`;
  try {
    const r = await guardedFetch(
      d.url,
      { headers: { accept: "application/json" } },
      { rules: cfg.egress, gatewayOnLoopback: isLoopbackRequest(req), maxRedirects: 0, timeoutMs: 10_000, maxBytes: 5 * 1024 },
    );
    await r.body?.cancel();
    return r.ok ? null : `the client's metadata document answered HTTP ${r.status}`;
  } catch (e) {
    return `the client's metadata document could not be fetched under this gateway's egress rules (${e instanceof EgressError ? e.reason : "no answer"})`;
  }
}

/** A failed parse: redirect only where the library validated the redirect URI; render everything else. */
function authorizeFailure(e: unknown): Promise<Response> | Response {
  if (e instanceof AuthorizationError && e.redirectTo) return Response.redirect(e.redirectTo, 302);
  if (e instanceof AuthorizationError) return page(400, "This sign-in request is invalid", `${e.code}: ${e.description}`);
  if (e instanceof CimdFetchError) return page(400, "This app could not be verified", "its client metadata document could not be fetched or is invalid");
  throw e;
}

/** The authorization request in `query`, validated by the library, plus our own rule: PKCE S256 for every client. */
async function parsed(cfg: GatewayConfig, env: Env, req: Request, query: string): Promise<{ areq: AuthRequest } | Response> {
  const api = oauthApi(cfg, env)!;
  const problem = await metadataDocumentProblem(cfg, req, new URLSearchParams(query).get("client_id"));
  if (problem) return page(400, "This app could not be verified", `invalid_client: ${problem}`);
  let areq: AuthRequest;
  try {
    areq = await api.parseAuthRequest(new Request(`${oauthIssuer(cfg)}${OAUTH_PATHS.authorize}?${query}`, { headers: req.headers }));
  } catch (e) {
    return authorizeFailure(e);
  }
  if (!areq.codeChallenge || areq.codeChallengeMethod !== "S256") {
    return Response.redirect(authorizationErrorRedirect(areq, "invalid_request", "PKCE with code_challenge_method=S256 is required"), 302);
  }
  return { areq };
}

async function clientFacts(cfg: GatewayConfig, env: Env, areq: AuthRequest): Promise<{ facts: ClientFacts; described: ConsentDescription }> {
  const d = await oauthApi(cfg, env)!.describeConsent(areq);
  const facts: ClientFacts = { name: d.clientName, redirectHost: d.redirectHost, redirectIsLoopback: d.redirectIsLoopback };
  if (d.clientDomain) facts.domain = d.clientDomain;
  return { facts, described: d };
}

function lifetimeText(s: number): string {
  return s % 3600 === 0 ? `${s / 3600}h` : s % 60 === 0 ? `${s / 60}m` : `${s}s`;
}

function offerFacts(o: GrantOffer, label: string, dropped?: string[]): OfferFacts {
  const f: OfferFacts = { sub: o.sub, via: label, team: o.team, roles: o.roles, tools: o.tools, lifetime: lifetimeText(o.lifetimeS) };
  if (o.budget) f.budget = o.budget.calls;
  if (dropped?.length) f.dropped = dropped;
  return f;
}

/** The consent page for `offer`: its handle (library: browser-bound, single use, 10 minutes) and the offer signed for it. */
async function consent(cfg: GatewayConfig, env: Env, areq: AuthRequest, offer: GrantOffer, label: string, dropped?: string[]): Promise<Response> {
  const secret = signingSecret(env, cfg);
  if (!secret) return page(503, "Temporarily unavailable", `no signing key is configured (${cfg.auth.signingKeySecret})`);
  const { facts } = await clientFacts(cfg, env, areq);
  const tx = await oauthApi(cfg, env)!.beginConsent(areq);
  const res = await htmlResponse(
    OAuthConsentPage({ client: facts, offer: offerFacts(offer, label, dropped), handle: tx.handle, signed: signOffer(secret, tx.handle, offer) }),
  );
  tx.headers.forEach((v, k) => {
    if (k.toLowerCase() === "set-cookie") res.headers.append(k, v);
  });
  // The Allow answer redirects to the client (and, for OIDC, to the issuer first): a form's redirect must be allowed by form-action.
  const targets = new Set(["'self'", new URL(areq.redirectUri).origin]);
  if (offer.source === "oidc") {
    const o = cfg.auth.oauth.oidc.find((x) => x.issuer === offer.issuer);
    if (o) targets.add(new URL(o.authorizationEndpoint).origin);
  }
  res.headers.set(
    "content-security-policy",
    res.headers.get("content-security-policy")!.replace("form-action 'self'", `form-action ${[...targets].join(" ")}`),
  );
  return res;
}

function signInPage(cfg: GatewayConfig, facts: ClientFacts, query: string, problem: string | null, status = 200): Promise<Response> {
  const o = cfg.auth.oauth;
  return htmlResponse(
    OAuthSignInPage({
      client: facts,
      query,
      enrollment: o.enrollment !== undefined,
      oidc: o.oidc.map((x) => ({ issuer: x.issuer, label: x.label })),
      access: o.access !== undefined,
      problem,
    }),
    status,
  );
}

/** The person Cloudflare Access signed in on this request, if the request carries a valid Access JWT. */
async function accessSub(cfg: GatewayConfig, req: Request): Promise<string | null> {
  const token = req.headers.get(ACCESS_HEADER);
  if (!token || !cfg.auth.access || !cfg.auth.oauth.access) return null;
  const v = await verifyAccess(token, cfg.auth.access, egressFetch(cfg, req));
  return typeof v === "string" ? null : v.principal.sub;
}

oauthRoutes.get(OAUTH_PATHS.authorize, async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  const query = new URL(c.req.url).search.slice(1);
  const p = await parsed(cfg, c.env, c.req.raw, query);
  if (p instanceof Response) return p;
  const sub = await accessSub(cfg, c.req.raw);
  if (sub !== null) return consent(cfg, c.env, p.areq, templateOffer("access", sub, cfg.auth.oauth.access!), "Cloudflare Access");
  const { facts } = await clientFacts(cfg, c.env, p.areq);
  return signInPage(cfg, facts, query, null);
});

oauthRoutes.post(OAUTH_PATHS.authorize, async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  const bad = originProblem(c.req.raw, canonicalUrl(cfg));
  if (bad) return page(403, "Refused", bad);
  if ((c.req.header("content-type") ?? "").split(";")[0]!.trim().toLowerCase() !== "application/x-www-form-urlencoded") {
    return page(415, "Refused", "the form is posted as application/x-www-form-urlencoded");
  }
  const read = await readBodyText(c.req.raw, 16 * 1024);
  if (!read.ok) return page(413, "Refused", "the form is too large or too slow");
  const form = new URLSearchParams(read.text);
  const action = form.get("action");
  if (action === "consent") return decide(cfg, c.env, c.req.raw, form);
  const query = form.get("q") ?? "";
  const p = await parsed(cfg, c.env, c.req.raw, query);
  if (p instanceof Response) return p;
  if (action === "enroll" && cfg.auth.oauth.enrollment) {
    const { facts } = await clientFacts(cfg, c.env, p.areq);
    // Taken now (it works once): the signed offer on the consent page carries what it granted.
    const r = await readEnrollment(c.env, (form.get("code") ?? "").trim(), true);
    if (!r.ok && r.reason === "unavailable") return page(503, "Temporarily unavailable", "the enrollment store did not answer; nothing was used. Try again.");
    if (!r.ok) return signInPage(cfg, facts, query, "This enrollment code is unknown, already used or expired.", 400);
    const template = cfg.auth.oauth.enrollment;
    const offer = enrollmentOffer(template, r.record, "redeemed");
    if (!offer) return signInPage(cfg, facts, query, "This enrollment code grants no role this sign-in allows; ask your administrator for a new one.", 400);
    return consent(cfg, c.env, p.areq, offer, "enrollment code", coveredTools(template, r.record.tools).dropped);
  }
  if (action === "oidc") {
    const o = cfg.auth.oauth.oidc.find((x) => x.issuer === form.get("issuer"));
    if (!o) return page(400, "Refused", "that identity provider is not configured for sign-in here");
    // The person signs in at the issuer after consenting (the library's order: no third-party redirect before consent).
    return consent(cfg, c.env, p.areq, templateOffer("oidc", `the account you sign in with at ${o.label} next`, o.template, o.issuer), o.label);
  }
  return page(400, "Refused", "unknown sign-in action");
});

/** Allow or Deny on the consent page. */
async function decide(cfg: GatewayConfig, env: Env, req: Request, form: URLSearchParams): Promise<Response> {
  const api = oauthApi(cfg, env)!;
  const handle = form.get("handle") ?? "";
  const creq = canonicalRequest(cfg, req);
  try {
    if (form.get("decision") !== "approve") {
      const denied = await api.denyConsent(creq, handle);
      return new Response(null, { status: 302, headers: denied.headers });
    }
    const secret = signingSecret(env, cfg);
    const offer = secret ? openOffer(secret, handle, form.get("offer")) : null;
    if (!offer) return page(400, "Refused", "this consent form was not issued for this sign-in; start connecting again from your client");
    const approved = await api.approveConsent(creq, handle, { scope: offer.roles });
    if (offer.source === "access") {
      const sub = await accessSub(cfg, req);
      if (sub !== offer.sub) return page(403, "Refused", "the Cloudflare Access sign-in on this request is not the one consent was asked for");
    }
    if (offer.source === "oidc") return startOidc(cfg, env, approved.request, offer, approved.headers);
    return complete(cfg, env, approved.request, offer, approved.headers);
  } catch (e) {
    if (e instanceof AuthorizationError) return page(400, "This consent page has expired", `${e.description}. Start connecting again from your client.`);
    throw e;
  }
}

oauthRoutes.get(OAUTH_PATHS.callback, async (c) => {
  const cfg = await enabledConfig(c.env, c.req.raw);
  if (cfg instanceof Response) return cfg;
  return oidcCallback(cfg, c.env, c.req.raw);
});
