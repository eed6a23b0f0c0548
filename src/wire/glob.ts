/**
 * Glob matching over names: `*` matches any run of characters, `?` one character, everything
 * else literally; and over a tool's names (`toolGlobMatch`: its exposed name, or, when an upstream
 * glob is given, its stable identity). Owns the compiled-pattern cache. Must never: treat a name
 * as a pattern.
 */
import { Memo } from "./memo.ts";

const compiled = new Memo<string, RegExp>({ max: 4096 });

/** Whether `name` matches `glob`. Patterns are compiled once per isolate. */
export function globMatch(glob: string, name: string): boolean {
  let re = compiled.get(glob);
  if (!re) {
    re = new RegExp(
      `^${glob
        .replace(/[.+^${}()|[\]\\]/g, "\\$&")
        .replace(/\*/g, ".*")
        .replace(/\?/g, ".")}$`,
    );
    compiled.set(glob, re);
  }
  return re.test(name);
}

/**
 * Whether a tool glob (a history query's, a rule's) names a call's tool: with `upstream`, the
 * upstream's name must match it and `tool` matches the upstream's own tool name or the exposed
 * one (the stable identity, which no namespacing change moves); without, `tool` matches the
 * exposed name. A call recorded without its identity matches only the exposed form.
 */
export function toolGlobMatch(q: { tool: string; upstream?: string }, call: { exposed: string; upstream?: string | null; tool?: string | null }): boolean {
  if (q.upstream === undefined) return globMatch(q.tool, call.exposed);
  if (typeof call.upstream !== "string" || !globMatch(q.upstream, call.upstream)) return false;
  return globMatch(q.tool, call.exposed) || (typeof call.tool === "string" && globMatch(q.tool, call.tool));
}
