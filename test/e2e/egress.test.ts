/**
 * Egress on the production build (wrangler dev): upstreams that answer redirects toward cloud
 * metadata, an IPv4-mapped loopback address, or through an allowed hop to a denied one are
 * refused, and no redirect target is ever contacted. Plus `portcullis doctor` on configs.
 */
import { spawnSync } from "node:child_process";
import { createServer, type Server } from "node:http";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, root, startPortcullis, type Proc } from "./harness.ts";

let redirector: Server;
let sink: Server;
let gateway: Proc & { url: string };
const hits: string[] = [];
let sinkHits = 0;

function listen(s: Server, port: number) {
  return new Promise<void>((r) => s.listen(port, "127.0.0.1", r));
}

beforeAll(async () => {
  const [rPort, sPort, gPort] = [await freePort(), await freePort(), await freePort()];
  sink = createServer((req, res) => {
    sinkHits++;
    req.resume();
    res.writeHead(200, { "content-type": "application/json" });
    res.end("{}");
  });
  const targets: Record<string, string> = {
    "/meta": "http://169.254.169.254/latest/meta-data/",
    "/mapped": `http://[::ffff:7f00:1]:${sPort}/mcp`,
    "/chain": `http://127.0.0.1:${rPort}/chain2`,
    "/chain2": "http://169.254.169.254/",
    "/tosink": `http://127.0.0.1:${sPort}/mcp`,
  };
  redirector = createServer((req, res) => {
    hits.push(req.url ?? "");
    req.resume();
    res.writeHead(302, { location: targets[req.url ?? ""] ?? "/" });
    res.end();
  });
  await listen(sink, sPort);
  await listen(redirector, rPort);
  gateway = await startPortcullis(
    `
actor: local:egress
egress:
  allow_loopback: true
  max_redirects: 3
upstreams:
${Object.keys(targets)
  .filter((p) => p !== "/chain2")
  .map((p) => `  - name: r${p.slice(1)}\n    url: http://127.0.0.1:${rPort}${p}\n    timeout: 5s`)
  .join("\n")}
`,
    gPort,
  );
});

afterAll(async () => {
  await gateway?.stop();
  redirector?.close();
  sink?.close();
});

async function callTool(name: string) {
  const r = await fetch(gateway.url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "tools/call",
      "mcp-name": name,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 7,
      method: "tools/call",
      params: { name, arguments: {}, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
    }),
  });
  expect(r.status).toBeLessThan(500);
  return (await r.json()) as { error?: { message: string }; result?: { isError?: boolean; content?: { text: string }[] } };
}

describe("redirects from upstreams", () => {
  for (const [name, label] of [
    ["rmeta__x", "302 to 169.254.169.254"],
    ["rmapped__x", "302 to [::ffff:7f00:1]"],
    ["rchain__x", "allowed → denied chain"],
    ["rtosink__x", "302 to an allowed loopback URL"],
  ]) {
    it(`refuses an upstream answering ${label}`, async () => {
      const before = hits.length;
      const out = await callTool(name!);
      const message = out.error?.message ?? out.result?.content?.[0]?.text ?? "";
      expect(message).toMatch(/redirect/);
      expect(hits.length).toBeGreaterThan(before);
    });
  }
  it("never contacted a redirect target", () => {
    expect(hits).not.toContain("/chain2");
    expect(sinkHits).toBe(0);
  });
});

describe("portcullis doctor", () => {
  const dir = mkdtempSync(join(tmpdir(), "doctor-"));
  const run = (yaml: string, ...flags: string[]) => {
    const file = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, yaml);
    return spawnSync(process.execPath, [join(root, "bin/portcullis.mjs"), "doctor", "--config", file, ...flags], { cwd: root, encoding: "utf8" });
  };
  it("names every refused upstream with its reason, and exits 1", () => {
    const r = run(`auth: { required: true }
upstreams:
  - { name: meta, url: "http://169.254.169.254/latest" }
  - { name: private, url: "https://10.1.2.3/mcp" }
  - { name: decimal, url: "https://2130706433/mcp" }
  - { name: userinfo, url: "https://u:p@api.example.com/mcp" }
  - { name: google, url: "https://metadata.google.internal/computeMetadata" }
  - { name: fine, url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer \${TOKEN}" } }
`);
    expect(r.status).toBe(1);
    for (const n of ["meta", "private", "decimal", "userinfo", "google"]) expect(r.stderr).toMatch(new RegExp(`upstream ${n}: `));
    expect(r.stderr).not.toMatch(/upstream fine/);
  });
  it("passes a sound config with exit 0, and refuses loopback upstreams once deployed", () => {
    const yaml = 'egress: { allow_loopback: true }\nupstreams:\n  - { name: local, url: "http://127.0.0.1:3001/mcp" }\n';
    const ok = run(yaml);
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/sound/);
    const deployed = run(yaml, "--deployed");
    expect(deployed.status).toBe(1);
    expect(deployed.stderr).toMatch(/upstream local: egress.allow_loopback is only honoured while the gateway listens on loopback/);
  });
  it("refuses, deployed from this repository, a config over the 5 KB a Worker var holds, naming the project deploy", () => {
    const rules = Array.from(
      { length: 70 },
      (_, i) => `    - { id: r${i}, match: { upstream: gh, tool: "t${i}" }, decision: deny, reason: "rule ${i} of a policy too large for a var" }`,
    ).join("\n");
    const yaml = `auth: { required: true, audience: "https://gw.example.com" }\npolicy:\n  rules:\n${rules}\nupstreams:\n  - { name: gh, url: "https://mcp.example.com/mcp" }\n`;
    expect(Buffer.byteLength(yaml)).toBeGreaterThan(5 * 1024);
    expect(run(yaml, "--local").status).toBe(0);
    const r = run(yaml, "--deployed");
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/the inlined config is \d+\.\d KB: a Worker var \(PORTCULLIS_CONFIG\) holds at most 5 KB/);
    expect(r.stderr).toMatch(/npx portcullis init DIR, then npx portcullis deploy/);
  });
});
