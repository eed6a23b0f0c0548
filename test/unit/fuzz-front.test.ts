/**
 * Invariant 9 under fuzzing: whatever body and protocol headers a client sends to /mcp, the
 * answer is a clear 4xx/2xx, never a 5xx. Upstreams in the unit config are unreachable, so every
 * request is decided by the front itself. The other half of the property — never a forward
 * without a decision record — needs an upstream that answers: test/unit/fuzz-front-records.test.ts.
 */
import { SELF } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";

const methods = [
  "initialize",
  "tools/list",
  "tools/call",
  "prompts/get",
  "resources/read",
  "server/discover",
  "subscriptions/listen",
  "ping",
  "completion/complete",
  "tasks/get",
  "x/y",
];
const meta = fc.option(
  fc.record(
    {
      "io.modelcontextprotocol/protocolVersion": fc.oneof(fc.constant("2026-07-28"), fc.constant("2025-11-25"), fc.string({ maxLength: 12 })),
      "io.modelcontextprotocol/clientCapabilities": fc.oneof(fc.constant({}), fc.jsonValue({ maxDepth: 2 })),
    },
    { requiredKeys: [] },
  ),
);
const message = fc
  .oneof(
    fc.record(
      {
        jsonrpc: fc.oneof(fc.constant("2.0"), fc.string({ maxLength: 4 })),
        id: fc.oneof(fc.integer(), fc.string({ maxLength: 8 }), fc.constant(null), fc.jsonValue({ maxDepth: 1 })),
        method: fc.oneof(fc.constantFrom(...methods), fc.string({ maxLength: 20 })),
        params: fc.oneof(
          fc.record({ name: fc.string({ maxLength: 40 }), uri: fc.string({ maxLength: 40 }), _meta: meta }, { requiredKeys: [] }),
          fc.jsonValue({ maxDepth: 2 }),
        ),
      },
      { requiredKeys: [] },
    ),
    fc.jsonValue({ maxDepth: 3 }),
  )
  .map((m) => JSON.stringify(m));
const body = fc.oneof(
  message,
  fc.string({ maxLength: 200 }),
  fc.array(message, { maxLength: 3 }).map((a) => `[${a.join(",")}]`),
);
const headers = fc.record(
  {
    "content-type": fc.constantFrom("application/json", "text/plain", "application/json; charset=utf-8", ""),
    accept: fc.constantFrom("application/json, text/event-stream", "application/json", "*/*", ""),
    "mcp-protocol-version": fc.constantFrom("2026-07-28", "2025-11-25", "2025-03-26", "bogus", ""),
    "mcp-method": fc.oneof(fc.constantFrom(...methods), fc.string({ maxLength: 10 })),
    "mcp-name": fc.oneof(fc.string({ maxLength: 20 }), fc.constant("=?base64?!!?=")),
    "mcp-session-id": fc.constantFrom("", "f".repeat(48), "not-a-session"),
    "last-event-id": fc.constantFrom("", "s0/1", "../x"),
  },
  { requiredKeys: [] },
);

describe("the /mcp front under fuzzing", () => {
  it("never answers 5xx", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("POST", "GET", "DELETE"), headers, body, async (method, h, b) => {
        const clean = Object.fromEntries(Object.entries(h).filter(([, v]) => v !== "" && /^[\t\x20-\x7e]*$/.test(v)));
        const r = await SELF.fetch("http://127.0.0.1/mcp", { method, headers: clean, ...(method === "POST" ? { body: b } : {}) });
        expect(r.status, `${method} ${JSON.stringify(clean)} ${b.slice(0, 120)}`).toBeLessThan(500);
        if (r.body) await r.body.cancel();
      }),
      { numRuns: 300 },
    );
  });
});
