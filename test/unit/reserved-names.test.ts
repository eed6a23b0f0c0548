/**
 * Reserved names and the one spelling of a name (src/config/principal.ts) at every entry point
 * that is not a sign-in source of its own (those are in access.test.ts, oidc-auth.test.ts,
 * enroll-route.test.ts, oauth-grant.test.ts): the rule itself as a table; the reserved names are
 * the gateway's own (the global chain, every object-name kind in durable-objects/object-names.ts and the
 * enrollment keys; run ids can never be one); grant claims (minting refuses, and a grant signed
 * anyway — as one minted before the rule — is refused at verification and at the gate);
 * `POST /v1/grants`; and config load (reserved or non-canonical teams, principal spaces that
 * overlap — an issuer's `sub_prefix: "access:"` beside auth.access — named by both sources, the
 * actor). Owns nothing of the gateway.
 */
import { env, SELF } from "cloudflare:test";
import { SignJWT } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import { HOLD_ID, RUN_ID } from "../../durable-objects/object-names.ts";
import { loadConfig } from "../../src/config/load.ts";
import { GLOBAL_TEAM, OBJECT_NAME_KINDS, lookAlike, mintedPrincipalProblem, principalNameProblem, reservedNameProblem } from "../../src/config/principal.ts";
import { authenticate } from "../../src/identity/auth.ts";
import { GRANT_TYP, mintGrant, verifyGrant } from "../../src/identity/tokens.ts";
import { type KeySet, parseKeySet } from "../../src/identity/keys.ts";
import { GLOBAL_CHAIN } from "../../src/ledger/records.ts";

// Vite inlines the source text at build time: the name builders as they are.
const sources = import.meta.glob(["../../durable-objects/object-names.ts", "../../src/identity/enrollment.ts"], {
  query: "?raw",
  import: "default",
  eager: true,
}) as Record<string, string>;

const GW = "http://127.0.0.1";
let keys: KeySet;
beforeAll(async () => {
  keys = await parseKeySet(env.PORTCULLIS_SIGNING_KEY as string);
});

/** A grant signed with the gateway's key without mintGrant's checks: what a grant minted before the rule looks like. */
async function signedAnyway(claims: { sub: string; team: string; roles?: string[] }): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ aud: GW, tools: ["*"], roles: claims.roles ?? ["agent"], sub: claims.sub, team: claims.team, jti: `old-${crypto.randomUUID()}` })
    .setProtectedHeader({ alg: "EdDSA", typ: GRANT_TYP, kid: keys.active!.kid })
    .setIssuer(GW)
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(now + 600)
    .sign(keys.active!.key);
}

