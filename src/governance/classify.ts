/**
 * Classification (request path step 6): what a tool does, from the operator's mapping first, then
 * a name heuristic the server's annotations may only make more cautious, then the conservative
 * default (irreversible, systemic). Also the classification banner printed at start (and by
 * `portcullis classify`): one OK / NOTE / WARN / BLOCK line per tool, with totals.
 *
 * Heuristic buckets (`source: "heuristic:<bucket>"`), from the words of the tool's name (split on
 * `_ - . / :` and camelCase; every word is looked at and the most cautious one wins, so
 * `read_and_delete` is a delete and `mark_all_notifications_read` is not a read):
 *   read        get list read search fetch describe show query find lookup view count inspect browse
 *               download export  → read_only, {reversible, single, internal}
 *   idempotent  set put replace upsert write mark enable disable assign unassign star unstar subscribe
 *               unsubscribe lock unlock  → idempotent, {reversible, scoped, external}
 *   write       create add insert append update edit patch modify move rename copy upload save toggle
 *               close reopen resolve unresolve dismiss fork  → reversible, {reversible, scoped, external}
 *   destructive delete remove drop destroy purge kill erase wipe truncate revoke terminate reset clear
 *               unlink detach overwrite  → irreversible, {irreversible, systemic, external}
 *   external    send notify publish pay transfer charge refund withdraw invite merge push approve
 *               → irreversible, {irreversible, systemic, external}
 *   execute     deploy execute exec run eval invoke trigger spawn launch start stop restart install
 *               → irreversible, {irreversible, systemic, external}
 * Words that are as often nouns as verbs (label, tag, comment, post, release, message, archive, call)
 * are left out: every word counts, so a noun would make `get_release` look like a publish.
 * Annotations (readOnlyHint, destructiveHint, idempotentHint, openWorldHint) come from the upstream
 * and are untrusted: they never make a tool less guarded than its name says. They may only:
 *   - raise the effect: an explicit `destructiveHint: true` → irreversible (`destructive_hint`);
 *     `readOnlyHint: false` on a name that reads → reversible, or idempotent with
 *     `idempotentHint: true` (`write_hint`); `idempotentHint: false` on an idempotent name →
 *     reversible (`write_hint`);
 *   - widen externality: `openWorldHint: true` → external;
 *   - and, for a name with no known verb, `readOnlyHint: true` (without `destructiveHint: true`)
 *     drafts a read (`read_hint`): a NOTE in the banner, never a grant — the baseline still blocks
 *     every unmapped tool in enforce (policy.ts), except `unclassified_reads: observe`.
 * A name with no known verb and no read hint gets the default. Must never: let an annotation or a
 * name relax a mapping, treat a heuristic as a mapping, or throw on odd input (names are any string).
 */
import type { CatalogTool } from "./catalog-entry.ts";
import type { Axes, BlastRadius, Classification, Effect, Mappings, Target } from "./steps.ts";
import type { ToolMapping } from "../config/mapping-schema.ts";

export type Bucket = "read" | "idempotent" | "write" | "destructive" | "external" | "execute" | "read_hint" | "write_hint" | "destructive_hint";

const VERBS: Record<Exclude<Bucket, "read_hint" | "write_hint" | "destructive_hint">, string[]> = {
  read: ["get", "list", "read", "search", "fetch", "describe", "show", "query", "find", "lookup", "view", "count", "inspect", "browse", "download", "export"],
  idempotent: [
    "set",
    "put",
    "replace",
    "upsert",
    "write",
    "mark",
    "enable",
    "disable",
    "assign",
    "unassign",
    "star",
    "unstar",
    "subscribe",
    "unsubscribe",
    "lock",
    "unlock",
  ],
  write: [
    "create",
    "add",
    "insert",
    "append",
    "update",
    "edit",
    "patch",
    "modify",
    "move",
    "rename",
    "copy",
    "upload",
    "save",
    "toggle",
    "close",
    "reopen",
    "resolve",
    "unresolve",
    "dismiss",
    "fork",
  ],
  destructive: [
    "delete",
    "remove",
    "drop",
    "destroy",
    "purge",
    "kill",
    "erase",
    "wipe",
    "truncate",
    "revoke",
    "terminate",
    "reset",
    "clear",
    "unlink",
    "detach",
    "overwrite",
  ],
  external: ["send", "notify", "publish", "pay", "transfer", "charge", "refund", "withdraw", "invite", "merge", "push", "approve"],
  execute: ["deploy", "execute", "exec", "run", "eval", "invoke", "trigger", "spawn", "launch", "start", "stop", "restart", "install"],
};

