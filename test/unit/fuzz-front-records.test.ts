/**
 * Invariant 9 and the write-ahead rule under fuzzing, through the whole Worker front in workerd:
 * arbitrary JSON-RPC shapes, protocol headers, bodies, principals (the loopback actor, two grants
 * of different teams and reach, a forged token) and upstream behaviours (a result, an isError
 * result, a JSON-RPC error, a 500, a non-JSON body, a refused connection). The network is a
 * recording fake upstream (globalThis.fetch, as in dispatch.test.ts) that, at the moment a
 * tools/call reaches it, reads the caller's team chain from its LedgerDO and checks that a
 * decision record for exactly this call (principal, upstream, tool, hash of the arguments) is
 * already durable and still waits for its outcome. Properties: never a 5xx; every forwarded
 * tools/call has its own decision written before it (one forward per decision); every decision a
 * forward used has its outcome by the time the client has the answer; a receipt names the
 * decision that was forwarded; and every chain written verifies afterwards. Run twice: in the
 * unit config's observe mode, and in enforce through a live config (PUT /v1/config) whose policy
 * allows, denies and holds, where nothing enforce refuses may reach the upstream either. Also
 * shows non-object arguments are refused before any forward (a finding, now fixed). Owns nothing of the gateway; must
 * never reach a real network (every fetch is the fake) or loop without a bound.
 */
import { env, SELF } from "cloudflare:test";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { type KeySet, parseKeySet } from "../../src/identity/keys.ts";
import { verifyChain } from "../../src/ledger/chain.ts";
import type { LedgerEntry } from "../../src/ledger/records.ts";
import { canonicalHash } from "../../src/wire/canonical.ts";

const GW = "http://127.0.0.1";
const MODERN = "2026-07-28";
const LEGACY = "2025-11-25";
const META_V = "io.modelcontextprotocol/protocolVersion";
const META_CAPS = "io.modelcontextprotocol/clientCapabilities";
/** The unit config's upstreams (vitest.config.ts): alpha at /mcp, beta at /other. */
const UPSTREAM_OF: Record<string, string> = { "http://127.0.0.1:9/mcp": "alpha", "http://127.0.0.1:9/other": "beta" };
const TOOLS = [
  { name: "read", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } },
  { name: "write", inputSchema: { type: "object", properties: { n: { type: "number" } } } },
  { name: "strict", inputSchema: { type: "object", properties: { n: { type: "number" } }, required: ["n"], additionalProperties: false } },
  { name: "wipe", inputSchema: { type: "object" }, annotations: { destructiveHint: true } },
];
const EXPOSED = [
  "alpha__read",
  "alpha__write",
  "alpha__strict",
  "alpha__wipe",
  "beta__read",
  "beta__write",
  "beta__strict",
  "beta__wipe",
  "alpha__nope",
  "gamma__read",
  "read",
];

type Behaviour = "ok" | "is_error" | "rpc_error" | "http_500" | "not_json" | "refused";
interface Who {
  label: string;
  sub: string;
  team: string;
  token: string | null;
}
interface Forward {
  upstream: string;
  tool: string;
  decisionId: string;
  chain: string;
}

// ---- the recording fake upstream ------------------------------------------------------------

/** Entries read so far, by chain (the fake reads only what is new: `read(after)`). */
const seen = new Map<string, LedgerEntry[]>();
async function chainNow(chain: string): Promise<LedgerEntry[]> {
  const api = ledgerObject(env, chain)!;
  const have = seen.get(chain) ?? [];
  for (;;) {
    const page = await api.read(have.at(-1)?.seq ?? 0, 200);
    if (page.length === 0) break;
    have.push(...page);
  }
  seen.set(chain, have);
  return have;
}

let current: { who: Who; behaviour: Behaviour } | null = null;
/** Set once the enforce config is live: the fake then also checks that nothing enforce refuses reaches it. */
let enforcing = false;
const plainArgs = (v: unknown): boolean => v !== null && typeof v === "object" && !Array.isArray(v);
const forwards: Forward[] = [];
const violations: string[] = [];
/** Decisions a forward has used, by decision id (each may be used by exactly one forward). */
const used = new Map<string, number>();
/** Decisions whose forward met a refused connection: a read_only or idempotent call may be sent once more under the same decision (call.ts forwardWithRetry). */
const refusedUnder = new Set<string>();
/** Whether a decision already used may cover this forward: its one retry after a lost connection, for a safe effect only. */
function retryAllowed(e: { id: string; body: Record<string, unknown> }): boolean {
  const effect = (e.body.classification as { effect?: unknown } | undefined)?.effect;
  return used.get(e.id) === 1 && refusedUnder.has(e.id) && (effect === "read_only" || effect === "idempotent");
}
let toolCallsForwarded = 0;
/** Forwards whose arguments were not an object (see the finding at the end of this file). */
const nonObjectForwards: string[] = [];

