/**
 * KillSwitchDO: the gateway's one kill switch (object `global` in the KILLSWITCH namespace), a
 * thin versioned state machine over DO SQLite — one row per halted (scope, target) and a version
 * that grows with every change. `halt` and `resume` run under `blockConcurrencyWhile`, so no read
 * or other change interleaves with one: the change is validated (changeProblem: the shared rules of
 * ./contract-killswitch.ts and the actor check),
 * its `killswitch.changed` record is appended to the `_global` ledger chain FIRST, and only once
 * that append is durable is the change committed (no record, no change). Resuming a scope that is
 * not halted changes nothing and records nothing; halting a halted scope again replaces its
 * reason (a change, recorded). Readers cache `state()` for at most a second per isolate
 * (src/ports/killswitch-client.ts). Must never: commit a change whose ledger record was not written,
 * accept a change without a reason or an actor, or answer a state it did not read from storage.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";
import type { EntryDraft, KillSwitchBody } from "../src/ledger/records.ts";
import { ledgerObject } from "./object-names.ts";
import { GLOBAL_CHAIN } from "../src/ledger/records.ts";
import {
  HALT_RECORD_VERSION,
  type HaltRecord,
  type HaltScopeName,
  type KillSwitchApi,
  type KillSwitchChange,
  type KillSwitchSnapshot,
  killSwitchChangeProblem,
  MAX_TARGET_CHARS,
} from "./contract-killswitch.ts";
import type { LedgerSigning } from "./contract-ledger.ts";
import { bounded } from "../src/wire/bounded.ts";

/** The ledger append gets this long; past it the change is refused (well inside blockConcurrencyWhile's 30 s). */
export const KILLSWITCH_APPEND_TIMEOUT_MS = 10_000;

export const KILLSWITCH_SCHEMA = `
CREATE TABLE IF NOT EXISTS halts (scope TEXT NOT NULL, target TEXT NOT NULL, reason TEXT NOT NULL, by TEXT NOT NULL, at INTEGER NOT NULL, v INTEGER NOT NULL, PRIMARY KEY (scope, target));
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL);
`;

/**
 * Why a change is refused (a readable sentence), or null when it is well formed: the rules of
 * killSwitchChangeProblem (./contract-killswitch.ts, the one home the Worker's client shares),
 * then the actor (`by`), which only the object checks.
 */
export function changeProblem(scope: unknown, target: unknown, reason: unknown, by: unknown): string | null {
  const problem = killSwitchChangeProblem(scope, target, reason);
  if (problem) return problem;
  if (typeof by !== "string" || by === "" || by.length > MAX_TARGET_CHARS) return `the actor (by) must be 1-${MAX_TARGET_CHARS} characters`;
  return null;
}

interface HaltRow {
  scope: string;
  target: string;
  reason: string;
  by: string;
  at: number;
  v: number;
  [k: string]: SqlStorageValue;
}

export class KillSwitchDO extends DurableObject<Env> implements KillSwitchApi {
  private sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(KILLSWITCH_SCHEMA);
  }

  async state(): Promise<KillSwitchSnapshot> {
    return this.snapshot();
  }

  async halt(scope: HaltScopeName, target: string | null, reason: string, by: string, signing: LedgerSigning): Promise<KillSwitchChange> {
    return this.change("halt", scope, target, reason, by, signing);
  }

  async resume(scope: HaltScopeName, target: string | null, reason: string, by: string, signing: LedgerSigning): Promise<KillSwitchChange> {
    return this.change("resume", scope, target, reason, by, signing);
  }

  private snapshot(): KillSwitchSnapshot {
    const version = this.sql.exec<{ v: number }>("SELECT v FROM meta WHERE k = 'version'").toArray()[0]?.v ?? 0;
    const halts = this.sql
      .exec<HaltRow>("SELECT scope, target, reason, by, at, v FROM halts ORDER BY at, scope, target")
      .toArray()
      .map(
        (r): HaltRecord => ({ v: r.v, scope: r.scope as HaltScopeName, target: r.scope === "global" ? null : r.target, reason: r.reason, by: r.by, at: r.at }),
      );
    return { version, halts };
  }

  private change(
    action: "halt" | "resume",
    scope: HaltScopeName,
    target: string | null,
    reason: string,
    by: string,
    signing: LedgerSigning,
  ): Promise<KillSwitchChange> {
    // Nothing else runs in the object meanwhile: the version read here is the one committed below.
    return this.ctx.blockConcurrencyWhile(async (): Promise<KillSwitchChange> => {
      const problem = changeProblem(scope, target, reason, by);
      if (problem) return { ok: false, message: problem };
      const key = scope === "global" ? "" : (target as string);
      const before = this.snapshot();
      const halted = this.sql.exec("SELECT 1 FROM halts WHERE scope = ? AND target = ?", scope, key).toArray().length > 0;
      if (action === "resume" && !halted) return { ok: true, changed: false, snapshot: before };
      const version = before.version + 1;
      const body: KillSwitchBody = { action, scope, target: scope === "global" ? null : key, reason, by, version };
      const draft: EntryDraft = { kind: "killswitch.changed", id: crypto.randomUUID(), at: new Date().toISOString(), body };
      try {
        const [entry] = await bounded(ledgerObject(this.env, GLOBAL_CHAIN)!.append([draft], signing), KILLSWITCH_APPEND_TIMEOUT_MS);
        if (!entry || entry.id !== draft.id) throw new Error("the ledger did not confirm the record");
      } catch (e) {
        return { ok: false, message: `the kill switch did not change: its ledger record could not be written (${(e as Error)?.message ?? String(e)})` };
      }
      const now = Date.now();
      this.ctx.storage.transactionSync(() => {
        if (action === "halt") {
          this.sql.exec(
            "INSERT INTO halts (scope, target, reason, by, at, v) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(scope, target) DO UPDATE SET reason = excluded.reason, by = excluded.by, at = excluded.at, v = excluded.v",
            scope,
            key,
            reason,
            by,
            now,
            HALT_RECORD_VERSION,
          );
        } else {
          this.sql.exec("DELETE FROM halts WHERE scope = ? AND target = ?", scope, key);
        }
        this.sql.exec("INSERT INTO meta (k, v) VALUES ('version', ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", version);
      });
      return { ok: true, changed: true, snapshot: this.snapshot() };
    });
  }
}
