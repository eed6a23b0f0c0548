/**
 * OAuth upstreams, the parts a fake can drive: the config keys (`upstreams[].auth`) and what they
 * refuse; the OAuth client protocol (src/egress/oauth-client.ts) against a scripted fetcher —
 * discovery from the 401's challenge and from the well-known fallbacks, an issuer that does not
 * match, no PKCE S256, a resource that is not the upstream, endpoints that are not https,
 * registration accepted and refused, token answers that are garbage, not bearer, refused
 * (invalid_grant) — with no token, code or secret in any reason; CredentialsDO's connection rows
 * through real stubs (one refresh lease at a time, the coalesced refresh count, a drop that needs
 * the lease, pending authorizations taken once and expiring); and the answers a not-connected call
 * gets (isError naming the connect URL, the URL elicitation of each era, the gateway's own input
 * responses never forwarded). The full flow against a real authorization server is
 * test/e2e/oauth-upstream.test.ts. Must never: reach a network.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config/load.ts";
import { credentialsObject, pendingConnectObject, teamCredentialsObject } from "../../durable-objects/object-names.ts";
import { exchangeCode, type Fetcher, OAuthFlowError, refreshTokens, registerClient } from "../../src/egress/oauth-client.ts";
import { bearerChallenge, discover } from "../../src/egress/oauth-discovery.ts";
import { CONNECT_INPUT_KEY, notAnswered, URL_ELICITATION_REQUIRED, withoutGatewayMeta } from "../../src/governance/call-answers.ts";
import type { ToolCall } from "../../src/governance/steps.ts";
import type { NewConnection } from "../../durable-objects/contract.ts";

const UP = "https://mcp.example.com/mcp";
const AS = "https://auth.example.com";

const config = (upstream: string) => `
actor: local:unit
upstreams:
  - name: tracker
    url: ${UP}
${upstream}
`;

describe("upstreams[].auth", () => {
  it("takes the minimal form and resolves the defaults", () => {
    const cfg = loadConfig(config("    auth: {type: oauth}"), {});
    const up = cfg.upstreams[0]!;
    expect(up.credentials.mode).toBe("oauth");
    expect(up.oauth).toEqual({ registration: "dynamic", connection: "per_principal" });
  });

  // biome-ignore-start lint/suspicious/noTemplateCurlyInString: the configs quote the ${NAME} reference syntax literally
  it("expands a configured client's secret from ${NAME} and refuses every combination that cannot work", () => {
    const ok = loadConfig(
      config("    auth: {type: oauth, client_id: gw-client, client_secret: '${TRACKER_SECRET}', connection: shared, scopes: [read, write]}"),
      {
        TRACKER_SECRET: "s3cret",
      },
    );
    expect(ok.upstreams[0]!.oauth).toEqual({
      registration: "configured",
      clientId: "gw-client",
      clientSecret: "s3cret",
      connection: "shared",
      scopes: ["read", "write"],
    });
    const bad = (yaml: string, vars: Record<string, string> = {}) => {
      try {
        loadConfig(config(yaml), vars);
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    expect(bad("    auth: {type: oauth, client_id: x, client_secret: inline-secret}")).toContain("client_secret must be a ${NAME} reference");
    expect(bad("    auth: {type: oauth, registration: configured}")).toContain("needs the client_id");
    expect(bad("    auth: {type: oauth, registration: dynamic, client_id: x}")).toContain("are for registration configured");
    expect(bad("    auth: {type: oauth}\n    credentials: {mode: per_principal}")).toContain("drop credentials");
    expect(bad("    auth: {type: oauth}\n    headers: {Authorization: 'Bearer ${T}'}", { T: "t" })).toContain("drop headers.Authorization");
    expect(bad("    auth: {type: saml}")).toMatch(/auth\.type/);
    expect(bad("    auth: {type: oauth, client_id: x, client_secret: '${UNSET}'}")).toContain("${UNSET} is not set");
  });
  // biome-ignore-end lint/suspicious/noTemplateCurlyInString: the configs quote the ${NAME} reference syntax literally
});

/** A fetcher that answers from a table of "METHOD url" → response, and records what was asked. */
function scripted(table: Record<string, () => Response>) {
  const seen: { method: string; url: string; body: string; headers: Headers }[] = [];
  const fetcher: Fetcher = async (url, init) => {
    const method = (init.method ?? "GET").toUpperCase();
    seen.push({ method, url, body: typeof init.body === "string" ? init.body : "", headers: new Headers(init.headers) });
    const f = table[`${method} ${url}`];
    return f ? f() : new Response("not found", { status: 404 });
  };
  return { fetcher, seen };
}
const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
const asMetadata = (over: Record<string, unknown> = {}) => ({
  issuer: AS,
  authorization_endpoint: `${AS}/authorize`,
  token_endpoint: `${AS}/token`,
  registration_endpoint: `${AS}/register`,
  revocation_endpoint: `${AS}/revoke`,
  code_challenge_methods_supported: ["S256"],
  token_endpoint_auth_methods_supported: ["client_secret_basic", "none"],
  ...over,
});
const challenge = () =>
  new Response(null, {
    status: 401,
    headers: { "www-authenticate": `Bearer error="invalid_token", resource_metadata="https://mcp.example.com/prm", scope="read write"` },
  });

