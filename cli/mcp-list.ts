/**
 * A small MCP client for one job: reading an upstream's `tools/list` as a client would (2026-07-28
 * `server/discover` + `tools/list` with `_meta`, else legacy `initialize` +
 * `notifications/initialized` + `tools/list` with the session header, every page, bounded in time
 * and size, no redirect followed), for classify, suggest-manifest, the start banner and doctor
 * --live. Owns that exchange, its reasons (safe to print) and how a URL may be printed. Runs in
 * Node, never in the Worker. Must never: print or log a header value (headers come from the config,
 * `${NAME}` from this environment; reasons are scrubbed of them), print a URL's userinfo or query,
 * follow a redirect, or wait on an upstream without a bound.
 */
import { TextDecoderStream } from "node:stream/web";
import { EventSourceParserStream } from "eventsource-parser/stream";
import type { UpstreamConfig } from "../src/config/gateway-config.ts";
import { isObject, type Json, type JsonObject } from "../src/wire/jsonrpc.ts";
import { messageOf } from "./gateway-http.ts";

const MODERN_VERSION = "2026-07-28";
const LEGACY_VERSION = "2025-11-25";
const META = {
  protocolVersion: "io.modelcontextprotocol/protocolVersion",
  clientCapabilities: "io.modelcontextprotocol/clientCapabilities",
  clientInfo: "io.modelcontextprotocol/clientInfo",
};
const CLIENT_INFO = { name: "portcullis-cli", version: "0.1.0" };
/** tools/list pages read per upstream (the gateway's catalog reads as many). */
const MAX_PAGES = 50;
/** Bytes read from one answer. */
const MAX_ANSWER_BYTES = 16 * 2 ** 20;
export const DEFAULT_TIMEOUT_MS = 15_000;

/** The upstream could not be read; the message is the reason (scrubbed of header values). */
export class Unreachable extends Error {}

