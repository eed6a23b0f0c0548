/**
 * Schema checks (request path step 7): a call's arguments against the tool's `inputSchema`, schema
 * drift against the hash the operator's mapping pins, and — after the call ran — a result's
 * `structuredContent` against the tool's `outputSchema` (problems for the ledger, nothing more).
 * Validation is `@cfworker/json-schema`: eval-free (production Workers forbid `eval`), drafts
 * 2020-12 (the MCP default when a schema names no `$schema`), 2019-09, 7 and 4, with `$ref`,
 * `$defs`, `$anchor`, `if/then/else`, `anyOf/oneOf/allOf`, `unevaluated*`. It resolves `$ref` only
 * against the schema it is given (every `$id`/`$anchor`/JSON-pointer inside it) and has no loader:
 * a reference to anything else — a network URL included — is never fetched; the library throws
 * "Unresolved $ref", which is a violation here, as is any other failure to evaluate a schema (a bad
 * `pattern`, a `$ref` loop, a duplicate `$id`). Known gap of the library: `$dynamicRef` /
 * `$dynamicAnchor` (2020-12) are not evaluated (ignored, so they never refuse a call); `format` is
 * asserted for the formats it knows. Each schema is compiled once, cached by the catalog's schema
 * hash (which covers both schemas) in a bounded LRU; schemas are cloned before compiling because
 * the library annotates the objects it walks, and the catalog's copies must stay verbatim.
 * Must never: fetch anything, throw (every failure is a problem or a refusal), or mutate a schema.
 */
import { dereference, type OutputUnit, type Schema, type SchemaDraft, validate } from "@cfworker/json-schema";
import type { Json, JsonObject } from "../wire/jsonrpc.ts";
import type { Refusal, Target } from "./steps.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";
import { Memo } from "../wire/memo.ts";

/** How many problems a reason names. */
export const MAX_PROBLEMS = 5;
/** Compiled schemas kept per isolate. */
const MAX_COMPILED = 256;

type Compiled = { ok: true; schema: Schema; lookup: Record<string, Schema | boolean>; draft: SchemaDraft } | { ok: false; error: string };

/** Least recently used first out. */
const compiled = new Memo<string, Compiled>({ max: MAX_COMPILED, lru: true });

/** The dialect a schema declares; 2020-12 when it names none or one this validator does not know. */
export function draftOf(schema: JsonObject): SchemaDraft {
  const s = typeof schema.$schema === "string" ? schema.$schema : "";
  if (/\/draft\/2019-09\/schema/.test(s)) return "2019-09";
  if (/\/draft-0[67]\/schema/.test(s)) return "7";
  if (/\/draft-0[34]\/schema/.test(s)) return "4";
  return "2020-12";
}

function firstLine(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return (msg.split("\n")[0] ?? msg).slice(0, 300);
}

function compile(key: string, schema: JsonObject): Compiled {
  const hit = compiled.get(key);
  if (hit) return hit;
  let c: Compiled;
  try {
    const copy = structuredClone(schema) as Schema;
    c = { ok: true, schema: copy, lookup: dereference(copy), draft: draftOf(schema) };
  } catch (e) {
    c = { ok: false, error: firstLine(e) };
  }
  compiled.set(key, c);
  return c;
}

/**
 * The schemas a validation may reference, watched: whether the last one it asked for was not
 * there (a reference outside the schema, which is never fetched: the validator then throws).
 */
function watched(lookup: Record<string, Schema | boolean>): { lookup: Record<string, Schema | boolean>; lastMissed: boolean } {
  const seen = { lookup, lastMissed: false };
  seen.lookup = new Proxy(lookup, {
    get(target, key, receiver) {
      const v: unknown = Reflect.get(target, key, receiver);
      if (typeof key === "string") seen.lastMissed = v === undefined;
      return v;
    },
  });
  return seen;
}

