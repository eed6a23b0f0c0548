/**
 * ConfigDO: the gateway's stored, hot-reloadable config (object `global` in the CONFIG
 * namespace) — one row per version (1, 2, …) holding the config text (mappings and policy
 * inlined), its SHA-256, who stored it and when; the newest row is the config in force. `put`
 * runs under `blockConcurrencyWhile`: its `config.changed` record (from: the previous hash or
 * null, to: the new hash, by, version) is appended to the `_global` ledger chain FIRST, and only
 * once that append is durable is the new version committed (no record, no change). Storing the
 * text that is already current changes nothing and records nothing. It does not parse or
 * validate the text — PUT /v1/config does that against the Worker's env before calling it.
 * Readers cache `head()` for at most a second per isolate (src/ports/live-config.ts). Must never:
 * commit a version whose ledger record was not written, put the text itself (it may name
 * secrets) on the ledger, or answer a config it did not read from storage.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";
import type { ConfigChangedBody, EntryDraft } from "../src/ledger/records.ts";
import type { JsonObject } from "../src/wire/jsonrpc.ts";
import { ledgerObject } from "./object-names.ts";
import { GLOBAL_CHAIN } from "../src/ledger/records.ts";
import { type ConfigApi, type ConfigPut, STORED_CONFIG_VERSION, type StoredConfig, type StoredConfigHead } from "./contract.ts";
import type { LedgerSigning } from "./contract-ledger.ts";
import { bounded } from "../src/wire/bounded.ts";

/** The ledger append gets this long; past it the change is refused (well inside blockConcurrencyWhile's 30 s). */
export const CONFIG_APPEND_TIMEOUT_MS = 10_000;
/** Largest config text accepted. */
export const MAX_CONFIG_BYTES = 1024 * 1024;
/** Versions kept (older rows are pruned; the ledger keeps every change's hash). */
export const KEPT_VERSIONS = 20;

export const CONFIG_SCHEMA = `
CREATE TABLE IF NOT EXISTS configs (version INTEGER PRIMARY KEY, text TEXT NOT NULL, sha256 TEXT NOT NULL, by TEXT NOT NULL, at INTEGER NOT NULL, v INTEGER NOT NULL, base TEXT);
`;

interface ConfigRow {
  version: number;
  text: string;
  sha256: string;
  by: string;
  at: number;
  v: number;
  base: string | null;
  [k: string]: SqlStorageValue;
}

/** Why a put is refused (a readable sentence), or null when it is well formed. */
export function putProblem(text: unknown, sha256: unknown, by: unknown): string | null {
  if (typeof text !== "string" || text.trim() === "") return "the config text is empty";
  if (new TextEncoder().encode(text).byteLength > MAX_CONFIG_BYTES) return `the config text is larger than ${MAX_CONFIG_BYTES} bytes`;
  if (typeof sha256 !== "string" || !/^[0-9a-f]{64}$/.test(sha256)) return "sha256 must be 64 lowercase hex characters";
  if (typeof by !== "string" || by === "" || by.length > 256) return "the actor (by) must be 1-256 characters";
  return null;
}

async function sha256Of(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return Array.from(new Uint8Array(d), (b) => b.toString(16).padStart(2, "0")).join("");
}

export class ConfigDO extends DurableObject<Env> implements ConfigApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(CONFIG_SCHEMA);
  }

  async current(): Promise<StoredConfig | null> {
    const r = this.sql.exec<ConfigRow>("SELECT version, text, sha256, by, at, v, base FROM configs ORDER BY version DESC LIMIT 1").toArray()[0];
    return r ? { v: r.v, version: r.version, text: r.text, sha256: r.sha256, by: r.by, at: r.at, base: r.base ?? null } : null;
  }

  async head(): Promise<StoredConfigHead | null> {
    return this.headNow();
  }

  private headNow(): StoredConfigHead | null {
    const r = this.sql
      .exec<{ version: number; sha256: string; base: string | null }>("SELECT version, sha256, base FROM configs ORDER BY version DESC LIMIT 1")
      .toArray()[0];
    return r ? { version: r.version, sha256: r.sha256, base: r.base ?? null } : null;
  }

  put(text: string, sha256: string, by: string, signing: LedgerSigning, detail: JsonObject = {}, base: string | null = null): Promise<ConfigPut> {
    // Nothing else runs in the object meanwhile: the version read here is the one committed below.
    return this.ctx.blockConcurrencyWhile(async (): Promise<ConfigPut> => {
      const problem = putProblem(text, sha256, by);
      if (problem) return { ok: false, message: problem };
      if (base !== null && !/^[0-9a-f]{64}$/.test(String(base))) return { ok: false, message: "base must be 64 lowercase hex characters or null" };
      if ((await sha256Of(text)) !== sha256) return { ok: false, message: "sha256 is not the SHA-256 of the text" };
      const before = this.headNow();
      if (before && before.sha256 === sha256 && before.base === base) return { ok: true, changed: false, stored: before };
      const version = (before?.version ?? 0) + 1;
      const body: ConfigChangedBody = { ...detail, what: "config", from: before?.sha256 ?? null, to: sha256, by, version };
      const draft: EntryDraft = { kind: "config.changed", id: `config:v${version}:${sha256}`, at: new Date().toISOString(), body };
      try {
        const [entry] = await bounded(ledgerObject(this.env, GLOBAL_CHAIN)!.append([draft], signing), CONFIG_APPEND_TIMEOUT_MS);
        if (!entry || entry.id !== draft.id) throw new Error("the ledger did not confirm the record");
      } catch (e) {
        return { ok: false, message: `the config did not change: its ledger record could not be written (${(e as Error)?.message ?? String(e)})` };
      }
      this.ctx.storage.transactionSync(() => {
        this.sql.exec(
          "INSERT INTO configs (version, text, sha256, by, at, v, base) VALUES (?, ?, ?, ?, ?, ?, ?)",
          version,
          text,
          sha256,
          by,
          Date.now(),
          STORED_CONFIG_VERSION,
          base,
        );
        this.sql.exec("DELETE FROM configs WHERE version <= ?", version - KEPT_VERSIONS);
      });
      return { ok: true, changed: true, stored: { version, sha256, base } };
    });
  }
}
