/**
 * The egress decision for one URL. Owns: parsing the URL exactly once with the WHATWG parser (the
 * one `fetch` uses, which canonicalises decimal/octal/hex/short IPv4, IDNA, fullwidth digits,
 * percent-encoding), then deciding on that parsed hostname: scheme, userinfo, cloud metadata
 * names and addresses, loopback, reserved name suffixes, the host allowlist, IP literals and
 * ports. The caller fetches the URL object returned here. Must never: look at the raw string
 * again after parsing (no regexes on the input), resolve DNS, let a metadata name or address
 * through under any setting, or echo a full URL in a reason (queries may carry secrets).
 */
import { classifyHostLiteral, isMetadataName, isUnder } from "../wire/hosts.ts";
import type { EgressRules } from "../config/egress-schema.ts";
import { Memo } from "../wire/memo.ts";

export interface EgressContext {
  /** True when the gateway itself listens on loopback (local dev); gates `allow_loopback`. */
  gatewayOnLoopback: boolean;
}

export type EgressDecision = { ok: true; url: URL } | { ok: false; reason: string };

/** Workers refuse URLs above 16 KB; refuse them here with a clear reason instead. */
const MAX_URL_LENGTH = 16 * 1024;

/** Suffixes that only resolve on private resolvers: denied unless the name matches `hosts`. */
const PRIVATE_SUFFIXES: readonly string[] = [
  "internal",
  "local",
  "localdomain",
  "home.arpa",
  "arpa",
  "intranet",
  "corp",
  "lan",
  "home",
  "private",
  "svc",
  "test",
  "invalid",
];

/** Wildcard-DNS services that resolve a name to the address it spells: denied unless in `hosts`. */
const WILDCARD_DNS: readonly string[] = [
  "nip.io",
  "xip.io",
  "sslip.io",
  "nip.direct",
  "traefik.me",
  "localtest.me",
  "lvh.me",
  "vcap.me",
  "lacolhost.com",
  "localh.st",
  "fuf.me",
  "localdev.me",
  "1u.ms",
  "rbndr.us",
];

// ---------------------------------------------------------------------------------------------
// Punycode (RFC 3492) decoding, so `xn--` spellings of denied names are seen for what they say.

const BASE = 36,
  TMIN = 1,
  TMAX = 26,
  SKEW = 38,
  DAMP = 700,
  MAXINT = 0x7fffffff;

function adapt(delta: number, points: number, first: boolean): number {
  let d = first ? Math.floor(delta / DAMP) : delta >> 1;
  d += Math.floor(d / points);
  let k = 0;
  while (d > ((BASE - TMIN) * TMAX) >> 1) {
    d = Math.floor(d / (BASE - TMIN));
    k += BASE;
  }
  return k + Math.floor(((BASE - TMIN + 1) * d) / (d + SKEW));
}

function digitOf(c: number): number {
  if (c >= 48 && c <= 57) return c - 22;
  if (c >= 65 && c <= 90) return c - 65;
  if (c >= 97 && c <= 122) return c - 97;
  return BASE;
}

/** Decodes the part after `xn--`; null when it is not valid punycode. */
export function punycodeDecode(input: string): string | null {
  if (input.length > 63) return null;
  const out: number[] = [];
  const delim = input.lastIndexOf("-");
  for (let j = 0; j < Math.max(delim, 0); j++) {
    const c = input.charCodeAt(j);
    if (c >= 0x80) return null;
    out.push(c);
  }
  let n = 128,
    i = 0,
    bias = 72;
  for (let idx = delim > 0 ? delim + 1 : 0; idx < input.length; ) {
    const oldi = i;
    let w = 1;
    for (let k = BASE; ; k += BASE) {
      if (idx >= input.length) return null;
      const digit = digitOf(input.charCodeAt(idx++));
      if (digit >= BASE || digit > Math.floor((MAXINT - i) / w)) return null;
      i += digit * w;
      const t = k <= bias ? TMIN : k >= bias + TMAX ? TMAX : k - bias;
      if (digit < t) break;
      if (w > Math.floor(MAXINT / (BASE - t))) return null;
      w *= BASE - t;
    }
    const len = out.length + 1;
    bias = adapt(i - oldi, len, oldi === 0);
    if (Math.floor(i / len) > MAXINT - n) return null;
    n += Math.floor(i / len);
    i %= len;
    if (n > 0x10ffff || (n >= 0xd800 && n <= 0xdfff)) return null;
    out.splice(i, 0, n);
    i++;
  }
  return String.fromCodePoint(...out);
}

/** The name with every `xn--` label decoded and NFKC-lowercased; null if a label is invalid. */
function unicodeForm(name: string): string | null {
  const labels: string[] = [];
  for (const label of name.split(".")) {
    if (!label.startsWith("xn--")) {
      labels.push(label);
      continue;
    }
    const u = punycodeDecode(label.slice(4));
    if (u === null) return null;
    labels.push(u.normalize("NFKC").toLowerCase());
  }
  return labels.join(".");
}

// ---------------------------------------------------------------------------------------------

/** `*.d` matches names one or more labels below `d` (not `d` itself); other patterns match exactly. */
export function matchesHostPattern(host: string, pattern: string): boolean {
  const p = pattern.toLowerCase().replace(/\.$/, "");
  return p.startsWith("*.") ? host.endsWith(p.slice(1)) && host.length > p.length - 1 : host === p;
}

const isLoopbackName = (name: string): boolean => isUnder(name, "localhost");

