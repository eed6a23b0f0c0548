#!/usr/bin/env node
/**
 * The operator commands of `portcullis` that bin/portcullis.mjs hands over: `token revoke` (a
 * grant revoked through `POST /v1/grants/:jti/revoke`), `keys generate | rotate` (an Ed25519
 * signing key, or a key set in which a new key signs and the old ones only verify — the format
 * src/identity/keys.ts parses), `check --self-probe` (a local gateway whose ledger cannot take the
 * caller's records, in front of a recording upstream defined here: a real `tools/call` must be
 * refused at the write-ahead and never reach the upstream, then a control call with a writable
 * ledger must reach it) and `doctor --live` (the static doctor, then each upstream asked for its
 * tools/list). Owns these commands' flags, output and exit codes (0 ok / PASS, 1 failed, refused or
 * FAIL, 2 usage, 3 unreachable); key parsing, grant minting and the MCP client are the src/ and
 * bin/governance-cli.mjs modules', and starting a gateway or the static checks come from
 * bin/portcullis.mjs as arguments (this file never imports it: its top-level await would deadlock).
 * Must never: print a private key on stdout without `--stdout`, write one to a file anyone else
 * can read, overwrite a file, print or log a token, send a token anywhere but the gateway named
 * by --url, leave a process it started running, or listen beyond 127.0.0.1.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseOptions, UsageError } from "./cli-args.mjs";
import { adminRefusal, answerOf, exitCodeOf, FetchError, gatewayOf, Refused, send, TOKEN_NOTE, tokenOf } from "./gateway-http.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const src = (path) => import(pathToFileURL(resolve(root, "src", path)).href);

const MODERN_VERSION = "2026-07-28";
const DEFAULT_SECRET = "PORTCULLIS_SIGNING_KEY";

export const HELP = {
  "token revoke": `usage: portcullis token revoke JTI --url GATEWAY [--exp SECONDS] [--json]
  revokes the grant whose jti is JTI on the gateway at GATEWAY (POST /v1/grants/JTI/revoke): refused
  on its next request everywhere, and a grant.revoked record on the revoker's team chain.
  --exp SECONDS  the grant's exp (seconds since the epoch), if known: the revocation is kept at least
                 until then, and never shorter than the gateway's maximum token lifetime
  --json         print the gateway's answer {revoked, until, warning?}
  Needs an admin token. ${TOKEN_NOTE}
exit: 0 revoked, 1 refused by the gateway, 2 usage, 3 the gateway could not be reached`,
  keys: `usage: portcullis keys <command> [options]
  generate   a new Ed25519 signing key, written to a file of mode 0600
  rotate     a key set: a new key signs, the old ones keep verifying
Each command takes --help.`,
  "keys generate": `usage: portcullis keys generate [--out FILE] [--kid KID] [--secret NAME] [--stdout] [--json]
  Generates an Ed25519 signing key (a private JWK, the format auth.signing_key_secret holds) and writes
  it to FILE (default ./portcullis-signing-key.json) with mode 0600; an existing FILE is never
  overwritten. Prints the public JWKS (what GATEWAY/.well-known/jwks.json will serve) and the line
  that makes it the gateway's key: npx wrangler secret put NAME < FILE.
  --kid KID      the key id (1-128 of [A-Za-z0-9._:-]; default: its RFC 7638 thumbprint)
  --secret NAME  the Worker secret the config's auth.signing_key_secret names (default ${DEFAULT_SECRET})
  --stdout       print the private key on stdout instead of writing a file (the JWKS and the hint go
                 to stderr); only into a pipe you trust
  --json         print {kid, file, jwks, secret_command} instead of text
exit: 0 written, 1 the file exists or cannot be written, 2 usage`,
  "keys rotate": `usage: portcullis keys rotate --key FILE [--out FILE] [--kid KID] [--secret NAME] [--stdout] [--json]
  Reads the current signing-key secret from FILE (a private JWK, or a key set {keys, active}) and
  writes a key set {keys, active} to FILE.rotated.json (or --out; never overwritten, mode 0600): a new
  key is active and signs new grants and checkpoints; every key of the old secret stays in keys as
  a public key only (verify-only), so grants and ledger checkpoints it signed keep verifying. Upload
  it with npx wrangler secret put NAME < OUT. Retire an old kid by removing it from keys — not before
  its grants have expired (auth.max_token_lifetime) and, since ledger verify checks checkpoint
  signatures against the published JWKS, not while you still verify exports it signed.
  --kid KID, --secret NAME, --stdout, --json  as for keys generate
exit: 0 written, 1 FILE is not a usable key, or the output exists or cannot be written, 2 usage`,
  check: `usage: portcullis check --config FILE [--json]
       portcullis check --self-probe [--timeout 180s] [--verbose] [--json]
  --config FILE   validate a config and report every problem (exit 0 ok, 1 invalid); with --json,
                  print {ok, config, problems}
  --self-probe    prove that this build fails closed: starts a recording upstream and a local gateway
                  (wrangler dev on a free 127.0.0.1 port, a fresh signing key, its state in a temporary
                  directory) and sends a real tools/call as a grant whose team is not a valid ledger
                  chain name, so the gateway cannot write the call's decision to the ledger before
                  forwarding it (the write-ahead). PASS when that call is refused by the ledger step and
                  the upstream saw no tools/call, and a control call with a writable ledger then reaches
                  the upstream (so the refusal was the ledger's, not a broken setup).
  --timeout       how long the gateway may take to start (default 180s)
  --verbose       show the gateway's own output
  --json          print the report as JSON
exit: 0 PASS, 1 FAIL (or an invalid config), 2 usage, 3 the probe could not be run (the gateway did not start)`,
  doctor: `usage: portcullis doctor --config FILE [--local|--deployed] [--live [--timeout 5s]] [--json]
       portcullis doctor --clients ...  (portcullis doctor --clients --help)
  Checks the config statically (schema, mappings, policy, each upstream's egress: every problem at
  once). --live also contacts each upstream from this machine as an MCP client (server/discover,
  else initialize, then tools/list; the config's headers with \${NAME} from this environment; no
  redirect followed) and reports whether it answered. An upstream the egress rules refuse is not
  contacted. An upstream with per-principal credentials that refuses this command's missing
  credential (401/403) counts as reachable. With every upstream's tool list in hand, --live also
  checks the policy against them: a rule (or history query) that matches no real tool is named,
  with the nearest real names; in enforce a deny or require_approval rule, or one with
  obligations, that matches nothing is a problem (exit 1), otherwise a warning.
  --local / --deployed  where the gateway will run (default: local unless auth.required is true)
  --timeout             per upstream, with --live (default 5s)
  --json                print {ok, config, where, problems} (and upstreams, warnings, unmatched_rules, with --live)
exit: 0 sound (and every upstream reachable), 1 a problem or an unreachable upstream, 2 usage`,
};

const help = (cmd) => {
  console.log(HELP[cmd]);
  return 0;
};

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** `--timeout`: 500ms, 15s, 2m; between `min` and `max` ms. */
function durationArg(v, fallback, name = "--timeout", { min = 100, max = 600_000 } = {}) {
  if (v === undefined) return fallback;
  const m = /^(\d+)(ms|s|m)?$/.exec(String(v));
  const ms = m ? Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] ?? "s"] : Number.NaN;
  if (!(ms >= min && ms <= max)) throw new UsageError(`${name}: use 500ms, 15s or 2m (between ${min} ms and ${max / 1000} s), not ${v}`);
  return ms;
}

