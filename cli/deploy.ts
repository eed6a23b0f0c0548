/**
 * `portcullis deploy`: one command from a gateway project (cli/project.ts) to a running hosted
 * gateway, through wrangler. In order: the project's wrangler.toml has every Durable Object and
 * migration this version of the package needs; the config is sound from the deployed vantage and
 * built into the bundle (.portcullis/build/config.js); the bundle is built (`wrangler deploy
 * --dry-run`: its size); the D1 database is created when wrangler.toml has no id yet (and the id
 * written there), the KV namespace only when auth.oauth is on; the D1 migrations are applied;
 * every secret the config names is set (`wrangler secret list`), the signing key generated and
 * put on request; then `wrangler deploy`, and the deployed /healthz and /readyz are probed.
 * `--dry-run` does what needs no account (the checks, the build, the bundle) and lists the rest.
 * Owns that order, its output and exit codes. Must never: put a secret on a command line (a
 * value goes to `wrangler secret put` on standard input), print one, or deploy a config that
 * failed its checks or that names a secret the Worker does not have.
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { delimiter, join, relative, resolve } from "node:path";
import type { GatewayConfig } from "../src/config/gateway-config.ts";
import { commandOptions, FLAG, HELP_OPTION, namesOf, STRING, usageError } from "./args.ts";
import { bin, root } from "./gateway-start.ts";
import { buildProjectConfig, CONFIG_MODULE, namedSecrets, packageTables, PLACEHOLDER_ID, projectOf, type WranglerTables, wranglerTables } from "./project.ts";

export const HELP = `usage: portcullis deploy [--config FILE] [--dry-run] [--generate-key] [--key-file FILE] [--json]
  from a gateway project (npx portcullis init), to a running hosted gateway, through wrangler
  (logged in: npx wrangler login, or CLOUDFLARE_API_TOKEN and CLOUDFLARE_ACCOUNT_ID), in order:
    1. wrangler.toml has every Durable Object and migration this version of portcullis needs
    2. the config is sound as deployed (portcullis doctor --deployed) and is built into the bundle
       (.portcullis/build/config.js: policy and mappings inlined; no size limit)
    3. the bundle builds (wrangler deploy --dry-run): its size
    4. the D1 ledger database exists (created, and its id written into wrangler.toml, when it has
       none yet); the OAUTH_KV namespace likewise, only when auth.oauth.enabled is true
    5. the D1 migrations are applied (wrangler d1 migrations apply --remote)
    6. every secret the config names is set (wrangler secret list), the signing key included; a
       missing signing key is generated with --generate-key (into --key-file, mode 0600) and put
       through wrangler secret put on standard input; any other missing secret stops the deploy,
       named, with the command that sets it (wrangler prompts for the value)
    7. wrangler deploy, then the deployed /healthz and /readyz are probed
  --config FILE     the project's config (default: portcullis.yaml here)
  --dry-run         steps 1-3 only (offline), and what 4-7 would do
  --generate-key    generate the signing key when the Worker has none (step 6)
  --key-file FILE   where that key is written, or read when it exists (default: .portcullis/signing-key.json)
  --json            print the report as JSON
wrangler is the first on PATH (the project's node_modules/.bin one under npx), else the project's.
exit: 0 deployed (or the dry run passed), 1 a step failed (named), 2 usage`;

const OPTIONS = { config: STRING, "dry-run": FLAG, "generate-key": FLAG, "key-file": STRING, json: FLAG, ...HELP_OPTION } as const;
export const KNOWN = { deploy: namesOf(OPTIONS) };

/** A step's line of the report. */
interface Step {
  step: string;
  ok: boolean;
  detail: string;
}

class StepFailed extends Error {}

/**
 * The wrangler this project runs: the first on PATH (under `npx` or an npm script that is the
 * project's node_modules/.bin one), else the project's, else the one beside the package.
 */
