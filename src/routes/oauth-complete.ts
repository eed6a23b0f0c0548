/**
 * What the OAuth authorization routes share (oauth-endpoints.ts, oauth-oidc.ts): the error page,
 * the egress-checked fetch they reach identity providers with, and the end of every sign-in —
 * `grant.minted` durable on the team's chain, then the library completes the authorization with a
 * 302 to the client. Must never: issue a grant whose ledger record is not durable, or let a code,
 * token or secret reach a page or a log.
 */
import type { AuthRequest } from "@cloudflare/workers-oauth-provider";
import type { GatewayConfig } from "../config/gateway-config.ts";
import { ErrorPage } from "../console/layout.tsx";
import { htmlResponse } from "../console/render.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import type { Env } from "../env.ts";
import { isLoopbackRequest } from "../identity/auth.ts";
import type { GrantOffer } from "../identity/oauth-grant.ts";
import { type OAuthGrantProps, newGrantJti, oauthApi, userIdOf } from "../identity/oauth-server.ts";
import { appendRecord, ledgerSigning } from "../ports/ledger-writer.ts";

export const page = (status: number, title: string, message: string) => htmlResponse(ErrorPage({ viewer: null, status, title, message }), status);

export const egressFetch = (cfg: GatewayConfig, req: Request) => (url: string, init: RequestInit) =>
  guardedFetch(url, init, { rules: cfg.egress, gatewayOnLoopback: isLoopbackRequest(req), maxRedirects: 0, timeoutMs: 10_000, maxBytes: 1024 * 1024 });

/** Records the grant (durable before anything is issued) and completes the authorization: a 302 to the client with code, state and iss. */
export async function complete(cfg: GatewayConfig, env: Env, areq: AuthRequest, offer: GrantOffer, headers: Headers): Promise<Response> {
  const api = oauthApi(cfg, env)!;
  const client = await api.lookupClient(areq.clientId);
  // The grant as a minted one carries it (its props, encrypted by the library; its ledger record, with where it went).
  const grant = {
    jti: newGrantJti(),
    sub: offer.sub,
    team: offer.team,
    roles: offer.roles,
    tools: offer.tools,
    exp: Math.floor(Date.now() / 1000) + offer.lifetimeS,
  };
  const props: OAuthGrantProps = { ...grant, client_id: areq.clientId, source: offer.source, ...(offer.budget ? { budget: offer.budget } : {}) };
  const jti = grant.jti;
  try {
    await appendRecord(env, ledgerSigning(cfg), offer.team, "grant.minted", {
      ...grant,
      by: `oauth:${areq.clientId}`,
      client_id: areq.clientId,
      client_name: client?.clientName ?? areq.clientId,
      redirect_host: new URL(areq.redirectUri).host,
      source: offer.source,
    });
  } catch (e) {
    return page(503, "Temporarily unavailable", `no grant was issued: its ledger record could not be written (${(e as Error).message})`);
  }
  const { redirectTo } = await api.completeAuthorization({
    request: areq,
    userId: userIdOf(offer.sub),
    metadata: { jti, team: offer.team, source: offer.source },
    scope: offer.roles,
    props,
    revokeExistingGrants: false,
  });
  headers.set("location", redirectTo);
  return new Response(null, { status: 302, headers });
}
