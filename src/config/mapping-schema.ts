/**
 * The mapping schema (zod): what one `mappings/<upstream>.yaml` file may say about each of the
 * upstream's tools — effect, verb, axes, permission, approval, magnitude, timeout, retry, pinned
 * schema hash, how the ledger keeps the arguments, and a compensation kept verbatim for rollback —
 * and the conversion of a parsed entry into the camelCase `ToolMapping` governance reads
 * (declared here only: src/governance/steps.ts imports it, and derives its Effect and Axes from
 * it). `parseMappings` reads the
 * config's inline `mappings: { <upstream>: <file contents> }` section and reports every problem at
 * once, each with its path. Owns: field names, types, bounds, defaults and the load-time rules
 * (retries only for read_only and idempotent tools; a compensation's shape, the syntax of its
 * `$args.<path>` / `$result.<path>` references, which may not reach arguments the ledger is told
 * to redact, and its tool and read-back tool being mapped in the same file). Must never: accept an unknown field (each is refused naming the nearest known one), do I/O (reading the files is the loader's job),
 * or resolve a compensation (that is src/governance/compensation.ts's; whether the upstream really
 * offers its tools is checked where its tools/list is known: rollback time and
 * `portcullis.validate_mapping`).
 */
import { z } from "zod";
import { isObject, type Json, type JsonObject } from "../wire/jsonrpc.ts";
import { durationMs } from "./duration.ts";
import { parseOptions } from "./problems.ts";

export type MappingEffect = "read_only" | "idempotent" | "reversible" | "irreversible";
export const EFFECTS = ["read_only", "idempotent", "reversible", "irreversible"] as const satisfies readonly MappingEffect[];

/** Effects a mapping may ask retries for: repeating them cannot do more than doing them once. */
const RETRYABLE: ReadonlySet<MappingEffect> = new Set(["read_only", "idempotent"]);

/** One tool's mapping as governance reads it (src/governance/steps.ts imports it). */
export interface ToolMapping {
  effect: MappingEffect;
  verb?: string;
  axes?: {
    reversibility?: "reversible" | "compensable" | "irreversible";
    blastRadius?: "single" | "scoped" | "systemic";
    externality?: "internal" | "external";
  };
  permission?: string;
  approval: "none" | "required";
  /** The argument (dotted path) whose numeric value is the call's magnitude. */
  magnitude?: { fromArg: string };
  timeoutMs?: number;
  retry?: { attempts: number; backoffMs: number };
  /** Lowercase hex SHA-256 (governance/catalog.ts schemaHash) the mapping was reviewed against. */
  schemaHash?: string;
  arguments: "full" | "hashed" | "redacted";
  compensation?: CompensationSpec;
}

/**
 * How a tool's effect is undone ([R]): another tool of the same upstream, called with `arguments`
 * whose strings `$args.<path>` / `$result.<path>` (a whole string, nothing around it) stand for a
 * value of the original call's arguments or result; `verification` reads back through the
 * upstream and `expect` maps paths of its structured result to the values they must have.
 */
export interface CompensationSpec {
  tool: string;
  arguments: JsonObject;
  approval: "none" | "required";
  verification?: { tool: string; arguments: JsonObject; expect: JsonObject };
}

/** A reference inside a compensation: `$args`, `$args.a.b`, `$result`, `$result.items.0.id`. */
export const REFERENCE = /^\$(args|result)(\.[^.\s]+)*$/;
/** Strings starting with `$args` / `$result` that are meant as references (then they must parse). */
const LOOKS_LIKE_REFERENCE = /^\$(args|result)\b/;

/** Every reference string in a JSON value (object keys are not references). */
export function referencesIn(v: Json, out: { source: "args" | "result"; path: string[] }[] = []): { source: "args" | "result"; path: string[] }[] {
  if (typeof v === "string") {
    if (REFERENCE.test(v)) {
      const [head, ...path] = v.slice(1).split(".");
      out.push({ source: head === "args" ? "args" : "result", path });
    }
  } else if (Array.isArray(v)) for (const x of v) referencesIn(x, out);
  else if (isObject(v)) for (const x of Object.values(v)) referencesIn(x as Json, out);
  return out;
}

