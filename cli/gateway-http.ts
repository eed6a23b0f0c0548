/**
 * How the `portcullis` subcommands that talk to a running gateway (holds, halt/resume/status,
 * ledger, runs, reload, token) reach it: the --url they name, the token from --token or
 * PORTCULLIS_TOKEN, one request with that bearer (a bound on the wait where the command sets
 * one), the gateway's reason on a refusal, and the exit code each kind of failure maps to (1
 * refused, 2 usage, 3 unreachable or other). What a command asks and how it reads the answer stay
 * in its own file. Must never: print or log a token, or send it anywhere but the gateway named by
 * --url.
 */
import { UsageError } from "./args.ts";

/** The gateway refused (403/404/409, for the commands that tell these apart): exit 1. */
export class Refused extends Error {}
/** The gateway could not be reached, or answered something else: exit 3. */
export class FetchError extends Error {}

/** A JSON object from an answer: its fields still to be checked. */
export type JsonObject = Record<string, unknown>;

export const isObject = (v: unknown): v is JsonObject => typeof v === "object" && v !== null && !Array.isArray(v);

/** `v` if it is a JSON object, else an empty one. */
export const objectOf = (v: unknown): JsonObject => (isObject(v) ? v : {});

/** An error's message, whatever was thrown. */
export const messageOf = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A failed fetch's reason: the cause's code (ECONNREFUSED, …), else its message, else the error's. */
export function causeOf(e: unknown): string {
  const cause = e instanceof Error ? e.cause : undefined;
  if (isObject(cause) || cause instanceof Error) {
    const c = cause as { code?: unknown; message?: unknown };
    if (typeof c.code === "string") return c.code;
    if (typeof c.message === "string") return c.message;
  }
  return messageOf(e);
}

/** The code of a Node system error (ENOENT, EEXIST, …), else its message. */
export const codeOf = (e: unknown): string => {
  const code = isObject(e) || e instanceof Error ? (e as { code?: unknown }).code : undefined;
  return typeof code === "string" ? code : messageOf(e);
};

