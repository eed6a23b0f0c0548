/**
 * The operator commands of `portcullis`: `token revoke` (a grant revoked through `POST
 * /v1/grants/:jti/revoke`, with a warning when the gateway has no record of the jti) and `keys generate | rotate` (an Ed25519 signing key, or a key set in
 * which a new key signs and the old ones only verify — the format src/identity/keys.ts parses),
 * and the dispatch of `check --self-probe` (cli/self-probe.ts) and `doctor --live`
 * (cli/doctor-live.ts). Owns these commands' flags, output and exit codes (0 ok, 1 failed or
 * refused, 2 usage, 3 unreachable); key parsing and grant minting are src/identity's. Must never:
 * print a private key on stdout without `--stdout`, write one to a file anyone else can read,
 * overwrite a file, print or log a token, or send a token anywhere but the gateway named by --url.
 */
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import type { PrivateJwk, PublicJwk } from "../src/identity/keys.ts";
import { FLAG, HELP_OPTION, namesOf, type Options, oneArgument, parseOptions, STRING, UsageError } from "./args.ts";
import { DOCTOR_OPTIONS, doctorLiveCommand } from "./doctor-live.ts";
import { adminRefusal, answerOf, codeOf, exitCodeOf, FetchError, gatewayOf, isObject, messageOf, Refused, send, TOKEN_NOTE, tokenOf } from "./gateway-http.ts";
import { HELP as LOCAL_HELP } from "./local.ts";
import { CHECK_OPTIONS, selfProbeCommand } from "./self-probe.ts";

const DEFAULT_SECRET = "PORTCULLIS_SIGNING_KEY";

export const HELP = {
  "token revoke": `usage: portcullis token revoke JTI --url GATEWAY [--exp SECONDS] [--json]
  revokes the grant whose jti is JTI on the gateway at GATEWAY (POST /v1/grants/JTI/revoke): refused
  on its next request everywhere, and a grant.revoked record on the revoker's team chain.
  --exp SECONDS  the grant's exp (seconds since the epoch), if known: the revocation is kept at least
                 until then, and never shorter than the gateway's maximum token lifetime
  --json         print the gateway's answer {revoked, until, known, note?, warning?}
  A jti the gateway has no record of (not minted through its POST /v1/grants, or that grant has
  expired, and not revoked before: known false) is revoked all the same, with a warning on stderr:
  it may be a typo, or a grant minted offline (token mint --key) or through OAuth sign-in.
  Needs an admin token. ${TOKEN_NOTE}
exit: 0 revoked, 1 refused by the gateway, 2 usage, 3 the gateway could not be reached`,
  keys: `usage: portcullis keys <command> [options]
  generate   a new Ed25519 signing key, written to a file of mode 0600
  rotate     a key set: a new key signs, the old ones keep verifying
Each command takes --help.`,
  "keys generate": `usage: portcullis keys generate [--out FILE] [--kid KID] [--secret NAME] [--stdout] [--json]
  Generates an Ed25519 signing key (a private JWK, the format auth.signing_key_secret holds) and writes
  it to FILE (default ./portcullis-signing-key.json) with mode 0600; an existing FILE is never
  overwritten. Prints the public JWKS (what GATEWAY/.well-known/jwks.json will serve) and the line
  that makes it the gateway's key: npx wrangler secret put NAME < FILE.
  --kid KID      the key id (1-128 of [A-Za-z0-9._:-]; default: its RFC 7638 thumbprint)
  --secret NAME  the Worker secret the config's auth.signing_key_secret names (default ${DEFAULT_SECRET})
  --stdout       print the private key on stdout instead of writing a file (the JWKS and the hint go
                 to stderr); only into a pipe you trust
  --json         print {kid, file, jwks, secret_command} instead of text
exit: 0 written, 1 the file exists or cannot be written, 2 usage`,
  "keys rotate": `usage: portcullis keys rotate --key FILE [--out FILE] [--kid KID] [--secret NAME] [--stdout] [--json]
  Reads the current signing-key secret from FILE (a private JWK, or a key set {keys, active}) and
  writes a key set {keys, active} to FILE.rotated.json (or --out; never overwritten, mode 0600): a new
  key is active and signs new grants and checkpoints; every key of the old secret stays in keys as
  a public key only (verify-only), so grants and ledger checkpoints it signed keep verifying. Upload
  it with npx wrangler secret put NAME < OUT. Retire an old kid by removing it from keys — not before
  its grants have expired (auth.max_token_lifetime) and, since ledger verify checks checkpoint
  signatures against the published JWKS, not while you still verify exports it signed.
  --kid KID, --secret NAME, --stdout, --json  as for keys generate
exit: 0 written, 1 FILE is not a usable key, or the output exists or cannot be written, 2 usage`,
  check: LOCAL_HELP.check,
  doctor: LOCAL_HELP.doctor,
};

