/**
 * Classification (src/governance/classify.ts): the mapping decides when there is one; otherwise the
 * name heuristic's buckets, which the server's annotations may only make more cautious (checked
 * exhaustively over every combination of hints, and as a property over arbitrary names); otherwise
 * the conservative default. And the start-up banner: levels, reasons, totals, text.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { type CatalogTool, catalogEntry } from "../../src/governance/catalog-entry.ts";
import { classificationBanner, classifyTool, formatBanner, heuristic, nameWords } from "../../src/governance/classify.ts";
import { type Classification, type Effect, type Mappings, NO_MAPPINGS } from "../../src/governance/steps.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

const up: UpstreamConfig = testUpstream();

function tool(name: string, annotations?: JsonObject, inputSchema: JsonObject = { type: "object" }): CatalogTool {
  const def: JsonObject = { name, inputSchema };
  if (annotations) def.annotations = annotations;
  return catalogEntry(def, `alpha__${name}`)!;
}
function mappingsOf(byTool: Record<string, ToolMapping>, upstream = "alpha"): Mappings {
  return { loaded: true, get: (u, t) => (u === upstream ? byTool[t] : undefined) };
}
const classifyName = (name: string, annotations?: JsonObject, mappings: Mappings = NO_MAPPINGS): Classification =>
  classifyTool({ upstream: up, tool: tool(name, annotations) }, mappings);

const CAUTION: Record<Effect, number> = { read_only: 0, idempotent: 1, reversible: 2, irreversible: 3 };
const BLAST = { single: 0, scoped: 1, systemic: 2 } as const;
const REVERSIBILITY = { reversible: 0, compensable: 1, irreversible: 2 } as const;

/** True when `b` is at least as guarded as `a` on every axis. */
function atLeastAsGuarded(a: Classification, b: Classification): boolean {
  return (
    CAUTION[b.effect] >= CAUTION[a.effect] &&
    BLAST[b.blastRadius] >= BLAST[a.blastRadius] &&
    REVERSIBILITY[b.axes.reversibility] >= REVERSIBILITY[a.axes.reversibility] &&
    (a.axes.externality === "internal" || b.axes.externality === "external")
  );
}

const HINTS = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] as const;
/** Every combination of the four hints: each true, false or absent (81). */
const ALL_HINTS: JsonObject[] = (() => {
  let combos: JsonObject[] = [{}];
  for (const h of HINTS) combos = combos.flatMap((c) => [c, { ...c, [h]: true }, { ...c, [h]: false }]);
  return combos;
})();

describe("classifyTool: mapping first", () => {
  it("a mapping decides, whatever the name and annotations say", () => {
    const m: ToolMapping = {
      effect: "read_only",
      approval: "none",
      arguments: "hashed",
      verb: "peek",
      axes: { blastRadius: "single", externality: "internal" },
    };
    const mappings = mappingsOf({ delete_everything: m });
    for (const annotations of [undefined, { destructiveHint: true, readOnlyHint: false, openWorldHint: true }]) {
      const c = classifyName("delete_everything", annotations, mappings);
      expect(c).toEqual({
        effect: "read_only",
        blastRadius: "single",
        axes: { reversibility: "reversible", blastRadius: "single", externality: "internal" },
        verb: "peek",
        source: "mapping",
      });
    }
    // What a mapping leaves out is the cautious value.
    const bare = classifyName("x", undefined, mappingsOf({ x: { effect: "irreversible", approval: "none", arguments: "hashed" } }));
    expect(bare).toEqual({
      effect: "irreversible",
      blastRadius: "systemic",
      axes: { reversibility: "irreversible", blastRadius: "systemic", externality: "external" },
      source: "mapping",
    });
  });

  it("a mapping of another upstream, or of another tool, does not apply", () => {
    const mappings = mappingsOf({ get_user: { effect: "irreversible", approval: "none", arguments: "hashed" } }, "beta");
    expect(classifyName("get_user", undefined, mappings).source).toBe("heuristic:read");
  });
});

