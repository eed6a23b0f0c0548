/**
 * The call-path measurement (run by scripts/call-path.mjs through vitest.call-path.config.ts, never by the unit suite:
 * its name does not match `*.test.ts`). Owns: driving the whole Worker (SELF, i.e. wrangler.toml's main) through one
 * governed tools/call per MCP era against a fake upstream served in-process (globalThis.fetch, as in
 * fuzz-front-records.test.ts), with a grant it signs itself, and reading istanbul's counters around that one call.
 * Per era: a warm-up call; a pause until every counter is still and the isolate's ≤ 1 s caches have expired; the
 * counters zeroed; ONE measured call; then what ran up to the answer ("answer"), what ran after it until the
 * counters were still again ("after", work handed to waitUntil), and a second call made at once after that with the
 * caches still fresh ("hot", the same counting). The Durable Object classes are the ones the main module exports; a
 * class counts when a counter its own class body increments ran. Prints one `CALL-PATH-JSON ` line per era: for each
 * source file with a function that ran, those functions (name, line in the compiled module, count), and the classes
 * with their methods that ran. Must never: import from src/ anything but its main module (src/index.ts), or from
 * durable-objects/ anything at all (it measures any layout of them), reach a real network, or count module loading as
 * a visit (only function counters are read; statement and branch counters are zeroed and ignored). */
import { env, SELF } from "cloudflare:test";
import { DurableObject } from "cloudflare:workers";
import { importJWK, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

const GW = "http://127.0.0.1";
const MODERN = "2026-07-28";
const LEGACY = "2025-11-25";
const TOOL = "echo";
const UPSTREAM_URL = "http://127.0.0.1:9/mcp";
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// ---- istanbul's counters ------------------------------------------------------------------

interface FnEntry {
  name: string;
  decl: { start: { line: number } };
}
interface FileCoverage {
  path: string;
  fnMap: Record<string, FnEntry>;
  s: Record<string, number>;
  f: Record<string, number>;
  b: Record<string, number[]>;
}
/** By file: the functions that ran (name, line in the compiled module, not the .ts source; how often). */
type Ran = Record<string, Array<[name: string, line: number, count: number]>>;

function store(): Record<string, FileCoverage> {
  const cov = (globalThis as Record<string, unknown>).__VITEST_COVERAGE__ ?? (globalThis as Record<string, unknown>).__coverage__;
  if (!cov || typeof cov !== "object")
    throw new Error("no istanbul counters in this isolate: run with vitest.call-path.config.ts (coverage provider istanbul)");
  return cov as Record<string, FileCoverage>;
}

/** Zeroes every counter in place (the instrumented modules keep references to these very objects). */
function reset(): void {
  for (const fc of Object.values(store())) {
    for (const k of Object.keys(fc.s)) fc.s[k] = 0;
    for (const k of Object.keys(fc.f)) fc.f[k] = 0;
    for (const arr of Object.values(fc.b)) arr.fill(0);
  }
}

/** `Class.method` names of Durable Object methods, by file and counter index (filled by doClasses). */
const methodNames = new Map<string, Map<number, string>>();

/** A copy of every function counter, to count from later (see `ran`). */
type Counts = Map<FileCoverage, Record<string, number>>;
function counts(): Counts {
  return new Map(Object.values(store()).map((fc) => [fc, { ...fc.f }]));
}
const ranSince = (fc: FileCoverage, k: string | number, since?: Counts) => (fc.f[k] ?? 0) - (since?.get(fc)?.[k] ?? 0);

/** Every function that ran since the last reset (or since `since`), by file, with how often. */
function ran(since?: Counts): Ran {
  const out: Ran = {};
  for (const fc of Object.values(store())) {
    const fns = Object.keys(fc.f)
      .filter((k) => ranSince(fc, k, since) > 0)
      .map(
        (k) =>
          [methodNames.get(fc.path)?.get(Number(k)) ?? fc.fnMap[k]?.name ?? `#${k}`, fc.fnMap[k]?.decl.start.line ?? 0, ranSince(fc, k, since)] as [
            string,
            number,
            number,
          ],
      );
    if (fns.length) out[fc.path] = fns;
  }
  return out;
}

// ---- the Durable Object classes -------------------------------------------------------------

/** One Durable Object class the Worker exports: the file it is declared in and the counters of the functions inside it. */
interface DoClass {
  name: string;
  file: FileCoverage;
  fns: number[];
  /** Counter index → `Class.method` for the prototype's own methods and accessors (istanbul names class methods anonymously). */
  methods: Map<number, string>;
}

/** istanbul's counter variable for a file (its genVar: "cov_" + the first 12 hex digits of sha1(path), in base 36). */
async function covVar(path: string): Promise<string> {
  const hex = [...new Uint8Array(await crypto.subtle.digest("SHA-1", new TextEncoder().encode(path)))].map((b) => b.toString(16).padStart(2, "0")).join("");
  return `cov_${Number.parseInt(hex.slice(0, 12), 16).toString(36)}`;
}

/**
 * The Durable Object classes the Worker's main module (src/index.ts, wrangler.toml's main) exports, each with the
 * function counters its own source text increments (the instrumented class body names them: `cov_…().f[N]++`).
 */
async function doClasses(): Promise<DoClass[]> {
  const main = (await import("../../src/index.ts")) as Record<string, unknown>;
  const byVar = new Map<string, FileCoverage>();
  for (const fc of Object.values(store())) byVar.set(await covVar(fc.path), fc);
  const out: DoClass[] = [];
  for (const [name, value] of Object.entries(main)) {
    if (typeof value !== "function" || !(value.prototype instanceof DurableObject)) continue;
    const text = Function.prototype.toString.call(value);
    const refs = [...text.matchAll(/\b(cov_[0-9a-z]+)\(\)\.f\[(\d+)\]\+\+/g)];
    const vars = new Set(refs.map((m) => m[1]!));
    if (vars.size !== 1) throw new Error(`${name}: expected the counters of one instrumented file in its source, found ${vars.size}`);
    const file = byVar.get([...vars][0]!);
    if (!file) throw new Error(`${name}: its counters belong to no file istanbul knows`);
    const methods = new Map<number, string>();
    for (const [key, d] of Object.entries(Object.getOwnPropertyDescriptors(value.prototype))) {
      for (const fn of [d.value, d.get, d.set]) {
        if (typeof fn !== "function" || key === "constructor") continue;
        // A function's own counter is the first one its body increments.
        const own = /\.f\[(\d+)\]\+\+/.exec(Function.prototype.toString.call(fn));
        if (own) methods.set(Number(own[1]), `${name}.${key}`);
      }
    }
    out.push({ name, file, fns: refs.map((m) => Number(m[2])), methods });
    methodNames.set(file.path, new Map([...(methodNames.get(file.path) ?? []), ...methods]));
  }
  if (out.length === 0) throw new Error("the main module exports no Durable Object class");
  return out;
}

/** The Durable Object classes whose own code ran since the last reset (or since `since`), with the functions that ran. */
function doRan(classes: DoClass[], since?: Counts): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const c of classes) {
    const fns = c.fns.filter((k) => ranSince(c.file, k, since) > 0).map((k) => c.methods.get(k) ?? c.file.fnMap[k]?.name ?? `#${k}`);
    if (fns.length) out[c.name] = fns;
  }
  return out;
}

