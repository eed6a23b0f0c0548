/**
 * `portcullis ledger …`: verify a ledger export offline (`verify --file`, or fetched with
 * `verify --url`), stream an export to a file (`export`), and print one call's records (`trace`).
 * Owns argument parsing, reading files and HTTP for these commands, and their output and exit
 * codes (0 valid, 1 invalid, 2 usage, 3 the gateway could not be reached or refused); the
 * verdict itself is src/ledger/export-verifier.ts, shared with the gateway. Tokens come from --token or,
 * preferably, PORTCULLIS_TOKEN. Run as `node cli/ledger.ts <command> …` it is `portcullis ledger`.
 * Must never: print or log a token, send it anywhere but the gateway named by --url, or call an
 * export valid that src/ledger/export-verifier.ts did not.
 */
import { createReadStream, createWriteStream, type ReadStream, readFileSync, realpathSync } from "node:fs";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import { fileURLToPath } from "node:url";
import type { Checkpoint } from "../src/ledger/checkpoint.ts";
import type { ChainReceipt } from "../src/ledger/records.ts";
import type { ExportReport } from "../src/ledger/export-format.ts";
import type { ReceiptVerdict } from "../src/ledger/receipt.ts";
import { FLAG, HELP_OPTION, namesOf, type Options, REPEATED, STRING, UsageError } from "./args.ts";
import { runGroup, type Subcommand, subcommand } from "./command-group.ts";
import { answerOf, codeOf, FetchError, gatewayOf, isObject, type JsonObject, objectOf, refusal, send, tokenOf } from "./gateway-http.ts";

const HELP = {
  ledger: `usage: portcullis ledger <command> [options]
  verify   check an export offline: every hash, seq, link and signed checkpoint; exit 0 valid, 1 invalid
  export   stream a gateway's export (NDJSON) to a file or stdout
  trace    print one call's records (decision, holds, outcome)
Each command takes --help. Give the token in PORTCULLIS_TOKEN (a --token on the command line is
visible to other processes on this machine).`,
  verify: `usage: portcullis ledger verify --file EXPORT.ndjson --key JWKS_FILE [--gateway URL] [--checkpoint FILE]... [--receipt R] [--json]
       portcullis ledger verify --url GATEWAY [--team T] [--key JWKS_FILE] [--checkpoint FILE]... [--receipt R] [--json]
  VALID means: every entry of every chain (the _global chain included) re-hashes and links, and is
  covered by a checkpoint signed by one of the given keys for the gateway the export's header names.
  --file F        the export (NDJSON, as GET /v1/ledger/export returns it)
  --url GATEWAY   fetch the export from GATEWAY/v1/ledger/export (token: PORTCULLIS_TOKEN or --token),
                  and, without --key, the public keys from GATEWAY/.well-known/jwks.json (the export's
                  header must then name GATEWAY, or the URL given with --gateway)
  --team T        with --url: only team T's chain (and _global)
  --key FILE      the gateway's public keys: a JWKS {"keys": [...]} or one JWK (private parts are ignored)
  --gateway URL   the gateway these keys belong to: the export's header must name it
  --allow-unanchored-tail
                  accept entries after a chain's last signed checkpoint (reported with their count);
                  without it such a tail is INVALID, since nothing the gateway signed covers it
  --checkpoint F  a checkpoint saved earlier (its signed note, or its JSON): the export must contain what it covers
  --receipt R     a receipt {chain, seq, hash, decision_id} (JSON text, or a file; a tool result carrying
                  _meta["portcullis/receipt"] will do): also prove that call is in the verified export
  --json          print the report as JSON
  --quiet         no progress lines on stderr
exit: 0 valid, 1 invalid (first bad chain, seq and reason printed) or the receipt not proven, 2 usage, 3 fetch failed`,
  export: `usage: portcullis ledger export --url GATEWAY [--team T] [--out FILE] [--json]
  streams GATEWAY/v1/ledger/export (token: PORTCULLIS_TOKEN or --token) to FILE, or stdout;
  --json (with --out) prints {"out", "bytes", "lines"} instead of the summary on stderr
exit: 0 written, 2 usage, 3 fetch failed`,
  trace: `usage: portcullis ledger trace ID --url GATEWAY [--team T] [--json]
  prints GATEWAY/v1/ledger/ID/trace (token: PORTCULLIS_TOKEN or --token): one call's records and its status
exit: 0 found, 2 usage, 3 fetch failed or not found`,
};

