/**
 * Exposed names: how upstream tool/prompt names, resource URIs and task ids appear to clients
 * when several upstreams are aggregated, and how to map them back. Each upstream's naming is its
 * own (`namespaced`): at most one upstream is served with its own names (transparent) beside any
 * number of prefixed ones, so adding an upstream never renames another's tools. On a `/mcp/<upstream>`
 * route (route-view.ts), the split between the edge name (what that route's client sees: the
 * upstream's own name, since the view's upstream is not namespaced) and the governed name (what
 * grants, policy, rate limits and history, the ledger, holds and the kill switch see: the name
 * /mcp exposes, so a rule or grant written for /mcp governs the route identically).
 * Owns: the `<upstream>__<name>` and `<upstream>+<uri>` conventions, the 64-character tool-name
 * budget, the edge ↔ governed mapping, and which upstreams a config change would rename for
 * agents (`renamedUpstreams`). Must never: map one exposed name to two upstreams
 * (upstream names contain no `_`, so the first `__` is always the split point, and a prefix
 * that names a prefixed upstream is that upstream's: the transparent upstream's own names that
 * look prefixed are shadowed, `shadowed`), or give governance a name other than the one /mcp
 * would have given the same tool.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";

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

/** The one upstream served with its own names (`namespaced: false`), if any. */
export function transparentOf(upstreams: readonly UpstreamConfig[]): UpstreamConfig | undefined {
  return upstreams.find((u) => !u.namespaced);
}

/** The prefixed upstream a `<upstream><sep>…` text names, and the rest of the text after the separator. */
function prefixedOwner(upstreams: readonly UpstreamConfig[], exposed: string, sep: string): { up: UpstreamConfig; rest: string } | null {
  const i = exposed.indexOf(sep);
  if (i <= 0) return null;
  const up = upstreams.find((u) => u.namespaced && u.name === exposed.slice(0, i));
  return up ? { up, rest: exposed.slice(i + sep.length) } : null;
}

/**
 * Splits an exposed name into (upstream, name-as-exposed-after-prefix): a prefix naming a prefixed
 * upstream is that upstream's; any other name is the transparent upstream's own (if there is one).
 */
export function splitName(upstreams: readonly UpstreamConfig[], exposed: string): { up: UpstreamConfig; name: string } | null {
  const owner = prefixedOwner(upstreams, exposed, SEP);
  if (owner) return { up: owner.up, name: owner.rest };
  const bare = transparentOf(upstreams);
  return bare ? { up: bare, name: exposed } : null;
}

export function exposeUri(up: UpstreamConfig, uri: string): string {
  return up.namespaced ? `${up.name}+${uri}` : uri;
}

export function splitUri(upstreams: readonly UpstreamConfig[], exposed: string): { up: UpstreamConfig; uri: string } | null {
  const owner = prefixedOwner(upstreams, exposed, "+");
  if (owner) return { up: owner.up, uri: owner.rest };
  const bare = transparentOf(upstreams);
  return bare ? { up: bare, uri: exposed } : null;
}

/**
 * Whether the transparent upstream `up`'s own name or URI reads as another upstream's (a tool
 * `db__query` beside a prefixed upstream `db`): such an item is not listed, and calls by that name
 * go to the prefixed upstream, so one exposed name never means two tools.
 */
export function shadowed(upstreams: readonly UpstreamConfig[], up: UpstreamConfig, own: string, kind: "name" | "uri"): boolean {
  return !up.namespaced && prefixedOwner(upstreams, own, kind === "name" ? SEP : "+") !== null;
}

/**
 * The tools `lists` name (each upstream with the tool names it listed), with their stable
 * identity and the name they are exposed under among `upstreams` — what policy coverage judges.
 * A shadowed tool is left out: it is not served, so it matches nothing.
 */
export function knownTools(
  upstreams: readonly UpstreamConfig[],
  lists: readonly (readonly [UpstreamConfig, readonly string[]])[],
): { upstream: string; tool: string; exposed: string }[] {
  return lists.flatMap(([up, names]) =>
    names.filter((n) => !shadowed(upstreams, up, n, "name")).map((tool) => ({ upstream: up.name, tool, exposed: exposeName(up, tool) })),
  );
}

