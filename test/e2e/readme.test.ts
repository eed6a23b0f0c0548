/**
 * The README followed on a fresh clone: what a newcomer types, extracted from README.md at test
 * time, so a README that drifts from the product fails here. Owns a temporary directory holding the
 * clone, the TMPDIR of every process it starts, and those processes (`npm install`, a background
 * `npm start`, one bash running the walkthrough), each in its own process group, stopped as a group
 * (SIGTERM, then SIGKILL after a bound), and the directory removed at the end.
 *
 * The marker convention: the Quick start's shell blocks are fenced code blocks whose info string is
 * exactly `sh readme-test`. Their commands, in README order, are the walkthrough. A command is one
 * line (lines ending in `\` continue it); blank lines and whole-line `#` comments are skipped. The
 * first command must be `npm install` and the second `npm start` (trailing comments allowed). The
 * only substitutions, all made here and nowhere in README.md:
 *   - `npm install` runs as `npm install --prefer-offline --no-audit --no-fund` (the npm cache is warm:
 *     the repo under test was just installed; `npm ci` refuses this lock, see .ci/run), and is timed;
 *   - `npm start` runs in the background as `npm start -- --port P --upstream-port U` on free ports, so
 *     a developer's gateway on 8787 (and demo upstream on 3001) is never touched, and is waited for
 *     (its printed guide and /readyz) before the next command; it is stopped at the end;
 *   - every `127.0.0.1:8787` in a command becomes `127.0.0.1:P` (no `8787` may survive that).
 * Every other command runs verbatim, in order, in one bash (`set -o pipefail`; shell variables carry
 * from one command to the next, as in the reader's terminal), in the clone, with the environment a
 * reader's shell would have: this process's, minus npm's run-script variables (`npm_*`, `INIT_CWD`,
 * `NODE`), the test runner's own (`VITEST*`, `TEST`, `NODE_ENV=test`), `PORTCULLIS_*` and every PATH
 * entry inside a node_modules (so `node`, `npm`, `npx` are
 * the machine's own; the project's Node 22 is appended only when the machine has no `node`). Each
 * command must exit 0. Then: the governed call returned a result with a ledger receipt, get-env was
 * refused by its rule, the held call was held, approved through `portcullis holds approve`, ran once
 * (one `hold.consumed`, one decision and one succeeded outcome for that hold in the exported ledger;
 * an identical retry gets the same receipt: replayed, not run again), and `ledger verify` exited 0.
 *
 * Which tree is cloned: `git clone` of this repository's HEAD, then the working tree's uncommitted
 * state copied over it — tracked files modified or deleted, and untracked files git does not ignore
 * (node_modules, .portcullis, .wrangler never go) — so the clone is what a newcomer would get if the
 * working tree were committed. In CI the tree is clean and the clone is HEAD exactly. Set
 * PORTCULLIS_README_TEST_TREE=head to test HEAD alone locally.
 *
 * Two more checks, of the pages the reference moved to: every fenced block with info string
 * `yaml readme-check` in docs/configuration.md and docs/governance.md (the worked examples and the
 * rule with every field) is a complete config that `portcullis check` accepts, run from the clone;
 * and docs/configuration.md, the configuration reference, names every key of the config, mapping
 * and policy schemas (src/config/schema.ts, egress-schema.ts, mapping-schema.ts, policy-schema.ts),
 * read from the schemas themselves.
 * Must never: leave a process running, send traffic anywhere but 127.0.0.1 (the npm registry aside,
 * which `npm install` may consult), touch the repository's own .portcullis or a developer's ports,
 * or change README.md or the pages it reads.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mappingFileSchema } from "../../src/config/mapping-schema.ts";
import { policySchema } from "../../src/config/policy-schema.ts";
import { configSchema } from "../../src/config/schema.ts";
import { freePort, groupMembers, root } from "./harness.ts";

const README = "README.md";
/** The configuration reference: every config, mapping and policy key. */
const CONFIG_REFERENCE = "docs/configuration.md";
/** The pages whose `yaml readme-check` blocks must pass `portcullis check`. */
const EXAMPLE_PAGES = [CONFIG_REFERENCE, "docs/governance.md"];
const WALKTHROUGH = "sh readme-test";
const EXAMPLE = "yaml readme-check";
const README_PORT = "127.0.0.1:8787";
const MARK = "@@readme-test";