const GATEWAY = { url: STRING, token: STRING, team: STRING } as const;
const VERIFY_OPTIONS = {
  file: STRING,
  ...GATEWAY,
  key: STRING,
  gateway: STRING,
  "allow-unanchored-tail": FLAG,
  checkpoint: REPEATED,
  receipt: STRING,
  json: FLAG,
  quiet: FLAG,
  ...HELP_OPTION,
} as const;
const EXPORT_OPTIONS = { ...GATEWAY, out: STRING, json: FLAG, ...HELP_OPTION } as const;
const TRACE_OPTIONS = { ...GATEWAY, json: FLAG, ...HELP_OPTION } as const;

/** The options of each command (help.test.ts checks each --help names them all). */
export const KNOWN = { verify: namesOf(VERIFY_OPTIONS), export: namesOf(EXPORT_OPTIONS), trace: namesOf(TRACE_OPTIONS) };

/** Prints a command's usage to stdout; exit 0. */
function help(cmd: Exclude<keyof typeof HELP, "ledger">): number {
  console.log(HELP[cmd]);
  return 0;
}

function readArg(what: string, file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    throw new UsageError(`${what}: cannot read ${file} (${codeOf(e)})`);
  }
}

/** A JWKS from a file: a key set, or one JWK; only public Ed25519 parts are kept. */
function jwksFrom(text: string, where: string): { keys: { kty: string; crv: string; x: string; kid?: string }[] } {
  let j: unknown;
  try {
    j = JSON.parse(text);
  } catch {
    throw new UsageError(`${where} is not JSON (a JWKS {"keys": [...]} or a JWK)`);
  }
  const keys = (isObject(j) && Array.isArray(j.keys) ? j.keys : [j])
    .filter(
      (k): k is JsonObject & { kty: "OKP"; crv: "Ed25519"; x: string } => isObject(k) && k.kty === "OKP" && k.crv === "Ed25519" && typeof k.x === "string",
    )
    .map((k) => ({ kty: k.kty, crv: k.crv, x: k.x, ...(typeof k.kid === "string" ? { kid: k.kid } : {}) }));
  if (keys.length === 0) throw new UsageError(`${where} holds no Ed25519 public key`);
  return { keys };
}

/** GET a gateway path with the bearer token; the response when 2xx, else a FetchError naming the status and the gateway's reason. */
async function get(base: URL, path: string, token: string | null, query: Record<string, string | undefined> = {}): Promise<Response> {
  const { res, where } = await send(base, "GET", path, token, { query, accept: "application/json, application/x-ndjson" });
  if (!res.ok) throw new FetchError(refusal(where, res.status, await answerOf(res), ["error"]));
  return res;
}

function receiptArg(value: string, receiptFrom: (v: unknown) => ChainReceipt | null): ChainReceipt {
  const text = value.trimStart().startsWith("{") ? value : readArg("--receipt", value);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new UsageError("--receipt is not JSON");
  }
  const r = receiptFrom(parsed);
  if (!r) throw new UsageError('--receipt holds no receipt {chain, seq, hash, decision_id} (or a result with _meta["portcullis/receipt"])');
  return r;
}

/** Saved checkpoints from a file: a signed note, a Checkpoint JSON, an array of them, or export lines. */
function checkpointsArg(files: string[]): (string | Checkpoint)[] {
  const out: (string | Checkpoint)[] = [];
  for (const f of files) {
    const text = readArg("--checkpoint", f);
    if (!text.trimStart().startsWith("{") && !text.trimStart().startsWith("[")) {
      out.push(text);
      continue;
    }
    let items: unknown;
    try {
      items = text.trimStart().startsWith("[")
        ? JSON.parse(text)
        : text
            .split("\n")
            .filter((l) => l.trim())
            .map((l) => JSON.parse(l));
    } catch {
      throw new UsageError(`--checkpoint: ${f} is neither a signed note nor checkpoint JSON`);
    }
    // Each one goes to the verifier as given: it reads its signed note and refuses one that does not verify.
    for (const c of Array.isArray(items) ? items : []) out.push(((isObject(c) ? c.checkpoint : undefined) ?? c) as Checkpoint);
  }
  return out;
}

