/**
 * The tool catalog's per-isolate store: entries by key (upstream, URL, era, credential scope),
 * bounded in number, and the drop that follows an upstream's `notifications/tools/list_changed`.
 * Kept apart from catalog.ts so the relays that see list changes can drop entries without
 * importing the code that fills them. Must never: hold more than MAX_KEYS entries.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import type { Principal } from "../config/principal.ts";
import type { CatalogTool } from "../governance/catalog-entry.ts";
import { Memo } from "../wire/memo.ts";

export interface Entry {
  at: number;
  /** Exposed name → tool. */
  tools: Map<string, CatalogTool>;
}

/**
 * Whose credential an upstream's lists are read with, as part of a cache key: the principal's own
 * (a registered token, a personal OAuth connection), the team's (a shared OAuth connection), or the
 * gateway's (brokered, none) — a list one credential reads never answers for another.
 */
export function credentialScope(up: UpstreamConfig, p: Principal): string {
  if (up.credentials.mode === "per_principal") return `p:${p.sub}`;
  if (up.credentials.mode === "oauth") return up.oauth?.connection === "shared" ? `t:${p.team}` : `p:${p.sub}`;
  return "shared";
}

const MAX_KEYS = 1000;
const entries = new Memo<string, Entry>({ max: MAX_KEYS });

export function cached(key: string): Entry | undefined {
  return entries.get(key);
}

export function store(key: string, e: Entry): Entry {
  entries.set(key, e);
  return e;
}

/** The upstream announced a tool list change: every entry of it in this isolate is dropped. */
function forgetTools(upstream: string): void {
  for (const k of entries.keys()) if (k.startsWith(`${upstream}\u0000`)) entries.delete(k);
}

/** Notifications that invalidate an upstream's catalog entries. */
export function noteNotification(upstream: string, method: string): void {
  if (method === "notifications/tools/list_changed") forgetTools(upstream);
}

/** Empties this isolate's catalog (tests start from a cold isolate). */
export function clearCatalog(): void {
  entries.clear();
}