/** The bodies of the fenced blocks of `markdown` whose info string is exactly `info`. */
function fencedBlocks(markdown: string, info: string): string[] {
  const out: string[] = [];
  for (const m of markdown.matchAll(/^```([^\n]*)\n([\s\S]*?)^```[ \t]*$/gm)) if (m[1]!.trim() === info) out.push(m[2]!);
  return out;
}

/** One block's commands: a line each (a trailing `\` continues it); blank lines and whole-line comments skipped. */
function commandsOf(block: string): string[] {
  const out: string[] = [];
  let cur = "";
  for (const line of block.split("\n")) {
    if (cur === "" && (line.trim() === "" || /^\s*#/.test(line))) continue;
    cur = cur === "" ? line : `${cur}\n${line}`;
    if (/\\\s*$/.test(line)) continue;
    out.push(cur);
    cur = "";
  }
  if (cur !== "") out.push(cur);
  return out;
}

/** A command without its trailing comment (for recognising `npm install` and `npm start`). */
const bare = (cmd: string) => cmd.replace(/\s+#.*$/, "").trim();

/** The walkthrough as one bash script: each command between markers that carry its index and exit code; the first failure ends it. */
function scriptOf(cmds: string[]): string {
  const lines = ["set -o pipefail", "exec 2>&1"];
  cmds.forEach((cmd, i) => {
    lines.push(`printf '\\n${MARK} ${i} begin\\n'`, cmd, "__rc=$?", `printf '\\n${MARK} ${i} rc=%d\\n' "$__rc"`, 'if [ "$__rc" -ne 0 ]; then exit "$__rc"; fi');
  });
  lines.push("exit 0");
  return `${lines.join("\n")}\n`;
}

interface Step {
  cmd: string;
  out: string;
  rc: number | null;
}

/** The script's output cut back into each command's output and exit code (null: it never finished). */
function stepsOf(output: string, cmds: string[]): Step[] {
  const steps: Step[] = cmds.map((cmd) => ({ cmd, out: "", rc: null }));
  const marks = [...output.matchAll(new RegExp(`\\n?${MARK} (\\d+) (begin|rc=(\\d+))\\n`, "g"))];
  marks.forEach((m, k) => {
    const i = Number(m[1]);
    if (m[2] === "begin") steps[i]!.out = output.slice(m.index + m[0].length, marks[k + 1]?.index ?? output.length);
    else steps[i]!.rc = Number(m[3]);
  });
  return steps;
}

/** This process's environment as a reader's shell would have it (see the header). */
function readerEnv(tmp: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || k.startsWith("npm_") || k === "INIT_CWD" || k === "NODE" || k.startsWith("PORTCULLIS_") || k.startsWith("VITEST")) continue;
    // What the test runner sets for itself, not what a reader's shell has.
    if ((k === "NODE_ENV" && v === "test") || k === "TEST") continue;
    env[k] = v;
  }
  const path = (process.env.PATH ?? "").split(delimiter).filter((p) => p !== "" && !p.includes("/node_modules/") && !p.endsWith("/node_modules"));
  const hasNode = path.some((p) => existsSync(join(p, "node")));
  env.PATH = [...path, ...(hasNode ? [] : [dirname(process.execPath)])].join(delimiter);
  env.TMPDIR = tmp;
  return env;
}

/** Whether something on PATH answers `name --version`. */
function onPath(name: string, env: Record<string, string>): boolean {
  try {
    execFileSync(name, ["--version"], { env, stdio: "ignore", timeout: 10_000 });
    return true;
  } catch {
    return false;
  }
}

/** Sends `sig` to process group `pgid`; false when it is gone. */
function signalGroup(pgid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Stops process group `pgid`: SIGTERM, then SIGKILL if any member is left after `graceMs`; resolves once it is empty (bounded). */
async function stopGroup(pgid: number | undefined, graceMs = 15_000): Promise<void> {
  if (pgid === undefined) return;
  signalGroup(pgid, "SIGTERM");
  for (const deadline = Date.now() + graceMs; Date.now() < deadline && groupMembers(pgid).length > 0; ) await sleep(200);
  if (groupMembers(pgid).length > 0) signalGroup(pgid, "SIGKILL");
  for (const deadline = Date.now() + 5000; Date.now() < deadline && groupMembers(pgid).length > 0; ) await sleep(100);
}

/** Process groups started here and not yet stopped. */
const groups = new Set<number>();

/** Runs a command in its own process group; its exit code, output (stdout and stderr, interleaved) and duration. Bounded by `timeoutMs`. */
function run(
  cmd: string,
  args: string[],
  opts: { cwd: string; env: Record<string, string>; timeoutMs: number },
): Promise<{ code: number | null; out: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((res) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    const pgid = child.pid;
    if (pgid !== undefined) groups.add(pgid);
    let out = "";
    const keep = (d: Buffer) => {
      out += d.toString();
    };
    child.stdout?.on("data", keep);
    child.stderr?.on("data", keep);
    const timer = setTimeout(() => {
      out += `\n[readme.test: ${cmd} ${args.join(" ")} still running after ${opts.timeoutMs} ms: killed]\n`;
      if (pgid !== undefined) signalGroup(pgid, "SIGKILL");
    }, opts.timeoutMs);
    const done = async (code: number | null) => {
      clearTimeout(timer);
      // Anything the command left in its group (a background job) goes with it.
      await stopGroup(pgid, 2000);
      if (pgid !== undefined) groups.delete(pgid);
      res({ code, out, ms: Date.now() - t0 });
    };
    child.once("error", (e) => {
      out += `\n[readme.test: could not start ${cmd}: ${e.message}]\n`;
      if (child.pid === undefined) void done(null);
    });
    // "close": after the exit and the end of its output (a leftover holding the pipes open is killed by the bound).
    child.once("close", (code) => void done(code));
  });
}

/** Connect to 127.0.0.1:`port`: "open", "refused", or another failure code. */
function probe(port: number): Promise<string> {
  return new Promise((res) => {
    const s = connect({ host: "127.0.0.1", port, timeout: 3000 });
    s.once("connect", () => {
      s.destroy();
      res("open");
    });
    s.once("timeout", () => {
      s.destroy();
      res("timeout");
    });
    s.once("error", (e: NodeJS.ErrnoException) => res(e.code === "ECONNREFUSED" ? "refused" : (e.code ?? e.message)));
  });
}

/**
 * `git clone` of HEAD into `dest`, then (unless PORTCULLIS_README_TEST_TREE=head) the working tree's
 * uncommitted state over it: modified and untracked (not ignored) files copied, deleted files removed.
 * Returns the paths it copied or removed.
 */
function cloneRepo(dest: string): string[] {
  execFileSync("git", ["clone", "--quiet", "--no-hardlinks", root, dest], { stdio: "pipe", timeout: 120_000 });
  if (process.env.PORTCULLIS_README_TEST_TREE === "head") return [];
  const ls = (...flags: string[]) =>
    execFileSync("git", ["ls-files", "-z", ...flags], { cwd: root, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 })
      .split("\0")
      .filter(Boolean);
  const deleted = new Set(ls("--deleted"));
  const touched: string[] = [];
  for (const f of deleted) {
    rmSync(join(dest, f), { force: true });
    touched.push(`-${f}`);
  }
  for (const f of new Set([...ls("--modified"), ...ls("--others", "--exclude-standard")])) {
    if (deleted.has(f) || !existsSync(join(root, f))) continue;
    mkdirSync(dirname(join(dest, f)), { recursive: true });
    copyFileSync(join(root, f), join(dest, f));
    touched.push(f);
  }
  return touched;
}

const base = mkdtempSync(join(tmpdir(), "portcullis-readme-"));
const clone = join(base, "portcullis");
const procTmp = join(base, "tmp");
mkdirSync(procTmp);
const env = readerEnv(procTmp);
let installed: { code: number | null; out: string; ms: number } | undefined;

afterAll(async () => {
  await Promise.all([...groups].map((g) => stopGroup(g)));
  rmSync(base, { recursive: true, force: true });
});

describe("the README's Quick start, followed on a fresh clone", () => {
  beforeAll(async () => {
    const t0 = Date.now();
    const overlaid = cloneRepo(clone);
    const cloned = Date.now() - t0;
    installed = await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund"], { cwd: clone, env, timeoutMs: 600_000 });
    console.log(
      `readme.test: git clone ${cloned} ms (${overlaid.length ? `${overlaid.length} uncommitted paths of the working tree copied over HEAD` : "HEAD exactly"}), npm install --prefer-offline ${installed.ms} ms (exit ${installed.code})`,
    );
  }, 660_000);

  it("runs every marked command in order: a governed call with a receipt, a denied call, a held call approved through the CLI that then runs once, and ledger verify exits 0", async () => {
    expect(installed?.code, `npm install in the clone failed:\n${installed?.out.slice(-4000)}`).toBe(0);
    const markdown = readFileSync(join(clone, README), "utf8");
    const cmds = fencedBlocks(markdown, WALKTHROUGH).flatMap(commandsOf);
    expect(cmds.length, `no \`\`\`${WALKTHROUGH} blocks in ${README}`).toBeGreaterThan(2);
    expect(bare(cmds[0]!), "the walkthrough starts with npm install").toBe("npm install");
    expect(bare(cmds[1]!), "then npm start").toBe("npm start");
    expect(onPath("curl", env), "the walkthrough uses curl: install it").toBe(true);

    const [port, upPort] = [await freePort(), await freePort()];
    const origin = `http://127.0.0.1:${port}`;
    const rest = cmds.slice(2).map((c) => c.replaceAll(README_PORT, `127.0.0.1:${port}`));
    expect(
      rest.filter((c) => /\b8787\b/.test(c)),
      "a command names port 8787 other than as 127.0.0.1:8787: it would escape the port substitution",
    ).toEqual([]);
    expect(
      rest.filter((c) => /^(npm install|npm start)$/.test(bare(c))),
      "npm install and npm start come first, once each",
    ).toEqual([]);

    // npm start, in the background on free ports, as a reader leaves it running in a first terminal.
    const t0 = Date.now();
    const start: ChildProcess = spawn("npm", ["start", "--", "--port", String(port), "--upstream-port", String(upPort)], {
      cwd: clone,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    if (start.pid !== undefined) groups.add(start.pid);
    let logs = "";
    start.stdout?.on("data", (d: Buffer) => {
      logs += d.toString();
    });
    start.stderr?.on("data", (d: Buffer) => {
      logs += d.toString();
    });
    try {
      let ready = false;
      for (let i = 0; i < 360 && !ready && start.exitCode === null; i++) {
        const healthy = await fetch(`${origin}/readyz`, { signal: AbortSignal.timeout(2000) })
          .then(async (r) => {
            await r.body?.cancel();
            return r.ok;
          })
          .catch(() => false);
        ready = healthy && logs.includes("Try it:");
        if (!ready) await sleep(500);
      }
      expect(ready, `npm start did not come up (its guide printed and /readyz ok) within 180 s:\n${logs.slice(-4000)}`).toBe(true);
      const startMs = Date.now() - t0;

      const walk = await run("bash", ["-c", scriptOf(rest)], { cwd: clone, env, timeoutMs: 300_000 });
      const steps = stepsOf(walk.out, rest);
      console.log(`readme.test: npm start ready in ${startMs} ms; ${rest.length} walkthrough commands in ${walk.ms} ms (exit ${walk.code})`);
      const report = steps.map((s, i) => `$ ${s.cmd}\n${s.out.trimEnd()}\n[step ${i}: ${s.rc === null ? "did not finish" : `exit ${s.rc}`}]`).join("\n\n");
      for (const [i, s] of steps.entries()) expect(s.rc, `walkthrough step ${i} (${s.cmd}):\n\n${report}\n\nnpm start:\n${logs.slice(-3000)}`).toBe(0);
      expect(walk.code, report).toBe(0);

      const outOf = (re: RegExp) => steps.filter((s) => re.test(s.cmd));
      const all = steps.map((s) => s.out).join("\n");
      // The governed call: a result, with its ledger receipt.
      expect(all, report).toMatch(/get-sum: result\n\s+The sum of 1 and 2 is 3\.\n\s+receipt: ledger chain local, seq \d+, decision [0-9a-f-]{36}/);
      // get-env: refused by its rule, the reason readable.
      expect(all, report).toMatch(/get-env: isError\n\s+Blocked by Portcullis: rule demo-no-env: /);
      // The held call names its hold...
      const held = /Blocked by Portcullis: this call needs approval \(rule demo-big-sums: [^\n]*It is held as (local~[0-9a-f]+)/.exec(all);
      expect(held, report).not.toBeNull();
      const hold = held![1]!;
      // ...approved from the CLI by the approver (another principal than the agent)...
      const approve = outOf(/portcullis holds approve\b/);
      expect(approve.length, "the walkthrough approves the hold with `portcullis holds approve`").toBe(1);
      expect(approve[0]!.out).toContain(`hold ${hold}: approved by human:demo-approver (on the ledger)`);
      // ...after which the identical call runs.
      expect(all, report).toMatch(/get-sum: result\n\s+The sum of 60 and 50 is 110\.\n\s+receipt: ledger chain local, seq \d+/);
      // ledger verify: exit 0 (checked above for every step), VALID, and the receipt proven.
      const verify = outOf(/portcullis ledger verify\b/);
      expect(verify.length, "the walkthrough verifies the ledger").toBeGreaterThan(0);
      expect(verify.at(-1)!.out).toMatch(/: VALID\n/);
      expect(verify.at(-1)!.out).toMatch(/receipt local seq \d+ \(decision [0-9a-f-]{36}\): in the export/);

      // Ran once: in the exported ledger, one hold.consumed, one decision and one succeeded outcome for that hold.
      const exported = join(clone, ".portcullis", "ledger.ndjson");
      expect(existsSync(exported), "the walkthrough exports the ledger to .portcullis/ledger.ndjson").toBe(true);
      type Entry = { kind: string; id: string; body: Record<string, unknown> };
      const entries = readFileSync(exported, "utf8")
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => JSON.parse(l) as { entry?: Entry })
        .flatMap((l) => (l.entry ? [l.entry] : []));
      const ofHold = (kind: string) => entries.filter((e) => e.kind === kind && e.body.hold_id === hold);
      expect(ofHold("hold.created")).toHaveLength(1);
      expect(ofHold("hold.approved")).toHaveLength(1);
      expect(ofHold("hold.approved")[0]!.body.approver).toBe("human:demo-approver");
      expect(ofHold("hold.consumed")).toHaveLength(1);
      const decisions = ofHold("decision");
      expect(decisions).toHaveLength(1);
      const outcomes = entries.filter((e) => e.kind === "outcome" && e.body.decision_id === decisions[0]!.id);
      expect(outcomes.map((e) => e.body.status)).toEqual(["succeeded"]);
      // An identical retry is replayed, not run again: the same receipt as the approved run's.
      const approvedFile = join(clone, ".portcullis", "approved.json");
      expect(existsSync(approvedFile), "the walkthrough saves the approved call's result to .portcullis/approved.json").toBe(true);
      const retry = await run("node", ["examples/call.mjs", "--url", `${origin}/mcp`, "--save", ".portcullis/retry.json", "get-sum", "a=60", "b=50"], {
        cwd: clone,
        env,
        timeoutMs: 90_000,
      });
      expect(retry.code, retry.out).toBe(0);
      const receipt = (f: string) =>
        (JSON.parse(readFileSync(join(clone, ".portcullis", f), "utf8")) as { _meta?: Record<string, unknown> })._meta?.["portcullis/receipt"];
      expect(receipt("approved.json")).toBeDefined();
      expect(receipt("retry.json")).toEqual(receipt("approved.json"));
    } finally {
      await stopGroup(start.pid);
      if (start.pid !== undefined) groups.delete(start.pid);
    }
    // Stopping npm start stopped the gateway and the demo upstream (bounded wait).
    for (const p of [port, upPort]) {
      let state = "open";
      for (let i = 0; i < 40 && state === "open"; i++) {
        state = await probe(p);
        if (state === "open") await sleep(250);
      }
      expect(state, `127.0.0.1:${p} after npm start was stopped`).toBe("refused");
    }
  }, 600_000);

  it("every worked example (```yaml readme-check in docs/configuration.md and docs/governance.md) is a complete config that `portcullis check` accepts", async () => {
    expect(installed?.code, "npm install in the clone failed").toBe(0);
    const perPage = EXAMPLE_PAGES.map((page) => fencedBlocks(readFileSync(join(clone, page), "utf8"), EXAMPLE));
    for (const [i, page] of EXAMPLE_PAGES.entries()) expect(perPage[i]!.length, `${page} has its \`\`\`${EXAMPLE} blocks`).toBeGreaterThan(0);
    const blocks = perPage.flat();
    expect(blocks.length, `the worked examples are marked \`\`\`${EXAMPLE} in ${EXAMPLE_PAGES.join(", ")}`).toBeGreaterThanOrEqual(3);
    const dir = mkdtempSync(join(procTmp, "examples-"));
    for (const [i, text] of blocks.entries()) {
      const file = join(dir, `example-${i + 1}.yaml`);
      writeFileSync(file, text);
      const r = await run(process.execPath, [join(clone, "bin", "portcullis.mjs"), "check", "--config", file], { cwd: clone, env, timeoutMs: 60_000 });
      expect(r.code, `example ${i + 1}:\n${text}\n${r.out}`).toBe(0);
      expect(r.out.trim()).toBe(`${file}: ok`);
    }
  }, 300_000);
});

type Zod = { _zod: { def: Record<string, unknown> & { type: string } } };

/** Every key path of a zod schema: `a.b`, `a[].b` in arrays, `a.<name>.b` under records. */
function keyPaths(schema: Zod, path = "", out: string[] = []): string[] {
  const d = schema._zod.def;
  switch (d.type) {
    case "object":
      for (const [k, v] of Object.entries(d.shape as Record<string, Zod>)) {
        const p = path ? `${path}.${k}` : k;
        out.push(p);
        keyPaths(v, p, out);
      }
      break;
    case "optional":
    case "default":
    case "prefault":
    case "nullable":
    case "readonly":
    case "nonoptional":
      keyPaths(d.innerType as Zod, path, out);
      break;
    case "pipe":
      keyPaths(d.in as Zod, path, out);
      break;
    case "array":
      keyPaths(d.element as Zod, `${path}[]`, out);
      break;
    case "record":
      keyPaths(d.valueType as Zod, `${path}.<name>`, out);
      break;
    case "union":
      for (const o of d.options as Zod[]) keyPaths(o, path, out);
      break;
  }
  return [...new Set(out)];
}

describe("the configuration reference (docs/configuration.md)", () => {
  it("names every key of the config, mapping and policy schemas", () => {
    const reference = readFileSync(join(root, CONFIG_REFERENCE), "utf8");
    expect(reference.startsWith("# Configuration reference\n"), `${CONFIG_REFERENCE} is the configuration reference (its title)`).toBe(true);
    const keys = [
      ...keyPaths(configSchema as unknown as Zod),
      ...keyPaths(mappingFileSchema as unknown as Zod),
      ...keyPaths(policySchema as unknown as Zod).map((k) => `policy.${k}`),
    ];
    expect(keys.length).toBeGreaterThan(100);
    expect(keys.filter((k) => !reference.includes(`\`${k}\``))).toEqual([]);
  });
});
