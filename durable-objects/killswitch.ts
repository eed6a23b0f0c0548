/**
 * CONTRACT STUB (being implemented): KillSwitchDO.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";

export class KillSwitchDO extends DurableObject<Env> {}
