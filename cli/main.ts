/**
 * The `portcullis` command's dispatch (bin/portcullis.mjs, the package's launcher, runs `main`
 * once it has checked the Node version): each command goes to the file that owns it, loaded only
 * when it runs, and the top-level usage (USAGE) lists them all. Owns the help conventions every
 * command follows: `--help` / `-h` prints the usage on stdout, exit 0; `portcullis` alone prints
 * it on stderr; an unknown command, or an unknown or missing option, exits 2 pointing at the
 * command's --help. Must never: print secret values, or put one on a command line (each command's
 * file says how it keeps them out).
 */
import { isHelp } from "./args.ts";
import { KNOWN as DEMO } from "./demo.ts";
import { KNOWN as DEPLOY } from "./deploy.ts";
import { KNOWN as LOCAL } from "./local.ts";
import { KNOWN as PROJECT } from "./project.ts";
import { KNOWN as TOKEN } from "./token.ts";

/**
 * The usage of every command, printed by `portcullis --help` (stdout) and by `portcullis` alone
 * (stderr). Each command's own `--help` / `-h` prints its full usage.
 */
export const USAGE = `usage: portcullis <command> [options]     (portcullis <command> --help, or -h, for each one's options)
  portcullis init [DIR] [--name NAME]      a gateway project for a team's own repository (wrangler.toml,
                        worker.js importing the Worker from this package, portcullis.yaml, policy,
                        mappings/, .gitignore, README); never overwrites a file (portcullis init --help)
  portcullis build [--config FILE]         the project's config built into its bundle (.portcullis/build/config.js)
  portcullis deploy [--dry-run] [--generate-key]
                        from a project to a hosted gateway: D1 (and KV for OAuth) created, migrations,
                        secrets checked, wrangler deploy, /healthz and /readyz probed (portcullis deploy --help)
  portcullis start [--port N] [--upstream-port N] [--persist-to DIR]
                        demo upstream (127.0.0.1 only) + gateway on http://127.0.0.1:8787/mcp
  portcullis demo-upstream [--port N]      the bundled demo upstream alone, on 127.0.0.1:3001 only
  portcullis dev [--config FILE] [--port N] [--persist-to DIR]
                        local gateway with that config (in a project, its portcullis.yaml); once it is up it
                        prints, as start does, the classification banner, the console URL, an approver
                        sign-in and a try-it recipe
  portcullis check --config FILE [--json]  validate a config and report every problem
  portcullis check --self-probe [--port N] [--json]
                        fail-closed self-probe: a local gateway whose ledger cannot be written must refuse
                        a real tools/call before it reaches the upstream: exit 0 PASS, 1 FAIL
                        (portcullis check --help)
  portcullis doctor --config FILE [--local|--deployed] [--json]
                        check the config statically, egress rules included: exit 1 naming each
                        refused upstream and its reason (all at once), 0 when sound
  portcullis doctor --config FILE --live [--timeout 5s] [--json]
                        also contact each upstream (tools/list) and report its reachability: exit 1
                        when one is unreachable (portcullis doctor --help)
  portcullis doctor --clients [--client C] [--path FILE] [--offline]  servers a client reaches directly (ungoverned)
                        and a missing gateway entry: exit 1 when found (portcullis doctor --clients --help)
  portcullis import --client claude-code|claude-desktop|cursor|vscode [--path FILE] [--config FILE] [--offline] [--dry-run]
                        a client's HTTP servers become upstreams (secrets by reference) and leave the client file,
                        which is backed up once and gets the gateway entry; stdio and OAuth servers stay in it,
                        named as not governed; with --bridge [--bridge-port N] each stdio server becomes an upstream
                        served by portcullis bridge (portcullis import --help)
  portcullis restore --client C [--path FILE]  put the client file back from that backup
  portcullis bridge --port N [--secret-file FILE] [--log FILE] -- COMMAND [ARG...]
                        a stdio MCP server as Streamable HTTP on 127.0.0.1:N behind a bearer secret (mode 0600
                        file, never printed), one process per session, restarted on exit (portcullis bridge --help)
  portcullis add --config FILE --name NAME --url URL [--header "K: V"]... [--gateway URL] [--dry-run]
                        register an upstream in FILE (comments kept, validated whole, inline secrets
                        refused) and, with --gateway, hot-add it to that gateway (portcullis add --help)
  portcullis token mint --sub PRINCIPAL [--team T] [--role R,...] [--tools GLOB,...] [--ttl 1h]
                        [--port N | --gateway URL | --aud URL] [--iss ISS] [--key FILE]
                        locally, with the dev key, for one gateway:
                          --port N       the local gateway on port N: iss = aud = http://127.0.0.1:N
                          --gateway URL  the gateway at URL (its /mcp endpoint will do): iss = aud = URL
                          --aud URL      aud = URL, iss = --iss or the same URL
                        default: --port 8787; --iss overrides the issuer in every case;
                        the dev key is .portcullis/dev-signing-key.json (PORTCULLIS_DEV_KEY_FILE overrides)
  portcullis token mint --url GATEWAY --sub ...  through POST /v1/grants (admin token in PORTCULLIS_TOKEN)
  portcullis token revoke JTI --url GATEWAY [--exp SECONDS] [--json]
                        revoke a grant (admin token in PORTCULLIS_TOKEN; portcullis token revoke --help)
  portcullis token enroll --url GATEWAY --sub PRINCIPAL [--role R,...] [--tools GLOB,...] [--ttl 8h] [--code-ttl 24h] [--json]
                        a one-time enrollment code with which a person signs in a hosted MCP client
                        (Claude, ChatGPT, VS Code) over OAuth; prints the code and the URL to use
                        (admin token in PORTCULLIS_TOKEN; portcullis token enroll --help)
  portcullis keys generate [--out FILE] [--kid KID] [--stdout] [--json]
                        a new Ed25519 signing key in FILE (mode 0600, never overwritten), its public
                        JWKS and the wrangler secret put line (portcullis keys --help)
  portcullis keys rotate --key FILE [--out FILE] [--kid KID] [--json]
                        a key set: a new key signs, the old ones keep verifying
  portcullis ledger verify|export|trace ...  the ledger: verify an export offline, export or trace
                        from a gateway (portcullis ledger --help)
  portcullis classify --config FILE [--json] [--live]
                        read every upstream's tools/list and print the classification banner
                        (OK / NOTE / WARN / BLOCK per tool, with totals); exit 1 on a BLOCK or an
                        unreachable upstream (portcullis classify --help)
  portcullis suggest-manifest --config FILE --upstream NAME [--out FILE] [--force]
                        draft a mappings/<upstream>.yaml from its tools/list, to review before it
                        goes into mappings_dir; never overwrites (portcullis suggest-manifest --help)
  portcullis holds list|show|approve|reject ... --url GATEWAY
                        held calls: list (pending by default), show one, approve or reject it
                        (portcullis holds --help); the token in PORTCULLIS_TOKEN
  portcullis runs list|show|rollback ... --url GATEWAY
                        runs (a session or Portcullis-Run-Id): list, show steps and the rollback plan,
                        roll back newest first (a dry run unless --confirm; portcullis runs --help)
  portcullis halt --scope S [--target T] --reason R --url GATEWAY
  portcullis resume --scope S [--target T] --reason R --url GATEWAY
  portcullis status --url GATEWAY [--json]
                        the kill switch: scopes global | team | upstream | tool | principal | grant
  portcullis reload --config FILE --url GATEWAY [--json]
                        hot-reload upstreams, mappings and policy into a running gateway (validated whole;
                        a refused config keeps the old one serving; portcullis reload --help)
Every command answers --help (or -h) with its usage on stdout (exit 0). An unknown option, a missing
required one or an unexpected argument exits 2, naming it and pointing at the command's --help.`;