const pad = (s: unknown, n: number) => String(s).padEnd(n);
const num = (s: unknown, n: number) => String(s).padStart(n);

function printReport(report: ExportReport, receipt: ChainReceipt | null, verdict: ReceiptVerdict | null): void {
  const h = report.header;
  const what = h ? `export of ${h.gateway}, generated ${h.generated_at}` : "export";
  console.log(`portcullis ledger verify: ${what}: ${report.ok ? "VALID" : "INVALID"}`);
  const b = report.firstBad;
  if (b) {
    const where = [b.chain ?? null, b.seq !== null ? `seq ${b.seq}` : null].filter(Boolean).join(" ") || "the export";
    console.log(`  first bad: ${where}${b.line !== null ? ` (line ${b.line})` : ""}: ${b.reason}`);
    if (report.problems.length > 1) console.log(`  ${report.problems.length} problems in all (--json lists them)`);
  }
  const names = Object.keys(report.chains);
  if (names.length) {
    const w = Math.max(8, ...names.map((n) => n.length)) + 2;
    const verified = report.ok ? () => "" : (c: ExportReport["chains"][string]) => num(c.head.seq, 10);
    console.log(`  ${pad("chain", w)}${num("entries", 9)}${report.ok ? "" : num("verified", 10)}${num("anchored", 10)}${num("unanchored", 12)}`);
    for (const n of names) {
      const c = report.chains[n];
      if (c) console.log(`  ${pad(n, w)}${num(c.entries, 9)}${verified(c)}${num(c.anchored, 10)}${num(c.unanchored, 12)}`);
    }
    if (report.ok && report.unanchoredAccepted > 0)
      console.log(`  (accepted with --allow-unanchored-tail: ${report.unanchoredAccepted} entries chained, but under no signed checkpoint yet)`);
  }
  for (const w of report.warnings) console.log(`  warning: ${w}`);
  if (receipt && verdict) {
    const r = `receipt ${receipt.chain} seq ${receipt.seq} (decision ${receipt.decision_id})`;
    console.log(verdict.ok ? `  ${r}: in the export (${verdict.kind}), under a signed checkpoint` : `  ${r}: NOT PROVEN: ${verdict.reason}`);
  }
}

/** A response body as a Node stream (fetch's web stream). */
const nodeStream = (body: ReadableStream<Uint8Array> | null): Readable => Readable.fromWeb((body ?? new ReadableStream()) as WebReadableStream<Uint8Array>);

async function verifyCommand(a: Options<typeof VERIFY_OPTIONS>): Promise<number> {
  if (a.help) return help("verify");
  if (!a.file && !a.url) throw new UsageError("give --file EXPORT or --url GATEWAY");
  if (a.team && !a.url) throw new UsageError("--team goes with --url");
  const { verifyExport } = await import("../src/ledger/export-verifier.ts");
  const { verifyReceipt, receiptFrom } = await import("../src/ledger/receipt.ts");
  const { ndjsonLines } = await import("../src/ledger/export-format.ts");
  const base = a.url ? gatewayOf(a.url) : null;
  const receipt = a.receipt ? receiptArg(a.receipt, receiptFrom) : null;
  const checkpoints = checkpointsArg(a.checkpoint);
  let jwks: ReturnType<typeof jwksFrom>;
  if (a.key) jwks = jwksFrom(readArg("--key", a.key), a.key);
  else if (base) jwks = jwksFrom(await (await get(base, "/.well-known/jwks.json", null)).text(), `${base.origin}/.well-known/jwks.json`);
  else throw new UsageError("--key JWKS_FILE is needed to check the checkpoint signatures (or --url GATEWAY to fetch its JWKS)");
  let source: ReadStream | Readable;
  if (a.file) {
    const stream = createReadStream(a.file);
    const file = a.file;
    await new Promise((ok, fail) => stream.once("open", ok).once("error", (e) => fail(new UsageError(`--file: cannot read ${file} (${codeOf(e)})`))));
    source = stream;
  } else if (base) {
    source = nodeStream((await get(base, "/v1/ledger/export", tokenOf(a), { team: a.team })).body);
  } else throw new UsageError("give --file EXPORT or --url GATEWAY");
  const progress = a.quiet ? undefined : (n: number) => process.stderr.write(`portcullis ledger verify: ${n} lines read\n`);
  // Keys fetched from --url belong to that gateway; keys from a file, to the one --gateway names (if given).
  const expected = a.gateway ? gatewayOf(a.gateway).href : base && !a.key ? base.href : undefined;
  const report = await verifyExport(ndjsonLines(source), jwks, {
    onProgress: progress,
    checkpoints,
    gateway: expected,
    allowUnanchoredTail: Boolean(a["allow-unanchored-tail"]),
    keep: receipt ? (e) => e.chain === receipt.chain && e.seq === receipt.seq : undefined,
  });
  const verdict = receipt ? verifyReceipt(receipt, report) : null;
  if (a.json) {
    const { kept: _kept, ...rest } = report;
    console.log(JSON.stringify({ ...rest, ...(verdict ? { receipt: verdict } : {}) }, null, 2));
  } else printReport(report, receipt, verdict);
  return report.ok && (!verdict || verdict.ok) ? 0 : 1;
}