// ---- token revoke ------------------------------------------------------------------------------

const JTI = /^[A-Za-z0-9_-]{8,128}$/;

async function tokenRevoke(a) {
  if (a.help) return help("token revoke");
  const jti = a._[0];
  if (a._.length !== 1 || typeof jti !== "string") throw new UsageError("give one grant id: portcullis token revoke JTI --url GATEWAY");
  if (!JTI.test(jti))
    throw new UsageError(
      "JTI must be the grant's jti (8-128 characters of [A-Za-z0-9_-]), as token mint --url prints it or the ledger's grant.minted record names it",
    );
  let exp;
  if (a.exp !== undefined) {
    if (!/^\d{1,12}$/.test(a.exp))
      throw new UsageError(`--exp: the grant's exp in seconds since the epoch (e.g. ${Math.floor(Date.now() / 1000) + 3600}), not ${a.exp}`);
    exp = Number(a.exp);
  }
  const base = gatewayOf(a.url);
  const { res, where } = await send(base, "POST", `/v1/grants/${encodeURIComponent(jti)}/revoke`, tokenOf(a), {
    body: exp === undefined ? {} : { exp },
    timeoutMs: 30_000,
  });
  const answer = await answerOf(res);
  if (!res.ok) throw adminRefusal(where, res.status, answer, "revoking");
  const j = answer.json;
  if (!j || j.revoked !== jti || typeof j.until !== "number") throw new FetchError(`${where}: the answer is not a revocation`);
  if (a.json) console.log(JSON.stringify(j, null, 2));
  else console.log(`revoked ${jti}: refused on its next request; the revocation is kept until ${new Date(j.until * 1000).toISOString()}`);
  if (typeof j.warning === "string") console.error(`portcullis token revoke: warning: ${j.warning}`);
  return 0;
}

// ---- keys generate | rotate --------------------------------------------------------------------

/** Writes `text` to a new file of mode 0600; a UsageError-free failure (exit 1) when it exists or cannot be written. */
function writePrivate(file, text) {
  try {
    writeFileSync(file, text, { mode: 0o600, flag: "wx" });
  } catch (e) {
    if (e.code === "EEXIST") throw new Refused(`${file} exists: it is never overwritten (choose another --out, or move it away first)`);
    throw new Refused(`cannot write ${file} (${e.code ?? e.message})`);
  }
  chmodSync(file, 0o600); // whatever the umask did
}

