/**
 * The tool catalog's shape and its one pure rule: what a tool of an upstream looks like to
 * governance (its upstream name, exposed name, schemas, annotations and a stable schema hash),
 * and how that hash is computed — SHA-256 over the RFC 8785 canonical JSON (`canonicalize`) of
 * the tool's `inputSchema` and `outputSchema`. Filling and caching the catalog is mcp/catalog.ts's
 * job; governance only reads it through the `ToolCatalog` interface it is handed.
 * Must never: fetch anything, or treat annotations as more than hints.
 */
import canonicalize from "canonicalize";
import type { UpstreamConfig } from "../config/load.ts";
import { isObject, type JsonObject } from "../wire/jsonrpc.ts";

export interface CatalogTool {
  /** The upstream's own tool name. */
  name: string;
  /** The name clients see (prefixed, or aliased when over 64 characters). */
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

const hex = (b: ArrayBuffer) => Array.from(new Uint8Array(b), (x) => x.toString(16).padStart(2, "0")).join("");

/** The stable schema hash of a tool definition (what a mapping pins to detect drift). */
export async function schemaHash(tool: JsonObject): Promise<string> {
  const subject: JsonObject = { inputSchema: isObject(tool.inputSchema) ? tool.inputSchema : {} };
  if (isObject(tool.outputSchema)) subject.outputSchema = tool.outputSchema;
  const text = canonicalize(subject) ?? "{}";
  return hex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** A catalog entry from one item of an upstream's `tools/list` (null when it has no name). */
export async function catalogEntry(tool: JsonObject, exposedName: string): Promise<CatalogTool | null> {
  if (typeof tool.name !== "string") return null;
  const entry: CatalogTool = {
    name: tool.name,
    exposedName,
    inputSchema: isObject(tool.inputSchema) ? tool.inputSchema : {},
    schemaHash: await schemaHash(tool),
  };
  if (isObject(tool.outputSchema)) entry.outputSchema = tool.outputSchema;
  if (isObject(tool.annotations)) entry.annotations = tool.annotations;
  return entry;
}