async function exportCommand(a: Options<typeof EXPORT_OPTIONS>): Promise<number> {
  if (a.help) return help("export");
  if (!a.url) throw new UsageError("give --url GATEWAY");
  const base = gatewayOf(a.url);
  const res = await get(base, "/v1/ledger/export", tokenOf(a), { team: a.team });
  const out = a.out ? createWriteStream(a.out) : process.stdout;
  let bytes = 0;
  let lines = 0;
  await pipeline(
    nodeStream(res.body),
    async function* count(chunks: AsyncIterable<Buffer>) {
      for await (const chunk of chunks) {
        bytes += chunk.length;
        for (const b of chunk) if (b === 10) lines++;
        yield chunk;
      }
    },
    out,
    { end: Boolean(a.out) },
  );
  if (a.out && a.json) console.log(JSON.stringify({ out: a.out, bytes, lines }));
  else if (a.out) process.stderr.write(`portcullis ledger export: wrote ${lines} lines (${bytes} bytes) to ${a.out}\n`);
  return 0;
}

function summary(e: JsonObject): string {
  const b = objectOf(e.body);
  const kind = String(e.kind);
  if (kind === "decision") return `${b.principal} → ${b.upstream}/${b.tool}: ${b.decision}${b.rule ? ` (${b.rule})` : ""}`;
  if (kind === "outcome") return `${b.status} in ${b.duration_ms} ms${b.reason ? `: ${b.reason}` : ""}`;
  if (kind === "blocked") return `${b.tool}: refused by ${b.check}: ${b.reason}`;
  if (kind.startsWith("hold.")) return `hold ${b.hold_id}${b.approver ? ` by ${b.approver}` : ""}`;
  return "";
}

async function traceCommand(a: Options<typeof TRACE_OPTIONS>): Promise<number> {
  if (a.help) return help("trace");
  const id = a._[0];
  if (!id || a._.length > 1) throw new UsageError("give one record id: ledger trace ID --url GATEWAY");
  if (!a.url) throw new UsageError("give --url GATEWAY");
  const base = gatewayOf(a.url);
  const res = await get(base, `/v1/ledger/${encodeURIComponent(id)}/trace`, tokenOf(a), { team: a.team });
  const answer: unknown = await res.json();
  const t = objectOf(answer);
  if (a.json) console.log(JSON.stringify(answer, null, 2));
  else {
    console.log(`call ${t.id} (chain ${t.chain}): ${t.status}`);
    for (const e of Array.isArray(t.records) ? t.records.filter(isObject) : [])
      console.log(`  seq ${num(e.seq, 6)}  ${pad(e.kind, 14)} ${e.at}  ${summary(e)}`);
  }
  return 0;
}

const COMMANDS: Record<string, Subcommand> = {
  verify: subcommand(VERIFY_OPTIONS, verifyCommand),
  export: subcommand(EXPORT_OPTIONS, exportCommand),
  trace: subcommand(TRACE_OPTIONS, traceCommand),
};

/** Runs `portcullis ledger <argv…>`; the exit code. */
export const ledgerCommand = (argv: string[]): Promise<number> => runGroup("ledger", HELP.ledger, COMMANDS, argv);

if (process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))) {
  process.exitCode = await ledgerCommand(process.argv.slice(2));
}
