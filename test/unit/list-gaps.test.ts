/**
 * Lists that go without an upstream (src/front/aggregate.ts, src/upstream/unavailable.ts), in
 * workerd with the network replaced by fake upstreams (globalThis.fetch): with two upstreams and
 * one failing, the other's list is answered and the gap named in `_meta["portcullis/unavailable"]`
 * (tools, prompts and resources alike), logged once without any header value, and noted for
 * /readyz; when the route reaches one upstream (one configured, namespaced or not, or
 * `/mcp/<upstream>`) that does not answer, a JSON-RPC error names it and the reason; every kind
 * of failure is classified (unreachable, timeout, HTTP status, invalid answer, error answer,
 * credential refused, egress refused, no leg and why, the caller's abort); a transparent upstream
 * that answers passes as before; and readiness says ready / degraded (200) / unavailable (503).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import { routeView } from "../../src/front/route-view.ts";
import { allPages } from "../../src/front/aggregate.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import { forwardList } from "../../src/upstream/forward.ts";
import { clearUpstreamOutcomes, listOutcomes, noteListOutcome, noteOpenFailure } from "../../src/upstream/unavailable.ts";
import { UpstreamConnectionLost } from "../../src/upstream/exchange.ts";
import { readiness } from "../../src/services/health.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const SECRET = "hdr-secret-value-9f3a";
const mk = (name: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig =>
  testUpstream(name, `http://127.0.0.1:9400/${name}-${crypto.randomUUID()}`, {
    timeoutMs: 2000,
    egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true },
    headers: { "x-api-key": SECRET },
    ...extra,
  });

/** How each fake upstream answers, by the name in its URL path: null = a good list. */
type Behaviour = (body: JsonRpcRequest, signal: AbortSignal | undefined) => Response | Promise<Response> | null;
let behaviours: Record<string, Behaviour> = {};
let warned: string[] = [];

const json = (v: unknown, status = 200) => new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });
const ITEMS: Record<string, string> = { "tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources" };

beforeEach(() => {
  clearCatalog();
  clearUpstreamOutcomes();
  behaviours = {};
  warned = [];
  vi.spyOn(console, "warn").mockImplementation((line: unknown) => {
    warned.push(String(line));
  });
  vi.spyOn(console, "log").mockImplementation(() => undefined);
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = new URL(String(input instanceof Request ? input.url : input));
    const name = url.pathname.slice(1).split("-")[0]!;
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    const special = await behaviours[name]?.(body, init?.signal ?? undefined);
    if (special) return special;
    if (body.method === "server/discover")
      return json({ jsonrpc: "2.0", id: body.id, result: { supportedVersions: ["2026-07-28"], capabilities: { tools: {} } } });
    const key = ITEMS[body.method];
    if (key) {
      const item = key === "resources" ? { uri: `file:///${name}.txt`, name: `${name}.txt` } : { name: `${name}_one`, inputSchema: { type: "object" } };
      return json({ jsonrpc: "2.0", id: body.id, result: { [key]: [item] } });
    }
    return json({ jsonrpc: "2.0", id: body.id, error: { code: -32601, message: "Method not found" } });
  });
});
afterEach(() => vi.restoreAllMocks());

const refused: Behaviour = () => {
  throw new TypeError("Network connection lost.");
};

const everyone: Principal = { sub: "agent:g", team: "t", roles: ["agent"], tools: null, authenticated: true };