const help = (cmd: keyof typeof HELP) => {
  console.log(HELP[cmd]);
  return 0;
};

// ---- token revoke ------------------------------------------------------------------------------

const REVOKE_OPTIONS = { url: STRING, token: STRING, exp: STRING, json: FLAG, ...HELP_OPTION } as const;
const JTI = /^[A-Za-z0-9_-]{8,128}$/;

async function tokenRevoke(a: Options<typeof REVOKE_OPTIONS>): Promise<number> {
  if (a.help) return help("token revoke");
  const jti = oneArgument(a, "give one grant id: npx portcullis token revoke JTI --url GATEWAY");
  if (!JTI.test(jti))
    throw new UsageError(
      "JTI must be the grant's jti (8-128 characters of [A-Za-z0-9_-]), as token mint --url prints it or the ledger's grant.minted record names it",
    );
  let exp: number | undefined;
  if (a.exp !== undefined) {
    if (!/^\d{1,12}$/.test(a.exp))
      throw new UsageError(`--exp: the grant's exp in seconds since the epoch (e.g. ${Math.floor(Date.now() / 1000) + 3600}), not ${a.exp}`);
    exp = Number(a.exp);
  }
  const base = gatewayOf(a.url);
  const { res, where } = await send(base, "POST", `/v1/grants/${encodeURIComponent(jti)}/revoke`, tokenOf(a), {
    body: exp === undefined ? {} : { exp },
    timeoutMs: 30_000,
  });
  const answer = await answerOf(res);
  if (!res.ok) throw adminRefusal(where, res.status, answer, "revoking");
  const j = answer.json;
  if (!isObject(j) || j.revoked !== jti || typeof j.until !== "number") throw new FetchError(`${where}: the answer is not a revocation`);
  if (a.json) console.log(JSON.stringify(j, null, 2));
  else console.log(`revoked ${jti}: refused on its next request; the revocation is kept until ${new Date(j.until * 1000).toISOString()}`);
  // A jti the gateway never minted (or saw revoked) is revoked all the same: a grant signed offline is valid too. Say so: it may be a typo.
  if (j.known === false)
    console.error(
      `portcullis token revoke: warning: ${typeof j.note === "string" ? j.note : "this gateway has no record of minting or revoking this jti: check it for a typo (it is revoked all the same)"}`,
    );
  if (typeof j.warning === "string") console.error(`portcullis token revoke: warning: ${j.warning}`);
  return 0;
}

// ---- keys generate | rotate --------------------------------------------------------------------

const GENERATE_OPTIONS = { out: STRING, kid: STRING, secret: STRING, stdout: FLAG, json: FLAG, ...HELP_OPTION } as const;
const ROTATE_OPTIONS = { key: STRING, ...GENERATE_OPTIONS } as const;
type KeyFlags = Options<typeof GENERATE_OPTIONS>;

/** Writes `text` to a new file of mode 0600; Refused (exit 1) when it exists or cannot be written. */
function writePrivate(file: string, text: string): void {
  try {
    writeFileSync(file, text, { mode: 0o600, flag: "wx" });
  } catch (e) {
    if (codeOf(e) === "EEXIST") throw new Refused(`${file} exists: it is never overwritten (choose another --out, or move it away first)`);
    throw new Refused(`cannot write ${file} (${codeOf(e)})`);
  }
  chmodSync(file, 0o600); // whatever the umask did
}