export function wranglerPath(dir: string): string {
  for (const p of (process.env.PATH ?? "").split(delimiter)) if (p && existsSync(join(p, "wrangler"))) return join(p, "wrangler");
  const local = join(dir, "node_modules", ".bin", "wrangler");
  return existsSync(local) ? local : bin("wrangler");
}

/** What the project's wrangler.toml lacks of the package's objects and migrations: the TOML to add. */
export function missingTables(project: WranglerTables, pkg: WranglerTables): string[] {
  const out: string[] = [];
  for (const o of pkg.objects)
    if (!project.objects.some((p) => p.name === o.name && p.className === o.className))
      out.push(`[[durable_objects.bindings]]\nname = "${o.name}"\nclass_name = "${o.className}"`);
  for (const m of pkg.migrations)
    if (!project.migrations.some((p) => p.tag === m.tag))
      out.push(`[[migrations]]\ntag = "${m.tag}"\nnew_sqlite_classes = [${m.classes.map((c) => `"${c}"`).join(", ")}]`);
  return out;
}

/** The first URL in wrangler's output on a line of its own (`  https://name.sub.workers.dev`), every one in order. */
export function deployedUrls(output: string): string[] {
  return [...output.matchAll(/^\s*(https?:\/\/[^\s]+?)\/?\s*(\(.*\))?\s*$/gm)].map((m) => m[1] ?? "").filter(Boolean);
}

