/**
 * [G] Governance end to end on the production build (wrangler dev, workerd, no eval): four
 * gateways with one policy and one set of mappings — enforce, enforce with
 * `unclassified_reads: observe`, advise and observe — in front of server-everything, the
 * conformance fixture (for `json_schema_2020_12_tool`) and five recording upstreams, one per
 * concern, whose request logs prove what reached an upstream and what did not. Shows: a deny rule
 * blocks and the upstream sees nothing; advise adds its advisory block; observe forwards; schema
 * violations are blocked; an unknown obligation blocks; a mask hides a field of the result; a
 * grant's `budget.calls: 3` denies the fourth call from any session; a history rule denies the
 * third call within a minute; an unconditional deny hides a tool from tools/list; CEL conditions
 * decide; the 2020-12 tool validates; unmapped tools follow the baseline. Owns the gateways and
 * upstreams it starts. Must never: leave them running, or reach beyond 127.0.0.1.
 */
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";
import { closeSessions, grantFor, sessionClient, modern as sharedModern } from "./mcp.ts";

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
type Gateway = Proc & { url: string; origin: string };
// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

/** Recording upstreams, one per concern: `closed` (a deny rule), `ob` (an unknown obligation), `rec` (schemas, unmapped tools), `bud` (budget), `hist` (history). */
const REC = ["closed", "ob", "rec", "bud", "hist"] as const;
const rec = {} as Record<(typeof REC)[number], Upstream>;
let jwk = "";
let enforce: Gateway;
let reads: Gateway;
let advise: Gateway;
let observe: Gateway;

const config = (mode: "enforce" | "advise" | "observe", unclassifiedReads: "block" | "observe") => `
actor: local:governance
auth:
  required: true
egress:
  allow_loopback: true
mode: ${mode}
unclassified_reads: ${unclassifiedReads}
upstreams:
  - name: ev
    url: ${inject("everythingUrl")}
    timeout: 30s
  - name: conf
    url: ${inject("conformanceUrl")}
    timeout: 30s
${REC.map((n) => `  - name: ${n}\n    url: ${rec[n].url}\n    timeout: 30s`).join("\n")}
mappings:
  ev:
    tools:
      get-sum: { effect: read_only, verb: add }
      get-structured-content: { effect: read_only }
  conf:
    tools:
      json_schema_2020_12_tool: { effect: read_only }
${REC.map((n) => `  ${n}:\n    tools:\n      bump: { effect: idempotent }`).join("\n")}
policy:
  rules:
    - id: no-closed
      match: { tool: "closed__*" }
      decision: deny
      reason: the closed upstream is off limits
      owner: security@example.com
    - id: teleport
      match: { tool: ob__bump }
      decision: allow
      reason: allowed with an obligation this gateway does not know
      obligations: ["teleport:now"]
    - id: no-humidity
      match: { tool: ev__get-structured-content }
      decision: allow
      reason: weather without humidity
      obligations: ["mask:humidity"]
    - id: two-per-minute
      match: { tool: hist__bump }
      history: { count: { tool: hist__bump, within: 1m } }
      when: "history.count >= 2"
      decision: deny
      reason: at most 2 bumps per minute
    - id: big-sums
      match: { tool: ev__get-sum }
      when: "args.a > 100"
      decision: deny
      reason: sums of more than 100 need a human
`;

async function grant(gw: Gateway, sub: string, extra: { tools?: string[]; budget?: { calls: number } } = {}): Promise<string> {
  const { tools = ["*"], budget } = extra;
  return (await grantFor(jwk, gw.origin, { sub, team: "gov", roles: ["agent"], tools, ttlSeconds: 900, ...(budget ? { budget } : {}) })).token;
}

/** One 2026-07-28 request (no session, its own connection); the JSON-RPC answer, from JSON or SSE. */
const modern = (gw: Gateway, bearer: string, method: string, params: Record<string, unknown>): Promise<Any> => sharedModern(gw.url, bearer, method, params);
const call = async (gw: Gateway, bearer: string, name: string, args: Record<string, unknown> = {}) =>
  (await modern(gw, bearer, "tools/call", { name, arguments: args })).result;

/** A legacy (2025-11-25) SDK v2 client: its own session (ended after each test). */
const legacyClient = (gw: Gateway, bearer: string): Promise<Client> => sessionClient("governance-e2e", gw.url, bearer);
afterEach(closeSessions);