/** Caution order of effects: a later one is more guarded. */
const CAUTION: Record<Effect, number> = { read_only: 0, idempotent: 1, reversible: 2, irreversible: 3 };

const BUCKET_EFFECT: Record<keyof typeof VERBS, Effect> = {
  read: "read_only",
  idempotent: "idempotent",
  write: "reversible",
  destructive: "irreversible",
  external: "irreversible",
  execute: "irreversible",
};
/** Among buckets of the same effect, the order in which a name's words win (later wins). */
const BUCKET_RANK: Record<keyof typeof VERBS, number> = { read: 0, idempotent: 1, write: 2, destructive: 3, external: 4, execute: 5 };

const VERB_BUCKET = new Map<string, keyof typeof VERBS>();
for (const [bucket, words] of Object.entries(VERBS) as [keyof typeof VERBS, string[]][]) for (const w of words) VERB_BUCKET.set(w, bucket);

/** The words of a tool name, lowercased: `getUserById` → get user by id; `repo.delete-file` → repo delete file. */
export function nameWords(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1 $2")
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w !== "");
}

/** The most cautious verb bucket the name's words name, with the word; null when none is known. */
export function nameBucket(name: string): { bucket: keyof typeof VERBS; verb: string } | null {
  let best: { bucket: keyof typeof VERBS; verb: string } | null = null;
  for (const w of nameWords(name)) {
    const b = VERB_BUCKET.get(w);
    if (b && (!best || BUCKET_RANK[b] > BUCKET_RANK[best.bucket])) best = { bucket: b, verb: w };
  }
  return best;
}

const DEFAULT_CLASSIFICATION: Classification = {
  effect: "irreversible",
  blastRadius: "systemic",
  axes: { reversibility: "irreversible", blastRadius: "systemic", externality: "external" },
  source: "default",
};

function fromMapping(m: ToolMapping): Classification {
  // What a mapping leaves out is the cautious value (systemic, external; irreversible only for irreversible effects).
  const blastRadius: BlastRadius = m.axes?.blastRadius ?? "systemic";
  return {
    effect: m.effect,
    blastRadius,
    axes: {
      reversibility: m.axes?.reversibility ?? (m.effect === "irreversible" ? "irreversible" : "reversible"),
      blastRadius,
      externality: m.axes?.externality ?? "external",
    },
    ...(m.verb ? { verb: m.verb } : {}),
    source: "mapping",
  };
}

function axesFor(effect: Effect): Axes {
  switch (effect) {
    case "read_only":
      return { reversibility: "reversible", blastRadius: "single", externality: "internal" };
    case "idempotent":
    case "reversible":
      return { reversibility: "reversible", blastRadius: "scoped", externality: "external" };
    case "irreversible":
      return { reversibility: "irreversible", blastRadius: "systemic", externality: "external" };
  }
}

/** A hint counts only when the server states it explicitly (the spec's defaults are not hints). */
function hint(tool: CatalogTool, key: string): boolean | undefined {
  const v = tool.annotations?.[key];
  return typeof v === "boolean" ? v : undefined;
}

/** The heuristic for an unmapped tool, or null when neither its name nor a read hint says anything. */
export function heuristic(tool: CatalogTool): Classification | null {
  const named = nameBucket(tool.name);
  const readOnly = hint(tool, "readOnlyHint");
  const destructive = hint(tool, "destructiveHint");
  const idempotent = hint(tool, "idempotentHint");
  const openWorld = hint(tool, "openWorldHint");

  let bucket: Bucket;
  let effect: Effect;
  if (named) {
    bucket = named.bucket;
    effect = BUCKET_EFFECT[named.bucket];
  } else if (readOnly === true && destructive !== true) {
    bucket = "read_hint";
    effect = "read_only";
  } else {
    return null;
  }

  // Hints may only raise caution from here on.
  const raise = (to: Effect, as: Bucket): void => {
    if (CAUTION[to] > CAUTION[effect]) {
      effect = to;
      bucket = as;
    }
  };
  if (destructive === true) raise("irreversible", "destructive_hint");
  if (readOnly === false) raise(idempotent === true ? "idempotent" : "reversible", "write_hint");
  if (idempotent === false && effect === "idempotent") raise("reversible", "write_hint");

  const axes = axesFor(effect);
  if (openWorld === true) axes.externality = "external";
  return { effect, blastRadius: axes.blastRadius, axes, ...(named ? { verb: named.verb } : {}), source: `heuristic:${bucket}` };
}

