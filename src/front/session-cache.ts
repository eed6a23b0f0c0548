/**
 * The legacy session off the per-call path, per isolate: the session records this isolate read
 * lately (served for SESSION_CACHE_MS, each request its own copy), and the id map of the calls in
 * flight here (which upstream, under which id, serves client request N of a session), written to
 * the SessionDO only once a call has run ID_MAP_AFTER_MS — the time from which a cancellation can
 * come from another isolate. Owns the bounds: a session ended or expired by another isolate is
 * still served here for at most SESSION_CACHE_MS; one changed by another isolate (a log level, a
 * lazily opened leg) is seen within the same bound; every change this isolate makes to a session
 * drops its record here at once. Must never: serve a record to another principal than the one
 * that read it, hand one request's record object to another (Workers never share a request's
 * objects), or keep a promise.
 */
import type { SessionApi, SessionRecord } from "../../durable-objects/contract.ts";
import { Memo } from "../wire/memo.ts";

/** How long a session record read here is served without asking its SessionDO again. */
export const SESSION_CACHE_MS = 1000;
/** A call still running after this long has its id map written to its SessionDO (cancellations from any isolate find it). */
export const ID_MAP_AFTER_MS = 250;
const MAX_SESSIONS = 10_000;
const MAX_IN_FLIGHT = 10_000;

interface Cached {
  principal: string;
  rec: SessionRecord;
}
const sessions = new Memo<string, Cached>({ max: MAX_SESSIONS, ttlMs: SESSION_CACHE_MS });

/** `sid`'s live record for `principal` (a copy of this isolate's, while fresh; else the SessionDO's), or null. */
export async function openSession(sid: string, store: SessionApi, principal: string): Promise<SessionRecord | null> {
  const hit = sessions.get(sid);
  if (hit && hit.principal === principal) return structuredClone(hit.rec);
  const rec = await store.open(principal);
  if (rec) sessions.set(sid, { principal, rec: structuredClone(rec) });
  else sessions.delete(sid);
  return rec;
}

/** The SessionApi methods that change a session: after each, this isolate's record of it is dropped. */
const WRITES = new Set<string | symbol>(["create", "update", "adoptLeg", "end"]);

/**
 * `store` as the front writes through it: every change drops the session's record here. The
 * object's RPC handle is a proxy itself, so each method is looked up and called on the handle.
 */
export function writingStore(sid: string, store: SessionApi): SessionApi {
  const handle = store as unknown as Record<string | symbol, (...args: unknown[]) => Promise<unknown>>;
  return new Proxy(store, {
    get(_target, prop) {
      // Not a thenable, and no symbol is an RPC method.
      if (prop === "then" || typeof prop === "symbol") return undefined;
      if (WRITES.has(prop)) return (...args: unknown[]) => handle[prop]!(...args).finally(() => sessions.delete(sid));
      return (...args: unknown[]) => handle[prop]!(...args);
    },
  });
}

/** The session's record here is stale (it ended): dropped. */
export function forgetSession(sid: string): void {
  sessions.delete(sid);
}

interface InFlight {
  upstream: string;
  upstreamId: string;
}
/** Calls in flight on this isolate, by session and client request id (plain values only). */
const inFlight = new Memo<string, InFlight>({ max: MAX_IN_FLIGHT });
const key = (sid: string, downId: string) => `${sid}\u0000${downId}`;

/**
 * The id map of one request's calls: `record` notes where a call went (here at once; in the
 * SessionDO once it has run ID_MAP_AFTER_MS), `done` ends them when the request has its answer.
 */
export function idMap(sid: string, write: (downId: string, upstream: string, upstreamId: string) => Promise<void>) {
  const timers = new Map<string, ReturnType<typeof setTimeout>>();
  const recorded = new Set<string>();
  return {
    record(downId: string, upstream: string, upstreamId: string): void {
      inFlight.set(key(sid, downId), { upstream, upstreamId });
      recorded.add(downId);
      const old = timers.get(downId);
      if (old !== undefined) clearTimeout(old);
      timers.set(
        downId,
        setTimeout(() => {
          timers.delete(downId);
          write(downId, upstream, upstreamId).catch(() => undefined);
        }, ID_MAP_AFTER_MS),
      );
    },
    done(): void {
      for (const t of timers.values()) clearTimeout(t);
      timers.clear();
      for (const downId of recorded) inFlight.delete(key(sid, downId));
      recorded.clear();
    },
  };
}

/** Where client request `downId` of session `sid` went, when it is in flight on this isolate. */
export function inFlightRequest(sid: string, downId: string): InFlight | undefined {
  return inFlight.get(key(sid, downId));
}
