/**
 * The config rules of auth.oauth (src/config/oauth-schema.ts oauthOf), through loadConfig as a gateway
 * reads its YAML: a template lifetime above auth.max_token_lifetime (or under a minute) is
 * refused, an Access sign-in without auth.access is refused, an OIDC sign-in whose issuer is not
 * one of auth.external_issuers is refused, OAuth enabled with no sign-in source is refused, an
 * access token lifetime outside [60s, max] is refused — every problem reported at once, each
 * naming its path — and a valid block resolves to the OAuthConfig the routes read. Owns nothing
 * of the gateway; must never touch a binding.
 */
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.ts";
import type { GatewayConfig } from "../../src/config/gateway-config.ts";

const IDP = "https://idp.example.com";

/** A config with `auth` (YAML lines indented two spaces, under auth:). */
const text = (auth: string) => `
actor: local:unit
auth:
  required: true
  audience: https://gw.example.com
${auth}
upstreams:
  - name: alpha
    url: https://alpha.example.com/mcp
`;

const ISSUERS = `
  external_issuers:
    - issuer: ${IDP}
      jwks_url: ${IDP}/jwks.json
      audience: portcullis`;

const ACCESS = `
  access:
    team_domain: https://acme.cloudflareaccess.com
    audience: "${"a".repeat(64)}"`;

