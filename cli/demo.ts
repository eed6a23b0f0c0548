/**
 * `portcullis start` (the demo: the bundled upstream plus a governed gateway in front of it; once
 * up it prints the classification banner, the console URL, an approver grant to paste there — on
 * the terminal only — and a try-it recipe) and `portcullis demo-upstream` (that upstream alone,
 * server-everything in this process with every listen pinned to 127.0.0.1). Owns these commands'
 * flags and output, and what a local gateway prints once it is up, for `start` and `dev` alike
 * (gatewayGuide: the approver grant, the console sign-in, the try-it recipe's pieces; `dev`'s own
 * words are cli/local.ts's). Starting the processes is cli/gateway-start.ts's.
 * Must never: let the demo upstream listen beyond loopback, or print the approver grant anywhere
 * but this terminal (no log file, no command line).
 */
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import type { ListenOptions, Server } from "node:net";
import { resolve } from "node:path";
import { commandOptions, HELP_OPTION, namesOf, portOf, STRING } from "./args.ts";
import { messageOf } from "./gateway-http.ts";
import { devSigningKey, gatewayOrigin, root, startDemoUpstream, startGateway, stopChildrenOnSignal } from "./gateway-start.ts";
import { classificationBanner, PERSIST_HELP, stateDir } from "./local.ts";
import { mintTarget } from "./token.ts";

export const HELP = {
  start: `usage: portcullis start [--port N] [--upstream-port N] [--persist-to DIR]
  the demo: the bundled upstream (server-everything, 127.0.0.1 only) and a governed gateway in front of
  it (portcullis.yaml: mode enforce, mappings/everything.yaml, the demo policy). Once it is up it prints
  the classification banner, the console URL, an approver grant to paste there (this terminal only)
  and a three-step try-it recipe. Ctrl-C stops both.
  --port N           the gateway's port on 127.0.0.1 (default 8787)
  --upstream-port N  the demo upstream's port on 127.0.0.1 (default 3001)
  ${PERSIST_HELP}
exit: the gateway's exit code once it stops; 2 usage`,
  "demo-upstream": `usage: portcullis demo-upstream [--port N]
  the bundled demo upstream (server-everything, Streamable HTTP) alone, listening on 127.0.0.1 only
  --port N  its port (default 3001); its endpoint is http://127.0.0.1:N/mcp
exit: 2 usage; otherwise it runs until stopped`,
};

const START_OPTIONS = { port: STRING, "upstream-port": STRING, "persist-to": STRING, ...HELP_OPTION } as const;
const UPSTREAM_OPTIONS = { port: STRING, ...HELP_OPTION } as const;

/** The options of `start` and `demo-upstream` (help.test.ts checks their --help names them all). */
export const KNOWN = { start: namesOf(START_OPTIONS), "demo-upstream": namesOf(UPSTREAM_OPTIONS) };

/** The claims of an approver sign-in: who it is for and which gateway (`token mint --port N`'s iss and aud unless given). */
export interface ApproverTarget {
  port: number;
  iss?: string | undefined;
  aud?: string | undefined;
  ttlSeconds?: number;
}

/**
 * The approver sign-in `start` and `dev` print: a grant minted with the dev key (as `token mint
 * --port N` does) for the gateway on `port` (or the `iss`/`aud` its config names), sub
 * `human:demo-approver`, roles approver and auditor, in team "local" — the team of the
 * unauthenticated loopback actor (src/identity/auth.ts), whose holds are that team's, so they
 * reach this approver (who, being another principal, may resolve them). Its auditor role reads the
 * same team's ledger (`ledger verify --url`).
 */
export async function approverGrant({ port, iss, aud, ttlSeconds = 8 * 3600 }: ApproverTarget): Promise<{ token: string; jti: string; exp: number }> {
  const { parseKeySet } = await import("../src/identity/keys.ts");
  const { mintGrant } = await import("../src/identity/tokens.ts");
  const target = mintTarget({ port: String(port) });
  if (typeof target === "string") throw new Error(target);
  const audience = aud ?? target.aud;
  const claims = {
    iss: iss ?? audience,
    aud: audience,
    sub: "human:demo-approver",
    team: "local",
    roles: ["approver" as const, "auditor" as const],
    tools: [],
    ttlSeconds,
  };
  return mintGrant(await parseKeySet(await devSigningKey()), claims, { maxLifetimeSeconds: 86400 });
}