describe("the rule", () => {
  it("refuses every reserved team, and teams not in their one lowercase form", () => {
    const refused: [string, RegExp][] = [
      ["_global", /reserved for the gateway.*_global is its own ledger chain/],
      ["_audit", /starting with "_" are reserved/],
      ["ops~x", /separates a hold id's team/],
      ["chain:ops", /starts with "chain:"/],
      ["Team:ops", /starts with "team:"/],
      ["session:1", /starts with "session:"/],
      ["shard-3", /starts with "shard-"/],
      ["Ops", /not lowercase/],
      ["", /empty/],
      ["o".repeat(101), /longer than 100/],
      ["ops\u0000", /control, format or space/],
      ["o\u200bps", /control, format or space/],
      ["my team", /control, format or space/],
      ["e\u0301quipe", /not in Unicode NFC/],
    ];
    for (const [team, why] of refused) expect(reservedNameProblem("team", team), JSON.stringify(team)).toMatch(why);
    for (const team of ["ops", "default", "team-a", "eng.eu", "org:eng", "global", "self-probe/no-ledger"])
      expect(reservedNameProblem("team", team), team).toBeNull();
  });

  it("a principal the gateway names has one spelling; an identity provider's keeps the provider's", () => {
    for (const sub of ["Agent:selfappr", "agent:Selfappr", "agent:sеlfappr" /* Cyrillic е */, "agent:ｓelf", "agent: x", "_agent", "run:x", "agent:a~b"])
      expect(principalNameProblem(sub, []), sub).not.toBeNull();
    for (const sub of ["agent:selfappr", "human:demo-approver", "you@example.com", "x", "local:actor", "svc/a+b=c"])
      expect(principalNameProblem(sub, []), sub).toBeNull();
    const okta = [{ prefix: "oidc:acme.okta.com:", source: "okta" }];
    // OIDC subs are case-sensitive (OIDC Core §2): kept as the issuer wrote them inside its space.
    expect(principalNameProblem("oidc:acme.okta.com:00uAbCdEf", okta)).toBeNull();
    expect(principalNameProblem("oidc:acme.okta.com:00u\u202eAbc", okta)).toMatch(/control, format or space/);
    expect(principalNameProblem("oidc:acme.okta.com:00uAbCdEf", [])).toMatch(/not in canonical form/);
  });

  it("a minted principal is outside every identity provider's space, the default prefixes included", () => {
    const spaces = [{ prefix: "sso:", source: "auth.external_issuers[0] (https://sso.example.com)" }];
    expect(mintedPrincipalProblem("sso:alice", spaces)).toMatch(/principal space of auth\.external_issuers\[0\]/);
    expect(mintedPrincipalProblem("SSO:alice", spaces)).toMatch(/principal space of auth\.external_issuers\[0\]/);
    expect(mintedPrincipalProblem("access:leo@example.com", spaces)).toMatch(/default prefixes, sub_prefix "access:"/);
    expect(mintedPrincipalProblem("oidc:idp.example.com:alice", [])).toMatch(/default prefixes, sub_prefix "oidc:"/);
    expect(mintedPrincipalProblem("Agent:x", [])).toMatch(/not in canonical form/);
    expect(mintedPrincipalProblem("agent:x", spaces)).toBeNull();
  });

  it("look-alikes are folded (case, width, compatibility) for the self-approval refusal only", () => {
    expect(lookAlike("Agent:selfappr", "agent:selfappr")).toBe(true);
    expect(lookAlike("ａgent:selfappr", "agent:selfappr")).toBe(true);
    expect(lookAlike("agent:selfappr", "agent:selfappr2")).toBe(false);
  });
});

describe("the reserved names are the gateway's own", () => {
  it("the reserved team is the global chain's name", () => {
    expect(GLOBAL_TEAM).toBe(GLOBAL_CHAIN);
  });

  it("every kind an object or storage name is built with is reserved", () => {
    const text = Object.values(sources).join("\n");
    const kinds = new Set([...text.matchAll(/`([a-z]+[:-])\$\{/g)].map((m) => m[1]!));
    expect(kinds.size).toBeGreaterThanOrEqual(8);
    for (const k of kinds) expect(OBJECT_NAME_KINDS as readonly string[], k).toContain(k);
  });

  it("a reserved team cannot be the team of a hold id, and a run id can never be a reserved name", () => {
    expect(HOLD_ID.test(`${GLOBAL_TEAM}~${"a".repeat(24)}`)).toBe(false);
    // Run ids are client-chosen (Portcullis-Run-Id) and only ever address `run:<id>`: the format admits no separator and not `_global`.
    for (const id of [GLOBAL_TEAM, "run:abcdefgh", "abcdefgh~1", "abcdefgh\u0000", "leg:abcdefgh"]) expect(RUN_ID.test(id), id).toBe(false);
  });
});

describe("grant claims", () => {
  it("mintGrant refuses a reserved team and a principal with a reserved name", async () => {
    const mint = (sub: string, team: string) =>
      mintGrant(keys, { iss: GW, aud: GW, sub, team, roles: ["agent"], tools: [], ttlSeconds: 60 }, { maxLifetimeSeconds: 3600 });
    await expect(mint("agent:x", "_global")).rejects.toThrow(/team refused: .*reserved for the gateway/);
    await expect(mint("agent:x", "Ops")).rejects.toThrow(/team refused: the team is not lowercase/);
    await expect(mint("_agent", "ops")).rejects.toThrow(/sub refused/);
    await expect(mint("agent:x", "ops")).resolves.toMatchObject({ jti: expect.any(String) });
  });

  it("a grant signed for team _global anyway does not verify", async () => {
    const v = await verifyGrant(await signedAnyway({ sub: "agent:x", team: "_global" }), keys, { issuer: GW, audience: GW, maxLifetimeSeconds: 3600 });
    expect(v).toMatchObject({ ok: false, reason: expect.stringMatching(/^team refused: /) });
  });

  it("at the gate: a signed grant for team _global or for Agent:selfappr is refused (401)", async () => {
    const cfg = loadConfig("auth:\n  required: true\nupstreams:\n  - name: alpha\n    url: http://127.0.0.1:9/mcp\n", { PORTCULLIS_ORIGIN: GW });
    const gate = (token: string) =>
      authenticate(new Request(`${GW}/v1/holds`, { headers: { authorization: `Bearer ${token}` } }), env, cfg, {
        path: "/",
        role: ["approver", "admin"],
        allowActor: false,
      });
    for (const claims of [
      { sub: "agent:x", team: "_global", roles: ["auditor", "admin"] },
      { sub: "Agent:selfappr", team: "ops", roles: ["approver"] },
    ]) {
      const r = await gate(await signedAnyway(claims));
      expect(r.ok, JSON.stringify(claims)).toBe(false);
      if (!r.ok) {
        expect(r.response.status).toBe(401);
        expect(r.response.headers.get("www-authenticate")).toMatch(/(team|sub) refused/);
      }
    }
    // The same grant with the canonical spelling is accepted: the refusal is the name, nothing else.
    expect((await gate(await signedAnyway({ sub: "agent:selfappr", team: "ops", roles: ["approver"] }))).ok).toBe(true);
  });
});

describe("POST /v1/grants", () => {
  it("refuses team _global and every non-canonical or foreign sub with a 400 naming why", async () => {
    const admin = (
      await mintGrant(keys, { iss: GW, aud: GW, sub: "human:root", team: "t1", roles: ["admin"], tools: [], ttlSeconds: 600 }, { maxLifetimeSeconds: 86400 })
    ).token;
    const post = async (body: object) => {
      const r = await SELF.fetch(`${GW}/v1/grants`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${admin}` },
        body: JSON.stringify(body),
      });
      return { status: r.status, j: (await r.json()) as { error_description?: string; token?: string } };
    };
    const cases: [object, RegExp][] = [
      [{ sub: "agent:x", team: "_global" }, /^team "_global": team names starting with "_" are reserved/],
      [{ sub: "agent:x", team: "Ops" }, /^team "Ops": the team is not lowercase/],
      [{ sub: "agent:x", team: "ops~1" }, /^team "ops~1": the team holds "~"/],
      [{ sub: "Agent:selfappr" }, /^sub "Agent:selfappr": the principal is not in canonical form/],
      [{ sub: "access:leo@example.com" }, /principal space of the identity providers' default prefixes, sub_prefix "access:"/],
      [{ sub: "oidc:idp.example.com:alice" }, /sub_prefix "oidc:"/],
      [{ sub: "principal:agent:x" }, /starts with "principal:"/],
    ];
    for (const [body, why] of cases) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.j.error_description, JSON.stringify(body)).toMatch(why);
      expect(r.j.token).toBeUndefined();
    }
    expect((await post({ sub: "agent:selfappr", team: "ops" })).status).toBe(201);
  });
});