async function fakeUpstream(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const url = String(input instanceof Request ? input.url : input);
  const text = input instanceof Request ? await input.clone().text() : typeof init?.body === "string" ? init.body : "";
  const upstream = UPSTREAM_OF[url.split("?")[0]!];
  if (!upstream) {
    violations.push(`a request left for an unknown address ${url}`);
    throw new TypeError("fetch failed: not the fake upstream");
  }
  let msg: { id?: unknown; method?: string; params?: { name?: unknown; arguments?: unknown } };
  try {
    msg = JSON.parse(text) as typeof msg;
  } catch {
    violations.push(`the gateway sent ${upstream} a body that is not JSON: ${text.slice(0, 80)}`);
    return new Response("bad", { status: 400 });
  }
  const reply = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
  const result = (r: unknown) => reply({ jsonrpc: "2.0", id: msg.id, result: r });
  if (msg.id === undefined) return new Response(null, { status: 202 });
  if (msg.method === "server/discover") return reply({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } });
  if (msg.method === "initialize")
    return result({ protocolVersion: LEGACY, capabilities: { tools: {} }, serverInfo: { name: `fake-${upstream}`, version: "1" } });
  if (msg.method === "tools/list") return result({ tools: TOOLS });
  if (msg.method !== "tools/call") return result({});

  // A tools/call reached the upstream: its decision must already be on the caller's chain.
  toolCallsForwarded++;
  const who = current?.who;
  const tool = String(msg.params?.name);
  const args = msg.params?.arguments;
  if (!who) violations.push(`a tools/call of ${upstream}/${tool} arrived outside a fuzzed request`);
  else {
    if (who.team === "fz-a" && upstream !== "alpha") violations.push(`a grant for alpha only reached ${upstream}/${tool}`);
    if (enforcing) {
      const a = (args ?? {}) as Record<string, unknown>;
      if (tool === "wipe") violations.push(`enforce forwarded ${upstream}/wipe, which waits for an approval nobody gave`);
      if (tool === "write" && typeof a.n === "number" && a.n > 100) violations.push(`enforce forwarded ${upstream}/write with n=${a.n} (> 100, denied)`);
      const strictOk = plainArgs(args) && typeof a.n === "number" && Object.keys(a).length === 1;
      if (tool === "strict" && !strictOk)
        violations.push(`enforce forwarded ${upstream}/strict with arguments its inputSchema refuses: ${JSON.stringify(args)}`);
    }
    const entries = await chainNow(who.team);
    const outcomes = new Set(entries.filter((e) => e.kind === "outcome").map((e) => e.body.decision_id));
    // Non-object arguments (null, an array, a scalar) are refused at the edge: none may ever be forwarded.
    const plain = args !== null && typeof args === "object" && !Array.isArray(args);
    if (args !== undefined && !plain) nonObjectForwards.push(`${upstream}/${tool} ${JSON.stringify(args).slice(0, 40)}`);
    const expectArgs = plain ? { sha256: canonicalHash(args) } : null;
    const candidates = entries.filter(
      (e) =>
        e.kind === "decision" &&
        e.body.principal === who.sub &&
        e.body.team === who.team &&
        e.body.upstream === upstream &&
        e.body.tool === tool &&
        canonicalHash(e.body.arguments) === canonicalHash(expectArgs) &&
        !outcomes.has(e.id) &&
        (!used.has(e.id) || retryAllowed(e)),
    );
    if (candidates.length === 0)
      violations.push(`forwarded ${upstream}/${tool} ${JSON.stringify(args)?.slice(0, 80)} for ${who.label} without a pending decision record`);
    else {
      const d = candidates.at(-1)!;
      used.set(d.id, (used.get(d.id) ?? 0) + 1);
      forwards.push({ upstream, tool, decisionId: d.id, chain: who.team });
      if ((current?.behaviour ?? "ok") === "refused") refusedUnder.add(d.id);
    }
  }
  switch (current?.behaviour ?? "ok") {
    case "ok":
      return result({ content: [{ type: "text", text: `ran ${tool}` }] });
    case "is_error":
      return result({ content: [{ type: "text", text: "boom" }], isError: true });
    case "rpc_error":
      return reply({ jsonrpc: "2.0", id: msg.id, error: { code: -32603, message: "upstream broke" } });
    case "http_500":
      return new Response("internal error", { status: 500 });
    case "not_json":
      return new Response("{not json", { headers: { "content-type": "application/json" } });
    case "refused":
      throw new TypeError("fetch failed: connection refused");
  }
}