/** A URL as it may be printed: no userinfo, no query, no fragment (either may hold a secret). */
export function printableUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}${u.search ? "?…" : ""}`;
  } catch {
    return "(not a URL)";
  }
}

/** The parts of an upstream this client uses. */
export type ListedUpstream = Pick<UpstreamConfig, "url" | "headers"> & { credentials?: Pick<UpstreamConfig["credentials"], "mode"> };

/** `text` with every header value of `up` (and the URL's userinfo and query) replaced. */
export function scrub(text: string, up: ListedUpstream): string {
  let out = String(text);
  const secrets = Object.values(up.headers ?? {}).filter((v) => typeof v === "string" && v.length >= 4);
  try {
    const u = new URL(up.url);
    for (const s of [u.username, u.password, u.search.slice(1)]) if (s && s.length >= 4) secrets.push(s);
  } catch {
    /* no URL parts to hide */
  }
  for (const s of secrets.sort((a, b) => b.length - a.length)) out = out.split(s).join("<redacted>");
  return out;
}

/** `body` cut off with an error past MAX_ANSWER_BYTES. */
function bounded(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  let n = 0;
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, ctl) {
        n += chunk.byteLength;
        if (n > MAX_ANSWER_BYTES) ctl.error(new Error(`answer larger than ${MAX_ANSWER_BYTES / 2 ** 20} MiB`));
        else ctl.enqueue(chunk);
      },
    }),
  );
}

function transportReason(e: unknown, deadline: AbortSignal, timeoutMs: number): string {
  if (deadline.aborted) return `no answer within ${timeoutMs / 1000} s`;
  const c = e instanceof Error && typeof e.cause === "object" && e.cause !== null ? (e.cause as { code?: unknown; message?: unknown }) : undefined;
  if (typeof c?.code === "string" && c.code === "ECONNREFUSED") return "connection refused (ECONNREFUSED)";
  const message = typeof c?.message === "string" ? c.message : undefined;
  if (typeof c?.code === "string" && c.code) return `${c.code}${message && !message.includes(c.code) ? `: ${message}` : ""}`;
  return message ?? messageOf(e);
}

/** The events of an SSE body (eventsource-parser: CRLF, comments and multi-line data as the spec has them). */
function sseEvents(body: ReadableStream<Uint8Array>): AsyncIterable<{ data: string }> {
  const events = body.pipeThrough(new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>).pipeThrough(new EventSourceParserStream());
  return events as unknown as AsyncIterable<{ data: string }>; // Node's ReadableStream is async-iterable
}

interface Ctx {
  up: ListedUpstream;
  timeoutMs: number;
  deadline: AbortSignal;
}
interface Posted {
  status: number;
  sessionId: string | undefined;
  response: JsonObject | undefined;
}

const answers = (m: unknown, id: unknown): m is JsonObject => isObject(m) && m.id === id && ("result" in m || "error" in m);

/**
 * POSTs one JSON-RPC message; returns `{ status, sessionId, response }` where `response` is the
 * JSON-RPC response with the message's id (from a JSON body or an SSE stream), if one came.
 */
async function post(ctx: Ctx, headers: Record<string, string>, message: JsonObject & { method: string }): Promise<Posted> {
  const own = new AbortController();
  const signal = AbortSignal.any([ctx.deadline, own.signal]);
  try {
    let res: Response;
    try {
      res = await fetch(ctx.up.url, {
        method: "POST",
        headers: { ...ctx.up.headers, ...headers, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify(message),
        redirect: "manual",
        signal,
      });
    } catch (e) {
      throw new Unreachable(transportReason(e, ctx.deadline, ctx.timeoutMs));
    }
    const out: Posted = { status: res.status, sessionId: res.headers.get("mcp-session-id") ?? undefined, response: undefined };
    if (res.status >= 300 && res.status < 400)
      throw new Unreachable(`answered ${message.method} with a redirect (HTTP ${res.status}); no redirect is followed`);
    if (res.status === 401 || res.status === 403) {
      const perPrincipal = ctx.up.credentials?.mode === "per_principal";
      throw new Unreachable(
        `refused the credentials (HTTP ${res.status})${perPrincipal ? "; its credentials are per principal, and this command has none" : "; check the config's headers and the variables they name"}`,
      );
    }
    if (!("id" in message) || !res.body) return out;
    try {
      const body = bounded(res.body);
      if ((res.headers.get("content-type") ?? "").includes("text/event-stream")) {
        for await (const ev of sseEvents(body)) {
          let m: Json;
          try {
            m = JSON.parse(ev.data);
          } catch {
            continue;
          }
          if (answers(m, message.id)) {
            out.response = m;
            break;
          }
        }
      } else {
        const text = await new Response(body).text();
        let m: Json | undefined;
        try {
          m = JSON.parse(text);
        } catch {
          m = undefined;
        }
        const found = (Array.isArray(m) ? m : [m]).find((x): x is JsonObject => answers(x, message.id));
        if (found) out.response = found;
      }
    } catch (e) {
      if (e instanceof Unreachable) throw e;
      throw new Unreachable(`${message.method}: ${transportReason(e, ctx.deadline, ctx.timeoutMs)}`);
    }
    return out;
  } finally {
    own.abort(); // an SSE stream still open after the answer is closed
  }
}

const answerProblem = (r: Posted): string => {
  const error = isObject(r.response?.error) ? r.response.error : undefined;
  return typeof error?.message === "string" ? error.message : `HTTP ${r.status}`;
};

async function allPages(request: (cursor: string | undefined) => Promise<Posted>): Promise<Json[]> {
  const tools: Json[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const r = await request(cursor);
    const result = r.response?.result;
    if (!isObject(result) || !Array.isArray(result.tools)) throw new Unreachable(`answered tools/list without a tool list (${answerProblem(r)})`);
    tools.push(...result.tools);
    if (typeof result.nextCursor !== "string" || result.nextCursor === "") break;
    cursor = result.nextCursor;
  }
  return tools;
}

/** What an upstream listed: its era, the protocol version it speaks, and the raw tools/list items. */
export interface Listed {
  era: "modern" | "legacy";
  protocolVersion: string;
  tools: Json[];
}

/**
 * One upstream's complete tools/list, read as an MCP client would: `server/discover` first; an
 * upstream that speaks 2026-07-28 is asked `tools/list` with `_meta`, any other gets a legacy
 * `initialize` + `notifications/initialized`, then `tools/list` with its session header (the
 * session is deleted afterwards). Bounded by `timeoutMs` overall. Returns `{ era, protocolVersion,
 * tools }` (the raw items); throws Unreachable with a reason safe to print.
 */
export async function listUpstreamTools(up: ListedUpstream, { timeoutMs = DEFAULT_TIMEOUT_MS } = {}): Promise<Listed> {
  const ctx: Ctx = { up, timeoutMs, deadline: AbortSignal.timeout(timeoutMs) };
  let ids = 0;
  const id = () => `portcullis-cli-${++ids}`;
  const meta = () => ({ [META.protocolVersion]: MODERN_VERSION, [META.clientCapabilities]: {}, [META.clientInfo]: { ...CLIENT_INFO } });
  const modernHeaders = (method: string) => ({ "mcp-protocol-version": MODERN_VERSION, "mcp-method": method });
  try {
    const discover = await post(ctx, modernHeaders("server/discover"), { jsonrpc: "2.0", id: id(), method: "server/discover", params: { _meta: meta() } });
    const d = discover.response?.result;
    if (isObject(d) && Array.isArray(d.supportedVersions) && d.supportedVersions.includes(MODERN_VERSION)) {
      const tools = await allPages((cursor) =>
        post(ctx, modernHeaders("tools/list"), { jsonrpc: "2.0", id: id(), method: "tools/list", params: { _meta: meta(), ...(cursor ? { cursor } : {}) } }),
      );
      return { era: "modern", protocolVersion: MODERN_VERSION, tools };
    }
    const init = await post(
      ctx,
      { "mcp-protocol-version": LEGACY_VERSION },
      {
        jsonrpc: "2.0",
        id: id(),
        method: "initialize",
        params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: { ...CLIENT_INFO } },
      },
    );
    const result = init.response?.result;
    if (!isObject(result)) throw new Unreachable(`refused initialize (${answerProblem(init)}) and server/discover (${answerProblem(discover)})`);
    const version = typeof result.protocolVersion === "string" ? result.protocolVersion : LEGACY_VERSION;
    const session: Record<string, string> = { "mcp-protocol-version": version, ...(init.sessionId ? { "mcp-session-id": init.sessionId } : {}) };
    try {
      await post(ctx, session, { jsonrpc: "2.0", method: "notifications/initialized" });
      const tools = await allPages((cursor) => post(ctx, session, { jsonrpc: "2.0", id: id(), method: "tools/list", params: cursor ? { cursor } : {} }));
      return { era: "legacy", protocolVersion: version, tools };
    } finally {
      if (init.sessionId) {
        // Ends the session this command opened (best effort, briefly).
        await fetch(up.url, { method: "DELETE", headers: { ...up.headers, ...session }, redirect: "manual", signal: AbortSignal.timeout(2000) })
          .then((r) => r.body?.cancel())
          .catch(() => undefined);
      }
    }
  } catch (e) {
    throw new Unreachable(scrub(e instanceof Unreachable ? e.message : transportReason(e, ctx.deadline, timeoutMs), up));
  }
}