describe("discovery", () => {
  it("reads the 401's challenge, the protected-resource metadata it names and the server's RFC 8414 metadata", async () => {
    const { fetcher, seen } = scripted({
      [`POST ${UP}`]: challenge,
      "GET https://mcp.example.com/prm": () => json({ resource: UP, authorization_servers: [AS], scopes_supported: ["read"] }),
      [`GET ${AS}/.well-known/oauth-authorization-server`]: () => json(asMetadata()),
    });
    const d = await discover(fetcher, UP);
    expect(d.resource).toBe(UP);
    expect(d.scopes).toEqual(["read", "write"]);
    expect(d.server).toMatchObject({ issuer: AS, tokenEndpoint: `${AS}/token/`.slice(0, -1), registrationEndpoint: `${AS}/register` });
    expect(seen.map((s) => `${s.method} ${s.url}`)).toEqual([
      `POST ${UP}`,
      "GET https://mcp.example.com/prm",
      `GET ${AS}/.well-known/oauth-authorization-server`,
    ]);
    expect(seen[0]!.headers.get("authorization")).toBeNull();
  });

  it("falls back to the well-known URLs (path form first) and to OpenID discovery", async () => {
    const { fetcher, seen } = scripted({
      [`POST ${UP}`]: () => new Response(null, { status: 401 }),
      "GET https://mcp.example.com/.well-known/oauth-protected-resource": () => json({ resource: "https://mcp.example.com/", authorization_servers: [AS] }),
      [`GET ${AS}/.well-known/openid-configuration`]: () => json(asMetadata()),
    });
    const d = await discover(fetcher, UP);
    expect(d.resource).toBe("https://mcp.example.com/");
    expect(seen.map((s) => s.url)).toEqual([
      UP,
      "https://mcp.example.com/.well-known/oauth-protected-resource/mcp",
      "https://mcp.example.com/.well-known/oauth-protected-resource",
      `${AS}/.well-known/oauth-authorization-server`,
      `${AS}/.well-known/openid-configuration`,
    ]);
  });

  it("refuses a server without S256, another issuer, a foreign resource, a plain-http endpoint, and no metadata at all", async () => {
    const run = async (meta: Record<string, unknown>, prm: Record<string, unknown> = { resource: UP, authorization_servers: [AS] }) => {
      const { fetcher } = scripted({
        [`POST ${UP}`]: challenge,
        "GET https://mcp.example.com/prm": () => json(prm),
        [`GET ${AS}/.well-known/oauth-authorization-server`]: () => json(meta),
      });
      return discover(fetcher, UP).then(
        () => null,
        (e) => e as OAuthFlowError,
      );
    };
    expect((await run(asMetadata({ code_challenge_methods_supported: ["plain"] })))?.reason).toContain("does not offer PKCE S256");
    expect((await run(asMetadata({ code_challenge_methods_supported: undefined })))?.reason).toContain("does not offer PKCE S256");
    expect((await run(asMetadata({ issuer: "https://evil.example.com" })))?.reason).toContain("names another issuer");
    expect((await run(asMetadata(), { resource: "https://other.example.com/mcp", authorization_servers: [AS] }))?.reason).toContain("a resource other than");
    expect((await run(asMetadata({ token_endpoint: "http://auth.example.com/token" })))?.reason).toContain("not https");
    expect((await run(asMetadata(), { resource: UP, authorization_servers: [] }))?.reason).toContain("names no authorization server");
    const none = scripted({ [`POST ${UP}`]: () => json({ jsonrpc: "2.0", id: 1, result: {} }) });
    const e = await discover(none.fetcher, UP).catch((x) => x as OAuthFlowError);
    expect(e).toBeInstanceOf(OAuthFlowError);
    expect((e as OAuthFlowError).reason).toContain("did not ask for OAuth");
  });

  it("names an unreachable server by host, with the fetcher's reason (an egress refusal)", async () => {
    const fetcher: Fetcher = async () => {
      throw Object.assign(new Error("egress: host not allowed"), { reason: "host auth.example.com is not in egress.hosts" });
    };
    const e = (await discover(fetcher, UP).catch((x) => x)) as OAuthFlowError;
    expect(e.kind).toBe("unreachable");
    expect(e.reason).toBe("the upstream at mcp.example.com could not be reached (host auth.example.com is not in egress.hosts)");
  });

  it("parses Bearer challenges with quoted and bare values", () => {
    expect(bearerChallenge('Bearer realm="x", resource_metadata="https://a/b?c=\\"d\\"", scope=read')).toEqual({
      resourceMetadata: 'https://a/b?c="d"',
      scope: "read",
    });
    expect(bearerChallenge(null)).toEqual({});
  });
});

