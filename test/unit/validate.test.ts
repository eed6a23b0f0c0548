/**
 * Schema checks (src/governance/validate.ts): arguments against the tool's inputSchema with the
 * JSON Schema 2020-12 features tools use ($ref, $defs, $anchor, if/then/else, anyOf/oneOf/allOf,
 * prefixItems, unevaluatedProperties), the conformance fixture's `json_schema_2020_12_tool`,
 * draft selection from `$schema`, references outside the schema never fetched (fetch is replaced
 * by a spy), broken schemas as violations rather than crashes, drift against a pinned hash, the
 * first five problems in the reason, the bounded compile cache, and output checks.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { type CatalogTool, catalogEntry } from "../../src/governance/catalog-entry.ts";
import type { Target } from "../../src/governance/steps.ts";
import type { ToolMapping } from "../../src/config/mapping-schema.ts";
import { compiledSchemaCount, draftOf, validateCall, validateOutput } from "../../src/governance/validate.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";
import { testUpstream } from "./fixtures.ts";

// The fixture's schema, loaded through Vite at run time (a static import would pull the fixture's
// Node-only modules into the Workers typecheck; content.ts itself imports only types).
const fixture = Object.values(import.meta.glob("../fixtures/conformance-upstream/content.ts", { eager: true }))[0] as
  | { JSON_SCHEMA_2020_12: JsonObject }
  | undefined;
const JSON_SCHEMA_2020_12 = fixture?.JSON_SCHEMA_2020_12 ?? {};

const up: UpstreamConfig = testUpstream();

function target(inputSchema: JsonObject, outputSchema?: JsonObject, name = "t"): Target {
  const def: JsonObject = { name, inputSchema };
  if (outputSchema) def.outputSchema = outputSchema;
  return { upstream: up, tool: catalogEntry(def, `alpha__${name}`) as CatalogTool };
}
const mapping = (schemaHash?: string): ToolMapping => ({ effect: "read_only", approval: "none", arguments: "hashed", ...(schemaHash ? { schemaHash } : {}) });
const ok = (t: Target, args: JsonObject | undefined) => expect(validateCall(t, args, undefined)).toBeNull();
function refused(t: Target, args: JsonObject | undefined): string {
  const r = validateCall(t, args, undefined);
  expect(r?.check).toBe("schema");
  expect(r?.reason.startsWith("arguments do not match the tool's inputSchema: ")).toBe(true);
  return r!.reason;
}

describe("the conformance fixture's json_schema_2020_12_tool", () => {
  const t = target(JSON_SCHEMA_2020_12, undefined, "json_schema_2020_12_tool");
  it("accepts valid arguments", () => {
    expect(JSON_SCHEMA_2020_12.$schema).toBe("https://json-schema.org/draft/2020-12/schema"); // the fixture really loaded
    ok(t, { name: "Ada", email: "ada@example.com" });
    ok(t, { name: "Ada", contactMethod: "phone", phone: "+1 555 0100" });
    ok(t, { contactMethod: "email", email: "a@b.c", address: { street: "1 Main St", city: "Springfield" } });
    ok(t, { phone: "1", email: "e" }); // no contactMethod: the else branch wants email, anyOf is met
  });
  it("refuses invalid arguments, naming the problem", () => {
    expect(refused(t, { name: "Ada" })).toMatch(/does not match any subschemas.*required property "phone".*required property "email"/);
    expect(refused(t, { contactMethod: "phone", email: "a@b.c" })).toMatch(/\/: Instance does not have required property "phone"/); // if → then
    expect(refused(t, { phone: "1" })).toMatch(/required property "email"/); // else
    expect(refused(t, { email: "a@b.c", address: { city: 42 } })).toMatch(/\/address\/city: Instance type "number" is invalid\. Expected "string"/); // via $ref
    expect(refused(t, { email: "a@b.c", contactMethod: "fax" })).toMatch(/\/contactMethod: Instance does not match any of \["phone","email"\]/);
    expect(refused(t, { email: "a@b.c", nickname: "x" })).toMatch(/\/: Property "nickname" does not match additional properties schema/);
    expect(refused(t, { email: 7 })).toMatch(/\/email: Instance type "number"/);
  });
  it("leaves the catalog's schema exactly as the upstream listed it", () => {
    const before = JSON.stringify(JSON_SCHEMA_2020_12);
    validateCall(t, { email: 1 }, undefined);
    expect(JSON.stringify(t.tool.inputSchema)).toBe(before);
    const walk = (v: unknown): boolean =>
      typeof v !== "object" ||
      v === null ||
      (Object.getOwnPropertyNames(v).every((k) => Object.keys(v).includes(k) || k === "length") && Object.values(v).every(walk));
    expect(walk(t.tool.inputSchema)).toBe(true); // no hidden properties added
  });
});

describe("JSON Schema 2020-12 features", () => {
  it("$ref into $defs, $anchor references, and nested $ref chains", () => {
    const t = target({
      type: "object",
      $defs: {
        id: { $anchor: "ident", type: "string", pattern: "^[a-z]+-[0-9]+$" },
        pair: { type: "array", prefixItems: [{ $ref: "#ident" }, { $ref: "#/$defs/count" }], items: false },
        count: { type: "integer", minimum: 1 },
      },
      properties: { id: { $ref: "#ident" }, pair: { $ref: "#/$defs/pair" } },
      required: ["id"],
    });
    ok(t, { id: "ab-12", pair: ["cd-3", 4] });
    expect(refused(t, { id: "AB" })).toMatch(/\/id: String does not match pattern/);
    expect(refused(t, { id: "ab-1", pair: ["cd-3", 0] })).toMatch(/\/pair\/1: 0 is less than 1/);
    expect(refused(t, { id: "ab-1", pair: ["cd-3", 1, 2] })).toMatch(/\/pair/);
  });

  it("oneOf (exactly one), allOf, if/then/else, unevaluatedProperties", () => {
    const t = target({
      type: "object",
      properties: { kind: { enum: ["card", "bank"] }, amount: { type: "number" } },
      oneOf: [{ required: ["card"] }, { required: ["iban"] }],
      allOf: [{ required: ["amount"] }, { properties: { amount: { exclusiveMinimum: 0 } } }],
      if: { properties: { kind: { const: "card" } }, required: ["kind"] },
      // biome-ignore lint/suspicious/noThenProperty: `then` is the JSON Schema keyword under test
      then: { properties: { card: { type: "string", minLength: 12 } } },
      else: { properties: { iban: { type: "string", pattern: "^[A-Z]{2}" } } },
      unevaluatedProperties: false,
    });
    ok(t, { kind: "card", card: "4111111111111111", amount: 3 });
    ok(t, { kind: "bank", iban: "DE89", amount: 3 });
    expect(refused(t, { kind: "card", card: "4111111111111111", iban: "DE", amount: 3 })).toMatch(/oneOf|exactly one|more than one/i);
    expect(refused(t, { kind: "card", card: "4111", amount: 3 })).toMatch(/\/card: String is too short/);
    expect(refused(t, { kind: "bank", iban: "de", amount: 3 })).toMatch(/\/iban: String does not match pattern/);
    expect(refused(t, { kind: "card", card: "4111111111111111", amount: 0 })).toMatch(/\/amount: 0 is less than 0/);
    expect(refused(t, { kind: "card", card: "4111111111111111", amount: 1, extra: true })).toMatch(/extra/);
  });

  it("no arguments are checked as {}; an empty schema accepts anything", () => {
    expect(refused(target({ type: "object", required: ["q"] }), undefined)).toMatch(/required property "q"/);
    ok(target({}), undefined);
    ok(target({}), { anything: [1, { deep: true }] });
  });

  it("the dialect comes from $schema: draft-07 ignores $ref siblings, 2020-12 applies them", () => {
    const body = { type: "object", properties: { a: { $ref: "#/definitions/s", maxLength: 1 } }, definitions: { s: { type: "string" } } };
    const d7 = target({ $schema: "http://json-schema.org/draft-07/schema#", ...body });
    const d2020 = target({ $schema: "https://json-schema.org/draft/2020-12/schema", ...body });
    ok(d7, { a: "abc" });
    expect(refused(d2020, { a: "abc" })).toMatch(/\/a: String is too long/);
    expect(draftOf({})).toBe("2020-12");
    expect(draftOf({ $schema: "https://json-schema.org/draft/2019-09/schema" })).toBe("2019-09");
    expect(draftOf({ $schema: "http://json-schema.org/draft-04/schema#" })).toBe("4");
    expect(draftOf({ $schema: "https://example.com/my-dialect" })).toBe("2020-12");
  });
});

describe("references outside the schema are never fetched; broken schemas are violations, not crashes", () => {
  const realFetch = globalThis.fetch;
  const calls: unknown[] = [];
  beforeEach(() => {
    calls.length = 0;
    globalThis.fetch = (async (...args: unknown[]) => {
      calls.push(args);
      return new Response("{}", { headers: { "content-type": "application/schema+json" } });
    }) as typeof fetch;
  });
  afterEach(() => {
    globalThis.fetch = realFetch;
  });

  it("a network $ref is refused with a clear reason and fetch is never called", async () => {
    const refs = [
      "https://example.com/schemas/user.json",
      "http://127.0.0.1:1/schema.json",
      "user.json#/$defs/name",
      "https://json-schema.org/draft/2020-12/schema",
    ];
    for (const [i, ref] of refs.entries()) {
      const t = target({ $id: `https://gw.example/tool-${i}.json`, type: "object", properties: { u: { $ref: ref } } }, undefined, `net${i}`);
      const reason = refused(t, { u: { name: "x" } });
      expect(reason).toMatch(/cannot be evaluated: Unresolved \$ref/);
      expect(reason).toMatch(/never fetched/);
    }
    // The library is synchronous and has no loader; give any stray promise a chance to run anyway.
    await new Promise((r) => setTimeout(r, 20));
    expect(calls).toHaveLength(0);
    expect(globalThis.fetch).not.toBe(realFetch); // the spy was really in place
  });

  it("a $ref the instance never reaches does not refuse the call", () => {
    ok(target({ type: "object", properties: { u: { $ref: "https://example.com/u.json" } } }, undefined, "lazy"), { other: 1 });
    expect(calls).toHaveLength(0);
  });

  it("an $id-addressed schema inside the document resolves locally", () => {
    const t = target({
      $id: "https://schemas.example/root.json",
      type: "object",
      properties: { n: { $ref: "https://schemas.example/name.json" } },
      $defs: { name: { $id: "https://schemas.example/name.json", type: "string" } },
    });
    ok(t, { n: "x" });
    expect(refused(t, { n: 1 })).toMatch(/\/n: Instance type "number"/);
    expect(calls).toHaveLength(0);
  });

  it("the never-fetched hint follows the lookup that found nothing, not the error's words", () => {
    // A pattern that cannot compile, whose text (and so the error's) reads "Unresolved $ref": no hint.
    const words = target({ type: "object", properties: { a: { type: "string", pattern: "Unresolved $ref ([" } } }, undefined, "words");
    const r = refused(words, { a: "x" });
    expect(r).toMatch(/cannot be evaluated: Invalid regular expression: \/Unresolved \$ref \(\[\//);
    expect(r).not.toMatch(/never fetched/);
    // After references that resolve, the one that does not gets the hint.
    const mixed = target(
      { type: "object", $defs: { s: { type: "string" } }, properties: { a: { $ref: "#/$defs/s" }, b: { $ref: "https://example.com/b.json" } } },
      undefined,
      "mixed",
    );
    expect(refused(mixed, { a: "x", b: 1 })).toMatch(
      /cannot be evaluated: Unresolved \$ref "https:\/\/example\.com\/b\.json"\. \(references outside the schema are never fetched\)$/,
    );
    expect(calls).toHaveLength(0);
  });

  it("an invalid pattern, a $ref loop and a duplicate $id are violations", () => {
    expect(refused(target({ type: "object", properties: { a: { type: "string", pattern: "([" } } }, undefined, "re"), { a: "x" })).toMatch(
      /cannot be evaluated/,
    );
    expect(refused(target({ $ref: "#" }, undefined, "loop"), {})).toMatch(/cannot be evaluated/);
    expect(
      refused(
        target({ type: "object", $defs: { a: { $id: "https://x.example/a.json" }, b: { $id: "https://x.example/a.json", type: "string" } } }, undefined, "dup"),
        {},
      ),
    ).toMatch(/cannot be compiled: Duplicate schema URI/);
  });
});

describe("drift and reasons", () => {
  const t = target({ type: "object", properties: { q: { type: "string" } }, required: ["q"] });

  it("a pinned hash the catalog no longer lists refuses the call, before any schema check", () => {
    const pinned = "f".repeat(64);
    const r = validateCall(t, { q: "ok" }, mapping(pinned));
    expect(r).toEqual({
      check: "drift",
      reason: `the tool's schema changed since its mapping was reviewed: the mapping pins ${pinned}, the upstream now lists ${t.tool.schemaHash}; calls are refused until the mapping is reviewed`,
    });
    expect(validateCall(t, { q: 1 }, mapping(pinned))?.check).toBe("drift");
  });

  it("a matching pin, or none, goes on to the schema check", () => {
    expect(validateCall(t, { q: "ok" }, mapping(t.tool.schemaHash))).toBeNull();
    expect(validateCall(t, { q: "ok" }, mapping())).toBeNull();
    expect(validateCall(t, { q: 1 }, mapping(t.tool.schemaHash))?.check).toBe("schema");
  });

  it("the reason names the first five problems and counts the rest", () => {
    const props: JsonObject = {};
    for (const k of ["a", "b", "c", "d", "e", "f", "g"]) props[k] = { type: "integer" };
    const many = target({ type: "object", properties: props }, undefined, "many");
    const reason = refused(many, { a: "1", b: "2", c: "3", d: "4", e: "5", f: "6", g: "7" });
    const listed = reason.slice("arguments do not match the tool's inputSchema: ".length).split("; ");
    expect(listed.slice(0, 5)).toEqual(["a", "b", "c", "d", "e"].map((k) => `/${k}: Instance type "string" is invalid. Expected "integer".`));
    expect(listed[5]).toBe("and 2 more");
    expect(listed).toHaveLength(6);
  });
});

describe("compile cache", () => {
  it("compiles each schema once and stays bounded", () => {
    const t = target({ type: "object", properties: { n: { type: "number" } } }, undefined, "cached");
    for (let i = 0; i < 50; i++) expect(validateCall(t, { n: i }, undefined)).toBeNull();
    for (let i = 0; i < 300; i++) validateCall(target({ type: "object", properties: { [`p${i}`]: { type: "string" } } }, undefined, `s${i}`), {}, undefined);
    expect(compiledSchemaCount()).toBeLessThanOrEqual(256);
    expect(compiledSchemaCount()).toBeGreaterThan(200);
    // Evicted entries recompile correctly.
    expect(refused(t, { n: "x" })).toMatch(/\/n: Instance type "string"/);
  });
});

describe("validateOutput", () => {
  const out = { type: "object", properties: { total: { type: "number" }, items: { type: "array", items: { type: "string" } } }, required: ["total"] };
  const t = target({ type: "object" }, out, "withOut");
  it("problems of structuredContent against outputSchema; none when it conforms or there is no outputSchema", () => {
    expect(validateOutput(t, { total: 3, items: ["a"] })).toEqual([]);
    expect(validateOutput(t, { items: [1] })).toEqual([
      '/: Instance does not have required property "total".',
      '/items/0: Instance type "number" is invalid. Expected "string".',
    ]);
    expect(validateOutput(t, undefined)).toEqual(["the tool declares an outputSchema but its result carries no structuredContent"]);
    expect(validateOutput(target({ type: "object" }, undefined, "noOut"), { anything: 1 })).toEqual([]);
  });
  it("input and output schemas of one tool are cached apart", () => {
    const same = target({ type: "object", required: ["a"] }, { type: "object", required: ["b"] }, "both");
    expect(validateCall(same, { a: 1 }, undefined)).toBeNull();
    expect(validateOutput(same, { b: 1 })).toEqual([]);
    expect(validateOutput(same, { a: 1 })).toEqual(['/: Instance does not have required property "b".']);
  });
  it("caps the list at five problems and a count", () => {
    const p = validateOutput(t, { total: "x", items: [1, 2, 3, 4, 5, 6] });
    expect(p).toHaveLength(6);
    expect(p[5]).toBe("and 2 more");
  });
});
