/**
 * CONTRACT STUB (being implemented): /console web pages.
 */
import { Hono } from "hono";
import type { AppEnv } from "./gate.ts";

export const consoleRoutes = new Hono<AppEnv>();