// ---- who calls ------------------------------------------------------------------------------

let keys: KeySet;
const whos: Who[] = [];
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
  const grant = (sub: string, team: string, tools: string[]) =>
    mintGrant(keys, { iss: GW, aud: GW, sub, team, roles: ["agent"], tools, ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 });
  whos.push(
    { label: "the loopback actor", sub: "local:unit", team: "local", token: null },
    { label: "a grant for alpha only", sub: "agent:fz-a", team: "fz-a", token: (await grant("agent:fz-a", "fz-a", ["alpha__*"])).token },
    { label: "a grant for every tool", sub: "agent:fz-b", team: "fz-b", token: (await grant("agent:fz-b", "fz-b", ["alpha__*", "beta__*"])).token },
    { label: "a forged token", sub: "nobody", team: "nobody", token: "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln" },
  );
  vi.spyOn(globalThis, "fetch").mockImplementation(fakeUpstream);
});
afterAll(() => vi.restoreAllMocks());

// ---- what they send -------------------------------------------------------------------------

const jsonId = fc.oneof(
  { weight: 8, arbitrary: fc.oneof(fc.integer(), fc.string({ maxLength: 8 })) },
  { weight: 1, arbitrary: fc.oneof(fc.constant(null), fc.jsonValue({ maxDepth: 1 })) },
);
const argsArb = fc.oneof(
  fc.constant(undefined),
  fc.constant({}),
  fc.record({ n: fc.oneof(fc.integer(), fc.double(), fc.string({ maxLength: 5 })) }, { requiredKeys: [] }),
  // Around the enforce policy's limit of 100 for writes.
  fc.record({ n: fc.integer({ min: 0, max: 300 }) }),
  fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  fc.jsonValue({ maxDepth: 2 }),
);
const toolName = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...EXPOSED) },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) },
);
const otherMethod = fc.oneof(
  fc.constantFrom("tools/list", "prompts/get", "resources/read", "ping", "tasks/get", "completion/complete", "x/y"),
  fc.string({ maxLength: 12 }),
);
interface Msg {
  shape: Record<string, unknown>;
  method: unknown;
  name: unknown;
}
const messageArb: fc.Arbitrary<Msg> = fc
  .oneof(
    {
      weight: 4,
      arbitrary: fc.record({
        id: jsonId,
        method: fc.constant("tools/call"),
        name: toolName,
        args: argsArb,
        jsonrpc: fc.constantFrom("2.0", "2.0", "2.0", "2.0", "2.0", "2.0", "1.0"),
        extra: fc.option(fc.jsonValue({ maxDepth: 1 }), { nil: undefined }),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({ id: jsonId, method: otherMethod, name: toolName, args: argsArb, jsonrpc: fc.constant("2.0"), extra: fc.constant(undefined) }),
    },
  )
  .map(({ id, method, name, args, jsonrpc, extra }) => {
    const params: Record<string, unknown> = { name, ...(args === undefined ? {} : { arguments: args }) };
    if (extra !== undefined) params.extra = extra;
    return { shape: { jsonrpc, id, method, params }, method, name };
  });
const era = fc.constantFrom<"modern" | "legacy">("modern", "legacy");
const headerChanges = fc.record(
  {
    "content-type": fc.constantFrom("application/json", "application/json; charset=utf-8", "text/plain"),
    accept: fc.constantFrom("application/json, text/event-stream", "application/json", "text/event-stream", "*/*"),
    "mcp-method": fc.oneof(fc.constant("(body)"), fc.string({ maxLength: 10 })),
    "mcp-name": fc.oneof(fc.constant("(body)"), fc.string({ maxLength: 20 }), fc.constant("=?base64?YWxwaGFfX3JlYWQ=?=")),
  },
  { requiredKeys: [] },
);
/** Most requests carry the headers their era needs; some have them changed. */
const headerNoise = fc.oneof({ weight: 3, arbitrary: fc.constant({}) }, { weight: 1, arbitrary: headerChanges });
/** How the body goes on the wire: as generated, in a batch, with its params broken, or cut short. */
const framing = fc.constantFrom("plain", "plain", "plain", "plain", "plain", "plain", "plain", "plain", "batch", "params_not_object", "truncated");

function bodyOf(m: Msg, e: "modern" | "legacy", how: string): string {
  const shape = structuredClone(m.shape) as { params: Record<string, unknown> };
  if (e === "modern") shape.params._meta = { [META_V]: MODERN, [META_CAPS]: {} };
  if (how === "params_not_object") (shape as Record<string, unknown>).params = [shape.params];
  const text = JSON.stringify(shape);
  if (how === "batch") return `[${text}]`;
  if (how === "truncated") return text.slice(0, Math.max(1, Math.floor(text.length / 2)));
  return text;
}

function headersOf(who: Who, e: "modern" | "legacy", m: Msg, noise: Record<string, string>, session: string | null): Record<string, string> {
  const h: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" };
  if (e === "modern") {
    h["mcp-protocol-version"] = MODERN;
    if (typeof m.method === "string") h["mcp-method"] = m.method;
    if (typeof m.name === "string" && /^[\x20-\x7e]*$/.test(m.name)) h["mcp-name"] = m.name;
  } else if (session) {
    h["mcp-protocol-version"] = LEGACY;
    h["mcp-session-id"] = session;
  }
  for (const [k, v] of Object.entries(noise)) {
    if (v === "(body)" || !/^[\t\x20-\x7e]*$/.test(v)) continue;
    h[k] = v;
  }
  if (who.token) h.authorization = `Bearer ${who.token}`;
  return h;
}

async function legacySession(who: Who, path: string): Promise<string | null> {
  const auth: Record<string, string> = who.token ? { authorization: `Bearer ${who.token}` } : {};
  const r = await SELF.fetch(`${GW}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...auth },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 0,
      method: "initialize",
      params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: "fuzz", version: "1" } },
    }),
  });
  expect(r.status, `initialize for ${who.label}`).toBeLessThan(500);
  await r.text();
  const id = r.headers.get("mcp-session-id");
  if (!id) return null;
  const n = await SELF.fetch(`${GW}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": LEGACY,
      "mcp-session-id": id,
      ...auth,
    },
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
  });
  expect(n.status).toBeLessThan(500);
  await n.text();
  return id;
}

