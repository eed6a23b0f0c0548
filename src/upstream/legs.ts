/**
 * Upstream legs: which era the gateway speaks to each upstream for a given client, and the
 * capabilities the client is shown. Owns: opening legacy upstream sessions for a legacy client
 * session, falling back to a 2026-07-28 leg for modern-only upstreams, the lazy legs of a legacy
 * session to upstreams a hot reload added after it initialized (sessionLeg), the per-principal
 * legacy sessions modern clients need with legacy-only upstreams, and merging capabilities.
 * Notes why an opening failed (unavailable.ts), so a list that finds no leg can say why.
 * Must never: advertise upstream a client capability the gateway cannot route back, or keep two
 * legs of one session to one upstream.
 */
import type { GatewayConfig, UpstreamConfig } from "../config/gateway-config.ts";
import { type JsonObject, isObject } from "../wire/jsonrpc.ts";
import type { Env } from "../env.ts";
import { legObject } from "../../durable-objects/object-names.ts";
import type { Leg, SessionApi, SessionRecord, UpstreamLegRecord } from "../../durable-objects/contract.ts";
import { guardedFetch } from "../egress/guarded-fetch.ts";
import { callUpstream, initializeLegacy, modernDiscovery, modernMeta } from "./client.ts";
import { LATEST_LEGACY } from "../protocol/versions.ts";
import { mergeExtensions } from "../protocol/extensions.ts";
import { Memo } from "../wire/memo.ts";
import { noteOpened, noteOpenFailure } from "./unavailable.ts";
import { capabilitiesKey, relayableCapabilities } from "./rounds.ts";

/** Opens a leg to `up` for a legacy client session: legacy if the upstream speaks it, else modern. */
export async function openLegacyClientLeg(up: UpstreamConfig, version: string, clientCaps: JsonObject, clientInfo?: JsonObject): Promise<UpstreamLegRecord> {
  try {
    const init = await initializeLegacy(up, version, relayableCapabilities(clientCaps), clientInfo);
    const leg: Leg = { era: "legacy", protocolVersion: init.protocolVersion, ...(init.sessionId ? { sessionId: init.sessionId } : {}) };
    const rec: UpstreamLegRecord = { leg };
    if (isObject(init.result.capabilities)) rec.capabilities = init.result.capabilities;
    if (typeof init.result.instructions === "string") rec.instructions = init.result.instructions;
    if (isObject(init.result.serverInfo)) rec.serverInfo = init.result.serverInfo;
    noteOpened(up);
    return rec;
  } catch (refused) {
    let why: unknown = refused;
    const discover = await modernDiscovery(up).catch((e) => {
      why = e;
      return null;
    });
    if (!discover) {
      // No leg: a later request finds none, and its list says why (unavailable.ts).
      noteOpenFailure(up, why);
      return {};
    }
    noteOpened(up);
    const rec: UpstreamLegRecord = { leg: { era: "modern", meta: modernMeta(clientCaps) } };
    if (isObject(discover.capabilities)) rec.capabilities = discover.capabilities;
    if (typeof discover.instructions === "string") rec.instructions = discover.instructions;
    const si = isObject(discover._meta) ? discover._meta["io.modelcontextprotocol/serverInfo"] : undefined;
    if (isObject(si)) rec.serverInfo = si;
    return rec;
  }
}

/** Ends an upstream session the gateway opened (DELETE with its session id); never throws. */
export async function closeLegacyLeg(up: UpstreamConfig, leg: Leg): Promise<void> {
  if (leg.era !== "legacy" || !leg.sessionId) return;
  const h = new Headers(up.headers);
  h.set("mcp-session-id", leg.sessionId);
  h.set("mcp-protocol-version", leg.protocolVersion);
  await guardedFetch(up.url, { method: "DELETE", headers: h }, { rules: up.egress, gatewayOnLoopback: up.onLoopback, maxRedirects: 0, timeoutMs: 5000 })
    .then((r) => r.body?.cancel())
    .catch(() => undefined);
}

/**
 * Lazy legs being opened for one request, by the session record that request read (each request
 * reads its own): concurrent first uses within a request share one opening. Nothing in flight is
 * shared between requests — Workers never settles for one request a promise whose request has
 * ended — so concurrent requests each open, and SessionDO.adoptLeg keeps the first leg stored.
 */
const opening = new WeakMap<SessionRecord, Map<string, Promise<UpstreamLegRecord | null>>>();

