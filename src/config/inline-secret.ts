/**
 * The inline-secret rule: whether a header value (its literal part, without `${NAME}` references)
 * carries credential material, the secret name to use instead (`GITHUB_TOKEN` for upstream
 * github's Authorization), and the one refusal message the config loader (and so `check`, `dev`,
 * `doctor`, `reload`, PUT /v1/config), `portcullis add` and `portcullis import` share. Owns those
 * patterns and that wording. Must never: include the value in a message, or import anything (bin
 * files and the Worker both load it).
 */

/** Header names whose every literal value is a credential. */
export const SENSITIVE_HEADER = /^(authorization|proxy-authorization|cookie)$|token|secret|key|auth|password|passwd|session|credential|signature/i;
/** An auth scheme word at the start of a value (`Bearer `, `Basic `, …). */
export const SCHEME = /^\s*(bearer|basic|token|apikey|api-key|digest)\s+/i;
const KNOWN_PREFIX = /(sk-|sk_live_|sk_test_|ghp_|gho_|ghu_|ghs_|github_pat_|glpat-|xox[abposr]-|AKIA|AIza|pat_|eyJ)[A-Za-z0-9_-]/;

/** True when `literal` (a header value without its `${…}` references) carries credential material. */
export function looksLikeCredential(header: string, literal: string): boolean {
  const rest = literal.replace(SCHEME, "").trim();
  if (!rest) return false;
  if (SENSITIVE_HEADER.test(header)) return true;
  if (SCHEME.test(literal)) return true;
  if (KNOWN_PREFIX.test(rest)) return true;
  return rest.split(/\s+/).some((w) => w.length >= 20 && /[A-Za-z]/.test(w) && /\d/.test(w) && /^[A-Za-z0-9_\-.+/=~]+$/.test(w));
}

const upperSnake = (s: string): string =>
  s
    .toUpperCase()
    .replace(/[^A-Z0-9]+/g, "_")
    .replace(/^_+|_+$/g, "");

/** A secret name for upstream `up`'s `header` not in `taken`: GITHUB_TOKEN for Authorization, GITHUB_X_API_KEY otherwise. */
export function secretName(up: string, header: string, taken: Set<string>): string {
  const base = `${upperSnake(up)}_${/^(proxy-)?authorization$/i.test(header) ? "TOKEN" : upperSnake(header) || "SECRET"}`.replace(/^(\d)/, "_$1");
  let name = base;
  for (let n = 2; taken.has(name); n++) name = `${base}_${n}`;
  taken.add(name);
  return name;
}

/** What every inline-secret refusal says (callers recognise their own refusals by it). */
export const INLINE_SECRET = "the value looks like an inline secret";

/**
 * Why upstream `up`'s header `header: value` may not be written so, or null when it may: the
 * `${NAME}` reference to write instead (`--header "…"` for `form: "flag"`, the quoted YAML value
 * otherwise) and how to set the secret. Never includes the value.
 */
export function inlineSecretProblem(up: string, header: string, value: string, taken: Set<string>, form: "flag" | "yaml" = "yaml"): string | null {
  const literal = value.replace(/\$\{[^}]*\}/g, "");
  if (!looksLikeCredential(header, literal)) return null;
  const secret = secretName(up, header, taken);
  const scheme = SCHEME.exec(value)?.[0].trim();
  const ref = `${scheme ? `${scheme} ` : ""}\${${secret}}`;
  const written = form === "flag" ? `--header "${header}: ${ref}"` : `${header}: "${ref}"`;
  return `${INLINE_SECRET}, which never goes in the config file (it would be committed, and shown to anyone who reads it): write it as ${written} and set the secret: export ${secret}=… for portcullis dev, npx wrangler secret put ${secret} for a deployed gateway`;
}
