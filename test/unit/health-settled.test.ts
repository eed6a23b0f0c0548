/**
 * /summary's upstream listings (src/services/health.ts) are cached as settled values only: in workerd
 * with the network replaced by a fake modern upstream (globalThis.fetch), a summary whose
 * tools/list never answers (a request that has ended, in Workers) does not hold up another
 * summary, which lists for itself; the listing that landed serves later summaries for 2 s, with
 * the caller's grant still applied per call.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { summary } from "../../src/services/health.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

const up: UpstreamConfig = testUpstream("docs", `http://127.0.0.1:9031/docs-${crypto.randomUUID()}`, {
  timeoutMs: 2000,
  egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true },
});
const who: Principal = { sub: "agent:h", team: "t", roles: ["agent"], tools: null, authenticated: true };
let lists = 0;
let hangNext = false;

beforeEach(() => {
  lists = 0;
  vi.spyOn(globalThis, "fetch").mockImplementation(async (_input, init) => {
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    const reply = (result: object) =>
      new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
    if (body.method === "server/discover") return reply({ supportedVersions: ["2026-07-28"], capabilities: { tools: {} } });
    if (body.method === "tools/list") {
      lists++;
      if (hangNext) {
        hangNext = false;
        return new Promise<Response>(() => undefined);
      }
      return reply({
        tools: [
          { name: "search", inputSchema: { type: "object" } },
          { name: "read", inputSchema: { type: "object" } },
        ],
      });
    }
    return reply({});
  });
});
afterEach(() => vi.restoreAllMocks());

describe("summary's listings", () => {
  it("a listing that never answers holds up no other summary; the one that landed serves the next, grant applied per call", async () => {
    const cfg = testConfig([up]);
    hangNext = true;
    void summary(cfg, who);
    await new Promise((r) => setTimeout(r, 50));
    expect(lists).toBe(1);
    const got = await Promise.race([summary(cfg, who), new Promise<"hung">((r) => setTimeout(() => r("hung"), 1500))]);
    expect(got).toEqual({ upstreams: [{ name: "docs", description: null, namespaced: true, tools: 2 }] });
    expect(lists).toBe(2);
    const narrow = await summary(cfg, { ...who, tools: ["docs__search"] });
    expect(narrow.upstreams[0]?.tools).toBe(1);
    expect(lists).toBe(2); // from the settled listing
  });
});