function ctx(
  upstreams: UpstreamConfig[],
  opts: { era?: "legacy" | "modern"; leg?: boolean; signal?: AbortSignal; view?: string; caps?: Record<string, JsonObject> } = {},
): CallContext {
  let cfg = testConfig(upstreams);
  const view = opts.view ? routeView(cfg, opts.view) : null;
  if (view) cfg = view.cfg;
  return {
    cfg,
    ...(view ? { route: view.route } : {}),
    era: opts.era ?? "modern",
    principal: everyone,
    signal: opts.signal ?? new AbortController().signal,
    paramHeaders: [],
    callerFiltered: false,
    runId: null,
    legs: {
      leg: async () => (opts.leg === false ? null : { era: "modern", meta: {} }),
      renew: async () => null,
      capabilities: async (up) => (opts.leg === false ? undefined : (opts.caps?.[up.name] ?? { tools: {}, prompts: {}, resources: {} })),
      recordRequest: async () => undefined,
    },
    stores: { ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" }, killSwitch: () => NO_HALTS },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
  };
}
const rpc = (method: string, params: JsonObject = {}): JsonRpcRequest => ({ jsonrpc: "2.0", id: 1, method, params });
const gapLines = () => warned.filter((l) => l.includes('"event":"list_unavailable"')).map((l) => JSON.parse(l));

describe("a list with one upstream failing among two", () => {
  it("answers the other's tools, names the gap in _meta with its reason, logs it once without a header value, notes both for /readyz", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    behaviours.alpha = refused;
    const out = await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    expect(out.status).toBe(200);
    const r = out.response.result as Any;
    expect(r.tools.map((t: Any) => t.name)).toEqual(["beta__beta_one"]);
    expect(r._meta).toEqual({ "portcullis/unavailable": [{ upstream: "alpha", reason: "unreachable", detail: "unreachable (Network connection lost.)" }] });
    // A list missing an upstream is not to be kept: ttl 0.
    expect(r.ttlMs).toBe(0);
    expect(gapLines()).toEqual([
      {
        event: "list_unavailable",
        method: "tools/list",
        upstream: "alpha",
        reason: "unreachable",
        detail: "unreachable (Network connection lost.)",
        principal: "agent:g",
        route: "/mcp",
        answered: "without_it",
      },
    ]);
    expect(JSON.stringify([out, warned])).not.toContain(SECRET);
    expect(listOutcomes(alpha)["tools/list"]).toMatchObject({ outcome: "failing", reason: "unreachable" });
    expect(listOutcomes(beta)["tools/list"]).toMatchObject({ outcome: "ok" });
  });

  it("prompts/list and resources/list report the gap the same way (one code path)", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    behaviours.alpha = () => new Response("<html>oops</html>", { status: 500, headers: { "content-type": "text/html" } });
    for (const [method, key] of [
      ["prompts/list", "prompts"],
      ["resources/list", "resources"],
    ] as const) {
      const r = (await dispatch(ctx([alpha, beta], { era: "legacy" }), rpc(method))).response.result as Any;
      expect(r[key].length, method).toBe(1);
      expect(JSON.stringify(r[key]), method).toContain("beta");
      expect(JSON.stringify(r[key]), method).not.toContain("alpha");
      expect(r._meta["portcullis/unavailable"], method).toEqual([
        { upstream: "alpha", reason: "http_status", status: 500, detail: "answered HTTP 500 without a JSON-RPC message" },
      ]);
      expect(listOutcomes(alpha)[method], method).toMatchObject({ outcome: "failing", reason: "http_status" });
    }
  });

  it("when every upstream fails, the answer is an error naming each, never an empty list", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    behaviours.alpha = refused;
    behaviours.beta = (b) => json({ jsonrpc: "2.0", id: b.id, result: { nope: [] } });
    const out = await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    expect(out.response.result).toBeUndefined();
    expect(out.response.error?.message).toBe(
      "no upstream answered tools/list: alpha: unreachable (Network connection lost.); beta: invalid_answer (answered tools/list without a tools list)",
    );
    expect((out.response.error!.data as Any)["portcullis/unavailable"].map((g: Any) => g.upstream)).toEqual(["alpha", "beta"]);
    expect(gapLines().map((l) => l.answered)).toEqual(["error", "error"]);
  });

  it("the other declares no tools: its empty list is its answer, so the list is answered (empty, the gap named), and it is not noted as listed", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    behaviours.alpha = refused;
    const out = await dispatch(ctx([alpha, beta], { caps: { beta: { prompts: {} } } }), rpc("tools/list"));
    const r = out.response.result as Any;
    expect(r.tools).toEqual([]);
    expect(r._meta["portcullis/unavailable"]).toMatchObject([{ upstream: "alpha", reason: "unreachable" }]);
    expect(listOutcomes(beta)).toEqual({});
    expect(listOutcomes(alpha)["tools/list"]).toMatchObject({ outcome: "failing" });
  });

  it("an upstream that answers Method not found lists none of these: no gap", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    behaviours.alpha = (b) => json({ jsonrpc: "2.0", id: b.id, error: { code: -32601, message: "Method not found" } });
    const r = (await dispatch(ctx([alpha, beta]), rpc("prompts/list"))).response.result as Any;
    expect(r.prompts.map((p: Any) => p.name)).toEqual(["beta__beta_one"]);
    expect(r._meta).toBeUndefined();
    expect(gapLines()).toEqual([]);
  });
});

