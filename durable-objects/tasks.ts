/**
 * TasksDO: one per principal (`principal:<sub>` in the TASKS namespace), holding which upstream
 * tasks that principal created through the gateway — (upstream, upstream task id, expiry) rows —
 * so tasks/* requests reach an upstream only for the task's owner (src/ports/task-owners.ts).
 * A thin state machine over one table: the expiry is chosen by the caller, and when the alarm
 * fires next is the plain function `nextAlarm`. Each row carries its shape version (`v`); a row
 * of a version this code does not know is not owned (fail closed), never overwritten and never
 * deleted. Must never: answer "owned" for an entry past its expiry, shorten an entry, or hold
 * another principal's tasks (the object is addressed by principal; it stores nothing else).
 */
import { DurableObject } from "cloudflare:workers";
import { OWNED_TASKS_MAX, TASK_OWNERSHIP_VERSION, type TasksApi } from "./contract.ts";

export const TASKS_SCHEMA = `
CREATE TABLE IF NOT EXISTS owned (upstream TEXT NOT NULL, task_id TEXT NOT NULL, at INTEGER NOT NULL, expires_at INTEGER NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (upstream, task_id));
CREATE INDEX IF NOT EXISTS owned_expiry ON owned (expires_at);
`;

/** An object that still holds rows of an unknown version looks at them again this often. */
export const UNKNOWN_RECHECK_MS = 86_400_000;
/** Upstream task ids longer than this are refused (they are opaque strings, but not unbounded ones). */
export const MAX_TASK_ID_CHARS = 1024;

/**
 * When the alarm must fire next: the earliest expiry among rows of the known version, or a
 * recheck in UNKNOWN_RECHECK_MS while rows of another version remain; null when nothing is left.
 */
export function nextAlarm(earliestKnown: number | null, unknownRows: number, now: number): number | null {
  const recheck = unknownRows > 0 ? now + UNKNOWN_RECHECK_MS : null;
  if (earliestKnown === null) return recheck;
  return recheck === null ? earliestKnown : Math.min(earliestKnown, recheck);
}

export class TasksDO extends DurableObject implements TasksApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec(TASKS_SCHEMA);
  }

  /** Idempotent: recording the same task again keeps the later expiry (and the first `at`). */
  async own(upstream: string, taskId: string, expiresAt: number): Promise<void> {
    if (typeof upstream !== "string" || upstream === "" || typeof taskId !== "string" || taskId === "" || taskId.length > MAX_TASK_ID_CHARS) {
      throw new Error("tasks: an upstream name and a task id of 1–1024 characters are required");
    }
    if (!Number.isSafeInteger(expiresAt)) throw new Error("tasks: expiresAt must be an integer time in ms");
    this.sql.exec(
      "INSERT INTO owned (upstream, task_id, at, expires_at, v) VALUES (?, ?, ?, ?, ?) ON CONFLICT (upstream, task_id) DO UPDATE SET expires_at = MAX(expires_at, excluded.expires_at) WHERE v = excluded.v",
      upstream,
      taskId,
      Date.now(),
      expiresAt,
      TASK_OWNERSHIP_VERSION,
    );
    // The entry as stored (a repeat never shortens it), or of an unknown version: the alarm's own schedule stands.
    const due = this.sql
      .exec<{ e: number }>("SELECT expires_at AS e FROM owned WHERE upstream = ? AND task_id = ? AND v = ?", upstream, taskId, TASK_OWNERSHIP_VERSION)
      .toArray()[0]?.e;
    if (due === undefined) return;
    const next = await this.ctx.storage.getAlarm();
    if (next === null || due < next) await this.ctx.storage.setAlarm(due);
  }

  async owns(upstream: string, taskId: string): Promise<boolean> {
    const r = this.sql
      .exec<{ expires_at: number; v: number }>("SELECT expires_at, v FROM owned WHERE upstream = ? AND task_id = ?", upstream, taskId)
      .toArray()[0];
    return !!r && r.v === TASK_OWNERSHIP_VERSION && r.expires_at > Date.now();
  }

  async owned(upstream: string): Promise<string[]> {
    return this.sql
      .exec<{ task_id: string }>(
        "SELECT task_id FROM owned WHERE upstream = ? AND v = ? AND expires_at > ? ORDER BY at DESC, task_id LIMIT ?",
        upstream,
        TASK_OWNERSHIP_VERSION,
        Date.now(),
        OWNED_TASKS_MAX,
      )
      .toArray()
      .map((r) => r.task_id);
  }

  /** Deletes expired entries of the known version and arms itself for the next one; running it again changes nothing. */
  override async alarm(): Promise<void> {
    const now = Date.now();
    this.sql.exec("DELETE FROM owned WHERE v = ? AND expires_at <= ?", TASK_OWNERSHIP_VERSION, now);
    const r = this.sql
      .exec<{ earliest: number | null; unknown: number | null }>(
        "SELECT MIN(CASE WHEN v = ? THEN expires_at END) AS earliest, SUM(CASE WHEN v = ? THEN 0 ELSE 1 END) AS unknown FROM owned",
        TASK_OWNERSHIP_VERSION,
        TASK_OWNERSHIP_VERSION,
      )
      .toArray()[0];
    const next = nextAlarm(r?.earliest ?? null, r?.unknown ?? 0, now);
    if (next !== null) await this.ctx.storage.setAlarm(next);
  }
}