describe("registration and tokens", () => {
  const server = {
    issuer: AS,
    authorizationEndpoint: `${AS}/authorize`,
    tokenEndpoint: `${AS}/token`,
    registrationEndpoint: `${AS}/register`,
    authMethods: ["client_secret_basic"],
    clientIdMetadataDocument: false,
  };
  const dynamic = { registration: "dynamic" as const, connection: "per_principal" as const };

  it("registers with its redirect URI and keeps the secret the server issued; a refusal names the server's reason", async () => {
    const ok = scripted({
      [`POST ${AS}/register`]: () => json({ client_id: "c-1", client_secret: "sec-1", token_endpoint_auth_method: "client_secret_basic" }, 201),
    });
    expect(await registerClient(ok.fetcher, server, dynamic, "https://gw.example.com/console/connections/callback", "https://gw/doc")).toEqual({
      clientId: "c-1",
      clientSecret: "sec-1",
      authMethod: "client_secret_basic",
    });
    expect(JSON.parse(ok.seen[0]!.body)).toMatchObject({
      redirect_uris: ["https://gw.example.com/console/connections/callback"],
      grant_types: ["authorization_code", "refresh_token"],
    });
    const no = scripted({ [`POST ${AS}/register`]: () => json({ error: "invalid_redirect_uri", error_description: "redirect_uris must be https" }, 400) });
    const e = (await registerClient(no.fetcher, server, dynamic, "https://gw/cb", "https://gw/doc").catch((x) => x)) as OAuthFlowError;
    expect(e.kind).toBe("registration");
    expect(e.reason).toContain("redirect_uris must be https");
    const without = await registerClient(no.fetcher, { ...server, registrationEndpoint: undefined } as never, dynamic, "https://gw/cb", "https://gw/doc").catch(
      (x) => x,
    );
    expect((without as OAuthFlowError).reason).toContain("offers no dynamic client registration");
    const doc = await registerClient(
      no.fetcher,
      server,
      { registration: "metadata_document", connection: "per_principal" },
      "https://gw/cb",
      "https://gw/doc",
    ).catch((x) => x);
    expect((doc as OAuthFlowError).reason).toContain("does not accept client ID metadata documents");
  });

  it("exchanges the code with the verifier and resource, authenticating by Basic; refusals and garbage are told apart, and no reason carries a secret", async () => {
    const client = { clientId: "c-1", clientSecret: "sec-1", authMethod: "client_secret_basic" };
    const good = scripted({
      [`POST ${AS}/token`]: () => json({ access_token: "at-1", token_type: "Bearer", expires_in: 60, refresh_token: "rt-1", scope: "read" }),
    });
    const t = await exchangeCode(good.fetcher, server, client, { code: "code-1", verifier: "v-1", redirectUri: "https://gw/cb", resource: UP }, 1000);
    expect(t).toEqual({ accessToken: "at-1", refreshToken: "rt-1", expiresAt: 61_000, scope: "read" });
    const form = new URLSearchParams(good.seen[0]!.body);
    expect(Object.fromEntries(form)).toEqual({
      grant_type: "authorization_code",
      code: "code-1",
      code_verifier: "v-1",
      redirect_uri: "https://gw/cb",
      resource: UP,
    });
    expect(good.seen[0]!.headers.get("authorization")).toBe(`Basic ${btoa("c-1:sec-1")}`);
    const cases: [() => Response, string, string][] = [
      [() => json({ error: "invalid_grant" }, 400), "refused", "(invalid_grant)"],
      [() => new Response("<html>oops</html>", { status: 500 }), "invalid_answer", "that is not JSON"],
      [() => json({ access_token: "at-2", token_type: "mac" }), "invalid_answer", "not a bearer token"],
      [() => json({ token_type: "Bearer" }), "invalid_answer", "without an access token"],
    ];
    for (const [answer, kind, text] of cases) {
      const f = scripted({ [`POST ${AS}/token`]: answer });
      const e = (await refreshTokens(f.fetcher, server, client, { refreshToken: "rt-secret", resource: UP, scope: "read" }).catch((x) => x)) as OAuthFlowError;
      expect(e.kind).toBe(kind);
      expect(e.reason).toContain(text);
      expect(e.reason).not.toMatch(/rt-secret|sec-1|at-2/);
    }
    const kept = scripted({ [`POST ${AS}/token`]: () => json({ access_token: "at-3", token_type: "bearer" }) });
    expect(
      await refreshTokens(kept.fetcher, server, { clientId: "pub", authMethod: "none" }, { refreshToken: "rt-1", resource: UP, scope: "read" }),
    ).toMatchObject({
      accessToken: "at-3",
      refreshToken: "rt-1",
      scope: "read",
      expiresAt: null,
    });
    expect(new URLSearchParams(kept.seen[0]!.body).get("client_id")).toBe("pub");
  });
});

