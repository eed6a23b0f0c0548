/**
 * CONTRACT STUB (being implemented): /v1/holds JSON API.
 */
import { Hono } from "hono";
import type { AppEnv } from "./gate.ts";

export const holdsRoutes = new Hono<AppEnv>();
