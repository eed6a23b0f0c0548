/**
 * RevocationsDO: one shard of the grant revocation list (jti → revoked at, until expiry), of the
 * jtis this gateway minted through POST /v1/grants (until they expire: so a revocation can say
 * whether the jti is one the gateway knows), and of the one-time markers OAuth needs to be atomic (a refresh token seen once, an enrollment code
 * redeemed once). Revocations take effect within 1 s everywhere (isolates cache "not revoked" for at most that long; KV would take up to
 * 60 s); the list is sharded by key so no single object sits on every request. Must never: forget
 * a revocation or a one-time marker before what it guards has expired, or hand out one-time data twice.
 */
import { DurableObject } from "cloudflare:workers";
import type { RevocationsApi } from "./contract.ts";

export class RevocationsDO extends DurableObject implements RevocationsApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS revoked (jti TEXT PRIMARY KEY, at INTEGER NOT NULL, exp INTEGER NOT NULL, by TEXT NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS once (key TEXT PRIMARY KEY, data TEXT, exp INTEGER NOT NULL, used INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS minted (jti TEXT PRIMARY KEY, exp INTEGER NOT NULL)");
  }

  /** Records that this gateway minted `jti`, a grant valid until `exp` (kept until then, plus skew). Idempotent. */
  async noteMinted(jti: string, exp: number): Promise<void> {
    this.sql.exec("INSERT INTO minted (jti, exp) VALUES (?, ?) ON CONFLICT(jti) DO UPDATE SET exp = MAX(exp, excluded.exp)", jti, exp);
    await this.alarmBy(exp);
  }

  /** Marks `key` seen until `exp`; true only for the first caller (atomic: the object runs one call at a time). */
  async claimOnce(key: string, exp: number): Promise<boolean> {
    const now = Math.floor(Date.now() / 1000);
    const row = this.sql.exec<{ exp: number }>("SELECT exp FROM once WHERE key = ?", key).toArray()[0];
    if (row && row.exp >= now) return false;
    this.sql.exec("INSERT OR REPLACE INTO once (key, data, exp, used) VALUES (?, NULL, ?, 1)", key, exp);
    await this.alarmBy(exp);
    return true;
  }

  /** Stores one-time `data` under `key` until `exp` (refused if the key exists). */
  async putOnce(key: string, data: string, exp: number): Promise<boolean> {
    const exists = this.sql.exec("SELECT 1 FROM once WHERE key = ?", key).toArray().length > 0;
    if (exists) return false;
    this.sql.exec("INSERT INTO once (key, data, exp, used) VALUES (?, ?, ?, 0)", key, data, exp);
    await this.alarmBy(exp);
    return true;
  }

  /** The unused, unexpired data under `key` (`take`: and marks it used, so no one gets it again); null otherwise. */
  async readOnce(key: string, take: boolean): Promise<string | null> {
    const now = Math.floor(Date.now() / 1000);
    const row = this.sql.exec<{ data: string | null; exp: number; used: number }>("SELECT data, exp, used FROM once WHERE key = ?", key).toArray()[0];
    if (!row || row.used !== 0 || row.exp < now || row.data === null) return null;
    if (take) this.sql.exec("UPDATE once SET used = 1 WHERE key = ?", key);
    return row.data;
  }

  private async alarmBy(exp: number): Promise<void> {
    const next = await this.ctx.storage.getAlarm();
    const due = (exp + 120) * 1000;
    if (next === null || due < next) await this.ctx.storage.setAlarm(due);
  }

  async isRevoked(jti: string): Promise<boolean> {
    return this.sql.exec("SELECT 1 FROM revoked WHERE jti = ?", jti).toArray().length > 0;
  }

  /**
   * Revokes `jti` until `exp` (seconds since epoch). Idempotent; revoking again can only extend
   * the entry (the later `exp` wins; the first `at` and `by` stay), never shorten it. `known`:
   * whether this shard knew the jti before — minted here (noteMinted, not yet expired) or revoked
   * before; the revocation applies either way.
   */
  async revoke(jti: string, exp: number, by: string): Promise<{ known: boolean }> {
    const known = this.sql.exec("SELECT 1 FROM minted WHERE jti = ? UNION ALL SELECT 1 FROM revoked WHERE jti = ? LIMIT 1", jti, jti).toArray().length > 0;
    this.sql.exec(
      "INSERT INTO revoked (jti, at, exp, by) VALUES (?, ?, ?, ?) ON CONFLICT(jti) DO UPDATE SET exp = MAX(exp, excluded.exp)",
      jti,
      Date.now(),
      exp,
      by,
    );
    await this.alarmBy(exp);
    return { known };
  }

  /** Drops entries whose grants expired (plus skew): they can no longer be presented (a minted jti is then no longer known). */
  override async alarm(): Promise<void> {
    const cutoff = Math.floor(Date.now() / 1000) - 120;
    this.sql.exec("DELETE FROM revoked WHERE exp < ?", cutoff);
    this.sql.exec("DELETE FROM once WHERE exp < ?", cutoff);
    this.sql.exec("DELETE FROM minted WHERE exp < ?", cutoff);
    const row = this.sql
      .exec<{ exp: number | null }>("SELECT MIN(exp) AS exp FROM (SELECT exp FROM revoked UNION ALL SELECT exp FROM once UNION ALL SELECT exp FROM minted)")
      .toArray()[0];
    if (row && row.exp !== null) await this.ctx.storage.setAlarm((row.exp + 120) * 1000);
  }
}
