/**
 * `portcullis bridge --port N [--secret-file FILE] [--log FILE] [--name NAME] -- <command …>`: a
 * stdio MCP server served as Streamable HTTP on 127.0.0.1:N only, for a gateway to govern like
 * any HTTP upstream. Owns the command's flags, its startup lines (where the secret and the log
 * are, the gateway config snippet that names the secret by `${NAME}`, how a local gateway reads
 * it), the HTTP front (node:http to the SDK's web-standard transport and back), the checks every
 * request passes before any session sees it — Host and Origin loopback only (DNS rebinding: the
 * SDK's validators), then exactly `Authorization: Bearer <secret>` compared in constant time (401
 * with a JSON body otherwise), then `/mcp` — the session table (a POST `initialize` without
 * Mcp-Session-Id opens a session with a child of its own, cli/bridge-session.ts, where the reasons
 * for one child per session are; any other request without a session id is a 400; an unknown id
 * a 404, so the gateway opens a new one), the log file (the children's stderr and the bridge's
 * own lines, which also go to stderr), and stopping: SIGINT/SIGTERM close every session and stop
 * every child before the bridge exits (a second signal kills them at once). The children get the
 * bridge's environment minus agent and operator grants (PORTCULLIS_TOKEN, PORTCULLIS_AGENT_TOKEN)
 * and bridge secrets, since a server may hand its environment to whoever calls it. Must never: print,
 * log or pass on the command line the secret (it lives in its 0600 file; the gateway config
 * names it), listen beyond 127.0.0.1, serve a request whose bearer is not the secret, or exit
 * leaving a child running.
 */
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { dirname } from "node:path";
import { commandOptions, HELP_OPTION, namesOf, portOf, STRING, usageError } from "./args.ts";
import {
  BRIDGES_DIR,
  bearerMatches,
  bridgeName,
  defaultFiles,
  devSecretLine,
  nameOfSecretFile,
  SecretFileError,
  secretFromFile,
  secretNameOf,
  upstreamSnippet,
} from "./bridge-secret.ts";
import type { BridgeSession, ChildSpec, SessionHooks } from "./bridge-session.ts";

export const HELP = `usage: portcullis bridge --port N [--secret-file FILE] [--log FILE] [--name NAME] -- COMMAND [ARG...]
  runs a stdio MCP server (COMMAND ARG..., everything after --) behind Streamable HTTP on
  http://127.0.0.1:N/mcp only, for a gateway to govern as an HTTP upstream:
  - one child process per MCP session (each principal the gateway serves gets its own server);
    DELETE of a session stops its child
  - every request needs "Authorization: Bearer <secret>" (else 401), and a loopback Host and
    Origin (else 403), so no other local user or web page reaches the server around the gateway
  - a child that exits: the requests it had and any new one get a JSON-RPC error naming its exit
    code; it is started again after 250 ms, doubling up to 30 s while it keeps crashing, and given
    the session's initialize again, so the session goes on
  - text on the child's stdout that is not JSON-RPC is logged and ignored
  --port N          the port on 127.0.0.1 (required)
  --secret-file F   the bearer secret: reused when F exists (it must have mode 0600), else 32 random
                    bytes written there with mode 0600 (default ${BRIDGES_DIR}/<name>.secret). It is
                    never printed: the gateway config names it as \${BRIDGE_<NAME>_SECRET}
  --log FILE        the children's stderr and the bridge's own lines, appended (default
                    ${BRIDGES_DIR}/<name>.log); the bridge's lines also go to stderr
  --name NAME       the upstream name the printed config snippet uses (default: from --secret-file,
                    else from COMMAND)
  it prints, never the secret: the snippet for the gateway config, and the line that hands the
  secret to a local gateway (export BRIDGE_<NAME>_SECRET="$(cat FILE)"; npx portcullis dev).
  Ctrl-C (or SIGTERM) stops every child, then the bridge
exit: 0 stopped by a signal, 1 the port or a file could not be used, 2 usage`;

const OPTIONS = { port: STRING, "secret-file": STRING, log: STRING, name: STRING, ...HELP_OPTION } as const;

/** The options of `bridge` (help.test.ts checks its --help names them all). */
export const KNOWN = { bridge: namesOf(OPTIONS) };

/** Largest POST body the bridge reads (the SDK transport's own bound). */
const MAX_BODY = 4 * 1024 * 1024;

const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
};
const rpcError = (res: ServerResponse, status: number, code: number, message: string, id: unknown = null) =>
  json(res, status, { jsonrpc: "2.0", id, error: { code, message } });

/** The request's body, up to MAX_BODY (null past it). */
async function bodyOf(req: IncomingMessage): Promise<Buffer | null> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    size += c.length;
    if (size > MAX_BODY) return null;
    chunks.push(c);
  }
  return Buffer.concat(chunks);
}

