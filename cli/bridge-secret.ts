/**
 * The bearer secret of a `portcullis bridge` and the names around it, shared by the bridge
 * (cli/bridge.ts) and `import --bridge` (cli/import-bridge.ts): the secret file (an existing one
 * is reused only when it is a regular file of mode 0600 holding a secret; otherwise 32 random bytes
 * in base64url are written with mode 0600, never over an existing file), the `${NAME}` the gateway
 * config reads it by (BRIDGE_<NAME>_SECRET), the bridge's default files under .portcullis/bridges/,
 * the constant-time check of a request's Authorization header, and the config snippet and the
 * line that hands the secret to a local gateway (`portcullis dev` passes each `${NAME}` a config
 * names from its environment). Must never: print, log or return the secret in a message, put it on
 * a command line, or loosen a file's mode.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { closeSync, existsSync, lstatSync, mkdirSync, openSync, readFileSync, writeSync } from "node:fs";
import { basename, dirname, join } from "node:path";

/** A secret file that cannot be used as it is (its message says why and what to do). */
export class SecretFileError extends Error {}

/** Where the bridges' files go by default (relative to the working directory). */
export const BRIDGES_DIR = join(".portcullis", "bridges");

/** A bridge name as the upstream it becomes: ^[a-z][a-z0-9-]{0,30}$ from any text. */
export function bridgeName(raw: string): string {
  let n = raw
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  if (!/^[a-z]/.test(n)) n = `mcp-${n}`.replace(/-+$/, "");
  return n.slice(0, 31).replace(/-+$/, "") || "bridge";
}

/** The `${NAME}` the gateway config reads bridge `name`'s secret by. */
export const secretNameOf = (name: string): string => `BRIDGE_${name.toUpperCase().replace(/[^A-Z0-9]+/g, "_")}_SECRET`;

/** The default secret and log files of bridge `name`. */
export const defaultFiles = (name: string) => ({ secret: join(BRIDGES_DIR, `${name}.secret`), log: join(BRIDGES_DIR, `${name}.log`) });

/** A secret file's name without .secret (the bridge name it implies). */
export const nameOfSecretFile = (file: string): string => bridgeName(basename(file).replace(/\.secret$/, ""));

const SECRET = /^[A-Za-z0-9_-]{32,512}$/;

/**
 * The secret in `file`: reused when the file exists (a regular file, mode 0600, one secret of
 * base64url characters), else 32 random bytes written there (mode 0600, the directory created
 * 0700). A file with a looser mode, or holding something else, is a SecretFileError: never
 * rewritten.
 */
export function secretFromFile(file: string): { secret: string; created: boolean } {
  if (existsSync(file)) {
    const st = lstatSync(file);
    if (!st.isFile()) throw new SecretFileError(`${file} is not a regular file: give --secret-file a file of its own`);
    const mode = st.mode & 0o777;
    if (mode !== 0o600)
      throw new SecretFileError(
        `${file} has mode ${mode.toString(8).padStart(4, "0")}: a bridge secret must be readable by its owner only (chmod 600 ${file}, or remove it for a new one)`,
      );
    const text = readFileSync(file, "utf8").trim();
    if (!SECRET.test(text))
      throw new SecretFileError(`${file} does not hold a bridge secret (32 or more base64url characters on one line): remove it for a new one`);
    return { secret: text, created: false };
  }
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const secret = randomBytes(32).toString("base64url");
  // "wx": never over a file that appeared meanwhile; the mode is set at creation, never after.
  const fd = openSync(file, "wx", 0o600);
  try {
    writeSync(fd, `${secret}\n`);
  } finally {
    closeSync(fd);
  }
  return { secret, created: true };
}

const digest = (s: string) => createHash("sha256").update(s).digest();

/**
 * Whether an Authorization header carries exactly `Bearer <secret>`: compared in constant time
 * (both sides hashed first, so neither the length nor a prefix of the secret leaks through timing).
 */
export function bearerMatches(header: string | null | undefined, secret: string): boolean {
  const m = /^Bearer +(\S+)\s*$/i.exec(header ?? "");
  return timingSafeEqual(digest(m?.[1] ?? ""), digest(secret)) && m !== null;
}

/** The upstream entry a gateway config gets for a bridge on `port`, the secret by name only. */
export function upstreamSnippet(name: string, port: number): string {
  return [
    "upstreams:",
    `  - name: ${name}`,
    `    url: http://127.0.0.1:${port}/mcp`,
    `    headers: { Authorization: "Bearer \${${secretNameOf(name)}}" }`,
    "egress:",
    "  allow_loopback: true   # the bridge is on 127.0.0.1 (honoured while the gateway is on loopback)",
  ].join("\n");
}

/** How a local gateway gets the secret: `portcullis dev` passes each `${NAME}` of its config from its environment. */
export const devSecretLine = (name: string, secretFile: string): string => `export ${secretNameOf(name)}="$(cat ${secretFile})"`;
