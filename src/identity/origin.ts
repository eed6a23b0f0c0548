/**
 * Host and Origin validation against DNS rebinding. Owns the rule: the Host must be loopback
 * (localhost, 127.0.0.1, [::1], any port) or a configured allowed host; an Origin, when present,
 * must be loopback, configured, or the request's own host. Must never: accept a request because
 * a header is missing a port or has odd casing (names are compared lower-cased, ports ignored).
 */
import type { GatewayConfig } from "../config/load.ts";
import { isLoopbackHost } from "../wire/hosts.ts";
import { refuse } from "../wire/http.ts";
import { ErrorCode } from "../wire/jsonrpc.ts";

function hostnameOf(hostHeader: string): string | null {
  try {
    return new URL(`http://${hostHeader}`).hostname.toLowerCase();
  } catch {
    return null;
  }
}

function hostAllowed(host: string | null, allowedHosts: string[]): boolean {
  if (!host) return false;
  const name = hostnameOf(host);
  if (!name) return false;
  return isLoopbackHost(name) || allowedHosts.includes(name) || allowedHosts.includes(host.toLowerCase());
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
  if (!hostAllowed(host, cfg.allowedHosts)) {
    return refuse(403, ErrorCode.ServerError, `Forbidden: Host "${host}" is not allowed (DNS rebinding protection); add it to gateway.allowed_hosts`);
  }
  if (!originAllowed(req.headers.get("origin"), host, cfg.allowedOrigins)) {
    return refuse(403, ErrorCode.ServerError, "Forbidden: Origin is not allowed (DNS rebinding protection); add it to gateway.allowed_origins");
  }
  return null;
}
