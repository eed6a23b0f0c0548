/**
 * `POST /v1/grants/enroll` (src/routes/enroll.ts) in workerd, on the real RevocationsDO and
 * LedgerDO bindings, with configs loaded from YAML: every refusal (OAuth off, no enrollment
 * template, a body the schema refuses, a sub in an identity provider's principal space or not in
 * the gateway's one spelling, a role the
 * template lacks, a tool glob it does not cover, a grant lifetime above the template's or above
 * auth.max_token_lifetime, a code lifetime above 7 days, the code store or the ledger failing —
 * then no code is returned) and the happy path: a 201 no-store answer with the code, its record
 * readable once and taken exactly once, and a `grant.enrolled` record on the template team's chain
 * that never contains the code. Owns nothing of the gateway.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ledgerObject, revocationObject } from "../../durable-objects/object-names.ts";
import type { GatewayConfig } from "../../src/config/gateway-config.ts";
import { loadConfig } from "../../src/config/load.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Env } from "../../src/env.ts";
import { ENROLLMENT_CODE, enrollmentId, readEnrollment } from "../../src/identity/enrollment.ts";
import { enrollRoute } from "../../src/routes/enroll.ts";
import { allEntries } from "./fixtures.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const GW = "https://gw.example.com";
const TEAM = "enroll-team";
const admin: Principal = { sub: "human:enroll-admin", team: "ops", roles: ["admin"], tools: null, authenticated: true };

/** A gateway config with the given auth.oauth block (YAML, indented under auth:). */
const configWith = (oauth: string, max = "24h"): GatewayConfig =>
  loadConfig(
    `
actor: local:unit
auth:
  required: true
  audience: ${GW}
  max_token_lifetime: ${max}
  external_issuers:
    - issuer: https://idp.example.com
      jwks_url: https://idp.example.com/jwks.json
      audience: portcullis
      sub_prefix: "idp:"
${oauth}
upstreams:
  - name: alpha
    url: https://alpha.example.com/mcp
  - name: beta
    url: https://beta.example.com/mcp
`,
    {},
  );

const ENROLLMENT = `
  oauth:
    enabled: true
    sign_in:
      enrollment:
        template: { tools: ["alpha__*", "beta__read"], roles: ["agent", "auditor"], team: ${TEAM}, lifetime: 8h }
`;
const cfg = configWith(ENROLLMENT);

const enroll = async (
  body: unknown,
  c: GatewayConfig = cfg,
  e: Env = env as unknown as Env,
): Promise<{ status: number; headers: Headers; j: Any; text: string }> => {
  const r = await enrollRoute(
    new Request(`${GW}/v1/grants/enroll`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
    }),
    e,
    c,
    admin,
  );
  const text = await r.text();
  return { status: r.status, headers: r.headers, j: JSON.parse(text), text };
};

const enrolledRecords = async () => (await allEntries(ledgerObject(env as unknown as Env, TEAM)!)).filter((x) => x.kind === "grant.enrolled");