function secretArg(v) {
  if (v === undefined) return DEFAULT_SECRET;
  if (!/^[A-Z_][A-Z0-9_]*$/.test(v)) throw new UsageError("--secret: the secret's name, as auth.signing_key_secret has it ([A-Z_][A-Z0-9_]*)");
  return v;
}

async function newKey(kid) {
  const { generateSigningKey, KID_PATTERN } = await src("identity/tokens.ts");
  if (kid !== undefined && !KID_PATTERN.test(kid)) throw new UsageError("--kid: 1-128 characters of [A-Za-z0-9._:-]");
  return generateSigningKey(kid);
}

/** Writes (or, with --stdout, prints) the secret and says what to do with it. */
function deliver(a, { secretText, kid, jwks, out, secret, verb, extra = {}, lines = [] }) {
  if (a.stdout && a.out !== undefined) throw new UsageError("--stdout prints the key instead of writing it: drop --out");
  const file = a.stdout ? null : out;
  if (file) writePrivate(file, `${secretText}\n`);
  const command = `npx wrangler secret put ${secret} < ${file ?? "FILE"}`;
  if (a.json) {
    const report = JSON.stringify({ kid, file, jwks, secret_command: command, ...extra, ...(a.stdout ? { secret: JSON.parse(secretText) } : {}) }, null, 2);
    console.log(report);
    return 0;
  }
  const info = a.stdout ? (s) => console.error(s) : (s) => console.log(s);
  if (a.stdout) console.log(secretText);
  else info(`${verb} ${file} (mode 0600; kid ${kid} signs). Keep it out of git and out of shared directories.`);
  for (const line of lines) info(line);
  info(`public JWKS (what GATEWAY/.well-known/jwks.json will serve):\n${JSON.stringify(jwks, null, 2)}`);
  info(`make it the gateway's signing key (the secret auth.signing_key_secret names):\n  ${command}`);
  if (file) info(`then keep ${file} in your secrets manager, or delete it.`);
  return 0;
}

async function keysGenerate(a) {
  if (a.help) return help("keys generate");
  const secret = secretArg(a.secret);
  const { privateJwk, publicJwk } = await newKey(a.kid);
  const out = typeof a.out === "string" ? a.out : "portcullis-signing-key.json";
  return deliver(a, {
    secretText: JSON.stringify(privateJwk),
    kid: privateJwk.kid,
    jwks: { keys: [publicJwk] },
    out,
    secret,
    verb: "wrote the signing key to",
  });
}

/** The public half of a JWK as keys.ts keeps it (no `d`). */
const publicOf = (k) => ({ kty: k.kty, crv: k.crv, x: k.x, kid: k.kid, alg: "EdDSA", use: "sig" });

/**
 * The rotated secret: `{ keys: [new private JWK, every old key public only], active: new kid }`,
 * as src/identity/keys.ts parseKeySet reads it. `oldText` is the current secret (a private JWK or
 * a key set); a Refused error when it is not one parseKeySet accepts, or a kid would repeat.
 */
export async function rotatedKeySet(oldText, newPrivateJwk) {
  const { parseKeySet } = await src("identity/tokens.ts");
  try {
    await parseKeySet(oldText);
  } catch (e) {
    throw new Refused(`the current key is not a usable signing-key secret: ${e.message}`);
  }
  const old = JSON.parse(oldText);
  const oldKeys = Array.isArray(old.keys) ? old.keys : [old];
  if (oldKeys.some((k) => k.kid === newPrivateJwk.kid)) throw new UsageError(`--kid ${newPrivateJwk.kid} is already in the key set: choose another`);
  const set = { keys: [newPrivateJwk, ...oldKeys.map(publicOf)], active: newPrivateJwk.kid };
  const parsed = await parseKeySet(JSON.stringify(set)); // what the gateway will make of it
  if (parsed.active?.kid !== newPrivateJwk.kid) throw new Error("the rotated key set does not sign with the new key");
  return { set, retired: oldKeys.map((k) => k.kid) };
}

async function keysRotate(a) {
  if (a.help) return help("keys rotate");
  if (typeof a.key !== "string") throw new UsageError("give --key FILE: the current signing-key secret (a private JWK or a key set)");
  const secret = secretArg(a.secret);
  let oldText;
  try {
    oldText = readFileSync(a.key, "utf8");
  } catch (e) {
    throw new UsageError(`--key: cannot read ${a.key} (${e.code ?? e.message})`);
  }
  const { privateJwk } = await newKey(a.kid);
  const { set, retired } = await rotatedKeySet(oldText, privateJwk);
  const out = typeof a.out === "string" ? a.out : join(dirname(a.key), `${basename(a.key).replace(/\.json$/, "")}.rotated.json`);
  const jwks = { keys: set.keys.map(publicOf) };
  return deliver(a, {
    secretText: JSON.stringify(set),
    kid: privateJwk.kid,
    jwks,
    out,
    secret,
    verb: "wrote the rotated key set to",
    extra: { verify_only: retired },
    lines: [`verify-only now (their grants and checkpoints keep verifying): ${retired.join(", ")}`],
  });
}