/** Task ids and other opaque handles use the same prefix as names. */
export function exposeHandle(up: UpstreamConfig, handle: string): string {
  return exposeName(up, handle, Number.POSITIVE_INFINITY);
}
export function splitHandle(upstreams: readonly UpstreamConfig[], exposed: string) {
  return splitName(upstreams, exposed);
}

/**
 * A `/mcp/<upstream>` route: that upstream served alone (the view's copy of it is not namespaced,
 * so the edge shows its own names), while governance keeps the name /mcp exposes. Absent on /mcp.
 */
export interface RouteView {
  /** The upstream the route serves. */
  upstream: string;
  /** Whether /mcp prefixes that upstream's names (its `namespaced` in the served config). */
  prefixed: boolean;
}

/** `up` as /mcp names it: on a route, the route's upstream with the namespacing /mcp gives it; otherwise `up` itself. */
export function governedUpstream(up: UpstreamConfig, route: RouteView | undefined): UpstreamConfig {
  return route && route.upstream === up.name && up.namespaced !== route.prefixed ? { ...up, namespaced: route.prefixed } : up;
}

/** The governed name of `up`'s own tool `name`: what /mcp exposes it as (aliased within 64 characters like there). */
export function governedName(up: UpstreamConfig, name: string, route: RouteView | undefined): string {
  return exposeName(governedUpstream(up, route), name);
}

/** The governed name of a tool name as this route's client sent it (on /mcp the two are the same). */
export function governedFromEdge(upstreams: readonly UpstreamConfig[], edge: string, route: RouteView | undefined): string {
  if (!route) return edge;
  const t = splitName(upstreams, edge);
  return t ? governedName(t.up, t.name, route) : edge;
}

/**
 * Splits a governed name into (upstream, name after the prefix) among this request's upstreams —
 * the upstream as the request serves it (so its edge names stay as they are), or null when none
 * of them owns the name (on a route: a name of another upstream).
 */
export function splitGoverned(
  upstreams: readonly UpstreamConfig[],
  governed: string,
  route: RouteView | undefined,
): { up: UpstreamConfig; name: string } | null {
  if (!route) return splitName(upstreams, governed);
  const as = upstreams.map((u) => governedUpstream(u, route));
  const t = splitName(as, governed);
  return t ? { up: upstreams[as.indexOf(t.up)]!, name: t.name } : null;
}

/** One upstream whose exposed names a config change moves: how its tools were named before and after. */
export interface Renamed {
  upstream: string;
  /** e.g. `get-sum` → `everything__get-sum` (a tool name shown as an example). */
  before: string;
  after: string;
}

/**
 * The upstreams, present in both configs under one name, whose tools agents would see under other
 * names after the change (their namespacing differs: a second upstream added beside one that was
 * served transparently by default and has no `namespace: false` of its own, `namespace` changed). Open sessions listed the old names, and rules and
 * grants written for them would stop matching, so a reload refuses such a change unless forced.
 */
export function renamedUpstreams(before: readonly UpstreamConfig[], after: readonly UpstreamConfig[]): Renamed[] {
  const out: Renamed[] = [];
  for (const b of before) {
    const a = after.find((u) => u.name === b.name);
    if (!a || a.namespaced === b.namespaced) continue;
    out.push({ upstream: b.name, before: exposeName(b, "<tool>"), after: exposeName(a, "<tool>") });
  }
  return out;
}

/** The problem line for one renamed upstream (reload, add, PUT /v1/config). */
export function renameProblem(r: Renamed): string {
  const fix = r.after.includes(SEP)
    ? `set namespace: false on ${r.upstream} to keep its names (one upstream may keep its own names beside prefixed ones), or force the reload to accept the rename`
    : `set namespace: true on ${r.upstream} to keep its names, or force the reload to accept the rename`;
  return `upstream ${r.upstream}: this change renames every tool of ${r.upstream} for agents (${r.before} becomes ${r.after}); open sessions listed the old names, and grants and rules written for them stop matching. ${fix}`;
}