/** Strings that look like references but do not parse (`$args.`, `$result..x`, `$args.a b`), each with its path. */
function badReferences(v: Json, path: (string | number)[], out: { path: (string | number)[]; text: string }[]): void {
  if (typeof v === "string") {
    if (LOOKS_LIKE_REFERENCE.test(v) && !REFERENCE.test(v)) out.push({ path, text: v });
  } else if (Array.isArray(v)) for (const [i, x] of v.entries()) badReferences(x, [...path, i], out);
  else if (isObject(v)) for (const [k, x] of Object.entries(v)) badReferences(x as Json, [...path, k], out);
}

const MAX_TIMEOUT_MS = 60 * 60_000;
const MAX_BACKOFF_MS = 60_000;

function duration(maxMs: number) {
  return z
    .union([z.number().int().positive(), z.string().regex(/^\d+(ms|s|m|h)$/, 'use a number of milliseconds or a string such as "200ms", "30s", "2m"')])
    .transform((v) => durationMs(v, Number.NaN))
    .refine((ms) => ms > 0 && ms <= maxMs, `must be between 1 ms and ${maxMs >= 60_000 ? `${maxMs / 60_000} minutes` : `${maxMs} ms`}`);
}

/** `a.b.c`: segments without dots or whitespace (array indexes are plain segments: `items.0.amount`). */
const DOTTED_PATH = /^[^.\s]+(\.[^.\s]+)*$/;

/** Any JSON value (what YAML gives for a verbatim block such as `compensation`). */
function isJson(v: unknown, depth = 0): v is Json {
  if (depth > 64) return false;
  if (v === null || typeof v === "string" || typeof v === "boolean") return true;
  if (typeof v === "number") return Number.isFinite(v);
  if (Array.isArray(v)) return v.every((x) => isJson(x, depth + 1));
  if (isObject(v)) return Object.getPrototypeOf(v) === Object.prototype && Object.values(v).every((x) => isJson(x, depth + 1));
  return false;
}

const jsonObject = z.custom<JsonObject>((v) => isObject(v) && isJson(v), "must be a mapping of plain JSON values");

const TOOL_NAME = z.string().min(1, "a tool name cannot be empty").max(128, "tool names are at most 128 characters");

const compensationSchema = z
  .strictObject({
    /** The upstream's own name of the tool that undoes this one. */
    tool: TOOL_NAME,
    arguments: jsonObject.default({}),
    /** `required`: an operator must also approve this compensation (`approve_compensations: true`). */
    approval: z.enum(["none", "required"]).default("none"),
    verification: z
      .strictObject({
        tool: TOOL_NAME,
        arguments: jsonObject.default({}),
        expect: z
          .record(
            z.string().regex(DOTTED_PATH, 'must be a dotted path of the read-back\'s structured result such as "exists" or "note.title"'),
            z.custom<Json>((v) => isJson(v), "must be a JSON value"),
          )
          .refine((e) => Object.keys(e).length > 0, "name at least one path and the value it must have"),
      })
      .optional(),
  })
  .superRefine((c, ctx) => {
    const bad: { path: (string | number)[]; text: string }[] = [];
    badReferences(c.arguments, ["arguments"], bad);
    if (c.verification) {
      badReferences(c.verification.arguments, ["verification", "arguments"], bad);
      badReferences(c.verification.expect as JsonObject, ["verification", "expect"], bad);
    }
    for (const b of bad)
      ctx.addIssue({
        code: "custom",
        path: b.path,
        message: `${JSON.stringify(b.text)} is not a reference: write $args.<path> or $result.<path> (dotted, e.g. $result.note.id)`,
      });
  });

