/**
 * Host and Origin validation against DNS rebinding. Owns the rule: the Host must be loopback
 * (localhost, 127.0.0.1, [::1], any port) or a configured allowed host; an Origin, when present,
 * must be loopback, configured, or the request's own host. Must never: accept a request because
 * a header is missing a port or has odd casing (names are compared lower-cased, ports ignored).
 */
import { isLoopbackHost } from "../wire/hosts.ts";

function hostnameOf(hostHeader: string): string | null {
  try {
    return new URL(`http://${hostHeader}`).hostname.toLowerCase();
  } catch {
    return null;
  }
}

export function hostAllowed(host: string | null, allowedHosts: string[]): boolean {
  if (!host) return false;
  const name = hostnameOf(host);
  if (!name) return false;
  return isLoopbackHost(name) || allowedHosts.includes(name) || allowedHosts.includes(host.toLowerCase());
}

export function originAllowed(origin: string | null, host: string | null, allowedOrigins: string[]): boolean {
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