/** On `/mcp/<upstream>` the upstream's tools go by their own names: `alpha__read` is sent as `read` there (other names as generated). */
function onRoute(m: Msg, path: string): Msg {
  const up = path.startsWith("/mcp/") ? path.slice(5) : null;
  if (!up || typeof m.name !== "string" || !m.name.startsWith(`${up}__`)) return m;
  const name = m.name.slice(up.length + 2);
  const shape = structuredClone(m.shape) as { params: Record<string, unknown> };
  shape.params.name = name;
  return { shape, method: m.method, name };
}

/** The receipt of a JSON or SSE answer, if it carries one. */
function receiptIn(text: string): { chain: string; decision_id: string } | null {
  const m = /"portcullis\/receipt":(\{[^}]*\})/.exec(text);
  return m ? (JSON.parse(m[1]!) as { chain: string; decision_id: string }) : null;
}

const NUM_RUNS = 150;
const ENFORCE_RUNS = 100;
/**
 * A fixed seed: the properties hold for every input, but the coverage checks after each run (some
 * call was forwarded, one refused by the grant, one by a rule, one held) depend on what was drawn,
 * and a random draw once missed one. Change it to explore other inputs.
 */
const SEED = 20261201;
const DEBUG = false;

/** Runs the front fuzz property `numRuns` times; what it sent and what came back. */
async function fuzzFront(numRuns: number): Promise<{ requests: number; receipts: number }> {
  let requests = 0;
  let receipts = 0;
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom(0, 0, 0, 1, 1, 1, 2, 2, 2, 3),
      era,
      fc.constantFrom<Behaviour>("ok", "ok", "is_error", "rpc_error", "http_500", "not_json", "refused"),
      fc.array(fc.tuple(messageArb, headerNoise, framing), { minLength: 1, maxLength: 4 }),
      // /mcp, or one upstream's own route (its tools under their upstream names: "read", not "alpha__read").
      fc.constantFrom("/mcp", "/mcp", "/mcp", "/mcp/alpha", "/mcp/beta"),
      async (w, e, behaviour, msgs, path) => {
        const who = whos[w]!;
        current = { who, behaviour };
        try {
          const session = e === "legacy" ? await legacySession(who, path) : null;
          for (const [generated, noise, how] of msgs) {
            const m = onRoute(generated, path);
            const before = forwards.length;
            const body = bodyOf(m, e, how);
            const r = await SELF.fetch(`${GW}${path}`, { method: "POST", headers: headersOf(who, e, m, noise, session), body });
            const text = await r.text();
            requests++;
            if (DEBUG) console.log(`DBG ${who.label} ${e} ${how} ${r.status} ${body.slice(0, 100)} -> ${text.slice(0, 200)}`);
            expect(r.status, `${who.label} ${e} ${path} ${body.slice(0, 160)} -> ${text.slice(0, 160)}`).toBeLessThan(500);
            // Every decision this request's forwards used has its outcome before the client has the answer.
            for (const f of forwards.slice(before)) {
              const es = await chainNow(f.chain);
              const outs = es.filter((x) => x.kind === "outcome" && x.body.decision_id === f.decisionId);
              expect(outs, `outcomes of decision ${f.decisionId} (${f.upstream}/${f.tool})`).toHaveLength(1);
            }
            // A receipt names a decision of the caller's chain; a forwarded call's receipt names the decision it was forwarded under.
            const receipt = receiptIn(text);
            if (receipt) {
              receipts++;
              expect(receipt.chain).toBe(who.team);
              const es = await chainNow(who.team);
              expect(es.some((x) => x.kind === "decision" && x.id === receipt.decision_id)).toBe(true);
              const mine = forwards.slice(before);
              if (mine.length) expect(mine.map((f) => f.decisionId)).toContain(receipt.decision_id);
            }
          }
        } finally {
          current = null;
        }
        expect(violations).toEqual([]);
      },
    ),
    { numRuns, seed: SEED },
  );
  return { requests, receipts };
}