/** Waits for `origin`/healthz to answer 2xx (at most about two minutes); whether it did. */
export async function gatewayUp(origin: string): Promise<boolean> {
  for (let i = 0; i < 240; i++) {
    const up = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(2000) })
      .then(async (r) => {
        await r.body?.cancel();
        return r.ok;
      })
      .catch(() => false);
    if (up) return true;
    await new Promise((r) => setTimeout(r, 500).unref());
  }
  return false;
}

/**
 * A curl line for one 2026-07-28 request to `origin`/mcp as the unauthenticated loopback agent:
 * `tools/list`, or `tools/call` of `tool` with `args`.
 */
export function mcpCurl(origin: string, call?: { tool: string; args: Record<string, unknown> }): string {
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
  const [method, params] = call ? ["tools/call", { name: call.tool, arguments: call.args, _meta: meta }] : ["tools/list", { _meta: meta }];
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method, params });
  return `curl -s ${origin}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: ${method}'${call ? ` -H 'mcp-name: ${call.tool}'` : ""} -d '${body}'`;
}

/** The try-it recipe's last lines: the ledger verified with the approver grant (an auditor) in PORTCULLIS_TOKEN, read from the terminal so it stays out of argv and shell history. */
export const verifyLines = (origin: string): string => `       read -rs PORTCULLIS_TOKEN && export PORTCULLIS_TOKEN    # paste the grant, then Enter
       npx portcullis ledger verify --url ${origin}`;

export interface GuideOptions {
  /** The gateway's origin, e.g. http://127.0.0.1:8787. */
  origin: string;
  /** Who the approver grant is for (approverGrant). */
  approver: ApproverTarget;
  /** What the gateway governs: printed first. */
  intro: string;
  /** The try-it recipe, printed after the sign-in. */
  tryIt: string;
  /** When set, no grant is minted: this says why (the gateway would not accept one signed with the dev key). */
  noGrant?: string | undefined;
  print?: (s: string) => void;
}

/**
 * What `start` and `dev` print once their gateway at `origin` answers /healthz: `intro`, the
 * console URL with an approver grant to paste at /console/login (printed to this terminal only —
 * never a log file, never a command line), then `tryIt`. Never fails the command: a gateway that
 * does not come up, or a grant that cannot be minted, is one line saying so and what to run.
 */
export async function gatewayGuide({ origin, approver, intro, tryIt, noGrant, print = (s: string) => console.log(s) }: GuideOptions): Promise<void> {
  const mintHint = `npx portcullis token mint --sub human:me --team local --role approver,auditor --port ${approver.port}`;
  try {
    if (!(await gatewayUp(origin))) return print(`portcullis: the gateway did not come up at ${origin}; no approver sign-in printed`);
    if (noGrant) {
      print(`${intro}
Console: ${origin}/console
  no approver sign-in printed: ${noGrant}

${tryIt}
`);
      return;
    }
    const grant = await approverGrant(approver);
    const hours = Math.round((grant.exp - Math.floor(Date.now() / 1000)) / 3600);
    const lifetime = hours >= 1 ? `${hours}h` : `${Math.max(1, Math.round((grant.exp - Math.floor(Date.now() / 1000)) / 60))} min`;
    print(`${intro}
Console: ${origin}/console
  Sign in at ${origin}/console/login by pasting this approver grant (human:demo-approver,
  team local, roles approver + auditor, ${lifetime}, signed with the dev key). It is shown here only:
  paste it, never put it on a command line.

${grant.token}

${tryIt}
`);
  } catch (e) {
    print(`portcullis: no approver sign-in (${messageOf(e)}); mint one: ${mintHint}`);
  }
}

