/**
 * Obligations (src/governance/obligations.ts): parsing every kind, each shaping kind on realistic
 * results (JSON in text blocks, as the SDK's servers send it, and structuredContent), results
 * held back because they cannot carry an obligation (free text, binary resources, unknown
 * blocks, errors, tasks, non-row-shaped results under a filter), unknown and unusable
 * obligations in each mode, rate limits against history snapshots, the push-down `_meta`, inputs
 * never mutated (deep-frozen), and fast-check properties: shaping never throws on arbitrary
 * JSON results, and a mask leaves no unmasked property of its name.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HISTORY_WINDOW_MAX_MS } from "../../durable-objects/contract-history.ts";
import {
  MASKED,
  PUSH_DOWN_META,
  RATE_LIMIT_WINDOW_MAX_MS,
  REDACTED,
  checkBeforeDispatch,
  fullAudit,
  obligationProblems,
  obligationQueries,
  parseJsonPath,
  parseObligation,
  pushDownMeta,
} from "../../src/governance/obligations.ts";
import { applyResultObligations } from "../../src/governance/obligations-shape.ts";
import { historyKey, type HistorySnapshot, type Obligation } from "../../src/governance/steps.ts";
import type { Json, JsonObject, JsonRpcResponse } from "../../src/wire/jsonrpc.ts";

/** Parses specs the way a policy load would; a spec that does not parse fails the test. */
function obl(...specs: string[]): Obligation[] {
  return specs.map((s) => {
    const o = parseObligation(s);
    if (typeof o === "string") throw new Error(o);
    return o;
  });
}
function deepFreeze<T>(v: T): T {
  if (v && typeof v === "object") {
    for (const x of Object.values(v)) deepFreeze(x);
    Object.freeze(v);
  }
  return v;
}
const answer = (result: JsonObject): JsonRpcResponse => deepFreeze({ jsonrpc: "2.0", id: 7, result });
const textResult = (value: unknown, indent?: number): JsonRpcResponse => answer({ content: [{ type: "text", text: JSON.stringify(value, null, indent) }] });
/** What the SDK's servers send for a tool with an outputSchema: the structured value, and its JSON in a text block. */
const structured = (value: unknown): JsonRpcResponse =>
  answer({ content: [{ type: "text", text: JSON.stringify(value) }], structuredContent: structuredClone(value) as JsonObject });

function shaped(specs: string[], response: JsonRpcResponse) {
  const before = structuredClone(response);
  const out = applyResultObligations(obl(...specs), response);
  expect(response).toEqual(before);
  if (!out.ok) throw new Error(`held back: ${out.refusal.reason}`);
  return out;
}
function held(specs: string[] | Obligation[], response: JsonRpcResponse): string {
  const out = applyResultObligations(typeof specs[0] === "string" ? obl(...(specs as string[])) : (specs as Obligation[]), response);
  if (out.ok) throw new Error("expected the result to be held back");
  expect(out.refusal.check).toBe("obligation");
  expect(out.refusal.reason).toMatch(/^the result was held back: /);
  return out.refusal.reason;
}
const textOf = (r: JsonRpcResponse, i = 0) => (r.result!.content as Array<{ text: string }>)[i]!.text;
const jsonOf = (r: JsonRpcResponse, i = 0) => JSON.parse(textOf(r, i)) as Json;

const USERS: { users: JsonObject[]; total: number } = {
  users: [
    { id: 1, name: "Ada", email: "ada@example.com", team: "blue", active: true, profile: { phone: "+44 1", email: "ada@home.example" } },
    { id: 2, name: "Bob", email: "bob@example.com", team: "red", active: false, profile: { phone: "+44 2" } },
    { id: 3, name: "Cy", email: "cy@example.com", team: "blue", active: false, profile: null },
  ],
  total: 3,
};