/** The sum of every function counter: still when nothing runs. */
const total = () => Object.values(store()).reduce((a, fc) => a + Object.values(fc.f).reduce((x, y) => x + y, 0), 0);

/** Waits until no function has run for `quietMs` (bounded by `maxMs`); true when it got still. */
async function still(quietMs = 300, maxMs = 10_000): Promise<boolean> {
  const end = Date.now() + maxMs;
  let last = total();
  let since = Date.now();
  while (Date.now() < end) {
    await sleep(50);
    const now = total();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) return true;
  }
  return false;
}

// ---- the fake upstream (a 2025-11-25 server with one tool) --------------------------------

let toolCalls = 0;
async function fakeUpstream(input: RequestInfo | URL, init?: RequestInit): Promise<Response> {
  const url = String(input instanceof Request ? input.url : input);
  if (url.split("?")[0] !== UPSTREAM_URL) throw new TypeError(`fetch failed: ${url} is not the fake upstream`);
  const text = input instanceof Request ? await input.clone().text() : typeof init?.body === "string" ? init.body : "";
  const msg = JSON.parse(text) as { id?: unknown; method?: string; params?: { name?: unknown; arguments?: unknown } };
  const result = (r: unknown) => new Response(JSON.stringify({ jsonrpc: "2.0", id: msg.id, result: r }), { headers: { "content-type": "application/json" } });
  if (msg.id === undefined) return new Response(null, { status: 202 });
  if (msg.method === "server/discover")
    return new Response(JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "Method not found" } }), {
      headers: { "content-type": "application/json" },
    });
  if (msg.method === "initialize") return result({ protocolVersion: LEGACY, capabilities: { tools: {} }, serverInfo: { name: "fake", version: "1" } });
  if (msg.method === "tools/list")
    return result({ tools: [{ name: TOOL, inputSchema: { type: "object", properties: { text: { type: "string" } } }, annotations: { readOnlyHint: true } }] });
  if (msg.method === "tools/call") {
    toolCalls++;
    return result({ content: [{ type: "text", text: `echo: ${JSON.stringify(msg.params?.arguments)}` }] });
  }
  return result({});
}