// ---- check --self-probe ------------------------------------------------------------------------

/** The team of the probe's grant: not a ledger chain name (durable-objects/object-names.ts CHAIN_NAME), so its chain cannot be written. */
export const UNWRITABLE_TEAM = "self-probe/no-ledger";
const CONTROL_TEAM = "self-probe";
const PROBE_TOOL = "probe_record";

/**
 * A 2026-07-28 upstream on 127.0.0.1 (a free port) with one tool, `probe_record`; it counts
 * every request by method, so the probe can show what reached it. `close()` stops it.
 */
export async function startRecordingUpstream() {
  const seen = {};
  const reply = (res, id, result) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", id, result: { resultType: "complete", ...result } }));
  };
  const server = createServer((req, res) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size <= 1 << 20) chunks.push(c);
    });
    req.on("end", () => {
      let msg;
      try {
        msg = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        return void res.writeHead(400).end();
      }
      const method = typeof msg?.method === "string" ? msg.method : "(none)";
      seen[method] = (seen[method] ?? 0) + 1;
      if (msg.params?._meta?.["io.modelcontextprotocol/protocolVersion"] !== MODERN_VERSION) {
        res.writeHead(400, { "content-type": "application/json" });
        return void res.end(
          JSON.stringify({
            jsonrpc: "2.0",
            id: msg.id ?? null,
            error: { code: -32022, message: "this server speaks only 2026-07-28", data: { supported: [MODERN_VERSION] } },
          }),
        );
      }
      if (!("id" in msg)) return void res.writeHead(202).end();
      if (method === "server/discover")
        return reply(res, msg.id, {
          supportedVersions: [MODERN_VERSION],
          capabilities: { tools: {} },
          _meta: { "io.modelcontextprotocol/serverInfo": { name: "portcullis-self-probe", version: "1" } },
        });
      if (method === "tools/list")
        return reply(res, msg.id, {
          tools: [
            {
              name: PROBE_TOOL,
              description: "Records that it was called (the self-probe's upstream)",
              inputSchema: { type: "object", additionalProperties: false },
            },
          ],
          ttlMs: 0,
          cacheScope: "public",
        });
      if (method === "tools/call" && msg.params?.name === PROBE_TOOL) return reply(res, msg.id, { content: [{ type: "text", text: "recorded" }] });
      res.writeHead(404, { "content-type": "application/json" });
      res.end(JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } }));
    });
  });
  await new Promise((ok, fail) => {
    server.once("error", fail);
    server.listen(0, "127.0.0.1", ok);
  });
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    count: (method) => seen[method] ?? 0,
    close: () =>
      new Promise((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  };
}

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** The probe gateway's config: the recording upstream, its one tool mapped (so enforce lets it through to the write-ahead). */
const probeConfig = (upstreamUrl) => `# portcullis check --self-probe
actor: local:self-probe
mode: enforce
egress:
  allow_loopback: true
upstreams:
  - name: probe
    url: ${upstreamUrl}
    timeout: 10s
mappings:
  probe:
    tools:
      ${PROBE_TOOL}: { effect: idempotent, verb: record }
`;

