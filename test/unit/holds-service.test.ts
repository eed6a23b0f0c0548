/**
 * The approver-facing hold operations (src/services/approvals.ts) against the real HOLDS namespace
 * (durable-objects/holds.ts) and the real team ledger: holds are raised with HoldsApi.claim as the
 * governed path raises them, then listed, read and resolved as approvers would. Visibility across
 * teams (another team's hold is a 404 exactly like a missing one), self-approval 403, the
 * resolver config (named teams, `*`, unresolvable rules, roles), 409 on a second resolution, an
 * expired hold and a hash mismatch, a rejection needing a reason, the `hold.approved` record on
 * the ledger before the answer, the `resolved` webhook, no stored answer in any view, a store
 * that cannot answer (503); then the same through /v1/holds and the operator tools, with grants.
 */
import { env, SELF } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { holdsObject, ledgerObject, newHoldId } from "../../durable-objects/object-names.ts";
import type { HoldRecord, HoldsApi, NewHold } from "../../durable-objects/contract-holds.ts";
import type { GatewayConfig, HoldsConfig } from "../../src/config/gateway-config.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Role } from "../../src/config/roles.ts";
import { mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { getHold, getHoldVia, type HoldsDeps, listHolds, listHoldsVia, resolveHold, resolveHoldVia } from "../../src/services/approvals.ts";
import { configOr503 } from "../../src/routes/config-view.ts";
import { operatorTool } from "../../src/routes/operator-registry.ts";
import "../../src/routes/operator-hold-tools.ts";
import { sha256Hex } from "../../src/wire/canonical.ts";
import type { JsonObject } from "../../src/wire/jsonrpc.ts";

const GW = "http://127.0.0.1";
const SIGNING = { secret: "PORTCULLIS_SIGNING_KEY", gateway: GW };
const HOUR = 3_600_000;

function sharedConfig(): GatewayConfig {
  const cfg = configOr503(env);
  if (cfg instanceof Response) throw new Error("the unit config did not load");
  return cfg;
}
const withHolds = (holds: Partial<HoldsConfig>): GatewayConfig => {
  const cfg = sharedConfig();
  return { ...cfg, holds: { ...cfg.holds, ...holds } };
};

let seq = 0;
/** A fresh team name per test (each test's holds and chain are its own). */
const team = (name: string) => `${name}-${Date.now().toString(36)}-${++seq}`;
const who = (sub: string, t: string, ...roles: Role[]): Principal => ({ sub, team: t, roles, tools: ["*"], authenticated: true });
const ignore = () => undefined;

/** Raises a hold as the governed path does (HoldsApi.claim of a new action). */
async function raise(t: string, principal: string, opts: { rule?: string | null; args?: JsonObject; expiresIn?: number } = {}): Promise<HoldRecord> {
  const action = JSON.stringify({ arguments: opts.args ?? { n: ++seq }, principal, tool: "refund", upstream: "alpha" });
  const now = Date.now();
  const hold: NewHold = {
    id: newHoldId(t),
    team: t,
    actionHash: sha256Hex(action),
    action,
    principal,
    jti: "jti-of-the-requester",
    upstream: "alpha",
    tool: "refund",
    exposedName: "alpha__refund",
    rule: opts.rule === undefined ? "refunds-need-approval" : opts.rule,
    reason: "refunds need a human",
    classification: { effect: "write", blast_radius: "single", source: "mapping" },
    createdAt: now,
    expiresAt: now + (opts.expiresIn ?? 4 * HOUR),
  };
  const claim = await holdsObject(env, t)!.claim(hold, SIGNING, now);
  expect(claim.kind).toBe("created");
  return claim.hold;
}

afterEach(() => vi.unstubAllGlobals());

describe("holds service over the real HoldsDO", () => {
  it("shows a hold to its team's approvers, auditors and operators and to admins; to anyone else it does not exist", async () => {
    const eng = team("eng");
    const h = await raise(eng, "agent:bot");
    const cfg = sharedConfig();
    for (const viewer of [
      who("human:ann", eng, "approver"),
      who("human:aud", eng, "auditor"),
      who("human:op", eng, "operator"),
      who("human:root", "elsewhere", "admin"),
    ]) {
      const one = await getHold(env, cfg, viewer, h.id);
      expect(one, viewer.sub).toMatchObject({
        ok: true,
        value: {
          hold: { id: h.id, state: "pending", principal: "agent:bot", actionHash: h.actionHash },
          url: `${GW}/console/holds/${encodeURIComponent(h.id)}`,
        },
      });
      const list = await listHolds(env, cfg, viewer, { state: null, team: eng });
      expect(list.ok && list.value.map((v) => v.hold.id)).toEqual([h.id]);
    }
    // Resolvable only for those who may resolve it.
    expect(await getHold(env, cfg, who("human:ann", eng, "approver"), h.id)).toMatchObject({ ok: true, value: { resolvable: true } });
    const aud = await getHold(env, cfg, who("human:aud", eng, "auditor"), h.id);
    expect(aud).toMatchObject({ ok: true, value: { resolvable: false, why: expect.stringMatching(/may not resolve/) } });

    // Another team's approver, and an agent of the same team: exactly the answer of a hold that does not exist.
    const missing = `${eng}~${"0".repeat(24)}`;
    for (const viewer of [who("human:other", "ops", "approver"), who("agent:peer", eng, "agent")]) {
      const r = await getHold(env, cfg, viewer, h.id);
      const none = await getHold(env, cfg, viewer, missing);
      expect(r).toMatchObject({ ok: false, status: 404 });
      expect(none).toMatchObject({ ok: false, status: 404 });
      expect(r.ok ? "" : r.message.replace(h.id, "ID")).toBe(none.ok ? "" : none.message.replace(missing, "ID"));
      expect(await resolveHold(env, cfg, viewer, h.id, "approve", "", null, ignore)).toMatchObject({ ok: false, status: 404 });
    }
    expect(await getHold(env, cfg, who("human:ann", eng, "approver"), "not-a-hold-id")).toMatchObject({ ok: false, status: 404 });
    // Listing another team: refused, and an approver's own list does not include it.
    expect(await listHolds(env, cfg, who("human:other", "ops", "approver"), { state: null, team: eng })).toMatchObject({ ok: false, status: 403 });
    expect(await listHolds(env, cfg, who("human:other", "ops", "approver"), { state: null })).toEqual({ ok: true, value: [] });
    expect((await getHold(env, cfg, who("human:other", "ops", "approver"), h.id)).ok).toBe(false);
  });

  it("lists newest first, filtered by state", async () => {
    const t = team("list");
    const a = await raise(t, "agent:bot");
    const b = await raise(t, "agent:bot");
    const c = await raise(t, "agent:bot");
    const cfg = sharedConfig();
    const ann = who("human:ann", t, "approver");
    expect((await resolveHold(env, cfg, ann, b.id, "reject", "no", null, ignore)).ok).toBe(true);
    const all = await listHolds(env, cfg, ann, { state: null });
    expect(all.ok && all.value.map((v) => [v.hold.id, v.hold.state, v.resolvable])).toEqual([
      [c.id, "pending", true],
      [b.id, "rejected", false],
      [a.id, "pending", true],
    ]);
    const pending = await listHolds(env, cfg, ann, { state: "pending" });
    expect(pending.ok && pending.value.map((v) => v.hold.id)).toEqual([c.id, a.id]);
    const rejected = await listHolds(env, cfg, ann, { state: "rejected" });
    expect(rejected.ok && rejected.value.map((v) => [v.hold.id, v.why])).toEqual([[b.id, "the hold is rejected, not pending"]]);
    const limited = await listHolds(env, cfg, ann, { state: null, limit: 1 });
    expect(limited.ok && limited.value.map((v) => v.hold.id)).toEqual([c.id]);
  });

  it("the requester never resolves its own hold, even as approver or admin", async () => {
    const t = team("self");
    const cfg = sharedConfig();
    for (const roles of [["approver"], ["admin"]] as Role[][]) {
      const h = await raise(t, "human:ann");
      const ann = who("human:ann", t, ...roles);
      const view = await getHold(env, cfg, ann, h.id);
      expect(view).toMatchObject({ ok: true, value: { resolvable: false, why: expect.stringMatching(/raised this hold/) } });
      expect(await resolveHold(env, cfg, ann, h.id, "approve", "", null, ignore)).toMatchObject({
        ok: false,
        status: 403,
        message: expect.stringMatching(/raised this hold/),
      });
      expect((await holdsObject(env, t)!.get(h.id, Date.now()))?.state).toBe("pending");
    }
  });

  it("approves once: the hold.approved record is on the team's ledger before the answer, the webhook is told, a second resolution is 409", async () => {
    const t = team("once");
    const h = await raise(t, "agent:bot");
    const sent: { url: string; body: string; event: string | null }[] = [];
    vi.stubGlobal("fetch", async (input: RequestInfo | URL, init?: RequestInit) => {
      sent.push({ url: String(input), body: String(init?.body), event: new Headers(init?.headers).get("x-portcullis-event") });
      return new Response("ok");
    });
    const cfg = withHolds({ webhooks: [{ url: "https://hooks.example.com/h/secret-path", events: ["resolved"] }] });
    const pending: Promise<unknown>[] = [];
    const ann = who("human:ann", t, "approver");
    const r = await resolveHold(env, cfg, ann, h.id, "approve", "  looks right  ", null, (p) => void pending.push(p));
    expect(r).toMatchObject({
      ok: true,
      value: { hold: { id: h.id, state: "approved", approver: "human:ann", resolveReason: "looks right" }, resolvable: false },
    });
    // Durable before the answer: the team's chain already holds the record.
    const entries = await ledgerObject(env, t)!.read(0, 100);
    expect(entries.filter((e) => e.kind === "hold.approved").map((e) => e.body)).toEqual([
      expect.objectContaining({ hold_id: h.id, approver: "human:ann", reason: "looks right" }),
    ]);
    // The resolved webhook, in waitUntil.
    expect(pending).toHaveLength(1);
    expect(await pending[0]).toMatchObject([{ outcome: "delivered" }]);
    expect(sent).toHaveLength(1);
    expect(sent[0]!.event).toBe("hold.resolved");
    expect(JSON.parse(sent[0]!.body).portcullis.hold).toMatchObject({ id: h.id, state: "approved", approver: "human:ann" });

    // Again, either way, by anyone: 409, and the ledger is unchanged.
    const bob = who("human:bob", t, "approver");
    expect(await resolveHold(env, cfg, bob, h.id, "approve", "", null, ignore)).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/approved, not pending/),
    });
    expect(await resolveHold(env, cfg, bob, h.id, "reject", "changed my mind", null, ignore)).toMatchObject({ ok: false, status: 409 });
    expect((await ledgerObject(env, t)!.read(0, 100)).filter((e) => e.kind === "hold.approved" || e.kind === "hold.rejected")).toHaveLength(1);
    expect(pending).toHaveLength(1);
  });

  it("a rejection needs a reason (at most 500 characters); the decision must be approve or reject", async () => {
    const t = team("reject");
    const h = await raise(t, "agent:bot");
    const cfg = sharedConfig();
    const ann = who("human:ann", t, "approver");
    expect(await resolveHold(env, cfg, ann, h.id, "reject", "   ", null, ignore)).toMatchObject({
      ok: false,
      status: 400,
      message: expect.stringMatching(/needs a reason/),
    });
    expect(await resolveHold(env, cfg, ann, h.id, "reject", "x".repeat(501), null, ignore)).toMatchObject({
      ok: false,
      status: 400,
      message: expect.stringMatching(/at most 500/),
    });
    expect(await resolveHold(env, cfg, ann, h.id, "maybe" as "approve", "", null, ignore)).toMatchObject({ ok: false, status: 400 });
    expect((await holdsObject(env, t)!.get(h.id, Date.now()))?.state).toBe("pending");
    const r = await resolveHold(env, cfg, ann, h.id, "reject", "not during the freeze", null, ignore);
    expect(r).toMatchObject({ ok: true, value: { hold: { state: "rejected", approver: "human:ann", resolveReason: "not during the freeze" } } });
  });

  it("binds the action the approver saw: a different hash is 409, the right one approves", async () => {
    const t = team("hash");
    const h = await raise(t, "agent:bot");
    const cfg = sharedConfig();
    const ann = who("human:ann", t, "approver");
    expect(await resolveHold(env, cfg, ann, h.id, "approve", "", "not-hex", ignore)).toMatchObject({ ok: false, status: 400 });
    expect(await resolveHold(env, cfg, ann, h.id, "approve", "", "f".repeat(64), ignore)).toMatchObject({
      ok: false,
      status: 409,
      message: expect.stringMatching(/binds action/),
    });
    expect(await resolveHold(env, cfg, ann, h.id, "approve", "", h.actionHash, ignore)).toMatchObject({ ok: true, value: { hold: { state: "approved" } } });
  });

  it("an expired hold is 409 and says so", async () => {
    const t = team("late");
    const h = await raise(t, "agent:bot");
    const cfg = sharedConfig();
    const ann = who("human:ann", t, "approver");
    // The clock moved past the expiry: the service hands `now` to the object.
    const later: HoldsDeps = { holdsOf: (x) => holdsObject(env, x), now: () => Date.now() + 5 * HOUR };
    const view = await getHoldVia(later, cfg, ann, h.id);
    expect(view).toMatchObject({ ok: true, value: { resolvable: false, hold: { state: "expired" } } });
    const r = await resolveHoldVia(later, env, cfg, ann, h.id, "approve", "", null, ignore);
    expect(r).toMatchObject({ ok: false, status: 409, message: expect.stringMatching(/expired/) });
  });

  it("follows the resolver config: named teams, *, roles, unresolvable rules (admin neither), mapping holds as (mapping)", async () => {
    const fin = team("finance");
    const eng = team("eng");
    const cfg = withHolds({
      resolvers: [
        { rules: ["payments.*"], roles: ["approver"], teams: [fin] },
        { rules: ["(mapping)"], roles: ["operator"] },
        { rules: ["refunds-*"], roles: ["approver"], teams: ["*"] },
      ],
      unresolvable: ["prod.*"],
    });
    const outsider = who("human:eve", eng, "approver");
    // A resolver entry naming the team lets an approver of another team see and resolve its holds.
    const pay = await raise(fin, "agent:bot", { rule: "payments.large" });
    expect(await getHold(env, cfg, outsider, pay.id)).toMatchObject({ ok: true, value: { resolvable: true } });
    expect((await listHolds(env, cfg, outsider, { state: "pending", team: fin })).ok).toBe(true);
    expect(await resolveHold(env, cfg, outsider, pay.id, "approve", "", null, ignore)).toMatchObject({ ok: true });
    // Without such an entry, the default view of another team is closed.
    expect(await getHold(env, sharedConfig(), outsider, (await raise(fin, "agent:bot")).id)).toMatchObject({ ok: false, status: 404 });
    // `*` teams: any team's refunds-* holds.
    const other = team("sales");
    const refund = await raise(other, "agent:bot", { rule: "refunds-big" });
    expect(await resolveHold(env, cfg, outsider, refund.id, "reject", "too big", null, ignore)).toMatchObject({ ok: true });
    // Role mismatch: an auditor of the team sees, may not resolve.
    const other2 = await raise(fin, "agent:bot", { rule: "payments.small" });
    const aud = who("human:aud", fin, "auditor");
    expect(await resolveHold(env, cfg, aud, other2.id, "approve", "", null, ignore)).toMatchObject({
      ok: false,
      status: 403,
      message: expect.stringMatching(/may not resolve/),
    });
    // A mapping's approval: operators of the hold's own team, per the (mapping) entry; approvers not.
    const mapped = await raise(eng, "agent:bot", { rule: null });
    expect(await resolveHold(env, cfg, who("human:ann", eng, "approver"), mapped.id, "approve", "", null, ignore)).toMatchObject({
      ok: false,
      status: 403,
      message: expect.stringMatching(/\(mapping\)/),
    });
    expect(await resolveHold(env, cfg, who("human:op", eng, "operator"), mapped.id, "approve", "", null, ignore)).toMatchObject({ ok: true });
    // Unresolvable: nobody, admin included; the hold stays pending.
    const locked = await raise(eng, "agent:bot", { rule: "prod.wipe" });
    const root = who("human:root", "hq", "admin");
    expect(await getHold(env, cfg, root, locked.id)).toMatchObject({
      ok: true,
      value: { resolvable: false, why: expect.stringMatching(/cannot be resolved by anyone/) },
    });
    expect(await resolveHold(env, cfg, root, locked.id, "approve", "", null, ignore)).toMatchObject({
      ok: false,
      status: 403,
      message: expect.stringMatching(/unresolvable/),
    });
    expect((await holdsObject(env, eng)!.get(locked.id, Date.now()))?.state).toBe("pending");
  });

  it("never shows the stored answer of a consumed hold", async () => {
    const t = team("answer");
    const h = await raise(t, "agent:bot", { args: { fixed: true } });
    const cfg = sharedConfig();
    expect((await resolveHold(env, cfg, who("human:ann", t, "approver"), h.id, "approve", "", null, ignore)).ok).toBe(true);
    const api = holdsObject(env, t)!;
    const again: NewHold = { ...h, id: newHoldId(t), createdAt: Date.now(), expiresAt: Date.now() + HOUR };
    expect((await api.claim(again, SIGNING, Date.now())).kind).toBe("consumed");
    expect(await api.complete(h.id, { jsonrpc: "2.0", id: 1, result: { content: [{ type: "text", text: "sk-the-agents-secret" }] } }, Date.now())).toBe(true);
    const view = await getHold(env, cfg, who("human:aud", t, "auditor"), h.id);
    expect(view).toMatchObject({ ok: true, value: { hold: { state: "consumed", result: null } } });
    expect(JSON.stringify(view)).not.toContain("sk-the-agents-secret");
  });

  it("a store that cannot answer is 503; an unauthenticated principal cannot resolve", async () => {
    const t = team("down");
    const cfg = sharedConfig();
    const broken = {
      get: async () => Promise.reject(new Error("object reset")),
      list: async () => Promise.reject(new Error("object reset")),
    } as unknown as HoldsApi;
    const deps: HoldsDeps = { holdsOf: () => broken, now: () => Date.now() };
    const ann = who("human:ann", t, "approver");
    expect(await listHoldsVia(deps, cfg, ann, { state: null })).toMatchObject({ ok: false, status: 503 });
    expect(await getHoldVia(deps, cfg, ann, `${t}~${"1".repeat(24)}`)).toMatchObject({ ok: false, status: 503 });
    const h = await raise(t, "agent:bot");
    expect(await resolveHold(env, cfg, { ...ann, authenticated: false }, h.id, "approve", "", null, ignore)).toMatchObject({ ok: false, status: 403 });
  });
});