/** A node:http request as a web-standard Request (the SDK transport's input). */
function webRequest(req: IncomingMessage, port: number, body: Buffer): Request {
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i] ?? "", req.rawHeaders[i + 1] ?? "");
  const method = req.method ?? "GET";
  return new Request(`http://127.0.0.1:${port}${req.url ?? "/"}`, {
    method,
    headers,
    ...(body.length && method !== "GET" ? { body: new Uint8Array(body) } : {}),
  });
}

/** A web-standard Response written to node:http, streamed (SSE) until it ends or the client goes. */
async function writeResponse(r: Response, res: ServerResponse): Promise<void> {
  const headers: Record<string, string> = {};
  r.headers.forEach((v, k) => {
    headers[k] = v;
  });
  res.writeHead(r.status, headers);
  res.flushHeaders();
  if (!r.body) return void res.end();
  const reader = r.body.getReader();
  res.on("close", () => void reader.cancel().catch(() => undefined));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      res.write(value);
    }
  } catch {
    // The client went away, or the stream was cancelled: nothing more to write.
  } finally {
    res.end();
  }
}

const isInitialize = (m: unknown): boolean => typeof m === "object" && m !== null && (m as { method?: unknown }).method === "initialize";

/** Runs `portcullis bridge <argv…>`: returns once it listens (the server keeps the process alive); usage mistakes exit 2, unusable files or port 1. */
export async function bridgeCommand(argv: string[]): Promise<void> {
  const dash = argv.indexOf("--");
  const a = commandOptions("bridge", dash < 0 ? argv : argv.slice(0, dash), OPTIONS, HELP);
  const [command, ...args] = dash < 0 ? [] : argv.slice(dash + 1);
  if (a.port === undefined) usageError("bridge", "give --port N (the port on 127.0.0.1 the gateway's upstream url names)");
  if (!command) usageError("bridge", "give the stdio server's command after --, e.g. -- npx -y @modelcontextprotocol/server-everything stdio");
  const port = portOf("bridge", a.port, 0);
  const name = bridgeName(a.name ?? (a["secret-file"] ? nameOfSecretFile(a["secret-file"]) : (command.split(/[\\/]/).pop() ?? "bridge")));
  const files = defaultFiles(name);
  const secretFile = a["secret-file"] ?? files.secret;
  const logFile = a.log ?? files.log;
  let secret: string;
  let created: boolean;
  try {
    ({ secret, created } = secretFromFile(secretFile));
  } catch (e) {
    console.error(`portcullis bridge: ${e instanceof SecretFileError ? e.message : `cannot use ${secretFile}: ${(e as Error).message}`}`);
    process.exit(1);
  }
  // The SDK is loaded here, after --help and the usage checks, so those work without it.
  let Session: typeof BridgeSession;
  let sdk: typeof import("@modelcontextprotocol/server");
  try {
    ({ BridgeSession: Session } = await import("./bridge-session.ts"));
    sdk = await import("@modelcontextprotocol/server");
  } catch (e) {
    console.error(
      `portcullis bridge: needs @modelcontextprotocol/server and @modelcontextprotocol/client 2.4 (npm install --save-dev @modelcontextprotocol/server@2.4.0 @modelcontextprotocol/client@2.4.0): ${(e as Error).message.split("\n")[0]}`,
    );
    process.exit(1);
  }
  mkdirSync(dirname(logFile), { recursive: true, mode: 0o700 });
  const logStream: WriteStream = createWriteStream(logFile, { flags: "a", mode: 0o600 });
  const log = (line: string) => {
    process.stderr.write(`portcullis bridge ${name}: ${line}\n`);
    logStream.write(`${new Date().toISOString()} [bridge] ${line}\n`);
  };
  // The child gets this environment but for grants and bridge secrets: a server that hands out its
  // environment (server-everything's get-env does) must not hand out those.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(
      (e): e is [string, string] => typeof e[1] === "string" && e[1] !== secret && !/^(PORTCULLIS_(AGENT_)?TOKEN|BRIDGE_[A-Z0-9_]*_SECRET)$/.test(e[0]),
    ),
  );
  const spec: ChildSpec = { command, args, env };
  const sessions = new Map<string, BridgeSession>();
  const hooks: SessionHooks = {
    log,
    stderr: logStream,
    opened: (s) => {
      if (s.transport.sessionId) sessions.set(s.transport.sessionId, s);
    },
    closed: (s) => {
      if (s.transport.sessionId) sessions.delete(s.transport.sessionId);
    },
  };
  let stopping = false;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (stopping) return rpcError(res, 503, -32000, "the bridge is stopping");
    const headOnly = webRequest(req, port, Buffer.alloc(0));
    // The SDK's own DNS-rebinding checks: Host must be 127.0.0.1, localhost or [::1]; an Origin, if sent, too.
    const refused =
      sdk.hostHeaderValidationResponse(headOnly, sdk.localhostAllowedHostnames()) ?? sdk.originValidationResponse(headOnly, sdk.localhostAllowedOrigins());
    if (refused) {
      log(
        `refused a request: ${req.headers.host ? `Host ${JSON.stringify(req.headers.host)}` : "no Host"}${req.headers.origin ? `, Origin ${JSON.stringify(req.headers.origin)}` : ""} is not loopback`,
      );
      return writeResponse(refused, res);
    }
    if (!bearerMatches(req.headers.authorization, secret)) {
      log(`refused a request without the bridge's bearer secret (${req.method} ${new URL(req.url ?? "/", "http://x").pathname})`);
      return json(
        res,
        401,
        {
          error: "unauthorized",
          error_description: "this bridge needs Authorization: Bearer <its secret> (the gateway sends it from the secret file portcullis bridge was given)",
        },
        { "www-authenticate": 'Bearer realm="portcullis-bridge"' },
      );
    }
    if (new URL(req.url ?? "/", "http://x").pathname !== "/mcp")
      return json(res, 404, { error: "not_found", error_description: "the bridge serves /mcp only" });
    const body = await bodyOf(req);
    if (body === null) return rpcError(res, 413, -32000, `the body is over ${MAX_BODY} bytes`);
    const sid = req.headers["mcp-session-id"];
    if (typeof sid === "string") {
      const s = sessions.get(sid);
      if (!s) return rpcError(res, 404, -32001, "Session not found (this bridge does not know it: initialize a new session)");
      return writeResponse(await s.transport.handleRequest(webRequest(req, port, body)), res);
    }
    if (req.method !== "POST") return rpcError(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required");
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString("utf8"));
    } catch {
      return rpcError(res, 400, -32700, "Parse error: Invalid JSON");
    }
    if (!isInitialize(parsed))
      return rpcError(res, 400, -32600, "this bridge serves MCP sessions (2025-11-25 and earlier): send initialize first, without Mcp-Session-Id");
    let s: BridgeSession;
    try {
      s = await Session.open(spec, hooks);
    } catch (e) {
      log(`could not start the stdio server ${JSON.stringify(command)}: ${(e as Error).message}`);
      return rpcError(res, 502, -32000, `the bridge could not start its stdio server: ${(e as Error).message}`, (parsed as { id?: unknown }).id ?? null);
    }
    return writeResponse(await s.transport.handleRequest(webRequest(req, port, body), { parsedBody: parsed }), res);
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      log(`error: ${(e as Error).message}`);
      if (!res.headersSent) rpcError(res, 500, -32603, "the bridge failed on this request");
      else res.end();
    });
  });
  await new Promise<void>((done) => {
    server.once("error", (e: NodeJS.ErrnoException) => {
      console.error(
        `portcullis bridge: cannot listen on 127.0.0.1:${port} (${e.code ?? e.message})${e.code === "EADDRINUSE" ? ": another process has it; give another --port" : ""}`,
      );
      process.exit(1);
    });
    server.listen(port, "127.0.0.1", () => done());
  });

  const stop = (sig: NodeJS.Signals) => {
    if (stopping) {
      for (const s of sessions.values()) s.kill();
      process.exit(1);
    }
    stopping = true;
    log(`${sig}: stopping ${sessions.size} session${sessions.size === 1 ? "" : "s"} and their stdio servers`);
    server.close();
    server.closeAllConnections();
    void Promise.allSettled([...sessions.values()].map((s) => s.close())).then(() => {
      log("stopped");
      logStream.end(() => process.exit(0));
    });
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);

  const url = `http://127.0.0.1:${port}/mcp`;
  const indent = (t: string) => t.replace(/^/gm, "    ");
  console.log(`portcullis bridge ${name}: ${url} (127.0.0.1 only), serving ${[command, ...args].join(" ")}, one process per MCP session
  secret: ${secretFile} (${created ? "created" : "reused"}, mode 0600; never printed); requests without it get 401
  log:    ${logFile} (the stdio server's stderr and the bridge's lines)
  in the gateway config (portcullis.yaml), the secret by name only:
${indent(upstreamSnippet(name, port))}
  a local gateway (portcullis dev passes each \${NAME} its config names from its environment):
    ${devSecretLine(name, secretFile)}
    npx portcullis dev
  a hosted gateway reaches it through a tunnel with Cloudflare Access (README: "Bridging a stdio server");
  the gateway sends the secret from its own ${secretNameOf(name)} (npx wrangler secret put ${secretNameOf(name)})
  Ctrl-C stops every stdio server, then the bridge`);
}
