/**
 * CONTRACT STUB (being implemented): the governed path's hold step over the team's HoldsDO.
 */
import type { HoldsApi } from "../../durable-objects/records.ts";
import { NO_HOLDS, type HoldStore } from "../governance/steps.ts";
import type { CallContext } from "./context.ts";

export function holdStore(_ctx: CallContext, _api: HoldsApi): HoldStore {
  return NO_HOLDS;
}