describe("classifyTool: name heuristic buckets", () => {
  const cases: [string, string, Effect, string | undefined][] = [
    ["get_user", "heuristic:read", "read_only", "get"],
    ["listRepositories", "heuristic:read", "read_only", "list"],
    ["search-files", "heuristic:read", "read_only", "search"],
    ["issue_read", "heuristic:read", "read_only", "read"],
    ["fetch.page", "heuristic:read", "read_only", "fetch"],
    ["describe_instances", "heuristic:read", "read_only", "describe"],
    ["show_config", "heuristic:read", "read_only", "show"],
    ["query_db", "heuristic:read", "read_only", "query"],
    ["get_latest_release", "heuristic:read", "read_only", "get"],
    ["set_flag", "heuristic:idempotent", "idempotent", "set"],
    ["put_object", "heuristic:idempotent", "idempotent", "put"],
    ["write_file", "heuristic:idempotent", "idempotent", "write"],
    ["mark_all_notifications_read", "heuristic:idempotent", "idempotent", "mark"],
    ["create_issue", "heuristic:write", "reversible", "create"],
    ["addComment", "heuristic:write", "reversible", "add"],
    ["update_record", "heuristic:write", "reversible", "update"],
    ["edit_file", "heuristic:write", "reversible", "edit"],
    ["move_file", "heuristic:write", "reversible", "move"],
    ["rename_branch", "heuristic:write", "reversible", "rename"],
    ["get_or_create_user", "heuristic:write", "reversible", "create"],
    ["delete_file", "heuristic:destructive", "irreversible", "delete"],
    ["remove-member", "heuristic:destructive", "irreversible", "remove"],
    ["DropTable", "heuristic:destructive", "irreversible", "drop"],
    ["destroy_vm", "heuristic:destructive", "irreversible", "destroy"],
    ["purge_cache", "heuristic:destructive", "irreversible", "purge"],
    ["kill_process", "heuristic:destructive", "irreversible", "kill"],
    ["read_and_delete", "heuristic:destructive", "irreversible", "delete"],
    ["send_email", "heuristic:external", "irreversible", "send"],
    ["pay_invoice", "heuristic:external", "irreversible", "pay"],
    ["transfer_funds", "heuristic:external", "irreversible", "transfer"],
    ["merge_pull_request", "heuristic:external", "irreversible", "merge"],
    ["deploy_service", "heuristic:execute", "irreversible", "deploy"],
    ["execute_sql", "heuristic:execute", "irreversible", "execute"],
    ["run_command", "heuristic:execute", "irreversible", "run"],
    ["actions_run_trigger", "heuristic:execute", "irreversible", "run"],
  ];
  it.each(cases)("%s → %s (%s)", (name, source, effect, verb) => {
    const c = classifyName(name);
    expect(c.source).toBe(source);
    expect(c.effect).toBe(effect);
    expect(c.verb).toBe(verb);
    expect(c.blastRadius).toBe(c.axes.blastRadius);
  });

  it("reads are single and internal; writes scoped; irreversible buckets systemic and external", () => {
    expect(classifyName("get_user").axes).toEqual({ reversibility: "reversible", blastRadius: "single", externality: "internal" });
    expect(classifyName("create_issue").axes).toEqual({ reversibility: "reversible", blastRadius: "scoped", externality: "external" });
    expect(classifyName("delete_file").axes).toEqual({ reversibility: "irreversible", blastRadius: "systemic", externality: "external" });
  });

  it("words are split on separators and camelCase; substrings of words are not verbs", () => {
    expect(nameWords("getHTTPResponse_v2.list-all")).toEqual(["get", "http", "response", "v2", "list", "all"]);
    expect(classifyName("target_budget").source).toBe("default"); // "get" inside "target" is not a verb
    expect(classifyName("list_runs").source).toBe("heuristic:read"); // "runs" is not "run"
  });

  it("a name with no known verb and no read hint gets the conservative default", () => {
    for (const name of ["directory_tree", "gzip-file-as-resource", "echo", "", "___", "日本語", "x".repeat(500)]) {
      expect(classifyName(name)).toEqual({
        effect: "irreversible",
        blastRadius: "systemic",
        axes: { reversibility: "irreversible", blastRadius: "systemic", externality: "external" },
        source: "default",
      });
    }
  });
});