/**
 * The leg record of legacy client session `rec` (read from `store`) for `up`. A session opens its
 * legs at initialize; an upstream a hot reload added afterwards has none there, so its leg is
 * opened on first use — tools/list, tools/call, anything that reaches it — with the session's own
 * protocol version, client capabilities and client info, and kept in the session record (and in
 * `rec`, for the rest of this request). Concurrent first uses within one request share one
 * opening; a request whose `rec` was read before another stored the leg finds it in the session
 * record; and when two requests (of this isolate or of others) open at once, SessionDO.adoptLeg
 * keeps the first leg stored, while a later opener closes its own upstream session and uses the
 * kept one. An upstream that cannot be reached now is not stored (undefined: unavailable for this
 * request), so the next use tries again.
 */
export async function sessionLeg(store: SessionApi, rec: SessionRecord, up: UpstreamConfig): Promise<UpstreamLegRecord | undefined> {
  const have = rec.upstreams[up.name];
  if (have) return have;
  const key = `${up.name}\u0000${up.url}`;
  let mine = opening.get(rec);
  if (!mine) {
    mine = new Map();
    opening.set(rec, mine);
  }
  let p = mine.get(key);
  if (!p) {
    p = (async () => {
      // Another request (of this isolate or another) may have stored it since `rec` was read.
      const now = await store.open(rec.principal).catch(() => null);
      if (!now) return null;
      const kept = now.upstreams[up.name];
      if (kept) return kept;
      const opened = await openLegacyClientLeg(up, rec.protocolVersion, rec.clientCapabilities, rec.clientInfo);
      if (!opened.leg) return null;
      const adopted = await store.adoptLeg(rec.principal, up.name, opened).catch(() => null);
      // Another request stored a leg first (or the session is gone): ours is not kept, so it is closed.
      if (!adopted?.stored) await closeLegacyLeg(up, opened.leg);
      return adopted?.rec ?? null;
    })();
    mine.set(key, p);
    const done = () => {
      if (mine.get(key) === p) mine.delete(key);
    };
    p.then(done, done);
  }
  const got = await p.catch(() => null);
  if (got) rec.upstreams[up.name] = got;
  return got ?? undefined;
}

interface ModernClientLeg {
  rec: UpstreamLegRecord;
  /** When the read or opening that produced it started. */
  at: number;
}
/**
 * The settled per-principal legs of this isolate (values, never promises: a request that finds
 * none opens or reads one itself, since Workers never settles for one request a promise whose
 * request has ended). The newest to start wins, so a read that began before a renewal cannot put
 * the expired leg back. Bounded; the oldest is dropped first.
 */
const MAX_MODERN_LEGS = 1000;
const modernClientLegs = new Memo<string, ModernClientLeg>({ max: MAX_MODERN_LEGS });

function keepModernLeg(key: string, leg: ModernClientLeg): void {
  const cur = modernClientLegs.get(key);
  if (cur && cur.at > leg.at) return;
  modernClientLegs.set(key, leg);
}

/** Where a modern principal's legacy upstream session is kept across isolates (SessionDO). */
interface LegStore {
  get(): Promise<UpstreamLegRecord | null>;
  put(rec: UpstreamLegRecord): Promise<boolean>;
  /** Stores `rec` unless a live leg is kept already (SessionDO.keepLeg): the kept leg and whether it is `rec`. */
  keep(rec: UpstreamLegRecord): Promise<{ rec: UpstreamLegRecord; stored: boolean } | null>;
}

function legStore(env: Env, principal: string, up: UpstreamConfig, caps: JsonObject): LegStore {
  // Addressed lazily: most requests reach modern upstreams and never touch it.
  const s = () => legObject(env, principal, up.name, up.url, capabilitiesKey(caps));
  return { get: () => s().getLeg(principal), put: (rec) => s().putLeg(principal, rec), keep: (rec) => s().keepLeg(principal, rec) };
}

/**
 * The leg a 2026-07-28 client uses: pass-through for modern upstreams; for legacy-only upstreams
 * one upstream session per (principal, upstream), kept in SessionDO (`store`) so every isolate
 * shares it, cached per isolate, and renewed on expiry. Two requests that open it at once (no
 * in-flight promise is shared) keep the first stored (SessionDO.keepLeg); the other closes its own. Such a session declares
 * the client capabilities `caps` (sampling, elicitation, roots of the request's `_meta`; one session per set), so the
 * upstream asks only what the client can answer — in input rounds (rounds.ts).
 */
