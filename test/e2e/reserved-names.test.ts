/**
 * Reserved names and the one spelling of a principal, end to end on the production build
 * (wrangler dev, workerd): `POST /v1/grants` for team `_global` (the gateway's own ledger chain)
 * is a 400 and mints nothing; `portcullis token mint --team _global` exits 1 with the reason,
 * locally and through `--url`; and a grant for `Agent:selfappr` — signed with the gateway's key
 * as one minted before the rule would be — cannot approve `agent:selfappr`'s held call (its token
 * is refused at the gate), while the requester's own spelling gets the separation-of-duties 403
 * and another approver's approval works. Owns the gateway and upstream it starts. Must never:
 * leave them running, or reach beyond 127.0.0.1.
 */
import { resolve } from "node:path";
import { SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Role } from "../../src/config/roles.ts";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { GRANT_TYP } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";
import { startModernOnlyUpstream } from "../fixtures/modern-only-upstream.ts";
import { freePort, type Proc, root, startPortcullis } from "./harness.ts";
import { api, grantFor, modern, runScript, texts } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const CLI = resolve(root, "bin/portcullis.mjs");
let jwk = "";
let origin = "";
let port = 0;
let rec: Awaited<ReturnType<typeof startModernOnlyUpstream>>;
let gw: Proc & { url: string };

const config = (upstreamUrl: string) => `
actor: local:reserved
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
holds:
  expires: 1h
upstreams:
  - name: rec
    url: ${upstreamUrl}
    timeout: 30s
mappings:
  rec:
    tools:
      bump: { effect: idempotent }
policy:
  rules:
    - id: bumps-need-a-human
      match: { tool: bump }
      decision: require_approval
      reason: bumps change shared state
`;

const grant = async (sub: string, roles: Role[] = ["agent"], team = "ops") =>
  (await grantFor(jwk, origin, { sub, team, roles, tools: ["*"], ttlSeconds: 900 })).token;

/** A grant signed with the gateway's key but not through mintGrant (which refuses the name): what a grant minted before the rule looks like. */
async function signedAnyway(sub: string, roles: Role[], team = "ops"): Promise<string> {
  const keys = await parseKeySet(jwk);
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ aud: origin, sub, team, roles, tools: ["*"], jti: `old-${crypto.randomUUID()}` })
    .setProtectedHeader({ alg: "EdDSA", typ: GRANT_TYP, kid: keys.active!.kid })
    .setIssuer(origin)
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(now + 600)
    .sign(keys.active!.key);
}

const resolveHold = (bearer: string, id: string, decision: "approve" | "reject") =>
  api(origin, bearer, `/v1/holds/${encodeURIComponent(id)}/resolve`, { method: "POST", body: { decision, reason: "looked at it" } });

beforeAll(async () => {
  jwk = JSON.stringify((await generateSigningKey("reserved-e2e")).privateJwk);
  rec = await startModernOnlyUpstream();
  port = await freePort();
  origin = `http://127.0.0.1:${port}`;
  gw = await startPortcullis(config(rec.url), port, { PORTCULLIS_SIGNING_KEY: jwk });
}, 180_000);
afterAll(async () => {
  await gw?.stop();
  await rec?.close();
});

describe("team _global is the gateway's own", () => {
  it("POST /v1/grants with team _global: 400 naming the reservation, no token", async () => {
    const admin = await grant("human:root", ["admin"]);
    const r = await api(origin, admin, "/v1/grants", { method: "POST", body: { sub: "agent:x", team: "_global", roles: ["auditor"] } });
    expect(r.status).toBe(400);
    expect(r.json.error_description).toMatch(/^team "_global": team names starting with "_" are reserved for the gateway \(_global is its own ledger chain\)/);
    expect(r.json.token).toBeUndefined();
    // The same request for a team of its own mints.
    expect((await api(origin, admin, "/v1/grants", { method: "POST", body: { sub: "agent:x", team: "ops", roles: ["auditor"] } })).status).toBe(201);
  });

  it("portcullis token mint --team _global exits 1 with the reason, locally and through --url", async () => {
    const local = await runScript(CLI, ["token", "mint", "--sub", "agent:x", "--team", "_global", "--port", String(port)]);
    expect(local.code).toBe(1);
    expect(local.stdout).toBe("");
    expect(local.stderr).toMatch(/cannot mint: --team "_global": team names starting with "_" are reserved/);
    const variant = await runScript(CLI, ["token", "mint", "--sub", "Agent:selfappr", "--port", String(port)]);
    expect(variant.code).toBe(1);
    expect(variant.stderr).toMatch(/cannot mint: --sub "Agent:selfappr": the principal is not in canonical form/);
    const admin = await grant("human:root", ["admin"]);
    const remote = await runScript(CLI, ["token", "mint", "--url", origin, "--sub", "agent:x", "--team", "_global"], { PORTCULLIS_TOKEN: admin });
    expect(remote.code).toBe(1);
    expect(remote.stdout).toBe("");
    expect(remote.stderr).toMatch(/mint refused \(400\): team "_global": team names starting with "_"/);
  });
});

describe("one person, one principal", () => {
  it("Agent:selfappr cannot approve agent:selfappr's hold; another approver can", async () => {
    const agent = await grant("agent:selfappr");
    const held = (await modern(gw.url, agent, "tools/call", { name: "bump", arguments: {} }, { timeoutMs: 60_000 })).result;
    expect(held?.isError, JSON.stringify(held)).toBe(true);
    const id = /held as (\S+~[0-9a-f]{24})/.exec(texts(held))?.[1];
    expect(id, texts(held)).toBeDefined();

    // A case variant of the requester, with the approver role, signed with the gateway's key: refused at the gate.
    const variant = await resolveHold(await signedAnyway("Agent:selfappr", ["approver"]), id!, "approve");
    expect(variant.status, JSON.stringify(variant.json)).toBe(401);
    // The requester's own spelling with the approver role: separation of duties.
    const self = await resolveHold(await grant("agent:selfappr", ["agent", "approver"]), id!, "approve");
    expect(self.status, JSON.stringify(self.json)).toBe(403);
    const approver = await grant("human:approver", ["approver"]);
    const still: Any = await api(origin, approver, `/v1/holds/${encodeURIComponent(id!)}`);
    expect(still.json.hold.state).toBe("pending");
    // Another principal approves: the refusals above were the names, not the route.
    const ok = await resolveHold(approver, id!, "approve");
    expect(ok.status, JSON.stringify(ok.json)).toBe(200);
    expect(ok.json.hold.state).toBe("approved");
  });
});