/** The gateway named by --url, as a URL; a UsageError unless it is an http(s) URL. */
export function gatewayOf(url: string | undefined): URL {
  if (typeof url !== "string") throw new UsageError("give --url GATEWAY");
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new UsageError(`--url: not a URL: ${url}`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") throw new UsageError("--url must be an http(s) URL");
  return u;
}

/** The bearer token: --token, else PORTCULLIS_TOKEN; a UsageError when neither is set. */
export function tokenOf(a: { token?: string }): string {
  const t = a.token ?? process.env.PORTCULLIS_TOKEN;
  if (!t) throw new UsageError("a token is needed: set PORTCULLIS_TOKEN (or pass --token)");
  return t;
}

export interface SendOptions {
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  accept?: string;
  timeoutMs?: number;
  redirect?: RequestRedirect;
}

/**
 * One request to `path` on the gateway `base`, with `token` as the bearer (none when null), the
 * `query` parameters that are defined, and `body` as JSON when given; waits at most `timeoutMs`
 * when set. The response whatever its status, and `where` ("METHOD origin/path", for messages);
 * a FetchError when the gateway does not answer in time or cannot be reached (`unreachable`: the
 * URL tried, and for a refused connection that the gateway may not be running).
 */
export async function send(
  base: URL,
  method: string,
  path: string,
  token: string | null,
  { query = {}, body, accept = "application/json", timeoutMs, redirect }: SendOptions = {},
): Promise<{ res: Response; where: string }> {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
  const where = `${method} ${url.origin}${url.pathname}`;
  let res: Response;
  try {
    res = await fetch(url, {
      method,
      ...(redirect !== undefined ? { redirect } : {}),
      ...(timeoutMs !== undefined ? { signal: AbortSignal.timeout(timeoutMs) } : {}),
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), accept, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch (e) {
    if (e instanceof Error && e.name === "TimeoutError") throw new FetchError(`${where}: no answer within ${(timeoutMs ?? 0) / 1000} s`);
    throw new FetchError(unreachable(url, e));
  }
  return { res, where };
}

/** What to run to start a local gateway, for a message about one that is not running. */
export const START_HINT = "npx portcullis dev --config FILE, or npx portcullis start";

/**
 * The message for a request to `url` that reached no gateway (a failed fetch `e`): the URL tried
 * and why; a refused connection adds that the gateway may not be running and how to start one.
 */
export function unreachable(url: URL, e: unknown): string {
  const code = causeOf(e);
  const at = `${url.origin}${url.pathname}`;
  if (code === "ECONNREFUSED") return `cannot reach the gateway at ${at} (connection refused): is it running? (${START_HINT})`;
  return `cannot reach the gateway at ${at} (${code})`;
}

/** Every gateway command's help ends with this: where its token goes. */
export const TOKEN_NOTE = "Give the token in PORTCULLIS_TOKEN (a --token on the command line is visible to other processes on this machine).";

/** Prints a gateway command's usage and TOKEN_NOTE on stdout; exit 0. */
export function helpWithToken(usage: string): number {
  console.log(`${usage}\n${TOKEN_NOTE}`);
  return 0;
}

/** Calls the gateway; the parsed JSON on 2xx, else Refused (403/404/409) or FetchError naming the status and the gateway's reason. */
export async function callJson(
  base: URL,
  method: string,
  path: string,
  token: string | null,
  { query = {}, body, timeoutMs }: Pick<SendOptions, "query" | "body" | "timeoutMs"> = {},
): Promise<unknown> {
  const { res, where } = await send(base, method, path, token, { query, body, timeoutMs, redirect: "manual" });
  const answer = await answerOf(res);
  if (res.ok && answer.json !== undefined) return answer.json;
  const msg = refusal(where, res.status, answer);
  if (res.status === 403 || res.status === 404 || res.status === 409) throw new Refused(msg);
  throw new FetchError(res.ok ? `${where}: the answer is not JSON` : msg);
}

/** callJson bound to wait at most `timeoutMs` (a command's own bound): the answer's object (empty when it is none). */
export const jsonCaller =
  (timeoutMs: number) =>
  async (base: URL, method: string, path: string, token: string, opts: Pick<SendOptions, "query" | "body"> = {}): Promise<JsonObject> =>
    objectOf(await callJson(base, method, path, token, { ...opts, timeoutMs }));

/** An answer's text and, when it is JSON, its value (else undefined). */
export interface Answer {
  text: string;
  json: unknown;
}

/** The answer's text and, when it is JSON, its value (else undefined). */
export async function answerOf(res: Response): Promise<Answer> {
  const text = await res.text().catch(() => "");
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {}
  return { text, json };
}

/**
 * `where → status: reason` for an answer that is not 2xx: the first of the gateway's JSON `fields`
 * that is a string, else the start of the body.
 */
export function refusal(where: string, status: number, { text, json }: Answer, fields = ["error_description", "error"]): string {
  const values = isObject(json) ? fields.map((f) => json[f]).filter((v): v is string => typeof v === "string") : [];
  const reason = values.length ? values[0] : text.slice(0, 300);
  return `${where} → ${status}${reason ? `: ${reason}` : ""}`;
}

/**
 * The refusal of an admin-only call, with what to do about a 401 (mint an admin grant for this
 * gateway) or a 403 (`action` needs the admin role): a 4xx is Refused (exit 1), anything else a
 * FetchError (exit 3).
 */
export function adminRefusal(where: string, status: number, answer: Answer, action: string): Refused | FetchError {
  const hint =
    status === 401
      ? " (the token was not accepted: mint an admin grant for this gateway)"
      : status === 403
        ? ` (the token is not an admin's: ${action} needs the admin role)`
        : "";
  const msg = `${refusal(where, status, answer)}${hint}`;
  return status >= 400 && status < 500 ? new Refused(msg) : new FetchError(msg);
}

/**
 * Runs one command as `label` (e.g. "portcullis holds list"); its exit code, or 2 on a UsageError,
 * 1 when Refused, 3 on a FetchError, each with its message on stderr. Any other error is thrown.
 */
export async function exitCodeOf(label: string, run: () => number | Promise<number>): Promise<number> {
  try {
    return await run();
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`${label}: ${e.message}\n(npx ${label} --help for the options)`);
      return 2;
    }
    if (e instanceof Refused) {
      console.error(`${label}: refused: ${e.message}`);
      return 1;
    }
    if (e instanceof FetchError) {
      console.error(`${label}: ${e.message}`);
      return 3;
    }
    throw e;
  }
}
