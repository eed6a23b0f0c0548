/**
 * Host and Origin validation against DNS rebinding and cross-gateway confusion. Owns the rule:
 * the Host must name this gateway — its canonical URL's host, a loopback spelling of the origin
 * it was started on at that same port, or a configured allowed host (ports compared); an Origin,
 * when present, must be loopback, configured, or the request's own host. Must never: accept a
 * Host for another port, or accept a request because a header has odd casing (names are
 * compared lower-cased).
 */
import type { GatewayConfig } from "../config/gateway-config.ts";
import { isLoopbackHost } from "../wire/hosts.ts";
import { canonicalUrl, ownHosts, ownUrlProblem } from "./metadata.ts";
import { refuse } from "../wire/http.ts";
import { ErrorCode } from "../wire/jsonrpc.ts";

/** `host[:port]` of a Host value (or an allowed_hosts entry), lower-cased, the scheme's default port dropped; null when it is not a plain host. */
function hostOf(value: string, scheme: string): string | null {
  if (!/^[A-Za-z0-9.-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(value)) return null;
  try {
    return new URL(`${scheme}//${value}`).host;
  } catch {
    return null;
  }
}

/**
 * The Host names this gateway: its canonical URL's host, a loopback spelling of the origin
 * `portcullis dev` started it on (same port), or a configured allowed host — an entry with a
 * port matches that port only, one without matches the default port only. Ports always count:
 * a second gateway on another loopback port is another gateway.
 */
function hostAllowed(host: string | null, cfg: GatewayConfig): boolean {
  if (!host) return false;
  const scheme = ownUrlProblem(cfg) === null ? new URL(canonicalUrl(cfg)).protocol : "http:";
  const h = hostOf(host, scheme);
  if (!h) return false;
  return ownHosts(cfg).includes(h) || cfg.allowedHosts.some((a) => hostOf(a, scheme) === h);
}

function originAllowed(origin: string | null, host: string | null, allowedOrigins: string[]): boolean {
  if (origin === null) return true;
  let o: URL;
  try {
    o = new URL(origin);
  } catch {
    return false;
  }
  if (allowedOrigins.includes(o.origin)) return true;
  if (isLoopbackHost(o.hostname)) return true;
  return host !== null && o.host.toLowerCase() === host.toLowerCase();
}

/** Host/Origin check (403). Null when the request may proceed. */
export function checkOrigin(req: Request, cfg: GatewayConfig): Response | null {
  const host = req.headers.get("host") ?? new URL(req.url).host;
  if (!hostAllowed(host, cfg)) {
    return refuse(403, ErrorCode.ServerError, `Forbidden: Host "${host}" is not allowed (DNS rebinding protection); add it to gateway.allowed_hosts`);
  }
  if (!originAllowed(req.headers.get("origin"), host, cfg.allowedOrigins)) {
    return refuse(403, ErrorCode.ServerError, "Forbidden: Origin is not allowed (DNS rebinding protection); add it to gateway.allowed_origins");
  }
  return null;
}
