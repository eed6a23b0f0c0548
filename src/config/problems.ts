/**
 * How config problems read: a YAML syntax error as `<source> line L, column C: <reason>` followed
 * by the offending line and its neighbours with a caret under the column; an unknown key with the
 * nearest known key of its object (bounded Damerau–Levenshtein distance) as "did you mean"; and the
 * zod error map that words unknown keys so for every config, mapping and policy schema. Owns that
 * wording and the edit-distance helper. Must never: import more than inline-secret.ts (bin files
 * and the Worker both load it), quote more of a file than the three lines around an error, or
 * quote a value there that looks like a credential (it is shown as …).
 */
import { looksLikeCredential } from "./inline-secret.ts";

/** Damerau–Levenshtein distance (optimal string alignment) of `a` and `b`, or `max + 1` once it exceeds `max`. */
export function editDistance(a: string, b: string, max = 3): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row: number[] = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      const up = rows[i - 1]!;
      let d = Math.min(up[j]! + 1, row[j - 1]! + 1, up[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      row.push(d);
      best = Math.min(best, d);
    }
    if (i > 0 && best > max) return max + 1;
    rows.push(row);
  }
  const d = rows[a.length]![b.length]!;
  return d > max ? max + 1 : d;
}

/** The known key nearest to `key` (case folded), when it is close enough to be a typo: at most 1 edit for short keys, 2 otherwise. */
export function didYouMean(key: string, known: readonly string[]): string | undefined {
  const max = key.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestD = max + 1;
  for (const k of known) {
    if (k === key) continue;
    const d = editDistance(key.toLowerCase(), k.toLowerCase(), max);
    if (d < bestD) {
      best = k;
      bestD = d;
    }
  }
  return best;
}

/** `unknown key "namspace" — did you mean "namespace"?` for each key (joined with "; "). */
export function unknownKeysMessage(keys: readonly string[], known: readonly string[]): string {
  return keys
    .map((k) => {
      const near = didYouMean(k, known);
      return `unknown key ${JSON.stringify(k)}${near ? ` — did you mean ${JSON.stringify(near)}?` : ""}`;
    })
    .join("; ");
}

/**
 * The zod error map config schemas are parsed with (`schema.safeParse(raw, parseOptions)`): an
 * unrecognized key names the nearest key its object knows; every other issue keeps zod's message.
 */
export const parseOptions = {
  error(issue: { code?: string; keys?: unknown; inst?: unknown }): string | undefined {
    if (issue.code !== "unrecognized_keys" || !Array.isArray(issue.keys)) return undefined;
    const shape = (issue.inst as { _zod?: { def?: { shape?: Record<string, unknown> } } } | undefined)?._zod?.def?.shape;
    return unknownKeysMessage(issue.keys.map(String), shape ? Object.keys(shape) : []);
  },
};

/** The yaml library's error, as far as this reads it. */
interface YamlErrorLike {
  message?: unknown;
  linePos?: { line: number; col: number }[];
}

/** A `key: value` line with the value hidden when it looks like a credential (the inline-secret rule). */
function redacted(line: string): string {
  const m = /^(\s*(?:-\s+)?["']?([A-Za-z0-9_.-]+)["']?\s*:\s*)(.+)$/.exec(line);
  if (!m) return looksLikeCredential("", line.replace(/\$\{[^}]*\}/g, "")) ? "    …" : line;
  const key = /^(authorization|proxy-authorization|cookie)$/i.test(m[2]!) ? m[2]! : "";
  return looksLikeCredential(key, m[3]!.replace(/\$\{[^}]*\}/g, "").replace(/^["']|["']$/g, "")) ? `${m[1]}…` : line;
}

/**
 * A YAML syntax error in `text` (from file or config `source`) as `<source> line L, column C:
 * <reason>` and then lines L-1..L+1, numbered, with a caret under column C; the lines are indented
 * four spaces so they read under a `  - ` list item. Without a position: `<source>: <reason>`.
 */
export function yamlProblem(e: unknown, text: string, source: string): string {
  const err = (e ?? {}) as YamlErrorLike;
  const first = String(err.message ?? e).split("\n")[0] ?? "";
  const pos = err.linePos?.[0];
  const reason = first.replace(/ at line \d+, column \d+:?\s*$/, "").trim() || "not valid YAML";
  if (!pos || !Number.isInteger(pos.line) || pos.line < 1) return `${source}: ${reason}`;
  const lines = text.split(/\r?\n/);
  // The empty "line" after a final newline is no neighbour (though an error may point at it).
  if (lines.length > 1 && lines.at(-1) === "") lines.pop();
  const from = Math.max(1, pos.line - 1);
  const to = Math.min(Math.max(lines.length, pos.line), pos.line + 1);
  const width = String(to).length;
  const frame: string[] = [];
  for (let n = from; n <= to; n++) {
    // A long line is cut: the frame shows where, not the whole file.
    const line = redacted((lines[n - 1] ?? "").slice(0, 200));
    frame.push(`    ${String(n).padStart(width)} | ${line}`);
    if (n === pos.line) frame.push(`    ${" ".repeat(width)} | ${" ".repeat(Math.max(0, Math.min(pos.col, 200) - 1))}^`);
  }
  return `${source} line ${pos.line}, column ${pos.col}: ${reason}\n${frame.join("\n")}`;
}
