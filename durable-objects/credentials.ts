/**
 * CredentialsDO: one per principal, holding that principal's registered upstream tokens as
 * AES-GCM ciphertext (the key is a Worker secret and never reaches this object).
 * Must never: store or return a plaintext credential, or serve one principal's entries to
 * another (the object is addressed by principal; it stores nothing else).
 */
import { DurableObject } from "cloudflare:workers";
import type { CredentialsApi, SealedCredential } from "./records.ts";


export class CredentialsDO extends DurableObject implements CredentialsApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: unknown) {
    super(ctx, env as never);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS creds (upstream TEXT PRIMARY KEY, iv TEXT NOT NULL, ct TEXT NOT NULL, at INTEGER NOT NULL)");
  }

  async put(upstream: string, sealed: { iv: string; ct: string }): Promise<void> {
    this.sql.exec("INSERT OR REPLACE INTO creds (upstream, iv, ct, at) VALUES (?, ?, ?, ?)", upstream, sealed.iv, sealed.ct, Date.now());
  }

  async get(upstream: string): Promise<SealedCredential | null> {
    const r = this.sql.exec<{ iv: string; ct: string; at: number }>("SELECT iv, ct, at FROM creds WHERE upstream = ?", upstream).toArray()[0];
    return r ? { v: 1, iv: r.iv, ct: r.ct, at: r.at } : null;
  }

  async remove(upstream: string): Promise<boolean> {
    return this.sql.exec("DELETE FROM creds WHERE upstream = ?", upstream).rowsWritten > 0;
  }
}