/** What every run must leave behind: no violation, one forward per decision, chains that verify, no chain for the forged token. */
async function afterFuzz(): Promise<LedgerEntry[]> {
  expect(violations).toEqual([]);
  // One forward per decision, except the one retry of a safe call whose connection was refused (retryAllowed).
  for (const [id, n] of used) expect(n === 1 || (n === 2 && refusedUnder.has(id)), `decision ${id} covered ${n} forwards`).toBe(true);
  expect(forwards).toHaveLength(toolCallsForwarded);
  for (const chain of ["local", "fz-a", "fz-b"]) {
    const es = await chainNow(chain);
    expect(verifyChain(chain, es).ok, `chain ${chain} verifies`).toBe(true);
  }
  const all = ["local", "fz-a", "fz-b"].flatMap((c) => seen.get(c) ?? []);
  const retries = [...used.values()].filter((n) => n === 2).length;
  expect(all.filter((x) => x.kind === "decision").length).toBeGreaterThanOrEqual(toolCallsForwarded - retries);
  // The forged token never got a chain.
  expect(await ledgerObject(env, "nobody")!.read(0, 1)).toEqual([]);
  return all;
}

describe("the /mcp front under fuzzing, with a recording upstream (observe, the unit config)", () => {
  it("never answers 5xx, and never forwards a tools/call without its own decision record written first", { timeout: 120_000 }, async () => {
    const { requests, receipts } = await fuzzFront(NUM_RUNS);
    const all = await afterFuzz();
    // The fuzz did reach the upstream (the property is not vacuous), and refused some calls on the record.
    expect(toolCallsForwarded).toBeGreaterThan(20);
    expect(receipts).toBeGreaterThan(5);
    expect(requests).toBeGreaterThanOrEqual(NUM_RUNS);
    expect(all.some((x) => x.kind === "blocked")).toBe(true);
    expect(nonObjectForwards).toEqual([]);
    console.log(
      `fuzz-front-records (observe): ${requests} requests, ${toolCallsForwarded} tools/call forwarded (each after its decision), ${receipts} receipts, ` +
        `${all.filter((x) => x.kind === "blocked").length} blocked records, ${nonObjectForwards.length} forwards with non-object arguments`,
    );
  });
});

