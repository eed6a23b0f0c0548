/**
 * Upstream credentials on the production build: a per-principal upstream gets only the calling
 * principal's registered token, never the grant; a missing or refused credential is an isError
 * the model can read; and no secret or token ever appears in what the gateway printed.
 */
import { readFileSync } from "node:fs";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";

const url = inject("namespacedUrl");
const origin = new URL(url).origin;
const tokens: Record<string, string> = {};
const clients: Client[] = [];

beforeAll(async () => {
  const keys = await parseKeySet(inject("signingKey"));
  for (const who of ["carol", "dave"]) {
    tokens[who] = (
      await mintGrant(
        keys,
        { iss: origin, aud: origin, sub: `agent:${who}`, team: "e2e", roles: ["agent"], tools: ["vault__*", "everything__echo"], ttlSeconds: 900 },
        { maxLifetimeSeconds: 86400 },
      )
    ).token;
  }
});
afterAll(async () => {
  for (const c of clients) await c.close().catch(() => undefined);
});

async function client(who: string) {
  const c = new Client({ name: `cred-${who}`, version: "1" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } });
  await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${tokens[who]}` } } }));
  clients.push(c);
  return c;
}

const register = (who: string, token: string) =>
  fetch(`${origin}/v1/credentials/vault`, {
    method: "PUT",
    headers: { "content-type": "application/json", authorization: `Bearer ${tokens[who]}` },
    body: JSON.stringify({ token }),
  });
const vaultLog = async () => (await (await fetch(inject("vaultLogUrl"))).json()) as { method: string; name?: string; headers: Record<string, string> }[];
const text = (r: { content?: unknown }) => JSON.stringify(r.content);

describe("per-principal upstream credentials", () => {
  it("tells the model when no credential is registered, and sends the upstream nothing", async () => {
    const c = await client("carol");
    const before = (await vaultLog()).length;
    const r = await c.callTool({ name: "vault__ask_roots", arguments: {} });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/no credential is registered for upstream vault/);
    expect((await vaultLog()).length).toBe(before);
  });

  it("injects only the caller's own registered token", async () => {
    expect((await register("carol", "user-carol-secret-1")).status).toBe(200);
    expect((await register("dave", "user-dave-secret-2")).status).toBe(200);
    const carol = await client("carol");
    const dave = await client("dave");
    const start = (await vaultLog()).length;
    await carol.callTool({ name: "vault__ask_roots", arguments: {} }).catch(() => undefined);
    const afterCarol = (await vaultLog()).slice(start);
    expect(afterCarol.length).toBeGreaterThan(0);
    expect(afterCarol.every((s) => s.headers.authorization === "Bearer user-carol-secret-1")).toBe(true);
    await dave.callTool({ name: "vault__ask_roots", arguments: {} }).catch(() => undefined);
    const afterDave = (await vaultLog()).slice(start + afterCarol.length);
    expect(afterDave.every((s) => s.headers.authorization === "Bearer user-dave-secret-2")).toBe(true);
    for (const s of await vaultLog()) {
      expect(JSON.stringify(s.headers)).not.toContain(tokens.carol!.slice(0, 40));
      expect(JSON.stringify(s.headers)).not.toContain(tokens.dave!.slice(0, 40));
    }
  });

  it("turns an upstream 401 into an isError naming the credential problem", async () => {
    expect((await register("dave", "wrong-token")).status).toBe(200);
    const dave = await client("dave");
    const r = await dave.callTool({ name: "vault__ask_roots", arguments: {} });
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/vault: refused the gateway's per_principal credential \(HTTP 401\)/);
  });

  it("refuses registration for upstreams that broker their own credential", async () => {
    const r = await fetch(`${origin}/v1/credentials/everything`, {
      method: "PUT",
      headers: { "content-type": "application/json", authorization: `Bearer ${tokens.carol}` },
      body: JSON.stringify({ token: "x" }),
    });
    expect(r.status).toBe(400);
  });
});

describe("what the gateway printed", () => {
  it("names the credential mode of failed requests, prints nothing per successful call, and holds no secret, credential or grant token", async () => {
    const lines = () =>
      readFileSync(inject("namespacedLogFile"), "utf8")
        .split("\n")
        .filter((l) => l.includes('"event":"upstream_request"'));
    const before = lines().length;
    const r = await (await client("carol")).callTool({ name: "everything__echo", arguments: { message: "brokered" } });
    expect(r.isError).toBeFalsy();
    await new Promise((r) => setTimeout(r, 500));
    // The per-principal calls above failed (no credential, a refused one): each printed its mode.
    expect(lines().some((l) => l.includes('"credential":"per_principal"'))).toBe(true);
    // The brokered call succeeded: no log line on the hot path (no operator configured one).
    const brokered = lines()
      .slice(before)
      .filter((l) => l.includes('"upstream":"everything"'));
    expect(brokered).toEqual([]);
    const logs = readFileSync(inject("namespacedLogFile"), "utf8");
    for (const secret of ["ev-secret-1", "conf-secret-2", "user-carol-secret-1", "user-dave-secret-2", tokens.carol!.slice(0, 40), tokens.dave!.slice(0, 40)]) {
      expect(logs).not.toContain(secret);
    }
    const keyMaterial = JSON.parse(inject("signingKey")) as { d: string };
    expect(logs).not.toContain(keyMaterial.d);
  });
});
