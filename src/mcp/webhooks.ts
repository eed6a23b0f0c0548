/**
 * CONTRACT STUB (being implemented): hold webhooks.
 */
import type { HoldRecord } from "../../durable-objects/records.ts";
import type { GatewayConfig } from "../config/load.ts";
import type { Env } from "../env.ts";

/** Sends `event` for `hold` to every configured webhook that wants it (signed, retried with backoff, under the egress rules); never throws. */
export function notifyHold(_env: Env, _cfg: GatewayConfig, _event: "created" | "resolved", _hold: HoldRecord, _waitUntil: (p: Promise<unknown>) => void): void {}