/**
 * Was a finding of the property above (fixed in src/front/dispatch.ts `toolsCall`): `params.arguments`
 * that is not an object (null, an array, a number, a string) reached governance as "no arguments"
 * while the upstream received it as sent. Now refused with -32602 before any forward.
 */
describe("finding: non-object tools/call arguments", () => {
  it("a tools/call whose arguments are an array is refused, or forwarded only as recorded", async () => {
    const before = forwards.length;
    current = { who: whos[0]!, behaviour: "ok" };
    try {
      const r = await SELF.fetch(`${GW}/mcp`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "mcp-protocol-version": MODERN,
          "mcp-method": "tools/call",
          "mcp-name": "alpha__write",
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: { name: "alpha__write", arguments: [1, 2], _meta: { [META_V]: MODERN, [META_CAPS]: {} } },
        }),
      });
      const text = await r.text();
      expect(r.status).toBeLessThan(500);
      const mine = forwards.slice(before);
      if (mine.length === 0) {
        expect(text).toMatch(/-32602/);
        return;
      }
      const decision = (await chainNow("local")).find((e) => e.id === mine[0]!.decisionId)!;
      // What the upstream got ([1, 2]) must be what the decision describes.
      expect(decision.body.arguments).toEqual({ sha256: canonicalHash([1, 2]) });
    } finally {
      current = null;
    }
  });
});

/**
 * The same property in enforce, with a live config (PUT /v1/config) whose policy allows reads
 * and small writes, denies writes over 100, holds every wipe for approval (nobody approves during
 * the run) and lets the strict tool's inputSchema refuse bad arguments. On top of the write-ahead
 * check, the fake upstream then also flags any forward enforce must have stopped.
 */
describe("the /mcp front under fuzzing, in enforce with allow, deny, hold and schema refusals", () => {
  const ENFORCE = `
mode: enforce
policy:
  rules:
    - id: reads
      match: { tool: "*__read" }
      decision: allow
      reason: reads are fine
    - id: big-writes
      match: { tool: "*__write" }
      when: "has(args.n) && type(args.n) == double && args.n > 100.0"
      decision: deny
      reason: writes over 100 are refused
    - id: writes
      match: { tool: "*__write" }
      decision: allow
      reason: small writes are fine
    - id: strict
      match: { tool: "*__strict" }
      decision: allow
      reason: its inputSchema decides
    - id: wipes
      match: { tool: "*__wipe" }
      decision: require_approval
      reason: a wipe needs a human
`;
  beforeAll(async () => {
    const admin = (
      await mintGrant(
        keys,
        { iss: GW, aud: GW, sub: "human:root", team: "ops", roles: ["admin"], tools: ["*"], ttlSeconds: 600 },
        { maxLifetimeSeconds: 86400 },
      )
    ).token;
    const r = await SELF.fetch(`${GW}/v1/config`, {
      method: "PUT",
      headers: { authorization: `Bearer ${admin}`, "content-type": "text/yaml" },
      body: `${env.PORTCULLIS_CONFIG as string}${ENFORCE}`,
    });
    expect(r.status, await r.text()).toBe(200);
    // Every isolate serves a stored version at most 1 s after it was stored (src/ports/live-config.ts).
    await new Promise((ok) => setTimeout(ok, 1200));
    enforcing = true;
  });

  it("never answers 5xx, never forwards without a decision, and never forwards what enforce refuses", { timeout: 120_000 }, async () => {
    const fromForward = forwards.length;
    const { requests } = await fuzzFront(ENFORCE_RUNS);
    const all = await afterFuzz();
    const mine = forwards.slice(fromForward);
    // Enforce really decided these: every forward's decision is an enforce allow, and refusals of every kind were recorded.
    const byId = new Map(all.map((e) => [e.id, e]));
    for (const f of mine) expect(byId.get(f.decisionId)?.body).toMatchObject({ decision: "allow", mode: "enforce" });
    expect(mine.length).toBeGreaterThan(5);
    const checks = new Set(all.filter((x) => x.kind === "blocked").map((x) => x.body.check));
    expect(checks.has("grant")).toBe(true);
    expect(checks.has("rule")).toBe(true);
    expect(all.some((x) => x.kind === "hold.created")).toBe(true);
    console.log(
      `fuzz-front-records (enforce): ${requests} requests, ${mine.length} tools/call forwarded, blocked by ${[...checks].sort().join(", ")}, ` +
        `${all.filter((x) => x.kind === "hold.created").length} holds created (none approved, none forwarded)`,
    );
  });
});