type HostClass = { kind: "loopback" } | { kind: "public"; listed: boolean } | { kind: "refused"; reason: string };

function classifyName(name: string, rules: EgressRules): HostClass {
  if (name === "" || name.split(".").some((l) => l === "")) return { kind: "refused", reason: "host name has an empty label" };
  const decoded = unicodeForm(name);
  if (decoded === null) return { kind: "refused", reason: "host name has an invalid punycode (xn--) label" };
  const forms = decoded === name ? [name] : [name, decoded];
  if (forms.some(isMetadataName)) return { kind: "refused", reason: "cloud metadata host name" };
  if (isLoopbackName(name)) return { kind: "loopback" };
  if (isLoopbackName(decoded)) return { kind: "refused", reason: "host name spells a loopback name in punycode" };
  const listed = rules.hosts.some((p) => matchesHostPattern(name, p));
  if (rules.hosts.length > 0 && !listed) return { kind: "refused", reason: `host ${name} is not in egress.hosts` };
  if (!listed) {
    const suffix = PRIVATE_SUFFIXES.find((s) => forms.some((f) => isUnder(f, s)));
    if (suffix) return { kind: "refused", reason: `host names under .${suffix} are private; list ${name} in egress.hosts to allow it` };
    if (!name.includes(".")) return { kind: "refused", reason: `single-label host name ${name}; list it in egress.hosts to allow it` };
    if (forms.some((f) => f.split(".")[0] === "metadata"))
      return { kind: "refused", reason: "looks like a cloud metadata host name (metadata.*); list it in egress.hosts to allow it" };
    const wild = WILDCARD_DNS.find((d) => isUnder(name, d));
    if (wild) return { kind: "refused", reason: `${wild} names resolve to any address they spell; list the name in egress.hosts to allow it` };
  }
  return { kind: "public", listed };
}

/** Hostnames whose class one rules object keeps (per config version: a reload brings a new object). */
const HOST_MEMO_MAX = 256;
const hostMemo = new WeakMap<EgressRules, Memo<string, HostClass>>();

/**
 * The class of `hostname` under `rules`, computed once per rules object and hostname: the class
 * depends on nothing else (no DNS), and the hot path asks it for the same few upstream hosts on
 * every call. Bounded: past HOST_MEMO_MAX names the oldest is dropped.
 */
function classifyHost(hostname: string, rules: EgressRules): HostClass {
  let memo = hostMemo.get(rules);
  if (!memo) {
    memo = new Memo({ max: HOST_MEMO_MAX });
    hostMemo.set(rules, memo);
  }
  const known = memo.get(hostname);
  if (known) return known;
  const found = classifyHostUncached(hostname, rules);
  memo.set(hostname, found);
  return found;
}

function classifyHostUncached(hostname: string, rules: EgressRules): HostClass {
  const literal = classifyHostLiteral(hostname);
  if (literal === null) return classifyName(hostname.endsWith(".") ? hostname.slice(0, -1) : hostname, rules);
  switch (literal.kind) {
    case "metadata":
      return { kind: "refused", reason: "cloud metadata address" };
    case "loopback":
      return { kind: "loopback" };
    case "denied":
      return { kind: "refused", reason: `IP literal ${hostname} is ${literal.range}` };
    case "public": {
      if (!rules.allow_ip_literals) {
        return {
          kind: "refused",
          reason: `IP literal ${hostname} is not allowed (set egress.allow_ip_literals: true; production Workers refuse IP URLs anyway)`,
        };
      }
      const listed = rules.hosts.some((p) => matchesHostPattern(hostname, p));
      if (rules.hosts.length > 0 && !listed) return { kind: "refused", reason: `IP literal ${hostname} is not in egress.hosts` };
      return { kind: "public", listed };
    }
  }
}

/**
 * Decides whether `input` may be fetched. On success returns the parsed URL the decision was made
 * on — fetch exactly that object. A URL object is re-parsed from its href so later mutation of the
 * caller's object cannot change what was checked.
 */
export function checkEgress(input: string | URL, rules: EgressRules, ctx: EgressContext): EgressDecision {
  let url: URL;
  try {
    url = new URL(typeof input === "string" ? input : input.href);
  } catch {
    return { ok: false, reason: "not a valid absolute URL" };
  }
  if (url.href.length > MAX_URL_LENGTH) return { ok: false, reason: "URL is longer than 16 KB" };
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    return { ok: false, reason: `scheme ${url.protocol} is not allowed (https only)` };
  }
  if (url.username !== "" || url.password !== "") return { ok: false, reason: "URLs with credentials (user:password@) are not allowed" };
  if (url.hostname === "") return { ok: false, reason: "URL has no host" };

  const host = classifyHost(url.hostname, rules);
  if (host.kind === "refused") return { ok: false, reason: host.reason };
  if (url.port === "0") return { ok: false, reason: "port 0 is not allowed" };
  if (host.kind === "loopback") {
    if (!rules.allow_loopback) return { ok: false, reason: `loopback host ${url.hostname} needs egress.allow_loopback: true` };
    if (!ctx.gatewayOnLoopback) return { ok: false, reason: "egress.allow_loopback is only honoured while the gateway listens on loopback" };
    return { ok: true, url };
  }
  if (url.protocol !== "https:") return { ok: false, reason: "http is only allowed for loopback upstreams" };
  const port = url.port === "" ? 443 : Number(url.port);
  if (!rules.ports.includes(port)) return { ok: false, reason: `port ${port} is not allowed (egress.ports: ${rules.ports.join(", ")})` };
  return { ok: true, url };
}