/** Where in the instance a unit points: a JSON pointer, `/` for the root. */
function where(u: OutputUnit): string {
  return u.instanceLocation.replace(/^#/, "") || "/";
}

/**
 * Readable problems from the library's (depth-first, parent-before-children) output units: a unit
 * whose children follow only says "a subschema had errors", so its children speak instead; an
 * anyOf/oneOf speaks for itself, naming its alternatives' problems; a `false` schema under
 * additionalProperties is already named by its parent.
 */
function readable(units: OutputUnit[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < units.length; i++) {
    const u = units[i]!;
    const prefix = `${u.keywordLocation}/`;
    let j = i + 1;
    while (j < units.length && units[j]!.keywordLocation.startsWith(prefix)) j++;
    if (u.keyword === "anyOf" || u.keyword === "oneOf") {
      const alternatives = readable(units.slice(i + 1, j)).slice(0, 3);
      out.push(`${where(u)}: ${u.error}${alternatives.length ? ` (${alternatives.join(" | ")})` : ""}`);
      i = j - 1;
      continue;
    }
    if (u.keyword === "false" && i > 0) continue;
    if (j > i + 1) continue;
    out.push(`${where(u)}: ${u.error}`);
  }
  return out;
}

/** Every problem of `instance` against `schema` (compiled once under `key`); [] when it conforms. */
function check(key: string, schema: JsonObject, instance: Json, what: string): string[] {
  const c = compile(key, schema);
  if (!c.ok) return [`the ${what} cannot be compiled: ${c.error}`];
  const seen = watched(c.lookup);
  try {
    const r = validate(instance, c.schema, c.draft, seen.lookup, false);
    if (r.valid) return [];
    const problems = readable(r.errors);
    return problems.length ? problems : ["/: does not match"];
  } catch (e) {
    // The validator throws on a $ref right after it looked the reference up and found nothing.
    const unresolved = seen.lastMissed && !(e instanceof RangeError);
    return [`the ${what} cannot be evaluated: ${firstLine(e)}${unresolved ? " (references outside the schema are never fetched)" : ""}`];
  }
}

function summary(problems: string[]): string {
  const shown = problems.slice(0, MAX_PROBLEMS).join("; ");
  return problems.length > MAX_PROBLEMS ? `${shown}; and ${problems.length - MAX_PROBLEMS} more` : shown;
}

/**
 * Step 7. Drift first (a pinned hash the catalog no longer lists: the mapping was reviewed against
 * another schema), then the arguments (absent arguments are checked as `{}`). Null when the call may go on.
 */
export function validateCall(target: Target, args: JsonObject | undefined, mapping: ToolMapping | undefined): Refusal | null {
  const tool = target.tool;
  if (mapping?.schemaHash !== undefined && mapping.schemaHash !== tool.schemaHash) {
    return {
      check: "drift",
      reason: `the tool's schema changed since its mapping was reviewed: the mapping pins ${mapping.schemaHash}, the upstream now lists ${tool.schemaHash}; calls are refused until the mapping is reviewed`,
    };
  }
  const problems = check(`in:${tool.schemaHash}`, tool.inputSchema, args ?? {}, "inputSchema");
  if (problems.length === 0) return null;
  return { check: "schema", reason: `arguments do not match the tool's inputSchema: ${summary(problems)}` };
}

/**
 * A result's `structuredContent` against the tool's `outputSchema` (for a result that is not an
 * error). The call already ran: these are problems to record, at most MAX_PROBLEMS and a count.
 */
export function validateOutput(target: Target, structuredContent: Json | undefined): string[] {
  const schema = target.tool.outputSchema;
  if (!schema) return [];
  if (structuredContent === undefined) return ["the tool declares an outputSchema but its result carries no structuredContent"];
  const problems = check(`out:${target.tool.schemaHash}`, schema, structuredContent, "outputSchema");
  return problems.length > MAX_PROBLEMS ? [...problems.slice(0, MAX_PROBLEMS), `and ${problems.length - MAX_PROBLEMS} more`] : problems;
}

/** How many compiled schemas this isolate holds (tests check the bound). */
export function compiledSchemaCount(): number {
  return compiled.size;
}