describe("config load", () => {
  const base = "upstreams:\n  - name: alpha\n    url: http://127.0.0.1:9/mcp\n";
  const ISSUER = (extra = "") => `    - issuer: https://idp.example.com\n      jwks_url: https://idp.example.com/jwks\n      audience: portcullis\n${extra}`;
  const ACCESS = (extra = "") => `  access:\n    team_domain: https://acme.cloudflareaccess.com\n    audience: aud-tag\n${extra}`;
  const problems = (yaml: string): string[] => {
    try {
      loadConfig(yaml, {});
    } catch (e) {
      return (e as { problems?: string[] }).problems ?? [String(e)];
    }
    return [];
  };

  it("refuses an external issuer whose sub_prefix is Access's, naming both sources", () => {
    const p = problems(`auth:\n  external_issuers:\n${ISSUER('      sub_prefix: "access:"\n')}${ACCESS()}${base}`);
    expect(p).toEqual([
      'auth.external_issuers[0] (https://idp.example.com) with sub_prefix "access:" and auth.access (https://acme.cloudflareaccess.com) with sub_prefix "access:" map into the same principal space: give each a sub_prefix that does not start with the other\'s',
    ]);
    // Nested and case-variant prefixes meet too; distinct ones do not.
    expect(problems(`auth:\n  external_issuers:\n${ISSUER('      sub_prefix: "Access:eu:"\n')}${ACCESS()}${base}`)[0]).toMatch(
      /auth\.access .*same principal space/,
    );
    expect(problems(`auth:\n  external_issuers:\n${ISSUER()}${ACCESS('    sub_prefix: "oidc:idp.example.com:"\n')}${base}`)[0]).toMatch(/same principal space/);
    expect(problems(`auth:\n  external_issuers:\n${ISSUER()}${ACCESS()}${base}`)).toEqual([]);
  });

  it("refuses a reserved or non-canonical team wherever the config names one", () => {
    expect(problems(`auth:\n  external_issuers:\n${ISSUER("      default_team: _global\n")}${base}`)[0]).toMatch(
      /^auth\.external_issuers\[0\]\.default_team: team names starting with "_" are reserved/,
    );
    expect(problems(`auth:\n${ACCESS("    team: _global\n")}${base}`)[0]).toMatch(/^auth\.access\.team: team names starting with "_"/);
    expect(
      problems(
        `auth:\n${ACCESS()}  oauth:\n    enabled: true\n    sign_in:\n      access:\n        template: { team: _global }\n      enrollment:\n        template: { team: Ops }\n${base}`,
      ),
    ).toEqual([
      'auth.oauth.sign_in.access.template.team: team names starting with "_" are reserved for the gateway (_global is its own ledger chain)',
      "auth.oauth.sign_in.enrollment.template.team: the team is not lowercase (team names are compared exactly, so they are written in one form)",
    ]);
    expect(problems(`holds:\n  resolvers:\n    - teams: ["*", "_global"]\n${base}`)[0]).toMatch(/^holds\.resolvers\[0\]\.teams\[1\]/);
  });

  it("refuses a sub_prefix with a reserved name, and an actor that is not canonical or sits in a provider's space", () => {
    expect(problems(`auth:\n  external_issuers:\n${ISSUER('      sub_prefix: "session:"\n')}${base}`)[0]).toMatch(
      /sub_prefix "session:": the prefix starts with "session:"/,
    );
    expect(problems(`actor: Local:Me\n${base}`)).toEqual([
      "actor: the principal is not in canonical form: lowercase letters a-z, digits and . _ : @ + / = - (starting with a letter or digit)",
    ]);
    expect(problems(`actor: access:me@example.com\nauth:\n${ACCESS()}${base}`)[0]).toMatch(
      /^actor "access:me@example.com" is in the principal space of auth\.access/,
    );
  });
});
