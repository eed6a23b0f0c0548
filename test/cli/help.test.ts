/**
 * The `--help` contract of every `portcullis` command, table-driven, run in this process through
 * cli/main.ts (test/cli/run-cli.ts; no gateway, no network), with a check that a handful of the same
 * argument lists give the identical exit code, stdout and stderr through bin/portcullis.mjs as a
 * child process: `--help` and `-h` exit 0 with a usage on stdout
 * that names every option the command parses — the option lists are the implementation's own
 * (each cli/*.ts module's exported KNOWN table), so an option added without help fails here —
 * an unknown option (`--…` and `-…`) and a missing required option exit 2 with a message naming
 * the problem and pointing at the command's --help (as `npx portcullis <command> --help`), and every command the top-level usage lists
 * is in the table. Also: which commands offer --json. Owns nothing but the child processes it runs.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { ROOT as root, type Run, runCli, spawnCli } from "./run-cli.ts";

type Table = Record<string, string[]>;
/** A cli/ module: its exported option tables are the implementation's. */
const bin = async <T>(name: string): Promise<T> => (await import(pathToFileURL(resolve(root, "cli", name)).href)) as T;
const { KNOWN: MAIN, USAGE } = await bin<{ KNOWN: Table; USAGE: string }>("main.ts");
const { KNOWN: ADD } = await bin<{ KNOWN: string[] }>("add.ts");
const { KNOWN: RELOAD } = await bin<{ KNOWN: string[] }>("reload.ts");
const { KNOWN: CLIENTS } = await bin<{ KNOWN: Table }>("clients.ts");
const { KNOWN: GOVERNANCE } = await bin<{ KNOWN: Table }>("governance.ts");
const { KNOWN: HOLDS } = await bin<{ KNOWN: Table }>("holds.ts");
const { KNOWN: RUNS } = await bin<{ KNOWN: Table }>("runs.ts");
const { KNOWN: KILLSWITCH } = await bin<{ KNOWN: Table }>("killswitch.ts");
const { KNOWN: LEDGER } = await bin<{ KNOWN: Table }>("ledger.ts");
const { KNOWN: OPERATOR } = await bin<{ KNOWN: Table }>("operator.ts");
const { KNOWN: BRIDGE } = await bin<{ KNOWN: Table }>("bridge.ts");

/** A gateway URL nothing listens on: no command in this file may reach one. */
const NOWHERE = "http://127.0.0.1:9/";

interface Command {
  /** The command words, e.g. ["holds", "approve"]. */
  words: string[];
  /** Every option it parses (without --help, which every command takes). */
  flags: string[];
  /** Arguments that leave out a required option or argument (absent: none is required). */
  missing?: string[];
  /** Whether it has --json (a result a script would read). */
  json: boolean;
}

const union = (...lists: string[][]) => [...new Set(lists.flat())].filter((f) => f !== "help");

