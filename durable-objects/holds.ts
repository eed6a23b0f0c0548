/**
 * HoldsDO: one per team (`team:<team>` in the HOLDS namespace), holding the tool calls of that
 * team awaiting human approval — one row per hold, bound to the exact canonical action and its
 * hash — as a thin Durable Object over the plain-function state machine in ./holds-machine.ts.
 * This file owns the SQLite schema and the store the machine runs on, the ledger appends to the
 * team's chain (LEDGER, `chain:<team>`), the in-memory `awaitChange` waiters and the alarm. A
 * claim is one synchronous `transactionSync` (no await between its read and its write, so of
 * any number of concurrent identical retries exactly one consumes an approval); a resolution
 * runs under `blockConcurrencyWhile`, so nothing else touches the object between its check, its
 * ledger record and its commit. Must never: hold another team's holds (a hold whose team is not
 * this object's name is refused), consume or resolve a row of a record version it does not know,
 * change a hold's state when the resolution's ledger record failed, or throw out of
 * `blockConcurrencyWhile` (that would reset the object).
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";
import type { EntryDraft } from "../src/ledger/records.ts";
import type { JsonRpcResponse } from "../src/wire/jsonrpc.ts";
import { checkResolve, claimHold, completeHold, releaseHold, resolveHold } from "./holds-machine.ts";
import { getHold, HOLD_AWAIT_MAX_MS, type HoldSchedule, type HoldStore, listHolds, nextAlarm, phaseOf, runAlarm, type StoredHold } from "./holds-expiry.ts";
import { ledgerObject } from "./object-names.ts";
import { HOLD_RECORD_VERSION, type HoldClaim, type HoldRecord, type HoldResolution, type HoldsApi, type HoldState, type NewHold } from "./contract-holds.ts";
import type { LedgerSigning } from "./contract-ledger.ts";

/**
 * `holds`: one row per hold. `record` is the HoldRecord's JSON (the authority); the other
 * columns repeat what the queries select on. `expiry_recorded` / `record_failures` /
 * `record_retry_at` track the alarm's `hold.expired` record of an expired hold.
 * `meta`: `signing` — the latest LedgerSigning handed to claim or resolve (secret *name*, never its value).
 */
export const HOLDS_SCHEMA = `
CREATE TABLE IF NOT EXISTS holds (id TEXT PRIMARY KEY, principal TEXT NOT NULL, action_hash TEXT NOT NULL, state TEXT NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, record TEXT NOT NULL, expiry_recorded INTEGER NOT NULL DEFAULT 0, record_failures INTEGER NOT NULL DEFAULT 0, record_retry_at INTEGER, v INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS holds_action ON holds (principal, action_hash, created_at);
CREATE INDEX IF NOT EXISTS holds_state ON holds (state, expires_at);
CREATE INDEX IF NOT EXISTS holds_created ON holds (created_at);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
`;

type Row = Record<string, SqlStorageValue>;
const V = HOLD_RECORD_VERSION;

/** A row as StoredHold, or null when its record does not read as this version (treated as absent). */
function decode(r: Row | undefined): StoredHold | null {
  if (!r || r.v !== V) return null;
  let rec: unknown;
  try {
    rec = JSON.parse(String(r.record));
  } catch {
    return null;
  }
  if (rec === null || typeof rec !== "object" || (rec as HoldRecord).v !== V || (rec as HoldRecord).id !== r.id) return null;
  return {
    rec: rec as HoldRecord,
    expiryRecorded: r.expiry_recorded === 1,
    recordFailures: Number(r.record_failures ?? 0),
    recordRetryAt: r.record_retry_at === null || r.record_retry_at === undefined ? null : Number(r.record_retry_at),
  };
}