/** For `start`: what the demo policy does, and the three-step recipe against the demo upstream. */
function demoGuide(origin: string, port: number): Promise<void> {
  const intro = `
portcullis: the demo is governed (portcullis.yaml, mode enforce, mappings/everything.yaml):
  held     get-sum when a + b > 100 (rule demo-big-sums): it runs once an approver approves it
  denied   get-env (rule demo-no-env): not listed, and a call is refused with the reason
  allowed  every other mapped tool; an MCP client without a grant is the agent local:demo (team local)
`;
  const tryIt = `Try it:
  1. Call the held tool as the agent (or in \`npx @modelcontextprotocol/inspector\`: Streamable HTTP,
     ${origin}/mcp, tool get-sum, a = 60, b = 50):
       ${mcpCurl(origin, { tool: "get-sum", args: { a: 60, b: 50 } })}
     → "Blocked by Portcullis: this call needs approval … It is held as local~<id> …"
  2. Approve it in the console: ${origin}/console → the hold → Approve.
  3. Send the identical call again: it runs once ("The sum of 60 and 50 is 110."; later retries get
     that answer replayed). Then verify the ledger with the same grant (an auditor), read from the
     terminal so it stays out of argv and shell history:
${verifyLines(origin)}`;
  return gatewayGuide({ origin, approver: { port }, intro, tryIt });
}

const EVERYTHING = resolve(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");

/** Runs server-everything in this process with every TCP listen bound to 127.0.0.1. */
async function demoUpstream(port: number): Promise<void> {
  const net = await import("node:net");
  const listen = net.Server.prototype.listen;
  // Every overload of listen arrives here: a port (or nothing), or an options object; anything else (a path, a handle) is refused.
  const pinned = function (this: Server, ...args: unknown[]) {
    const cb = typeof args[args.length - 1] === "function" ? args.pop() : undefined;
    const [first] = args;
    const o = typeof first === "object" && first !== null ? (first as ListenOptions & { fd?: unknown; handle?: unknown; _handle?: unknown }) : undefined;
    let opts: ListenOptions;
    if (first === undefined || typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first)))
      opts = { port: Number(first ?? 0), host: "127.0.0.1" };
    else if (o && o.path === undefined && o.fd === undefined && o.handle === undefined && !o._handle) opts = { ...o, host: "127.0.0.1" };
    else throw new Error("demo upstream: only TCP listens on 127.0.0.1 are allowed");
    return Reflect.apply(listen, this, cb ? [opts, cb] : [opts]) as Server;
  };
  net.Server.prototype.listen = pinned as typeof listen;
  process.env.PORT = String(port);
  process.argv.splice(2, Number.POSITIVE_INFINITY, "streamableHttp");
  await import(EVERYTHING);
}

/** `portcullis demo-upstream [--port N]`: runs until stopped. */
export async function demoUpstreamCommand(argv: string[]): Promise<void> {
  const a = commandOptions("demo-upstream", argv, UPSTREAM_OPTIONS, HELP["demo-upstream"]);
  await demoUpstream(portOf("demo-upstream", a.port, 3001));
}

/** `portcullis start …`: the demo upstream and a gateway before it; this process exits with the gateway. */
export async function startCommand(argv: string[]): Promise<void> {
  const a = commandOptions("start", argv, START_OPTIONS, HELP.start);
  const upPort = portOf("start", a["upstream-port"], 3001, "--upstream-port");
  const port = portOf("start", a.port, 8787);
  const demo = startDemoUpstream({ port: upPort });
  const children: ChildProcess[] = [demo];
  stopChildrenOnSignal(children);
  const demoConfig = resolve(root, "portcullis.yaml");
  const { inlineConfigFiles } = await import("./config-files.ts");
  const inlined = inlineConfigFiles(readFileSync(demoConfig, "utf8").replaceAll("127.0.0.1:3001/", `127.0.0.1:${upPort}/`), demoConfig);
  if (inlined.problems.length) {
    console.error(`portcullis: ${demoConfig}: invalid\n${inlined.problems.map((p) => `  - ${p}`).join("\n")}`);
    process.exit(1);
  }
  const configText = inlined.text;
  const persistTo = stateDir(a["persist-to"]);
  const gw = startGateway({ configText, port, persistTo, signingKey: await devSigningKey() });
  console.log(`portcullis: demo upstream on http://127.0.0.1:${upPort}/mcp, gateway on http://127.0.0.1:${port}/mcp (its state in ${persistTo})`);
  children.push(gw);
  gw.on("exit", (code) => {
    demo.kill();
    process.exit(code ?? 0);
  });
  demo.on("exit", () => gw.kill());
  const origin = gatewayOrigin("127.0.0.1", port);
  // The banner first, then the demo guide (console URL, approver sign-in, try-it recipe) last on screen.
  void classificationBanner({ configText, origin }).then(() => demoGuide(origin, port));
}