describe("CredentialsDO connections", () => {
  const row = (n: number): NewConnection => ({ kv: "k1", issuer: AS, iv: `iv${n}`, ct: `ct${n}`, expiresAt: 5000 + n, scope: "read", by: "agent:a" });

  it("hands out one refresh lease at a time, stores a refresh only under it, and coalesces the refresh count", async () => {
    const o = credentialsObject(env, "agent:lease");
    await o.connectionPut("tracker", row(0));
    const first = await o.connectionLease("tracker", 1000, 15_000);
    expect(first && "lease" in first).toBe(true);
    const second = await o.connectionLease("tracker", 1001, 15_000);
    expect(second && "busy" in second).toBe(true);
    const lease = (first as { lease: string }).lease;
    expect(await o.connectionRefreshed("tracker", "not-the-lease", row(1), 1002, 3_600_000)).toEqual({ stored: false, record: null });
    expect(await o.connectionRefreshed("tracker", lease, row(1), 1003, 3_600_000)).toEqual({ stored: true, record: 1 });
    expect((await o.connectionGet("tracker"))?.ct).toBe("ct1");
    // Within the hour: counted, not recorded; after it, the count since the last record.
    for (const at of [2000, 3000]) {
      const l = (await o.connectionLease("tracker", at, 15_000)) as { lease: string };
      expect(await o.connectionRefreshed("tracker", l.lease, row(at), at, 3_600_000)).toEqual({ stored: true, record: null });
    }
    const l = (await o.connectionLease("tracker", 3_700_000, 15_000)) as { lease: string };
    expect(await o.connectionRefreshed("tracker", l.lease, row(9), 3_700_000, 3_600_000)).toEqual({ stored: true, record: 3 });
    // An expired lease is handed out again.
    await o.connectionLease("tracker", 4_000_000, 15_000);
    expect(await o.connectionLease("tracker", 4_020_000, 15_000)).toHaveProperty("lease");
  });

  it("drops a refused connection only under the lease, and keeps principals and teams apart", async () => {
    const a = credentialsObject(env, "agent:drop-a");
    const b = credentialsObject(env, "agent:drop-b");
    const team = teamCredentialsObject(env, "platform")!;
    await a.connectionPut("tracker", row(0));
    expect(await b.connectionGet("tracker")).toBeNull();
    expect(await team.connectionGet("tracker")).toBeNull();
    const l = (await a.connectionLease("tracker", 10, 15_000)) as { lease: string };
    expect(await a.connectionDrop("tracker", "other")).toBeNull();
    expect((await a.connectionDrop("tracker", l.lease))?.by).toBe("agent:a");
    expect(await a.connectionGet("tracker")).toBeNull();
    expect(await a.connectionLease("tracker", 20, 15_000)).toBeNull();
    expect(teamCredentialsObject(env, "_global")).toBeNull();
  });

  it("takes a pending authorization once, and not after it expired; a state it could not have issued addresses nothing", async () => {
    const state = "A".repeat(43);
    const shard = pendingConnectObject(env, state)!;
    await shard.pendingPut(state, { iv: "i", ct: "c" }, 2000, 1000);
    expect(await shard.pendingTake(state, 1500)).toEqual({ iv: "i", ct: "c" });
    expect(await shard.pendingTake(state, 1500)).toBeNull();
    await shard.pendingPut(state, { iv: "i", ct: "c" }, 2000, 1000);
    expect(await shard.pendingTake(state, 2000)).toBeNull();
    for (const bad of ["", "short", `${"A".repeat(43)}=`, "../../x".padEnd(43, "A")]) expect(pendingConnectObject(env, bad)).toBeNull();
  });
});