/** The options of the commands dispatched here with their own parser (help.test.ts checks each --help names them all). */
export const KNOWN = { ...DEMO, ...LOCAL, ...TOKEN, ...PROJECT, ...DEPLOY };

/**
 * Runs `portcullis <argv…>` (the words after the command name). Each command exits this process
 * with its code, or returns while its children run (dev, start, demo-upstream) or once it has set
 * `process.exitCode`.
 */
export async function main(argv: string[]): Promise<void> {
  const [cmd, ...rest] = argv;
  // `portcullis` alone: the usage on stderr, exit 0 (as before); --help / -h / help: on stdout.
  if (cmd === undefined) {
    console.error(USAGE);
    process.exit(0);
  }
  if (isHelp(cmd)) {
    console.log(USAGE);
    return;
  }
  const has = (...flags: string[]) => rest.some((w) => flags.includes(w) || flags.some((f) => w.startsWith(`${f}=`)));
  if (cmd === "init" || cmd === "build") {
    // cli/project.ts owns the gateway project: its files and its built config.
    const { initCommand, buildCommand } = await import("./project.ts");
    process.exit(await (cmd === "init" ? initCommand : buildCommand)(rest));
  }
  if (cmd === "deploy") {
    const { deployCommand } = await import("./deploy.ts");
    process.exit(await deployCommand(rest));
  }
  if (cmd === "ledger") {
    // verify | export | trace: cli/ledger.ts owns the ledger commands and their flags.
    const { ledgerCommand } = await import("./ledger.ts");
    process.exit(await ledgerCommand(rest));
  }
  if (cmd === "holds") {
    // list | show | approve | reject: cli/holds.ts owns the hold commands and their flags.
    const { holdsCommand } = await import("./holds.ts");
    process.exit(await holdsCommand(rest));
  }
  if (cmd === "runs") {
    // list | show | rollback: cli/runs.ts owns the run commands and their flags.
    const { runsCommand } = await import("./runs.ts");
    process.exit(await runsCommand(rest));
  }
  if (cmd === "halt" || cmd === "resume" || cmd === "status") {
    // cli/killswitch.ts owns the kill-switch commands and their flags.
    const { killSwitchCommand } = await import("./killswitch.ts");
    process.exit(await killSwitchCommand(cmd, rest));
  }
  if (cmd === "reload") {
    // cli/reload.ts owns the reload command and its flags.
    const { reloadCommand } = await import("./reload.ts");
    process.exit(await reloadCommand(rest));
  }
  if (cmd === "add") {
    // cli/add.ts owns the add command, its flags and its output; the validation is cli/validate.ts's.
    const { addCommand } = await import("./add.ts");
    process.exit(await addCommand(rest));
  }
  if (cmd === "classify" || cmd === "suggest-manifest") {
    // cli/governance.ts owns these commands, their flags and their output.
    const { governanceCommand } = await import("./governance.ts");
    process.exitCode = await governanceCommand(cmd, rest);
    return;
  }
  if (cmd === "import" || cmd === "restore") {
    // cli/clients.ts owns the client-config commands, their flags and their output.
    const { clientsCommand } = await import("./clients.ts");
    process.exit(await clientsCommand(cmd, rest));
  }
  if (cmd === "bridge") {
    // cli/bridge.ts owns the bridge command; its sessions are cli/bridge-session.ts's. It runs until a signal.
    const { bridgeCommand } = await import("./bridge.ts");
    return bridgeCommand(rest);
  }
  if (cmd === "token") {
    // mint | enroll: cli/token.ts; revoke: cli/operator.ts.
    const { tokenCommand } = await import("./token.ts");
    return tokenCommand(rest);
  }
  if (cmd === "keys") {
    const { operatorCommand } = await import("./operator.ts");
    process.exit(await operatorCommand("keys", rest));
  }
  if (cmd === "doctor" && has("--clients")) {
    const { clientsCommand } = await import("./clients.ts");
    process.exit(await clientsCommand("doctor", rest));
  }
  if ((cmd === "check" && has("--self-probe", "--help", "-h")) || (cmd === "doctor" && has("--live", "--help", "-h"))) {
    // cli/operator.ts runs check --self-probe and doctor --live (and both commands' --help).
    const { operatorCommand } = await import("./operator.ts");
    process.exit(await operatorCommand(cmd, rest));
  }
  if (cmd === "doctor") return (await import("./local.ts")).doctorCommand(rest);
  if (cmd === "check") return (await import("./local.ts")).checkCommand(rest);
  if (cmd === "dev") return (await import("./local.ts")).devCommand(rest);
  if (cmd === "demo-upstream") return (await import("./demo.ts")).demoUpstreamCommand(rest);
  if (cmd === "start") return (await import("./demo.ts")).startCommand(rest);
  console.error(`portcullis: unknown command ${cmd}\n(npx portcullis --help for the commands)`);
  process.exit(2);
}
