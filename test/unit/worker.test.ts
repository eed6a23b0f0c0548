/**
 * The Worker's front in workerd, without upstreams: session ownership (another principal's
 * session id is answered 404 and that session is left untouched), DNS-rebinding refusals,
 * health endpoints. The test config's upstreams point at a closed port.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { sessionObject } from "../../durable-objects/names.ts";
import type { SessionApi, SessionRecord } from "../../durable-objects/records.ts";

const H = { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" };

function seed(id: string, principal: string): SessionApi {
  const api = sessionObject(env, id)!;
  const now = Date.now();
  const rec: SessionRecord = {
    v: 1,
    id,
    principal,
    protocolVersion: "2025-11-25",
    clientCapabilities: {},
    upstreams: {},
    createdAt: now,
    touchedAt: now,
    ttlS: 3600,
  };
  void api.create(rec);
  return api;
}

describe("Worker front", () => {
  it("answers another principal's session id with 404 and leaves the session alone", async () => {
    const api = seed("a".repeat(48), "agent:owner");
    for (const [method, body] of [
      ["POST", JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" })],
      ["GET", undefined],
      ["DELETE", undefined],
    ] as const) {
      const r = await SELF.fetch("http://127.0.0.1/mcp", {
        method,
        headers: { ...H, "mcp-session-id": "a".repeat(48), ...(method === "GET" ? { accept: "text/event-stream" } : {}) },
        body,
      });
      expect(r.status, method).toBe(404);
      const j = (await r.json()) as { error: { code: number } };
      expect(j.error.code).toBe(-32000);
    }
    expect((await api.open("agent:owner"))?.ended).toBeFalsy();
    expect((await api.open("agent:owner"))?.id).toBe("a".repeat(48));
  });

  it("serves its own actor's session (the principal check is the only difference)", async () => {
    seed("b".repeat(48), "local:unit");
    const r = await SELF.fetch("http://127.0.0.1/mcp", { method: "DELETE", headers: { "mcp-session-id": "b".repeat(48) } });
    expect(r.status).toBe(200);
  });

  it("refuses a foreign Host or Origin with 403 and accepts loopback names", async () => {
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    expect((await SELF.fetch("http://evil.example.com/mcp", { method: "POST", headers: H, body: ping })).status).toBe(403);
    expect((await SELF.fetch("http://127.0.0.1/mcp", { method: "POST", headers: { ...H, origin: "https://evil.example.com" }, body: ping })).status).toBe(403);
    for (const host of ["localhost:8787", "127.0.0.1", "[::1]:9"]) {
      const r = await SELF.fetch(`http://${host}/mcp`, { method: "POST", headers: { ...H, "mcp-session-id": "c".repeat(48) }, body: ping });
      expect(r.status, host).toBe(404);
    }
  });

  it("reports liveness, and readiness 503 naming each unreachable upstream", async () => {
    expect(await (await SELF.fetch("http://127.0.0.1/healthz")).json()).toEqual({ ok: true });
    const r = await SELF.fetch("http://127.0.0.1/readyz");
    expect(r.status).toBe(503);
    expect(await r.json()).toEqual({
      ok: false,
      upstreams: [
        { name: "alpha", ok: false },
        { name: "beta", ok: false },
      ],
    });
  });
});
