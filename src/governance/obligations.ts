/**
 * Obligations: the registry of handlers for the obligations a policy decision carries (step 12
 * of the governed path, and the pre-dispatch checks some of them need). Owns parsing and
 * validating specs (`parseObligation`), the pre-dispatch check (`checkBeforeDispatch`: an
 * obligation this gateway cannot apply refuses the call in enforce; a rate limit that is reached
 * refuses it), the history queries rate limits need (`obligationQueries`), shaping a result
 * (`applyResultObligations`: filters, then redactions, then masks; a result that cannot carry
 * them is held back) and the `_meta` that lets an upstream push the shaping down (`pushDownMeta`).
 * Known kinds:
 *   - `audit:full` — the decision record keeps the call's arguments in full, whatever the mapping
 *     says (`fullAudit`; the ledger writer applies it); the result is not changed.
 *   - `redact:<path>` — the values a JSONPath selects become "[REDACTED]". The subset: `$` then
 *     segments `.name`, `['name']` / `["name"]`, `[n]` (array index), `[*]` / `.*` (every element
 *     or property value), `..name` (every property `name` at any depth). No filters, slices,
 *     unions or script; `$` alone is refused.
 *   - `mask:<field>` — every property named exactly `<field>` (case-sensitive), at any depth,
 *     gets the value "****" (whatever it held: a scalar, an object or a list).
 *   - `filter:<field>=<value>` — on a row-shaped value (a list of objects, or an object holding
 *     exactly one non-empty list of objects directly, no other list holding an object, and any
 *     number of empty ones) only the rows whose top-level `<field>` equals `<value>` stay: a
 *     string equal to it, or a number, boolean or null whose JSON text is it. The holder's other
 *     properties (a `total`, say) pass unchanged.
 *   - `rate_limit:<n>/<window>` (`5/1m`; window `<digits>s|m|h`, at most 24 h) — before dispatch:
 *     refused when the principal's calls of the tool within the window (a history count,
 *     principal scope) have reached n. It reads a snapshot taken before the call is admitted, so
 *     concurrent calls can each see the same count (budgets, admitted atomically, are exact).
 * Where shaping applies: the result's `structuredContent`, and every `text` content block (and
 * embedded `resource` with `text`) whose text is JSON. Free text cannot carry a shaping
 * obligation, so under any of redact/mask/filter a result is held back — replaced by a refusal
 * that names the obligation — when it holds a text that is not JSON (or is a JSON string), an
 * embedded binary resource, a content block of an unknown type, no `content` list at all (a task,
 * or another shape), or when the upstream answered with a JSON-RPC error (its message is free
 * text). Blank text, images, audio and resource links carry no fields and pass. A filter also
 * holds back any carrier that is not row-shaped. A JSON text that nothing changed keeps its
 * exact bytes; a changed one is serialised again (two-space indented when it was multi-line).
 * Must never: mutate its input, throw on any result (an unexpected failure holds the result
 * back), apply an obligation it does not know or cannot parse (the result is held back), or let
 * a result past that it could not shape as asked.
 */
import { isObject, type Json, type JsonObject, type JsonRpcResponse } from "../wire/jsonrpc.ts";
import { historyKey, type HistoryQuery, type HistorySnapshot, type Mode, type Obligated, type Obligation, type Refusal } from "./steps.ts";

/** The refusal check every obligation problem names. */
export const OBLIGATION_CHECK = "obligation";
/** The `_meta` key under which shaping obligations travel to the upstream. */
export const PUSH_DOWN_META = "portcullis/obligations";
export const REDACTED = "[REDACTED]";
export const MASKED = "****";
/** Longest rate-limit window: the longest history window HistoryDO keeps rows for (HISTORY_WINDOW_MAX_MS). */
export const RATE_LIMIT_WINDOW_MAX_MS = 24 * 3_600_000;
/** The kinds this gateway knows. */
export const OBLIGATION_KINDS = ["audit", "redact", "mask", "filter", "rate_limit"] as const;
const MAX_SPEC_CHARS = 1024;

type Segment = { t: "child"; name: string } | { t: "index"; i: number } | { t: "any" } | { t: "descend"; name: string };

/** An obligation as its handler runs it. */
type Compiled =
  | { kind: "audit"; spec: string }
  | { kind: "redact"; spec: string; path: Segment[] }
  | { kind: "mask"; spec: string; field: string }
  | { kind: "filter"; spec: string; field: string; value: string }
  | { kind: "rate_limit"; spec: string; n: number; windowMs: number; window: string };