describe("POST /v1/grants/enroll: refusals", () => {
  it("OAuth off: 409 naming auth.oauth.enabled", async () => {
    const off = configWith(`
  oauth:
    enabled: false
    sign_in:
      enrollment:
        template: { tools: ["*"], roles: ["agent"], team: ${TEAM}, lifetime: 8h }
`);
    const r = await enroll({ sub: "human:alice" }, off);
    expect(r.status).toBe(409);
    expect(r.j.error_description).toMatch(/auth\.oauth\.enabled: true/);
    // Defaults: off entirely.
    const none = await enroll({ sub: "human:alice" }, configWith(""));
    expect(none.status).toBe(409);
    expect(none.j.error_description).toMatch(/auth\.oauth\.enabled/);
  });

  it("no enrollment template (another sign-in source only): 409 naming auth.oauth.sign_in.enrollment.template", async () => {
    const oidcOnly = configWith(`
  oauth:
    enabled: true
    sign_in:
      oidc:
        - issuer: https://idp.example.com
          authorization_endpoint: https://idp.example.com/authorize
          token_endpoint: https://idp.example.com/token
          client_id: portcullis
          template: { tools: ["*"], roles: ["agent"] }
`);
    const r = await enroll({ sub: "human:alice" }, oidcOnly);
    expect(r.status).toBe(409);
    expect(r.j.error).toBe("invalid_request");
    expect(r.j.error_description).toMatch(/set auth\.oauth\.sign_in\.enrollment\.template/);
  });

  it("a body the schema refuses: 400 naming the field", async () => {
    for (const [body, want] of [
      ["", /^\(body\): .*expected object/],
      ["not json", /^\(body\): .*expected object/],
      [{ sub: "" }, /^sub:/],
      [{ sub: "human:a", team: "ops" }, /team|[Uu]nrecognized/],
      [{ sub: "human:a", roles: ["wizard"] }, /^roles\.0:/],
      [{ sub: "human:a", roles: [] }, /^roles:/],
      [{ sub: "human:a", ttl_seconds: 1.5 }, /^ttl_seconds:/],
      [{ sub: "human:a", ttl_seconds: 0 }, /^ttl_seconds:/],
      [{ sub: "human:a", code_ttl_seconds: 7 * 86400 + 1 }, /^code_ttl_seconds: at most 604800 \(7 days\)/],
      [{ sub: "human:a", code_ttl_seconds: -1 }, /^code_ttl_seconds:/],
      [{ sub: "human:a", tools: "alpha__*" }, /^tools:/],
    ] as [unknown, RegExp][]) {
      const r = await enroll(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.j.error_description, JSON.stringify(body)).toMatch(want);
      expect(r.text).not.toMatch(/pce_/);
    }
  });

  it("a sub in an external issuer's principal space: 400, as for mint", async () => {
    const r = await enroll({ sub: "idp:alice" });
    expect(r.status).toBe(400);
    expect(r.j.error_description).toBe(
      'sub "idp:alice": the principal is in the principal space of auth.external_issuers[0] (https://idp.example.com), sub_prefix "idp:": give it a name outside it',
    );
  });

  it("a sub in Access's or an identity provider's default space, or not in the gateway's one spelling: 400", async () => {
    for (const [sub, why] of [
      ["access:leo@example.com", /principal space of the identity providers' default prefixes, sub_prefix "access:"/],
      ["oidc:idp.example.com:alice", /sub_prefix "oidc:"/],
      ["IDP:alice", /principal space of auth\.external_issuers\[0\]/],
      ["Human:Alice", /not in canonical form/],
      ["_svc", /reserved for the gateway/],
    ] as [string, RegExp][]) {
      const r = await enroll({ sub });
      expect(r.status, sub).toBe(400);
      expect(r.j.error_description, sub).toMatch(why);
      expect(r.text, sub).not.toMatch(/pce_/);
    }
  });

  it("a role not in the template's roles: 400 naming it and the template's roles", async () => {
    const r = await enroll({ sub: "human:alice", roles: ["agent", "admin"] });
    expect(r.status).toBe(400);
    expect(r.j.error_description).toBe("role admin not in the enrollment template's roles (agent, auditor)");
    const two = await enroll({ sub: "human:alice", roles: ["operator", "approver"] });
    expect(two.j.error_description).toMatch(/^roles operator, approver not in/);
  });

  it("a tool glob the template does not cover: 400 naming each one", async () => {
    const r = await enroll({ sub: "human:alice", tools: ["alpha__send", "beta__write", "*"] });
    expect(r.status).toBe(400);
    expect(r.j.error_description).toBe('tools "beta__write", "*" not covered by the enrollment template\'s tools ("alpha__*", "beta__read")');
  });

  it("a grant lifetime above the template's, or above auth.max_token_lifetime: 400", async () => {
    const r = await enroll({ sub: "human:alice", ttl_seconds: 8 * 3600 + 1 });
    expect(r.status).toBe(400);
    expect(r.j.error_description).toBe("ttl_seconds exceeds the enrollment template's lifetime (28800)");
    // A template above the maximum is refused at load; should one get through, the maximum still holds.
    const wide = configWith(ENROLLMENT, "8h");
    wide.auth.maxTokenLifetimeS = 3600;
    const max = await enroll({ sub: "human:alice", ttl_seconds: 7200 }, wide);
    expect(max.status).toBe(400);
    expect(max.j.error_description).toBe("ttl_seconds exceeds the maximum lifetime (auth.max_token_lifetime, 3600)");
    // And the default lifetime (the template's) is capped by it rather than refused.
    const capped = await enroll({ sub: "human:capped" }, wide);
    expect(capped.status).toBe(201);
    expect(capped.j.ttl_seconds).toBe(3600);
  });

  it("the code store failing: 503, no code", async () => {
    const broken = {
      ...env,
      REVOCATIONS: { idFromName: () => ({}), get: () => ({ putOnce: () => Promise.reject(new Error("store down")) }) },
    } as unknown as Env;
    const r = await enroll({ sub: "human:alice" }, cfg, broken);
    expect(r.status).toBe(503);
    expect(r.j.error_description).toMatch(/no enrollment code was issued: it could not be stored \(store down\)/);
    expect(r.text).not.toMatch(/pce_/);
  });

  it("the ledger failing: 503, no code returned, no record, and the stored code is voided", async () => {
    const before = (await enrolledRecords()).length;
    let stored: string | undefined;
    let storedOk = false;
    const takes: string[] = [];
    const real = env as unknown as Env;
    // The real code store, watched: which key the route stored and whether it took it again.
    const watched = {
      idFromName: (n: string) => real.REVOCATIONS.idFromName(n),
      get: (id: DurableObjectId) => {
        const stub = real.REVOCATIONS.get(id) as unknown as {
          putOnce(k: string, d: string, e: number): Promise<boolean>;
          readOnce(k: string, t: boolean): Promise<string | null>;
        };
        return {
          putOnce: (k: string, d: string, e: number) => {
            stored = k;
            return stub.putOnce(k, d, e).then((ok) => (storedOk = ok));
          },
          readOnce: (k: string, t: boolean) => {
            if (t) takes.push(k);
            return stub.readOnce(k, t);
          },
        };
      },
    };
    const broken = {
      ...env,
      REVOCATIONS: watched,
      LEDGER: {
        idFromName: () => ({}),
        get: () => ({ appendEach: () => Promise.reject(new Error("ledger down")), append: () => Promise.reject(new Error("ledger down")) }),
      },
    } as unknown as Env;
    const r = await enroll({ sub: "human:unrecorded" }, cfg, broken);
    expect(r.status).toBe(503);
    expect(r.j.error_description).toMatch(/no enrollment code was issued: its ledger record could not be written/);
    expect(r.text).not.toMatch(/pce_/);
    expect(stored).toMatch(/^enroll:[0-9a-f]{64}$/);
    // The code was stored, then taken: the real store no longer hands it out.
    expect(storedOk).toBe(true);
    expect(takes).toEqual([stored]);
    expect(await revocationObject(real, stored!).readOnce(stored!, false)).toBeNull();
    expect((await enrolledRecords()).length).toBe(before);
    expect((await enrolledRecords()).some((x) => x.body.sub === "human:unrecorded")).toBe(false);
  });
});

describe("POST /v1/grants/enroll: a code", () => {
  it("201 no-store with the code and connect URL; readable until taken, taken once; a grant.enrolled record without the code", async () => {
    const before = Math.floor(Date.now() / 1000);
    const r = await enroll({
      sub: "human:alice",
      tools: ["alpha__send", "beta__read", "alpha__send"],
      roles: ["auditor", "agent"],
      ttl_seconds: 3600,
      code_ttl_seconds: 600,
    });
    expect(r.status, r.text).toBe(201);
    expect(r.headers.get("cache-control")).toBe("no-store");
    const j = r.j;
    expect(j.code).toMatch(ENROLLMENT_CODE);
    expect(j.code).toMatch(/^pce_[A-Za-z0-9_-]{43}$/);
    expect(j.enrollment).toBe(await enrollmentId(j.code));
    expect(j).toMatchObject({
      sub: "human:alice",
      roles: ["auditor", "agent"],
      tools: ["alpha__send", "beta__read"],
      ttl_seconds: 3600,
      connect_url: `${GW}/mcp`,
    });
    expect(j.expires).toBeGreaterThanOrEqual(before + 600);
    expect(j.expires).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + 600);

    const peek = await readEnrollment(env as unknown as Env, j.code, false);
    expect(peek).toEqual({
      ok: true,
      record: { sub: "human:alice", tools: ["alpha__send", "beta__read"], roles: ["auditor", "agent"], ttlSeconds: 3600, expiresAt: j.expires, by: admin.sub },
    });
    const taken = await readEnrollment(env as unknown as Env, j.code, true);
    expect(taken.ok).toBe(true);
    expect(await readEnrollment(env as unknown as Env, j.code, true)).toEqual({ ok: false, reason: "unknown" });
    expect(await readEnrollment(env as unknown as Env, j.code, false)).toEqual({ ok: false, reason: "unknown" });

    const records = (await enrolledRecords()).filter((x) => x.body.enrollment === j.enrollment);
    expect(records).toHaveLength(1);
    expect(records[0]!.chain).toBe(TEAM);
    expect(records[0]!.body).toEqual({
      enrollment: j.enrollment,
      sub: "human:alice",
      roles: ["auditor", "agent"],
      tools: ["alpha__send", "beta__read"],
      ttl_seconds: 3600,
      expires: j.expires,
      by: admin.sub,
    });
    expect(JSON.stringify(records[0])).not.toContain(j.code);
    expect(JSON.stringify(records[0])).not.toContain(j.code.slice(4));
  });

  it("defaults: roles [agent], the template's tools, its lifetime, a code that lasts a day; every code is new", async () => {
    const a = await enroll({ sub: "human:bob" });
    const b = await enroll({ sub: "human:bob" });
    expect(a.status).toBe(201);
    expect(a.j).toMatchObject({ sub: "human:bob", roles: ["agent"], tools: ["alpha__*", "beta__read"], ttl_seconds: 8 * 3600 });
    expect(a.j.expires - Math.floor(Date.now() / 1000)).toBeGreaterThan(86400 - 10);
    expect(a.j.expires - Math.floor(Date.now() / 1000)).toBeLessThanOrEqual(86400);
    expect(b.j.code).not.toBe(a.j.code);
    expect(b.j.enrollment).not.toBe(a.j.enrollment);
    // A glob the template's glob covers as a name is kept as is.
    const glob = await enroll({ sub: "human:bob", tools: ["alpha__*"] });
    expect(glob.status).toBe(201);
    expect(glob.j.tools).toEqual(["alpha__*"]);
  });
});
