/**
 * How the `portcullis` subcommands that talk to a running gateway (holds, halt/resume/status,
 * ledger) reach it: the --url they name, the token from --token or PORTCULLIS_TOKEN, one request
 * with that bearer (a bound on the wait where the command sets one), the gateway's reason on a
 * refusal, and the exit code each kind of failure maps to (1 refused, 2 usage, 3 unreachable or
 * other). What a command asks and how it reads the answer stay in its own file. Must never: print
 * or log a token, or send it anywhere but the gateway named by --url.
 */
import { UsageError } from "./cli-args.mjs";

/** The gateway refused (403/404/409, for the commands that tell these apart): exit 1. */
export class Refused extends Error {}
/** The gateway could not be reached, or answered something else: exit 3. */
export class FetchError extends Error {}

/** The gateway named by --url, as a URL; a UsageError unless it is an http(s) URL. */
export function gatewayOf(url) {
  if (typeof url !== "string") throw new UsageError("give --url GATEWAY");
  let u;
  try {
    u = new URL(url);
  } catch {
    throw new UsageError(`--url: not a URL: ${url}`);
  }
  if (u.protocol !== "https:" && u.protocol !== "http:") throw new UsageError("--url must be an http(s) URL");
  return u;
}

/** The bearer token: --token, else PORTCULLIS_TOKEN; a UsageError when neither is set. */
export function tokenOf(a) {
  const t = a.token ?? process.env.PORTCULLIS_TOKEN;
  if (!t) throw new UsageError("a token is needed: set PORTCULLIS_TOKEN (or pass --token)");
  return t;
}

/**
 * One request to `path` on the gateway `base`, with `token` as the bearer (none when null), the
 * `query` parameters that are defined, and `body` as JSON when given; waits at most `timeoutMs`
 * when set. The response whatever its status, and `where` ("METHOD origin/path", for messages);
 * a FetchError when the gateway cannot be reached or does not answer in time.
 */
export async function send(base, method, path, token, { query = {}, body, accept = "application/json", timeoutMs, redirect } = {}) {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
  const where = `${method} ${url.origin}${url.pathname}`;
  let res;
  try {
    res = await fetch(url, {
      method,
      ...(redirect !== undefined ? { redirect } : {}),
      ...(timeoutMs !== undefined ? { signal: AbortSignal.timeout(timeoutMs) } : {}),
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), accept, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  } catch (e) {
    const why = e?.name === "TimeoutError" ? `no answer within ${timeoutMs / 1000} s` : (e.cause?.code ?? e.cause?.message ?? e.message);
    throw new FetchError(`${where}: ${why}`);
  }
  return { res, where };
}

/** Every gateway command's help ends with this: where its token goes. */
export const TOKEN_NOTE = "Give the token in PORTCULLIS_TOKEN (a --token on the command line is visible to other processes on this machine).";

/** Calls the gateway; the parsed JSON on 2xx, else Refused (403/404/409) or FetchError naming the status and the gateway's reason. */
export async function callJson(base, method, path, token, { query = {}, body, timeoutMs } = {}) {
  const { res, where } = await send(base, method, path, token, { query, body, timeoutMs, redirect: "manual" });
  const answer = await answerOf(res);
  if (res.ok && answer.json !== undefined) return answer.json;
  const msg = refusal(where, res.status, answer);
  if (res.status === 403 || res.status === 404 || res.status === 409) throw new Refused(msg);
  throw new FetchError(res.ok ? `${where}: the answer is not JSON` : msg);
}

/** The answer's text and, when it is JSON, its value (else undefined). */
export async function answerOf(res) {
  const text = await res.text().catch(() => "");
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { text, json };
}

/**
 * `where → status: reason` for an answer that is not 2xx: the first of the gateway's JSON `fields`
 * that is a string, else the start of the body.
 */
export function refusal(where, status, { text, json }, fields = ["error_description", "error"]) {
  const field = fields.find((f) => typeof json?.[f] === "string");
  const reason = field !== undefined ? json[field] : text.slice(0, 300);
  return `${where} → ${status}${reason ? `: ${reason}` : ""}`;
}

/**
 * The refusal of an admin-only call, with what to do about a 401 (mint an admin grant for this
 * gateway) or a 403 (`action` needs the admin role): a 4xx is Refused (exit 1), anything else a
 * FetchError (exit 3).
 */
export function adminRefusal(where, status, answer, action) {
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
export async function exitCodeOf(label, run) {
  try {
    return await run();
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(`${label}: ${e.message}\n(${label} --help for the options)`);
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
