/**
 * The Worker's front in workerd, without upstreams: session ownership (another principal's
 * session id is answered 404 and that session is left untouched), DNS-rebinding refusals,
 * health endpoints. The test config's upstreams point at a closed port.
 */
import { env, runInDurableObject, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { sessionObject } from "../../durable-objects/object-names.ts";
import type { SessionApi, SessionRecord } from "../../durable-objects/contract.ts";

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
    // The gateway was started on http://127.0.0.1 (PORTCULLIS_ORIGIN in vitest.config.ts): its loopback
    // spellings at that port are it; the same names at another port are another gateway.
    for (const host of ["localhost", "127.0.0.1", "[::1]", "LOCALHOST", "127.0.0.1:80"]) {
      const r = await SELF.fetch(`http://127.0.0.1/mcp`, { method: "POST", headers: { ...H, host, "mcp-session-id": "c".repeat(48) }, body: ping });
      expect(r.status, host).toBe(404);
    }
    for (const host of ["localhost:8787", "127.0.0.1:8854", "[::1]:9", "gw.example.com:8443", "127.0.0.1@evil.example.com", "gw.example.com/x"]) {
      const r = await SELF.fetch(`http://127.0.0.1/mcp`, { method: "POST", headers: { ...H, host, "mcp-session-id": "c".repeat(48) }, body: ping });
      expect(r.status, host).toBe(403);
    }
    // allowed_hosts: gw.example.com (no port: the default port only).
    const allowed = await SELF.fetch(`http://127.0.0.1/mcp`, {
      method: "POST",
      headers: { ...H, host: "gw.example.com", "mcp-session-id": "c".repeat(48) },
      body: ping,
    });
    expect(allowed.status).toBe(404);
  });

  it("applies the Host check on every route, metadata and health included", async () => {
    for (const path of [
      "/healthz",
      "/readyz",
      "/summary",
      "/.well-known/oauth-protected-resource",
      "/.well-known/oauth-protected-resource/mcp",
      "/.well-known/jwks.json",
      "/v1/ledger",
      "/nowhere",
    ]) {
      const r = await SELF.fetch(`http://127.0.0.1${path}`, { headers: { host: "evil.example.com" } });
      expect(r.status, path).toBe(403);
    }
  });

  it("names its configured origin in protected-resource metadata, never the request's Host", async () => {
    for (const host of ["127.0.0.1", "localhost", "gw.example.com"]) {
      const r = await SELF.fetch("http://127.0.0.1/.well-known/oauth-protected-resource/mcp", { headers: { host } });
      expect(r.status, host).toBe(200);
      const j = (await r.json()) as { resource: string; authorization_servers?: string[]; resource_documentation: string };
      expect(j.resource, host).toBe("http://127.0.0.1/mcp");
      // auth.oauth off: the gateway is no authorization server, so none is named (metadata.test.ts).
      expect(j.authorization_servers).toBeUndefined();
      expect(j.resource_documentation).toBe("http://127.0.0.1/summary");
    }
    const root = (await (await SELF.fetch("http://127.0.0.1/.well-known/oauth-protected-resource", { headers: { host: "gw.example.com" } })).json()) as {
      resource: string;
    };
    expect(root.resource).toBe("http://127.0.0.1");
    const challenge = (await SELF.fetch("http://127.0.0.1/v1/ledger", { headers: { host: "gw.example.com" } })).headers.get("www-authenticate");
    expect(challenge).toContain('resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"');
  });

  it("an unknown or malformed Mcp-Session-Id leaves no stored state behind", async () => {
    const ping = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    const ids = ["d".repeat(48), "e".repeat(48), "f".repeat(48)];
    for (const [i, id] of ids.entries()) {
      const method = (["POST", "GET", "DELETE"] as const)[i]!;
      const r = await SELF.fetch("http://127.0.0.1/mcp", {
        method,
        headers: { ...H, "mcp-session-id": id, ...(method === "GET" ? { accept: "text/event-stream" } : {}) },
        body: method === "POST" ? ping : undefined,
      });
      expect(r.status, method).toBe(404);
      const stub = env.SESSIONS.get(env.SESSIONS.idFromName(`session:${id}`));
      const tables = await runInDurableObject(stub, (_i, state) => state.storage.sql.exec("SELECT name FROM sqlite_master").toArray());
      expect(tables, method).toEqual([]);
      expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    }
    const bad = await SELF.fetch("http://127.0.0.1/mcp", { method: "POST", headers: { ...H, "mcp-session-id": "not-a-session" }, body: ping });
    expect(bad.status).toBe(404);
  });

  it("refuses initialize fields a session would keep beyond 64 KiB, and creates no session", async () => {
    const big = { experimental: { blob: "x".repeat(3 * 1024 * 1024) } };
    for (const params of [
      { protocolVersion: "2025-11-25", capabilities: big, clientInfo: { name: "c", version: "1" } },
      { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "c", version: "1", pad: "y".repeat(70 * 1024) } },
    ]) {
      const r = await SELF.fetch("http://127.0.0.1/mcp", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params }),
      });
      expect(r.status).toBe(400);
      expect(r.headers.get("mcp-session-id")).toBeNull();
      const j = (await r.json()) as { id: number; error: { code: number; message: string } };
      expect(j.id).toBe(1);
      expect(j.error.code).toBe(-32602);
      expect(j.error.message).toMatch(/at most 65536 bytes/);
    }
  });

  it("/v1/* never runs as the unauthenticated actor, on loopback too", async () => {
    const put = await SELF.fetch("http://127.0.0.1/v1/credentials/alpha", {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: "t0ken" }),
    });
    expect(put.status).toBe(401);
    const del = await SELF.fetch("http://127.0.0.1/v1/credentials/alpha", { method: "DELETE" });
    expect(del.status).toBe(401);
    for (const [method, path] of [
      ["POST", "/v1/grants"],
      ["POST", "/v1/grants/abcdefgh12/revoke"],
      ["GET", "/v1/ledger"],
      ["GET", "/v1/ledger/export"],
    ] as const) {
      expect((await SELF.fetch(`http://127.0.0.1${path}`, { method })).status, path).toBe(401);
    }
  });

  it("reports liveness, and readiness 503 naming each unreachable upstream (to the loopback dev actor)", async () => {
    expect(await (await SELF.fetch("http://127.0.0.1/healthz")).json()).toEqual({ ok: true });
    const r = await SELF.fetch("http://127.0.0.1/readyz");
    expect(r.status).toBe(503);
    expect(await r.json()).toEqual({
      ok: false,
      status: "unavailable",
      upstreams: [
        { name: "alpha", ok: false, last_list_in_this_isolate: {} },
        { name: "beta", ok: false, last_list_in_this_isolate: {} },
      ],
    });
  });

  it("a tools/list no upstream answers is a JSON-RPC error naming each and its reason, and /readyz then shows each list failing", async () => {
    const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
    const r = await SELF.fetch("http://127.0.0.1/mcp", {
      method: "POST",
      headers: { ...H, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list", params: { _meta: meta } }),
    });
    const j = (await r.json()) as { result?: unknown; error?: { code: number; message: string; data: Record<string, { upstream: string; reason: string }[]> } };
    expect(j.result).toBeUndefined();
    expect(j.error?.code).toBe(-32603);
    expect(j.error?.message).toMatch(/^no upstream answered tools\/list: alpha: unreachable \(.+\); beta: unreachable \(.+\)$/);
    expect((j.error?.data["portcullis/unavailable"] ?? []).map((g) => [g.upstream, g.reason])).toEqual([
      ["alpha", "unreachable"],
      ["beta", "unreachable"],
    ]);
    const ready = (await (await SELF.fetch("http://127.0.0.1/readyz")).json()) as {
      status: string;
      upstreams: { name: string; last_list_in_this_isolate: Record<string, { outcome: string; reason: string; since: string; at: string }> }[];
    };
    expect(ready.status).toBe("unavailable");
    for (const u of ready.upstreams) {
      const last = u.last_list_in_this_isolate["tools/list"]!;
      expect(last, u.name).toMatchObject({ outcome: "failing", reason: "unreachable" });
      expect(Date.parse(last.since)).toBeLessThanOrEqual(Date.parse(last.at));
    }
  });
});