/** Sets `database_id` of the [[d1_databases]] block whose binding is `binding` (wrangler.toml text). */
export function setDatabaseId(text: string, binding: string, id: string): string {
  const blocks = text.split(/(?=^\[\[?)/m);
  return blocks
    .map((b) =>
      /^\[\[d1_databases\]\]/.test(b) && new RegExp(`^binding\\s*=\\s*"${binding}"`, "m").test(b)
        ? b.replace(/^database_id\s*=.*$/m, `database_id = "${id}"`)
        : b,
    )
    .join("");
}

/** `portcullis deploy …`: the steps in order; exit 0 when it deployed (or the dry run passed). */
export async function deployCommand(argv: string[]): Promise<number> {
  const a = commandOptions("deploy", argv, OPTIONS, HELP);
  const config = resolve(a.config ?? "portcullis.yaml");
  if (!existsSync(config)) usageError("deploy", `${relative(process.cwd(), config)}: no such file (run it in a gateway project: npx portcullis init)`);
  const dir = projectOf(config);
  if (!dir)
    usageError(
      "deploy",
      `${relative(process.cwd(), config)} is not in a gateway project (a wrangler.toml whose main imports portcullis/worker): npx portcullis init DIR writes one`,
    );
  const steps: Step[] = [];
  const say = (s: Step) => {
    steps.push(s);
    if (!a.json) console[s.ok ? "log" : "error"](`${s.ok ? "ok  " : "FAIL"} ${s.step}: ${s.detail}`);
  };
  const fail: (step: string, detail: string) => never = (step, detail) => {
    say({ step, ok: false, detail });
    throw new StepFailed(detail);
  };
  const wrangler = wranglerPath(dir);
  const tomlFile = join(dir, "wrangler.toml");
  const run = (args: string[], { input, quiet }: { input?: string; quiet?: boolean } = {}) => {
    const r = spawnSync(wrangler, args, {
      cwd: dir,
      input,
      encoding: "utf8",
      timeout: 600_000,
      maxBuffer: 64 * 2 ** 20,
      env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" },
      stdio: ["pipe", "pipe", "pipe"],
    });
    const out = `${r.stdout ?? ""}${r.stderr ?? ""}`;
    if (!quiet && !a.json && process.env.PORTCULLIS_DEPLOY_VERBOSE) console.log(out);
    return { ok: r.status === 0, out, error: r.error };
  };
  const tail = (out: string) =>
    out
      .trim()
      .split("\n")
      .filter((l) => l.trim())
      .slice(-6)
      .join(" | ");
  let toml = wranglerTables(readFileSync(tomlFile, "utf8"));
  try {
    // 1. The package's objects and migrations (a newer portcullis may have added some).
    const missing = missingTables(toml, packageTables());
    if (missing.length) fail("wrangler.toml", `lacks what this version of portcullis needs; add:\n\n${missing.join("\n\n")}\n`);
    say({ step: "wrangler.toml", ok: true, detail: `${toml.objects.length} Durable Objects, migrations through ${toml.migrations.at(-1)?.tag ?? "none"}` });

    // 2. The config, as deployed, built into the bundle.
    const built = await buildProjectConfig(config, { onLoopback: false });
    if (!built.ok) fail("config", `${relative(process.cwd(), config)} refused as deployed:\n${built.problems.map((p) => `  - ${p}`).join("\n")}`);
    const cfg: GatewayConfig = built.cfg;
    if (!cfg.auth.required)
      fail("config", "auth.required is false: off loopback the gateway serves nothing without it (set auth.required: true and auth.audience)");
    if (!cfg.auth.audience) fail("config", "auth.audience is not set: give the URL clients use (your workers.dev URL, or wrangler.toml's custom domain)");
    say({
      step: "config",
      ok: true,
      detail: `${cfg.upstreams.length} upstream(s); ${built.bytes} bytes built into ${CONFIG_MODULE} (sha256 ${built.sha256.slice(0, 12)}…)`,
    });

    // 3. The bundle, with the bundler a deploy uses.
    const outdir = join(dir, ".portcullis", "build", "dist");
    const dry = run(["deploy", "--dry-run", "--outdir", outdir, "--config", tomlFile]);
    if (!dry.ok) fail("bundle", `wrangler deploy --dry-run failed: ${tail(dry.out)}`);
    const size = /Total Upload:\s*([^\n]+)/.exec(dry.out)?.[1]?.trim() ?? "size not reported";
    say({ step: "bundle", ok: true, detail: `${size} (in ${relative(process.cwd(), outdir)})` });

    const d1 = toml.d1.find((d) => d.binding === "LEDGER_DB");
    if (!d1?.databaseName) fail("d1", "wrangler.toml has no [[d1_databases]] with binding LEDGER_DB and a database_name");
    const needsDb = !d1!.databaseId || d1!.databaseId === PLACEHOLDER_ID;
    const oauth = cfg.auth.oauth.enabled;
    const needsKv = oauth && !toml.kv.some((k) => k.binding === "OAUTH_KV" && k.id);
    const secrets = namedSecrets(built.text);
    const wanted = [
      ...new Set([
        ...secrets.required,
        cfg.auth.signingKeySecret,
        ...(cfg.upstreams.some((u) => u.credentials.mode === "per_principal" || u.credentials.mode === "oauth") ? [cfg.credentialsKeySecret] : []),
      ]),
    ];
    if (a["dry-run"]) {
      say({
        step: "would",
        ok: true,
        detail: [
          needsDb
            ? `create the D1 database ${d1!.databaseName} and write its id into wrangler.toml`
            : `use the D1 database ${d1!.databaseName} (${d1!.databaseId})`,
          needsKv
            ? "create the OAUTH_KV namespace (auth.oauth is on) and add it to wrangler.toml"
            : oauth
              ? "use the OAUTH_KV namespace"
              : "bind no KV namespace (auth.oauth is off)",
          `apply the D1 migrations of ${d1!.migrationsDir ?? "migrations"} remotely`,
          `check the secrets ${wanted.join(", ")}${secrets.optional.length ? ` (and, when set, ${secrets.optional.join(", ")})` : ""}`,
          "wrangler deploy, then probe /healthz and /readyz",
        ].join("; "),
      });
      report(a.json, steps, true);
      return 0;
    }

    // 4. The D1 database (and KV only for auth.oauth), created once.
    if (needsDb) {
      const c = run(["d1", "create", d1!.databaseName!]);
      const id = /([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/.exec(c.out)?.[1];
      if (!c.ok || !id) fail("d1", `wrangler d1 create ${d1!.databaseName} failed: ${tail(c.out)}`);
      writeFileSync(tomlFile, setDatabaseId(readFileSync(tomlFile, "utf8"), "LEDGER_DB", id!));
      say({ step: "d1", ok: true, detail: `created ${d1!.databaseName} (${id}); its id is in wrangler.toml now (commit it)` });
    } else say({ step: "d1", ok: true, detail: `${d1!.databaseName} (${d1!.databaseId})` });
    if (needsKv) {
      const c = run(["kv", "namespace", "create", "OAUTH_KV"]);
      const id = /\b([0-9a-f]{32})\b/.exec(c.out)?.[1];
      if (!c.ok || !id) fail("kv", `wrangler kv namespace create OAUTH_KV failed: ${tail(c.out)}`);
      writeFileSync(
        tomlFile,
        `${readFileSync(tomlFile, "utf8").trimEnd()}\n\n# OAuth for hosted clients (auth.oauth): added by npx portcullis deploy.\n[[kv_namespaces]]\nbinding = "OAUTH_KV"\nid = "${id}"\n`,
      );
      say({ step: "kv", ok: true, detail: `created OAUTH_KV (${id}); it is in wrangler.toml now (commit it)` });
    } else if (oauth) say({ step: "kv", ok: true, detail: "OAUTH_KV is bound" });
    toml = wranglerTables(readFileSync(tomlFile, "utf8"));

    // 5. The ledger's schema.
    const m = run(["d1", "migrations", "apply", d1!.databaseName!, "--remote", "--config", tomlFile]);
    if (!m.ok) fail("migrations", `wrangler d1 migrations apply failed: ${tail(m.out)}`);
    say({ step: "migrations", ok: true, detail: /No migrations to apply/i.test(m.out) ? "up to date" : "applied" });

    // 6. The secrets the config names, and the signing key.
    const listed = run(["secret", "list", "--format", "json", "--config", tomlFile], { quiet: true });
    let have: string[] = [];
    if (listed.ok) {
      try {
        have = (JSON.parse(listed.out.slice(listed.out.indexOf("["))) as { name: string }[]).map((s) => s.name);
      } catch {
        fail("secrets", `wrangler secret list answered something that is not a list: ${tail(listed.out)}`);
      }
    } else if (!/not found|does not exist|10007/i.test(listed.out)) fail("secrets", `wrangler secret list failed: ${tail(listed.out)}`);
    const signing = cfg.auth.signingKeySecret;
    if (!have.includes(signing)) {
      const keyFile = resolve(a["key-file"] ?? join(dir, ".portcullis", "signing-key.json"));
      if (!a["generate-key"] && !a["key-file"])
        fail(
          "secrets",
          `the Worker has no signing key (${signing}): run deploy again with --generate-key (writes ${relative(process.cwd(), keyFile)}, mode 0600, and puts it on standard input), or put your own: npx wrangler secret put ${signing} < KEYFILE`,
        );
      if (!existsSync(keyFile)) {
        if (!a["generate-key"]) fail("secrets", `--key-file ${keyFile}: no such file (add --generate-key to write a new key there)`);
        // `portcullis keys generate` itself: the key goes to a new file of mode 0600, never to output.
        const g = spawnSync(
          process.execPath,
          [resolve(root, "bin", "portcullis.mjs"), "keys", "generate", "--out", keyFile, "--kid", `${toml.name ?? "gateway"}-1`, "--json"],
          {
            encoding: "utf8",
            stdio: ["ignore", "pipe", "pipe"],
          },
        );
        if (g.status !== 0) fail("secrets", `portcullis keys generate failed: ${tail(`${g.stdout}${g.stderr}`)}`);
      }
      const put = run(["secret", "put", signing, "--config", tomlFile], { input: readFileSync(keyFile, "utf8"), quiet: true });
      if (!put.ok) fail("secrets", `wrangler secret put ${signing} failed: ${tail(put.out)}`);
      have.push(signing);
      say({
        step: "signing key",
        ok: true,
        detail: `${signing} put from ${relative(process.cwd(), keyFile)} (keep that file: token mint --key needs it; never commit it)`,
      });
    }
    const absent = wanted.filter((n) => !have.includes(n));
    if (absent.length)
      fail(
        "secrets",
        `not set on the Worker: ${absent.join(", ")}. Set each (wrangler prompts for the value, or reads it from standard input), then deploy again:\n${absent.map((n) => `  npx wrangler secret put ${n}`).join("\n")}`,
      );
    say({
      step: "secrets",
      ok: true,
      detail: `${wanted.join(", ")} set${secrets.optional.filter((n) => !have.includes(n)).length ? `; not set, their fallbacks apply: ${secrets.optional.filter((n) => !have.includes(n)).join(", ")}` : ""}`,
    });

    // 7. Deploy, then probe what it printed.
    const d = run(["deploy", "--config", tomlFile]);
    if (!d.ok) fail("deploy", `wrangler deploy failed: ${tail(d.out)}`);
    const urls = deployedUrls(d.out);
    const url = urls[0];
    if (!url) fail("deploy", `deployed, but wrangler printed no URL to probe: ${tail(d.out)}`);
    say({ step: "deploy", ok: true, detail: `deployed: ${urls.join(", ")}` });
    const probe = await probeDeployed(url!);
    if (!probe.ok) fail("probe", probe.detail);
    say({ step: "probe", ok: true, detail: probe.detail });
    const aud = cfg.auth.audience!;
    const audOrigin = new URL(aud).origin;
    if (!urls.some((u) => new URL(u).origin === audOrigin))
      say({
        step: "audience",
        ok: true,
        detail: `clients use auth.audience ${aud}; wrangler printed ${urls.join(", ")}: check that the audience is one of them (or a route of wrangler.toml)`,
      });
    report(a.json, steps, true, {
      url,
      next: [
        `export PORTCULLIS_TOKEN="$(npx portcullis token mint --key ${relative(process.cwd(), resolve(a["key-file"] ?? join(dir, ".portcullis", "signing-key.json")))} --gateway ${aud} --sub human:you --team ops --role admin --ttl 1h)"`,
        `npx portcullis status --url ${aud}`,
        `npx portcullis import --client claude-code --gateway ${aud}   # connect a client (an agent grant: npx portcullis token mint --url ${aud} --sub agent:NAME --team T --tools 'GLOB')`,
      ],
    });
    return 0;
  } catch (e) {
    if (!(e instanceof StepFailed)) throw e;
    report(a.json, steps, false);
    return 1;
  }
}

function report(json: boolean | undefined, steps: Step[], ok: boolean, extra: { url?: string; next?: string[] } = {}): void {
  if (json) {
    console.log(JSON.stringify({ ok, steps, ...extra }, null, 2));
    return;
  }
  if (extra.url) console.log(`\nportcullis: the gateway is at ${extra.url}`);
  if (extra.next) console.log(`next:\n${extra.next.map((l) => `  ${l}`).join("\n")}`);
}

/** GET /healthz and /readyz at `url`, retried for a while (a new deploy may take seconds to be served). */
export async function probeDeployed(url: string, { tries = 10, waitMs = 2000, timeoutMs = 5000 } = {}): Promise<{ ok: boolean; detail: string }> {
  let last = "";
  for (let i = 0; i < tries; i++) {
    try {
      const h = await fetch(new URL("/healthz", url), { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
      const r = await fetch(new URL("/readyz", url), { signal: AbortSignal.timeout(timeoutMs), redirect: "manual" });
      const body = await r.text();
      if (h.status === 200 && r.status === 200) return { ok: true, detail: `/healthz 200, /readyz 200` };
      last = `/healthz ${h.status}, /readyz ${r.status} ${body.slice(0, 300)}`;
    } catch (e) {
      last = `${url} did not answer (${(e as Error).message})`;
    }
    if (i < tries - 1) await new Promise((r) => setTimeout(r, waitMs));
  }
  return { ok: false, detail: last };
}