describe("parseObligation", () => {
  it("parses the known kinds, and unknown well-formed kinds (refused at call time, not at load)", () => {
    expect(parseObligation("audit:full")).toEqual({ kind: "audit", arg: "full", spec: "audit:full" });
    expect(parseObligation("redact:$.a[*].b")).toEqual({ kind: "redact", arg: "$.a[*].b", spec: "redact:$.a[*].b" });
    expect(parseObligation("mask:email")).toEqual({ kind: "mask", arg: "email", spec: "mask:email" });
    expect(parseObligation("filter:team=blue")).toEqual({ kind: "filter", arg: "team=blue", spec: "filter:team=blue" });
    expect(parseObligation("filter:team=")).toEqual({ kind: "filter", arg: "team=", spec: "filter:team=" });
    expect(parseObligation("rate_limit:5/1m")).toEqual({ kind: "rate_limit", arg: "5/1m", spec: "rate_limit:5/1m" });
    expect(parseObligation("encrypt:aes")).toEqual({ kind: "encrypt", arg: "aes", spec: "encrypt:aes" });
    expect(parseObligation("notify")).toEqual({ kind: "notify", spec: "notify" });
  });

  it("names what is wrong with a malformed spec or an argument a known kind cannot use", () => {
    const bad: Array<[string, RegExp]> = [
      ["", /non-empty/],
      [":x", /kind/],
      ["Mask:email", /kind/],
      ["audit", /full/],
      ["audit:some", /full/],
      ["mask", /field/],
      ["mask:", /field/],
      ["redact:a.b", /starts with \$/],
      ["redact:$", /below \$/],
      ["redact:$.a[?(@.x)]", /bracket/],
      ["redact:$..*", /property name/],
      ["redact:$.a.", /property name/],
      ["filter:team", /field>=<value/],
      ["filter:=blue", /field>=<value/],
      ["rate_limit:5", /rate_limit:<n>\/<window>/],
      ["rate_limit:5/1d", /window/],
      ["rate_limit:0/1m", /at least one/],
      ["rate_limit:5/25h", /1 s to 24 h/],
      ["rate_limit:5/0s", /1 s to 24 h/],
      ["x".repeat(2000), /at most/],
    ];
    for (const [spec, why] of bad) expect(parseObligation(spec), spec).toMatch(why);
  });

  it("parses the JSONPath subset", () => {
    expect(parseJsonPath("$.a.b")).toEqual([
      { t: "child", name: "a" },
      { t: "child", name: "b" },
    ]);
    expect(parseJsonPath("$.a[*].b")).toEqual([{ t: "child", name: "a" }, { t: "any" }, { t: "child", name: "b" }]);
    expect(parseJsonPath("$..b")).toEqual([{ t: "descend", name: "b" }]);
    expect(parseJsonPath("$['x y'][2].*")).toEqual([{ t: "child", name: "x y" }, { t: "index", i: 2 }, { t: "any" }]);
    expect(parseJsonPath('$["a.b"]')).toEqual([{ t: "child", name: "a.b" }]);
  });

  it("the rate-limit window ends where history keeps rows", () => {
    expect(RATE_LIMIT_WINDOW_MAX_MS).toBe(HISTORY_WINDOW_MAX_MS);
  });
});

describe("mask", () => {
  it("masks every property of that name at any depth, in a JSON text block, keeping its layout", () => {
    const out = shaped(["mask:email"], textResult(USERS, 2));
    const v = jsonOf(out.response) as typeof USERS;
    expect(v.users.map((u) => u.email)).toEqual([MASKED, MASKED, MASKED]);
    expect(v.users[0]!.profile).toEqual({ phone: "+44 1", email: MASKED });
    expect(v.users[0]!.name).toBe("Ada");
    expect(textOf(out.response)).toContain('\n  "users": [');
    expect(textOf(out.response)).not.toContain("@example.com");
    expect(out.applied).toEqual(["mask:email"]);
  });

  it("masks structuredContent and its JSON text alike, hides a whole subtree, and keeps the rest of the result", () => {
    const r = answer({ ...structured(USERS).result!, isError: false, _meta: { trace: "t1" } });
    const out = shaped(["mask:profile"], r);
    const sc = out.response.result!.structuredContent as typeof USERS;
    expect(sc.users.map((u) => u.profile)).toEqual([MASKED, MASKED, MASKED]);
    expect(jsonOf(out.response)).toEqual(sc);
    expect(out.response.result!.isError).toBe(false);
    expect(out.response.result!._meta).toEqual({ trace: "t1" });
    expect(out.response.id).toBe(7);
  });

  it("leaves a result without the field byte-for-byte as it was (the same object)", () => {
    const r = textResult({ rows: [{ a: 1 }] }, 4);
    const out = shaped(["mask:email"], r);
    expect(out.response).toBe(r);
  });

  it("passes JSON scalars, blank text, images, audio and resource links; masks embedded JSON resources", () => {
    const r = answer({
      content: [
        { type: "text", text: "42" },
        { type: "text", text: "  " },
        { type: "image", data: "aGk=", mimeType: "image/png" },
        { type: "audio", data: "aGk=", mimeType: "audio/wav" },
        { type: "resource_link", uri: "file:///x", name: "x" },
        { type: "resource", resource: { uri: "file:///u.json", mimeType: "application/json", text: JSON.stringify({ email: "a@b" }) } },
      ],
    });
    const out = shaped(["mask:email"], r);
    const c = out.response.result!.content as JsonObject[];
    expect(c.slice(0, 5)).toEqual((r.result!.content as JsonObject[]).slice(0, 5));
    expect(JSON.parse((c[5]!.resource as { text: string }).text)).toEqual({ email: MASKED });
  });
});