function problems(auth: string): string[] {
  try {
    loadConfig(text(auth), {});
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

const load = (auth: string): GatewayConfig => loadConfig(text(auth), {});

describe("auth.oauth config rules", () => {
  it("a valid block with all three sources resolves (scopes gain openid, the label defaults to the issuer's host)", () => {
    const c = load(`  max_token_lifetime: 12h${ISSUERS}${ACCESS}
  oauth:
    enabled: true
    access_token_ttl: 10m
    sign_in:
      access:
        template: { tools: ["alpha__*"], roles: [approver], team: ops, lifetime: 1h }
      enrollment:
        template: { tools: ["alpha__read"], team: connectors, lifetime: 12h, budget: { calls: 10 } }
      oidc:
        - issuer: ${IDP}
          authorization_endpoint: ${IDP}/authorize
          token_endpoint: ${IDP}/token
          client_id: portcullis-gw
          client_secret: IDP_CLIENT_SECRET
          scopes: [email]
          template: { tools: ["alpha__echo"], roles: [agent], team: people, lifetime: 2h }`);
    const o = c.auth.oauth;
    expect(o).toMatchObject({ enabled: true, accessTokenTtlS: 600, dynamicRegistration: true, clientMetadataDocuments: false });
    expect(o.access).toEqual({ tools: ["alpha__*"], roles: ["approver"], team: "ops", lifetimeS: 3600 });
    expect(o.enrollment).toEqual({ tools: ["alpha__read"], roles: ["agent"], team: "connectors", lifetimeS: 43_200, budget: { calls: 10 } });
    expect(o.oidc).toEqual([
      {
        issuer: IDP,
        authorizationEndpoint: `${IDP}/authorize`,
        tokenEndpoint: `${IDP}/token`,
        clientId: "portcullis-gw",
        clientSecret: "IDP_CLIENT_SECRET",
        scopes: ["openid", "email"],
        label: "idp.example.com",
        template: { tools: ["alpha__echo"], roles: ["agent"], team: "people", lifetimeS: 7200 },
      },
    ]);
  });

  it("a template lifetime of exactly auth.max_token_lifetime is accepted; one above it is refused, naming the template", () => {
    expect(
      problems(
        `  max_token_lifetime: 2h\n  oauth:\n    enabled: true\n    access_token_ttl: 1h\n    sign_in:\n      enrollment:\n        template: { lifetime: 2h }`,
      ),
    ).toEqual([]);
    const p = problems(
      `  max_token_lifetime: 2h\n  oauth:\n    enabled: true\n    access_token_ttl: 1h\n    sign_in:\n      enrollment:\n        template: { lifetime: 3h }`,
    );
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/^auth\.oauth\.sign_in\.enrollment\.template\.lifetime: at most auth\.max_token_lifetime \(7200s\), got 3h/);
  });

  it("the default template lifetime (8h) is refused under a shorter auth.max_token_lifetime", () => {
    const p = problems(
      `  max_token_lifetime: 4h\n  oauth:\n    enabled: true\n    access_token_ttl: 1h\n    sign_in:\n      enrollment:\n        template: { team: t }`,
    );
    expect(p.join("\n")).toMatch(/auth\.oauth\.sign_in\.enrollment\.template\.lifetime: at most auth\.max_token_lifetime \(14400s\)/);
  });

  it("an Access sign-in without auth.access is refused; with it, accepted", () => {
    const sign = `\n  oauth:\n    enabled: true\n    sign_in:\n      access:\n        template: { lifetime: 1h }`;
    const p = problems(sign);
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/^auth\.oauth\.sign_in\.access: set auth\.access/);
    expect(problems(`${ACCESS}${sign}`)).toEqual([]);
  });

  it("an OIDC sign-in whose issuer is not one of auth.external_issuers is refused, naming its index", () => {
    const oidc = (issuer: string) => `${ISSUERS}
  oauth:
    enabled: true
    sign_in:
      oidc:
        - issuer: ${IDP}
          authorization_endpoint: ${IDP}/authorize
          token_endpoint: ${IDP}/token
          client_id: gw
          template: { lifetime: 1h }
        - issuer: ${issuer}
          authorization_endpoint: ${issuer}/authorize
          token_endpoint: ${issuer}/token
          client_id: gw
          template: { lifetime: 1h }`;
    expect(problems(oidc(IDP.replace("idp", "idp2")))).toEqual([
      "auth.oauth.sign_in.oidc[1].issuer: https://idp2.example.com is not one of auth.external_issuers (its keys and audience verify the sign-in)",
    ]);
    // (Two sign-ins with the same configured issuer are not this rule's business.)
    expect(problems(oidc(IDP))).toEqual([]);
  });

  it("enabled with no sign-in source is refused; disabled with none is fine", () => {
    const p = problems(`  oauth:\n    enabled: true`);
    expect(p).toEqual(["auth.oauth: enabled, but no sign-in source is configured (auth.oauth.sign_in.access, .enrollment or .oidc)"]);
    expect(problems(`  oauth:\n    enabled: false`)).toEqual([]);
    expect(load("").auth.oauth).toMatchObject({ enabled: false, oidc: [] });
  });

  it("an access token lifetime under a minute or above auth.max_token_lifetime is refused", () => {
    const at = (ttl: string) =>
      problems(
        `  max_token_lifetime: 1h\n  oauth:\n    enabled: true\n    access_token_ttl: ${ttl}\n    sign_in:\n      enrollment:\n        template: { lifetime: 1h }`,
      );
    expect(at("30s")).toEqual(["auth.oauth.access_token_ttl: at least 60s, got 30s"]);
    expect(at("2h")).toEqual(["auth.oauth.access_token_ttl: at most auth.max_token_lifetime (3600s), got 2h"]);
    expect(at("1h")).toEqual([]);
  });

  it("reports every problem at once", () => {
    const p = problems(`  max_token_lifetime: 1h
  oauth:
    enabled: true
    access_token_ttl: 2h
    sign_in:
      access:
        template: { lifetime: 5h }
      enrollment:
        template: { lifetime: 30s }
      oidc:
        - issuer: https://stranger.example.com
          authorization_endpoint: https://stranger.example.com/authorize
          token_endpoint: https://stranger.example.com/token
          client_id: gw
          template: { lifetime: 2h }`);
    const all = p.join("\n");
    expect(all).toMatch(/auth\.oauth\.access_token_ttl: at most auth\.max_token_lifetime \(3600s\), got 2h/);
    expect(all).toMatch(/auth\.oauth\.sign_in\.access: set auth\.access/);
    expect(all).toMatch(/auth\.oauth\.sign_in\.access\.template\.lifetime: at most auth\.max_token_lifetime \(3600s\), got 5h/);
    expect(all).toMatch(/auth\.oauth\.sign_in\.enrollment\.template\.lifetime: at least 60s, got 30s/);
    expect(all).toMatch(/auth\.oauth\.sign_in\.oidc\[0\]\.issuer: https:\/\/stranger\.example\.com is not one of auth\.external_issuers/);
    expect(all).toMatch(/auth\.oauth\.sign_in\.oidc\[0\]\.template\.lifetime: at most auth\.max_token_lifetime \(3600s\), got 2h/);
    expect(p).toHaveLength(6);
  });

  it('an Access template without auth.access still counts as a source: its two problems are reported, and no "no sign-in source" one', () => {
    // Only an Access template, auth.access missing, lifetime above the maximum: the source still counts as configured.
    const p = problems(`  max_token_lifetime: 1h\n  oauth:\n    enabled: true\n    sign_in:\n      access:\n        template: { lifetime: 2h }`);
    expect(p).toHaveLength(2);
    expect(p.join("\n")).not.toMatch(/no sign-in source/);
  });
});
