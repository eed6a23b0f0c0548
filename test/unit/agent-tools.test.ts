/**
 * A grant decides every tool an agent sees, the gateway's own agent tools (src/front/agent-tools.ts)
 * included: in both eras and both list shapes (one transparent upstream, several namespaced), a
 * grant for one tool lists exactly that tool; `portcullis.*`, one agent tool's name or `*` cover
 * them; and a call to an agent tool outside the grant gets the governed path's grant refusal
 * (isError, readable, recorded as blocked), while one inside it is answered by the gateway. The
 * network is a fake upstream (globalThis.fetch). Owns nothing of the gateway.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { GatewayConfig, UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import { NO_LEDGER, type ToolCall } from "../../src/governance/steps.ts";
import { agentTools, offersAgentTool } from "../../src/front/agent-tools.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import { dispatch } from "../../src/front/dispatch.ts";
import type { JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

const AGENT_TOOLS = [
  "portcullis.list_runs",
  "portcullis.get_run",
  "portcullis.get_action_trace",
  "portcullis.plan_rollback",
  "portcullis.dry_run_rollback",
  "portcullis.validate_mapping",
  "portcullis.preview_impact",
];

const mk = (name: string, url: string, extra: Partial<UpstreamConfig> = {}): UpstreamConfig =>
  testUpstream(name, url, { timeoutMs: 2000, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true }, ...extra });
const everything = mk("everything", "http://127.0.0.1:9101/everything");
const notes = mk("notes", "http://127.0.0.1:9102/notes");
const solo = mk("solo", "http://127.0.0.1:9103/solo", { namespaced: false });

let upstreamCalls: string[] = [];
let blocked: { tool: string; check: string; reason: string }[] = [];

beforeEach(() => {
  clearCatalog();
  upstreamCalls = [];
  blocked = [];
  vi.spyOn(globalThis, "fetch").mockImplementation(async (input, init) => {
    const url = String(input instanceof Request ? input.url : input);
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    const reply = (result: JsonObject) =>
      new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
    if (body.method === "tools/list") {
      const names = url.includes("notes") ? ["create_note"] : ["echo", "add"];
      return reply({ tools: names.map((name) => ({ name, inputSchema: { type: "object" } })) });
    }
    if (body.method === "tools/call") {
      upstreamCalls.push(String(body.params?.name));
      return reply({ content: [{ type: "text", text: `ran ${String(body.params?.name)}` }] });
    }
    return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, error: { code: -32601, message: "Method not found" } }), {
      headers: { "content-type": "application/json" },
    });
  });
});
afterEach(() => vi.restoreAllMocks());

const agent = (tools: string[] | null): Principal => ({ sub: "agent:narrow", team: "t", roles: ["agent"], tools, authenticated: true });

function ctx(cfg: GatewayConfig, who: Principal, era: "legacy" | "modern"): CallContext {
  return {
    cfg,
    era,
    principal: who,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: who.tools !== null,
    runId: null,
    legs: {
      leg: async () => (era === "modern" ? { era: "modern", meta: {} } : { era: "legacy", protocolVersion: "2025-11-25" }),
      renew: async () => null,
      capabilities: async () => ({ tools: {} }),
      recordRequest: async () => undefined,
    },
    stores: {
      ledger: {
        ...NO_LEDGER,
        blocked: async (call: ToolCall, r) => {
          blocked.push({ tool: call.exposedName, check: r.check, reason: r.reason });
          return "blocked-1";
        },
        listed: () => undefined,
        hold: async () => "",
      },
      killSwitch: () => NO_HALTS,
    },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
  };
}
const rpc = (method: string, params: JsonObject = {}): JsonRpcRequest => ({ jsonrpc: "2.0", id: 3, method, params });
const names = (r: { response: { result?: JsonObject } }) => ((r.response.result?.tools ?? []) as JsonObject[]).map((t) => t.name);
const textOf = (r: { response: { result?: JsonObject } }) => String(((r.response.result?.content ?? []) as JsonObject[])[0]?.text);

const namespaced = testConfig([everything, notes], { agentTools: true });
const transparent = testConfig([solo], { agentTools: true });

describe("the agent tools are grant-scoped (the listing filter)", () => {
  it("agentTools and offersAgentTool follow the grant's globs; `*` and no globs (the loopback actor) cover them; agent_tools off offers none", () => {
    const shown = (tools: string[] | null) => agentTools(namespaced, agent(tools)).map((t) => t.name);
    expect(shown(["everything__echo"])).toEqual([]);
    expect(shown(["everything__*"])).toEqual([]);
    expect(shown(["portcullis.*"])).toEqual(AGENT_TOOLS);
    expect(shown(["*"])).toEqual(AGENT_TOOLS);
    expect(shown(null)).toEqual(AGENT_TOOLS);
    expect(shown(["everything__echo", "portcullis.plan_rollback"])).toEqual(["portcullis.plan_rollback"]);
    expect(shown(["portcullis.*_rollback"])).toEqual(["portcullis.plan_rollback", "portcullis.dry_run_rollback"]);
    expect(agentTools(testConfig([everything]), agent(["*"]))).toEqual([]);
    expect(offersAgentTool(namespaced, agent(["portcullis.plan_rollback"]), "portcullis.plan_rollback")).toBe(true);
    expect(offersAgentTool(namespaced, agent(["portcullis.plan_rollback"]), "portcullis.list_runs")).toBe(false);
    expect(offersAgentTool(namespaced, agent(["*"]), "portcullis.whoami")).toBe(false); // an operator tool, never an agent tool
    expect(offersAgentTool(testConfig([everything]), agent(["*"]), "portcullis.list_runs")).toBe(false);
  });

  for (const era of ["legacy", "modern"] as const) {
    it(`${era}: a grant for one tool lists exactly that tool (several namespaced upstreams, and one transparent upstream)`, async () => {
      expect(names(await dispatch(ctx(namespaced, agent(["everything__echo"]), era), rpc("tools/list")))).toEqual(["everything__echo"]);
      expect(names(await dispatch(ctx(transparent, agent(["echo"]), era), rpc("tools/list")))).toEqual(["echo"]);
      // One agent tool, granted alone, is listed alone.
      expect(names(await dispatch(ctx(namespaced, agent(["portcullis.plan_rollback"]), era), rpc("tools/list")))).toEqual(["portcullis.plan_rollback"]);
      expect(names(await dispatch(ctx(transparent, agent(["portcullis.preview_impact"]), era), rpc("tools/list")))).toEqual(["portcullis.preview_impact"]);
    });

    it(`${era}: 'everything__*,portcullis.*' and '*' list the upstream tools and every agent tool, preview_impact last`, async () => {
      const both = names(await dispatch(ctx(namespaced, agent(["everything__*", "portcullis.*"]), era), rpc("tools/list")));
      expect(both).toEqual(["everything__echo", "everything__add", ...AGENT_TOOLS]);
      const wide = names(await dispatch(ctx(namespaced, agent(["*"]), era), rpc("tools/list")));
      expect(wide).toEqual(["everything__echo", "everything__add", "notes__create_note", ...AGENT_TOOLS]);
      const actor = names(await dispatch(ctx(transparent, agent(null), era), rpc("tools/list")));
      expect(actor).toEqual(["echo", "add", ...AGENT_TOOLS]);
    });
  }
});

describe("a call to an agent tool outside the grant (the call refusal)", () => {
  for (const era of ["legacy", "modern"] as const) {
    it(`${era}: is refused like any tool outside the grant — isError, readable, recorded as blocked by the grant check`, async () => {
      for (const name of AGENT_TOOLS) {
        const out = await dispatch(ctx(namespaced, agent(["everything__echo"]), era), rpc("tools/call", { name, arguments: { run: "r-1" } }));
        expect(out.response.error, name).toBeUndefined();
        expect(out.response.result?.isError, name).toBe(true);
        expect(textOf(out)).toBe(
          `Blocked by Portcullis: tool "${name}" is outside the grant of agent:narrow; it cannot be listed or called with this grant (check: grant, decision: blocked-1); ask the issuer of your grant`,
        );
      }
      // The same answer as an upstream tool outside the grant, and the same record.
      const upstreamOutside = await dispatch(
        ctx(namespaced, agent(["everything__echo"]), era),
        rpc("tools/call", { name: "notes__create_note", arguments: {} }),
      );
      expect(textOf(upstreamOutside)).toContain('Blocked by Portcullis: tool "notes__create_note" is outside the grant');
      expect(blocked.map((b) => [b.tool, b.check])).toEqual([...AGENT_TOOLS, "notes__create_note"].map((n) => [n, "grant"]));
      expect(upstreamCalls).toEqual([]);
    });

    it(`${era}: inside the grant it is the gateway's own answer (nothing blocked, nothing forwarded)`, async () => {
      const preview = await dispatch(
        ctx(namespaced, agent(["everything__echo", "portcullis.preview_impact"]), era),
        rpc("tools/call", { name: "portcullis.preview_impact", arguments: { name: "everything__echo", arguments: { message: "hi" } } }),
      );
      expect(preview.response.result?.isError).toBeUndefined();
      expect(preview.response.result?.structuredContent).toBeDefined();
      // A run tool granted by `portcullis.*`: answered by the run tools (this bare context has no ledger to read).
      const runs = await dispatch(ctx(namespaced, agent(["portcullis.*"]), era), rpc("tools/call", { name: "portcullis.list_runs", arguments: {} }));
      expect(textOf(runs)).toBe("portcullis.list_runs: runs cannot be read on this route");
      expect(blocked).toEqual([]);
      expect(upstreamCalls).toEqual([]);
    });
  }

  it("with agent_tools off: outside the grant it is the grant refusal, inside it an unknown tool (the grant first, whether or not the tool exists)", async () => {
    const off = testConfig([everything, notes]);
    const outside = await dispatch(ctx(off, agent(["everything__echo"]), "modern"), rpc("tools/call", { name: "portcullis.list_runs", arguments: {} }));
    expect(textOf(outside)).toContain('Blocked by Portcullis: tool "portcullis.list_runs" is outside the grant');
    const inside = await dispatch(ctx(off, agent(["*"]), "modern"), rpc("tools/call", { name: "portcullis.list_runs", arguments: {} }));
    expect(inside.response.error).toEqual({ code: -32602, message: "Unknown tool: portcullis.list_runs" });
  });
});
