/**
 * The schema (zod) of the config's `policy:` section: rules (match, CEL `when`, history queries,
 * magnitude thresholds, time windows, decision, reason, owner, obligations, per-rule observe) and
 * budgets, with its parsed type `PolicyConfig`; plus the small pure parsers the policy compiler
 * shares with it (durations, obligation spec strings, time-of-day ranges). Every problem is
 * reported at once with its path; unknown fields are rejected, naming the nearest known one. Must never: compile or evaluate a
 * CEL condition (src/governance/policy.ts owns that), do I/O, or accept a field it does not know.
 */
import { z } from "zod";
import { parseOptions } from "./problems.ts";
import { ROLES } from "./roles.ts";

/** Rule ids: what the ledger and the model see as "rule". */
export const RULE_ID = /^[A-Za-z0-9_.:-]+$/;
/** A duration: a number of milliseconds or `<n>ms|s|m|h|d` (e.g. `30s`, `1m`, `2h`, `1d`). */
export const DURATION = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Milliseconds of a duration (as the schema accepts it); null when it is not one, or not positive. */
export function durationMs(v: number | string): number | null {
  if (typeof v === "number") return Number.isSafeInteger(v) && v > 0 ? v : null;
  const m = DURATION.exec(v);
  if (!m) return null;
  const ms = Number(m[1]) * UNIT_MS[m[2]!]!;
  return Number.isSafeInteger(ms) && ms > 0 ? ms : null;
}

/** An obligation as a spec string names it: `kind` or `kind:arg` (`mask:email`, `redact:$.token`, `rate_limit:5/1m`). */
export interface ObligationSpec {
  kind: string;
  arg?: string;
  spec: string;
}
const OBLIGATION_KIND = /^[a-z][a-z0-9_]*$/;

/**
 * Parses an obligation spec string. Kinds this gateway knows are checked for their argument
 * (`audit:full`, `mask:<field>`, `redact:<json-path starting with $>`, `rate_limit:<n>/<duration>`);
 * any other well-formed kind is accepted here — an obligation the gateway cannot apply blocks the
 * call at run time (issue 9, item 7), which is the operator's to see, not a load error.
 */
export function parseObligation(spec: string): ObligationSpec | { problem: string } {
  const colon = spec.indexOf(":");
  const kind = colon < 0 ? spec : spec.slice(0, colon);
  const arg = colon < 0 ? undefined : spec.slice(colon + 1);
  if (!OBLIGATION_KIND.test(kind)) return { problem: `obligation "${spec}": the kind must match ^[a-z][a-z0-9_]*$ (e.g. "mask:email")` };
  if (arg !== undefined && arg.length === 0) return { problem: `obligation "${spec}": nothing follows the ":"` };
  switch (kind) {
    case "audit":
      if (arg !== "full") return { problem: `obligation "${spec}": audit takes "full" (audit:full)` };
      break;
    case "mask":
      if (arg === undefined) return { problem: `obligation "${spec}": mask names a field (mask:<field>)` };
      break;
    case "redact":
      if (arg === undefined || !arg.startsWith("$")) return { problem: `obligation "${spec}": redact takes a JSON path starting with $ (redact:$.token)` };
      break;
    case "rate_limit": {
      const m = arg === undefined ? null : /^(\d+)\/(.+)$/.exec(arg);
      if (!m || Number(m[1]) < 1 || durationMs(m[2]!) === null)
        return { problem: `obligation "${spec}": rate_limit takes <calls>/<window>, e.g. rate_limit:5/1m` };
      break;
    }
  }
  return arg === undefined ? { kind, spec } : { kind, arg, spec };
}

export const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"] as const;
export type Day = (typeof DAYS)[number];
const HOURS = /^(\d\d):(\d\d)-(\d\d):(\d\d)$/;

/** `"HH:MM-HH:MM"` (UTC) as minutes since midnight [start, end); end may be 24:00; start > end wraps past midnight. */
export function parseHours(v: string): { start: number; end: number } | null {
  const m = HOURS.exec(v);
  if (!m) return null;
  const [h1, m1, h2, m2] = [m[1], m[2], m[3], m[4]].map(Number) as [number, number, number, number];
  if (h1 > 23 || m1 > 59 || m2 > 59 || h2 > 24 || (h2 === 24 && m2 !== 0)) return null;
  const start = h1 * 60 + m1;
  const end = h2 * 60 + m2;
  return start === end ? null : { start, end };
}

const duration = z.union([
  z.number().int().positive(),
  z.string().refine((v) => durationMs(v) !== null, 'use a duration such as "30s", "1m", "2h", "1d" (or a number of milliseconds)'),
]);
const glob = z.string().min(1).max(512);
/** A single value or a non-empty list of them (a list matches any of its members). */
const oneOrMany = <T extends z.ZodType>(item: T) => z.union([item, z.array(item).min(1)]);
const EFFECTS = ["read_only", "idempotent", "reversible", "irreversible"] as const;
const BLAST_RADII = ["single", "scoped", "systemic"] as const;
const DOTTED_PATH = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
const scope = z.enum(["principal", "run", "grant"]).default("principal");

