/**
 * Exposed names: how upstream tool/prompt names, resource URIs and task ids appear to clients
 * when several upstreams are aggregated, and how to map them back.
 * Owns: the `<upstream>__<name>` and `<upstream>+<uri>` conventions, and the 64-character tool-name
 * budget. Must never: map one exposed name to two upstreams
 * (upstream names contain no `_`, so the first `__` is always the split point).
 */
import type { UpstreamConfig } from "../config/load.ts";

export const SEP = "__";
const MAX_TOOL_NAME = 64;

/** SHA-256 is async in Workers; a small FNV-1a hash is enough for a stable alias suffix. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/** The name a client sees. Over-long names get a deterministic alias within 64 characters. */
export function exposeName(up: UpstreamConfig, name: string, limit = MAX_TOOL_NAME): string {
  if (!up.namespaced) return name;
  const full = `${up.name}${SEP}${name}`;
  if (full.length <= limit) return full;
  const keep = limit - up.name.length - SEP.length - 9;
  return `${up.name}${SEP}${name.slice(0, keep)}_${fnv1a(name)}`;
}

/** Splits an exposed name into (upstream, name-as-exposed-after-prefix). */
export function splitName(upstreams: UpstreamConfig[], exposed: string): { up: UpstreamConfig; name: string } | null {
  if (upstreams.length === 1 && !upstreams[0]!.namespaced) return { up: upstreams[0]!, name: exposed };
  const i = exposed.indexOf(SEP);
  if (i <= 0) return null;
  const up = upstreams.find((u) => u.name === exposed.slice(0, i));
  if (!up) return null;
  return { up, name: exposed.slice(i + SEP.length) };
}

export function exposeUri(up: UpstreamConfig, uri: string): string {
  return up.namespaced ? `${up.name}+${uri}` : uri;
}

export function splitUri(upstreams: UpstreamConfig[], exposed: string): { up: UpstreamConfig; uri: string } | null {
  if (upstreams.length === 1 && !upstreams[0]!.namespaced) return { up: upstreams[0]!, uri: exposed };
  const i = exposed.indexOf("+");
  if (i <= 0) return null;
  const up = upstreams.find((u) => u.name === exposed.slice(0, i));
  if (!up) return null;
  return { up, uri: exposed.slice(i + 1) };
}

/** Task ids and other opaque handles use the same prefix as names. */
export function exposeHandle(up: UpstreamConfig, handle: string): string {
  return exposeName(up, handle, Number.POSITIVE_INFINITY);
}
export function splitHandle(upstreams: UpstreamConfig[], exposed: string) {
  return splitName(upstreams, exposed);
}
