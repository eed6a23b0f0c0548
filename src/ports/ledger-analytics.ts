/**
 * One Workers Analytics Engine data point per governed call, when the optional
 * `PORTCULLIS_ANALYTICS` dataset is bound (wrangler.toml `[[analytics_engine_datasets]]`): for an
 * outcome and for a refusal, written beside the ledger record, never awaited (writeDataPoint is
 * fire-and-forget). The schema, by position (what an operator's SQL API queries name):
 * index1 = team; blob1 = kind (`outcome` | `blocked`); blob2 = upstream (empty for a refusal);
 * blob3 = tool (the upstream's own name for an outcome, the name called for a refusal); blob4 =
 * status (`succeeded` | `failed` | `uncertain`) or, for a refusal, the check that refused; blob5 =
 * principal; blob6 = W3C trace id (empty when none); double1 = upstream time (ms, 0 for a
 * refusal); double2 = the gateway's own time (ms, 0 when not measured). Must never: write an
 * argument, a result, a token or a secret, or fail a call (a write that throws is dropped).
 */
import type { Env } from "../env.ts";

export interface CallPoint {
  team: string;
  kind: "outcome" | "blocked";
  upstream: string;
  tool: string;
  /** The outcome's status, or the refusing check. */
  status: string;
  principal: string;
  traceId?: string;
  upstreamMs?: number;
  gatewayMs?: number;
}

/** Writes `p` to the bound dataset; nothing when none is bound. */
export function writeCallPoint(env: Env, p: CallPoint): void {
  const ds = env.PORTCULLIS_ANALYTICS;
  if (!ds || typeof ds.writeDataPoint !== "function") return;
  try {
    ds.writeDataPoint({
      indexes: [p.team.slice(0, 96)],
      blobs: [p.kind, p.upstream, p.tool, p.status, p.principal, p.traceId ?? ""].map((b) => b.slice(0, 1024)),
      doubles: [p.upstreamMs ?? 0, p.gatewayMs ?? 0],
    });
  } catch {
    /* analytics never fails a call */
  }
}