const COMMANDS: Command[] = [
  { words: ["init"], flags: union(MAIN.init), json: true },
  { words: ["build"], flags: union(MAIN.build), json: true },
  { words: ["deploy"], flags: union(MAIN.deploy), json: true },
  { words: ["start"], flags: union(MAIN.start), json: false },
  { words: ["demo-upstream"], flags: union(MAIN["demo-upstream"]), json: false },
  { words: ["dev"], flags: union(MAIN.dev), missing: [], json: false },
  // check --config is cli/local.ts's, check --self-probe cli/operator.ts's: one --help for both.
  { words: ["check"], flags: union(MAIN.check, OPERATOR.check), missing: [], json: true },
  // doctor --config (static) and --live, and --clients, which has a --help of its own.
  { words: ["doctor"], flags: union(MAIN.doctor, OPERATOR.doctor, ["clients"]), missing: [], json: true },
  { words: ["doctor", "--clients"], flags: union(CLIENTS.doctor).filter((f) => f !== "clients"), json: true },
  { words: ["import"], flags: union(CLIENTS.import), missing: [], json: true },
  { words: ["restore"], flags: union(CLIENTS.restore), missing: [], json: true },
  // It runs until a signal and prints for a person: no --json. Without the command after --, a usage error.
  { words: ["bridge"], flags: union(BRIDGE.bridge), missing: ["--port", "9"], json: false },
  { words: ["add"], flags: union(ADD), missing: ["--config", "portcullis.yaml", "--name", "second"], json: true },
  { words: ["token", "mint"], flags: union(MAIN["token mint"]), missing: ["--team", "t"], json: true },
  { words: ["token", "revoke"], flags: union(OPERATOR["token revoke"]), missing: ["--url", NOWHERE], json: true },
  { words: ["token", "enroll"], flags: union(MAIN["token enroll"]), missing: ["--url", NOWHERE], json: true },
  { words: ["keys", "generate"], flags: union(OPERATOR["keys generate"]), json: true },
  { words: ["keys", "rotate"], flags: union(OPERATOR["keys rotate"]), missing: [], json: true },
  { words: ["ledger", "verify"], flags: union(LEDGER.verify), missing: [], json: true },
  { words: ["ledger", "export"], flags: union(LEDGER.export), missing: [], json: true },
  { words: ["ledger", "trace"], flags: union(LEDGER.trace), missing: ["--url", NOWHERE], json: true },
  { words: ["classify"], flags: union(GOVERNANCE.classify), missing: [], json: true },
  // Its result is the draft mapping itself (YAML, printed or written): no --json.
  { words: ["suggest-manifest"], flags: union(GOVERNANCE["suggest-manifest"]), missing: ["--config", "portcullis.yaml"], json: false },
  { words: ["holds", "list"], flags: union(HOLDS.list), missing: [], json: true },
  { words: ["holds", "show"], flags: union(HOLDS.show), missing: ["--url", NOWHERE], json: true },
  { words: ["holds", "approve"], flags: union(HOLDS.approve), missing: ["--url", NOWHERE], json: true },
  { words: ["holds", "reject"], flags: union(HOLDS.reject), missing: ["--url", NOWHERE, "some-hold"], json: true },
  { words: ["runs", "list"], flags: union(RUNS.list), missing: [], json: true },
  { words: ["runs", "show"], flags: union(RUNS.show), missing: ["--url", NOWHERE], json: true },
  { words: ["runs", "rollback"], flags: union(RUNS.rollback), missing: ["--url", NOWHERE], json: true },
  { words: ["halt"], flags: union(KILLSWITCH.halt), missing: ["--url", NOWHERE, "--reason", "r"], json: true },
  { words: ["resume"], flags: union(KILLSWITCH.resume), missing: ["--url", NOWHERE, "--reason", "r"], json: true },
  { words: ["status"], flags: union(KILLSWITCH.status), missing: [], json: true },
  { words: ["reload"], flags: union(RELOAD), missing: ["--url", NOWHERE], json: true },
];
/** Command groups: `<group> --help` prints the group's commands. */
const GROUPS = ["token", "keys", "ledger", "holds", "runs"];

const ENV = { PORTCULLIS_DEV_KEY_FILE: resolve(root, ".portcullis", "help-test-never-written.json") };
const cli = (args: string[]): Promise<Run> => runCli(args, ENV);
const label = (c: Command) => `portcullis ${c.words.join(" ")}`;
/**
 * The pointer at a command's --help, as it is to be run: `npx portcullis …` (it works where
 * portcullis is a project's package, not on PATH).
 */
const pointer = (c: Command) => `npx ${label(c)} --help`;
/** `--flag` as a word of `text` (not the start of a longer option). */
const names = (text: string, flag: string) => new RegExp(`(^|[^\\w-])--${flag.replace(/[-]/g, "\\-")}(?![\\w-])`, "m").test(text);

/** Runs every argument list, one after another (in-process runs share the process's console). */
async function runAll(list: string[][]): Promise<Run[]> {
  const out: Run[] = [];
  for (const args of list) out.push(await cli(args));
  return out;
}