const calls = (u: Upstream) => u.log.filter((s) => s.method === "tools/call").length;
const texts = (r: Any): string[] => (Array.isArray(r?.content) ? r.content.filter((c: Any) => c.type === "text").map((c: Any) => c.text) : []);
/** Asserts a Portcullis refusal and returns its text. */
function blocked(r: Any, check: RegExp): string {
  expect(r?.isError, JSON.stringify(r)).toBe(true);
  const t = texts(r).join("\n");
  expect(t).toMatch(/^Blocked by Portcullis: /);
  expect(t).toMatch(check);
  return t;
}
const ADVISORY = "Portcullis advisory (nothing was blocked)";

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("governance-e2e")).privateJwk);
  for (const n of REC) rec[n] = await startModernOnlyUpstream();
  const start = async (mode: "enforce" | "advise" | "observe", unclassified: "block" | "observe"): Promise<Gateway> => {
    const port = await freePort();
    const gw = await startPortcullis(config(mode, unclassified), port, { PORTCULLIS_SIGNING_KEY: jwk });
    return { ...gw, origin: `http://127.0.0.1:${port}` };
  };
  const started = await Promise.allSettled([start("enforce", "block"), start("enforce", "observe"), start("advise", "block"), start("observe", "block")]);
  const ok = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  if (ok.length < started.length) {
    await Promise.all(ok.map((g) => g.stop()));
    throw (started.find((s) => s.status === "rejected") as PromiseRejectedResult).reason;
  }
  [enforce, reads, advise, observe] = ok as [Gateway, Gateway, Gateway, Gateway];
}, 300_000);
afterAll(async () => {
  await Promise.all([enforce, reads, advise, observe].map((g) => g?.stop()));
  await Promise.all(REC.map((n) => rec[n]?.close()));
});

describe("modes", () => {
  it("enforce: a deny rule blocks with its rule, check and owner, and the upstream sees nothing", async () => {
    const t = await grant(enforce, "agent:deny-enforce");
    const before = calls(rec.closed);
    const text = blocked(await call(enforce, t, "closed__bump"), /check: rule/);
    expect(text).toContain("rule: no-closed");
    expect(text).toContain("the closed upstream is off limits");
    expect(text).toContain("ask security@example.com");
    expect(text).toMatch(/decision: \S+/);
    // The same through a legacy session.
    const client = await legacyClient(enforce, t);
    blocked(await client.callTool({ name: "closed__bump", arguments: {} }), /rule: no-closed/);
    expect(calls(rec.closed)).toBe(before);
  });

  it("advise: the same deny lets the call run, and the result carries one advisory block naming the rule", async () => {
    const t = await grant(advise, "agent:deny-advise");
    const before = calls(rec.closed);
    const r = await call(advise, t, "closed__bump");
    expect(r.isError).not.toBe(true);
    const out = texts(r);
    expect(out).toHaveLength(2);
    expect(out[0]).toMatch(/^bumped \d+ listener/);
    expect(out[1]).toMatch(new RegExp(`^${ADVISORY.replace(/[()]/g, "\\$&")}: `));
    expect(out[1]).toContain("no-closed");
    expect(calls(rec.closed)).toBe(before + 1);
  });

  it("observe: the same deny forwards the call, with no advisory block", async () => {
    const t = await grant(observe, "agent:deny-observe");
    const before = calls(rec.closed);
    const r = await call(observe, t, "closed__bump");
    expect(r.isError).not.toBe(true);
    expect(r.content).toHaveLength(1);
    expect(texts(r)[0]).toMatch(/^bumped \d+ listener/);
    expect(JSON.stringify(r)).not.toContain(ADVISORY);
    expect(calls(rec.closed)).toBe(before + 1);
  });
});

