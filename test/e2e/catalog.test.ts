/**
 * The tool catalog on the production build: a tool whose exposed name had to be aliased (over
 * 64 characters) is called through a gateway that never served tools/list — a fresh process,
 * hence a fresh isolate — and reaches the upstream under its real name. The alias comes from
 * another gateway's listing of the same upstream.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LONG_TOOL, startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, startPortcullis } from "./harness.ts";

/** One 2026-07-28 request with the SEP-2243 headers; the JSON answer. */
// biome-ignore lint/suspicious/noExplicitAny: test answers are read loosely
async function modernPost(url: string, method: string, params: Record<string, unknown>): Promise<{ status: number; body: any }> {
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
  const headers: Record<string, string> = {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": method,
  };
  if (typeof params.name === "string") headers["mcp-name"] = params.name;
  const r = await fetch(url, {
    method: "POST",
    headers,
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: { ...params, _meta: meta } }),
    signal: AbortSignal.timeout(30_000),
  });
  return { status: r.status, body: await r.json() };
}

type Upstream = Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let upstream: Upstream;
let lister: Proc & { url: string };
let fresh: Proc & { url: string };

const config = (url: string) => `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: longnames
    url: ${url}
    namespace: true
    timeout: 10s
`;

beforeAll(async () => {
  upstream = await startModernOnlyUpstream({ longTool: true });
  [lister, fresh] = await Promise.all([startPortcullis(config(upstream.url), await freePort()), startPortcullis(config(upstream.url), await freePort())]);
}, 180_000);
afterAll(async () => {
  await Promise.all([lister?.stop(), fresh?.stop(), upstream?.close()]);
});

describe("aliased tool names", () => {
  it("resolve in a gateway that never listed them", async () => {
    const list = await modernPost(lister.url, "tools/list", {});
    const names = (list.body.result.tools as { name: string }[]).map((t) => t.name);
    const alias = names.find((n) => n.startsWith("longnames__record_"))!;
    expect(alias, names.join(", ")).toBeDefined();
    expect(alias.length).toBeLessThanOrEqual(64);
    expect(alias).not.toBe(`longnames__${LONG_TOOL}`);

    const before = upstream.log.length;
    const call = await modernPost(fresh.url, "tools/call", { name: alias, arguments: { quarter: "Q3" } });
    expect(call.status).toBe(200);
    expect(call.body.result.content[0].text).toBe('attested {"quarter":"Q3"}');
    // The fresh gateway read the upstream's catalog itself (it had never listed), then called the real name.
    const reached = upstream.log.slice(before).map((s) => `${s.method}${s.name ? ` ${s.name}` : ""}`);
    expect(reached).toContain("tools/list");
    expect(reached.at(-1)).toBe(`tools/call ${LONG_TOOL}`);
    expect(reached.filter((r) => r.startsWith("tools/call"))).toEqual([`tools/call ${LONG_TOOL}`]);
  });

  it("an alias of a tool the upstream does not list is unknown and never forwarded", async () => {
    const before = upstream.log.length;
    const call = await modernPost(fresh.url, "tools/call", { name: "longnames__record_quarterly_quarterly_quarterly_quarte_deadbeef", arguments: {} });
    expect(call.body.error.code).toBe(-32602);
    expect(upstream.log.slice(before).filter((s) => s.method === "tools/call")).toEqual([]);
  });
});