/** The machine's store over this object's SQLite; `touched` hears every id written. */
export function sqlHoldStore(storage: DurableObjectStorage, touched: (id: string) => void): HoldStore {
  const sql = storage.sql;
  const rows = (q: string, ...b: SqlStorageValue[]): StoredHold[] =>
    sql
      .exec<Row>(q, ...b)
      .toArray()
      .map(decode)
      .filter((x): x is StoredHold => x !== null);
  const owesNothing = "(state IN ('rejected', 'consumed') OR (state = 'expired' AND expiry_recorded = 1))";
  return {
    atomically: (fn) => storage.transactionSync(fn),
    has: (id) => sql.exec("SELECT 1 FROM holds WHERE id = ?", id).toArray().length > 0,
    get: (id) => decode(sql.exec<Row>("SELECT * FROM holds WHERE id = ?", id).toArray()[0]),
    insert(row) {
      const r = row.rec;
      sql.exec(
        "INSERT INTO holds (id, principal, action_hash, state, created_at, expires_at, record, expiry_recorded, record_failures, record_retry_at, v) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        r.id,
        r.principal,
        r.actionHash,
        r.state,
        r.createdAt,
        r.expiresAt,
        JSON.stringify(r),
        row.expiryRecorded ? 1 : 0,
        row.recordFailures,
        row.recordRetryAt,
        V,
      );
      touched(r.id);
    },
    update(row) {
      const r = row.rec;
      sql.exec(
        "UPDATE holds SET state = ?, expires_at = ?, record = ?, expiry_recorded = ?, record_failures = ?, record_retry_at = ? WHERE id = ? AND v = ?",
        r.state,
        r.expiresAt,
        JSON.stringify(r),
        row.expiryRecorded ? 1 : 0,
        row.recordFailures,
        row.recordRetryAt,
        r.id,
        V,
      );
      touched(r.id);
    },
    ofAction: (principal, actionHash, now) =>
      rows(
        "SELECT * FROM holds WHERE principal = ? AND action_hash = ? AND v = ? AND (expires_at > ? OR state IN ('pending', 'approved')) ORDER BY created_at DESC, rowid DESC LIMIT 100",
        principal,
        actionHash,
        V,
        now,
      ),
    list: (state, limit) =>
      state === null
        ? rows("SELECT * FROM holds WHERE v = ? ORDER BY created_at DESC, rowid DESC LIMIT ?", V, limit)
        : rows("SELECT * FROM holds WHERE v = ? AND state = ? ORDER BY created_at DESC, rowid DESC LIMIT ?", V, state, limit),
    overdue: (now, limit) =>
      rows("SELECT * FROM holds WHERE v = ? AND state IN ('pending', 'approved') AND expires_at <= ? ORDER BY expires_at LIMIT ?", V, now, limit),
    owed: (now, limit) =>
      rows(
        "SELECT * FROM holds WHERE v = ? AND state = 'expired' AND expiry_recorded = 0 AND (record_retry_at IS NULL OR record_retry_at <= ?) ORDER BY expires_at LIMIT ?",
        V,
        now,
        limit,
      ),
    purge(before) {
      sql.exec(`DELETE FROM holds WHERE v = ? AND expires_at < ? AND ${owesNothing}`, V, before);
    },
    schedule(): HoldSchedule {
      const r = sql
        .exec<Row>(
          `SELECT (SELECT MIN(expires_at) FROM holds WHERE v = ? AND state IN ('pending', 'approved')) AS expiry,
                  (SELECT MIN(COALESCE(record_retry_at, 0)) FROM holds WHERE v = ? AND state = 'expired' AND expiry_recorded = 0) AS retry,
                  (SELECT MIN(expires_at) FROM holds WHERE v = ? AND ${owesNothing}) AS oldest,
                  (SELECT COUNT(*) FROM holds WHERE v <> ?) AS unknown`,
          V,
          V,
          V,
          V,
        )
        .toArray()[0];
      const n = (x: SqlStorageValue | undefined): number | null => (x === null || x === undefined ? null : Number(x));
      return { expiry: n(r?.expiry), retry: n(r?.retry), oldest: n(r?.oldest), unknown: n(r?.unknown) ?? 0 };
    },
    signing() {
      const r = sql.exec<{ v: string }>("SELECT v FROM meta WHERE k = 'signing'").toArray()[0];
      if (!r) return null;
      try {
        const s = JSON.parse(r.v) as LedgerSigning;
        return typeof s?.secret === "string" && typeof s.gateway === "string" ? s : null;
      } catch {
        return null;
      }
    },
    setSigning(s) {
      sql.exec("INSERT INTO meta (k, v) VALUES ('signing', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v WHERE v <> excluded.v", JSON.stringify(s));
    },
  };
}