describe("portcullis --help", () => {
  it("every command the top-level usage lists is in the table, and the top-level --help and -h print it on stdout", async () => {
    const listed = new Set<string>();
    for (const m of USAGE.matchAll(/^ {2}portcullis ([a-z][a-z-]*)(?: ([a-z]+(?:\|[a-z]+)*)(?=\s))?/gm)) {
      for (const sub of m[2] ? m[2].split("|") : [""]) listed.add(sub ? `${m[1]} ${sub}` : m[1]!);
    }
    const table = new Set(COMMANDS.map((c) => c.words.filter((w) => !w.startsWith("-")).join(" ")));
    expect([...listed].sort()).toEqual([...table].sort());
    for (const h of ["--help", "-h", "help"]) {
      const r = await cli([h]);
      expect(r.code, h).toBe(0);
      expect(r.stdout).toBe(`${USAGE}\n`);
    }
    const unknown = await cli(["no-such-command"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command no-such-command");
    expect(unknown.stderr).toContain("portcullis --help");
  });

  it("--help and -h: exit 0, a usage on stdout naming every option the command parses", async () => {
    const args = COMMANDS.flatMap((c) => [
      [...c.words, "--help"],
      [...c.words, "-h"],
    ]);
    const runs = await runAll(args);
    const problems: string[] = [];
    COMMANDS.forEach((c, i) => {
      for (const [k, r] of [runs[2 * i]!, runs[2 * i + 1]!].entries()) {
        const how = `${label(c)} ${k === 0 ? "--help" : "-h"}`;
        if (r.code !== 0) problems.push(`${how}: exit ${r.code} (${r.stderr.slice(0, 200)})`);
        if (!r.stdout.startsWith("usage: ")) problems.push(`${how}: stdout does not start with "usage: "`);
        for (const f of c.flags) if (!names(r.stdout, f)) problems.push(`${how}: the usage does not name --${f}`);
        if (names(r.stdout, "json") !== c.json) problems.push(`${how}: --json ${c.json ? "missing" : "unexpected"}`);
      }
      expect(runs[2 * i]!.stdout, label(c)).toBe(runs[2 * i + 1]!.stdout);
    });
    expect(problems).toEqual([]);
    // Every option list came from the implementation, and --json is where the table says.
    expect(COMMANDS.every((c) => c.flags.length > 0)).toBe(true);
    expect(COMMANDS.filter((c) => c.flags.includes("json")).map(label)).toEqual(COMMANDS.filter((c) => c.json).map(label));
  });

  it("command groups answer --help and -h with their commands", async () => {
    const runs = await runAll(
      GROUPS.flatMap((g) => [
        [g, "--help"],
        [g, "-h"],
      ]),
    );
    GROUPS.forEach((g, i) => {
      for (const r of [runs[2 * i]!, runs[2 * i + 1]!]) {
        expect(r.code, g).toBe(0);
        expect(r.stdout, g).toMatch(new RegExp(`^usage: portcullis ${g} <command>`));
      }
    });
    const bad = await cli(["holds", "nope"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("unknown command nope");
  });

  it("an unknown option (--x or -x) exits 2, naming it and pointing at the command's --help", async () => {
    const args = COMMANDS.flatMap((c) => [
      [...c.words, "--no-such-option"],
      [...c.words, "-z"],
    ]);
    const runs = await runAll(args);
    const problems: string[] = [];
    COMMANDS.forEach((c, i) => {
      for (const [k, r] of [runs[2 * i]!, runs[2 * i + 1]!].entries()) {
        const opt = k === 0 ? "--no-such-option" : "-z";
        if (r.code !== 2) problems.push(`${label(c)} ${opt}: exit ${r.code}`);
        if (!r.stderr.includes(`unknown option ${opt}`)) problems.push(`${label(c)} ${opt}: stderr does not name it: ${r.stderr.slice(0, 200)}`);
        if (!r.stderr.includes(pointer(c))) problems.push(`${label(c)} ${opt}: stderr does not point at ${pointer(c)}`);
        if (r.stdout !== "") problems.push(`${label(c)} ${opt}: printed on stdout`);
      }
    });
    expect(problems).toEqual([]);
  });

  it("a missing required option or argument exits 2, naming it and pointing at the command's --help", async () => {
    const needing = COMMANDS.filter((c) => c.missing !== undefined);
    const runs = await runAll(needing.map((c) => [...c.words, ...c.missing!]));
    const problems: string[] = [];
    needing.forEach((c, i) => {
      const r = runs[i]!;
      if (r.code !== 2) problems.push(`${label(c)} ${c.missing!.join(" ")}: exit ${r.code} (${r.stderr.slice(0, 200)})`);
      if (!/give |needs /.test(r.stderr)) problems.push(`${label(c)}: stderr does not say what to give: ${r.stderr.slice(0, 200)}`);
      if (!r.stderr.includes(pointer(c))) problems.push(`${label(c)}: stderr does not point at ${pointer(c)}`);
    });
    expect(problems).toEqual([]);
  });
});

describe("the in-process runner answers as the real command does", () => {
  it("exit code, stdout and stderr are identical to bin/portcullis.mjs as a child process, for help, usage errors and group help", async () => {
    const lists = [
      ["--help"],
      [],
      ["no-such-command"],
      ["holds", "--help"],
      ["holds", "nope"],
      ["import", "-z"],
      ["token", "mint", "--team", "t"],
      ["ledger", "trace", "--url", NOWHERE],
      ["classify", "--no-such-option"],
      ["doctor", "--clients", "--help"],
    ];
    const problems: string[] = [];
    for (const args of lists) {
      const [inside, child] = [await runCli(args, ENV), await spawnCli(args, ENV)];
      if (JSON.stringify(inside) !== JSON.stringify(child))
        problems.push(`portcullis ${args.join(" ")}: in-process ${JSON.stringify(inside).slice(0, 300)} vs child ${JSON.stringify(child).slice(0, 300)}`);
    }
    expect(problems).toEqual([]);
    // Each list exercises an answer: a usage (exit 0) or a usage error (exit 2).
    const codes = await Promise.all(lists.map(async (a) => (await runCli(a, ENV)).code));
    expect(codes).toEqual([0, 0, 2, 0, 2, 2, 2, 2, 2, 0]);
  });
});
