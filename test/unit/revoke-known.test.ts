/**
 * Whether a revocation's jti is one the gateway knows (src/routes/grants.ts over RevocationsDO):
 * a grant minted through POST /v1/grants is known (`known: true`, no note); a grant signed offline
 * with the key, or a jti nobody minted (a typo), is revoked all the same but answered `known:
 * false` with a note saying the gateway has no record of it, through the grants API and the
 * portcullis.revoke_grant operator tool; a jti revoked once is known the next time; and a minted
 * jti is forgotten (no longer known) once its grant has expired and the cleanup alarm has run.
 */
import { env, runDurableObjectAlarm, SELF } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { REVOCATION_SHARDS, revocationObject } from "../../durable-objects/object-names.ts";
import type { Env } from "../../src/env.ts";
import { type KeySet, parseKeySet } from "../../src/identity/keys.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { UNKNOWN_JTI_NOTE } from "../../src/routes/grants.ts";

const GW = "http://127.0.0.1";
let keys: KeySet;
let admin = "";
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
  admin = (await offline(["admin"], "human:revoke-known-admin")).token;
});

/** A grant signed with the gateway's key here, offline: valid, but never minted through the gateway. */
const offline = (roles: string[], sub: string) =>
  mintGrant(keys, { iss: GW, aud: GW, sub, team: "t", roles: roles as never, tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 });

const json = { "content-type": "application/json" };

async function revoke(jti: string): Promise<{ status: number; body: { revoked: string; until: number; known: boolean; note?: string } }> {
  const r = await SELF.fetch(`${GW}/v1/grants/${jti}/revoke`, { method: "POST", headers: { ...json, authorization: `Bearer ${admin}` }, body: "{}" });
  return { status: r.status, body: (await r.json()) as never };
}

/** A tools/list of the operator endpoint with `token` (no upstream is contacted): 200 while the grant is good, 401 once revoked. */
async function status(token: string): Promise<number> {
  const r = await SELF.fetch(`${GW}/operator/mcp`, {
    method: "POST",
    headers: { ...json, accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }),
  });
  await r.body?.cancel();
  return r.status;
}

describe("a revocation says whether the gateway knows the jti", () => {
  it("a grant minted through POST /v1/grants: known, no note, and refused afterwards", async () => {
    const r = await SELF.fetch(`${GW}/v1/grants`, {
      method: "POST",
      headers: { ...json, authorization: `Bearer ${admin}` },
      body: JSON.stringify({ sub: "human:minted-here", roles: ["auditor"], ttl_seconds: 300 }),
    });
    expect(r.status).toBe(201);
    const minted = (await r.json()) as { token: string; jti: string };
    expect(await status(minted.token)).toBe(200);
    const answer = await revoke(minted.jti);
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ revoked: minted.jti, known: true });
    expect(answer.body.note).toBeUndefined();
    expect(await status(minted.token)).toBe(401);
  });

  it("a grant signed offline: revoked all the same (refused afterwards), known false with the note; known the second time", async () => {
    const g = await offline(["auditor"], "human:signed-offline");
    expect(await status(g.token)).toBe(200);
    const first = await revoke(g.jti);
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ revoked: g.jti, known: false, note: UNKNOWN_JTI_NOTE });
    expect(first.body.note).toMatch(/no record of this jti/);
    expect(await status(g.token)).toBe(401);
    const again = await revoke(g.jti);
    expect(again.body).toMatchObject({ revoked: g.jti, known: true });
    expect(again.body.note).toBeUndefined();
  });

  it("a jti nobody minted (a typo): known false, through the API and the operator tool", async () => {
    expect((await revoke("typo-never-minted-0001")).body).toMatchObject({ known: false, note: UNKNOWN_JTI_NOTE });
    const r = await SELF.fetch(`${GW}/operator/mcp`, {
      method: "POST",
      headers: { ...json, accept: "application/json, text/event-stream", authorization: `Bearer ${admin}` },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: { name: "portcullis.revoke_grant", arguments: { jti: "typo-never-minted-0002" } },
      }),
    });
    const out = (await r.json()) as { result: { structuredContent: { revoked: string; known: boolean; note?: string } } };
    expect(out.result.structuredContent).toMatchObject({ revoked: "typo-never-minted-0002", known: false, note: UNKNOWN_JTI_NOTE });
  });

  it("RevocationsDO: a minted jti is known until its grant has expired and the cleanup alarm ran", async () => {
    const e = env as unknown as Env;
    const now = Math.floor(Date.now() / 1000);
    const live = `live-${crypto.randomUUID()}`;
    const expired = `expired-${crypto.randomUUID()}`;
    await revocationObject(e, live).noteMinted(live, now + 600);
    await revocationObject(e, expired).noteMinted(expired, now - 600);
    for (let i = 0; i < REVOCATION_SHARDS; i++) await runDurableObjectAlarm(env.REVOCATIONS.get(env.REVOCATIONS.idFromName(`shard-${i}`)));
    expect(await revocationObject(e, live).revoke(live, now + 600, "human:test")).toEqual({ known: true });
    expect(await revocationObject(e, expired).revoke(expired, now + 600, "human:test")).toEqual({ known: false });
    // Revoked now: known from here on, whatever the minted list says.
    expect(await revocationObject(e, expired).revoke(expired, now + 600, "human:test")).toEqual({ known: true });
  });
});
