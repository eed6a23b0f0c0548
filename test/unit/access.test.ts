/**
 * Cloudflare Access sign-in (src/identity/access.ts) as a negative matrix: a token signed by the
 * team's key for the configured application signs in as `<sub_prefix><email>` (lowercased, NFC)
 * with the roles and team of the config (never the token's; a reserved team signs nobody in); unsigned, HS256, foreign-key, expired, not-yet-valid,
 * wrong-audience, wrong-issuer, email-less and malformed tokens do not; the keys come through the
 * fetch handed in (the console passes the egress-checked one), and unreachable keys sign no one in.
 */
import { exportJWK, generateKeyPair, SignJWT, type JWK } from "jose";
import { beforeAll, describe, expect, it } from "vitest";
import type { AccessConfig } from "../../src/config/gateway-config.ts";
import { ACCESS_SKEW_S, verifyAccess } from "../../src/identity/access.ts";

const TEAM = "https://acme.cloudflareaccess.com";
const AUD = "4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2";
let n = 0;
/** Each test its own certs URL: jose caches a key set per URL. */
const access = (over: Partial<AccessConfig> = {}): AccessConfig => ({
  teamDomain: TEAM,
  audience: AUD,
  certsUrl: `${TEAM}/cdn-cgi/access/certs?t=${++n}`,
  roles: ["approver"],
  team: "ops",
  subPrefix: "access:",
  ...over,
});

type Key = Awaited<ReturnType<typeof generateKeyPair>>;
let key: Key;
let other: Key;
let jwks: { keys: JWK[] };
const fetched: string[] = [];
const fetcher = async (url: string) => {
  fetched.push(url);
  return new Response(JSON.stringify({ ...jwks, public_cert: { kid: "k1", cert: "…" } }), { headers: { "content-type": "application/json" } });
};

beforeAll(async () => {
  key = await generateKeyPair("RS256", { extractable: true });
  other = await generateKeyPair("RS256", { extractable: true });
  jwks = { keys: [{ ...(await exportJWK(key.publicKey)), kid: "k1", alg: "RS256", use: "sig" }] };
});

const now = () => Math.floor(Date.now() / 1000);

async function token(
  over: { claims?: Record<string, unknown>; key?: CryptoKey; kid?: string; iat?: number; exp?: number; nbf?: number; aud?: string; iss?: string } = {},
) {
  const iat = over.iat ?? now();
  let jwt = new SignJWT({ email: "leo@example.com", type: "app", country: "DE", ...over.claims })
    .setProtectedHeader({ alg: "RS256", kid: over.kid ?? "k1" })
    .setIssuer(over.iss ?? TEAM)
    .setAudience(over.aud ?? AUD)
    .setSubject("7335d417-61da-459d-899c-0a01c76a2f94")
    .setIssuedAt(iat)
    .setExpirationTime(over.exp ?? iat + 3600);
  if (over.nbf !== undefined) jwt = jwt.setNotBefore(over.nbf);
  return jwt.sign(over.key ?? key.privateKey);
}

