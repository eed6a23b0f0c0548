/**
 * Worker bindings. Owns only the Env type; must never hold logic or defaults. Objects are
 * addressed through durable-objects/object-names.ts, which types each stub with its RPC surface.
 */
export interface Env {
  SESSIONS: DurableObjectNamespace;
  REVOCATIONS: DurableObjectNamespace;
  CREDENTIALS: DurableObjectNamespace;
  LEDGER: DurableObjectNamespace;
  /** TasksDO: which principal created which upstream task (durable-objects/tasks.ts). */
  TASKS: DurableObjectNamespace;
  /** HistoryDO: each principal's recent calls and budget counters (durable-objects/history.ts). */
  HISTORY: DurableObjectNamespace;
  /** HoldsDO: one team's held calls (durable-objects/holds.ts). */
  HOLDS: DurableObjectNamespace;
  /** KillSwitchDO: the gateway's halts (durable-objects/killswitch.ts). */
  KILLSWITCH: DurableObjectNamespace;
  /** ConfigDO: the gateway's stored, hot-reloadable config (durable-objects/config.ts). */
  CONFIG: DurableObjectNamespace;
  /** SseDO: one legacy HTTP+SSE session's open stream, in memory (durable-objects/http-sse.ts; `gateway.legacy_sse`). */
  SSE: DurableObjectNamespace;
  /** RoundsDO: one modern client's call parked on a legacy upstream between input rounds, in memory (src/upstream/rounds-object.ts). */
  ROUNDS: DurableObjectNamespace;
  /** The shared ledger store all teams' auditors query (migrations/). */
  LEDGER_DB: D1Database;
  /**
   * The OAuth authorization server's store (auth.oauth): clients, grants, hashed codes and tokens
   * (@cloudflare/workers-oauth-provider). Bound only when auth.oauth is on (a project's deploy creates it).
   */
  OAUTH_KV: KVNamespace;
  /**
   * Optional Workers Analytics Engine dataset: when bound, each governed call's outcome or refusal
   * also writes one data point (src/ports/ledger-analytics.ts has the schema). Absent: nothing is written.
   */
  PORTCULLIS_ANALYTICS?: AnalyticsEngineDataset;
  /** portcullis.yaml text as a var (this repository's `portcullis dev`); a project's bundle carries its config instead (src/config/deployed.ts). */
  PORTCULLIS_CONFIG?: string;
  [secretOrVar: string]: unknown;
}
