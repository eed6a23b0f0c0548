/**
 * The caller's governance ports over Durable Objects, as both fronts hand them to the method
 * handlers (CallContext.stores): its team's ledger chain, its history, the kill switch, its team's
 * holds and the hold webhooks, its task ownership store. Each object is reached only when a
 * request needs it. Must never: reach an object of another principal or team than the caller's.
 */
import { holdsObject, taskObject } from "../../durable-objects/object-names.ts";
import type { CallerStores, FrontContext } from "../protocol/call-context.ts";
import { historyStore } from "../ports/history-store.ts";
import { notifyHold } from "../ports/hold-webhooks.ts";
import { killSwitchReader } from "../ports/killswitch-client.ts";
import { frontLedger } from "../ports/ledger-writer.ts";

export function callerStores(fc: FrontContext): CallerStores {
  return {
    ledger: frontLedger(fc),
    tasks: () => taskObject(fc.env, fc.principal.sub),
    history: () => historyStore(fc.env),
    killSwitch: () => killSwitchReader(fc.env),
    holds: () => holdsObject(fc.env, fc.principal.team),
    holdCreated: (h) => notifyHold(fc.env, fc.cfg, "created", h, fc.waitUntil),
    ledgerEnv: () => fc.env,
  };
}