describe("redact", () => {
  const order = {
    order: { id: "o-1", card: { number: "4111111111111111", exp: "12/30" }, token: "sek" },
    items: [
      { sku: "a", secret: "s1", meta: { secret: "s2" } },
      { sku: "b", secret: "s3" },
    ],
  };

  it("$.a.b, $.a[*].b and $..b select what JSONPath does", () => {
    const one = jsonOf(shaped(["redact:$.order.card.number"], textResult(order)).response) as typeof order;
    expect(one.order.card).toEqual({ number: REDACTED, exp: "12/30" });
    expect(one.order.token).toBe("sek");
    const each = jsonOf(shaped(["redact:$.items[*].secret"], textResult(order)).response) as typeof order;
    expect(each.items).toEqual([
      { sku: "a", secret: REDACTED, meta: { secret: "s2" } },
      { sku: "b", secret: REDACTED },
    ]);
    const deep = jsonOf(shaped(["redact:$..secret"], textResult(order)).response) as typeof order;
    expect(deep.items).toEqual([
      { sku: "a", secret: REDACTED, meta: { secret: REDACTED } },
      { sku: "b", secret: REDACTED },
    ]);
    const sub = jsonOf(shaped(["redact:$.order.card"], textResult(order)).response) as JsonObject;
    expect((sub.order as JsonObject).card).toBe(REDACTED);
  });

  it("indexes, wildcards over objects, nested descent and root arrays; a path that matches nothing changes nothing", () => {
    const list = [{ token: "t0", n: 1 }, { token: "t1" }];
    expect(jsonOf(shaped(["redact:$[0].token"], textResult(list)).response)).toEqual([{ token: REDACTED, n: 1 }, { token: "t1" }]);
    expect(jsonOf(shaped(["redact:$.order.*"], textResult(order)).response)).toMatchObject({ order: { id: REDACTED, card: REDACTED, token: REDACTED } });
    const nested = { a: { b: { c: 1, b: { c: 2 } } } };
    expect(jsonOf(shaped(["redact:$..b.c"], textResult(nested)).response)).toEqual({ a: { b: { c: REDACTED, b: { c: REDACTED } } } });
    const r = textResult(order);
    expect(shaped(["redact:$.nothing.here", "redact:$.items[9].secret"], r).response).toBe(r);
  });

  it("redacts structuredContent, and applies filters before redactions and masks", () => {
    const out = shaped(["mask:email", "redact:$..phone", "filter:team=blue"], structured(USERS));
    const sc = out.response.result!.structuredContent as JsonObject;
    expect(sc).toEqual({
      users: [
        { id: 1, name: "Ada", email: MASKED, team: "blue", active: true, profile: { phone: REDACTED, email: MASKED } },
        { id: 3, name: "Cy", email: MASKED, team: "blue", active: false, profile: null },
      ],
      total: 3,
    });
    expect(jsonOf(out.response)).toEqual(sc);
    expect(out.applied).toEqual(["mask:email", "redact:$..phone", "filter:team=blue"]);
  });
});

