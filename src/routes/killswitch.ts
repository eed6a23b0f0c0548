/**
 * CONTRACT STUB (being implemented): /v1/killswitch JSON API.
 */
import { Hono } from "hono";
import type { AppEnv } from "./gate.ts";

export const killSwitchRoutes = new Hono<AppEnv>();