export class HoldsDO extends DurableObject<Env> implements HoldsApi {
  private store: HoldStore;
  /** Ids written since the waiters last heard. */
  private dirty = new Set<string>();
  /** awaitChange waiters by hold id (in memory: a waiter is an open RPC, which keeps the object alive). */
  private waiters = new Map<string, Set<() => void>>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(HOLDS_SCHEMA);
    this.store = sqlHoldStore(ctx.storage, (id) => this.dirty.add(id));
  }

  /** The team this object was named for (`team:<team>`); undefined when it was addressed any other way. */
  private team(): string | undefined {
    const name = this.ctx.id.name;
    return name?.startsWith("team:") ? name.slice("team:".length) : undefined;
  }

  private async append(team: string, drafts: EntryDraft[], signing: LedgerSigning): Promise<void> {
    const ledger = ledgerObject(this.env, team);
    if (!ledger) throw new Error(`${JSON.stringify(team)} is not a chain name`);
    await ledger.append(drafts, signing);
  }

  /** Wakes the waiters of every hold written since the last call; whether anything was written. */
  private wake(): boolean {
    if (this.dirty.size === 0) return false;
    const ids = [...this.dirty];
    this.dirty.clear();
    for (const id of ids) for (const w of [...(this.waiters.get(id) ?? [])]) w();
    return true;
  }

  /** After a change: wake waiters, and bring the alarm forward when something is due sooner than it fires. */
  private async settle(): Promise<void> {
    if (!this.wake()) return;
    const next = nextAlarm(this.store, Date.now());
    if (next === null) return;
    const cur = await this.ctx.storage.getAlarm();
    if (cur === null || next < cur) await this.ctx.storage.setAlarm(next);
  }

  private sleep(id: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const set = this.waiters.get(id) ?? new Set<() => void>();
      this.waiters.set(id, set);
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        if (set.size === 0 && this.waiters.get(id) === set) this.waiters.delete(id);
        resolve();
      };
      const timer = setTimeout(done, ms);
      set.add(done);
    });
  }

  async claim(hold: NewHold, signing: LedgerSigning, now: number): Promise<HoldClaim> {
    try {
      return claimHold(this.store, hold, signing, this.team(), now);
    } finally {
      await this.settle();
    }
  }

  async complete(id: string, result: JsonRpcResponse, now: number): Promise<boolean> {
    try {
      return completeHold(this.store, id, result, now);
    } finally {
      await this.settle();
    }
  }

  async release(id: string, reason: string, now: number): Promise<boolean> {
    try {
      return releaseHold(this.store, id, reason, now);
    } finally {
      await this.settle();
    }
  }

  async get(id: string, now: number): Promise<HoldRecord | null> {
    try {
      return getHold(this.store, id, now);
    } finally {
      await this.settle();
    }
  }

  async list(state: HoldState | null, now: number, limit: number): Promise<HoldRecord[]> {
    try {
      return listHolds(this.store, state ?? null, now, limit);
    } finally {
      await this.settle();
    }
  }

  async resolve(
    id: string,
    decision: "approve" | "reject",
    approver: string,
    reason: string,
    expectHash: string | null,
    signing: LedgerSigning,
    now: number,
  ): Promise<HoldResolution> {
    const req = { id, decision, approver, reason, expectHash: expectHash ?? null, signing, now };
    checkResolve(req);
    let failure: unknown = null;
    // Nothing else reaches the object between the check, the ledger record and the commit.
    const out = await this.ctx.blockConcurrencyWhile(async () => {
      try {
        return await resolveHold(
          this.store,
          req,
          (team, drafts) => this.append(team, drafts, signing),
          () => crypto.randomUUID(),
        );
      } catch (e) {
        failure = e;
        return null;
      }
    });
    await this.settle();
    if (out === null) throw failure instanceof Error ? failure : new Error(String(failure));
    return out;
  }

  /**
   * Resolves with the hold once it leaves the phase it was in: a pending hold when it is approved,
   * rejected or expires (the waiter wakes at its expiry); a consumed hold still running when it
   * gets its answer or is released. A hold in any other state answers at once, and so does a
   * `timeoutMs` ≤ 0; otherwise after at most `timeoutMs` (capped at 30 s) the hold as it is then.
   */
  async awaitChange(id: string, timeoutMs: number): Promise<HoldRecord | null> {
    if (typeof id !== "string") throw new Error("holds: a hold id must be a string");
    const ms = Math.min(Number.isFinite(timeoutMs) ? Math.max(0, timeoutMs) : 0, HOLD_AWAIT_MAX_MS);
    const deadline = Date.now() + ms;
    let cur = getHold(this.store, id, Date.now());
    await this.settle();
    if (cur === null) return null;
    const phase = phaseOf(cur);
    for (let i = 0; i < 10_000 && phase !== "settled" && Date.now() < deadline; i++) {
      const untilExpiry = phase === "pending" ? cur.expiresAt - Date.now() : Infinity;
      await this.sleep(id, Math.max(1, Math.min(deadline - Date.now(), untilExpiry)));
      cur = getHold(this.store, id, Date.now());
      await this.settle();
      if (cur === null || phaseOf(cur) !== phase) return cur;
    }
    return cur;
  }

  /** Expires overdue holds, records each expiry once, deletes rows past retention; repeats are harmless. */
  override async alarm(): Promise<void> {
    const signing = this.store.signing();
    const next = await runAlarm(this.store, signing ? (team, drafts) => this.append(team, drafts, signing) : null, Date.now());
    this.wake();
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}
