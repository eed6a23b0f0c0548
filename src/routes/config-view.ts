/**
 * The config of the running Worker: parsed once per isolate from the PORTCULLIS_CONFIG var.
 * Owns that cache. Must never: serve with a config that failed validation (callers get the
 * ConfigError and answer 503 naming every problem).
 */
import type { Env } from "../env.ts";
import { ConfigError, loadConfig, type GatewayConfig } from "../config/load.ts";

let cached: { text: string; config: GatewayConfig } | null = null;

export function currentConfig(env: Env): GatewayConfig {
  const text = env.PORTCULLIS_CONFIG;
  if (typeof text !== "string" || text.trim() === "") {
    throw new ConfigError(["PORTCULLIS_CONFIG is not set: start with `portcullis dev --config FILE` or set it at deploy"]);
  }
  if (cached && cached.text === text) return cached.config;
  const config = loadConfig(text, env as Record<string, unknown>);
  cached = { text, config };
  return config;
}
