/**
 * The CEL side of the policy engine: one eval-free environment (`@marcbachmann/cel-js`, a
 * tree-walking interpreter — its source uses neither `eval` nor `new Function`, so it runs where
 * production Workers forbid code generation), compiling a rule's `when` once (parse + type check
 * against the declared scope), and running it against one call's scope. Owns what the scope
 * holds and how JSON values appear in it. Must never: let an expression see anything outside the
 * documented scope (no annotations — they are untrusted hints — no clock but `now`, no I/O), or
 * let a CEL failure escape as anything but a `{ error }` the caller turns into a fail-closed rule.
 *
 * Scope of a condition:
 * - `args` — the call's arguments (a map; `{}` when the call has none). JSON numbers are CEL
 *   doubles, as in CEL's own JSON mapping: they compare freely with ints (`args.amount > 1000`)
 *   but arithmetic needs double literals (`args.amount * 2.0`). A missing key is an error (the
 *   rule then fails closed): guard optional arguments with `has(args.x) && …`.
 * - `principal` — `{sub, team, roles, tools}` (`tools` is null for the unauthenticated actor).
 * - `tool` — `{name, upstream, exposed}`: the upstream's own name, the upstream, the exposed name.
 * - `classification` — `{effect, blast_radius, reversibility, externality, source, verb?}`.
 * - `run` — `{id}` (null when the call belongs to no run).
 * - `now` — a `google.protobuf.Timestamp` of the evaluation time (`now.getHours()` is UTC;
 *   `now.getHours("Europe/Paris")` takes a zone; `now > timestamp("2026-01-01T00:00:00Z")`).
 * - `history` — the rule's own history answers: `history.count` (int), `history.total` (double),
 *   `history.succeeded` (bool); only those the rule declares. They count earlier calls only,
 *   never the one being decided: "at most 2 per minute" is `history.count >= 2` → deny.
 */
import { type ASTNode, Environment, type ParseResult } from "@marcbachmann/cel-js";

let env: Environment | undefined;
/** The environment is built once per isolate (building one is the expensive part). */
function celEnv(): Environment {
  if (!env) {
    env = new Environment({
      homogeneousAggregateLiterals: false,
      limits: { maxAstNodes: 2000, maxDepth: 64, maxListElements: 1000, maxMapEntries: 1000, maxCallArguments: 32 },
    })
      .registerVariable("args", "map")
      .registerVariable("principal", "map")
      .registerVariable("tool", "map")
      .registerVariable("classification", "map")
      .registerVariable("run", "map")
      .registerVariable("now", "google.protobuf.Timestamp")
      .registerVariable("history", "map");
  }
  return env;
}

export interface CompiledCondition {
  source: string;
  run: ParseResult;
  /** Whether the expression reads `history` at all. */
  readsHistory: boolean;
}

const message = (e: unknown): string => {
  if (e && typeof e === "object" && "summary" in e && typeof e.summary === "string") return e.summary;
  return e instanceof Error ? (e.message.split("\n")[0] ?? e.message) : String(e);
};

function mentions(node: unknown, name: string, depth = 0): boolean {
  if (depth > 200 || node === null || typeof node !== "object") return false;
  if (Array.isArray(node)) return node.some((n) => mentions(n, name, depth + 1));
  const n = node as { op?: unknown; args?: unknown };
  if (typeof n.op !== "string") return false;
  if (n.op === "id" && n.args === name) return true;
  return mentions(n.args, name, depth + 1);
}

/** Parses and type-checks a condition once; a problem is a sentence naming what is wrong. */
export function compileCondition(source: string): CompiledCondition | { problem: string } {
  let run: ParseResult;
  try {
    run = celEnv().parse(source);
  } catch (e) {
    return { problem: `CEL does not parse: ${message(e)}` };
  }
  let checked: ReturnType<ParseResult["check"]>;
  try {
    checked = run.check();
  } catch (e) {
    return { problem: `CEL does not type-check: ${message(e)}` };
  }
  if (!checked.valid) return { problem: `CEL does not type-check: ${message(checked.error)}` };
  if (checked.type !== "bool" && checked.type !== "dyn") return { problem: `a condition must be a bool, this one is ${checked.type}` };
  return { source, run, readsHistory: mentions(run.ast as ASTNode, "history") };
}

export type CelScope = Record<string, unknown>;

/** Runs a compiled condition: true, false, or the error that makes its rule fail closed. */
export function runCondition(c: CompiledCondition, scope: CelScope): boolean | { error: string } {
  let v: unknown;
  try {
    v = c.run(scope);
  } catch (e) {
    return { error: message(e) };
  }
  if (typeof v === "boolean") return v;
  return { error: `the condition returned ${v === null ? "null" : typeof v}, not a bool` };
}
