#!/usr/bin/env node
/**
 * The `portcullis` command. Owns argument parsing and process orchestration for local use:
 * `dev --config FILE [--port N]` (a local gateway on workerd via wrangler), `start` (the demo:
 * a bundled upstream plus a gateway in front of it), `check --config FILE` (validate a config).
 * Must never: print secret values (config errors name variables, not values).
 */
import { spawn } from "node:child_process";
import { readFileSync, realpathSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => resolve(root, "node_modules", ".bin", name);

function args(argv) {
  const out = { _: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a.startsWith("--")) {
      const [k, v] = a.slice(2).split("=", 2);
      out[k] = v ?? (argv[i + 1] && !argv[i + 1].startsWith("--") ? argv[++i] : true);
    } else out._.push(a);
  }
  return out;
}

function usage(code = 1) {
  console.error(`usage:
  portcullis start                         demo upstream + gateway on http://127.0.0.1:8787/mcp
  portcullis dev --config FILE [--port N]  local gateway with that config
  portcullis check --config FILE           validate a config and report every problem`);
  process.exit(code);
}

async function validate(file) {
  const text = readFileSync(file, "utf8");
  const { loadConfig, ConfigError } = await import(resolve(root, "src/config/load.ts"));
  try {
    loadConfig(text, { ...process.env });
    return { ok: true, text };
  } catch (e) {
    if (e instanceof ConfigError) return { ok: false, problems: e.problems, text };
    throw e;
  }
}

/** Starts wrangler dev with the config text as the PORTCULLIS_CONFIG var. Resolves to the child. */
export function startGateway({ configText, port = 8787, persistTo, stdio = "inherit", extraVars = {} }) {
  const argv = [
    "dev", "--config", resolve(root, "wrangler.toml"), "--ip", "127.0.0.1", "--port", String(port),
    "--inspector-port", "0", "--show-interactive-dev-session=false", "--log-level", "warn",
    "--var", `PORTCULLIS_CONFIG:${configText}`,
  ];
  for (const [k, v] of Object.entries(extraVars)) argv.push("--var", `${k}:${v}`);
  if (persistTo) argv.push("--persist-to", persistTo);
  return spawn(bin("wrangler"), argv, { cwd: root, stdio, env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" } });
}

async function main() {
  const a = args(process.argv.slice(2));
  const cmd = a._[0];
  if (cmd === "check") {
    if (typeof a.config !== "string") usage();
    const v = await validate(a.config);
    if (v.ok) { console.log(`${a.config}: ok`); return; }
    console.error(`${a.config}: invalid\n${v.problems.map((p) => `  - ${p}`).join("\n")}`);
    process.exit(1);
  }
  if (cmd === "dev") {
    if (typeof a.config !== "string") usage();
    const v = await validate(a.config);
    if (!v.ok) {
      console.error(`${a.config}: invalid\n${v.problems.map((p) => `  - ${p}`).join("\n")}`);
      process.exit(1);
    }
    const port = a.port ? Number(a.port) : 8787;
    const child = startGateway({ configText: v.text, port });
    console.log(`portcullis: gateway on http://127.0.0.1:${port}/mcp`);
    child.on("exit", (code) => process.exit(code ?? 0));
    return;
  }
  if (cmd === "start") {
    const upPort = Number(a["upstream-port"] ?? 3001);
    const demo = spawn(process.execPath, [resolve(root, "node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp"], {
      cwd: root, stdio: ["ignore", "inherit", "inherit"], env: { ...process.env, PORT: String(upPort) },
    });
    const configText = readFileSync(resolve(root, "portcullis.yaml"), "utf8").replaceAll("${DEMO_UPSTREAM_PORT}", String(upPort));
    const port = a.port ? Number(a.port) : 8787;
    const gw = startGateway({ configText, port });
    console.log(`portcullis: demo upstream on http://127.0.0.1:${upPort}/mcp, gateway on http://127.0.0.1:${port}/mcp`);
    const stop = () => { demo.kill(); gw.kill(); };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
    gw.on("exit", (code) => { demo.kill(); process.exit(code ?? 0); });
    demo.on("exit", () => gw.kill());
    return;
  }
  usage(cmd ? 1 : 0);
}

// Run as a command (directly, or through the node_modules/.bin symlink npx uses), not when imported.
if (process.argv[1] && realpathSync(resolve(process.argv[1])) === realpathSync(fileURLToPath(import.meta.url))) await main();