export const toolMappingSchema = z
  .strictObject({
    effect: z.enum(EFFECTS),
    /** The action word policy and the banner show (e.g. `delete`). */
    verb: z.string().min(1).max(64).optional(),
    axes: z
      .strictObject({
        reversibility: z.enum(["reversible", "compensable", "irreversible"]).optional(),
        blast_radius: z.enum(["single", "scoped", "systemic"]).optional(),
        externality: z.enum(["internal", "external"]).optional(),
      })
      .optional(),
    /** A permission name policy rules may require of the principal. */
    permission: z.string().min(1).max(128).optional(),
    approval: z.enum(["none", "required"]).default("none"),
    magnitude: z.strictObject({ from_arg: z.string().regex(DOTTED_PATH, 'must be a dotted argument path such as "amount" or "order.total"') }).optional(),
    timeout: duration(MAX_TIMEOUT_MS).optional(),
    retry: z
      .strictObject({
        attempts: z.number().int().min(1).max(5),
        backoff: duration(MAX_BACKOFF_MS).default(200),
      })
      .optional(),
    schema_hash: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, "must be the tool's schema hash: 64 hex digits (SHA-256)")
      .transform((h) => h.toLowerCase())
      .optional(),
    arguments: z.enum(["full", "hashed", "redacted"]).default("hashed"),
    /** How the tool is undone ([R], src/governance/compensation.ts and rollback.ts). */
    compensation: compensationSchema.optional(),
  })
  .superRefine((m, ctx) => {
    if (m.retry && !RETRYABLE.has(m.effect)) {
      ctx.addIssue({ code: "custom", path: ["retry"], message: `retries only for read_only and idempotent tools (this tool's effect is ${m.effect})` });
    }
    if (m.compensation && m.effect === "read_only") {
      ctx.addIssue({ code: "custom", path: ["compensation"], message: "a read_only tool changes nothing: it has nothing to compensate" });
    }
    // The ledger keeps exactly the values a compensation references (docs/ledger.md): it cannot keep what it is told to redact.
    if (m.compensation && m.arguments === "redacted") {
      const c = m.compensation;
      const all = [c.arguments, ...(c.verification ? [c.verification.arguments, c.verification.expect as JsonObject] : [])];
      if (all.some((v) => referencesIn(v).some((r) => r.source === "args"))) {
        ctx.addIssue({
          code: "custom",
          path: ["compensation"],
          message: "references $args of a tool whose arguments are redacted: the ledger would have to keep them to roll back (use arguments: hashed)",
        });
      }
    }
  });

export const mappingFileSchema = z
  .strictObject({
    tools: z.record(TOOL_NAME, toolMappingSchema),
  })
  .superRefine((file, ctx) => {
    // A compensation or read-back names a tool of this same upstream: it must be mapped here too
    // (its effect classified), so a typo or an unmapped tool is refused at load, not at rollback.
    for (const [name, m] of Object.entries(file.tools)) {
      const c = m.compensation;
      if (!c) continue;
      const named: [string, (string | number)[]][] = [[c.tool, ["tools", name, "compensation", "tool"]]];
      if (c.verification) named.push([c.verification.tool, ["tools", name, "compensation", "verification", "tool"]]);
      for (const [tool, path] of named) {
        if (!Object.hasOwn(file.tools, tool))
          ctx.addIssue({
            code: "custom",
            path,
            message: `"${tool}" is not a tool of this mapping: map it too (its effect), so the gateway knows what the rollback calls`,
          });
      }
    }
  });

export type ParsedToolMapping = z.output<typeof toolMappingSchema>;
export type ParsedMappingFile = z.output<typeof mappingFileSchema>;

