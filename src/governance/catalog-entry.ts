/**
 * The tool catalog's shape and its one pure rule: what a tool of an upstream looks like to
 * governance (its upstream name, exposed name, schemas, annotations and a stable schema hash),
 * and how that hash is computed — SHA-256 over the RFC 8785 canonical JSON (`canonicalize`) of
 * the tool's `inputSchema` and `outputSchema`. Filling and caching the catalog is src/upstream/tool-catalog.ts's
 * job; governance only reads it through the `ToolCatalog` interface it is handed.
 * Must never: fetch anything, or treat annotations as more than hints.
 */
import type { UpstreamConfig } from "../config/gateway-config.ts";
import { canonicalHash } from "../wire/canonical.ts";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";

export interface CatalogTool {
  /** The upstream's own tool name. */
  name: string;
  /** The governed name: what /mcp shows (prefixed, or aliased when over 64 characters), also on a `/mcp/<upstream>` route, whose clients see `name`. */
  exposedName: string;
  inputSchema: JsonObject;
  outputSchema?: JsonObject;
  /** The upstream's annotations: untrusted hints, never a decision. */
  annotations?: JsonObject;
  /** Hex SHA-256 of the canonical JSON of `{inputSchema, outputSchema?}`. */
  schemaHash: string;
}

/** The catalog as one caller sees it (its upstreams, its credentials). */
export interface ToolCatalog {
  /**
   * The upstream and tool an exposed name denotes, or null when no upstream of the caller's
   * lists it. Throws when an upstream's catalog cannot be read (the call is then refused).
   */
  resolve(exposedName: string): Promise<{ upstream: UpstreamConfig; tool: CatalogTool } | null>;
}

/** The stable schema hash of a tool definition (what a mapping pins to detect drift). */
export function schemaHash(tool: JsonObject): string {
  const subject: JsonObject = { inputSchema: isObject(tool.inputSchema) ? tool.inputSchema : {} };
  if (isObject(tool.outputSchema)) subject.outputSchema = tool.outputSchema;
  return canonicalHash(subject);
}

/** A catalog entry from one item of an upstream's `tools/list` (null when it has no name). */
export function catalogEntry(tool: JsonObject, exposedName: string): CatalogTool | null {
  if (typeof tool.name !== "string") return null;
  const entry: CatalogTool = {
    name: tool.name,
    exposedName,
    inputSchema: isObject(tool.inputSchema) ? tool.inputSchema : {},
    schemaHash: schemaHash(tool),
  };
  if (isObject(tool.outputSchema)) entry.outputSchema = tool.outputSchema;
  if (isObject(tool.annotations)) entry.annotations = tool.annotations;
  return entry;
}
