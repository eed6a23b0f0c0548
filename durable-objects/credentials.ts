/**
 * CredentialsDO: one per principal, holding that principal's registered upstream tokens as
 * AES-GCM ciphertext (the key is a Worker secret and never reaches this object).
 * Each row carries its shape version (`v`); a row of a version this code does not know is
 * answered "not registered", so nothing is sent upstream on a misread.
 * Must never: store or return a plaintext credential, or serve one principal's entries to
 * another (the object is addressed by principal; it stores nothing else).
 */
import { DurableObject } from "cloudflare:workers";
import { SEALED_CREDENTIAL_VERSION, type CredentialsApi, type SealedCredential } from "./contract.ts";

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
}
