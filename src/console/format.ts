/**
 * Text the console pages show for times, durations, classifications and canonical JSON. Pure
 * functions over values; the pages put their output through JSX text, which escapes it. Must
 * never: produce markup, or change what an action says (pretty-printing only re-indents it).
 */
import type { Json } from "../wire/jsonrpc.ts";

/** `2d 3h`, `3h 59m`, `4m 10s`, `12s` — the two largest units. */
export function duration(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  const units: [string, number][] = [
    ["d", 86400],
    ["h", 3600],
    ["m", 60],
    ["s", 1],
  ];
  const parts: string[] = [];
  let rest = s;
  for (const [u, n] of units) {
    const q = Math.floor(rest / n);
    if (q > 0 || (parts.length > 0 && parts.length < 2)) parts.push(`${q}${u}`);
    rest -= q * n;
    if (parts.length === 2) break;
  }
  return parts.length ? parts.join(" ") : "0s";
}

export function age(createdAt: number, now: number): string {
  return `${duration(now - createdAt)} ago`;
}

/** `in 3h 59m`, or `expired 4m ago`. */
export function expiry(expiresAt: number, now: number): string {
  return expiresAt > now ? `in ${duration(expiresAt - now)}` : `expired ${duration(now - expiresAt)} ago`;
}

/** ISO 8601 (UTC, seconds), or an em dash for null. */
export function iso(ms: number | null | undefined): string {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "—";
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** JSON text re-indented for reading; text that is not JSON is returned as it is. */
export function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** A JSON value, indented. */
export function pretty(value: unknown): string {
  return JSON.stringify(value, null, 2) ?? String(value);
}

/** `effect: write · blast_radius: … · source: mapping` from a hold's or record's classification object. */
export function classificationText(c: { [k: string]: Json | undefined } | null | undefined): string {
  if (!c || typeof c !== "object") return "—";
  const parts: string[] = [];
  for (const key of ["effect", "blast_radius", "source"]) {
    const v = c[key];
    if (v === undefined || v === null) continue;
    parts.push(`${key}: ${typeof v === "string" ? v : JSON.stringify(v)}`);
  }
  return parts.length ? parts.join(" · ") : "—";
}

/** A string field of a JSON object, or the fallback. */
export function field(o: { [k: string]: Json | undefined } | null | undefined, key: string, fallback = "—"): string {
  const v = o?.[key];
  if (v === undefined || v === null) return fallback;
  return typeof v === "string" ? v : JSON.stringify(v);
}