describe("schema checks", () => {
  it("enforce: arguments that violate inputSchema are blocked (check schema) and the upstream sees nothing", async () => {
    const t = await grant(enforce, "agent:schema");
    // server-everything's get-sum wants numbers.
    const sum = blocked(await call(enforce, t, "ev__get-sum", { a: "five", b: 2 }), /check: schema/);
    expect(sum).toContain("/a");
    // The recording upstream's bump takes no properties (additionalProperties: false).
    const before = calls(rec.rec);
    blocked(await call(enforce, t, "rec__bump", { surprise: true }), /check: schema/);
    expect(calls(rec.rec)).toBe(before);
    // The same tool with valid arguments is forwarded (the count above can move).
    expect(texts(await call(enforce, t, "rec__bump", {}))[0]).toMatch(/^bumped/);
    expect(calls(rec.rec)).toBe(before + 1);
    // A valid get-sum runs.
    expect(texts(await call(enforce, t, "ev__get-sum", { a: 2, b: 3 }))).toEqual(["The sum of 2 and 3 is 5."]);
  });

  it("the conformance fixture's json_schema_2020_12_tool: valid arguments are forwarded, invalid ones blocked ($ref, $defs, allOf/anyOf, if/then/else)", async () => {
    const t = await grant(enforce, "agent:schema-2020");
    const name = "conf__json_schema_2020_12_tool";
    const valid = [
      { name: "Ada", contactMethod: "email", email: "ada@example.com", address: { street: "1 Main St", city: "Paris" } },
      { contactMethod: "phone", phone: "+33 1 23 45 67 89" },
      { email: "ada@example.com" },
    ];
    for (const args of valid) {
      const r = await call(enforce, t, name, args);
      expect(r.isError, JSON.stringify({ args, r })).not.toBe(true);
      expect(texts(r)[0]).toBe(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`);
    }
    const invalid: [Record<string, unknown>, string][] = [
      [{ name: "Ada" }, "neither phone nor email (allOf/anyOf)"],
      [{ contactMethod: "phone", email: "ada@example.com" }, "contactMethod phone without phone (if/then)"],
      [{ email: "ada@example.com", address: { street: "1 Main St", city: 75 } }, "address.city not a string ($ref to $defs)"],
      [{ email: "ada@example.com", nickname: "ada" }, "an extra property (additionalProperties: false)"],
      [{ email: "ada@example.com", contactMethod: "fax" }, "contactMethod outside its enum"],
    ];
    for (const [args, why] of invalid) {
      const text = blocked(await call(enforce, t, name, args), /check: schema/);
      expect(text, why).toContain("do not match the tool's inputSchema");
      expect(text, why).not.toContain("JSON Schema 2020-12 tool called with");
    }
  });
});

describe("obligations", () => {
  it("enforce: an unknown obligation on an allow rule blocks the call before dispatch", async () => {
    const t = await grant(enforce, "agent:teleport");
    const before = calls(rec.ob);
    const text = blocked(await call(enforce, t, "ob__bump"), /check: obligation/);
    expect(text).toContain("teleport:now");
    expect(calls(rec.ob)).toBe(before);
  });

  it("a mask hides a field of a JSON result, in structuredContent and in the JSON text block", async () => {
    const t = await grant(enforce, "agent:mask");
    const r = await call(enforce, t, "ev__get-structured-content", { location: "Chicago" });
    expect(r.isError, JSON.stringify(r)).not.toBe(true);
    expect(r.structuredContent).toEqual({ temperature: 36, conditions: "Light rain / drizzle", humidity: "****" });
    expect(JSON.parse(texts(r)[0]!)).toEqual({ temperature: 36, conditions: "Light rain / drizzle", humidity: "****" });
  });
});

describe("budgets and history", () => {
  it("a grant with budget.calls 3 gets its fourth call denied (check budget), whatever session or connection it comes from", async () => {
    const t = await grant(enforce, "agent:budget", { budget: { calls: 3 } });
    const before = calls(rec.bud);
    const first = await legacyClient(enforce, t);
    for (let i = 0; i < 2; i++) expect(texts(await first.callTool({ name: "bud__bump", arguments: {} }))[0]).toMatch(/^bumped/);
    const second = await legacyClient(enforce, t);
    expect(texts(await second.callTool({ name: "bud__bump", arguments: {} }))[0]).toMatch(/^bumped/);
    expect(calls(rec.bud)).toBe(before + 3);
    // Fourth: a 2026-07-28 request on a new connection, no session at all.
    const text = blocked(await call(enforce, t, "bud__bump"), /check: budget/);
    expect(text).toContain("3 of 3");
    // And again from yet another legacy session.
    const third = await legacyClient(enforce, t);
    blocked(await third.callTool({ name: "bud__bump", arguments: {} }), /check: budget/);
    expect(calls(rec.bud)).toBe(before + 3);
    // Another grant of the same principal has its own budget.
    const fresh = await grant(enforce, "agent:budget", { budget: { calls: 3 } });
    expect(texts(await call(enforce, fresh, "bud__bump"))[0]).toMatch(/^bumped/);
  });

  it("a history rule (at most 2 calls of a tool per minute) denies the third call", async () => {
    const t = await grant(enforce, "agent:history");
    const before = calls(rec.hist);
    const client = await legacyClient(enforce, t);
    expect(texts(await client.callTool({ name: "hist__bump", arguments: {} }))[0]).toMatch(/^bumped/);
    expect(texts(await call(enforce, t, "hist__bump"))[0]).toMatch(/^bumped/);
    const text = blocked(await call(enforce, t, "hist__bump"), /rule: two-per-minute/);
    expect(text).toContain("at most 2 bumps per minute");
    blocked(await client.callTool({ name: "hist__bump", arguments: {} }), /rule: two-per-minute/);
    expect(calls(rec.hist)).toBe(before + 2);
    // History is the principal's: another principal starts at zero.
    const other = await grant(enforce, "agent:history-2");
    expect(texts(await call(enforce, other, "hist__bump"))[0]).toMatch(/^bumped/);
  });
});

describe("lists follow policy", () => {
  it("a tool denied unconditionally is absent from tools/list; one whose deny depends on when/history is listed", async () => {
    const t = await grant(enforce, "agent:lister");
    const modernNames: string[] = (await modern(enforce, t, "tools/list", {})).result.tools.map((x: Any) => x.name);
    const client = await legacyClient(enforce, t);
    const legacyNames = (await client.listTools()).tools.map((x) => x.name);
    for (const names of [modernNames, legacyNames]) {
      expect(names.filter((n) => n.startsWith("closed__"))).toEqual([]);
      expect(names).toContain("ev__get-sum"); // big-sums depends on args
      expect(names).toContain("hist__bump"); // two-per-minute depends on history
      expect(names).toContain("rec__bump");
      expect(names).toContain("ob__bump");
    }
    // In advise nothing is hidden: the call would run.
    const a = await grant(advise, "agent:lister");
    const adviseNames: string[] = (await modern(advise, a, "tools/list", {})).result.tools.map((x: Any) => x.name);
    expect(adviseNames).toContain("closed__bump");
  });
});

describe("CEL in the production build", () => {
  it("when: 'args.a > 100' denies get-sum with a=500 and allows a=1", async () => {
    const t = await grant(enforce, "agent:cel");
    const text = blocked(await call(enforce, t, "ev__get-sum", { a: 500, b: 1 }), /rule: big-sums/);
    expect(text).toContain("sums of more than 100 need a human");
    expect(text).not.toContain("failed closed");
    expect(texts(await call(enforce, t, "ev__get-sum", { a: 1, b: 2 }))).toEqual(["The sum of 1 and 2 is 3."]);
    expect(texts(await call(enforce, t, "ev__get-sum", { a: 100, b: 0.5 }))).toEqual(["The sum of 100 and 0.5 is 100.5."]);
  });
});

describe("unmapped tools", () => {
  it("enforce blocks unmapped tools by default, read-only annotations or not; the upstream sees nothing", async () => {
    const t = await grant(enforce, "agent:unmapped");
    const text = blocked(await call(enforce, t, "ev__echo", { message: "hi" }), /check: baseline/);
    expect(text).toContain("unclassified");
    const before = calls(rec.rec);
    blocked(await call(enforce, t, "rec__ask_roots"), /unclassified/);
    expect(calls(rec.rec)).toBe(before);
  });

  it("unclassified_reads: observe runs an unmapped tool its server annotates readOnlyHint, and still blocks the others", async () => {
    const t = await grant(reads, "agent:reads");
    const r = await call(reads, t, "ev__echo", { message: "hi" });
    expect(r.isError, JSON.stringify(r)).not.toBe(true);
    expect(texts(r)).toEqual(["Echo: hi"]);
    // readOnlyHint: false on server-everything's toggle-simulated-logging; no annotations at all on ask_roots.
    blocked(await call(reads, t, "ev__toggle-simulated-logging"), /unclassified/);
    const before = calls(rec.rec);
    blocked(await call(reads, t, "rec__ask_roots"), /unclassified/);
    expect(calls(rec.rec)).toBe(before);
    // Mapped tools and rules are unchanged by it.
    blocked(await call(reads, t, "ev__get-sum", { a: 500, b: 1 }), /rule: big-sums/);
  });
});
