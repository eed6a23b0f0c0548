/**
 * The mapping schema (src/config/mapping-schema.ts): field conversion to the camelCase shape
 * governance reads, defaults, strictness, the retry rule, every problem reported with its path,
 * and every starter mapping in mappings/*.yaml parsing cleanly and naming real, distinct tools.
 */
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { mappingFileSchema, parseMappingFile, parseMappings, type ToolMapping as ConfigToolMapping, toToolMapping } from "../../src/config/mapping-schema.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";

// Vite inlines the files' text at build time: the test reads the starter mappings as they are.
const starters = Object.fromEntries(
  Object.entries(import.meta.glob("../../mappings/*.yaml", { query: "?raw", import: "default", eager: true }) as Record<string, string>).map(([k, v]) => [
    k.replace(/^.*\//, ""),
    v,
  ]),
);

const HASH = "ab".repeat(32);

describe("mapping schema", () => {
  it("converts every field to the shape governance reads, and the two ToolMapping types agree", () => {
    const parsed = mappingFileSchema.parse({
      tools: {
        pay: {
          effect: "irreversible",
          verb: "pay",
          axes: { reversibility: "irreversible", blast_radius: "scoped", externality: "external" },
          permission: "payments:send",
          approval: "required",
          magnitude: { from_arg: "order.amount" },
          timeout: "30s",
          schema_hash: HASH.toUpperCase(),
          arguments: "redacted",
          compensation: { tool: "refund", arguments: { id: "$result.id" } },
        },
        lookup: { effect: "read_only", timeout: 1500, retry: { attempts: 3, backoff: "250ms" } },
        refund: { effect: "irreversible" },
      },
    });
    const pay = toToolMapping(parsed.tools.pay!);
    expect(pay).toEqual({
      effect: "irreversible",
      verb: "pay",
      axes: { reversibility: "irreversible", blastRadius: "scoped", externality: "external" },
      permission: "payments:send",
      approval: "required",
      magnitude: { fromArg: "order.amount" },
      timeoutMs: 30_000,
      schemaHash: HASH,
      arguments: "redacted",
      compensation: { tool: "refund", arguments: { id: "$result.id" }, approval: "none" },
    });
    expect(toToolMapping(parsed.tools.lookup!)).toEqual({
      effect: "read_only",
      approval: "none",
      arguments: "hashed",
      timeoutMs: 1500,
      retry: { attempts: 3, backoffMs: 250 },
    });
    // Both directions assign without a cast: config's type is steps.ts's, field for field.
    const forGovernance: ToolMapping = pay;
    const back: ConfigToolMapping = forGovernance;
    expect(back.schemaHash).toBe(HASH);
  });

  it("defaults: approval none, arguments hashed, retry backoff 200 ms", () => {
    const r = parseMappingFile({ tools: { t: { effect: "idempotent", retry: { attempts: 2 } } } }, "mappings/x.yaml");
    expect(r.problems).toEqual([]);
    expect(r.tools.t).toEqual({ effect: "idempotent", approval: "none", arguments: "hashed", retry: { attempts: 2, backoffMs: 200 } });
  });

  it("refuses a retry on a tool that is neither read_only nor idempotent", () => {
    for (const effect of ["reversible", "irreversible"]) {
      const r = parseMappingFile({ tools: { wire_money: { effect, retry: { attempts: 2, backoff: "1s" } } } }, "mappings/bank.yaml");
      expect(r.problems).toEqual([
        `mappings/bank.yaml.tools.wire_money.retry: retries only for read_only and idempotent tools (this tool's effect is ${effect})`,
      ]);
      expect(r.tools).toEqual({});
    }
  });

  it("rejects unknown fields at every level and bad values, every problem at once with its path", () => {
    const r = parseMappingFile(
      {
        tools: {
          a: { effect: "read_only", colour: "red" },
          b: { effect: "sideways" },
          c: { effect: "read_only", axes: { blast_radius: "planet" } },
          d: { effect: "read_only", retry: { attempts: 9 } },
          e: { effect: "read_only", timeout: "soon" },
          f: { effect: "read_only", schema_hash: "abc" },
          g: { effect: "read_only", magnitude: { from_arg: "a..b" } },
          h: { effect: "read_only", arguments: "plain" },
          "x.y": { effect: "read_only", approval: "maybe" },
          i: { effect: "read_only", compensation: "undo" },
        },
        extra: true,
      },
      "mappings/m.yaml",
    );
    const paths = r.problems.map((p) => p.slice(0, p.indexOf(": ")));
    expect(paths).toEqual(
      expect.arrayContaining([
        "mappings/m.yaml",
        "mappings/m.yaml.tools.a",
        "mappings/m.yaml.tools.b.effect",
        "mappings/m.yaml.tools.c.axes.blast_radius",
        "mappings/m.yaml.tools.d.retry.attempts",
        "mappings/m.yaml.tools.e.timeout",
        "mappings/m.yaml.tools.f.schema_hash",
        "mappings/m.yaml.tools.g.magnitude.from_arg",
        "mappings/m.yaml.tools.h.arguments",
        'mappings/m.yaml.tools["x.y"].approval',
        "mappings/m.yaml.tools.i.compensation",
      ]),
    );
    expect(r.problems.length).toBe(11);
    expect(r.problems).toContain('mappings/m.yaml.tools.a: unknown key "colour"');
    expect(r.problems).toContain('mappings/m.yaml: unknown key "extra"');
    expect(r.tools).toEqual({});
  });

  it("an empty file is a problem, and a tool needs an effect", () => {
    expect(parseMappingFile(null, "mappings/empty.yaml").problems).toEqual(["mappings/empty.yaml: is empty (expected `tools:`)"]);
    expect(parseMappingFile({ tools: { t: {} } }, "f").problems).toEqual([expect.stringMatching(/^f\.tools\.t\.effect: /)]);
  });

  it("parseMappings reads the inline section per upstream, reporting every upstream's problems", () => {
    const r = parseMappings({
      github: { tools: { get_me: { effect: "read_only" } } },
      memory: { tools: { delete_entities: { effect: "irreversible", retry: { attempts: 1 } } } },
      Bad_Name: { tools: {} },
      fs: { tools: { read: { effect: "read_only", nope: 1 } } },
    });
    expect(Object.keys(r.mappings)).toEqual(["github"]);
    expect(r.mappings.github?.get_me).toEqual({ effect: "read_only", approval: "none", arguments: "hashed" });
    expect(r.problems).toEqual([
      "mappings.memory.tools.delete_entities.retry: retries only for read_only and idempotent tools (this tool's effect is irreversible)",
      'mappings.Bad_Name: "Bad_Name" is not an upstream name (must match ^[a-z][a-z0-9-]{0,30}$)',
      expect.stringMatching(/^mappings\.fs\.tools\.read: .*nope/),
    ]);
    expect(parseMappings(undefined)).toEqual({ mappings: {}, problems: [] });
    expect(parseMappings(["x"]).problems).toEqual(["mappings: must be a mapping of upstream name to { tools: … }"]);
  });
});

describe("starter mappings (mappings/*.yaml)", () => {
  it("there are the four starter files", () => {
    expect(Object.keys(starters).sort()).toEqual(["everything.yaml", "filesystem.yaml", "github.yaml", "memory.yaml"]);
  });

  for (const [file, text] of Object.entries(starters)) {
    it(`${file} parses with the schema and says what it was verified against`, () => {
      expect(text.startsWith("# ")).toBe(true);
      expect(text.split("\n").slice(0, 4).join("\n")).toMatch(/Verified against/);
      const r = parseMappingFile(parseYaml(text, { uniqueKeys: true }), `mappings/${file}`);
      expect(r.problems).toEqual([]);
      const tools = Object.entries(r.tools);
      expect(tools.length).toBeGreaterThan(5);
      // Every tool carries its annotations in a comment next to its mapping.
      const lines = text.split("\n");
      for (const [name] of tools) {
        const i = lines.findIndex((l) => l.startsWith(`  ${name}:`));
        expect(i, name).toBeGreaterThan(0);
        expect(`${lines[i - 1]}\n${lines[i]}`, name).toMatch(/ro (true|false|-)/);
      }
      // A retry is only ever asked for a read or an idempotent tool (the schema enforces it).
      for (const [, m] of tools) if (m.retry) expect(["read_only", "idempotent"]).toContain(m.effect);
    });
  }

  it("the starter files name the tools their packages publish", () => {
    const names = (f: string) => Object.keys(parseMappingFile(parseYaml(starters[f]!), f).tools).sort();
    expect(names("everything.yaml")).toEqual(
      [
        "echo",
        "get-annotated-message",
        "get-env",
        "get-resource-links",
        "get-resource-reference",
        "get-roots-list",
        "get-structured-content",
        "get-sum",
        "get-tiny-image",
        "gzip-file-as-resource",
        "simulate-research-query",
        "toggle-simulated-logging",
        "toggle-subscriber-updates",
        "trigger-elicitation-request",
        "trigger-elicitation-request-async",
        "trigger-long-running-operation",
        "trigger-sampling-request",
        "trigger-sampling-request-async",
        "trigger-url-elicitation",
      ].sort(),
    );
    expect(names("filesystem.yaml")).toEqual(
      [
        "create_directory",
        "directory_tree",
        "edit_file",
        "get_file_info",
        "list_allowed_directories",
        "list_directory",
        "list_directory_with_sizes",
        "move_file",
        "read_file",
        "read_media_file",
        "read_multiple_files",
        "read_text_file",
        "search_files",
        "write_file",
      ].sort(),
    );
    expect(names("memory.yaml")).toEqual(
      [
        "add_observations",
        "create_entities",
        "create_relations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
        "open_nodes",
        "read_graph",
        "search_nodes",
      ].sort(),
    );
    const gh = parseMappingFile(parseYaml(starters["github.yaml"]!), "github").tools;
    expect(Object.keys(gh)).toHaveLength(117);
    expect(gh.delete_repository).toMatchObject({ effect: "irreversible", approval: "required" });
    expect(gh.get_me).toMatchObject({ effect: "read_only" });
  });
});