type Shaper = Extract<Compiled, { kind: "redact" | "mask" | "filter" }>;
type Shape<K extends Compiled["kind"]> = Omit<Extract<Compiled, { kind: K }>, "kind" | "spec">;

/** Parses a JSONPath of the subset above into segments, or says why not. */
export function parseJsonPath(p: string): Segment[] | string {
  if (!p.startsWith("$")) return "a path starts with $";
  const segs: Segment[] = [];
  let i = 1;
  while (i < p.length) {
    const rest = p.slice(i);
    if (rest.startsWith("..")) {
      const m = /^[^.[\]]+/.exec(rest.slice(2));
      if (!m || m[0] === "*") return `".." must be followed by a property name (at ${i})`;
      segs.push({ t: "descend", name: m[0] });
      i += 2 + m[0].length;
    } else if (rest.startsWith(".")) {
      const m = /^[^.[\]]+/.exec(rest.slice(1));
      if (!m) return `"." must be followed by a property name or * (at ${i})`;
      segs.push(m[0] === "*" ? { t: "any" } : { t: "child", name: m[0] });
      i += 1 + m[0].length;
    } else if (rest.startsWith("[")) {
      const m = /^\[(?:(\*)|(\d+)|'([^']*)'|"([^"]*)")\]/.exec(rest);
      if (!m) return `a bracket holds *, an index or a quoted name (at ${i})`;
      if (m[1]) segs.push({ t: "any" });
      else if (m[2] !== undefined) {
        const n = Number(m[2]);
        if (!Number.isSafeInteger(n)) return `index ${m[2]} is too large`;
        segs.push({ t: "index", i: n });
      } else segs.push({ t: "child", name: (m[3] ?? m[4])! });
      i += m[0].length;
    } else return `unexpected ${JSON.stringify(p[i])} at ${i} (the subset: .name, ['name'], [n], [*], .*, ..name)`;
  }
  return segs.length === 0 ? "the path must select something below $" : segs;
}

/** Each known kind's parser of its argument: the compiled shape, or what is wrong with the argument. */
const HANDLERS: { [K in Compiled["kind"]]: (arg: string | undefined) => Shape<K> | string } = {
  audit: (arg) => (arg === "full" ? {} : 'the audit level must be "full" (audit:full)'),
  redact: (arg) => {
    if (!arg) return "a redaction needs a JSONPath (redact:$.a.b)";
    const path = parseJsonPath(arg);
    return typeof path === "string" ? path : { path };
  },
  mask: (arg) => (arg ? { field: arg } : "a mask needs a field name (mask:email)"),
  filter: (arg) => {
    const eq = arg?.indexOf("=") ?? -1;
    if (!arg || eq <= 0) return "a row filter is filter:<field>=<value>";
    return { field: arg.slice(0, eq), value: arg.slice(eq + 1) };
  },
  rate_limit: (arg) => {
    const m = /^(\d{1,7})\/(\d{1,9})(s|m|h)$/.exec(arg ?? "");
    if (!m) return "a rate limit is rate_limit:<n>/<window>, the window in s, m or h (rate_limit:5/1m)";
    const n = Number(m[1]);
    const windowMs = Number(m[2]) * (m[3] === "s" ? 1000 : m[3] === "m" ? 60_000 : 3_600_000);
    if (n < 1) return "a rate limit allows at least one call";
    if (windowMs < 1000 || windowMs > RATE_LIMIT_WINDOW_MAX_MS) return "a rate-limit window is 1 s to 24 h";
    return { n, windowMs, window: `${m[2]}${m[3]}` };
  },
};
const isKnown = (kind: string): kind is Compiled["kind"] => Object.hasOwn(HANDLERS, kind);

const KIND = /^[a-z][a-z0-9_.-]{0,63}$/;

/**
 * Parses one spec as a policy writes it. A well-formed spec of an unknown kind parses (the
 * policy loads; the call is refused before dispatch in enforce); a malformed spec, or a known
 * kind with an argument it cannot use, is an error text.
 */
export function parseObligation(spec: string): Obligation | string {
  if (typeof spec !== "string" || spec === "") return "an obligation is a non-empty string";
  if (spec.length > MAX_SPEC_CHARS) return `an obligation is at most ${MAX_SPEC_CHARS} characters`;
  const colon = spec.indexOf(":");
  const kind = colon < 0 ? spec : spec.slice(0, colon);
  const arg = colon < 0 ? undefined : spec.slice(colon + 1);
  if (!KIND.test(kind)) return `"${spec}": an obligation is <kind> or <kind>:<argument>, its kind lowercase letters, digits, "_", "." and "-"`;
  if (isKnown(kind)) {
    const c = HANDLERS[kind](arg);
    if (typeof c === "string") return `"${spec}": ${c}`;
  }
  return arg === undefined ? { kind, spec } : { kind, arg, spec };
}