describe("a route that reaches one upstream", () => {
  it("one namespaced upstream, one transparent, or /mcp/<upstream>: a JSON-RPC error naming it and the reason, not an empty list", async () => {
    for (const [label, c] of [
      ["one namespaced", () => ctx([mk("alpha")])],
      ["one transparent", () => ctx([mk("alpha", { namespaced: false })])],
      ["/mcp/alpha", () => ctx([mk("alpha"), mk("beta")], { view: "alpha" })],
    ] as const) {
      behaviours.alpha = refused;
      warned = [];
      const out = await dispatch(c(), rpc("tools/list"));
      expect(out.response.result, label).toBeUndefined();
      expect(out.response.error, label).toEqual({
        code: -32603,
        message: "upstream alpha did not answer tools/list: unreachable (Network connection lost.)",
        data: { "portcullis/unavailable": [{ upstream: "alpha", reason: "unreachable", detail: "unreachable (Network connection lost.)" }] },
      });
      expect(gapLines(), label).toMatchObject([{ upstream: "alpha", answered: "error", route: label === "/mcp/alpha" ? "/mcp/alpha" : "/mcp" }]);
    }
  });

  it("a transparent upstream that answers passes as before: its result verbatim, its error answers verbatim, nothing added", async () => {
    const alpha = mk("alpha", { namespaced: false });
    const listed = { tools: [{ name: "one", inputSchema: { type: "object" }, annotations: { readOnlyHint: true } }], nextCursor: "p2" };
    behaviours.alpha = (b) =>
      b.params?.cursor === "bad"
        ? json({ jsonrpc: "2.0", id: b.id, error: { code: -32602, message: "Invalid params: bad cursor" } })
        : json({ jsonrpc: "2.0", id: b.id, result: listed });
    const ok = await dispatch(ctx([alpha], { era: "legacy" }), rpc("tools/list"));
    expect(ok).toEqual({ response: { jsonrpc: "2.0", id: 1, result: listed }, status: 200 });
    const bad = await dispatch(ctx([alpha], { era: "legacy" }), rpc("tools/list", { cursor: "bad" }));
    expect(bad).toEqual({ response: { jsonrpc: "2.0", id: 1, error: { code: -32602, message: "Invalid params: bad cursor" } }, status: 200 });
    expect(gapLines()).toEqual([]);
    expect(listOutcomes(alpha)["tools/list"]).toMatchObject({ outcome: "ok" });
  });
});

