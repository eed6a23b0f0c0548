/**
 * A notes MCP upstream for the runs and rollback e2e tests ([R]), built on the SDK v2 server
 * (`McpServer`): `create_note`, `update_note`, `delete_note` and `read_note`, each with an
 * `outputSchema` and `structuredContent`, plus `create_draft`, whose result breaks its own
 * outputSchema (the SDK's own output check is bypassed for that one tool only, so the gateway sees
 * a result that does not match what tools/list declared). It counts every tools/call by tool,
 * honours `_meta["portcullis/idempotency_key"]` on the mutating tools — a repeated call with a
 * key it already applied returns the first answer and changes nothing — and can be told to fail a
 * tool's next N calls, or all of them (an isError result, nothing applied). 2026-07-28 traffic
 * goes to `createMcpHandler`; 2025-11-25 gets sessionful streamable HTTP. Listens on 127.0.0.1,
 * ephemeral port. Must never: be used outside tests, or listen beyond loopback.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { McpServer, WebStandardStreamableHTTPServerTransport, createMcpHandler, isLegacyRequest } from "@modelcontextprotocol/server";
import { z } from "zod";
import { writeResponse } from "../fixtures/node-response.ts";

export const IDEMPOTENCY_META = "portcullis/idempotency_key";

export interface NotesUpstream {
  url: string;
  /** The notes as they are now: id → title. */
  notes: Map<string, string>;
  /** tools/call requests received, by tool (repeats answered from the idempotency store included). */
  calls: Map<string, number>;
  /** Every tools/call received, in order: tool, arguments, idempotency key (null without one), whether it was applied. */
  log: { tool: string; args: Record<string, unknown>; key: string | null; applied: boolean }[];
  /** The next N calls of a tool answer isError and apply nothing. */
  failNext: Map<string, number>;
  /** Every call of these tools answers isError and applies nothing. */
  failAlways: Set<string>;
  /** tools/call requests received in total. */
  total(): number;
  close(): Promise<void>;
}

type Result = { content: { type: "text"; text: string }[]; structuredContent?: Record<string, unknown>; isError?: boolean };

/**
 * The gateway config both rollback e2e files run: the notes upstream in enforce, with create_note
 * and update_note undone (and read back) by delete_note and update_note; `extraTools` adds mapping
 * entries (YAML indented 6 spaces) before delete_note and read_note.
 */
export function notesGatewayConfig(url: string, actor: string, extraTools = ""): string {
  return `
actor: ${actor}
auth:
  required: true
egress:
  allow_loopback: true
mode: enforce
upstreams:
  - name: notes
    url: ${url}
    timeout: 30s
mappings:
  notes:
    tools:
      create_note:
        effect: reversible
        compensation:
          tool: delete_note
          arguments: { id: "$result.id" }
          verification: { tool: read_note, arguments: { id: "$result.id" }, expect: { exists: false } }
      update_note:
        effect: reversible
        compensation:
          tool: update_note
          arguments: { id: "$args.id", title: "$result.previous_title" }
          verification: { tool: read_note, arguments: { id: "$args.id" }, expect: { exists: true, title: "$result.previous_title" } }
${extraTools}      delete_note: { effect: irreversible }
      read_note: { effect: read_only }
`;
}