describe("row filters", () => {
  it("keeps only matching rows of a list, or of the one list an object holds; numbers and booleans match their JSON text", () => {
    const list = USERS.users;
    expect((jsonOf(shaped(["filter:team=red"], textResult(list)).response) as JsonObject[]).map((u) => u.id)).toEqual([2]);
    expect((jsonOf(shaped(["filter:active=false"], textResult(list)).response) as JsonObject[]).map((u) => u.id)).toEqual([2, 3]);
    expect((jsonOf(shaped(["filter:id=3"], textResult(list)).response) as JsonObject[]).map((u) => u.id)).toEqual([3]);
    expect(jsonOf(shaped(["filter:team=green"], textResult(list)).response)).toEqual([]);
    // A field a row lacks, or holding an object, never matches.
    expect(jsonOf(shaped(["filter:profile=null"], textResult(list)).response)).toEqual([list[2]]);
    const holder = jsonOf(shaped(["filter:team=blue"], structured(USERS)).response) as typeof USERS;
    expect(holder.users.map((u) => u.id)).toEqual([1, 3]);
    expect(holder.total).toBe(3);
    // Two filters: both must hold.
    expect((jsonOf(shaped(["filter:team=blue", "filter:active=true"], textResult(USERS)).response) as typeof USERS).users.map((u) => u.id)).toEqual([1]);
    // Empty lists have no rows to filter.
    const empty = textResult({ users: [], groups: [], total: 0 });
    expect(shaped(["filter:team=blue"], empty).response).toBe(empty);
  });

  it("holds back a result that is not row-shaped", () => {
    for (const value of [
      { users: USERS.users, groups: [{ team: "blue" }] }, // two lists: which are the rows?
      { users: USERS.users, extra: [{ team: "red" }, 5] }, // a list mixing rows and scalars next to the rows
      { data: { users: USERS.users } }, // the list is not held directly
      { name: "Ada" },
      [1, 2, 3],
      [{ a: 1 }, "x"],
      7,
    ] as Json[]) {
      expect(held(["filter:team=blue"], textResult(value)), JSON.stringify(value)).toMatch(/filter:team=blue cannot be applied to .*not row-shaped/);
    }
    expect(held(["filter:team=blue"], answer({ content: [], structuredContent: { name: "Ada" } }))).toMatch(/structuredContent: it is not row-shaped/);
  });
});

describe("results that cannot carry a shaping obligation are held back", () => {
  const cases: Array<[string, JsonRpcResponse, RegExp]> = [
    [
      "free text",
      answer({ content: [{ type: "text", text: "Ada <ada@example.com> is on team blue" }] }),
      /content block 0 \(text\): it is free text, not JSON/,
    ],
    ["a JSON string", textResult("email: ada@example.com"), /free text \(a JSON string\)/],
    ["free text next to structuredContent", answer({ content: [{ type: "text", text: "Found 3 users" }], structuredContent: USERS }), /free text/],
    ["an isError message", answer({ content: [{ type: "text", text: "Error: no such user ada@example.com" }], isError: true }), /free text/],
    ["a binary resource", answer({ content: [{ type: "resource", resource: { uri: "file:///a.bin", blob: "AAAA" } }] }), /binary or has no text/],
    ["an unknown block", answer({ content: [{ type: "hologram", data: "…" }] }), /type "hologram"/],
    ["a block that is not an object", answer({ content: ["text"] }), /not a content block/],
    ["a task", answer({ task: { taskId: "t-1", status: "working" } }), /no content list/],
    ["a JSON-RPC error", deepFreeze({ jsonrpc: "2.0", id: 7, error: { code: -32000, message: "user ada@example.com not found" } }), /error answer/],
  ];
  for (const [name, r, why] of cases)
    it(`${name}`, () => {
      for (const spec of ["mask:email", "redact:$..email", "filter:team=blue"]) expect(held([spec], r), spec).toMatch(why);
    });

  it("but passes them all when no obligation shapes the result (audit and rate limits only)", () => {
    for (const [, r] of cases) {
      const out = applyResultObligations(obl("audit:full", "rate_limit:5/1m"), r);
      expect(out).toEqual({ ok: true, response: r, applied: ["audit:full", "rate_limit:5/1m"] });
    }
    expect(applyResultObligations([], cases[0]![1])).toEqual({ ok: true, response: cases[0]![1], applied: [] });
  });
});