// ---- the client -----------------------------------------------------------------------------

let token = "";
beforeAll(async () => {
  const jwk = JSON.parse(env.PORTCULLIS_SIGNING_KEY as string) as { kid: string };
  const key = await importJWK(jwk, "EdDSA");
  const now = Math.floor(Date.now() / 1000);
  token = await new SignJWT({ iss: GW, aud: GW, sub: "agent:measure", team: "measure", roles: ["agent"], tools: ["*"], jti: `measure-${now}` })
    .setProtectedHeader({ alg: "EdDSA", typ: "portcullis-grant+jwt", kid: jwk.kid })
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(now + 3600)
    .sign(key);
  vi.spyOn(globalThis, "fetch").mockImplementation(fakeUpstream);
});
afterAll(() => vi.restoreAllMocks());

const base = () => ({ "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` });
let nextId = 1;

async function modernCall(n: number): Promise<string> {
  const r = await SELF.fetch(`${GW}/mcp`, {
    method: "POST",
    headers: { ...base(), "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": TOOL },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: nextId++,
      method: "tools/call",
      params: {
        name: TOOL,
        arguments: { text: `call ${n}` },
        _meta: {
          "io.modelcontextprotocol/protocolVersion": MODERN,
          "io.modelcontextprotocol/clientInfo": { name: "call-path", version: "1" },
          "io.modelcontextprotocol/clientCapabilities": {},
        },
      },
    }),
  });
  const text = await r.text();
  expect(r.status, text).toBe(200);
  return text;
}

async function legacySession(): Promise<string> {
  const init = await SELF.fetch(`${GW}/mcp`, {
    method: "POST",
    headers: base(),
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: nextId++,
      method: "initialize",
      params: { protocolVersion: LEGACY, capabilities: {}, clientInfo: { name: "call-path", version: "1" } },
    }),
  });
  const initText = await init.text();
  expect(init.status, initText).toBe(200);
  const session = init.headers.get("mcp-session-id");
  expect(session, initText).toBeTruthy();
  const note = await SELF.fetch(`${GW}/mcp`, {
    method: "POST",
    headers: { ...base(), "mcp-protocol-version": LEGACY, "mcp-session-id": session! },
    body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }),
  });
  await note.text();
  expect(note.status).toBeLessThan(300);
  return session!;
}

async function legacyCall(session: string, n: number): Promise<string> {
  const r = await SELF.fetch(`${GW}/mcp`, {
    method: "POST",
    headers: { ...base(), "mcp-protocol-version": LEGACY, "mcp-session-id": session },
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method: "tools/call", params: { name: TOOL, arguments: { text: `call ${n}` } } }),
  });
  const text = await r.text();
  expect(r.status, text).toBe(200);
  return text;
}

// ---- the measurement --------------------------------------------------------------------------

/** Longer than every per-isolate cache of the gateway (config, kill switch, revocations: ≤ 1 s). */
const CACHES_EXPIRED_MS = 1500;

async function measure(era: string, call: (n: number) => Promise<string>): Promise<void> {
  // Warm-up: modules loaded, upstream catalog listed, objects created.
  expect(await call(0)).toContain("echo:");
  expect(await still()).toBe(true);
  await sleep(CACHES_EXPIRED_MS);
  expect(await still()).toBe(true);

  const classes = await doClasses();
  reset();
  const calls = toolCalls;
  const start = Date.now();
  const text = await call(1);
  const answer = ran();
  const answerDos = doRan(classes);
  const atAnswer = counts();
  expect(text).toContain('echo: {\\"text\\":\\"call 1\\"}');
  expect(toolCalls - calls).toBe(1);
  const settled = await still();
  const after = ran(atAnswer);
  const afterDos = doRan(classes, atAnswer);

  reset();
  const hotStart = Date.now();
  expect(await call(2)).toContain("echo:");
  const hot = ran();
  const hotDos = doRan(classes);
  // How old the caches the hot call met were (they were filled when the measured call started): fresh below 1 s.
  const hotCacheAgeMs = hotStart - start;
  await still();

  console.log(
    `CALL-PATH-JSON ${JSON.stringify({
      era,
      doClasses: classes.map((c) => ({ name: c.name, file: c.file.path })),
      answer: { files: answer, dos: answerDos },
      after: { files: after, dos: afterDos, settled },
      hot: { files: hot, dos: hotDos, cacheAgeMs: hotCacheAgeMs },
    })}`,
  );
}

describe("one governed tools/call, measured", () => {
  it("2026-07-28 (modern, stateless)", async () => {
    await measure(MODERN, modernCall);
  });

  it("2025-11-25 (legacy, in a session)", async () => {
    const session = await legacySession();
    await measure(LEGACY, (n) => legacyCall(session, n));
  });
});
