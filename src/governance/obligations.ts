/**
 * Obligations: the registry of handlers for the obligations a policy decision carries (step 12
 * of the governed path, and the pre-dispatch checks some of them need). Owns parsing and
 * validating specs (`parseObligation`), the pre-dispatch check (`checkBeforeDispatch`: an
 * obligation this gateway cannot apply refuses the call in enforce; a rate limit that is reached
 * refuses it), the history queries rate limits need (`obligationQueries`), and the `_meta` that
 * lets an upstream push the shaping down (`pushDownMeta`). Shaping a result
 * (`applyResultObligations`: filters, then redactions, then masks; a result that cannot carry
 * them is held back) is obligations-shape.ts, by the rules below.
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
import type { JsonObject } from "../wire/jsonrpc.ts";
import { historyKey, type HistoryQuery, type HistorySnapshot, type Mode, type Obligation, type Refusal } from "./steps.ts";
import { Memo } from "../wire/memo.ts";

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

export type Segment = { t: "child"; name: string } | { t: "index"; i: number } | { t: "any" } | { t: "descend"; name: string };

/** An obligation as its handler runs it. */
export type Compiled =
  | { kind: "audit"; spec: string }
  | { kind: "redact"; spec: string; path: Segment[] }
  | { kind: "mask"; spec: string; field: string }
  | { kind: "filter"; spec: string; field: string; value: string }
  | { kind: "rate_limit"; spec: string; n: number; windowMs: number; window: string };
export type Shaper = Extract<Compiled, { kind: "redact" | "mask" | "filter" }>;
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

const compiledCache = new Memo<string, Compiled | string>({ max: 4096 });
export const specOf = (o: Obligation): string => (typeof o?.spec === "string" ? o.spec : String(o?.kind));

/** The handler's form of `o`, or why this gateway cannot apply it (unknown kind, unusable argument). */
export function compile(o: Obligation): Compiled | string {
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
  compiledCache.set(key, out);
  return out;
}

// ---- before dispatch ----------------------------------------------------------------------

/** The tool a call is to, by its stable identity: the upstream's name and its own name for the tool. */
export interface ToolIdentity {
  upstream: string;
  tool: string;
}

export interface DispatchFacts {
  /** The name the call was made by (what a refusal names). */
  exposedName: string;
  /** The call's tool: a rate limit counts the caller's calls to it by this identity, whatever name it was exposed under. */
  identity: ToolIdentity;
  /** Answers to (at least) `obligationQueries(obligations, identity)`. */
  history: HistorySnapshot;
}

const rateQuery = (c: Extract<Compiled, { kind: "rate_limit" }>, id: ToolIdentity): HistoryQuery => ({
  kind: "count",
  tool: id.tool,
  upstream: id.upstream,
  withinMs: c.windowMs,
  scope: "principal",
});

/** The history queries the obligations' rate limits need (one per distinct window). */
export function obligationQueries(obligations: Obligation[], identity: ToolIdentity): HistoryQuery[] {
  const out = new Map<string, HistoryQuery>();
  for (const o of obligations) {
    const c = compile(o);
    if (typeof c !== "string" && c.kind === "rate_limit") {
      const q = rateQuery(c, identity);
      out.set(historyKey(q), q);
    }
  }
  return [...out.values()];
}

/** An obligation that stops this call, and the refusal that says why. */
export interface ObligationFailure {
  /** The obligation itself (the decision's own object): what observe and advise leave unapplied. */
  obligation: Obligation;
  refusal: Refusal;
}

/**
 * Every obligation that stops this call, whatever the mode, with its reason: one this gateway
 * cannot apply, a rate limit reached, a rate limit whose count the snapshot lacks (fail closed).
 * In observe and advise these are what enforce would have refused (recorded, not applied).
 */
export function obligationFailures(obligations: Obligation[], facts: DispatchFacts): ObligationFailure[] {
  const out: ObligationFailure[] = [];
  const fail = (obligation: Obligation, reason: string) => out.push({ obligation, refusal: { check: OBLIGATION_CHECK, reason } });
  for (const o of obligations) {
    const c = compile(o);
    if (typeof c === "string") {
      fail(o, `the obligation "${specOf(o)}" ${c}; the call was not sent`);
      continue;
    }
    if (c.kind !== "rate_limit") continue;
    const n = facts.history?.answers?.[historyKey(rateQuery(c, facts.identity))];
    if (typeof n !== "number") fail(o, `the rate limit "${c.spec}" could not be checked (history has no count for it); the call was refused to fail closed`);
    else if (n >= c.n)
      fail(o, `rate limit "${c.spec}" reached: ${n} call${n === 1 ? "" : "s"} of ${facts.exposedName} in the last ${c.window} (at most ${c.n})`);
  }
  return out;
}

/** Every reason the obligations stop this call (`obligationFailures`' refusals, in order). */
export function obligationProblems(obligations: Obligation[], facts: DispatchFacts): Refusal[] {
  return obligationFailures(obligations, facts).map((f) => f.refusal);
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