const matchSchema = z.strictObject({
  /** Globs over the exposed tool name (as clients see it); with `upstream` also over that upstream's own tool name (stable under namespacing). */
  tool: oneOrMany(glob).optional(),
  /** Globs over the upstream's name. */
  upstream: oneOrMany(glob).optional(),
  effect: oneOrMany(z.enum(EFFECTS)).optional(),
  /** Globs over the principal (`sub`). */
  principal: oneOrMany(glob).optional(),
  /** Globs over the principal's team. */
  team: oneOrMany(glob).optional(),
  /** The principal holds any of these roles (`admin` holds every role). */
  role: oneOrMany(z.enum(ROLES)).optional(),
  blast_radius: oneOrMany(z.enum(BLAST_RADII)).optional(),
  externality: oneOrMany(z.enum(["internal", "external"])).optional(),
  reversibility: oneOrMany(z.enum(["reversible", "compensable", "irreversible"])).optional(),
});

/**
 * A history query's upstream: a glob over upstream names. With it, `tool` matches the upstream's own
 * tool name as well as the exposed one (the stable identity, as a rule's `match: {upstream, tool}`).
 */
const historyUpstream = z
  .string()
  .regex(/^[a-z0-9*?-]{1,64}$/, "an upstream name or glob (letters a-z, digits, -, * and ?)")
  .optional();

const historySchema = z
  .strictObject({
    /** How many of the caller's earlier admitted calls matching `tool` (on `upstream`) fall within `within` → `history.count`. */
    count: z.strictObject({ tool: glob, upstream: historyUpstream, within: duration, scope }).optional(),
    /** The sum of numeric argument `arg` over those calls → `history.total`. */
    total: z
      .strictObject({
        tool: glob,
        upstream: historyUpstream,
        arg: z.string().regex(DOTTED_PATH, "a dotted argument path such as amount or order.total"),
        within: duration,
        scope,
      })
      .optional(),
    /** Whether a call matching `tool` (on `upstream`) succeeded earlier in this run → `history.succeeded`. */
    succeeded: z.strictObject({ tool: glob, upstream: historyUpstream }).optional(),
  })
  .refine((h) => h.count !== undefined || h.total !== undefined || h.succeeded !== undefined, "name at least one of count, total, succeeded");

const windowSchema = z
  .strictObject({
    days: z.array(z.enum(DAYS)).min(1).optional(),
    hours: z
      .string()
      .refine((v) => parseHours(v) !== null, 'use "HH:MM-HH:MM" in UTC, e.g. "09:00-17:00" (start and end differ; end may be 24:00)')
      .optional(),
    /** The rule applies outside the window instead of inside it. */
    outside: z.boolean().optional(),
  })
  .refine((w) => w.days !== undefined || w.hours !== undefined, "name days, hours, or both");

const obligationSchema = z
  .string()
  .min(1)
  .superRefine((spec, ctx) => {
    const o = parseObligation(spec);
    if ("problem" in o) ctx.addIssue({ code: "custom", message: o.problem });
  });

export const ruleSchema = z.strictObject({
  id: z.string().min(1).max(128).regex(RULE_ID, "rule ids are letters, digits and _ . : -"),
  match: matchSchema.optional(),
  /** A CEL condition (args, principal, tool, classification, run, now, history in scope). */
  when: z.string().min(1).max(4096).optional(),
  history: historySchema.optional(),
  /** The tool's mapped magnitude (`magnitude.from_arg` of its mapping) must be greater than `over`. */
  magnitude: z.strictObject({ over: z.number().finite() }).optional(),
  window: windowSchema.optional(),
  decision: z.enum(["allow", "deny", "require_approval"]),
  reason: z.string().min(1).max(1000),
  /** Who to ask about this rule's denials. */
  owner: z.string().min(1).max(256).optional(),
  obligations: z.array(obligationSchema).optional(),
  /** `observe`: the rule shadows — recorded as would_block, never changes the decision. */
  mode: z.literal("observe").optional(),
});

const budgetSchema = z.strictObject({ calls: z.number().int().min(0) });

export const policySchema = z
  .strictObject({
    rules: z.array(ruleSchema).default([]),
    /** Calls per run and per grant; a grant's own `budget.calls` claim applies too (the smaller wins). */
    budgets: z.strictObject({ run: budgetSchema.optional(), grant: budgetSchema.optional() }).optional(),
  })
  .check(
    // Runs even when other fields failed (`when`), so duplicate ids are reported with everything
    // else at once; the value may then be unvalidated, hence the defensive reads.
    z.superRefine(
      (p, ctx) => {
        const rules: unknown[] = Array.isArray((p as { rules?: unknown })?.rules) ? (p as { rules: unknown[] }).rules : [];
        const seen = new Map<string, number>();
        rules.forEach((r, i) => {
          const id = r !== null && typeof r === "object" ? (r as { id?: unknown }).id : undefined;
          if (typeof id !== "string") return;
          const prev = seen.get(id);
          if (prev !== undefined) ctx.addIssue({ code: "custom", path: ["rules", i, "id"], message: `duplicate rule id "${id}" (also rules[${prev}])` });
          else seen.set(id, i);
        });
      },
      { when: () => true },
    ),
  );

export type PolicyConfig = z.output<typeof policySchema>;
export type PolicyRuleConfig = PolicyConfig["rules"][number];
/** What an operator writes (before defaults). */
export type PolicyInput = z.input<typeof policySchema>;

function formatPath(path: PropertyKey[]): string {
  return path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
}

/** Validates a `policy:` section; every problem at once, each prefixed by its path under `at` (default `policy`). */
export function parsePolicy(raw: unknown, at = "policy"): { ok: true; policy: PolicyConfig } | { ok: false; problems: string[] } {
  const res = policySchema.safeParse(raw, parseOptions);
  if (res.success) return { ok: true, policy: res.data };
  return { ok: false, problems: res.error.issues.map((i) => `${at}${formatPath(i.path)}: ${i.message}`) };
}
