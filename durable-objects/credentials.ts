/**
 * CredentialsDO: sealed upstream credentials, never plaintext (the key is a Worker secret and
 * never reaches this object). One class, three kinds of object (object-names.ts): a principal's
 * or a team's own — registered tokens (`creds`) and OAuth connections (`connections`, one per
 * upstream, with its refresh lease and refresh count) —, a shard of pending OAuth authorizations
 * by state (`pending`, single use, swept when expired), and the gateway's OAuth client
 * registrations (`clients`). Each row carries its shape version (`v`); a row of a version this
 * code does not know is answered "not registered", so nothing is sent upstream on a misread.
 * Must never: store or return a plaintext credential, serve one owner's entries to another (the
 * object is addressed by owner), or hand out a second refresh lease while one holds.
 */
import { DurableObject } from "cloudflare:workers";
import {
  type ConnectionLease,
  type CredentialsApi,
  type NewConnection,
  SEALED_CONNECTION_VERSION,
  SEALED_CREDENTIAL_VERSION,
  type SealedConnection,
  type SealedCredential,
} from "./contract.ts";

type ConnectionRow = {
  upstream: string;
  v: number;
  kv: string;
  issuer: string;
  iv: string;
  ct: string;
  at: number;
  connected_at: number;
  expires_at: number | null;
  scope: string;
  by: string;
  lease: string | null;
  lease_until: number | null;
  refreshes: number;
  recorded_at: number | null;
};

const connectionOf = (r: ConnectionRow): SealedConnection => ({
  v: r.v,
  upstream: r.upstream,
  kv: r.kv,
  issuer: r.issuer,
  iv: r.iv,
  ct: r.ct,
  at: r.at,
  connectedAt: r.connected_at,
  expiresAt: r.expires_at,
  scope: r.scope,
  by: r.by,
});

