/**
 * Protocol versions and the `_meta` keys of the 2026-07-28 era.
 * Owns: which versions the gateway speaks on each leg. Must never: list a version the front
 * cannot actually serve.
 */
export const MODERN_VERSION = "2026-07-28";
export const LEGACY_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"] as const;
export const LATEST_LEGACY = "2025-11-25";
export const SUPPORTED_VERSIONS = [MODERN_VERSION, ...LEGACY_VERSIONS];

export const META = {
  protocolVersion: "io.modelcontextprotocol/protocolVersion",
  clientCapabilities: "io.modelcontextprotocol/clientCapabilities",
  clientInfo: "io.modelcontextprotocol/clientInfo",
  logLevel: "io.modelcontextprotocol/logLevel",
  serverInfo: "io.modelcontextprotocol/serverInfo",
  subscriptionId: "io.modelcontextprotocol/subscriptionId",
} as const;

export const GATEWAY_INFO = { name: "portcullis", version: "0.1.0" };

export function isLegacyVersion(v: string): boolean {
  return (LEGACY_VERSIONS as readonly string[]).includes(v);
}

/** Methods the 2026-07-28 era removed: a modern client calling them gets 404 + -32601. */
export const REMOVED_IN_MODERN = new Set([
  "initialize",
  "ping",
  "logging/setLevel",
  "resources/subscribe",
  "resources/unsubscribe",
  "tasks/result",
  "tasks/list",
]);

export const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