function classifyNamed(upstream: string, tool: CatalogTool, mappings: Mappings): Classification {
  const m = mappings.get(upstream, tool.name);
  if (m) return fromMapping(m);
  return heuristic(tool) ?? { ...DEFAULT_CLASSIFICATION, axes: { ...DEFAULT_CLASSIFICATION.axes } };
}

/**
 * What classifyTool answered for a catalog entry, under one config's mappings: a tool's
 * classification depends only on the entry (name, annotations), its upstream and the mappings,
 * so it is worked out once per catalog entry and config version, not per call. Frozen (it is
 * shared by every call that reaches the entry); a new catalog entry or config starts afresh.
 */
const classified = new WeakMap<CatalogTool, { mappings: Mappings; upstream: string; c: Classification }>();

function frozen(c: Classification): Classification {
  Object.freeze(c.axes);
  return Object.freeze(c);
}

/** Step 6: mapping → name/annotation heuristic → conservative default. Total: never throws. */
export function classifyTool(target: Target, mappings: Mappings): Classification {
  const upstream = target.upstream.name;
  const hit = classified.get(target.tool);
  if (hit && hit.mappings === mappings && hit.upstream === upstream) return hit.c;
  const c = frozen(classifyNamed(upstream, target.tool, mappings));
  classified.set(target.tool, { mappings, upstream, c });
  return c;
}

// ---- banner -------------------------------------------------------------------------------

export type BannerLevel = "OK" | "NOTE" | "WARN" | "BLOCK";
export const BANNER_LEVELS: readonly BannerLevel[] = ["OK", "NOTE", "WARN", "BLOCK"];
export interface BannerLine {
  upstream: string;
  /** The upstream's own tool name. */
  tool: string;
  level: BannerLevel;
  why: string;
}
export interface Banner {
  lines: BannerLine[];
  totals: Record<BannerLevel, number>;
}

function bannerLine(upstream: string, tool: CatalogTool, mappings: Mappings): BannerLine {
  const m = mappings.get(upstream, tool.name);
  const c = classifyNamed(upstream, tool, mappings);
  const base = { upstream, tool: tool.name };
  if (m) {
    if (m.schemaHash !== undefined && m.schemaHash !== tool.schemaHash) {
      return {
        ...base,
        level: "BLOCK",
        why: `mapped, but its schema drifted (pinned ${m.schemaHash.slice(0, 12)}…, now ${tool.schemaHash.slice(0, 12)}…): calls are refused until the mapping is reviewed`,
      };
    }
    return { ...base, level: "OK", why: `mapped: ${c.effect}${m.approval === "required" ? ", approval required" : ""}` };
  }
  if (c.source === "default") return { ...base, level: "BLOCK", why: "unclassified: no mapping and nothing in its name or annotations; blocked in enforce" };
  if (c.effect === "read_only") return { ...base, level: "NOTE", why: `unmapped; looks like a read (${c.source}); add a mapping to rely on it` };
  return { ...base, level: "WARN", why: `unmapped; looks like a ${c.effect} write (${c.source}); add a mapping before relying on it` };
}

/** One line per tool (in the order given) and the totals per level. */
export function classificationBanner(tools: { upstream: string; tool: CatalogTool }[], mappings: Mappings): Banner {
  const totals: Record<BannerLevel, number> = { OK: 0, NOTE: 0, WARN: 0, BLOCK: 0 };
  const lines = tools.map(({ upstream, tool }) => {
    const line = bannerLine(upstream, tool, mappings);
    totals[line.level]++;
    return line;
  });
  return { lines, totals };
}

/** The banner as text: a totals line, then one aligned line per tool. */
export function formatBanner(banner: Banner): string {
  const t = banner.totals;
  const head = `Portcullis classification: ${banner.lines.length} tool${banner.lines.length === 1 ? "" : "s"} — ${t.OK} OK, ${t.NOTE} NOTE, ${t.WARN} WARN, ${t.BLOCK} BLOCK`;
  const names = banner.lines.map((l) => `${l.upstream}/${l.tool}`);
  const width = Math.min(60, Math.max(0, ...names.map((n) => n.length)));
  const rows = banner.lines.map((l, i) => `  ${l.level.padEnd(5)} ${(names[i] ?? "").padEnd(width)}  ${l.why}`);
  return [head, ...rows].join("\n");
}
