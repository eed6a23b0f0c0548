/**
 * How the e2e suites talk to what they start: grants minted for a gateway, one 2026-07-28 MCP
 * request (no session, its own connection) with its answer read from JSON or SSE, SDK v2 clients
 * on their own sessions (ended by `closeSessions`, run after each test), JSON API calls with a
 * bearer, the ledger entries of one kind polled until they are there (bounded), the text of a
 * tool result, and a `portcullis` script run as a child process with a clean token environment.
 * Owns none of the processes it talks to, and asserts nothing: each suite states its own
 * expectations. Must never: wait without a bound, leave a session or child process behind, or
 * reach beyond the loopback addresses the suite gives it.
 */
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { type GrantClaimsInput, mintGrant } from "../../src/identity/tokens.ts";
import { parseKeySet } from "../../src/identity/keys.ts";

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in tests
type Any = any;

const ROOT = resolve(import.meta.dirname, "../..");

/** A grant signed with `jwk` (a private JWK as JSON) for the gateway at `origin` (its iss and aud). */
export async function grantFor(
  jwk: string,
  origin: string,
  claims: Omit<GrantClaimsInput, "iss" | "aud">,
  maxLifetimeSeconds = 3600,
): Promise<{ token: string; jti: string; exp: number }> {
  return mintGrant(await parseKeySet(jwk), { iss: origin, aud: origin, ...claims }, { maxLifetimeSeconds });
}

let nextId = 1;
export interface ModernOptions {
  /** More `_meta` for the request (after the protocol version and client capabilities). */
  meta?: Record<string, unknown>;
  /** The JSON-RPC id; a fresh one by default. */
  id?: number;
  /** How long to wait for the whole answer. */
  timeoutMs?: number;
  /** More HTTP headers (a traceparent, say). */
  headers?: Record<string, string>;
}

/** One 2026-07-28 request to the MCP endpoint `url`; the JSON-RPC answer (from JSON or SSE) and every message the stream carried. */
export async function modernRaw(
  url: string,
  bearer: string,
  method: string,
  params: Record<string, unknown>,
  { meta = {}, id = nextId++, timeoutMs = 60_000, headers = {} }: ModernOptions = {},
): Promise<{ answer: Any; messages: Any[]; body: string }> {
  const r = await fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${bearer}`,
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": method,
      ...(typeof params.name === "string" ? { "mcp-name": params.name } : typeof params.taskId === "string" ? { "mcp-name": params.taskId } : {}),
      ...headers,
    },
    body: JSON.stringify({
      jsonrpc: "2.0",
      id,
      method,
      params: { ...params, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}, ...meta } },
    }),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const body = await r.text();
  if (!(r.headers.get("content-type") ?? "").includes("text/event-stream")) {
    const answer = JSON.parse(body);
    return { answer, messages: [answer], body };
  }
  const messages = body
    .split("\n")
    .filter((l) => l.startsWith("data:"))
    .map((l) => l.slice(5).trim())
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l));
  return { answer: messages.find((m) => m.id === id) ?? { error: { message: `no answer in ${body.slice(0, 300)}` } }, messages, body };
}

/** One 2026-07-28 request (see modernRaw); its JSON-RPC answer. */
export const modern = async (url: string, bearer: string, method: string, params: Record<string, unknown>, opts: ModernOptions = {}): Promise<Any> =>
  (await modernRaw(url, bearer, method, params, opts)).answer;

/** How an SDK v2 client negotiates: the 2025-11-25 handshake, or pinned to 2026-07-28. */
export type Era = "legacy" | { pin: "2026-07-28" };

/** An SDK v2 client called `name` on its own session at `url` (with `bearer` when given); `close` ends the session and the client. */
export async function connect(name: string, url: string, bearer?: string, mode: Era = "legacy"): Promise<{ client: Client; close(): Promise<void> }> {
  const client = new Client({ name, version: "1" }, { versionNegotiation: { mode } });
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: bearer ? { authorization: `Bearer ${bearer}` } : {} } });
  await client.connect(transport);
  return {
    client,
    close: async () => {
      await transport.terminateSession().catch(() => undefined);
      await client.close().catch(() => undefined);
    },
  };
}

const open: (() => Promise<void>)[] = [];
/** As connect, but the session is ended by the next `closeSessions()` (the suites run it after each test). */
export async function sessionClient(name: string, url: string, bearer?: string, mode: Era = "legacy"): Promise<Client> {
  const { client, close } = await connect(name, url, bearer, mode);
  open.push(close);
  return client;
}
/** Ends every session sessionClient opened since the last call, one after another. */
export async function closeSessions(): Promise<void> {
  for (const close of open.splice(0)) await close();
}

/**
 * One call of the gateway's JSON API at `origin` with `bearer`: a `body` is sent as JSON (a
 * string as it is). The status and the answer parsed as JSON, or `{ text }` when it is not JSON.
 */
export async function api(
  origin: string,
  bearer: string,
  path: string,
  init: { method?: string; body?: unknown } = {},
): Promise<{ status: number; json: Any }> {
  const r = await fetch(`${origin}${path}`, {
    method: init.method ?? "GET",
    headers: { authorization: `Bearer ${bearer}`, ...(init.body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(init.body !== undefined ? { body: typeof init.body === "string" ? init.body : JSON.stringify(init.body) } : {}),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await r.text();
  let json: Any;
  try {
    json = JSON.parse(text);
  } catch {
    json = { text };
  }
  return { status: r.status, json };
}

/** The ledger entries of `kind` the `auditor` may read (D1 is filled by the LedgerDO's flush: polled every 0.5 s, at most 60 times, until `want` accepts them). */
export async function ledgerKinds(origin: string, auditor: string, kind: string, want: (entries: Any[]) => boolean): Promise<Any[]> {
  let entries: Any[] = [];
  for (let i = 0; i < 60; i++) {
    const r = await api(origin, auditor, `/v1/ledger?kind=${encodeURIComponent(kind)}&limit=500`);
    entries = r.json?.entries ?? [];
    if (want(entries)) return entries;
    await new Promise((res) => setTimeout(res, 500));
  }
  return entries;
}

/** The text parts of a tool result, one a line ("" when it has no content). */
export const texts = (r: Any): string =>
  Array.isArray(r?.content)
    ? r.content
        .filter((c: Any) => c.type === "text")
        .map((c: Any) => c.text)
        .join("\n")
    : "";

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `script` with this process's Node, in the repository (or `cwd`), with this process's
 * environment less PORTCULLIS_TOKEN and each variable `drop` names, then `env` on top; killed after 60 s.
 */
export function runScript(
  script: string,
  args: string[],
  env: Record<string, string> = {},
  { cwd = ROOT, drop = [] }: { cwd?: string; drop?: string[] } = {},
): Promise<Run> {
  return new Promise((done, fail) => {
    const base = { ...process.env };
    for (const name of ["PORTCULLIS_TOKEN", ...drop]) delete base[name];
    const child = spawn(process.execPath, [script, ...args], { cwd, env: { ...base, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", fail);
    child.on("close", (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}