describe("annotations are hints that only add caution", () => {
  it("readOnlyHint alone drafts a read for a name without a verb (and nothing else does)", () => {
    expect(classifyName("directory_tree", { readOnlyHint: true })).toMatchObject({ effect: "read_only", source: "heuristic:read_hint" });
    expect(classifyName("directory_tree", { readOnlyHint: true, openWorldHint: true }).axes.externality).toBe("external");
    expect(classifyName("directory_tree", { readOnlyHint: true, destructiveHint: true }).source).toBe("default");
    expect(classifyName("directory_tree", { idempotentHint: true, destructiveHint: false, openWorldHint: false }).source).toBe("default");
    expect(classifyName("directory_tree", { readOnlyHint: "yes" }).source).toBe("default"); // only explicit booleans count
  });

  it("never lowers what the name says", () => {
    expect(classifyName("delete_file", { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false })).toMatchObject({
      effect: "irreversible",
      source: "heuristic:destructive",
      axes: { externality: "external" },
    });
    expect(classifyName("create_issue", { readOnlyHint: true }).effect).toBe("reversible");
  });

  it("raises: destructive on a read, not-read-only on a read, not-idempotent on an idempotent name, open world", () => {
    expect(classifyName("get_user", { destructiveHint: true })).toMatchObject({ effect: "irreversible", source: "heuristic:destructive_hint", verb: "get" });
    expect(classifyName("get_user", { readOnlyHint: false })).toMatchObject({ effect: "reversible", source: "heuristic:write_hint" });
    expect(classifyName("get_user", { readOnlyHint: false, idempotentHint: true })).toMatchObject({ effect: "idempotent", source: "heuristic:write_hint" });
    expect(classifyName("set_flag", { idempotentHint: false })).toMatchObject({ effect: "reversible", source: "heuristic:write_hint" });
    expect(classifyName("get_user", { openWorldHint: true }).axes.externality).toBe("external");
    expect(classifyName("get_user", { openWorldHint: false }).axes.externality).toBe("internal");
  });

  it("over every combination of hints, on every bucket, the result is at least as guarded as the name alone", () => {
    const names = ["get_user", "set_flag", "create_issue", "delete_file", "send_email", "deploy_service", "directory_tree"];
    let checked = 0;
    for (const name of names) {
      const bare = classifyName(name);
      for (const annotations of ALL_HINTS) {
        const c = classifyName(name, annotations);
        if (bare.source === "default") {
          // Only readOnlyHint (without destructiveHint: true) may draft a read; everything else stays default.
          const draftsRead = annotations.readOnlyHint === true && annotations.destructiveHint !== true;
          expect(c.source, JSON.stringify(annotations)).toBe(draftsRead ? "heuristic:read_hint" : "default");
        } else {
          expect(atLeastAsGuarded(bare, c), `${name} ${JSON.stringify(annotations)}`).toBe(true);
        }
        checked++;
      }
    }
    expect(checked).toBe(names.length * 81);
  });

  it("property: for any name and any annotations, hints never make a named tool less guarded, and nothing throws", () => {
    const word = fc.oneof(
      fc.constantFrom("get", "list", "set", "create", "delete", "send", "run", "file", "user", "read", "mark", "tree"),
      fc.string({ maxLength: 8 }),
    );
    const name = fc.array(word, { maxLength: 5 }).chain((ws) => fc.constantFrom("_", "-", ".", "").map((sep) => ws.join(sep)));
    const hints = fc.record(
      {
        readOnlyHint: fc.option(fc.boolean()),
        destructiveHint: fc.option(fc.boolean()),
        idempotentHint: fc.option(fc.boolean()),
        openWorldHint: fc.option(fc.boolean()),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(name, hints, (n, h) => {
        const annotations: JsonObject = {};
        for (const [k, v] of Object.entries(h)) if (typeof v === "boolean") annotations[k] = v;
        const bare = classifyName(n);
        const c = classifyName(n, annotations);
        if (bare.source !== "default") return atLeastAsGuarded(bare, c);
        return c.source === "default" || (c.source === "heuristic:read_hint" && annotations.readOnlyHint === true);
      }),
      { numRuns: 500 },
    );
  });

  it("heuristic() alone is null exactly when the default applies", () => {
    expect(heuristic(tool("directory_tree"))).toBeNull();
    expect(heuristic(tool("get_user"))?.source).toBe("heuristic:read");
  });
});

describe("classification banner", () => {
  const mapped: ToolMapping = { effect: "irreversible", approval: "required", arguments: "hashed" };
  const pinnedTool = tool("pinned", undefined, { type: "object", properties: { a: { type: "string" } } });
  const mappings: Mappings = {
    loaded: true,
    get: (u, t) =>
      u !== "alpha"
        ? undefined
        : t === "pay"
          ? mapped
          : t === "get_user"
            ? { effect: "read_only", approval: "none", arguments: "hashed" }
            : t === "pinned"
              ? { effect: "read_only", approval: "none", arguments: "hashed", schemaHash: "0".repeat(64) }
              : t === "pinned_ok"
                ? { effect: "read_only", approval: "none", arguments: "hashed", schemaHash: tool("pinned_ok").schemaHash }
                : undefined,
  };
  const tools = [
    { upstream: "alpha", tool: tool("pay") },
    { upstream: "alpha", tool: tool("get_user") },
    { upstream: "alpha", tool: pinnedTool },
    { upstream: "alpha", tool: tool("pinned_ok") },
    { upstream: "beta", tool: tool("get_user") },
    { upstream: "beta", tool: tool("tree", { readOnlyHint: true }) },
    { upstream: "beta", tool: tool("create_issue") },
    { upstream: "beta", tool: tool("get_secret", { destructiveHint: true }) },
    { upstream: "beta", tool: tool("gzip") },
  ];

  it("one line per tool: OK mapped, NOTE heuristic read, WARN heuristic write, BLOCK default or drift; totals", () => {
    const b = classificationBanner(tools, mappings);
    expect(b.lines.map((l) => [l.upstream, l.tool, l.level])).toEqual([
      ["alpha", "pay", "OK"],
      ["alpha", "get_user", "OK"],
      ["alpha", "pinned", "BLOCK"],
      ["alpha", "pinned_ok", "OK"],
      ["beta", "get_user", "NOTE"],
      ["beta", "tree", "NOTE"],
      ["beta", "create_issue", "WARN"],
      ["beta", "get_secret", "WARN"],
      ["beta", "gzip", "BLOCK"],
    ]);
    expect(b.totals).toEqual({ OK: 3, NOTE: 2, WARN: 2, BLOCK: 2 });
    expect(b.lines[0]?.why).toBe("mapped: irreversible, approval required");
    expect(b.lines[2]?.why).toMatch(/schema drifted \(pinned 000000000000…, now [0-9a-f]{12}…\)/);
    expect(b.lines[5]?.why).toMatch(/heuristic:read_hint/);
    expect(b.lines[7]?.why).toMatch(/irreversible write \(heuristic:destructive_hint\)/);
    expect(b.lines[8]?.why).toMatch(/blocked in enforce/);
  });

  it("formatBanner prints the totals and an aligned line per tool", () => {
    const text = formatBanner(classificationBanner(tools, mappings));
    const lines = text.split("\n");
    expect(lines[0]).toBe("Portcullis classification: 9 tools — 3 OK, 2 NOTE, 2 WARN, 2 BLOCK");
    expect(lines).toHaveLength(10);
    expect(lines[1]).toMatch(/^ {2}OK {4}alpha\/pay +mapped: irreversible, approval required$/);
    expect(lines[9]).toMatch(/^ {2}BLOCK beta\/gzip +unclassified/);
    const col = lines[1]!.indexOf("mapped");
    expect(lines.slice(1).every((l) => /\S/.test(l[col] ?? "") && l[col - 1] === " ")).toBe(true);
    expect(formatBanner(classificationBanner([], NO_MAPPINGS))).toBe("Portcullis classification: 0 tools — 0 OK, 0 NOTE, 0 WARN, 0 BLOCK");
  });
});