// ---- the same through /v1/holds and /operator/mcp, with grants -------------------------------

async function token(sub: string, t: string, roles: Role[]): Promise<string> {
  const keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
  return (await mintGrant(keys, { iss: GW, aud: GW, sub, team: t, roles, tools: ["*"], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 })).token;
}
const http = (path: string, bearer: string, body?: string) =>
  SELF.fetch(`${GW}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${bearer}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body }),
  });
async function tool(
  bearer: string,
  name: string,
  args: JsonObject,
): Promise<{ isError?: boolean; structuredContent?: JsonObject; content: { text: string }[] }> {
  const r = await SELF.fetch(`${GW}/operator/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${bearer}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
  });
  return ((await r.json()) as { result: never }).result;
}

describe("/v1/holds and the operator hold tools", () => {
  it("list, get and resolve over HTTP; bad input is 400 with a readable error; roles are enforced", async () => {
    const t = team("http");
    const h = await raise(t, "agent:bot");
    const approver = await token("human:ann", t, ["approver"]);
    const auditor = await token("human:aud", t, ["auditor"]);
    const agent = await token("agent:bot", t, ["agent", "approver"]);
    const stranger = await token("human:eve", "ops", ["approver"]);

    const list = await http("/v1/holds?status=pending", approver);
    expect(list.status).toBe(200);
    const listed = (await list.json()) as { holds: { hold: HoldRecord; resolvable: boolean; url: string }[] };
    expect(listed.holds.map((v) => [v.hold.id, v.resolvable])).toEqual([[h.id, true]]);
    expect((await http("/v1/holds?status=sometimes", approver)).status).toBe(400);
    expect(await (await http("/v1/holds?status=sometimes", approver)).json()).toEqual({
      error: expect.stringMatching(/status must be one of pending, approved/),
    });
    expect((await http(`/v1/holds?team=${t}`, stranger)).status).toBe(403);

    const one = await http(`/v1/holds/${encodeURIComponent(h.id)}`, auditor);
    expect(one.status).toBe(200);
    expect(await one.json()).toMatchObject({
      hold: { id: h.id, action: h.action },
      resolvable: false,
      why: expect.any(String),
      url: `${GW}/console/holds/${encodeURIComponent(h.id)}`,
    });
    expect((await http(`/v1/holds/${encodeURIComponent(h.id)}`, stranger)).status).toBe(404);
    expect((await http("/v1/holds", await token("agent:x", t, ["agent"]))).status).toBe(403);

    const resolve = (bearer: string, body: string) => http(`/v1/holds/${encodeURIComponent(h.id)}/resolve`, bearer, body);
    expect((await resolve(auditor, JSON.stringify({ decision: "approve" }))).status).toBe(403); // the route needs approver or admin
    for (const [body, re] of [
      ["{not json", /not JSON/],
      ["[1]", /JSON object/],
      [JSON.stringify({ decision: "maybe" }), /decision must be "approve" or "reject"/],
      [JSON.stringify({ reason: "x" }), /decision must be/],
      [JSON.stringify({ decision: "reject" }), /needs a reason/],
      [JSON.stringify({ decision: "approve", reason: 5 }), /reason must be a string/],
      [JSON.stringify({ decision: "approve", approver: "human:root" }), /unknown field "approver"/],
    ] as const) {
      const r = await resolve(approver, body);
      expect(r.status, body).toBe(400);
      expect(((await r.json()) as { error: string }).error, body).toMatch(re);
    }
    // The requester, though it holds the approver role: 403. Then the approver: 200; again: 409.
    const self = await resolve(agent, JSON.stringify({ decision: "approve" }));
    expect(self.status).toBe(403);
    expect(((await self.json()) as { error: string }).error).toMatch(/raised this hold/);
    const ok = await resolve(approver, JSON.stringify({ decision: "approve", reason: "fine", action_hash: h.actionHash }));
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ hold: { id: h.id, state: "approved", approver: "human:ann", resolveReason: "fine" } });
    expect((await resolve(approver, JSON.stringify({ decision: "approve" }))).status).toBe(409);
  });

  it("portcullis.list_holds, get_hold and resolve_hold: the same rules, refusals as isError results", async () => {
    const t = team("tools");
    const h = await raise(t, "agent:bot");
    const approver = await token("human:ann", t, ["approver"]);
    const operator = await token("human:op", t, ["operator"]);

    const listed = await tool(operator, "portcullis.list_holds", { status: "pending" });
    expect(listed.isError).toBeUndefined();
    expect((listed.structuredContent!.holds as JsonObject[]).map((v) => (v.hold as JsonObject).id)).toEqual([h.id]);
    expect(await tool(operator, "portcullis.list_holds", { status: "later" })).toMatchObject({
      isError: true,
      content: [{ text: expect.stringMatching(/status must be one of/) }],
    });
    expect((await tool(operator, "portcullis.get_hold", { id: h.id })).structuredContent).toMatchObject({ hold: { id: h.id }, resolvable: false });
    expect(await tool(operator, "portcullis.get_hold", { id: `${t}~${"2".repeat(24)}` })).toMatchObject({
      isError: true,
      content: [{ text: expect.stringMatching(/no hold/) }],
    });
    // resolve_hold is for approvers and admins: an operator does not even see it.
    const hidden = await SELF.fetch(`${GW}/operator/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${operator}` },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }),
    });
    const names = ((await hidden.json()) as { result: { tools: { name: string }[] } }).result.tools.map((x) => x.name);
    expect(names).toEqual(expect.arrayContaining(["portcullis.list_holds", "portcullis.get_hold"]));
    expect(names).not.toContain("portcullis.resolve_hold");

    expect(await tool(approver, "portcullis.resolve_hold", { id: h.id, decision: "reject" })).toMatchObject({
      isError: true,
      content: [{ text: expect.stringMatching(/needs a reason/) }],
    });
    const done = await tool(approver, "portcullis.resolve_hold", { id: h.id, decision: "reject", reason: "not now" });
    expect(done.isError).toBeUndefined();
    expect(done.structuredContent).toMatchObject({ hold: { state: "rejected", approver: "human:ann", resolveReason: "not now" } });
    expect(await tool(approver, "portcullis.resolve_hold", { id: h.id, decision: "approve" })).toMatchObject({
      isError: true,
      content: [{ text: expect.stringMatching(/not pending/) }],
    });
  });

  it("resolve_hold's webhook runs in the invocation's waitUntil", async () => {
    const t = team("tool-hook");
    const h = await raise(t, "agent:bot");
    const sent: string[] = [];
    vi.stubGlobal("fetch", async (_input: RequestInfo | URL, init?: RequestInit) => {
      sent.push(String(init?.body));
      return new Response("ok");
    });
    const cfg = withHolds({ webhooks: [{ url: "https://hooks.example.com/ops", events: ["resolved"] }] });
    const ann = who("human:ann", t, "approver");
    const resolveTool = operatorTool("portcullis.resolve_hold", ann)!;
    const out = await resolveTool.run({ id: h.id, decision: "approve" }, { env, cfg, principal: ann, gateway: GW, req: new Request(`${GW}/operator/mcp`) });
    expect(out).toMatchObject({ hold: { state: "approved", approver: "human:ann" } });
    for (let i = 0; i < 200 && sent.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(sent).toHaveLength(1);
    expect(JSON.parse(sent[0]!).portcullis).toMatchObject({ event: "hold.resolved", hold: { id: h.id, state: "approved" } });
    // An operator does not get the tool at all.
    expect(operatorTool("portcullis.resolve_hold", who("human:op", t, "operator"))).toBeUndefined();
  });
});
