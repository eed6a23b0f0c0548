/**
 * Compensations ([R]), the pure part: resolving a mapping's compensation against one call's
 * arguments and result (`$args.<path>`, `$result.<path>` — the result read from
 * `structuredContent`, or from a single text block holding JSON) into the record the call's
 * outcome keeps (planned, unavailable and why, or not needed), and checking a verification
 * read-back against its `expect`. Owns the CompensationRecord shape and its version. Must never:
 * do I/O, build a compensation from a result that broke its output schema, or keep anything of a
 * call but the values its compensation references.
 */
import { type CompensationSpec, REFERENCE, referencesIn } from "../config/mapping-schema.ts";
import { canonicalJson } from "../wire/canonical.ts";
import { isObject, type Json, type JsonObject } from "../wire/jsonrpc.ts";

/** Version of the `compensation` field of outcome bodies and of `rollback.step` bodies. */
export const COMPENSATION_VERSION = 1;

/** A compensation resolved for one call: what will be called, with which values, and how it is read back. */
export interface ResolvedCompensation {
  tool: string;
  arguments: JsonObject;
  approval: "none" | "required";
  verification: { tool: string; arguments: JsonObject; expect: JsonObject } | null;
}

/** The `compensation` field of an outcome body (present only when the tool's mapping declares one). */
export type CompensationRecord =
  | ({ v: number; status: "planned" } & ResolvedCompensation)
  | { v: number; status: "unavailable"; reason: string }
  | { v: number; status: "not_needed"; reason: string };

/** The call's result as references read it: `structuredContent`, else the JSON of its one text block. */
export function resultValue(result: JsonObject | undefined | null): Json | undefined {
  if (!result) return undefined;
  if (isObject(result.structuredContent)) return result.structuredContent;
  const content = Array.isArray(result.content) ? result.content : [];
  const textBlocks = content.filter((c) => isObject(c) && c.type === "text");
  if (textBlocks.length !== 1) return undefined;
  const text = (textBlocks[0] as JsonObject).text;
  if (typeof text !== "string") return undefined;
  try {
    const v = JSON.parse(text) as Json;
    return v !== null && typeof v === "object" ? v : undefined;
  } catch {
    return undefined;
  }
}

/** The value at `path` in `root` (own members only; array items by index); undefined when absent. */
export function valueAt(root: Json | undefined, path: readonly string[]): Json | undefined {
  let cur: Json | undefined = root;
  for (const seg of path) {
    if (Array.isArray(cur)) {
      if (!/^\d+$/.test(seg)) return undefined;
      cur = cur[Number(seg)];
    } else if (isObject(cur)) {
      cur = Object.hasOwn(cur, seg) ? cur[seg] : undefined;
    } else return undefined;
  }
  return cur;
}

type Resolved = { ok: true; value: Json } | { ok: false; reason: string };

/** `template` with every reference replaced by the value it names; the first reference that names nothing fails it. */
export function resolveTemplate(template: Json, args: JsonObject | undefined, result: Json | undefined): Resolved {
  if (typeof template === "string") {
    if (!REFERENCE.test(template)) return { ok: true, value: template };
    const [head, ...path] = template.slice(1).split(".");
    const root = head === "args" ? args : result;
    const value = valueAt(root, path);
    if (value === undefined) return { ok: false, reason: `${template} names nothing in the call's ${head === "args" ? "arguments" : "result"}` };
    return { ok: true, value };
  }
  if (Array.isArray(template)) {
    const out: Json[] = [];
    for (const x of template) {
      const r = resolveTemplate(x, args, result);
      if (!r.ok) return r;
      out.push(r.value);
    }
    return { ok: true, value: out };
  }
  if (isObject(template)) {
    const out: JsonObject = {};
    for (const [k, x] of Object.entries(template)) {
      const r = resolveTemplate(x, args, result);
      if (!r.ok) return r;
      out[k] = r.value;
    }
    return { ok: true, value: out };
  }
  return { ok: true, value: template };
}

function usesResult(spec: CompensationSpec): boolean {
  const all: Json[] = [spec.arguments, ...(spec.verification ? [spec.verification.arguments, spec.verification.expect] : [])];
  return all.some((v) => referencesIn(v).some((r) => r.source === "result"));
}

/**
 * The compensation one call's outcome record keeps: resolved against its arguments and result
 * (only the referenced values survive), or why it cannot be (an uncertain or failed call, a result
 * that broke its outputSchema, a reference that names nothing).
 */
export function compensationFor(
  spec: CompensationSpec,
  args: JsonObject | undefined,
  status: "succeeded" | "failed" | "uncertain",
  result: JsonObject | undefined | null,
  outputProblems: readonly string[],
): CompensationRecord {
  const v = COMPENSATION_VERSION;
  if (status === "failed") return { v, status: "not_needed", reason: "the call failed: it changed nothing to undo" };
  if (status === "uncertain")
    return {
      v,
      status: "unavailable",
      reason: "the call's outcome is uncertain (it may or may not have run upstream): it cannot be rolled back automatically",
    };
  const needsResult = usesResult(spec);
  if (needsResult && outputProblems.length > 0)
    return {
      v,
      status: "unavailable",
      reason: `the result broke the tool's outputSchema (${outputProblems.slice(0, 3).join("; ")}), so it is not used to build the compensation: this step cannot be rolled back automatically`,
    };
  const value = resultValue(result);
  if (needsResult && value === undefined)
    return {
      v,
      status: "unavailable",
      reason: "the result has no structured value (structuredContent or one text block of JSON) to build the compensation from",
    };
  const a = resolveTemplate(spec.arguments, args, value);
  if (!a.ok) return { v, status: "unavailable", reason: a.reason };
  let verification: ResolvedCompensation["verification"] = null;
  if (spec.verification) {
    const va = resolveTemplate(spec.verification.arguments, args, value);
    if (!va.ok) return { v, status: "unavailable", reason: `verification: ${va.reason}` };
    const ve = resolveTemplate(spec.verification.expect, args, value);
    if (!ve.ok) return { v, status: "unavailable", reason: `verification: ${ve.reason}` };
    verification = { tool: spec.verification.tool, arguments: va.value as JsonObject, expect: ve.value as JsonObject };
  }
  return { v, status: "planned", tool: spec.tool, arguments: a.value as JsonObject, approval: spec.approval, verification };
}

/** Whether a read-back's structured result has every expected value (RFC 8785 equality); which path differs if not. */
export function verificationMet(expect: JsonObject, result: Json | undefined): { ok: true } | { ok: false; reason: string } {
  for (const [path, want] of Object.entries(expect)) {
    const got = valueAt(result, path.split("."));
    if (got === undefined || canonicalJson(got) !== canonicalJson(want))
      return {
        ok: false,
        reason: `${path} is ${got === undefined ? "absent" : canonicalJson(got).slice(0, 200)}, expected ${canonicalJson(want).slice(0, 200)}`,
      };
  }
  return { ok: true };
}
