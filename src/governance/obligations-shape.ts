/**
 * Shaping a result by its obligations (step 12 of the governed path): the redact, mask and filter
 * handlers of the registry in obligations.ts, applied to `structuredContent` and to content
 * blocks whose text is JSON — filters, then redactions, then masks — or the result held back
 * when it cannot carry them (the rules are in obligations.ts's header). Must never: mutate its
 * input, throw on any result (an unexpected failure holds the result back), or let a result past
 * that it could not shape as asked.
 */
import { isObject, type Json, type JsonObject, type JsonRpcResponse } from "../wire/jsonrpc.ts";
import { type Compiled, compile, MASKED, OBLIGATION_CHECK, REDACTED, type Segment, type Shaper, specOf } from "./obligations.ts";
import type { Obligated, Obligation } from "./steps.ts";

// ---- shaping a result ---------------------------------------------------------------------

/** A carrier that cannot take an obligation: why. */
class HeldBack extends Error {}

/**
 * Copy-on-write map over an object's values: the same object back when nothing changed. Values
 * are defined, never assigned, so a key such as `__proto__` stays a plain property.
 */
function mapObject(v: JsonObject, f: (key: string, child: Json) => Json): JsonObject {
  let out: JsonObject | null = null;
  for (const k of Object.keys(v)) {
    const child = v[k]!;
    const next = f(k, child);
    if (next !== child) {
      if (!out) out = { ...v };
      Object.defineProperty(out, k, { value: next, writable: true, enumerable: true, configurable: true });
    }
  }
  return out ?? v;
}
function mapArray(v: Json[], f: (child: Json, i: number) => Json): Json[] {
  let out: Json[] | null = null;
  for (let i = 0; i < v.length; i++) {
    const child = v[i]!;
    const next = f(child, i);
    if (next !== child) {
      if (!out) out = v.slice();
      out[i] = next;
    }
  }
  return out ?? v;
}

function redactAt(v: Json, path: Segment[], i: number): Json {
  if (i === path.length) return REDACTED;
  const s = path[i]!;
  switch (s.t) {
    case "child":
      return isObject(v) && Object.hasOwn(v, s.name) ? mapObject(v, (k, c) => (k === s.name ? redactAt(c, path, i + 1) : c)) : v;
    case "index":
      return Array.isArray(v) && s.i < v.length ? mapArray(v, (c, j) => (j === s.i ? redactAt(c, path, i + 1) : c)) : v;
    case "any":
      return Array.isArray(v) ? mapArray(v, (c) => redactAt(c, path, i + 1)) : isObject(v) ? mapObject(v, (_k, c) => redactAt(c, path, i + 1)) : v;
    case "descend":
      // Deeper matches first (inside the matched value too), then the rest of the path on this level's match.
      if (Array.isArray(v)) return mapArray(v, (c) => redactAt(c, path, i));
      if (isObject(v)) return mapObject(v, (k, c) => (k === s.name ? redactAt(redactAt(c, path, i), path, i + 1) : redactAt(c, path, i)));
      return v;
  }
}

function maskField(v: Json, field: string): Json {
  if (Array.isArray(v)) return mapArray(v, (c) => maskField(c, field));
  if (isObject(v)) return mapObject(v, (k, c) => (k === field ? (c === MASKED ? c : MASKED) : maskField(c, field)));
  return v;
}

const isRowList = (v: Json | undefined): v is JsonObject[] => Array.isArray(v) && v.every(isObject);
/** Whether one row's field equals the filter's value (a string equal to it, or a scalar whose JSON text is it). */
function rowMatches(row: JsonObject, field: string, value: string): boolean {
  if (!Object.hasOwn(row, field)) return false;
  const x = row[field];
  if (typeof x === "string") return x === value;
  if (typeof x === "number" || typeof x === "boolean" || x === null) return JSON.stringify(x) === value;
  return false;
}
function filterRows(v: Json, c: Extract<Shaper, { kind: "filter" }>, where: string): Json {
  const keep = (rows: JsonObject[]): Json[] => {
    const kept = rows.filter((r) => rowMatches(r, c.field, c.value));
    return kept.length === rows.length ? rows : kept;
  };
  if (isRowList(v)) return keep(v);
  if (isObject(v)) {
    const lists = Object.keys(v).filter((k) => isRowList(v[k]) && (v[k] as Json[]).length > 0);
    const mixed = Object.keys(v).some((k) => Array.isArray(v[k]) && !isRowList(v[k]) && (v[k] as Json[]).some((x) => isObject(x) || Array.isArray(x)));
    if (lists.length === 1 && !mixed) return mapObject(v, (k, child) => (k === lists[0] ? keep(child as JsonObject[]) : child));
    if (lists.length === 0 && !mixed && Object.keys(v).some((k) => isRowList(v[k]))) return v; // only empty lists: no rows to filter
  }
  throw new HeldBack(`${c.spec} cannot be applied to ${where}: it is not row-shaped (a list of objects, or an object holding exactly one list of objects)`);
}

