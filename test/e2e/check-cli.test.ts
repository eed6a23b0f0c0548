/**
 * `portcullis check --config FILE` on bad files, as an operator runs it (node bin/portcullis.mjs,
 * no gateway): a YAML error in the config, a mapping file or a policy file names that file, line
 * and column and shows the line with its neighbours and a caret; a config wrong in several layers
 * (an unknown key, an inline secret in headers, a CEL condition that does not parse) names every
 * problem at once, the unknown key with the nearest known one; each exits 1, and `--json` lists the
 * same problems. Owns its temporary directory. Must never: start a gateway or touch the network.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { root } from "./harness.ts";

const dir = mkdtempSync(join(tmpdir(), "portcullis-check-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const UP = "egress: { allow_loopback: true }\nupstreams:\n  - name: one\n    url: http://127.0.0.1:9/mcp\n";

/** Writes `files` under the temp dir and runs `portcullis check --config portcullis.yaml` there. */
function check(files: Record<string, string>, ...flags: string[]) {
  const at = mkdtempSync(join(dir, "c-"));
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(at, name, ".."), { recursive: true });
    writeFileSync(join(at, name), text);
  }
  return spawnSync(process.execPath, [join(root, "bin/portcullis.mjs"), "check", "--config", "portcullis.yaml", ...flags], {
    cwd: at,
    encoding: "utf8",
    timeout: 60_000,
  });
}

describe("portcullis check on a bad file", () => {
  it("shows a YAML error in the config with its line, the lines around it and a caret, and exits 1", () => {
    const r = check({ "portcullis.yaml": `actor: local:x\n${UP}actor: again\nmode: enforce\n` });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toContain(
      [
        "  - portcullis.yaml line 6, column 1: Map keys must be unique",
        "    5 |     url: http://127.0.0.1:9/mcp",
        "    6 | actor: again",
        "      | ^",
        "    7 | mode: enforce",
      ].join("\n"),
    );
  });

  it("names a mapping file's and a policy file's YAML error by file, line and column, with the frame", () => {
    const r = check({
      "portcullis.yaml": `${UP}mappings_dir: mappings\npolicy: policies/main.yaml\n`,
      "mappings/one.yaml": "tools:\n  read:\n    effect: read_only\n  read:\n    effect: read_only\n",
      "policies/main.yaml": "rules:\n  - id: a\n    decision: [deny\n    reason: r\n",
    });
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(
      / - mappings\/one\.yaml line 4, column 3: Map keys must be unique\n {4}3 \| {5}effect: read_only\n {4}4 \| {3}read:\n {6}\| {3}\^\n {4}5 \| /,
    );
    expect(r.stderr).toMatch(/ - policies\/main\.yaml line \d+, column \d+: [^\n]+\n {4}\d \| /);
  });

  it("names every layer's problems at once: unknown keys with a suggestion, an inline secret, a CEL condition", () => {
    const secret = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0";
    const yaml = `${UP}    namspace: true\n    headers: { Authorization: "Bearer ${secret}" }\npolicy:\n  rules:\n    - { id: a, decision: deny, reason: r, when: "args.amount >" }\n    - { id: b, decision: deny, reason: r, whn: "true" }\n`;
    const r = check({ "portcullis.yaml": yaml }, "--json");
    expect(r.status, r.stderr).toBe(1);
    const out = JSON.parse(r.stdout) as { ok: boolean; problems: string[] };
    expect(out.ok).toBe(false);
    const has = (re: RegExp) =>
      expect(
        out.problems.some((p) => re.test(p)),
        `${re} in ${JSON.stringify(out.problems, null, 2)}`,
      ).toBe(true);
    has(/^upstreams\[0\]: unknown key "namspace" — did you mean "namespace"\?$/);
    has(/^upstreams\[0\]\.headers\.Authorization: the value looks like an inline secret, .*write it as Authorization: "Bearer \$\{ONE_TOKEN\}"/);
    has(/^policy\.rules\[0\]\.when: CEL does not parse/);
    has(/^policy\.rules\[1\]: unknown key "whn" — did you mean "when"\?$/);
    expect(r.stdout + r.stderr).not.toContain(secret.slice(8, 24));
  });

  it("warns where a rule names a tool no mapping names (did you mean), and stays valid (exit 0)", () => {
    const mapping = "tools:\n  get-sum: { effect: read_only }\n  get-env: { effect: read_only }\n";
    const rules = [
      "policy:\n  rules:",
      "    - id: big-sums\n      match: { upstream: one, tool: get-summ }\n      decision: require_approval\n      reason: a typo",
      "    - id: no-env\n      match: { upstream: one, tool: get-env }\n      decision: deny\n      reason: fine",
      "    - id: counted\n      history: { count: { tool: get-sums, within: 1m } }\n      when: history.count > 5\n      decision: deny\n      reason: a typo in the history glob",
      "",
    ].join("\n");
    const r = check({ "portcullis.yaml": `mappings_dir: mappings\n${UP}${rules}`, "mappings/one.yaml": mapping });
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain("portcullis.yaml: ok");
    expect(r.stdout).toMatch(
      /warning: rule big-sums \(require_approval\): match names "upstream one", "get-summ", which matches no tool of the 2 the mappings name — did you mean "get-sum"\?/,
    );
    expect(r.stdout).toMatch(
      /warning: rule counted \(deny\): history\.count\.tool names "get-sums", which matches no tool of the 2 the mappings name — did you mean "get-sum"\?/,
    );
    expect(r.stdout).not.toContain("rule no-env");
    const j = JSON.parse(check({ "portcullis.yaml": `mappings_dir: mappings\n${UP}${rules}`, "mappings/one.yaml": mapping }, "--json").stdout);
    expect(j).toMatchObject({ ok: true, warnings: [expect.stringMatching(/^rule big-sums/), expect.stringMatching(/^rule counted/)] });
  });

  it("still passes the repo's own portcullis.yaml", () => {
    const r = spawnSync(process.execPath, [join(root, "bin/portcullis.mjs"), "check", "--config", "portcullis.yaml"], {
      cwd: root,
      encoding: "utf8",
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
  });
});
