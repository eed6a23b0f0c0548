/**
 * The protocol extensions the gateway serves when it aggregates several upstreams (skills and
 * tasks), and the extension settings it advertises: the ones every declaring upstream agrees on.
 * Owns the extension ids and that merge. Must never: advertise an extension the gateway has no
 * routing for (its methods would get -32601).
 */
import { type JsonObject, isObject } from "../wire/jsonrpc.ts";

export const SKILLS_EXTENSION = "io.modelcontextprotocol/skills";
export const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";

/**
 * Extensions the gateway serves when it aggregates several upstreams: skills (front/skills.ts) and
 * tasks (tasks/get, tasks/update, tasks/cancel are routed by the namespaced task id). Any other
 * extension an upstream declares is dropped from what the gateway advertises: its methods
 * would get -32601.
 */
const SERVED_EXTENSIONS: readonly string[] = [SKILLS_EXTENSION, TASKS_EXTENSION];

/**
 * The extensions the gateway advertises for several upstreams, from each upstream's declared
 * `capabilities.extensions`: a served extension appears when at least one upstream declares it,
 * with only the settings every declaring upstream agrees on (same key, same JSON value).
 * Why the agreement and not the union: a client reads a setting as true of the whole server.
 * `directoryRead: true` from one skills upstream and none from another would let a client
 * expect `resources/directory/read` on skills the other upstream serves, which no one can
 * answer; so `directoryRead` is advertised only when every skills upstream serves it. Per-URI
 * routing still sends a directory read to an upstream that declared `directoryRead` itself, so
 * a client that asks anyway is served where possible and gets -32602 elsewhere.
 * Returns undefined when no served extension is declared.
 */
export function mergeExtensions(declared: JsonObject[]): JsonObject | undefined {
  const out: JsonObject = {};
  for (const id of SERVED_EXTENSIONS) {
    const decls = declared.map((e) => e[id]).filter(isObject);
    if (decls.length > 0) out[id] = agreedSettings(decls);
  }
  return Object.keys(out).length > 0 ? out : undefined;
}

function agreedSettings(decls: JsonObject[]): JsonObject {
  const [first, ...rest] = decls;
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(first!)) {
    const j = JSON.stringify(v);
    if (rest.every((d) => d[k] !== undefined && JSON.stringify(d[k]) === j)) out[k] = v;
  }
  return out;
}