export class CredentialsDO extends DurableObject implements CredentialsApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec(
      "CREATE TABLE IF NOT EXISTS creds (upstream TEXT PRIMARY KEY, iv TEXT NOT NULL, ct TEXT NOT NULL, at INTEGER NOT NULL, v INTEGER NOT NULL DEFAULT 1)",
    );
    // Tables created before rows carried `v` hold version-1 rows (the only shape there was).
    if (
      !this.sql
        .exec<{ name: string }>("PRAGMA table_info(creds)")
        .toArray()
        .some((c) => c.name === "v")
    ) {
      this.sql.exec("ALTER TABLE creds ADD COLUMN v INTEGER NOT NULL DEFAULT 1");
    }
    this.sql.exec(
      `CREATE TABLE IF NOT EXISTS connections (upstream TEXT PRIMARY KEY, v INTEGER NOT NULL, kv TEXT NOT NULL, issuer TEXT NOT NULL,
        iv TEXT NOT NULL, ct TEXT NOT NULL, at INTEGER NOT NULL, connected_at INTEGER NOT NULL, expires_at INTEGER, scope TEXT NOT NULL,
        by TEXT NOT NULL, lease TEXT, lease_until INTEGER, refreshes INTEGER NOT NULL DEFAULT 0, recorded_at INTEGER)`,
    );
    this.sql.exec("CREATE TABLE IF NOT EXISTS pending (state TEXT PRIMARY KEY, iv TEXT NOT NULL, ct TEXT NOT NULL, exp INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS clients (key TEXT PRIMARY KEY, iv TEXT NOT NULL, ct TEXT NOT NULL, at INTEGER NOT NULL)");
  }

  async put(upstream: string, sealed: { iv: string; ct: string }): Promise<void> {
    this.sql.exec(
      "INSERT OR REPLACE INTO creds (upstream, iv, ct, at, v) VALUES (?, ?, ?, ?, ?)",
      upstream,
      sealed.iv,
      sealed.ct,
      Date.now(),
      SEALED_CREDENTIAL_VERSION,
    );
  }

  /** The sealed credential for `upstream`; null when none is registered or its version is unknown to this code. */
  async get(upstream: string): Promise<SealedCredential | null> {
    const r = this.sql.exec<{ iv: string; ct: string; at: number; v: number }>("SELECT iv, ct, at, v FROM creds WHERE upstream = ?", upstream).toArray()[0];
    return r && r.v === SEALED_CREDENTIAL_VERSION ? { v: r.v, iv: r.iv, ct: r.ct, at: r.at } : null;
  }

  async remove(upstream: string): Promise<boolean> {
    return this.sql.exec("DELETE FROM creds WHERE upstream = ?", upstream).rowsWritten > 0;
  }

  // ---- OAuth connections ---------------------------------------------------------------------

  private row(upstream: string): ConnectionRow | null {
    const r = this.sql.exec<ConnectionRow>("SELECT * FROM connections WHERE upstream = ?", upstream).toArray()[0];
    return r && r.v === SEALED_CONNECTION_VERSION ? r : null;
  }

  async connectionPut(upstream: string, c: NewConnection): Promise<void> {
    const now = Date.now();
    this.sql.exec(
      `INSERT OR REPLACE INTO connections (upstream, v, kv, issuer, iv, ct, at, connected_at, expires_at, scope, by, lease, lease_until, refreshes, recorded_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 0, NULL)`,
      upstream,
      SEALED_CONNECTION_VERSION,
      c.kv,
      c.issuer,
      c.iv,
      c.ct,
      now,
      now,
      c.expiresAt,
      c.scope,
      c.by,
    );
  }

  async connectionGet(upstream: string): Promise<SealedConnection | null> {
    const r = this.row(upstream);
    return r ? connectionOf(r) : null;
  }

  async connectionList(): Promise<SealedConnection[]> {
    return this.sql
      .exec<ConnectionRow>("SELECT * FROM connections ORDER BY upstream")
      .toArray()
      .filter((r) => r.v === SEALED_CONNECTION_VERSION)
      .map(connectionOf);
  }

  async connectionRemove(upstream: string): Promise<SealedConnection | null> {
    const r = this.row(upstream);
    this.sql.exec("DELETE FROM connections WHERE upstream = ?", upstream);
    return r ? connectionOf(r) : null;
  }

  async connectionLease(upstream: string, now: number, ms: number): Promise<ConnectionLease> {
    const r = this.row(upstream);
    if (!r) return null;
    if (r.lease !== null && (r.lease_until ?? 0) > now) return { busy: connectionOf(r) };
    const lease = crypto.randomUUID();
    this.sql.exec("UPDATE connections SET lease = ?, lease_until = ? WHERE upstream = ?", lease, now + ms, upstream);
    return { lease, row: connectionOf(r) };
  }

  async connectionRefreshed(
    upstream: string,
    lease: string,
    c: NewConnection,
    now: number,
    recordEveryMs: number,
  ): Promise<{ stored: boolean; record: number | null }> {
    const r = this.row(upstream);
    if (!r || r.lease !== lease) return { stored: false, record: null };
    const refreshes = r.refreshes + 1;
    const due = r.recorded_at === null || now - r.recorded_at >= recordEveryMs;
    this.sql.exec(
      `UPDATE connections SET kv = ?, issuer = ?, iv = ?, ct = ?, at = ?, expires_at = ?, scope = ?, lease = NULL, lease_until = NULL,
        refreshes = ?, recorded_at = ? WHERE upstream = ?`,
      c.kv,
      c.issuer,
      c.iv,
      c.ct,
      now,
      c.expiresAt,
      c.scope,
      due ? 0 : refreshes,
      due ? now : r.recorded_at,
      upstream,
    );
    return { stored: true, record: due ? refreshes : null };
  }

  async connectionRelease(upstream: string, lease: string): Promise<void> {
    this.sql.exec("UPDATE connections SET lease = NULL, lease_until = NULL WHERE upstream = ? AND lease = ?", upstream, lease);
  }

  async connectionDrop(upstream: string, lease: string): Promise<SealedConnection | null> {
    const r = this.row(upstream);
    if (!r || r.lease !== lease) return null;
    this.sql.exec("DELETE FROM connections WHERE upstream = ?", upstream);
    return connectionOf(r);
  }

  // ---- pending authorizations and client registrations ------------------------------------------

  async pendingPut(state: string, sealed: { iv: string; ct: string }, exp: number, now: number): Promise<void> {
    this.sql.exec("DELETE FROM pending WHERE exp <= ?", now);
    this.sql.exec("INSERT OR REPLACE INTO pending (state, iv, ct, exp) VALUES (?, ?, ?, ?)", state, sealed.iv, sealed.ct, exp);
  }

  async pendingTake(state: string, now: number): Promise<{ iv: string; ct: string } | null> {
    const r = this.sql.exec<{ iv: string; ct: string; exp: number }>("SELECT iv, ct, exp FROM pending WHERE state = ?", state).toArray()[0];
    this.sql.exec("DELETE FROM pending WHERE state = ? OR exp <= ?", state, now);
    return r && r.exp > now ? { iv: r.iv, ct: r.ct } : null;
  }

  async clientGet(key: string): Promise<{ iv: string; ct: string } | null> {
    const r = this.sql.exec<{ iv: string; ct: string }>("SELECT iv, ct FROM clients WHERE key = ?", key).toArray()[0];
    return r ? { iv: r.iv, ct: r.ct } : null;
  }

  async clientPut(key: string, sealed: { iv: string; ct: string }): Promise<void> {
    this.sql.exec("INSERT OR REPLACE INTO clients (key, iv, ct, at) VALUES (?, ?, ?, ?)", key, sealed.iv, sealed.ct, Date.now());
  }
}
