/**
 * `portcullis start` (the demo: the bundled upstream plus a governed gateway in front of it; once
 * up it prints the classification banner, the console URL, an approver grant to paste there — on
 * the terminal only — and a try-it recipe) and `portcullis demo-upstream` (that upstream alone,
 * server-everything in this process with every listen pinned to 127.0.0.1). Owns these commands'
 * flags and output, and the demo's approver grant. Starting the processes is cli/gateway-start.ts's.
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
import { classificationBanner } from "./local.ts";
import { mintTarget } from "./token.ts";

export const HELP = {
  start: `usage: portcullis start [--port N] [--upstream-port N] [--persist-to DIR]
  the demo: the bundled upstream (server-everything, 127.0.0.1 only) and a governed gateway in front of
  it (portcullis.yaml: mode enforce, mappings/everything.yaml, the demo policy). Once it is up it prints
  the classification banner, the console URL, an approver grant to paste there (this terminal only)
  and a three-step try-it recipe. Ctrl-C stops both.
  --port N           the gateway's port on 127.0.0.1 (default 8787)
  --upstream-port N  the demo upstream's port on 127.0.0.1 (default 3001)
  --persist-to DIR   keep the gateway's state (ledger, holds, sessions) in DIR across restarts
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

/**
 * The demo's approver sign-in for `start`: a grant minted with the dev key (as `token mint
 * --port N` does) for the gateway on `port`, sub `human:demo-approver`, roles approver and
 * auditor, in team "local" — the team of the unauthenticated loopback actor (src/identity/auth.ts),
 * whose holds are that team's, so they reach this approver (who, being another principal, may
 * resolve them). Its auditor role reads the same team's ledger (`ledger verify --url`).
 */
export async function demoApproverGrant(port: number, ttlSeconds = 8 * 3600): Promise<{ token: string; jti: string; exp: number }> {
  const { parseKeySet } = await import("../src/identity/keys.ts");
  const { mintGrant } = await import("../src/identity/tokens.ts");
  const target = mintTarget({ port: String(port) });
  if (typeof target === "string") throw new Error(target);
  const claims = { ...target, sub: "human:demo-approver", team: "local", roles: ["approver" as const, "auditor" as const], tools: [], ttlSeconds };
  return mintGrant(await parseKeySet(await devSigningKey()), claims, { maxLifetimeSeconds: 86400 });
}

/**
 * For `start`, once the gateway at `origin` answers /healthz: what the demo policy does, the
 * console URL with the approver grant to paste at /console/login (printed to this terminal only —
 * never a log file, never a command line), and a three-step "try it" recipe. Never fails the command.
 */
async function demoGuide({ origin, port, print = (s: string) => console.log(s) }: { origin: string; port: number; print?: (s: string) => void }) {
  try {
    let up = false;
    for (let i = 0; i < 240 && !up; i++) {
      up = await fetch(`${origin}/healthz`, { signal: AbortSignal.timeout(2000) })
        .then(async (r) => {
          await r.body?.cancel();
          return r.ok;
        })
        .catch(() => false);
      if (!up) await new Promise((r) => setTimeout(r, 500).unref());
    }
    if (!up) return print(`portcullis: the gateway did not come up at ${origin}; no approver sign-in printed`);
    const grant = await demoApproverGrant(port);
    const hours = Math.round((grant.exp - Math.floor(Date.now() / 1000)) / 3600);
    const call = (a: number, b: number) =>
      `curl -s ${origin}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2026-07-28' -H 'mcp-method: tools/call' -H 'mcp-name: get-sum' -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":${a},"b":${b}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'`;
    print(`
portcullis: the demo is governed (portcullis.yaml, mode enforce, mappings/everything.yaml):
  held     get-sum when a + b > 100 (rule demo-big-sums): it runs once an approver approves it
  denied   get-env (rule demo-no-env): not listed, and a call is refused with the reason
  allowed  every other mapped tool; an MCP client without a grant is the agent local:demo (team local)

Console: ${origin}/console
  Sign in at ${origin}/console/login by pasting this approver grant (human:demo-approver,
  team local, roles approver + auditor, ${hours}h, signed with the dev key). It is shown here only:
  paste it, never put it on a command line.

${grant.token}

Try it:
  1. Call the held tool as the agent (or in \`npx @modelcontextprotocol/inspector\`: Streamable HTTP,
     ${origin}/mcp, tool get-sum, a = 60, b = 50):
       ${call(60, 50)}
     → "Blocked by Portcullis: this call needs approval … It is held as local~<id> …"
  2. Approve it in the console: ${origin}/console → the hold → Approve.
  3. Send the identical call again: it runs once ("The sum of 60 and 50 is 110."; later retries get
     that answer replayed). Then verify the ledger with the same grant (an auditor), read from the
     terminal so it stays out of argv and shell history:
       read -rs PORTCULLIS_TOKEN && export PORTCULLIS_TOKEN    # paste the grant, then Enter
       npx portcullis ledger verify --url ${origin}
`);
  } catch (e) {
    print(
      `portcullis: no approver sign-in (${messageOf(e)}); mint one: npx portcullis token mint --sub human:me --team local --role approver,auditor --port ${port}`,
    );
  }
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
  const persistTo = typeof a["persist-to"] === "string" ? a["persist-to"] : undefined;
  const gw = startGateway({ configText, port, persistTo, signingKey: await devSigningKey() });
  console.log(`portcullis: demo upstream on http://127.0.0.1:${upPort}/mcp, gateway on http://127.0.0.1:${port}/mcp`);
  children.push(gw);
  gw.on("exit", (code) => {
    demo.kill();
    process.exit(code ?? 0);
  });
  demo.on("exit", () => gw.kill());
  const origin = gatewayOrigin("127.0.0.1", port);
  // The banner first, then the demo guide (console URL, approver sign-in, try-it recipe) last on screen.
  void classificationBanner({ configText, origin }).then(() => demoGuide({ origin, port }));
}
