/**
 * RevocationsDO: one shard of the grant revocation list (jti → revoked at, until expiry).
 * Revocations take effect on the next request everywhere (KV would take up to 60 s); the list is
 * sharded by jti so no single object sits on every request. Must never: forget a revocation
 * before the grant it revokes has expired.
 */
import { DurableObject } from "cloudflare:workers";
import type { RevocationsApi } from "./records.ts";

export class RevocationsDO extends DurableObject implements RevocationsApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS revoked (jti TEXT PRIMARY KEY, at INTEGER NOT NULL, exp INTEGER NOT NULL, by TEXT NOT NULL)");
  }

  async isRevoked(jti: string): Promise<boolean> {
    return this.sql.exec("SELECT 1 FROM revoked WHERE jti = ?", jti).toArray().length > 0;
  }

  /**
   * Revokes `jti` until `exp` (seconds since epoch). Idempotent; revoking again can only extend
   * the entry (the later `exp` wins; the first `at` and `by` stay), never shorten it.
   */
  async revoke(jti: string, exp: number, by: string): Promise<void> {
    this.sql.exec(
      "INSERT INTO revoked (jti, at, exp, by) VALUES (?, ?, ?, ?) ON CONFLICT(jti) DO UPDATE SET exp = MAX(exp, excluded.exp)",
      jti,
      Date.now(),
      exp,
      by,
    );
    const next = await this.ctx.storage.getAlarm();
    const due = (exp + 120) * 1000;
    if (next === null || due < next) await this.ctx.storage.setAlarm(due);
  }

  /** Drops entries whose grants expired (plus skew): they can no longer be presented. */
  override async alarm(): Promise<void> {
    const cutoff = Math.floor(Date.now() / 1000) - 120;
    this.sql.exec("DELETE FROM revoked WHERE exp < ?", cutoff);
    const row = this.sql.exec<{ exp: number }>("SELECT MIN(exp) AS exp FROM revoked").toArray()[0];
    if (row && row.exp !== null) await this.ctx.storage.setAlarm((row.exp + 120) * 1000);
  }
}