describe("Cloudflare Access JWT", () => {
  it("signs in as <sub_prefix><email> with the configured roles and team, keys fetched from certs_url", async () => {
    const cfg = access();
    const before = fetched.length;
    const r = await verifyAccess(await token(), cfg, fetcher);
    expect(typeof r).not.toBe("string");
    if (typeof r === "string") return;
    expect(r.principal).toMatchObject({ sub: "access:leo@example.com", team: "ops", roles: ["approver"], tools: [], authenticated: true });
    expect(r.principal.exp).toBeGreaterThan(now());
    expect(r.iat).toBeLessThanOrEqual(now());
    expect(fetched.slice(before)).toEqual([cfg.certsUrl]);
  });

  it("takes roles and team only from the config, never from the token's claims", async () => {
    const r = await verifyAccess(
      await token({ claims: { roles: ["admin"], team: "root", groups: ["admin"] } }),
      access({ roles: ["auditor"], team: "audit" }),
      fetcher,
    );
    expect(typeof r === "string" ? r : r.principal).toMatchObject({ roles: ["auditor"], team: "audit" });
  });

  it("one person is one principal: the email is lowercased (NFC) however Access capitalises it", async () => {
    const r = await verifyAccess(await token({ claims: { email: "Leo@Example.COM" } }), access(), fetcher);
    expect(typeof r === "string" ? r : r.principal.sub).toBe("access:leo@example.com");
    const nfd = await verifyAccess(await token({ claims: { email: "Le\u0301o@example.com" } }), access(), fetcher);
    expect(typeof nfd === "string" ? nfd : nfd.principal.sub).toBe("access:l\u00e9o@example.com");
  });

  it("signs nobody in with a reserved team or an email holding an invisible character", async () => {
    const global = await verifyAccess(await token(), access({ team: "_global" }), fetcher);
    expect(global).toMatch(/^auth\.access\.team signs nobody in: team names starting with "_" are reserved/);
    const hidden = await verifyAccess(await token({ claims: { email: "leo\u200b@example.com" } }), access(), fetcher);
    expect(hidden).toMatch(/email signs nobody in: the principal holds a control, format or space character/);
  });

  it("tolerates a small clock skew on exp and nbf", async () => {
    const t = now();
    const r1 = await verifyAccess(await token({ iat: t - 600, exp: t - (ACCESS_SKEW_S - 10) }), access(), fetcher);
    expect(typeof r1).not.toBe("string");
    const r2 = await verifyAccess(await token({ nbf: t + (ACCESS_SKEW_S - 10) }), access(), fetcher);
    expect(typeof r2).not.toBe("string");
  });

  it("refuses every token that is not the team's, for this application, now", async () => {
    const t = now();
    const [alg, body] = (await token()).split(".") as [string, string, string];
    const unsigned = `${btoa(JSON.stringify({ alg: "none", typ: "JWT" })).replace(/=+$/, "")}.${body}.`;
    const hs = await new SignJWT({ email: "leo@example.com" })
      .setProtectedHeader({ alg: "HS256", kid: "k1" })
      .setIssuer(TEAM)
      .setAudience(AUD)
      .setIssuedAt()
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode("a shared secret of thirty-two bytes!"));
    const cases: Record<string, [string, RegExp]> = {
      unsigned: [unsigned, /not a JWT/],
      "alg none with a made-up signature": [`${unsigned}c2ln`, /ALG_NOT_ALLOWED/],
      "unsigned, empty signature kept": [`${alg}.${body}.`, /not a JWT/],
      "HS256 with a guessed secret": [hs, /ALG_NOT_ALLOWED/],
      "another key under the team's kid": [await token({ key: other.privateKey }), /SIGNATURE_VERIFICATION_FAILED/],
      "a kid the team does not publish": [await token({ kid: "k2" }), /NO_MATCHING_KEY/],
      expired: [await token({ iat: t - 7200, exp: t - ACCESS_SKEW_S - 60 }), /JWT_EXPIRED/],
      "not yet valid": [await token({ nbf: t + ACCESS_SKEW_S + 120 }), /CLAIM_VALIDATION_FAILED/],
      "another application's aud": [await token({ aud: "0".repeat(64) }), /CLAIM_VALIDATION_FAILED/],
      "another team's iss": [await token({ iss: "https://evil.cloudflareaccess.com" }), /CLAIM_VALIDATION_FAILED/],
      "no email (a service token)": [await token({ claims: { email: undefined, common_name: "svc.access" } }), /no email/],
      "an email that is not one": [await token({ claims: { email: "<img src=x>" } }), /no email/],
      "not a JWT": ["definitely not a token", /not a JWT/],
      oversized: [`${"a".repeat(9000)}.b.c`, /not a JWT/],
    };
    for (const [name, [tok, why]] of Object.entries(cases)) {
      const r = await verifyAccess(tok, access(), fetcher);
      expect(typeof r, name).toBe("string");
      expect(r as string, name).toMatch(why);
      expect(r as string, name).not.toContain(tok.slice(0, 40));
    }
  });

  it("signs no one in when the keys cannot be fetched (egress refused, down, or not a key set)", async () => {
    const tok = await token();
    for (const f of [
      async () => {
        throw new Error("egress refused");
      },
      async () => new Response("down", { status: 503 }),
      async () => new Response("<html>not json</html>", { headers: { "content-type": "text/html" } }),
    ]) {
      expect(typeof (await verifyAccess(tok, access(), f))).toBe("string");
    }
  });
});
