/**
 * SessionDO: one per legacy (2025-11-25 era) MCP session, a thin state machine over DO SQLite.
 * Owns: the session's principal, negotiated version, client capabilities, upstream legs,
 * the JSON-RPC id map (client request id → upstream, for cancellation), pending
 * server→client requests (gateway id → upstream + upstream id), and the SSE event buffers used
 * for resumption. Everything is persisted, so an evicted object resumes the session.
 * Must never: serve a session to a principal other than its opener (it answers "not found"),
 * forward anything upstream itself, or keep state only in memory.
 */
import { DurableObject } from "cloudflare:workers";
import type { JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import { SESSION_RECORD_VERSION, type PendingRelay, type SessionRecord, type StoredEvent, type StoredLeg, type UpstreamLegRecord } from "./records.ts";

export class SessionDO extends DurableObject {
  private sql: SqlStorage;
  private waiters = new Map<string, () => void>();

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec(`
      CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
      CREATE TABLE IF NOT EXISTS events (stream TEXT NOT NULL, seq INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (stream, seq));
      CREATE TABLE IF NOT EXISTS streams (stream TEXT PRIMARY KEY, done INTEGER NOT NULL DEFAULT 0);
      CREATE TABLE IF NOT EXISTS idmap (down_id TEXT PRIMARY KEY, upstream TEXT NOT NULL, at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY, upstream TEXT NOT NULL, up_id TEXT NOT NULL, at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS answers (id TEXT PRIMARY KEY, msg TEXT NOT NULL);
    `);
  }

  private load(): SessionRecord | null {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'session'").toArray()[0];
    return row ? (JSON.parse(row.v) as SessionRecord) : null;
  }
  private save(rec: SessionRecord): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('session', ?)", JSON.stringify(rec));
  }

  /** Creates the session. Refuses to overwrite an existing one (ids are random; a clash is a bug). */
  async create(rec: SessionRecord): Promise<boolean> {
    if (this.load()) return false;
    this.save(rec);
    await this.ctx.storage.setAlarm(Date.now() + rec.ttlS * 1000);
    return true;
  }

  /**
   * The upstream session a 2026-07-28 principal uses with one legacy-only upstream (object named
   * `leg:<principal>:<upstream>`), shared by every isolate. Only its owner reads or replaces it.
   */
  async getLeg(principal: string): Promise<UpstreamLegRecord | null> {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'leg'").toArray()[0];
    if (!row) return null;
    const stored = JSON.parse(row.v) as StoredLeg;
    return stored.principal === principal ? stored.rec : null;
  }

  async putLeg(principal: string, rec: UpstreamLegRecord): Promise<boolean> {
    const row = this.sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'leg'").toArray()[0];
    if (row && (JSON.parse(row.v) as { principal: string }).principal !== principal) return false;
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('leg', ?)", JSON.stringify({ v: 1, principal, rec } satisfies StoredLeg));
    return true;
  }

  /**
   * Runs (2026-07-28 `Portcullis-Run-Id`): the first principal to present a run id opens it;
   * only that principal may continue it. True when `principal` owns the run.
   */
  async claimRun(principal: string, id: string, ttlS: number): Promise<boolean> {
    const rec = this.load();
    const now = Date.now();
    if (!rec || rec.ended) {
      if (rec?.ended && rec.principal !== principal) return false;
      this.save({ v: SESSION_RECORD_VERSION, id, principal, protocolVersion: "2026-07-28", clientCapabilities: {}, upstreams: {}, createdAt: now, touchedAt: now, ttlS });
      await this.ctx.storage.setAlarm(now + ttlS * 1000);
      return true;
    }
    return (await this.open(principal)) !== null;
  }

  /** The live session for this principal, or null (unknown, ended, expired, or another principal's). */
  async open(principal: string): Promise<SessionRecord | null> {
    const rec = this.load();
    if (!rec || rec.ended || rec.principal !== principal) return null;
    const now = Date.now();
    if (now - rec.touchedAt > rec.ttlS * 1000) return null;
    // Idle expiry has minute granularity: persist the touch at most once a minute, not per request.
    if (now - rec.touchedAt > 60_000) {
      rec.touchedAt = now;
      this.save(rec);
    }
    return rec;
  }

  /** Open plus recording that client request `downId` went to `upstream` (for cancellation). */
  async begin(principal: string, downId: string | null, upstream: string | null): Promise<SessionRecord | null> {
    const rec = await this.open(principal);
    if (rec && downId !== null && upstream !== null) {
      this.sql.exec("INSERT OR REPLACE INTO idmap (down_id, upstream, at) VALUES (?, ?, ?)", downId, upstream, Date.now());
    }
    return rec;
  }

  async lookupRequest(principal: string, downId: string): Promise<string | null> {
    if (!(await this.open(principal))) return null;
    const row = this.sql.exec<{ upstream: string }>("SELECT upstream FROM idmap WHERE down_id = ?", downId).toArray()[0];
    return row?.upstream ?? null;
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

  /** Ends the session; later requests with its id get 404. Returns the record that ended. */
  async end(principal: string): Promise<SessionRecord | null> {
    const rec = await this.open(principal);
    if (!rec) return null;
    rec.ended = true;
    this.save(rec);
    this.sql.exec("DELETE FROM events; DELETE FROM streams; DELETE FROM idmap; DELETE FROM pending; DELETE FROM answers;");
    return rec;
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
    this.sql.exec("INSERT OR REPLACE INTO answers (id, msg) VALUES (?, ?)", id, JSON.stringify(msg));
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
        this.waiters.set(id, () => { clearTimeout(t); resolve(); });
      });
      this.waiters.delete(id);
    }
    return null;
  }

  async appendEvents(stream: string, events: StoredEvent[], done: boolean): Promise<void> {
    for (const e of events) this.sql.exec("INSERT OR REPLACE INTO events (stream, seq, data) VALUES (?, ?, ?)", stream, e.seq, e.data);
    this.sql.exec("INSERT INTO streams (stream, done) VALUES (?, ?) ON CONFLICT(stream) DO UPDATE SET done = MAX(done, excluded.done)", stream, done ? 1 : 0);
  }

  /** Events of `stream` after `afterSeq`, and whether the stream has finished. Null if unknown. */
  async readEvents(principal: string, stream: string, afterSeq: number): Promise<{ events: StoredEvent[]; done: boolean } | null> {
    if (!(await this.open(principal))) return null;
    const s = this.sql.exec<{ done: number }>("SELECT done FROM streams WHERE stream = ?", stream).toArray()[0];
    if (!s) return null;
    const events = this.sql.exec<{ seq: number; data: string }>(
      "SELECT seq, data FROM events WHERE stream = ? AND seq > ? ORDER BY seq", stream, afterSeq,
    ).toArray().map((r) => ({ seq: r.seq, data: r.data }));
    return { events, done: s.done === 1 };
  }

  /** Idle expiry: drop buffers of sessions nobody touched within the TTL. */
  override async alarm(): Promise<void> {
    const rec = this.load();
    if (!rec || rec.ended) return;
    const due = rec.touchedAt + rec.ttlS * 1000;
    if (Date.now() >= due) {
      rec.ended = true;
      this.save(rec);
      this.sql.exec("DELETE FROM events; DELETE FROM streams; DELETE FROM idmap; DELETE FROM pending;");
    } else {
      await this.ctx.storage.setAlarm(due);
    }
  }
}