describe("why an upstream gave no list", () => {
  const hang: Behaviour = (_b, signal) =>
    new Promise<Response>((_, reject) => {
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  const cases: { name: string; behaviour: Behaviour; up?: Partial<UpstreamConfig>; expected: Record<string, unknown> }[] = [
    { name: "refused", behaviour: refused, expected: { reason: "unreachable", detail: "unreachable (Network connection lost.)" } },
    { name: "slow", behaviour: hang, up: { timeoutMs: 50 }, expected: { reason: "timeout", detail: "no answer within 50 ms" } },
    {
      name: "html",
      behaviour: () => new Response("<h1>bad gateway</h1>", { status: 502, headers: { "content-type": "text/html" } }),
      expected: { reason: "http_status", status: 502, detail: "answered HTTP 502 without a JSON-RPC message" },
    },
    {
      name: "empty",
      behaviour: () => new Response(null, { status: 503 }),
      expected: { reason: "http_status", status: 503, detail: "answered HTTP 503 with an empty body" },
    },
    {
      name: "garbage",
      behaviour: () => new Response("not json", { status: 200, headers: { "content-type": "application/json" } }),
      expected: { reason: "invalid_answer", detail: "answered HTTP 200 without a JSON-RPC message" },
    },
    {
      name: "nolist",
      behaviour: (b) => json({ jsonrpc: "2.0", id: b.id, result: { tools: "many" } }),
      expected: { reason: "invalid_answer", detail: "answered tools/list without a tools list" },
    },
    {
      name: "erring",
      behaviour: (b) => json({ jsonrpc: "2.0", id: b.id, error: { code: -32603, message: `db down; key ${SECRET}` } }),
      expected: { reason: "error_answer", code: -32603, detail: "answered tools/list with error -32603: db down; key [redacted]" },
    },
    {
      name: "locked",
      behaviour: () => new Response("no", { status: 401 }),
      expected: { reason: "credential_refused", status: 401 },
    },
    { name: "private", behaviour: refused, up: { egress: DEFAULT_EGRESS_RULES, onLoopback: false }, expected: { reason: "egress_refused" } },
  ];
  for (const c of cases) {
    it(`${c.name}: ${String(c.expected.reason)}`, async () => {
      const up = mk(c.name, c.up);
      behaviours[c.name] = c.behaviour;
      const pages = await allPages(ctx([up]), up, rpc("tools/list"), "tools", (i) => i);
      expect(pages.complete).toBe(false);
      expect(pages.failure).toMatchObject({ upstream: c.name, ...c.expected });
      expect(JSON.stringify(pages.failure)).not.toContain(SECRET);
    });
  }

  it("no leg: the reason the opening failed when this isolate saw it, else unavailable", async () => {
    const up = mk("nolegs");
    const first = await forwardList(ctx([up], { leg: false }), up, rpc("tools/list"));
    expect(first).toEqual({ failed: { upstream: "nolegs", reason: "unavailable", detail: "no leg to it could be opened" } });
    noteOpenFailure(up, new UpstreamConnectionLost("nolegs", "unreachable (Network connection lost.)", 502));
    const second = await forwardList(ctx([up], { leg: false }), up, rpc("tools/list"));
    expect(second).toEqual({
      failed: { upstream: "nolegs", reason: "unreachable", detail: "no leg to it could be opened: unreachable (Network connection lost.)" },
    });
  });

  it("the caller's own abort is not the upstream's failure: reported as aborted, not noted for /readyz", async () => {
    const up = mk("slowly");
    const ac = new AbortController();
    behaviours.slowly = (_b, signal) => {
      setTimeout(() => ac.abort(new Error("client went away")), 10);
      return new Promise<Response>((_, reject) => signal?.addEventListener("abort", () => reject(signal.reason), { once: true }));
    };
    const got = await forwardList(ctx([up], { signal: ac.signal }), up, rpc("tools/list"));
    expect(got).toMatchObject({ failed: { upstream: "slowly", reason: "aborted" } });
    noteListOutcome(up, "tools/list", (got as Any).failed);
    expect(listOutcomes(up)).toEqual({});
  });
});

describe("each list's last outcome and readiness", () => {
  it("a run of failures keeps its first time as since; the first success after it starts a new since", () => {
    const up = mk("alpha");
    const gap = { upstream: "alpha", reason: "timeout" as const, detail: "no answer within 50 ms" };
    noteListOutcome(up, "tools/list", gap, 1000);
    noteListOutcome(up, "tools/list", { ...gap, reason: "unreachable", detail: "unreachable (x)" }, 2000);
    expect(listOutcomes(up)["tools/list"]).toEqual({ outcome: "failing", reason: "unreachable", detail: "unreachable (x)", since: 1000, at: 2000 });
    noteListOutcome(up, "tools/list", null, 3000);
    noteListOutcome(up, "tools/list", null, 4000);
    expect(listOutcomes(up)["tools/list"]).toEqual({ outcome: "ok", since: 3000, at: 4000 });
    // A per-principal credential refused is that principal's, not the upstream's.
    const vault = mk("vault", { credentials: { mode: "per_principal", header: "Authorization", prefix: "Bearer " } });
    noteListOutcome(vault, "tools/list", { upstream: "vault", reason: "credential_refused", detail: "no credential", status: 401 });
    expect(listOutcomes(vault)).toEqual({});
  });

  it("ready when all answer; degraded (ok) with one down among two or a list failing; unavailable (not ok) when none is reachable", async () => {
    const alpha = mk("alpha");
    const beta = mk("beta");
    expect(await readiness(testConfig([alpha, beta]))).toEqual({
      ok: true,
      status: "ready",
      upstreams: [
        { name: "alpha", ok: true, last_list_in_this_isolate: {} },
        { name: "beta", ok: true, last_list_in_this_isolate: {} },
      ],
    });
    behaviours.alpha = refused;
    await dispatch(ctx([alpha, beta]), rpc("tools/list"));
    const one = await readiness(testConfig([alpha, beta])); // probes cached ≤ 2 s: the list outcome is live
    expect(one).toMatchObject({ ok: true, status: "degraded" });
    expect(one.upstreams[0]!.last_list_in_this_isolate["tools/list"]).toMatchObject({ outcome: "failing", reason: "unreachable" });
    expect(one.upstreams[1]!.last_list_in_this_isolate["tools/list"]).toMatchObject({ outcome: "ok" });
    expect(Number.isNaN(Date.parse(one.upstreams[0]!.last_list_in_this_isolate["tools/list"]!.since))).toBe(false);
    const gamma = mk("gamma");
    const delta = mk("delta");
    behaviours.gamma = refused;
    expect(await readiness(testConfig([gamma, delta]))).toMatchObject({ ok: true, status: "degraded", upstreams: [{ ok: false }, { ok: true }] });
    behaviours.delta = refused;
    expect(await readiness(testConfig([delta, mk("gamma")]))).toMatchObject({ ok: false, status: "unavailable" });
    expect(await readiness(testConfig([]))).toEqual({ ok: true, status: "ready", upstreams: [] });
  });
});
