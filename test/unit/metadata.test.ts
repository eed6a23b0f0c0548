/**
 * Which authorization servers the RFC 9728 protected-resource metadata names, and what the 401
 * says, with auth.oauth off and on (src/identity/metadata.ts): off, the gateway's own origin and
 * issuer are never named (only external OIDC issuers, whose tokens it accepts directly),
 * /.well-known/oauth-authorization-server is 404, and the no-token 401 — header and body — says
 * how to get a grant; on, the gateway's origin comes first and the 401 is the plain RFC 6750 one,
 * as before. Through loadConfig for each config, and through the Worker (workerd, the unit
 * config: OAuth off) for the routes. Owns nothing of the gateway; must never touch a binding.
 */
import { SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { GatewayConfig } from "../../src/config/gateway-config.ts";
import { loadConfig } from "../../src/config/load.ts";
import { authorizationServers, protectedResourceMetadata, unauthorized } from "../../src/identity/metadata.ts";

const GW = "https://gw.example.com";
const IDP = "https://idp.example.com";

const ISSUERS = `
  external_issuers:
    - issuer: ${IDP}
      jwks_url: ${IDP}/jwks.json
      audience: portcullis`;

const OAUTH = `
  oauth:
    enabled: true
    sign_in:
      enrollment:
        template: { tools: ["alpha__*"], team: connectors, lifetime: 1h }`;

/** A config with these lines under auth: (indented two spaces). */
const load = (auth = ""): GatewayConfig =>
  loadConfig(
    `
actor: local:unit
auth:
  required: true
  audience: ${GW}
${auth}
upstreams:
  - name: alpha
    url: https://alpha.example.com/mcp
`,
    {},
  );

const challenge = (r: Response) => r.headers.get("www-authenticate") ?? "";
const body = async (r: Response) => (await r.json()) as { error: string; error_description: string };

describe("auth.oauth off: no authorization server of the gateway's own", () => {
  it("the metadata of every resource names none (the member is left out), and the gateway's issuer is not one either", () => {
    for (const cfg of [load(), load("  issuer: https://issuer.example.com")]) {
      expect(authorizationServers(cfg)).toEqual([]);
      for (const path of ["/", "/mcp", "/mcp/alpha", "/operator/mcp"]) {
        const doc = protectedResourceMetadata(cfg, path);
        expect(doc, path).not.toHaveProperty("authorization_servers");
        expect(doc.resource, path).toBe(path === "/" ? GW : `${GW}${path === "/mcp/alpha" ? "/mcp" : path}`);
        expect(doc.bearer_methods_supported).toEqual(["header"]);
      }
    }
  });

  it("external OIDC issuers, whose tokens the gateway accepts directly, stay authorization servers", () => {
    const cfg = load(ISSUERS);
    expect(protectedResourceMetadata(cfg, "/mcp").authorization_servers).toEqual([IDP]);
  });

  it("the no-token 401 on /mcp says how to get a grant, in the body and the challenge, and still points at the metadata", async () => {
    const r = unauthorized(load(), "/mcp");
    expect(r.status).toBe(401);
    const b = await body(r);
    expect(b.error).toBe("unauthorized");
    expect(b.error_description).toBe(
      `a grant token is required: ask an operator for a grant (portcullis token mint --gateway ${GW} --sub agent:<name> --tools '<globs>'), then send it as Authorization: Bearer <grant> (the client entries portcullis import writes read it from PORTCULLIS_AGENT_TOKEN)`,
    );
    const c = challenge(r);
    expect(c).toContain(`resource_metadata="${GW}/.well-known/oauth-protected-resource/mcp"`);
    expect(c).toContain('scope="agent"');
    expect(c).toContain(`error_description="a grant token is required: ask an operator for a grant (portcullis token mint --gateway ${GW}`);
    // No token is no error (RFC 6750 §3): the description is guidance, not an error code.
    expect(c).not.toContain("error=");
  });

  it("on /operator/mcp and the /v1 API the hint names a role; a separate issuer gives --iss and --aud; external issuers are named as the other way", async () => {
    expect((await body(unauthorized(load(), "/operator/mcp"))).error_description).toContain(
      `portcullis token mint --gateway ${GW} --sub human:<name> --role auditor|approver|operator), then send it as Authorization: Bearer <grant>`,
    );
    expect((await body(unauthorized(load(), "/"))).error_description).toContain(`portcullis token mint --gateway ${GW} --sub <principal> --role <role>`);
    expect((await body(unauthorized(load("  issuer: https://issuer.example.com"), "/mcp"))).error_description).toContain(
      `portcullis token mint --iss https://issuer.example.com --aud ${GW} --sub agent:<name>`,
    );
    expect((await body(unauthorized(load(ISSUERS), "/mcp"))).error_description).toContain(`, or use a token from ${IDP}, then send it`);
  });

  it("a bad token's 401 is unchanged: invalid_token with its reason", async () => {
    const r = unauthorized(load(), "/mcp", "token expired");
    expect(await body(r)).toEqual({ error: "invalid_token", error_description: "token expired" });
    expect(challenge(r)).toBe(
      `Bearer resource_metadata="${GW}/.well-known/oauth-protected-resource/mcp", scope="agent", error="invalid_token", error_description="token expired"`,
    );
  });
});

describe("auth.oauth on: as before", () => {
  it("the gateway's origin is the first authorization server, then its issuer and the external issuers", () => {
    expect(protectedResourceMetadata(load(OAUTH), "/mcp").authorization_servers).toEqual([GW]);
    expect(protectedResourceMetadata(load(`${ISSUERS}${OAUTH}`), "/mcp").authorization_servers).toEqual([GW, IDP]);
    expect(protectedResourceMetadata(load(`  issuer: https://issuer.example.com${OAUTH}`), "/").authorization_servers).toEqual([
      GW,
      "https://issuer.example.com",
    ]);
  });

  it("the no-token 401 is the plain RFC 6750 challenge: resource_metadata and scope, no grant hint", async () => {
    const r = unauthorized(load(OAUTH), "/mcp");
    expect(r.status).toBe(401);
    expect(await body(r)).toEqual({ error: "unauthorized", error_description: "a grant token is required (Authorization: Bearer <token>)" });
    expect(challenge(r)).toBe(`Bearer resource_metadata="${GW}/.well-known/oauth-protected-resource/mcp", scope="agent"`);
  });
});

describe("the Worker with auth.oauth off (the unit config)", () => {
  const O = "http://127.0.0.1";

  it("serves the metadata without authorization_servers, and /.well-known/oauth-authorization-server is 404", async () => {
    for (const path of ["", "/mcp", "/mcp/alpha", "/operator/mcp"]) {
      const r = await SELF.fetch(`${O}/.well-known/oauth-protected-resource${path}`);
      expect(r.status, path).toBe(200);
      const doc = (await r.json()) as Record<string, unknown>;
      expect(doc.resource, path).toBe(path === "" ? O : `${O}${path === "/mcp/alpha" ? "/mcp" : path}`);
      expect(doc, path).not.toHaveProperty("authorization_servers");
    }
    expect((await SELF.fetch(`${O}/.well-known/oauth-authorization-server`)).status).toBe(404);
    expect((await SELF.fetch(`${O}/.well-known/oauth-authorization-server/mcp`)).status).toBe(404);
  });

  it("the 401 of /operator/mcp without a grant says how to get one", async () => {
    const r = await SELF.fetch(`${O}/operator/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(r.status).toBe(401);
    const want = `a grant token is required: ask an operator for a grant (portcullis token mint --gateway ${O} --sub human:<name> --role auditor|approver|operator), then send it as Authorization: Bearer <grant>`;
    expect((await body(r)).error_description).toBe(want);
    expect(challenge(r)).toContain(`error_description="${want}"`);
    expect(challenge(r)).toContain(`resource_metadata="${O}/.well-known/oauth-protected-resource/operator/mcp"`);
  });
});