const NO_HISTORY: HistorySnapshot = { answers: {} };
const SEND = { upstream: "alpha", tool: "send" };
const facts = (history: HistorySnapshot = NO_HISTORY) => ({ exposedName: "alpha__send", identity: SEND, history });

describe("unknown and unusable obligations", () => {
  const unknown = obl("encrypt:aes");
  const unusable: Obligation[] = [
    { kind: "mask", spec: "mask" },
    { kind: "rate_limit", arg: "lots", spec: "rate_limit:lots" },
  ];

  it("refuse the call before dispatch in enforce, naming the obligation", () => {
    const r = checkBeforeDispatch(unknown, "enforce", facts());
    expect(r).toEqual({
      check: "obligation",
      reason: expect.stringMatching(
        /"encrypt:aes" is of a kind this gateway does not know \(it knows audit, redact, mask, filter, rate_limit\); the call was not sent/,
      ),
    });
    for (const o of unusable) expect(checkBeforeDispatch([o], "enforce", facts())?.reason).toMatch(new RegExp(`"${o.spec}" cannot be applied`));
    // The first problem refuses, even after known, satisfied obligations.
    expect(checkBeforeDispatch([...obl("mask:email", "audit:full"), ...unknown], "enforce", facts())?.reason).toMatch(/encrypt/);
  });

  it("are only reported in observe and advise", () => {
    for (const mode of ["observe", "advise"] as const) {
      expect(checkBeforeDispatch([...unknown, ...unusable], mode, facts())).toBeNull();
      expect(obligationProblems([...unknown, ...unusable], facts()).map((p) => p.reason)).toEqual([
        expect.stringMatching(/encrypt:aes/),
        expect.stringMatching(/"mask" cannot be applied/),
        expect.stringMatching(/"rate_limit:lots" cannot be applied/),
      ]);
    }
  });

  it("hold the result back if it is shaped with them anyway, and are never pushed down", () => {
    expect(held(unknown, textResult(USERS))).toMatch(/the obligation "encrypt:aes" is of a kind this gateway does not know/);
    expect(held([...obl("mask:email"), unusable[0]!], textResult(USERS))).toMatch(/"mask" cannot be applied/);
    expect(pushDownMeta([...unknown, ...unusable])).toBeUndefined();
  });

  it("known obligations that are satisfied refuse nothing in any mode", () => {
    for (const mode of ["enforce", "observe", "advise"] as const)
      expect(checkBeforeDispatch(obl("audit:full", "mask:email", "redact:$.a", "filter:x=1"), mode, facts())).toBeNull();
  });
});

describe("rate limits", () => {
  const limits = obl("rate_limit:2/1m", "rate_limit:100/1h", "rate_limit:3/60s");
  const queries = obligationQueries(limits, SEND);
  const snap = (perMinute: number, perHour: number): HistorySnapshot => ({
    answers: { [historyKey(queries[0]!)]: perMinute, [historyKey(queries[1]!)]: perHour },
  });

  it("ask history for the principal's calls to the tool, by its stable identity, within each distinct window", () => {
    expect(queries).toEqual([
      { kind: "count", tool: "send", upstream: "alpha", withinMs: 60_000, scope: "principal" },
      { kind: "count", tool: "send", upstream: "alpha", withinMs: 3_600_000, scope: "principal" },
    ]);
    expect(obligationQueries(obl("mask:email", "audit:full"), SEND)).toEqual([]);
  });

  it("refuse in enforce once the count reaches n (the third call of 2/1m), and only report in observe/advise", () => {
    expect(checkBeforeDispatch(limits, "enforce", facts(snap(0, 0)))).toBeNull();
    expect(checkBeforeDispatch(limits, "enforce", facts(snap(1, 50)))).toBeNull();
    expect(checkBeforeDispatch(limits, "enforce", facts(snap(2, 50)))).toEqual({
      check: "obligation",
      reason: 'rate limit "rate_limit:2/1m" reached: 2 calls of alpha__send in the last 1m (at most 2)',
    });
    expect(checkBeforeDispatch(limits, "enforce", facts(snap(1, 100)))?.reason).toMatch(/"rate_limit:100\/1h" reached: 100 calls/);
    expect(obligationProblems(limits, facts(snap(5, 100))).map((p) => p.reason)).toEqual([
      expect.stringMatching(/2\/1m/),
      expect.stringMatching(/100\/1h/),
      expect.stringMatching(/3\/60s/),
    ]);
    for (const mode of ["observe", "advise"] as const) expect(checkBeforeDispatch(limits, mode, facts(snap(5, 500)))).toBeNull();
  });

  it("refuse in enforce when the snapshot lacks the count (fail closed)", () => {
    expect(checkBeforeDispatch(limits, "enforce", facts(NO_HISTORY))?.reason).toMatch(/could not be checked/);
    expect(checkBeforeDispatch(limits, "enforce", facts({ answers: { [historyKey(queries[0]!)]: true } }))?.reason).toMatch(/could not be checked/);
  });
});

