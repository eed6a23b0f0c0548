/**
 * JSONC as the MCP clients write their config files (comments and trailing commas allowed, as VS
 * Code and Cursor allow them): a text parsed into values that know where they sit, so a rewrite
 * can replace one value, add a member or drop some members of an object (the servers a client
 * moves behind the gateway) and leave every other byte as it was. Owns that scanner and the edits
 * made with it. Must never: change a byte outside the value an edit names, or touch a member an
 * edit keeps (its key, value, and the comments before it stay byte for byte).
 */

/** A text that is not JSONC (or not a JSON object at its root): the reason, with the line. */
export class JsoncError extends Error {}

/** One value of a JSONC text and its span; an object's members and an array's items (empty for a scalar). */
export interface JsonNode {
  kind: "object" | "array" | "scalar";
  start: number;
  end: number;
  json: unknown;
  members: { key: string; keyStart: number; value: JsonNode }[];
  items: JsonNode[];
}

/** A JSONC text's values with their spans. */
export function scanJsonc(text: string): JsonNode {
  let i = 0;
  const fail = (why: string): never => {
    const line = text.slice(0, i).split("\n").length;
    throw new JsoncError(`not JSON (line ${line}): ${why}`);
  };
  const skip = () => {
    for (;;) {
      while (i < text.length && /\s/.test(text[i] ?? "")) i++;
      if (text.startsWith("//", i)) {
        const nl = text.indexOf("\n", i);
        i = nl < 0 ? text.length : nl + 1;
      } else if (text.startsWith("/*", i)) {
        const end = text.indexOf("*/", i + 2);
        if (end < 0) fail("unterminated comment");
        i = end + 2;
      } else return;
    }
  };
  const string = (): string => {
    const start = i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    if (i >= text.length) fail("unterminated string");
    i++;
    return JSON.parse(text.slice(start, i));
  };
  const value = (): JsonNode => {
    skip();
    const start = i;
    const c = text[i];
    if (c === "{" || c === "[") {
      const close = c === "{" ? "}" : "]";
      const node: JsonNode = { kind: c === "{" ? "object" : "array", start, end: start, json: undefined, members: [], items: [] };
      i++;
      for (;;) {
        skip();
        if (text[i] === close) break;
        if (c === "{") {
          if (text[i] !== '"') fail("expected a key");
          const keyStart = i;
          const key = string();
          skip();
          if (text[i] !== ":") fail(`expected : after "${key}"`);
          i++;
          node.members.push({ key, keyStart, value: value() });
        } else node.items.push(value());
        skip();
        if (text[i] === ",") i++;
        else if (text[i] !== close) fail(`expected , or ${close}`);
      }
      i++;
      node.end = i;
      node.json = c === "{" ? Object.fromEntries(node.members.map((m) => [m.key, m.value.json])) : node.items.map((v) => v.json);
      return node;
    }
    if (c === '"') {
      const json = string();
      return { kind: "scalar", start, json, end: i, members: [], items: [] };
    }
    const m = /^(?:true|false|null|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/.exec(text.slice(i, i + 64));
    if (!m) return fail("unexpected character");
    i += m[0].length;
    return { kind: "scalar", start, end: i, json: JSON.parse(m[0]), members: [], items: [] };
  };
  const root = value();
  skip();
  if (i < text.length) fail("text after the value");
  if (root.kind !== "object") throw new JsoncError("not a JSON object");
  return root;
}

export const member = (node: JsonNode | undefined, key: string) => (node?.kind === "object" ? node.members.find((m) => m.key === key) : undefined);

/** The whitespace that starts the line `pos` is on. */
const lineIndent = (text: string, pos: number) => /^[ \t]*/.exec(text.slice(text.lastIndexOf("\n", pos - 1) + 1))?.[0] ?? "";

/** The file's indentation unit: that of the root object's first member ("" for a one-line file). */
export function indentUnit(text: string, root: JsonNode): string {
  const first = root.members[0];
  if (!first || !text.slice(root.start, first.keyStart).includes("\n")) return "";
  return lineIndent(text, first.keyStart) || "  ";
}

/** `value` as JSON in the file's style, its lines after the first indented by `indent`. */
const jsonAt = (value: unknown, unit: string, indent: string) =>
  unit ? JSON.stringify(value, null, unit).replaceAll("\n", `\n${indent}`) : JSON.stringify(value);

/** One replacement of the text between `start` and `end`. */
export interface Edit {
  start: number;
  end: number;
  text: string;
}

/** The edit that sets `key` of the object `node` to `value` (a new member goes last; the comment after the last one stays with it). */
export function setMember(text: string, node: JsonNode, key: string, value: unknown, unit: string): Edit {
  const m = member(node, key);
  if (m) return { start: m.value.start, end: m.value.end, text: jsonAt(value, unit, lineIndent(text, m.keyStart)) };
  const last = node.members.at(-1);
  if (last) {
    // After the last member, its comma (one is added when it has none) and a comment on the rest of its line.
    const ind = unit ? lineIndent(text, last.keyStart) : "";
    const comma = commaAfter(text, last.value.end, node.end - 1);
    const from = comma < 0 ? last.value.end : comma + 1;
    const eol = restOfLine(text, from);
    return {
      start: from,
      end: eol,
      text: `${comma < 0 ? "," : ""}${text.slice(from, eol)}${unit ? `\n${ind}` : ""}${JSON.stringify(key)}:${unit ? " " : ""}${jsonAt(value, unit, ind)}`,
    };
  }
  const outer = lineIndent(text, node.start);
  return { start: node.start, end: node.end, text: jsonAt({ [key]: value }, unit, outer) };
}

export const applyEdits = (text: string, edits: Edit[]): string =>
  [...edits].sort((a, b) => b.start - a.start).reduce((t, e) => t.slice(0, e.start) + e.text + t.slice(e.end), text);

/** The end of a line comment or one-line block comment (and the blanks before it) starting at `pos`, on that line; else `pos`. */
function restOfLine(text: string, pos: number): number {
  let i = pos;
  while (text[i] === " " || text[i] === "\t") i++;
  if (text.startsWith("//", i)) {
    const nl = text.indexOf("\n", i);
    return nl < 0 ? text.length : nl;
  }
  if (text.startsWith("/*", i)) {
    const end = text.indexOf("*/", i + 2);
    const nl = text.indexOf("\n", i);
    if (end >= 0 && (nl < 0 || end < nl)) return restOfLine(text, end + 2);
  }
  return i === pos || text[i] === "\n" || text[i] === "\r" || i >= text.length ? i : pos;
}

/** The position of the comma after `pos` (past blanks and comments), or -1. */
function commaAfter(text: string, pos: number, close: number): number {
  let i = pos;
  while (i < close) {
    if (/\s/.test(text[i] ?? "")) i++;
    else if (text.startsWith("//", i)) {
      const nl = text.indexOf("\n", i);
      i = nl < 0 ? close : nl + 1;
    } else if (text.startsWith("/*", i)) {
      const end = text.indexOf("*/", i + 2);
      if (end < 0) return -1;
      i = end + 2;
    } else return text[i] === "," ? i : -1;
  }
  return -1;
}

/**
 * The edit that drops the members of object `node` for which `drop(key)` is true, or null when none
 * is. Each kept member keeps its bytes: the blanks and comments before it, its key and value, its
 * comma and a comment on the rest of that line; the object's closing blanks stay. No member left: "{}".
 */
export function dropMembers(text: string, node: JsonNode, drop: (key: string) => boolean): Edit | null {
  if (node.kind !== "object" || !node.members.some((m) => drop(m.key))) return null;
  const close = node.end - 1;
  // Member k's chunk runs from the end of the one before (or the "{") to the end of its comma's line.
  const chunks: { start: number; comma: number; end: number }[] = [];
  let start = node.start + 1;
  for (const m of node.members) {
    const comma = commaAfter(text, m.value.end, close);
    const end = comma < 0 ? m.value.end : restOfLine(text, comma + 1);
    chunks.push({ start, comma, end });
    start = end;
  }
  const kept = node.members.flatMap((m, k) => (drop(m.key) ? [] : [chunks[k]]));
  if (kept.length === 0) return { start: node.start, end: node.end, text: "{}" };
  const lastChunk = chunks.at(-1);
  const trailingComma = lastChunk !== undefined && lastChunk.comma >= 0;
  const tail = text.slice(lastChunk?.end ?? node.start + 1, close);
  const out = kept.map((c, k) => {
    if (!c) return "";
    // The last kept member loses its comma unless the object ended in one (JSONC's trailing comma).
    if (k === kept.length - 1 && c.comma >= 0 && !trailingComma) return text.slice(c.start, c.comma) + text.slice(c.comma + 1, c.end);
    return text.slice(c.start, c.end);
  });
  return { start: node.start + 1, end: close, text: out.join("") + tail };
}
