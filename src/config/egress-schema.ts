/**
 * The zod schema for the config's `egress:` section and the parsed `EgressRules` it yields.
 * Owns: field names, types, bounds and defaults; canonicalising `hosts` entries (lowercase,
 * IDNA, no trailing dot) so the runtime check compares like with like; the default rules used
 * when the section is absent. Must never: accept an unknown field, accept a host pattern the
 * runtime cannot match exactly (ports, paths, userinfo, inner `*`), or let a cloud metadata name
 * into the allowlist.
 */
import { z } from "zod";
import { classifyHostLiteral, isMetadataName } from "../wire/hosts.ts";

/** Parsed egress rules. Field names follow the YAML (snake_case); `timeout` becomes `timeout_ms`. */
export interface EgressRules {
  /** Allow http(s) to loopback hosts (any port), honoured only while the gateway itself is on loopback. */
  allow_loopback: boolean;
  /** Allow bare public IP literals (production Workers refuse IP URLs anyway). */
  allow_ip_literals: boolean;
  /** Canonical host names, `*.domain` patterns (one or more labels) or IP literals; empty = any public name. */
  hosts: string[];
  /** Allowed https ports (loopback ignores this when allowed). */
  ports: number[];
  /** Redirect hops guardedFetch may follow (GET/HEAD only), each re-checked. */
  max_redirects: number;
  /** Upper bound on a response body, in bytes (decoded bytes, as the Worker reads them). */
  max_response_bytes: number;
  /** Upper bound on one exchange (all hops and the body), in milliseconds. */
  timeout_ms: number;
}

const DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 30_000;
/** A Worker has 128 MB of memory; a bigger bound could never be honoured by buffering callers. */
const MAX_RESPONSE_BYTES_LIMIT = 128 * 1024 * 1024;
const MAX_TIMEOUT_MS = 15 * 60_000;

function durationMs(v: number | string): number {
  if (typeof v === "number") return v;
  const m = /^(\d+)(ms|s|m)$/.exec(v);
  const n = Number(m?.[1] ?? NaN);
  return m?.[2] === "ms" ? n : m?.[2] === "s" ? n * 1000 : n * 60_000;
}

const duration = z
  .union([z.number().int().positive(), z.string().regex(/^\d+(ms|s|m)$/, 'use a number of milliseconds or a string such as "500ms", "30s", "2m"')])
  .transform(durationMs)
  .refine((ms) => ms > 0 && ms <= MAX_TIMEOUT_MS, `must be between 1 ms and ${MAX_TIMEOUT_MS / 60_000} minutes`);

/**
 * Canonical form of one `hosts` entry, or an error message. The name part goes through the same
 * WHATWG host parser the runtime check uses, so `API.Example.COM.` and `api.example.com` agree.
 */
function canonicalHostPattern(entry: string): { ok: true; value: string } | { ok: false; message: string } {
  const raw = entry.trim();
  const wild = raw.startsWith("*.");
  const body = wild ? raw.slice(2) : raw;
  if (raw === "*") return { ok: false, message: '"*" is not a pattern here: leave hosts empty to allow any public host name' };
  if (body === "" || /[*/\\@?#\s%]/.test(body)) {
    return { ok: false, message: `"${entry}" must be a host name, an IP literal or "*.domain" (no scheme, port, path or inner "*")` };
  }
  const bareV6 = body.includes(":") && !body.startsWith("[");
  let host: string;
  try {
    const u = new URL(`https://${bareV6 ? `[${body}]` : body}/`);
    if (u.port !== "" || u.username !== "" || u.password !== "") throw new Error("port or userinfo");
    host = u.hostname;
  } catch {
    return { ok: false, message: `"${entry}" is not a valid host name or IP literal (no port: use egress.ports)` };
  }
  if (host.endsWith(".")) host = host.slice(0, -1);
  if (wild && classifyHostLiteral(host) !== null) return { ok: false, message: `"${entry}": "*." patterns take a domain name, not an IP literal` };
  if (host === "" || host.split(".").some((l) => l === "")) return { ok: false, message: `"${entry}" has an empty label` };
  if (isMetadataName(host)) return { ok: false, message: `"${entry}" is a cloud metadata host name and can never be allowed` };
  return { ok: true, value: wild ? `*.${host}` : host };
}

const hostPattern = z
  .string()
  .min(1)
  .transform((s, ctx) => {
    const c = canonicalHostPattern(s);
    if (c.ok) return c.value;
    ctx.addIssue({ code: "custom", message: c.message });
    return z.NEVER;
  });

export const egressSchema = z
  .strictObject({
    allow_loopback: z.boolean().default(false),
    allow_ip_literals: z.boolean().default(false),
    hosts: z.array(hostPattern).default([]),
    ports: z.array(z.number().int().min(1).max(65535)).min(1, "list at least one port (443 is the default)").default([443]),
    max_redirects: z.number().int().min(0).max(5).default(0),
    max_response_bytes: z.number().int().min(1).max(MAX_RESPONSE_BYTES_LIMIT).default(DEFAULT_MAX_RESPONSE_BYTES),
    timeout: duration.default(DEFAULT_TIMEOUT_MS),
  })
  .transform(
    (e): EgressRules => ({
      allow_loopback: e.allow_loopback,
      allow_ip_literals: e.allow_ip_literals,
      hosts: e.hosts,
      ports: e.ports,
      max_redirects: e.max_redirects,
      max_response_bytes: e.max_response_bytes,
      timeout_ms: e.timeout,
    }),
  );

export type EgressInput = z.input<typeof egressSchema>;

/** Rules when `egress:` is absent: https only, any public host name, port 443, no redirects. */
export const DEFAULT_EGRESS_RULES: Readonly<EgressRules> = (() => {
  const r = egressSchema.parse({});
  Object.freeze(r.hosts);
  Object.freeze(r.ports);
  return Object.freeze(r);
})();
