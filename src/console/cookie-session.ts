/**
 * The console's session mechanics, as pure functions: the `__Host-portcullis` cookie that carries
 * a pasted grant (HttpOnly, Secure, SameSite=Strict, Path=/, living no longer than the grant), the
 * CSRF token every form carries (HMAC-SHA256 of the session's binding — the grant's jti, or the
 * Access token's subject and issue time — under a key derived from the gateway's signing-key
 * secret), and the Origin rule for POSTs (present and equal to the gateway's own origin). Must
 * never: put the token anywhere but the Set-Cookie header, accept a POST without a matching
 * Origin, or compare CSRF tokens in time that depends on their content.
 */
import { labelledMac, sameMac } from "../identity/secret-mac.ts";

/** The session cookie's name (`__Host-`: Secure, Path=/, no Domain — the browser enforces it). */
export const SESSION_COOKIE = "__Host-portcullis";

/** Longest token the console takes as a cookie (browsers keep about 4096 bytes per cookie). */
export const MAX_COOKIE_TOKEN = 3800;

/** Grant tokens are JWS compact serializations (what `Authorization: Bearer` accepts). */
export const TOKEN_SHAPE = /^[A-Za-z0-9\-._~+/]+=*$/;

export function sessionCookie(token: string, maxAgeS: number): string {
  return `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=${Math.max(0, Math.floor(maxAgeS))}`;
}

export function clearedSessionCookie(): string {
  return `${SESSION_COOKIE}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0`;
}

/** The value of cookie `name` in the request's Cookie header(s), or null. */
export function readCookie(req: Request, name: string): string | null {
  const header = req.headers.get("cookie");
  if (!header) return null;
  for (const part of header.split(";")) {
    const i = part.indexOf("=");
    if (i < 0) continue;
    if (part.slice(0, i).trim() === name) {
      const v = part.slice(i + 1).trim();
      return v === "" ? null : v;
    }
  }
  return null;
}

/** The CSRF token of a session binding (`grant:<jti>`, `access:<sub>:<iat>`). */
export function csrfToken(secret: string, binding: string): string {
  // Its own key: SHA-256 over this label and the signing-key secret (src/identity/secret-mac.ts).
  return labelledMac(secret, "portcullis console csrf v1", `csrf\n${binding}`);
}

/** Whether `given` is the session's CSRF token (constant time over the expected length). */
export function csrfValid(secret: string, binding: string, given: string | null | undefined): boolean {
  return sameMac(csrfToken(secret, binding), given);
}

/** The origin the browser addressed: the request URL's scheme with its Host header. */
export function ownOrigin(req: Request): string {
  const url = new URL(req.url);
  const host = req.headers.get("host") ?? url.host;
  return `${url.protocol}//${host}`.toLowerCase();
}

/**
 * Why a console POST's Origin is refused, or null: it must be present and name exactly this
 * gateway — the origin the request addressed, or the gateway's canonical origin (`canonical`).
 * The app-wide check lets any loopback Origin and a missing one through (agents send none); the
 * console does not.
 */
export function originProblem(req: Request, canonical: string | null): string | null {
  const origin = req.headers.get("origin");
  if (origin === null) return "a console form must be posted by a browser that sends Origin";
  const o = origin.toLowerCase();
  if (o === ownOrigin(req)) return null;
  if (canonical !== null) {
    try {
      if (o === new URL(canonical).origin.toLowerCase()) return null;
    } catch {
      /* no canonical origin */
    }
  }
  return `cross-origin form posts are refused (Origin ${JSON.stringify(origin.slice(0, 100))} is not this gateway)`;
}