export async function startNotesUpstream(): Promise<NotesUpstream> {
  const notes = new Map<string, string>();
  const calls = new Map<string, number>();
  const log: NotesUpstream["log"] = [];
  const failNext = new Map<string, number>();
  const failAlways = new Set<string>();
  /** Answers already given under an idempotency key (tool + key): a repeat gets the same answer, applied once. */
  const applied = new Map<string, Result>();
  let nextId = 1;

  const ok = (structured: Record<string, unknown>): Result => ({
    content: [{ type: "text", text: JSON.stringify(structured) }],
    structuredContent: structured,
  });
  const err = (text: string): Result => ({ content: [{ type: "text", text }], isError: true });

  /** Counts the call, honours failure injection and the idempotency key, and applies `run` at most once per key. */
  function handle(tool: string, args: Record<string, unknown>, meta: Record<string, unknown> | undefined, run: () => Result): Result {
    calls.set(tool, (calls.get(tool) ?? 0) + 1);
    const key = typeof meta?.[IDEMPOTENCY_META] === "string" ? (meta[IDEMPOTENCY_META] as string) : null;
    const entry = { tool, args, key, applied: false };
    log.push(entry);
    if (key !== null && applied.has(`${tool}\u0000${key}`)) return applied.get(`${tool}\u0000${key}`)!;
    const left = failNext.get(tool) ?? 0;
    if (left > 0) {
      failNext.set(tool, left - 1);
      return err(`${tool} failed (injected, ${left - 1} more to come)`);
    }
    if (failAlways.has(tool)) return err(`${tool} failed (injected, always)`);
    const r = run();
    entry.applied = !r.isError;
    if (key !== null && !r.isError) applied.set(`${tool}\u0000${key}`, r);
    return r;
  }

  const noteOut = { id: z.string(), title: z.string() };
  const factory = () => {
    const mcp = new McpServer({ name: "notes-upstream", version: "1.0.0" });
    mcp.registerTool(
      "create_note",
      { description: "Creates a note", inputSchema: z.object({ title: z.string() }), outputSchema: z.object(noteOut) },
      async ({ title }, ctx) =>
        handle("create_note", { title }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          const id = `n${nextId++}`;
          notes.set(id, title);
          return ok({ id, title });
        }),
    );
    mcp.registerTool(
      "update_note",
      {
        description: "Changes a note's title; answers the title it had before",
        inputSchema: z.object({ id: z.string(), title: z.string() }),
        outputSchema: z.object({ ...noteOut, previous_title: z.string() }),
      },
      async ({ id, title }, ctx) =>
        handle("update_note", { id, title }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          const previous = notes.get(id);
          if (previous === undefined) return err(`no note ${id}`);
          notes.set(id, title);
          return ok({ id, title, previous_title: previous });
        }),
    );
    mcp.registerTool(
      "delete_note",
      { description: "Deletes a note", inputSchema: z.object({ id: z.string() }), outputSchema: z.object({ id: z.string(), deleted: z.boolean() }) },
      async ({ id }, ctx) =>
        handle("delete_note", { id }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          if (!notes.has(id)) return err(`no note ${id}`);
          notes.delete(id);
          return ok({ id, deleted: true });
        }),
    );
    mcp.registerTool(
      "read_note",
      {
        description: "Reads a note",
        inputSchema: z.object({ id: z.string() }),
        outputSchema: z.object({ id: z.string(), exists: z.boolean(), title: z.string().optional() }),
        annotations: { readOnlyHint: true },
      },
      async ({ id }, ctx) =>
        handle("read_note", { id }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          const title = notes.get(id);
          return ok(title === undefined ? { id, exists: false } : { id, exists: true, title });
        }),
    );
    mcp.registerTool(
      "publish_note",
      { description: "Creates a published note", inputSchema: z.object({ title: z.string() }), outputSchema: z.object(noteOut) },
      async ({ title }, ctx) =>
        handle("publish_note", { title }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          const id = `n${nextId++}`;
          notes.set(id, title);
          return ok({ id, title });
        }),
    );
    mcp.registerTool(
      "create_draft",
      {
        description: "Creates a draft note (its result breaks its outputSchema: id is a number)",
        inputSchema: z.object({ title: z.string() }),
        outputSchema: z.object(noteOut),
      },
      async ({ title }, ctx) =>
        handle("create_draft", { title }, ctx.mcpReq._meta as Record<string, unknown> | undefined, () => {
          const n = nextId++;
          notes.set(`n${n}`, title);
          return ok({ id: n, title });
        }),
    );
    // The SDK checks results against outputSchema; create_draft must reach the gateway broken.
    const server = mcp as unknown as { validateToolOutput(tool: unknown, result: unknown, name: string): Promise<void> };
    const check = server.validateToolOutput.bind(mcp);
    server.validateToolOutput = async (tool, result, name) => (name === "create_draft" ? undefined : check(tool, result, name));
    return mcp;
  };

  const modern = createMcpHandler(factory, { legacy: "reject" });
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();

  async function legacy(request: Request): Promise<Response> {
    const sid = request.headers.get("mcp-session-id");
    if (sid !== null) {
      const t = sessions.get(sid);
      if (!t) return Response.json({ jsonrpc: "2.0", id: null, error: { code: -32001, message: "Session not found" } }, { status: 404 });
      return t.handleRequest(request);
    }
    if (request.method !== "POST")
      return Response.json({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "Bad Request: no session" } }, { status: 400 });
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, transport);
      },
      onsessionclosed: (id) => {
        sessions.delete(id);
      },
    });
    await factory().connect(transport);
    return transport.handleRequest(request);
  }

  async function toRequest(req: IncomingMessage, base: string): Promise<Request> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const x of v) headers.append(k, x);
      else if (typeof v === "string") headers.set(k, v);
    }
    const body = req.method === "GET" || req.method === "HEAD" || chunks.length === 0 ? undefined : Buffer.concat(chunks);
    return new Request(new URL(req.url ?? "/", base), { method: req.method ?? "GET", headers, ...(body ? { body } : {}) });
  }

  const server = createServer((req, res) => {
    void (async () => {
      try {
        if (!(req.url ?? "").startsWith("/mcp")) {
          res.writeHead(404).end();
          return;
        }
        const request = await toRequest(req, `http://${req.headers.host ?? "127.0.0.1"}`);
        const response = (await isLegacyRequest(request)) ? await legacy(request) : await modern.fetch(request);
        await writeResponse(response, res);
      } catch (e) {
        if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
        res.end(String(e));
      }
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    notes,
    calls,
    log,
    failNext,
    failAlways,
    total: () => log.length,
    close: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close().catch(() => undefined)));
      await modern.close().catch(() => undefined);
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