function secretArg(v: string | undefined): string {
  if (v === undefined) return DEFAULT_SECRET;
  if (!/^[A-Z_][A-Z0-9_]*$/.test(v)) throw new UsageError("--secret: the secret's name, as auth.signing_key_secret has it ([A-Z_][A-Z0-9_]*)");
  return v;
}

async function newKey(kid: string | undefined): Promise<{ privateJwk: PrivateJwk; publicJwk: PublicJwk }> {
  const { generateSigningKey, KID_PATTERN } = await import("../src/identity/keys.ts");
  if (kid !== undefined && !KID_PATTERN.test(kid)) throw new UsageError("--kid: 1-128 characters of [A-Za-z0-9._:-]");
  return generateSigningKey(kid);
}

interface Delivery {
  secretText: string;
  kid: string;
  jwks: { keys: unknown[] };
  out: string;
  secret: string;
  verb: string;
  extra?: Record<string, unknown>;
  lines?: string[];
}

/** Writes (or, with --stdout, prints) the secret and says what to do with it. */
function deliver(a: KeyFlags, { secretText, kid, jwks, out, secret, verb, extra = {}, lines = [] }: Delivery): number {
  if (a.stdout && a.out !== undefined) throw new UsageError("--stdout prints the key instead of writing it: drop --out");
  const file = a.stdout ? null : out;
  if (file) writePrivate(file, `${secretText}\n`);
  const command = `npx wrangler secret put ${secret} < ${file ?? "FILE"}`;
  if (a.json) {
    const report = JSON.stringify({ kid, file, jwks, secret_command: command, ...extra, ...(a.stdout ? { secret: JSON.parse(secretText) } : {}) }, null, 2);
    console.log(report);
    return 0;
  }
  const info = a.stdout ? (s: string) => console.error(s) : (s: string) => console.log(s);
  if (a.stdout) console.log(secretText);
  else info(`${verb} ${file} (mode 0600; kid ${kid} signs). Keep it out of git and out of shared directories.`);
  for (const line of lines) info(line);
  info(`public JWKS (what GATEWAY/.well-known/jwks.json will serve):\n${JSON.stringify(jwks, null, 2)}`);
  info(`make it the gateway's signing key (the secret auth.signing_key_secret names):\n  ${command}`);
  if (file) info(`then keep ${file} in your secrets manager, or delete it.`);
  return 0;
}

async function keysGenerate(a: KeyFlags): Promise<number> {
  if (a.help) return help("keys generate");
  const secret = secretArg(a.secret);
  const { privateJwk, publicJwk } = await newKey(a.kid);
  const out = typeof a.out === "string" ? a.out : "portcullis-signing-key.json";
  return deliver(a, {
    secretText: JSON.stringify(privateJwk),
    kid: privateJwk.kid,
    jwks: { keys: [publicJwk] },
    out,
    secret,
    verb: "wrote the signing key to",
  });
}

/** One key of a secret being rotated: its public parts (a verify-only entry keeps only these). */
type OldKey = { kty?: unknown; crv?: unknown; x?: unknown; kid?: unknown };

/** The public half of a JWK as keys.ts keeps it (no `d`). */
const publicOf = (k: OldKey) => ({ kty: k.kty, crv: k.crv, x: k.x, kid: k.kid, alg: "EdDSA", use: "sig" });

/**
 * The rotated secret: `{ keys: [new private JWK, every old key public only], active: new kid }`,
 * as src/identity/keys.ts parseKeySet reads it. `oldText` is the current secret (a private JWK or
 * a key set); a Refused error when it is not one parseKeySet accepts, or a kid would repeat.
 */
