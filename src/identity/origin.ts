/**
 * Host and Origin validation against DNS rebinding. Owns the rule: the Host must be loopback
 * (localhost, 127.0.0.1, [::1], any port) or a configured allowed host; an Origin, when present,
 * must be loopback, configured, or the request's own host. Must never: accept a request because
 * a header is missing a port or has odd casing (names are compared lower-cased, ports ignored).
 */
/** Loopback host names as URL parsing spells them (plus the bare IPv6 form a Host header may carry). */
export const LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"] as const;
const LOOPBACK = new Set<string>([...LOOPBACK_HOSTS, "::1"]);

export function isLoopbackHost(hostname: string): boolean {
  return LOOPBACK.has(hostname.toLowerCase());
}

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
  return LOOPBACK.has(name) || allowedHosts.includes(name) || allowedHosts.includes(host.toLowerCase());
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
  if (LOOPBACK.has(o.hostname.toLowerCase())) return true;
  return host !== null && o.host.toLowerCase() === host.toLowerCase();
}
