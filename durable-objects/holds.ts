/**
 * CONTRACT STUB (being implemented): HoldsDO.
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../src/env.ts";

export class HoldsDO extends DurableObject<Env> {}
