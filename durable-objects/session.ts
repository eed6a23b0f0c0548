/**
 * SessionDO: a thin state machine over DO SQLite holding one of three kinds of object, by name
 * (durable-objects/object-names.ts): a legacy (2025-11-25 era) MCP session (`session:`), a modern run
 * (`run:`), or a modern principal's session with one legacy-only upstream (`leg:`).
 * Owns: the session's principal, negotiated version, client capabilities, upstream legs,
 * the JSON-RPC id map (client request id → upstream and upstream request id, for cancellation), pending
 * server→client requests (gateway id → upstream + upstream id), the SSE event buffers used
 * for resumption, and their retention (idle expiry by alarm; docs/storage.md). Everything is
 * persisted, so an evicted object resumes the session.
 * Must never: serve a session to a principal other than its opener (it answers "not found"),
 * read or overwrite a record of a version it does not know (another release's: "not found"),
 * forward anything upstream itself, or keep state only in memory.
 */
import { DurableObject } from "cloudflare:workers";
import type { JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import {
  LEG_IDLE_TTL_S,
  SESSION_RECORD_VERSION,
  STORED_LEG_VERSION,
  type PendingRelay,
  type SessionRecord,
  type StoredEvent,
  type StoredLeg,
  type UpstreamLegRecord,
} from "./contract.ts";
import { addColumn, appendEventRows, FOREIGN, parseRecord, pruneBufferRows, readable, readEventRows, SESSION_SCHEMA } from "./session-rows.ts";

/** The protocol version claimRun writes: what marks a run's record (legacy sessions are only created at legacy versions). */
const RUN_VERSION = "2026-07-28";
/** How often the alarm looks again at a foreign record (it neither reads nor deletes it). */
const FOREIGN_RETRY_MS = 86_400_000;
/** Idle timestamps are persisted at most this often. */
const TOUCH_MS = 60_000;
const LEG_IDLE_MS = LEG_IDLE_TTL_S * 1000;

export class SessionDO extends DurableObject {
  private sql: SqlStorage;
  private waiters = new Map<string, () => void>();
  /**
   * Whether this object has ever stored a record. An id nobody created (a random or stale
   * `Mcp-Session-Id`, a run id that was refused) is looked up without writing anything: no
   * table, no alarm — unknown ids leave no state behind.
   */
  private ready = false;
  /** The last parse of each record's row text (see read). */
  private parsed = new Map<"session" | "leg", { text: string; value: { v?: unknown } | typeof FOREIGN }>();

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.hasSchema();
  }

  /** Whether the tables exist (looked up, never created; migrated once when first found). */
  private hasSchema(): boolean {
    if (this.ready) return true;
    if (this.sql.exec("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").toArray().length === 0) return false;
    this.ready = true;
    this.migrate();
    return true;
  }

  /** Tables and columns added after an object first stored something. */
  private migrate(): void {
    this.sql.exec(SESSION_SCHEMA);
    // Objects created before buffers had timestamps: their rows count from now.
    addColumn(this.sql, "streams", "at", "INTEGER NOT NULL DEFAULT 0", Date.now());
    addColumn(this.sql, "answers", "at", "INTEGER NOT NULL DEFAULT 0", Date.now());
    // Id maps from before upstream ids were gateway-made: their requests' upstream ids are unknown (null).
    addColumn(this.sql, "idmap", "up_id", "TEXT", null);
  }

  /** Called only by the writes that create a record (create, claimRun, putLeg). */
  private ensureSchema(): void {
    if (this.ready) return;
    this.sql.exec(SESSION_SCHEMA);
    this.ready = true;
  }

  /**
   * The record under `k`: null when absent, FOREIGN when of a version (or form) this code does not
   * know. The row is read every time; its parse is kept (`parsed`) while the row's text stays the
   * same, so a request pays no JSON.parse of a record it did not change. A caller gets a shallow
   * copy, so changing its fields changes nothing until it is saved.
   */
  private read<T extends { v?: unknown }>(k: "session" | "leg", current: number): T | null | typeof FOREIGN {
    if (!this.hasSchema()) return null;
    const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = ?", k).toArray()[0];
    if (!row) return null;
    let got = this.parsed.get(k);
    if (got?.text !== row.v) {
      got = { text: row.v, value: parseRecord(row.v) };
      this.parsed.set(k, got);
    }
    const rec = got.value;
    return rec !== FOREIGN && readable((rec as T).v, current) ? ({ ...rec } as T) : FOREIGN;
  }
  private load(): SessionRecord | null {
    const rec = this.read<SessionRecord>("session", SESSION_RECORD_VERSION);
    return rec === FOREIGN ? null : rec;
  }
  private save(rec: SessionRecord): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('session', ?)", JSON.stringify({ ...rec, v: SESSION_RECORD_VERSION }));
  }
  private saveLeg(leg: StoredLeg): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('leg', ?)", JSON.stringify({ ...leg, v: STORED_LEG_VERSION }));
  }
  private expired(rec: SessionRecord, now: number): boolean {
    return now - rec.touchedAt > rec.ttlS * 1000;
  }
  /** Sets the alarm to `at` unless one is due sooner (the alarm recomputes every due time when it runs). */
  private async arm(at: number): Promise<void> {
    const cur = await this.ctx.storage.getAlarm();
    if (cur === null || at < cur) await this.ctx.storage.setAlarm(at);
  }

  /**
   * The end of a session or run: every buffer goes. A legacy session's record goes too (its
   * random id is never issued again); a run keeps its record as a tombstone naming its owner,
   * so a client-chosen run id never passes to another principal.
   */
  private finish(rec: SessionRecord): void {
    this.sql.exec("DELETE FROM events; DELETE FROM streams; DELETE FROM idmap; DELETE FROM pending; DELETE FROM answers;");
    if (rec.protocolVersion === RUN_VERSION) this.save({ ...rec, ended: true });
    else this.sql.exec("DELETE FROM meta WHERE k = 'session'");
  }

  /** Creates the session. Refuses to overwrite any existing record (ids are random; a clash is a bug) and to store a version it cannot read. */
  async create(rec: SessionRecord): Promise<boolean> {
    if (this.read("session", SESSION_RECORD_VERSION) !== null || !readable(rec.v, SESSION_RECORD_VERSION)) return false;
    this.ensureSchema();
    this.save(rec);
    await this.arm(rec.touchedAt + rec.ttlS * 1000 + 1);
    return true;
  }

  /**
   * The upstream session a 2026-07-28 principal uses with one legacy-only upstream (object named
   * `leg:<principal>\0<upstream>\0<url>`), shared by every isolate. Only its owner reads or
   * replaces it; a read keeps it alive (LEG_IDLE_TTL_S).
   */
  async getLeg(principal: string): Promise<UpstreamLegRecord | null> {
    const leg = this.read<StoredLeg>("leg", STORED_LEG_VERSION);
    if (!leg || leg === FOREIGN || leg.principal !== principal) return null;
    const now = Date.now();
    if (leg.touchedAt !== undefined && now - leg.touchedAt > LEG_IDLE_MS) return null;
    if (leg.touchedAt === undefined || now - leg.touchedAt > TOUCH_MS) {
      this.saveLeg({ ...leg, touchedAt: now });
      await this.arm(now + LEG_IDLE_MS);
    }
    return leg.rec;
  }

  /**
   * The first leg stored wins: when two requests (of this isolate or others) open the principal's
   * upstream session at once, the later one gets the kept leg back (and closes its own upstream
   * session), so every request of the principal uses one session. An idle-expired leg counts as
   * none. A renewal (the upstream forgot the session) replaces it through putLeg instead.
   */
  async keepLeg(principal: string, rec: UpstreamLegRecord): Promise<{ rec: UpstreamLegRecord; stored: boolean } | null> {
    const leg = this.read<StoredLeg>("leg", STORED_LEG_VERSION);
    if (leg === FOREIGN || (leg && leg.principal !== principal)) return null;
    const now = Date.now();
    if (leg && !(leg.touchedAt !== undefined && now - leg.touchedAt > LEG_IDLE_MS)) return { rec: leg.rec, stored: false };
    this.ensureSchema();
    this.saveLeg({ v: STORED_LEG_VERSION, principal, rec, touchedAt: now });
    await this.arm(now + LEG_IDLE_MS);
    return { rec, stored: true };
  }

  async putLeg(principal: string, rec: UpstreamLegRecord): Promise<boolean> {
    const leg = this.read<StoredLeg>("leg", STORED_LEG_VERSION);
    if (leg === FOREIGN || (leg && leg.principal !== principal)) return false;
    const now = Date.now();
    this.ensureSchema();
    this.saveLeg({ v: STORED_LEG_VERSION, principal, rec, touchedAt: now });
    await this.arm(now + LEG_IDLE_MS);
    return true;
  }

  /**
   * Runs (2026-07-28 `Portcullis-Run-Id`): the first principal to present a run id opens it;
   * only that principal may continue it, or open it again once it has ended or expired. True
   * when `principal` owns the run. An object holding anything but a run is never one.
   */
  async claimRun(principal: string, id: string, ttlS: number): Promise<boolean> {
    const rec = this.read<SessionRecord>("session", SESSION_RECORD_VERSION);
    if (rec === FOREIGN || (rec && rec.protocolVersion !== RUN_VERSION)) return false;
    const now = Date.now();
    if (rec && !rec.ended && !this.expired(rec, now)) return (await this.open(principal)) !== null;
    if (rec && rec.principal !== principal) return false;
    if (rec) this.finish(rec);
    this.ensureSchema();
    this.save({
      v: SESSION_RECORD_VERSION,
      id,
      principal,
      protocolVersion: RUN_VERSION,
      clientCapabilities: {},
      upstreams: {},
      createdAt: now,
      touchedAt: now,
      ttlS,
    });
    await this.arm(now + ttlS * 1000 + 1);
    return true;
  }

  /** The live session for this principal, or null (unknown, ended, expired, another principal's, or of an unknown version). */
  async open(principal: string): Promise<SessionRecord | null> {
    const rec = this.load();
    if (!rec || rec.ended || rec.principal !== principal) return null;
    const now = Date.now();
    if (this.expired(rec, now)) return null;
    // Idle expiry has minute granularity: persist the touch at most once a minute, not per request.
    if (now - rec.touchedAt > TOUCH_MS) {
      rec.touchedAt = now;
      this.save(rec);
    }
    return rec;
  }

  /** Open plus recording that client request `downId` went to `upstream` under id `upId` there (for cancellation). */
  async begin(principal: string, downId: string | null, upstream: string | null, upId: string | null = null): Promise<SessionRecord | null> {
    const rec = await this.open(principal);
    if (rec && downId !== null && upstream !== null) {
      this.sql.exec("INSERT OR REPLACE INTO idmap (down_id, upstream, up_id, at) VALUES (?, ?, ?, ?)", downId, upstream, upId, Date.now());
    }
    return rec;
  }

  /** Where client request `downId` went: the upstream, and the id it carries there (null when not recorded). */
  async lookupRequest(principal: string, downId: string): Promise<{ upstream: string; upstreamId: string | null } | null> {
    if (!(await this.open(principal))) return null;
    const row = this.sql.exec<{ upstream: string; up_id: string | null }>("SELECT upstream, up_id FROM idmap WHERE down_id = ?", downId).toArray()[0];
    return row ? { upstream: row.upstream, upstreamId: row.up_id } : null;
  }

  async update(principal: string, patch: Partial<Pick<SessionRecord, "logLevel" | "upstreams" | "subscriptions">>): Promise<SessionRecord | null> {
    const rec = await this.open(principal);
    if (!rec) return null;
    if (patch.logLevel !== undefined) rec.logLevel = patch.logLevel;
    if (patch.subscriptions) rec.subscriptions = { ...rec.subscriptions, ...patch.subscriptions };
    if (patch.upstreams) rec.upstreams = { ...rec.upstreams, ...patch.upstreams };
    this.save(rec);
    return rec;
  }

  /**
   * Stores `leg` as the session's leg to `upstream` unless the session has one already: the first
   * leg stored wins (src/upstream/legs.ts sessionLeg opens a leg lazily for an upstream a hot reload
   * added after initialize; a concurrent opener elsewhere gets the kept one back and closes its own).
   * The leg the session now keeps and whether it is `leg`; null when the session is gone.
   */
  async adoptLeg(principal: string, upstream: string, leg: UpstreamLegRecord): Promise<{ rec: UpstreamLegRecord; stored: boolean } | null> {
    const rec = await this.open(principal);
    if (!rec) return null;
    const have = rec.upstreams[upstream];
    if (have) return { rec: have, stored: false };
    rec.upstreams = { ...rec.upstreams, [upstream]: leg };
    this.save(rec);
    return { rec: leg, stored: true };
  }

  /** Ends the session; later requests with its id get 404. Returns the record that ended (its storage is gone). */
  async end(principal: string): Promise<SessionRecord | null> {
    const rec = await this.open(principal);
    if (!rec) return null;
    this.finish(rec);
    if (this.sql.exec("SELECT 1 FROM meta").toArray().length === 0) await this.ctx.storage.deleteAlarm();
    return { ...rec, ended: true };
  }

  /** A server→client request relayed to the client under gateway id `id`. */
  async addPending(principal: string, p: PendingRelay): Promise<void> {
    if (!(await this.open(principal))) return;
    this.sql.exec("INSERT OR REPLACE INTO pending (id, upstream, up_id, at) VALUES (?, ?, ?, ?)", p.id, p.upstream, JSON.stringify(p.upId), Date.now());
  }

  /** Takes (and forgets) the pending relay the client is answering; null if unknown. */
  async takePending(principal: string, id: string): Promise<PendingRelay | null> {
    if (!(await this.open(principal))) return null;
    const row = this.sql.exec<{ upstream: string; up_id: string }>("SELECT upstream, up_id FROM pending WHERE id = ?", id).toArray()[0];
    if (!row) return null;
    this.sql.exec("DELETE FROM pending WHERE id = ?", id);
    return { id, upstream: row.upstream, upId: JSON.parse(row.up_id) as string | number };
  }

  /** Stores the client's answer to a bridged request (see awaitAnswer). */
  async putAnswer(principal: string, id: string, msg: JsonRpcResponse): Promise<void> {
    if (!(await this.open(principal))) return;
    this.sql.exec("INSERT OR REPLACE INTO answers (id, msg, at) VALUES (?, ?, ?)", id, JSON.stringify(msg), Date.now());
    this.waiters.get(id)?.();
  }

  /** Waits (bounded) for the client's answer to bridged request `id`, then forgets it. */
  async awaitAnswer(principal: string, id: string, timeoutMs: number): Promise<JsonRpcResponse | null> {
    const deadline = Date.now() + Math.min(timeoutMs, 300_000);
    while (Date.now() < deadline) {
      if (this.load()?.principal !== principal) return null;
      const row = this.sql.exec<{ msg: string }>("SELECT msg FROM answers WHERE id = ?", id).toArray()[0];
      if (row) {
        this.sql.exec("DELETE FROM answers WHERE id = ?", id);
        return JSON.parse(row.msg) as JsonRpcResponse;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(0, Math.min(1000, deadline - Date.now())));
        this.waiters.set(id, () => {
          clearTimeout(t);
          resolve();
        });
      });
      this.waiters.delete(id);
    }
    return null;
  }

  /** Buffers events of `stream`; nothing is kept for an object without a live session (ended, expired, unknown). */
  async appendEvents(stream: string, events: StoredEvent[], done: boolean): Promise<void> {
    const rec = this.load();
    const now = Date.now();
    if (!rec || rec.ended || this.expired(rec, now)) return;
    appendEventRows(this.sql, stream, events, done, now);
  }

  /** Events of `stream` after `afterSeq`, and whether the stream has finished. Null if unknown. */
  async readEvents(principal: string, stream: string, afterSeq: number): Promise<{ events: StoredEvent[]; done: boolean } | null> {
    if (!(await this.open(principal))) return null;
    return readEventRows(this.sql, stream, afterSeq);
  }

  /**
   * Retention. A session or run idle past its TTL ends (finish); a live one drops buffer rows
   * older than its TTL. A leg idle past LEG_IDLE_TTL_S is deleted. A foreign record is left
   * alone and looked at again a day later. The alarm is set again for the earliest next due time.
   */
  override async alarm(): Promise<void> {
    if (!this.hasSchema()) return;
    const now = Date.now();
    const next: number[] = [];
    const rec = this.read<SessionRecord>("session", SESSION_RECORD_VERSION);
    if (rec === FOREIGN) next.push(now + FOREIGN_RETRY_MS);
    else if (rec && !rec.ended) {
      if (this.expired(rec, now)) this.finish(rec);
      else {
        const horizon = now - rec.ttlS * 1000;
        pruneBufferRows(this.sql, horizon);
        next.push(rec.touchedAt + rec.ttlS * 1000 + 1);
      }
    }
    const leg = this.read<StoredLeg>("leg", STORED_LEG_VERSION);
    if (leg === FOREIGN) next.push(now + FOREIGN_RETRY_MS);
    else if (leg) {
      // A leg written before retention existed counts from now.
      const touchedAt = leg.touchedAt ?? now;
      if (leg.touchedAt === undefined) this.saveLeg({ ...leg, touchedAt });
      if (now - touchedAt > LEG_IDLE_MS) this.sql.exec("DELETE FROM meta WHERE k = 'leg'");
      else next.push(touchedAt + LEG_IDLE_MS + 1);
    }
    if (next.length > 0) await this.ctx.storage.setAlarm(Math.min(...next));
  }
}