/** A parsed entry in the shape governance reads. */
export function toToolMapping(parsed: ParsedToolMapping): ToolMapping {
  const m: ToolMapping = { effect: parsed.effect, approval: parsed.approval, arguments: parsed.arguments };
  if (parsed.verb !== undefined) m.verb = parsed.verb;
  if (parsed.axes) {
    const axes: NonNullable<ToolMapping["axes"]> = {};
    if (parsed.axes.reversibility) axes.reversibility = parsed.axes.reversibility;
    if (parsed.axes.blast_radius) axes.blastRadius = parsed.axes.blast_radius;
    if (parsed.axes.externality) axes.externality = parsed.axes.externality;
    m.axes = axes;
  }
  if (parsed.permission !== undefined) m.permission = parsed.permission;
  if (parsed.magnitude) m.magnitude = { fromArg: parsed.magnitude.from_arg };
  if (parsed.timeout !== undefined) m.timeoutMs = parsed.timeout;
  if (parsed.retry) m.retry = { attempts: parsed.retry.attempts, backoffMs: parsed.retry.backoff };
  if (parsed.schema_hash !== undefined) m.schemaHash = parsed.schema_hash;
  if (parsed.compensation !== undefined) {
    const c = parsed.compensation;
    m.compensation = { tool: c.tool, arguments: c.arguments, approval: c.approval };
    if (c.verification)
      m.compensation.verification = { tool: c.verification.tool, arguments: c.verification.arguments, expect: c.verification.expect as JsonObject };
  }
  return m;
}

/** Upstream names as the config allows them (schema.ts): the keys of the `mappings:` section. */
const UPSTREAM_NAME = /^[a-z][a-z0-9-]{0,30}$/;
const PLAIN_KEY = /^[A-Za-z_][A-Za-z0-9_-]*$/;

/** `where` followed by the zod path: `.key` for plain keys, `["a.b"]` for others, `[0]` for indexes. */
export function formatMappingPath(where: string, path: readonly PropertyKey[]): string {
  const tail = path.map((p) => (typeof p === "number" ? `[${p}]` : PLAIN_KEY.test(String(p)) ? `.${String(p)}` : `[${JSON.stringify(String(p))}]`)).join("");
  return `${where}${tail}`;
}

/**
 * One mapping file's contents (already parsed from YAML) for the upstream it names. `where` prefixes
 * each problem (`mappings/github.yaml`, or `mappings.github` for the inline section). An empty file
 * (YAML null) is a problem: a mapping file with nothing in it is almost certainly a mistake.
 */
export function parseMappingFile(raw: unknown, where: string): { tools: Record<string, ToolMapping>; problems: string[] } {
  const res = mappingFileSchema.safeParse(raw === null || raw === undefined ? undefined : raw, parseOptions);
  if (!res.success) {
    const problems = res.error.issues.map(
      (i) => `${formatMappingPath(where, i.path)}: ${raw == null && i.path.length === 0 ? "is empty (expected `tools:`)" : i.message}`,
    );
    return { tools: {}, problems };
  }
  const tools: Record<string, ToolMapping> = Object.create(null);
  for (const [name, entry] of Object.entries(res.data.tools)) tools[name] = toToolMapping(entry);
  return { tools, problems: [] };
}

/**
 * The config's inline `mappings:` section: `{ <upstream>: <file contents> }`. Every problem of every
 * upstream is reported, each with its path (`mappings.github.tools.delete_file.retry: …`). Whether
 * each key names a configured upstream is the loader's check (it knows the upstreams).
 */
export function parseMappings(raw: unknown): { mappings: Record<string, Record<string, ToolMapping>>; problems: string[] } {
  const mappings: Record<string, Record<string, ToolMapping>> = Object.create(null);
  if (raw === undefined || raw === null) return { mappings, problems: [] };
  if (!isObject(raw)) return { mappings, problems: ["mappings: must be a mapping of upstream name to { tools: … }"] };
  const problems: string[] = [];
  for (const [upstream, contents] of Object.entries(raw)) {
    const where = formatMappingPath("mappings", [upstream]);
    if (!UPSTREAM_NAME.test(upstream)) {
      problems.push(`${where}: "${upstream}" is not an upstream name (must match ^[a-z][a-z0-9-]{0,30}$)`);
      continue;
    }
    const file = parseMappingFile(contents, where);
    problems.push(...file.problems);
    if (file.problems.length === 0) mappings[upstream] = file.tools;
  }
  return { mappings, problems };
}
