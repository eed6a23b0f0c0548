/**
 * Exposed names (prefixes, aliases, URIs), grant globs and allow/deny, and the `/mcp/<upstream>`
 * view: the view builder itself, the edge ↔ governed name mapping, and dispatch through a view
 * (in workerd, the network replaced by a recording fake upstream): the client sees the upstream's
 * own names while the grant, the policy, the catalog and the ledger see the names /mcp gives.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { GatewayConfig, UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { parsePolicy } from "../../src/config/policy-schema.ts";
import {
  exposeName,
  renamedUpstreams,
  renameProblem,
  shadowed,
  exposeUri,
  governedFromEdge,
  governedName,
  governedUpstream,
  type RouteView,
  splitGoverned,
  splitName,
  splitUri,
} from "../../src/protocol/exposed-names.ts";
import { noSuchRoute, routeView } from "../../src/front/route-view.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import type { ToolCall } from "../../src/governance/steps.ts";
import { globMatch } from "../../src/wire/glob.ts";
import { toolAllowed } from "../../src/governance/grant-scope.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testConfig } from "./fixtures.ts";

const up = (name: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig => ({
  name,
  url: "http://127.0.0.1/mcp",
  namespaced: true,
  headers: {},
  allow: [],
  deny: [],
  timeoutMs: 1000,
  credentials: { mode: "none", header: "Authorization", prefix: "Bearer " },
  egress: DEFAULT_EGRESS_RULES,
  onLoopback: false,
  ...extra,
});

describe("exposed names", () => {
  const a = up("alpha");
  const b = up("beta-2");
  it("prefixes and splits tool names at the first __", () => {
    expect(exposeName(a, "read__file")).toBe("alpha__read__file");
    expect(splitName([a, b], "alpha__read__file")).toEqual({ up: a, name: "read__file" });
    expect(splitName([a, b], "beta-2__x")?.up).toBe(b);
    expect(splitName([a, b], "gamma__x")).toBeNull();
    expect(splitName([a, b], "nounderscore")).toBeNull();
  });
  it("keeps names unchanged for one transparent upstream", () => {
    const t = up("solo", { namespaced: false });
    expect(exposeName(t, "test_simple_text")).toBe("test_simple_text");
    expect(splitName([t], "test_simple_text")).toEqual({ up: t, name: "test_simple_text" });
    expect(splitUri([t], "test://static-text")).toEqual({ up: t, uri: "test://static-text" });
  });
  it("one transparent upstream keeps its own names beside prefixed ones; a name with a prefixed upstream's prefix is that upstream's", () => {
    const t = up("solo", { namespaced: false });
    expect(splitName([t, a, b], "read__file")).toEqual({ up: t, name: "read__file" });
    expect(splitName([t, a, b], "alpha__read")).toEqual({ up: a, name: "read" });
    expect(splitName([t, a, b], "gamma__x")).toEqual({ up: t, name: "gamma__x" });
    expect(splitName([t, a], "solo__x")).toEqual({ up: t, name: "solo__x" }); // solo is not prefixed: its name is no prefix
    expect(splitUri([t, a], "test://x")).toEqual({ up: t, uri: "test://x" });
    expect(splitUri([t, a], "alpha+test://x")).toEqual({ up: a, uri: "test://x" });
    // The transparent upstream's own names that read as alpha's are shadowed (not listed, never routed to it).
    expect(shadowed([t, a], t, "alpha__read", "name")).toBe(true);
    expect(shadowed([t, a], t, "alpha+test://x", "uri")).toBe(true);
    expect(shadowed([t, a], t, "read", "name")).toBe(false);
    expect(shadowed([t, a], a, "alpha__read", "name")).toBe(false);
  });
  it("aliases names over 64 characters deterministically", () => {
    const long = "x".repeat(80);
    const e1 = exposeName(a, long);
    expect(e1.length).toBeLessThanOrEqual(64);
    expect(e1).toBe(exposeName(a, long));
    expect(e1).not.toBe(exposeName(a, `${"x".repeat(79)}y`));
    expect(e1.startsWith("alpha__")).toBe(true);
  });
  it("prefixes URIs with the upstream as a scheme prefix", () => {
    expect(exposeUri(a, "test://static-text")).toBe("alpha+test://static-text");
    expect(splitUri([a, b], "alpha+test://static-text")).toEqual({ up: a, uri: "test://static-text" });
    expect(splitUri([a, b], "test://static-text")).toBeNull();
  });
  it("matches globs and applies deny over allow", () => {
    expect(globMatch("read_*", "read_file")).toBe(true);
    expect(globMatch("read_?", "read_ab")).toBe(false);
    expect(globMatch("a.b", "aXb")).toBe(false);
    const f = up("f", { allow: ["read_*", "echo"], deny: ["read_secret*"] });
    expect(toolAllowed(f, "read_file")).toBe(true);
    expect(toolAllowed(f, "echo")).toBe(true);
    expect(toolAllowed(f, "write_file")).toBe(false);
    expect(toolAllowed(f, "read_secret_key")).toBe(false);
  });
});

describe("renamedUpstreams: which upstreams a config change renames for agents", () => {
  it("a second upstream beside one served unprefixed renames the first's tools; an explicit namespace keeps them; a new upstream renames nothing", () => {
    const alone = up("everything", { namespaced: false });
    const prefixed = up("everything", { namespaced: true });
    const other = up("files", { namespaced: true });
    expect(renamedUpstreams([alone], [prefixed, other])).toEqual([{ upstream: "everything", before: "<tool>", after: "everything__<tool>" }]);
    expect(renamedUpstreams([prefixed], [prefixed, other])).toEqual([]);
    expect(renamedUpstreams([prefixed, other], [alone])).toEqual([{ upstream: "everything", before: "everything__<tool>", after: "<tool>" }]);
    expect(renamedUpstreams([alone], [alone])).toEqual([]);
    // namespace: false on it keeps its names beside the new one.
    expect(renamedUpstreams([alone], [alone, other])).toEqual([]);
    expect(renameProblem(renamedUpstreams([alone], [prefixed, other])[0]!)).toMatch(
      /^upstream everything: this change renames every tool of everything for agents \(<tool> becomes everything__<tool>\).*force the reload/,
    );
  });
});

describe("edge and governed names on /mcp/<upstream>", () => {
  const a = up("alpha");
  const b = up("beta-2");
  const route: RouteView = { upstream: "alpha", prefixed: true };
  // The view's copy of alpha: not namespaced, so the edge shows alpha's own names.
  const edgeA = up("alpha", { namespaced: false });

  it("governance keeps the name /mcp exposes; the edge shows the upstream's own", () => {
    expect(exposeName(edgeA, "read")).toBe("read");
    expect(governedName(edgeA, "read", route)).toBe("alpha__read");
    expect(governedName(a, "read", undefined)).toBe("alpha__read");
    expect(governedFromEdge([edgeA], "read", route)).toBe("alpha__read");
    // /mcp: the edge name is the governed name.
    expect(governedFromEdge([a, b], "alpha__read", undefined)).toBe("alpha__read");
    expect(governedName(edgeA, "read", undefined)).toBe("read");
  });

  it("an upstream /mcp does not prefix (a single transparent one) is governed under its own names", () => {
    const solo: RouteView = { upstream: "alpha", prefixed: false };
    expect(governedName(edgeA, "read", solo)).toBe("read");
    expect(governedFromEdge([edgeA], "read", solo)).toBe("read");
    expect(governedUpstream(edgeA, solo)).toBe(edgeA);
    // Only the route's own upstream is renamed.
    expect(governedUpstream(up("other", { namespaced: false }), route).namespaced).toBe(false);
  });

  it("over-long names get the alias /mcp gives them, while the edge keeps the full name", () => {
    const long = "y".repeat(90);
    expect(exposeName(edgeA, long)).toBe(long);
    expect(governedFromEdge([edgeA], long, route)).toBe(exposeName(a, long));
    expect(exposeName(a, long).length).toBeLessThanOrEqual(64);
  });

  it("splits governed names back to the upstream as the request serves it, and never to another upstream", () => {
    const t = splitGoverned([edgeA], "alpha__read", route);
    expect(t?.up).toBe(edgeA);
    expect(t?.name).toBe("read");
    // A governed name of another upstream (a hold made on /mcp for beta-2, say) resolves to nothing here.
    expect(splitGoverned([edgeA], "beta-2__x", route)).toBeNull();
    // The bare edge name is not a governed name on a prefixed route.
    expect(splitGoverned([edgeA], "read", route)).toBeNull();
    expect(splitGoverned([a, b], "beta-2__x", undefined)?.up).toBe(b);
  });

  it("routeView serves one upstream of the caller's config alone, unprefixed, without the gateway's agent tools", () => {
    const cfg = testConfig([a, b], { agentTools: true });
    const before = JSON.stringify(cfg);
    const v = routeView(cfg, "beta-2")!;
    expect(v.route).toEqual({ upstream: "beta-2", prefixed: true });
    expect(v.cfg.upstreams).toEqual([{ ...b, namespaced: false }]);
    expect(v.cfg.agentTools).toBe(false);
    // Policy and mappings are the same objects (compiled once per config, never per request).
    expect(v.cfg.policy).toBe(cfg.policy);
    expect(v.cfg.mappings).toBe(cfg.mappings);
    expect(JSON.stringify(cfg)).toBe(before);
    expect(routeView(cfg, "gamma")).toBeNull();
    expect(routeView(testConfig([]), "alpha")).toBeNull();
    // A config of one transparent upstream: the route shows what /mcp shows.
    const solo = routeView(testConfig([edgeA]), "alpha")!;
    expect(solo.route.prefixed).toBe(false);
    expect(solo.cfg.upstreams[0]).toBe(edgeA);
  });

  it("the 404 message reads alike for a missing and an unreachable upstream, and echoes only a well-formed name", () => {
    expect(noSuchRoute("beta-2")).toBe('Not Found: no upstream named "beta-2" is available to this grant (/mcp serves every upstream it reaches)');
    expect(noSuchRoute("<script>")).not.toContain("<script>");
    expect(noSuchRoute("x".repeat(200))).not.toContain("xxxx");
  });
});

describe("dispatch through a /mcp/<upstream> view", () => {
  const alpha = up("alpha", { url: "http://127.0.0.1:9011/alpha", onLoopback: true, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true } });
  const beta = up("beta", { url: "http://127.0.0.1:9012/beta", onLoopback: true, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true } });
  const upstreamCalls: { url: string; name: unknown }[] = [];
  const listedRecords: { shown: string[]; hidden: string[] }[] = [];
  const blocked: { tool: string; check: string; rule: string | null }[] = [];
  const decisions: { upstream: string; tool: string }[] = [];

  beforeEach(() => {
    clearCatalog();
    upstreamCalls.length = listedRecords.length = blocked.length = decisions.length = 0;
    vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
      const reply = (result: JsonObject) =>
        new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
      if (body.method === "tools/list") {
        const names = url.includes("alpha") ? ["read", "write", "wipe"] : url.includes("gamma") ? ["read", "beta__search"] : ["search"];
        return reply({ tools: names.map((name) => ({ name, inputSchema: { type: "object" } })) });
      }
      if (body.method === "tools/call") {
        upstreamCalls.push({ url, name: body.params?.name });
        return reply({ content: [{ type: "text", text: `ran ${String(body.params?.name)}` }] });
      }
      return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, error: { code: -32601, message: "Method not found" } }), {
        headers: { "content-type": "application/json" },
      });
    });
  });
  afterEach(() => vi.restoreAllMocks());

  // enforce: no-wipe denies alpha__wipe unconditionally (so it is not even listed), everything else is allowed.
  const parsed = parsePolicy({
    rules: [
      { id: "no-wipe", match: { tool: "alpha__wipe" }, decision: "deny", reason: "wiping is off limits" },
      { id: "rest", match: { tool: "*" }, decision: "allow", reason: "fine" },
    ],
  });
  if (!parsed.ok) throw new Error(parsed.problems.join("; "));
  const shared: GatewayConfig = testConfig([alpha, beta], { mode: "enforce", policy: parsed.policy, agentTools: true });

  function ctx(cfg: GatewayConfig, route: RouteView | undefined, tools: string[] | null): CallContext {
    const principal: Principal = { sub: "agent:view", team: "t", roles: ["agent"], tools, authenticated: true };
    return {
      cfg,
      ...(route ? { route } : {}),
      era: "modern",
      principal,
      signal: new AbortController().signal,
      paramHeaders: [],
      callerFiltered: tools !== null,
      runId: null,
      legs: {
        leg: async () => ({ era: "modern", meta: {} }),
        renew: async () => null,
        capabilities: async () => ({ tools: {} }),
        recordRequest: async () => undefined,
      },
      stores: {
        ledger: {
          decision: async (d) => {
            decisions.push({ upstream: d.upstream, tool: d.tool });
            return null;
          },
          outcome: async () => null,
          blocked: async (call: ToolCall, r) => {
            blocked.push({ tool: call.exposedName, check: r.check, rule: r.rule ?? null });
            return null;
          },
          listed: (shown, hidden) => {
            listedRecords.push({ shown, hidden });
          },
          hold: async () => "",
        },
        killSwitch: () => NO_HALTS,
      },
      relay: { send: async () => undefined, upstreamRequest: async () => undefined },
    };
  }
  const rpc = (method: string, params: JsonObject = {}): JsonRpcRequest => ({ jsonrpc: "2.0", id: 7, method, params });
  const toolNames = (r: { response: { result?: JsonObject } }) => ((r.response.result?.tools ?? []) as JsonObject[]).map((t) => t.name);

  it("tools/list shows alpha's own names, filtered by a grant and a policy written in /mcp's names; the record keeps /mcp's names", async () => {
    const v = routeView(shared, "alpha")!;
    const onRoute = await dispatch(ctx(v.cfg, v.route, ["alpha__read", "alpha__wipe"]), rpc("tools/list"));
    expect(toolNames(onRoute)).toEqual(["read"]); // write: outside the grant; wipe: denied unconditionally; no agent tool
    expect(listedRecords.at(-1)).toEqual({ shown: ["alpha__read"], hidden: ["alpha__write", "alpha__wipe"] });
    const onMcp = await dispatch(ctx(shared, undefined, ["alpha__read", "alpha__wipe"]), rpc("tools/list"));
    expect(toolNames(onMcp)).toEqual(["alpha__read"]); // the agent tools too follow the grant (none of its globs covers them)
    expect(listedRecords.at(-1)).toEqual(listedRecords.at(-2));
    const withAgentTools = await dispatch(ctx(shared, undefined, ["alpha__read", "portcullis.*"]), rpc("tools/list"));
    expect(toolNames(withAgentTools)).toEqual([
      "alpha__read",
      "portcullis.list_runs",
      "portcullis.get_run",
      "portcullis.get_action_trace",
      "portcullis.plan_rollback",
      "portcullis.dry_run_rollback",
      "portcullis.validate_mapping",
      "portcullis.preview_impact",
    ]);
  });

  it("tools/call by the edge name is governed under /mcp's name and reaches the upstream under its own", async () => {
    const v = routeView(shared, "alpha")!;
    const ok = await dispatch(ctx(v.cfg, v.route, ["alpha__*"]), rpc("tools/call", { name: "read", arguments: {} }));
    expect(ok.response.result?.content).toEqual([{ type: "text", text: "ran read" }]);
    expect(upstreamCalls).toEqual([{ url: alpha.url, name: "read" }]);
    expect(decisions).toEqual([{ upstream: "alpha", tool: "read" }]);

    // The grant glob and the policy rule match the governed name; the refusal is recorded under it, as on /mcp.
    const outside = await dispatch(ctx(v.cfg, v.route, ["alpha__read"]), rpc("tools/call", { name: "write", arguments: {} }));
    expect(outside.response.result?.isError).toBe(true);
    const denied = await dispatch(ctx(v.cfg, v.route, ["alpha__*"]), rpc("tools/call", { name: "wipe", arguments: {} }));
    expect(String(((denied.response.result?.content ?? []) as JsonObject[])[0]?.text)).toContain("rule: no-wipe");
    const deniedOnMcp = await dispatch(ctx(shared, undefined, ["alpha__*"]), rpc("tools/call", { name: "alpha__wipe", arguments: {} }));
    expect(deniedOnMcp.response.result).toEqual(denied.response.result);
    expect(blocked).toEqual([
      { tool: "alpha__write", check: "grant", rule: null },
      { tool: "alpha__wipe", check: "rule", rule: "no-wipe" },
      { tool: "alpha__wipe", check: "rule", rule: "no-wipe" },
    ]);
    expect(upstreamCalls).toHaveLength(1);
  });

  it("a transparent upstream beside a prefixed one: its own names, the other's prefixed, a name that reads as the other's shadowed, each call to its owner", async () => {
    const gamma = up("gamma", { namespaced: false, url: "http://127.0.0.1:9013/gamma", onLoopback: true, egress: alpha.egress });
    const mixed = testConfig([gamma, beta], { mode: "enforce", policy: parsed.policy, agentTools: true });
    const grant = ["read", "beta__*"];
    const listed = await dispatch(ctx(mixed, undefined, grant), rpc("tools/list"));
    // gamma's own "beta__search" is shadowed by beta's search: one exposed name, one tool.
    expect(toolNames(listed)).toEqual(["read", "beta__search"]);
    expect(listedRecords.at(-1)).toEqual({ shown: ["read", "beta__search"], hidden: ["beta__search"] });
    const bare = await dispatch(ctx(mixed, undefined, grant), rpc("tools/call", { name: "read", arguments: {} }));
    expect(bare.response.result?.content).toEqual([{ type: "text", text: "ran read" }]);
    const prefixed = await dispatch(ctx(mixed, undefined, grant), rpc("tools/call", { name: "beta__search", arguments: {} }));
    expect(prefixed.response.result?.content).toEqual([{ type: "text", text: "ran search" }]);
    expect(upstreamCalls).toEqual([
      { url: gamma.url, name: "read" },
      { url: beta.url, name: "search" },
    ]);
    expect(decisions).toEqual([
      { upstream: "gamma", tool: "read" },
      { upstream: "beta", tool: "search" },
    ]);
  });

  it("an upstream's own unknown-tool error passes through a route as the upstream wrote it (only the gateway's own is renamed)", async () => {
    const listing = vi.mocked(globalThis.fetch).getMockImplementation()!;
    vi.mocked(globalThis.fetch).mockImplementation(async (input, init) => {
      const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
      if (body.method !== "tools/call") return listing(input, init);
      upstreamCalls.push({ url: String(input instanceof Request ? input.url : input), name: body.params?.name });
      // The upstream's words happen to be the gateway's spelling of the governed name.
      const error = { code: -32602, message: "Unknown tool: alpha__read" };
      return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, error }), { headers: { "content-type": "application/json" } });
    });
    const v = routeView(shared, "alpha")!;
    const out = await dispatch(ctx(v.cfg, v.route, ["alpha__*"]), rpc("tools/call", { name: "read", arguments: {} }));
    expect(upstreamCalls).toEqual([{ url: alpha.url, name: "read" }]);
    expect(out.response.error).toMatchObject({ code: -32602, message: "Unknown tool: alpha__read" });
  });

  it("names of /mcp and of other upstreams are unknown on the route, named as the client sent them; nothing is forwarded", async () => {
    const v = routeView(shared, "alpha")!;
    for (const name of ["nope", "alpha__read", "beta__search", "portcullis.preview_impact"]) {
      const out = await dispatch(ctx(v.cfg, v.route, null), rpc("tools/call", { name, arguments: {} }));
      expect(out.response.error, name).toEqual({ code: -32602, message: `Unknown tool: ${name}` });
    }
    expect(upstreamCalls).toHaveLength(0);
    // The view of beta reaches beta only.
    const vb = routeView(shared, "beta")!;
    const search = await dispatch(ctx(vb.cfg, vb.route, ["beta__*"]), rpc("tools/call", { name: "search", arguments: {} }));
    expect(search.response.result?.content).toEqual([{ type: "text", text: "ran search" }]);
    expect(upstreamCalls).toEqual([{ url: beta.url, name: "search" }]);
  });
});