export async function modernClientLeg(
  up: UpstreamConfig,
  principal: string,
  renew = false,
  store?: LegStore,
  caps: JsonObject = {},
): Promise<UpstreamLegRecord> {
  const discover = await modernDiscovery(up);
  if (discover) {
    const rec: UpstreamLegRecord = { leg: { era: "modern", meta: {} } };
    if (isObject(discover.capabilities)) rec.capabilities = discover.capabilities;
    if (typeof discover.instructions === "string") rec.instructions = discover.instructions;
    return rec;
  }
  const relayable = relayableCapabilities(caps);
  const key = `${principal}\u0000${up.name}\u0000${up.url}\u0000${capabilitiesKey(relayable)}`;
  const have = renew ? undefined : modernClientLegs.get(key);
  if (have) return have.rec;
  const at = Date.now();
  const kept = renew ? null : await store?.get().catch(() => null);
  if (kept?.leg) {
    keepModernLeg(key, { rec: kept, at });
    return kept;
  }
  const opened = await openLegacyClientLeg(up, LATEST_LEGACY, relayable);
  let rec = opened;
  if (opened.leg && store) {
    // A renewal replaces the forgotten session; a first opening keeps the leg another request stored first (and closes its own).
    if (renew) await store.put(opened).catch(() => false);
    else {
      const kept = await store.keep(opened).catch(() => null);
      if (kept && !kept.stored && kept.rec.leg) {
        await closeLegacyLeg(up, opened.leg);
        rec = kept.rec;
      }
    }
  }
  keepModernLeg(key, { rec, at });
  return rec;
}

/** The level last applied per legacy session (one per kept leg at most: bounded like the legs). */
const appliedLevels = new Memo<string, string>({ max: MAX_MODERN_LEGS });

/**
 * A modern request's `logLevel` applied to the per-principal legacy upstream session (once per
 * change), so that upstream's notifications/message reach the request at that level.
 */
export async function applyLogLevel(up: UpstreamConfig, principal: string, rec: UpstreamLegRecord, level: string): Promise<void> {
  const leg = rec.leg;
  if (leg?.era !== "legacy" || !isObject(rec.capabilities?.logging)) return;
  const key = `${principal}\u0000${up.name}\u0000${leg.sessionId ?? ""}`;
  if (appliedLevels.get(key) === level) return;
  await callUpstream(up, leg, { jsonrpc: "2.0", id: `portcullis-level-${crypto.randomUUID()}`, method: "logging/setLevel", params: { level } });
  appliedLevels.set(key, level);
}

/** modernClientLeg with the leg kept in SessionDO for this principal (one per set of relayable client capabilities). */
export function modernLegFor(env: Env, principal: string, up: UpstreamConfig, renew = false, caps: JsonObject = {}): Promise<UpstreamLegRecord> {
  return modernClientLeg(up, principal, renew, legStore(env, principal, up, caps), caps);
}

/** The list-change notifications an upstream's capabilities say it can send. */
export function listChangeFlags(caps: JsonObject | undefined): JsonObject {
  const out: JsonObject = {};
  for (const [k, cap] of [
    ["toolsListChanged", "tools"],
    ["promptsListChanged", "prompts"],
    ["resourcesListChanged", "resources"],
  ] as const) {
    const c = caps?.[cap];
    if (isObject(c) && c.listChanged === true) out[k] = true;
  }
  return out;
}

function mergeFlags(a: JsonObject | undefined, b: JsonObject): JsonObject {
  const out: JsonObject = { ...(a ?? {}) };
  for (const [k, v] of Object.entries(b)) if (v === true || out[k] === undefined) out[k] = v;
  return out;
}

/**
 * Client-facing capabilities: one transparent upstream's verbatim, else the union of the core
 * capabilities and only the extensions the gateway serves when aggregating (skills, tasks; see
 * protocol/extensions.ts mergeExtensions): an extension whose methods would get -32601 is never advertised.
 */
export function mergeCapabilities(cfg: GatewayConfig, recs: Record<string, UpstreamLegRecord>): JsonObject {
  const ups = cfg.upstreams;
  if (ups.length === 1 && !ups[0]!.namespaced) return recs[ups[0]!.name]?.capabilities ?? {};
  const out: JsonObject = {};
  const extensions: JsonObject[] = [];
  for (const up of ups) {
    const caps = recs[up.name]?.capabilities;
    if (!caps) continue;
    for (const k of ["tools", "prompts", "resources", "completions", "logging"]) {
      if (isObject(caps[k])) out[k] = mergeFlags(isObject(out[k]) ? out[k] : undefined, caps[k]);
    }
    if (isObject(caps.extensions)) extensions.push(caps.extensions);
  }
  const served = mergeExtensions(extensions);
  if (served) out.extensions = served;
  return out;
}

export function mergeInstructions(cfg: GatewayConfig, recs: Record<string, UpstreamLegRecord>): string | undefined {
  const parts = cfg.upstreams.map((u) => [u, recs[u.name]?.instructions] as const).filter(([, i]) => typeof i === "string" && i.length > 0);
  if (parts.length === 0) return undefined;
  if (cfg.upstreams.length === 1 && !cfg.upstreams[0]!.namespaced) return parts[0]![1];
  return parts.map(([u, i]) => `[${u.name}] ${i}`).join("\n\n");
}