describe("a call to an upstream the caller has not connected", () => {
  const call = (era: "legacy" | "modern", urlElicitation: boolean): ToolCall => ({
    principal: { sub: "agent:a", team: "t", roles: ["agent"], tools: null, authenticated: true },
    era,
    request: { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "tracker__whoami" } },
    exposedName: "tracker__whoami",
    arguments: undefined,
    runId: null,
    urlElicitation,
  });
  const leg = {
    kind: "failed" as const,
    reason: "upstream tracker: you have not connected upstream tracker. Connect it at https://gw/console/connections?upstream=tracker",
    auth: true,
    connect: { upstream: "tracker", url: "https://gw/console/connections?upstream=tracker" },
  };

  it("reads the connect URL in an isError result, or gets the URL elicitation its client declared", () => {
    const plain = notAnswered(call("legacy", false), leg).response;
    expect(plain.result).toEqual({ content: [{ type: "text", text: leg.reason }], isError: true });
    const legacy = notAnswered(call("legacy", true), leg).response;
    expect(legacy.error?.code).toBe(URL_ELICITATION_REQUIRED);
    const e = (legacy.error!.data as { elicitations: { mode: string; url: string; elicitationId: string }[] }).elicitations[0]!;
    expect(e).toMatchObject({ mode: "url", url: leg.connect.url });
    expect(e.elicitationId).toMatch(/^[0-9a-f-]{36}$/);
    const modern = notAnswered(call("modern", true), leg).response.result as Record<string, unknown>;
    expect(modern.resultType).toBe("input_required");
    expect(modern.inputRequests).toEqual({
      [CONNECT_INPUT_KEY]: { method: "elicitation/create", params: { mode: "url", url: leg.connect.url, message: expect.stringContaining("Connect tracker") } },
    });
  });

  it("never forwards the answers to the gateway's own input requests", () => {
    expect(withoutGatewayMeta({ name: "x", inputResponses: { [CONNECT_INPUT_KEY]: { action: "accept" } } })).toEqual({ name: "x" });
    expect(withoutGatewayMeta({ name: "x", inputResponses: { [CONNECT_INPUT_KEY]: { action: "accept" }, theirs: { ok: 1 } }, requestState: "s" })).toEqual({
      name: "x",
      inputResponses: { theirs: { ok: 1 } },
      requestState: "s",
    });
  });
});