/** One 2026-07-28 tools/call to the gateway's /mcp as `bearer`; the JSON-RPC answer (from JSON or SSE). */
async function callTool(origin, bearer, name, timeoutMs = 60_000) {
  const res = await fetch(`${origin}/mcp`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${bearer}`,
      "mcp-protocol-version": MODERN_VERSION,
      "mcp-method": "tools/call",
      "mcp-name": name,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name, arguments: {}, _meta: { "io.modelcontextprotocol/protocolVersion": MODERN_VERSION, "io.modelcontextprotocol/clientCapabilities": {} } },
    }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = await res.text();
  const messages = (res.headers.get("content-type") ?? "").includes("text/event-stream")
    ? body
        .split("\n")
        .filter((l) => l.startsWith("data:"))
        .map((l) => l.slice(5).trim())
        .filter(Boolean)
        .map((l) => {
          try {
            return JSON.parse(l);
          } catch {
            return null;
          }
        })
    : [
        (() => {
          try {
            return JSON.parse(body);
          } catch {
            return null;
          }
        })(),
      ];
  return { status: res.status, answer: messages.find((m) => m && m.id === 1) ?? null, body: body.slice(0, 500) };
}

const textOf = (answer) =>
  Array.isArray(answer?.result?.content)
    ? answer.result.content
        .filter((c) => c?.type === "text")
        .map((c) => c.text)
        .join("\n")
    : (answer?.error?.message ?? "");

/** Stops the gateway's whole process group (it was started detached): SIGTERM, then SIGKILL after a bound. */
async function stopGroup(child) {
  if (child.pid === undefined) return;
  const alive = () => {
    try {
      process.kill(-child.pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const signal = (s) => {
    try {
      process.kill(-child.pid, s);
    } catch {
      /* gone */
    }
  };
  signal("SIGTERM");
  for (let i = 0; i < 80 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
  if (alive()) {
    signal("SIGKILL");
    for (let i = 0; i < 30 && alive(); i++) await new Promise((r) => setTimeout(r, 100));
  }
}

async function waitHealthy(origin, timeoutMs, child, progress) {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  let told = Date.now();
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) return `the gateway exited while starting (code ${child.exitCode}, signal ${child.signalCode})`;
    try {
      const r = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(2000) });
      await r.body?.cancel();
      if (r.ok) return null;
      last = `HTTP ${r.status}`;
    } catch (e) {
      last = e.cause?.code ?? e.message;
    }
    if (Date.now() - told >= 10_000) {
      told = Date.now();
      progress(`still waiting for ${origin}/healthz (${last})`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  return `the gateway did not answer ${origin}/healthz within ${timeoutMs / 1000} s (${last})`;
}

/**
 * Runs the self-probe. `startGateway` is bin/portcullis.mjs's. Resolves to `{ code, report }`:
 * code 0 PASS, 1 FAIL, 3 the probe could not run.
 */
export async function selfProbe({ startGateway, timeoutMs = 180_000, verbose = false, progress = (s) => console.error(`portcullis check: ${s}`) }) {
  const report = {
    ok: false,
    verdict: "FAIL",
    method: `a grant whose team (${JSON.stringify(UNWRITABLE_TEAM)}) is not a valid ledger chain name: the gateway cannot append the call's decision to that team's chain before forwarding it (src/ports/ledger-writer.ts)`,
    gateway: null,
    upstream: null,
    probe: null,
    control: null,
    reason: "",
  };
  const cleanups = [];
  const cleanup = async () => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  };
  const onSignal = () => {
    void cleanup().then(() => process.exit(130));
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    const upstream = await startRecordingUpstream();
    cleanups.push(() => upstream.close());
    report.upstream = upstream.url;
    progress(`recording upstream on ${upstream.url}`);

    const { generateSigningKey, parseKeySet, mintGrant } = await src("identity/tokens.ts");
    const { privateJwk } = await generateSigningKey(`self-probe-${Date.now().toString(36)}`);
    const port = await freePort();
    const origin = `http://127.0.0.1:${port}`;
    report.gateway = origin;
    const persistTo = mkdtempSync(join(tmpdir(), "portcullis-self-probe-"));
    cleanups.push(async () => rmSync(persistTo, { recursive: true, force: true }));
    progress(`starting a gateway on ${origin} (wrangler dev; its state in ${persistTo}, removed afterwards)`);
    let logs = "";
    const child = startGateway({
      configText: probeConfig(upstream.url),
      port,
      persistTo,
      signingKey: JSON.stringify(privateJwk),
      stdio: ["ignore", verbose ? "inherit" : "pipe", verbose ? "inherit" : "pipe"],
      detached: true,
    });
    cleanups.push(() => stopGroup(child));
    for (const s of [child.stdout, child.stderr]) s?.on("data", (d) => (logs = (logs + d.toString()).slice(-20_000)));
    const started = Date.now();
    const notUp = await waitHealthy(origin, timeoutMs, child, progress);
    if (notUp) {
      report.reason = notUp;
      if (!verbose && logs) console.error(`--- the gateway's output (last lines) ---\n${logs.split("\n").slice(-30).join("\n")}`);
      return { code: 3, report };
    }
    progress(`gateway up after ${((Date.now() - started) / 1000).toFixed(1)} s`);

    const keys = await parseKeySet(JSON.stringify(privateJwk));
    const grant = (team) =>
      mintGrant(
        keys,
        { iss: origin, aud: origin, sub: "agent:self-probe", team, roles: ["agent"], tools: ["*"], ttlSeconds: 600 },
        { maxLifetimeSeconds: 3600 },
      );

    progress(`tools/call ${PROBE_TOOL} as team ${JSON.stringify(UNWRITABLE_TEAM)} (a ledger chain that cannot be written)`);
    const probe = await callTool(origin, (await grant(UNWRITABLE_TEAM)).token, PROBE_TOOL);
    const reachedDuringProbe = upstream.count("tools/call");
    const probeText = textOf(probe.answer);
    const refusedByLedger = probe.answer?.result?.isError === true && /\bcheck: ledger\b/.test(probeText);
    report.probe = { status: probe.status, refused_by_ledger: refusedByLedger, answer: probeText || probe.body, upstream_tools_calls: reachedDuringProbe };
    progress(`probe answered: ${probeText || `HTTP ${probe.status}`}`);

    progress(`control: tools/call ${PROBE_TOOL} as team ${JSON.stringify(CONTROL_TEAM)} (a writable ledger chain)`);
    const control = await callTool(origin, (await grant(CONTROL_TEAM)).token, PROBE_TOOL);
    const reachedAfterControl = upstream.count("tools/call");
    const controlText = textOf(control.answer);
    const controlRan = control.answer?.result?.isError !== true && controlText === "recorded" && reachedAfterControl === reachedDuringProbe + 1;
    report.control = { status: control.status, reached_upstream: controlRan, answer: controlText || control.body, upstream_tools_calls: reachedAfterControl };

    const problems = [];
    if (!refusedByLedger) problems.push(`the probe call was not refused by the ledger step (answer: ${(probeText || probe.body).slice(0, 300)})`);
    if (reachedDuringProbe !== 0)
      problems.push(`the upstream received ${plural(reachedDuringProbe, "tools/call request")} while the ledger could not be written`);
    if (!controlRan)
      problems.push(
        `the control call with a writable ledger did not reach the upstream (answer: ${(controlText || control.body).slice(0, 300)}), so the probe proves nothing`,
      );
    report.ok = problems.length === 0;
    report.verdict = report.ok ? "PASS" : "FAIL";
    report.reason = report.ok
      ? "the call was refused before it reached the upstream because its decision could not be written to the ledger; with a writable ledger the same call ran"
      : problems.join("; ");
    return { code: report.ok ? 0 : 1, report };
  } finally {
    progress("stopping the probe's gateway and upstream");
    await cleanup();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

async function checkCommand(a, deps) {
  if (a.help) return help("check");
  if (!a["self-probe"]) throw new UsageError("give --self-probe (or --config FILE to validate a config)");
  if (a.config !== undefined) throw new UsageError("--self-probe runs its own config: drop --config (check --config FILE validates a config)");
  const { code, report } = await selfProbe({
    startGateway: deps.startGateway,
    timeoutMs: durationArg(a.timeout, 180_000, "--timeout", { min: 5000, max: 1_800_000 }),
    verbose: Boolean(a.verbose),
  });
  if (a.json) console.log(JSON.stringify(report, null, 2));
  else {
    console.log(`portcullis check --self-probe: ${code === 3 ? "NOT RUN" : report.verdict}`);
    console.log(`  how:     ${report.method}`);
    if (report.probe)
      console.log(
        `  probe:   ${report.probe.refused_by_ledger ? "refused by the ledger step" : "NOT refused by the ledger step"}; the upstream saw ${plural(report.probe.upstream_tools_calls, "tools/call request")}\n           "${report.probe.answer}"`,
      );
    if (report.control)
      console.log(`  control: ${report.control.reached_upstream ? "reached the upstream" : "did NOT reach the upstream"} ("${report.control.answer}")`);
    console.log(`  ${code === 0 ? "why" : "reason"}:  ${report.reason}`);
    if (code === 3) console.log("  the gateway did not start: run with --verbose to see its output, or try `portcullis dev --config portcullis.yaml`");
  }
  return code;
}

// ---- doctor --live -----------------------------------------------------------------------------

/**
 * Each upstream of `cfg` asked for its tools/list (at once, each bounded by `timeoutMs`): `{ name,
 * url, reachable, tools?, era?, note?, error? }`. Upstreams the egress rules refuse are not contacted.
 */
export async function upstreamReachability(cfg, { timeoutMs, onLoopback }) {
  const [{ listUpstreamTools, printableUrl }, { checkEgress }] = await Promise.all([import("./governance-cli.mjs"), src("egress/rules.ts")]);
  return Promise.all(
    cfg.upstreams.map(async (up) => {
      const base = { name: up.name, url: printableUrl(up.url) };
      const egress = checkEgress(up.url, cfg.egress, { gatewayOnLoopback: onLoopback });
      if (!egress.ok) return { ...base, reachable: false, contacted: false, error: `not contacted: the egress rules refuse it (${egress.reason})` };
      const started = Date.now();
      try {
        const r = await listUpstreamTools(up, { timeoutMs });
        return {
          ...base,
          reachable: true,
          contacted: true,
          era: r.era,
          protocol_version: r.protocolVersion,
          tools: r.tools.length,
          tool_names: r.tools.map((t) => t.name),
          ms: Date.now() - started,
        };
      } catch (e) {
        const error = e?.message ?? String(e);
        // It answered, but wants the credential each principal brings: reachable.
        if (up.credentials?.mode === "per_principal" && /^refused the credentials/.test(error))
          return { ...base, reachable: true, contacted: true, note: `${error}`, ms: Date.now() - started };
        return { ...base, reachable: false, contacted: true, error, ms: Date.now() - started };
      }
    }),
  );
}

/**
 * The policy against the upstreams' real tool lists (`upstreams` from upstreamReachability):
 * `{ checked, reason?, unmatched: [{…, line}] }`. Checked only when every upstream listed its
 * tools — a rule naming an unreachable upstream's tool cannot be told dead.
 */
export async function policyCoverage(cfg, upstreams) {
  const missing = upstreams.filter((u) => !Array.isArray(u.tool_names));
  if (missing.length) return { checked: false, reason: `not checked: ${missing.map((u) => u.name).join(", ")} listed no tools`, unmatched: [] };
  const [{ compiledPolicy }, { unmatchedRules, describeUnmatched }, { knownTools }] = await Promise.all([
    src("governance/engine.ts"),
    src("governance/policy-coverage.ts"),
    src("protocol/exposed-names.ts"),
  ]);
  // As the gateway judges them (src/services/policy-live.ts): the names each upstream listed, as the config exposes them.
  const known = knownTools(
    cfg.upstreams,
    cfg.upstreams.map((up) => [up, upstreams.find((u) => u.name === up.name)?.tool_names ?? []]),
  );
  return { checked: true, unmatched: coverageOver(cfg, known, { compiledPolicy, unmatchedRules, describeUnmatched }) };
}

function coverageOver(cfg, known, { compiledPolicy, unmatchedRules, describeUnmatched }) {
  return unmatchedRules(compiledPolicy(cfg), known, cfg.policy).map((u) => ({ ...u, line: describeUnmatched(u, known.length) }));
}

/**
 * The policy against the tools the mappings name (offline, for `check`): the unmatched rules, each
 * with its report line ("… which matches no tool of the N the mappings name"). Only upstreams
 * with a mapping count: a rule on an unmapped upstream's tool cannot be told dead offline.
 */
export async function mappedCoverage(cfg) {
  const [{ compiledPolicy }, { unmatchedRules, describeUnmatched }, { exposeName }] = await Promise.all([
    src("governance/engine.ts"),
    src("governance/policy-coverage.ts"),
    src("protocol/exposed-names.ts"),
  ]);
  const mapped = cfg.upstreams.filter((up) => cfg.mappings?.[up.name]);
  if (mapped.length === 0) return [];
  const known = mapped.flatMap((up) => Object.keys(cfg.mappings[up.name]).map((tool) => ({ upstream: up.name, tool, exposed: exposeName(up, tool) })));
  // Rules about upstreams without a mapping are not judged here.
  const judged = { ...cfg, policy: cfg.policy, upstreams: mapped };
  return coverageOver(judged, known, {
    compiledPolicy,
    unmatchedRules,
    describeUnmatched: (u, n) => describeUnmatched(u, n).replace(/ known( —|$)/, " the mappings name$1"),
  }).filter((u) => !u.names.some((n) => cfg.upstreams.some((up) => !mapped.includes(up) && `upstream ${up.name}` === n)));
}

/**
 * The policy of config FILE against its upstreams' real tool lists, contacted from this machine
 * (as `doctor --live` does): `{ checked, reason?, mode?, unmatched, blocking }`, where `blocking`
 * are the unmatched rules that refuse the config in enforce. Never throws for a config that does
 * not load here or an upstream that does not answer: the check is then skipped, with the reason.
 */
export async function liveCoverageOf(file, { timeoutMs = 5000, onLoopback = true } = {}) {
  let cfg;
  try {
    const { loadGatewayConfig } = await import("./governance-cli.mjs");
    cfg = (await loadGatewayConfig(file)).cfg;
  } catch {
    return { checked: false, reason: "not checked: the config does not load with this environment", unmatched: [], blocking: [] };
  }
  const upstreams = await upstreamReachability(cfg, { timeoutMs, onLoopback });
  const down = upstreams.filter((u) => !u.reachable);
  if (down.length)
    return { checked: false, reason: `not checked: ${down.map((u) => u.name).join(", ")} did not list its tools from here`, unmatched: [], blocking: [] };
  const coverage = await policyCoverage(cfg, upstreams);
  return { ...coverage, mode: cfg.mode, blocking: cfg.mode === "enforce" ? coverage.unmatched.filter((u) => u.blocking) : [] };
}

async function doctorCommand(a, deps) {
  if (a.help) return help("doctor");
  if (typeof a.config !== "string") throw new UsageError("give --config FILE");
  if (!a.live) throw new UsageError("this form is doctor --config FILE --live (without --live, portcullis doctor --config FILE)");
  if (a.local && a.deployed) throw new UsageError("--local and --deployed: give one");
  const timeoutMs = durationArg(a.timeout, 5000);
  let text;
  try {
    text = readFileSync(a.config, "utf8");
  } catch (e) {
    throw new UsageError(`--config: cannot read ${a.config} (${e.code ?? e.message})`);
  }
  const local = a.local ? true : a.deployed ? false : !/^\s*required:\s*true\b/m.test(text);
  const where = local ? "served on loopback" : "deployed";
  const v = await deps.validate(a.config, { onLoopback: local, secrets: "static" });
  const problems = v.ok ? [] : [...v.problems];
  // The live check sends the config's headers: ${NAME} from this environment, as classify does.
  let upstreams = [];
  let cfg;
  try {
    const { loadGatewayConfig } = await import("./governance-cli.mjs");
    cfg = (await loadGatewayConfig(a.config)).cfg;
  } catch (e) {
    if (e instanceof UsageError) throw e;
    const lines = String(e.message)
      .split("\n")
      .slice(1)
      .map((l) => l.replace(/^\s*-\s*/, ""));
    if (v.ok) problems.push(...lines.map((l) => `with this environment: ${l}`));
    problems.push("upstreams not contacted: the config does not load with this environment (set the variables it names, then run again)");
  }
  if (cfg) {
    if (!a.json) console.error(`portcullis doctor: contacting ${plural(cfg.upstreams.length, "upstream")} (at most ${timeoutMs / 1000} s each)`);
    upstreams = await upstreamReachability(cfg, { timeoutMs, onLoopback: local });
  }
  const unreachable = upstreams.filter((u) => !u.reachable);
  // Rules that name no real tool: in enforce a deny, require_approval or obligation that matches nothing refuses the config; otherwise reported.
  const coverage = cfg && unreachable.length === 0 ? await policyCoverage(cfg, upstreams) : { checked: false, unmatched: [] };
  const enforce = cfg?.mode === "enforce";
  const dead = coverage.unmatched.filter((u) => enforce && u.blocking);
  const notes = coverage.unmatched.filter((u) => !(enforce && u.blocking));
  for (const u of dead) problems.push(`${u.line} (in enforce the gateway would allow what this rule means to stop: fix its match)`);
  const ok = problems.length === 0 && unreachable.length === 0;
  if (a.json) {
    const all = [...problems, ...unreachable.filter((u) => u.contacted).map((u) => `upstream ${u.name} unreachable: ${u.error}`)];
    const shown = upstreams.map(({ tool_names: _names, ...u }) => u);
    console.log(
      JSON.stringify(
        { ok, config: a.config, where, problems: all, warnings: notes.map((u) => u.line), unmatched_rules: coverage.unmatched, upstreams: shown },
        null,
        2,
      ),
    );
    return ok ? 0 : 1;
  }
  const n = v.ok ? v.cfg.upstreams.length : cfg?.upstreams.length;
  console.log(`${a.config}: ${problems.length === 0 ? "sound" : "refused"} (${where}${n !== undefined ? `; ${plural(n, "upstream")}` : ""})`);
  for (const p of problems) console.log(`  - ${p}`);
  for (const u of notes) console.log(`  warning: ${u.line}`);
  if (upstreams.length) console.log("upstreams:");
  for (const u of upstreams) {
    if (u.reachable && u.note) console.log(`  REACHABLE   ${u.name} (${u.url}): ${u.note}`);
    else if (u.reachable) console.log(`  REACHABLE   ${u.name} (${u.url}, ${u.era} ${u.protocol_version}): ${plural(u.tools, "tool")} listed in ${u.ms} ms`);
    else console.log(`  UNREACHABLE ${u.name} (${u.url}): ${u.error}`);
  }
  if (unreachable.length)
    console.log(
      `${plural(unreachable.length, "upstream")} unreachable: start ${unreachable.length === 1 ? "it" : "them"}, or fix the url and headers in ${a.config}`,
    );
  return ok ? 0 : 1;
}

// ---- dispatch ----------------------------------------------------------------------------------

const BOOLEAN = new Set(["json", "help", "stdout", "self-probe", "verbose", "live", "local", "deployed"]);
export const KNOWN = {
  "token revoke": ["url", "token", "exp", "json", "help"],
  "keys generate": ["out", "kid", "secret", "stdout", "json", "help"],
  "keys rotate": ["key", "out", "kid", "secret", "stdout", "json", "help"],
  check: ["self-probe", "timeout", "verbose", "json", "help", "config"],
  doctor: ["config", "live", "local", "deployed", "timeout", "json", "help"],
};
const RUN = { "token revoke": tokenRevoke, "keys generate": keysGenerate, "keys rotate": keysRotate, check: checkCommand, doctor: doctorCommand };
const POSITIONALS = new Set(["token revoke"]);

/**
 * Runs one operator command: `cmd` is "token revoke", "keys", "check" or "doctor"; `argv` the
 * arguments after it (for "keys", the subcommand first). `deps`: `{ startGateway }` for check,
 * `{ validate }` for doctor (bin/portcullis.mjs's). The exit code.
 */
export async function operatorCommand(cmd, argv, deps = {}) {
  let name = cmd;
  let rest = argv;
  if (cmd === "keys") {
    const [sub, ...more] = argv;
    if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") return help("keys");
    if (sub !== "generate" && sub !== "rotate") {
      console.error(`portcullis keys: unknown command ${sub}\n${HELP.keys}`);
      return 2;
    }
    name = `keys ${sub}`;
    rest = more;
  }
  const run = RUN[name];
  if (!run) {
    console.error(`portcullis: unknown operator command ${cmd}`);
    return 2;
  }
  return exitCodeOf(`portcullis ${name}`, () => run(parseOptions(rest, { known: KNOWN[name], boolean: BOOLEAN, positionals: POSITIONALS.has(name) }), deps));
}
