/**
 * The edit `portcullis add` makes to a portcullis.yaml, through the yaml Document API: FILE read
 * as a document (a problem when it cannot be edited), the one upstream already there kept under
 * its own tool names (`namespace: false` written on it), and the new upstream appended to
 * `upstreams:` — spliced in as text so every other byte stays, or through the Document (comments
 * and order kept) when a splice would not read back as the same config. Must never: change
 * anything in FILE but those two things, or write a file (cli/add.ts writes the result).
 */
import { readFileSync } from "node:fs";
import { isDeepStrictEqual } from "node:util";
import { type Document, isMap, isScalar, isSeq, parse, parseDocument, stringify } from "yaml";
import { codeOf, isObject, type JsonObject } from "./gateway-http.ts";

/** A refusal found before anything was written: every problem, printed by the command. */
export class Problems extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`${problems.length} problem${problems.length === 1 ? "" : "s"}`);
    this.problems = problems;
  }
}

/** FILE as `add` edits it: its text, its YAML document, its upstream entries and their names. */
export interface ConfigDoc {
  text: string;
  doc: Document;
  entries: JsonObject[];
  existing: string[];
}

/** FILE's YAML document and its upstreams sequence (created when absent); a Problems naming why it cannot be edited. */
export function readConfigDoc(file: string): ConfigDoc {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    const missing = codeOf(e) === "ENOENT";
    throw new Problems([
      missing
        ? `${file} does not exist: give the portcullis.yaml to add to (npx portcullis import --client C creates one from a client's servers)`
        : `cannot read ${file} (${codeOf(e)})`,
    ]);
  }
  const doc = parseDocument(text, { uniqueKeys: true });
  if (doc.errors.length) throw new Problems([`${file}: YAML: ${String(doc.errors[0]?.message).split("\n")[0]} (fix it, then add again)`]);
  if (doc.contents !== null && !isMap(doc.contents))
    throw new Problems([`${file}: not a YAML mapping (a portcullis.yaml has upstreams: and its other settings at the top level)`]);
  const seq = doc.get("upstreams", true);
  if (seq !== undefined && seq !== null && !isSeq(seq)) throw new Problems([`${file}: upstreams: is not a list`]);
  const entries = isSeq(seq) ? ((seq.toJSON() ?? []) as unknown[]).filter(isObject) : [];
  return { text, doc, entries, existing: entries.map((u) => u.name).filter((n): n is string => typeof n === "string") };
}

/**
 * FILE's `text` with `namespace: false` written on its one upstream when that upstream has no
 * `namespace` of its own: it is served with its own names alone, and this keeps them beside the
 * upstream being added (which is prefixed NAME__). A line inserted after its `name:` line, in the
 * entry's indentation; through the yaml Document API when the entry is flow-style or the insert
 * would not read back as that one change. `text` itself when there is nothing to keep.
 */
export function keepingNames(text: string, doc: Document, entries: JsonObject[]): string {
  if (entries.length !== 1 || entries[0]?.namespace !== undefined) return text;
  const seq = doc.get("upstreams", true);
  const entry = isSeq(seq) ? seq.items.find((n) => isMap(n)) : undefined;
  if (!isMap(entry)) return text;
  const expected: unknown = parse(text, { uniqueKeys: false });
  const first = isObject(expected) && Array.isArray(expected.upstreams) ? expected.upstreams.find(isObject) : undefined;
  if (first) first.namespace = false;
  const pair = entry.flow ? undefined : entry.items.find((it) => isScalar(it.key) && it.key.value === "name");
  const keyRange = isScalar(pair?.key) ? pair.key.range : undefined;
  const valueRange =
    pair?.value && typeof pair.value === "object" && "range" in pair.value ? (pair.value.range as [number, number, number] | undefined) : undefined;
  if (keyRange && valueRange) {
    const keyAt = keyRange[0];
    const lineStart = text.lastIndexOf("\n", keyAt - 1) + 1;
    const nl = text.indexOf("\n", valueRange[1]);
    const at = nl < 0 ? text.length : nl + 1;
    const line = `${" ".repeat(keyAt - lineStart)}namespace: false # keeps its own tool names beside other upstreams (portcullis add)\n`;
    const inserted = `${text.slice(0, at)}${nl < 0 ? "\n" : ""}${line}${text.slice(at)}`;
    try {
      if (isDeepStrictEqual(parse(inserted, { uniqueKeys: false }), expected)) return inserted;
    } catch {
      /* the Document's text, then */
    }
  }
  entry.set("namespace", false);
  return doc.toString({ lineWidth: 0 });
}

/**
 * FILE's `text` with `upstream` appended to its `upstreams:`. Spliced in as text after the last
 * entry, in the list's own indentation, so every other byte stays as it was; when the list is
 * absent, empty or flow-style (or the splice would not read back as the same config), through
 * the yaml Document API instead: comments and order are kept, spacing may be normalised.
 */
export function withUpstream(text: string, doc: Document, upstream: JsonObject): string {
  const found = doc.get("upstreams", true);
  const last = isSeq(found) && !found.flow ? found.items.at(-1) : undefined;
  const lastRange = last && typeof last === "object" && "range" in last ? (last.range as [number, number, number] | undefined) : undefined;
  let spliced: string | undefined;
  if (lastRange) {
    const lineStart = text.lastIndexOf("\n", lastRange[0] - 1) + 1;
    const dash = /^([ \t]*)-([ \t]+)$/.exec(text.slice(lineStart, lastRange[0]));
    if (dash) {
      const [, indent = "", gap = ""] = dash;
      let at = lastRange[1];
      if (text[at - 1] !== "\n") {
        const nl = text.indexOf("\n", at);
        at = nl < 0 ? text.length : nl + 1;
      }
      const pad = `${indent}${" ".repeat(1 + gap.length)}`;
      const lines = stringify(upstream, { lineWidth: 0 }).trimEnd().split("\n");
      const item = lines.map((l, i) => (i === 0 ? `${indent}-${gap}${l}` : `${pad}${l}`)).join("\n");
      spliced = `${text.slice(0, at)}${at > 0 && text[at - 1] !== "\n" ? "\n" : ""}${item}\n${text.slice(at)}`;
    }
  }
  let seq = found;
  if (!isSeq(seq)) {
    seq = doc.createNode([]);
    doc.set("upstreams", seq);
  }
  if (isSeq(seq)) {
    if (seq.flow && seq.items.length === 0) seq.flow = false;
    seq.add(doc.createNode(upstream));
  }
  const viaDoc = doc.toString({ lineWidth: 0 });
  if (spliced !== undefined) {
    try {
      if (isDeepStrictEqual(parse(spliced, { uniqueKeys: false }), parse(viaDoc, { uniqueKeys: false }))) return spliced;
    } catch {
      /* the Document's text, then */
    }
  }
  return viaDoc;
}
