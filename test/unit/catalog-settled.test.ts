/**
 * The tool catalog (src/upstream/tool-catalog.ts) shares only settled entries between requests: in workerd,
 * with the network replaced by a fake upstream (globalThis.fetch), a request whose own catalog
 * read never settles (a request that has ended, in Workers) does not hold up another request's
 * resolve — that one reads the list for itself — and once a read has landed, later requests
 * resolve from it without asking the upstream again; a per-principal upstream's entries stay
 * apart per principal.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { UpstreamConfig } from "../../src/config/gateway-config.ts";
import { DEFAULT_EGRESS_RULES } from "../../src/config/egress-schema.ts";
import type { Principal } from "../../src/config/principal.ts";
import { NO_HALTS } from "../../src/governance/halts.ts";
import { NO_LEDGER } from "../../src/governance/steps.ts";
import { toolCatalog } from "../../src/upstream/tool-catalog.ts";
import { clearCatalog } from "../../src/upstream/catalog-cache.ts";
import type { CallContext } from "../../src/protocol/call-context.ts";
import type { Leg } from "../../durable-objects/contract.ts";
import type { JsonRpcRequest } from "../../src/wire/jsonrpc.ts";
import { testConfig, testUpstream } from "./fixtures.ts";

const up: UpstreamConfig = testUpstream("alpha", "http://127.0.0.1:9011/alpha", { timeoutMs: 2000, egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true } });
const who: Principal = { sub: "agent:a", team: "t", roles: ["agent"], tools: null, authenticated: true };
let lists = 0;

beforeEach(() => {
  clearCatalog();
  lists = 0;
  vi.spyOn(globalThis, "fetch").mockImplementation(async (_input, init) => {
    const body = JSON.parse(String(init?.body ?? "{}")) as JsonRpcRequest;
    if (body.method === "tools/list") lists++;
    const result = body.method === "tools/list" ? { tools: [{ name: "read", inputSchema: { type: "object" } }] } : {};
    return new Response(JSON.stringify({ jsonrpc: "2.0", id: body.id, result }), { headers: { "content-type": "application/json" } });
  });
});
afterEach(() => vi.restoreAllMocks());

/** One request's context; `leg` is how that request reaches the upstream. */
function request(leg: () => Promise<Leg | null>, principal: Principal = who, upstreams: UpstreamConfig[] = [up]): CallContext {
  return {
    cfg: testConfig(upstreams),
    era: "modern",
    principal,
    signal: new AbortController().signal,
    paramHeaders: [],
    callerFiltered: false,
    runId: null,
    legs: {
      leg,
      renew: async () => null,
      capabilities: async () => ({ tools: {} }),
      recordRequest: async () => undefined,
    },
    stores: {
      ledger: { ...NO_LEDGER, listed: () => undefined, hold: async () => "" },
      killSwitch: () => NO_HALTS,
    },
    relay: { send: async () => undefined, upstreamRequest: async () => undefined },
  };
}
const modernLeg = async (): Promise<Leg> => ({ era: "modern", meta: {} });

describe("the catalog shares settled entries only", () => {
  it("a request whose read never settles does not hold up another's resolve; the read that landed serves later requests", async () => {
    let stuck = false;
    const ended = request(() => {
      stuck = true;
      return new Promise<Leg | null>(() => undefined); // never settles, like a request that has ended
    });
    void toolCatalog(ended).resolve("alpha__read");
    await Promise.resolve();
    expect(stuck).toBe(true);
    const live = toolCatalog(request(modernLeg)).resolve("alpha__read");
    const got = await Promise.race([live, new Promise<"hung">((r) => setTimeout(() => r("hung"), 1500))]);
    expect(got).not.toBe("hung");
    expect(got && got !== "hung" ? got.tool.name : null).toBe("read");
    expect(lists).toBe(1);
    // A third request finds the settled entry: no upstream request at all.
    let reached = false;
    const third = await toolCatalog(
      request(async () => {
        reached = true;
        return modernLeg();
      }),
    ).resolve("alpha__read");
    expect(third?.tool.exposedName).toBe("alpha__read");
    expect(reached).toBe(false);
    expect(lists).toBe(1);
  });

  it("concurrent cold resolves each read for themselves and both answer", async () => {
    const [a, b] = await Promise.all([toolCatalog(request(modernLeg)).resolve("alpha__read"), toolCatalog(request(modernLeg)).resolve("alpha__read")]);
    expect(a?.tool.name).toBe("read");
    expect(b?.tool.name).toBe("read");
    expect(lists).toBe(2);
  });

  it("a per-principal upstream's entry is not served to another principal", async () => {
    const vault = testUpstream("vault", "http://127.0.0.1:9012/vault", {
      timeoutMs: 2000,
      egress: { ...DEFAULT_EGRESS_RULES, allow_loopback: true },
      credentials: { mode: "per_principal", header: "Authorization", prefix: "Bearer " },
    });
    await toolCatalog(request(modernLeg, who, [vault])).resolve("vault__read");
    expect(lists).toBe(1);
    await toolCatalog(request(modernLeg, { ...who, sub: "agent:b" }, [vault])).resolve("vault__read");
    expect(lists).toBe(2);
  });
});