describe("push-down and audit", () => {
  it("passes the shaping obligations to the upstream's _meta, once each", () => {
    expect(pushDownMeta(obl("audit:full", "mask:email", "redact:$.a", "filter:team=blue", "rate_limit:1/1s", "mask:email"))).toEqual({
      [PUSH_DOWN_META]: ["mask:email", "redact:$.a", "filter:team=blue"],
    });
    expect(pushDownMeta(obl("audit:full", "rate_limit:1/1s"))).toBeUndefined();
    expect(pushDownMeta([])).toBeUndefined();
  });

  it("audit:full asks the ledger for the arguments in full", () => {
    expect(fullAudit(obl("audit:full"))).toBe(true);
    expect(fullAudit(obl("mask:email"))).toBe(false);
    expect(fullAudit([{ kind: "audit", arg: "partial", spec: "audit:partial" }])).toBe(false);
  });
});

describe("properties", () => {
  const specs = fc.constantFrom(
    "mask:email",
    "mask:a",
    "redact:$..a",
    "redact:$.a[*].b",
    "redact:$[0]",
    "filter:a=1",
    "filter:team=blue",
    "audit:full",
    "rate_limit:1/1m",
    "nope:x",
  );
  const block = fc.oneof(
    fc.jsonValue().map((v) => ({ type: "text", text: JSON.stringify(v) ?? "null" })),
    fc.string().map((text) => ({ type: "text", text })),
    fc.record({ type: fc.constantFrom("image", "audio", "resource_link", "resource", "other") }),
    fc.jsonValue(),
  );
  const response = fc
    .oneof(
      fc.record(
        { content: fc.array(block, { maxLength: 4 }), structuredContent: fc.option(fc.jsonValue(), { nil: undefined }) },
        { requiredKeys: ["content"] },
      ),
      fc.dictionary(fc.string(), fc.jsonValue()),
    )
    .map((result) => ({ jsonrpc: "2.0" as const, id: 1, result: JSON.parse(JSON.stringify(result)) as JsonObject }));

  it("applying obligations never throws on arbitrary JSON results, and never mutates them", () => {
    fc.assert(
      fc.property(fc.array(specs, { maxLength: 4 }), response, (ss, r) => {
        const before = structuredClone(r);
        const out = applyResultObligations(obl(...ss), deepFreeze(r));
        expect(r).toEqual(before);
        if (out.ok) expect(out.applied.every((s) => (ss as string[]).includes(s))).toBe(true);
        else expect(out.refusal.check).toBe("obligation");
      }),
      { numRuns: 1500 },
    );
  });

  it("a mask on arbitrary structured JSON always applies and leaves no property of its name unmasked", () => {
    const noneLeft = (v: Json): boolean =>
      Array.isArray(v)
        ? v.every(noneLeft)
        : v !== null && typeof v === "object"
          ? Object.entries(v).every(([k, x]) => (k === "a" ? x === MASKED : noneLeft(x)))
          : true;
    const objects = fc.dictionary(fc.constantFrom("a", "b", "c"), fc.jsonValue()).chain((o) => fc.constant(JSON.parse(JSON.stringify(o)) as JsonObject));
    fc.assert(
      fc.property(objects, (sc) => {
        const out = applyResultObligations(obl("mask:a"), answer({ content: [{ type: "text", text: JSON.stringify(sc) }], structuredContent: sc }));
        expect(out.ok).toBe(true);
        if (!out.ok) return;
        expect(noneLeft(out.response.result!.structuredContent!)).toBe(true);
        expect(noneLeft(jsonOf(out.response))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});
