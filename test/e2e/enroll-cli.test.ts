/**
 * `portcullis token enroll` end to end: a gateway started with OAuth on and an enrollment template
 * (tools *, role agent, team default, 8h), and the CLI run as a child process with an admin grant
 * in PORTCULLIS_TOKEN: it prints an enrollment code (pce_ + 43 base64url characters) and the
 * connect URL to add to a client; `--json` prints the gateway's answer; a role the template does
 * not have, a lifetime above it and a non-admin token are refused (exit 1, the gateway's reason
 * on stderr); a gateway without an enrollment template says which config key to set; a missing
 * token exits 2; the ledger has a grant.enrolled record per code and never the code. Owns the
 * gateway it starts. Must never: leave a process running, or reach beyond 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { freePort, root, startPortcullis } from "./harness.ts";
import { grantFor, ledgerKinds, type Run, runScript } from "./mcp.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const CLI = `${root}/bin/portcullis.mjs`;
const CODE = /pce_[A-Za-z0-9_-]{43}/;

let gw: Awaited<ReturnType<typeof startPortcullis>> | undefined;
let plain: Awaited<ReturnType<typeof startPortcullis>> | undefined;
let origin = "";
let plainOrigin = "";
let admin = "";
let plainAdmin = "";
let agent = "";

const config = (gateway: string, upstream: string, oauth: boolean) => `
actor: local:e2e
auth:
  required: true
  audience: ${gateway}
${
  oauth
    ? `  oauth:
    enabled: true
    sign_in:
      enrollment:
        template: {tools: ["*"], roles: ["agent"], team: "default", lifetime: "8h"}
`
    : ""
}egress:
  allow_loopback: true
upstreams:
  - name: conf
    url: ${upstream}
    timeout: 30s
`;

beforeAll(async () => {
  const jwk = JSON.stringify((await generateSigningKey("enroll-e2e")).privateJwk);
  const [port, plainPort] = [await freePort(), await freePort()];
  origin = `http://127.0.0.1:${port}`;
  plainOrigin = `http://127.0.0.1:${plainPort}`;
  const upstream = inject("conformanceUrl");
  [gw, plain] = await Promise.all([
    startPortcullis(config(origin, upstream, true), port, { PORTCULLIS_SIGNING_KEY: jwk }),
    startPortcullis(config(plainOrigin, upstream, false), plainPort, { PORTCULLIS_SIGNING_KEY: jwk }),
  ]);
  admin = (await grantFor(jwk, origin, { sub: "human:enroll-admin", team: "ops", roles: ["admin"], tools: [], ttlSeconds: 1800 })).token;
  plainAdmin = (await grantFor(jwk, plainOrigin, { sub: "human:enroll-admin", team: "ops", roles: ["admin"], tools: [], ttlSeconds: 1800 })).token;
  agent = (await grantFor(jwk, origin, { sub: "agent:enroll", team: "ops", roles: ["agent"], tools: ["*"], ttlSeconds: 1800 })).token;
}, 240_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), plain?.stop()]);
});

const enroll = (args: string[], token: string | null = admin): Promise<Run> =>
  runScript(CLI, ["token", "enroll", ...args], token === null ? {} : { PORTCULLIS_TOKEN: token });

describe("portcullis token enroll", () => {
  it("prints a one-time code and the connect URL; --json prints the gateway's answer; the ledger records each without the code", async () => {
    const r = await enroll(["--url", origin, "--sub", "human:alice", "--tools", "conf__test_simple_text", "--ttl", "2h", "--code-ttl", "1h"]);
    expect(r.code, r.stderr).toBe(0);
    const code = CODE.exec(r.stdout)?.[0];
    expect(code).toBeDefined();
    expect(r.stdout).toContain(`Add ${origin}/mcp to your MCP client as a connector`);
    expect(r.stdout).toContain('choose "Enrollment code" and enter: ');
    expect(r.stdout).toContain(`enter: ${code}`);
    expect(r.stdout).toMatch(/The code works once, until \d{4}-\d\d-\d\dT/);
    expect(r.stdout + r.stderr).not.toContain(admin);

    const j = await enroll(["--url", origin, "--sub", "human:bob", "--json"]);
    expect(j.code, j.stderr).toBe(0);
    const answer: Any = JSON.parse(j.stdout);
    expect(answer.code).toMatch(new RegExp(`^${CODE.source}$`));
    expect(answer.code).not.toBe(code);
    expect(answer).toMatchObject({ sub: "human:bob", roles: ["agent"], tools: ["*"], ttl_seconds: 8 * 3600, connect_url: `${origin}/mcp` });
    expect(answer.expires - Math.floor(Date.now() / 1000)).toBeGreaterThan(86400 - 120);
    expect(typeof answer.enrollment).toBe("string");

    // An admin reads every chain's ledger, the default team's (the template's) included.
    const entries = await ledgerKinds(origin, admin, "grant.enrolled", (es) => es.some((e: Any) => e.body.enrollment === answer.enrollment));
    const bob = entries.find((e: Any) => e.body.enrollment === answer.enrollment);
    expect(bob.body).toMatchObject({ sub: "human:bob", roles: ["agent"], tools: ["*"], ttl_seconds: 28800, expires: answer.expires, by: "human:enroll-admin" });
    const alice = entries.find((e: Any) => e.body.sub === "human:alice");
    expect(alice.body).toMatchObject({ tools: ["conf__test_simple_text"], ttl_seconds: 7200 });
    expect(JSON.stringify(entries)).not.toContain(code);
    expect(JSON.stringify(entries)).not.toContain(answer.code);
  });

  it("a role the template does not have, a lifetime above it, a non-admin token: exit 1 with the gateway's reason", async () => {
    const role = await enroll(["--url", origin, "--sub", "human:carol", "--role", "agent,admin"]);
    expect(role.code).toBe(1);
    expect(role.stdout).toBe("");
    expect(role.stderr).toContain("refused");
    expect(role.stderr).toContain("role admin not in the enrollment template's roles (agent)");
    expect(role.stderr).not.toMatch(CODE);

    const long = await enroll(["--url", origin, "--sub", "human:carol", "--ttl", "9h"]);
    expect(long.code).toBe(1);
    expect(long.stderr).toContain("ttl_seconds exceeds the enrollment template's lifetime (28800)");

    const notAdmin = await enroll(["--url", origin, "--sub", "human:carol"], agent);
    expect(notAdmin.code).toBe(1);
    expect(notAdmin.stderr).toMatch(/403/);
    expect(notAdmin.stderr).toContain("enrolling needs the admin role");
  });

  it("a gateway without OAuth says which key to set; no token or no --sub is a usage error (exit 2)", async () => {
    const off = await enroll(["--url", plainOrigin, "--sub", "human:dave"], plainAdmin);
    expect(off.code).toBe(1);
    expect(off.stderr).toMatch(/409/);
    expect(off.stderr).toContain("auth.oauth.enabled: true");

    const noToken = await enroll(["--url", origin, "--sub", "human:dave"], null);
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain("PORTCULLIS_TOKEN");
    expect(noToken.stderr).toContain("portcullis token enroll --help");

    const noSub = await enroll(["--url", origin]);
    expect(noSub.code).toBe(2);
    expect(noSub.stderr).toContain("give --sub PRINCIPAL");

    const onCommandLine = await enroll(["--url", origin, "--sub", "human:dave", "--token", admin]);
    expect(onCommandLine.code).toBe(2);
    expect(onCommandLine.stderr).toContain("unknown option --token");
  });
});