/** Filters, then redactions, then masks, over one JSON value. */
function shapeJson(v: Json, shapers: Shaper[], where: string): Json {
  let out = v;
  for (const c of shapers) if (c.kind === "filter") out = filterRows(out, c, where);
  for (const c of shapers) if (c.kind === "redact") out = redactAt(out, c.path, 0);
  for (const c of shapers) if (c.kind === "mask") out = maskField(out, c.field);
  return out;
}

const cannot = (shapers: Shaper[], what: string) => new HeldBack(`${shapers.map((c) => c.spec).join(", ")} cannot be applied to ${what}`);

/** A text carrier: blank passes, JSON is shaped (and re-serialised only when changed), anything else is held back. */
function shapeText(text: string, shapers: Shaper[], where: string): string {
  if (text.trim() === "") return text;
  let parsed: Json;
  try {
    parsed = JSON.parse(text) as Json;
  } catch {
    throw cannot(shapers, `${where}: it is free text, not JSON`);
  }
  if (typeof parsed === "string") throw cannot(shapers, `${where}: it is free text (a JSON string)`);
  const shaped = shapeJson(parsed, shapers, where);
  return shaped === parsed ? text : text.includes("\n") ? JSON.stringify(shaped, null, 2) : JSON.stringify(shaped);
}

function shapeBlock(block: Json, shapers: Shaper[], i: number): Json {
  const where = `content block ${i}`;
  if (!isObject(block)) throw cannot(shapers, `${where}: it is not a content block`);
  switch (block.type) {
    case "text":
      if (typeof block.text !== "string") throw cannot(shapers, `${where}: a text block without text`);
      return mapObject(block, (k, c) => (k === "text" ? shapeText(c as string, shapers, `${where} (text)`) : c));
    case "image":
    case "audio":
    case "resource_link":
      return block;
    case "resource": {
      const r = block.resource;
      if (isObject(r) && typeof r.text === "string" && r.blob === undefined) {
        const text = shapeText(r.text, shapers, `${where} (embedded resource)`);
        return text === r.text ? block : { ...block, resource: { ...r, text } };
      }
      throw cannot(shapers, `${where}: an embedded resource that is binary or has no text`);
    }
    default:
      throw cannot(shapers, `${where}: a content block of type ${JSON.stringify(block.type ?? null)}`);
  }
}

function shapeResponse(response: JsonRpcResponse, shapers: Shaper[]): JsonRpcResponse {
  if (response.error !== undefined) throw cannot(shapers, "the upstream's error answer (its message is free text)");
  const result = response.result;
  if (result === undefined) return response;
  if (!isObject(result) || !Array.isArray(result.content)) throw cannot(shapers, "this result: it has no content list (a task, or another shape)");
  const content = mapArray(result.content, (b, i) => shapeBlock(b, shapers, i));
  let shaped: JsonObject = content === result.content ? result : { ...result, content };
  if (result.structuredContent !== undefined) {
    const sc = shapeJson(result.structuredContent, shapers, "structuredContent");
    if (sc !== result.structuredContent) shaped = { ...shaped, structuredContent: sc };
  }
  return shaped === result ? response : { ...response, result: shaped };
}

const heldBack = (reason: string): Obligated => ({ ok: false, refusal: { check: OBLIGATION_CHECK, reason: `the result was held back: ${reason}` } });

/**
 * Applies the obligations to the upstream's answer: ok with the shaped response (the input is
 * never changed; unchanged parts are shared) and every obligation honoured — the shaping ones
 * applied here, `audit:full` and `rate_limit` listed because their own steps (the ledger, the
 * pre-dispatch check) honour them — or a refusal holding the result back: when an obligation is
 * unknown or unusable, or the result cannot carry one (see the module header). Never throws.
 */
export function applyResultObligations(obligations: Obligation[], response: JsonRpcResponse): Obligated {
  try {
    const compiled: Compiled[] = [];
    for (const o of obligations) {
      const c = compile(o);
      if (typeof c === "string") return heldBack(`the obligation "${specOf(o)}" ${c}`);
      compiled.push(c);
    }
    const applied = [...new Set(compiled.map((c) => c.spec))];
    const shapers = compiled.filter((c): c is Shaper => c.kind === "redact" || c.kind === "mask" || c.kind === "filter");
    if (shapers.length === 0) return { ok: true, response, applied };
    return { ok: true, response: shapeResponse(response, shapers), applied };
  } catch (e) {
    if (e instanceof HeldBack) return heldBack(e.message);
    return heldBack(`the obligations could not be applied (${e instanceof Error ? e.message : String(e)})`);
  }
}