const compiledCache = new Map<string, Compiled | string>();
const specOf = (o: Obligation): string => (typeof o?.spec === "string" ? o.spec : String(o?.kind));

/** The handler's form of `o`, or why this gateway cannot apply it (unknown kind, unusable argument). */
function compile(o: Obligation): Compiled | string {
  if (!o || typeof o.kind !== "string") return "is not an obligation";
  const key = `${o.kind}\u0000${o.arg ?? "\u0001"}\u0000${specOf(o)}`;
  const hit = compiledCache.get(key);
  if (hit !== undefined) return hit;
  let out: Compiled | string;
  if (!isKnown(o.kind)) out = `is of a kind this gateway does not know (it knows ${OBLIGATION_KINDS.join(", ")})`;
  else {
    const c = HANDLERS[o.kind](o.arg);
    out = typeof c === "string" ? `cannot be applied: ${c}` : ({ kind: o.kind, spec: specOf(o), ...c } as Compiled);
  }
  if (compiledCache.size > 4096) compiledCache.clear();
  compiledCache.set(key, out);
  return out;
}

// ---- before dispatch ----------------------------------------------------------------------

export interface DispatchFacts {
  exposedName: string;
  /** Answers to (at least) `obligationQueries(obligations, exposedName)`. */
  history: HistorySnapshot;
}

const rateQuery = (c: Extract<Compiled, { kind: "rate_limit" }>, exposedName: string): HistoryQuery => ({
  kind: "count",
  tool: exposedName,
  withinMs: c.windowMs,
  scope: "principal",
});

/** The history queries the obligations' rate limits need (one per distinct window). */
export function obligationQueries(obligations: Obligation[], exposedName: string): HistoryQuery[] {
  const out = new Map<string, HistoryQuery>();
  for (const o of obligations) {
    const c = compile(o);
    if (typeof c !== "string" && c.kind === "rate_limit") {
      const q = rateQuery(c, exposedName);
      out.set(historyKey(q), q);
    }
  }
  return [...out.values()];
}

/**
 * Every reason the obligations stop this call, whatever the mode: an obligation this gateway
 * cannot apply, a rate limit reached, a rate limit whose count the snapshot lacks (fail closed).
 * In observe and advise these are what enforce would have refused (recorded, not applied).
 */
export function obligationProblems(obligations: Obligation[], facts: DispatchFacts): Refusal[] {
  const out: Refusal[] = [];
  for (const o of obligations) {
    const c = compile(o);
    if (typeof c === "string") {
      out.push({ check: OBLIGATION_CHECK, reason: `the obligation "${specOf(o)}" ${c}; the call was not sent` });
      continue;
    }
    if (c.kind !== "rate_limit") continue;
    const n = facts.history?.answers?.[historyKey(rateQuery(c, facts.exposedName))];
    if (typeof n !== "number")
      out.push({
        check: OBLIGATION_CHECK,
        reason: `the rate limit "${c.spec}" could not be checked (history has no count for it); the call was refused to fail closed`,
      });
    else if (n >= c.n)
      out.push({
        check: OBLIGATION_CHECK,
        reason: `rate limit "${c.spec}" reached: ${n} call${n === 1 ? "" : "s"} of ${facts.exposedName} in the last ${c.window} (at most ${c.n})`,
      });
  }
  return out;
}

/** The refusal that stops this call before dispatch: the first problem, in enforce; null in observe and advise (report `obligationProblems` there). */
export function checkBeforeDispatch(obligations: Obligation[], mode: Mode, facts: DispatchFacts): Refusal | null {
  const problems = obligationProblems(obligations, facts);
  return mode === "enforce" ? (problems[0] ?? null) : null;
}

/** Whether the decision record must keep the call's arguments in full (`audit:full`). */
export function fullAudit(obligations: Obligation[]): boolean {
  return obligations.some((o) => {
    const c = compile(o);
    return typeof c !== "string" && c.kind === "audit";
  });
}

/** The shaping obligations (redact, mask, filter) as the upstream request's `_meta` entry; undefined when there are none. */
export function pushDownMeta(obligations: Obligation[]): JsonObject | undefined {
  const specs: string[] = [];
  for (const o of obligations) {
    const c = compile(o);
    if (typeof c !== "string" && (c.kind === "redact" || c.kind === "mask" || c.kind === "filter") && !specs.includes(c.spec)) specs.push(c.spec);
  }
  return specs.length > 0 ? { [PUSH_DOWN_META]: specs } : undefined;
}

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