export async function rotatedKeySet(
  oldText: string,
  newPrivateJwk: PrivateJwk,
): Promise<{ set: { keys: (PrivateJwk | ReturnType<typeof publicOf>)[]; active: string }; retired: unknown[] }> {
  const { parseKeySet } = await import("../src/identity/keys.ts");
  try {
    await parseKeySet(oldText);
  } catch (e) {
    throw new Refused(`the current key is not a usable signing-key secret: ${messageOf(e)}`);
  }
  // parseKeySet accepted it: a JWK object, or a key set whose keys are JWK objects.
  const old: unknown = JSON.parse(oldText);
  const oldKeys: OldKey[] = (isObject(old) && Array.isArray(old.keys) ? old.keys : [old]).filter(isObject);
  if (oldKeys.some((k) => k.kid === newPrivateJwk.kid)) throw new UsageError(`--kid ${newPrivateJwk.kid} is already in the key set: choose another`);
  const set = { keys: [newPrivateJwk, ...oldKeys.map(publicOf)], active: newPrivateJwk.kid };
  const parsed = await parseKeySet(JSON.stringify(set)); // what the gateway will make of it
  if (parsed.active?.kid !== newPrivateJwk.kid) throw new Error("the rotated key set does not sign with the new key");
  return { set, retired: oldKeys.map((k) => k.kid) };
}

async function keysRotate(a: Options<typeof ROTATE_OPTIONS>): Promise<number> {
  if (a.help) return help("keys rotate");
  if (typeof a.key !== "string") throw new UsageError("give --key FILE: the current signing-key secret (a private JWK or a key set)");
  const secret = secretArg(a.secret);
  let oldText: string;
  try {
    oldText = readFileSync(a.key, "utf8");
  } catch (e) {
    throw new UsageError(`--key: cannot read ${a.key} (${codeOf(e)})`);
  }
  const { privateJwk } = await newKey(a.kid);
  const { set, retired } = await rotatedKeySet(oldText, privateJwk);
  const out = typeof a.out === "string" ? a.out : join(dirname(a.key), `${basename(a.key).replace(/\.json$/, "")}.rotated.json`);
  const jwks = { keys: set.keys.map(publicOf) };
  return deliver(a, {
    secretText: JSON.stringify(set),
    kid: privateJwk.kid,
    jwks,
    out,
    secret,
    verb: "wrote the rotated key set to",
    extra: { verify_only: retired },
    lines: [`verify-only now (their grants and checkpoints keep verifying): ${retired.join(", ")}`],
  });
}

// ---- dispatch ----------------------------------------------------------------------------------

/** The options of each operator command (help.test.ts checks each --help names them all). */
export const KNOWN = {
  "token revoke": namesOf(REVOKE_OPTIONS),
  "keys generate": namesOf(GENERATE_OPTIONS),
  "keys rotate": namesOf(ROTATE_OPTIONS),
  check: namesOf(CHECK_OPTIONS),
  doctor: namesOf(DOCTOR_OPTIONS),
};

/** One operator command: its argv parsed by its own spec, then run. */
const RUN: Record<string, (argv: string[]) => Promise<number>> = {
  "token revoke": (argv) => tokenRevoke(parseOptions(argv, REVOKE_OPTIONS, { positionals: true })),
  "keys generate": (argv) => keysGenerate(parseOptions(argv, GENERATE_OPTIONS)),
  "keys rotate": (argv) => keysRotate(parseOptions(argv, ROTATE_OPTIONS)),
  check: (argv) => selfProbeCommand(parseOptions(argv, CHECK_OPTIONS)),
  doctor: (argv) => doctorLiveCommand(parseOptions(argv, DOCTOR_OPTIONS)),
};

/**
 * Runs one operator command: `cmd` is "token revoke", "keys", "check" or "doctor"; `argv` the
 * arguments after it (for "keys", the subcommand first). The exit code.
 */
export async function operatorCommand(cmd: string, argv: string[]): Promise<number> {
  let name = cmd;
  let rest = argv;
  if (cmd === "keys") {
    const [sub, ...more] = argv;
    if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") return help("keys");
    if (sub !== "generate" && sub !== "rotate") {
      console.error(`portcullis keys: unknown command ${sub}\n${HELP.keys}`);
      return 2;
    }
    name = `keys ${sub}`;
    rest = more;
  }
  const run = Object.hasOwn(RUN, name) ? RUN[name] : undefined;
  if (!run) {
    console.error(`portcullis: unknown operator command ${cmd}`);
    return 2;
  }
  return exitCodeOf(`portcullis ${name}`, () => run(rest));
}
