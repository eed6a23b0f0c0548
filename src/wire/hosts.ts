/**
 * Host names and IP literals as URLs spell them: loopback names, cloud metadata names, and IP
 * literal classification. Owns: strict parsing of the IP literal forms a WHATWG URL
 * serialises (`a.b.c.d`, `[v6]`), the table of denied IPv4/IPv6 ranges, the cloud metadata
 * addresses, and unwrapping IPv4 embedded in IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo
 * addresses so the embedded address is re-checked, and whether a peer address is loopback. Must never: accept a non-canonical IPv4 form
 * (`0x7f.1`, `127.1`, `0177.0.0.1` — those must go through `new URL()` first, which rewrites them
 * to dotted decimal), resolve names, or call any address outside 2000::/3 "public".
 */

/** Loopback host names as URL parsing spells them (plus the bare IPv6 form a Host header may carry). */
export const LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"] as const;
const LOOPBACK = new Set<string>([...LOOPBACK_HOSTS, "::1"]);

export function isLoopbackHost(hostname: string): boolean {
  return LOOPBACK.has(hostname.toLowerCase());
}

/**
 * What a literal is, for the egress decision. `public` is the only kind that may be fetched as-is.
 * `range` completes the sentence "IP literal X is …" (e.g. "in a private range (10.0.0.0/8)").
 */
export type AddressVerdict = { kind: "public" } | { kind: "loopback" } | { kind: "metadata" } | { kind: "denied"; range: string };

// ---------------------------------------------------------------------------------------------
// IPv4

/** Strict dotted decimal only (no leading zeros, exactly four parts): the form `new URL()` emits. */
export function parseIPv4(s: string): number | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  let n = 0;
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null;
    const v = Number(p);
    if (v > 255) return null;
    n = n * 256 + v;
  }
  return n;
}

export function formatIPv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".");
}

interface V4Range {
  base: number;
  bits: number;
  label: string;
  loopback?: true;
}

function v4(cidr: string, label: string, loopback?: true): V4Range {
  const [addr, bits] = cidr.split("/");
  const base = parseIPv4(addr ?? "");
  if (base === null || bits === undefined) throw new Error(`bad table entry ${cidr}`);
  return loopback ? { base, bits: Number(bits), label, loopback } : { base, bits: Number(bits), label };
}

/** Order matters only for labels (the first match names the range). */
const V4_DENIED: readonly V4Range[] = [
  v4("0.0.0.0/8", 'in the "this network" range (0.0.0.0/8)'),
  v4("10.0.0.0/8", "in a private range (10.0.0.0/8)"),
  v4("100.64.0.0/10", "in the carrier-grade NAT range (100.64.0.0/10)"),
  v4("127.0.0.0/8", "in the loopback range (127.0.0.0/8)", true),
  v4("169.254.0.0/16", "in the link-local range (169.254.0.0/16)"),
  v4("172.16.0.0/12", "in a private range (172.16.0.0/12)"),
  v4("192.0.0.0/24", "in the IETF protocol assignments range (192.0.0.0/24)"),
  v4("192.0.2.0/24", "in a documentation range (192.0.2.0/24)"),
  v4("192.88.99.0/24", "in the 6to4 relay anycast range (192.88.99.0/24)"),
  v4("192.168.0.0/16", "in a private range (192.168.0.0/16)"),
  v4("198.18.0.0/15", "in the benchmarking range (198.18.0.0/15)"),
  v4("198.51.100.0/24", "in a documentation range (198.51.100.0/24)"),
  v4("203.0.113.0/24", "in a documentation range (203.0.113.0/24)"),
  v4("224.0.0.0/4", "in the multicast range (224.0.0.0/4)"),
  v4("255.255.255.255/32", "the broadcast address"),
  v4("240.0.0.0/4", "in the reserved range (240.0.0.0/4)"),
];

/**
 * Cloud and orchestrator metadata endpoints. Most sit in ranges denied anyway; 168.63.129.16
 * (Azure WireServer) is in public space, so this list is checked first and is never allowed.
 */
const V4_METADATA: ReadonlySet<number> = new Set(
  [
    "169.254.169.254", // AWS, GCP, Azure, OCI, DigitalOcean, OpenStack, Hetzner… IMDS
    "169.254.170.2", // AWS ECS task metadata / credentials
    "169.254.170.23", // AWS EKS Pod Identity agent
    "169.254.0.23", // Tencent Cloud
    "100.100.100.200", // Alibaba Cloud
    "168.63.129.16", // Azure WireServer / host agent (public space!)
    "192.0.0.192", // Oracle Cloud (legacy)
  ].map((s) => parseIPv4(s) as number),
);

function inV4(n: number, r: V4Range): boolean {
  if (r.bits === 0) return true;
  const shift = 32 - r.bits;
  return Math.floor(n / 2 ** shift) === Math.floor(r.base / 2 ** shift);
}

function classifyIPv4(n: number): AddressVerdict {
  if (V4_METADATA.has(n)) return { kind: "metadata" };
  for (const r of V4_DENIED) {
    if (inV4(n, r)) return r.loopback ? { kind: "loopback" } : { kind: "denied", range: r.label };
  }
  return { kind: "public" };
}

// ---------------------------------------------------------------------------------------------
// IPv6

/** Eight 16-bit words. Accepts `::` compression and a dotted IPv4 tail; no brackets, no zone id. */
export function parseIPv6(s: string): number[] | null {
  if (s.length === 0 || s.length > 45) return null;
  let tail: number[] = [];
  let text = s;
  const lastColon = text.lastIndexOf(":");
  if (lastColon >= 0 && text.indexOf(".", lastColon) >= 0) {
    const v4n = parseIPv4(text.slice(lastColon + 1));
    if (v4n === null) return null;
    tail = [Math.floor(v4n / 65536), v4n & 0xffff];
    // Keep a `::` that ends right before the dotted part; drop a single separating colon.
    text = text.slice(0, lastColon + 1);
    if (!text.endsWith("::")) text = text.slice(0, -1);
  }
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const group = (g: string): number | null => (/^[0-9a-fA-F]{1,4}$/.test(g) ? parseInt(g, 16) : null);
  const parseList = (t: string): number[] | null => {
    if (t === "") return [];
    const out: number[] = [];
    for (const g of t.split(":")) {
      const v = group(g);
      if (v === null) return null;
      out.push(v);
    }
    return out;
  };
  const head = parseList(halves[0] ?? "");
  if (head === null) return null;
  if (halves.length === 1) {
    const words = [...head, ...tail];
    return words.length === 8 ? words : null;
  }
  const rest = parseList(halves[1] ?? "");
  if (rest === null) return null;
  const known = head.length + rest.length + tail.length;
  if (known > 7) return null;
  return [...head, ...new Array<number>(8 - known).fill(0), ...rest, ...tail];
}

interface V6Range {
  prefix: number[];
  bits: number;
  label: string;
  embed?: (w: number[]) => number;
}

function v6(cidr: string, label: string, embed?: (w: number[]) => number): V6Range {
  const [addr, bits] = cidr.split("/");
  const prefix = parseIPv6(addr ?? "");
  if (prefix === null || bits === undefined) throw new Error(`bad table entry ${cidr}`);
  return embed ? { prefix, bits: Number(bits), label, embed } : { prefix, bits: Number(bits), label };
}

const word32 = (hi: number | undefined, lo: number | undefined): number => (hi ?? 0) * 65536 + (lo ?? 0);
const last32 = (w: number[]): number => word32(w[6], w[7]);

/** First match wins, so more specific prefixes come before the ranges that contain them. */
const V6_DENIED: readonly V6Range[] = [
  v6("::ffff:0:0/96", "in the IPv4-mapped range (::ffff:0:0/96)", last32),
  v6("::ffff:0:0:0/96", "in the IPv4-translated range (::ffff:0:0:0/96)", last32),
  v6("::/96", "in the IPv4-compatible range (::/96)", last32),
  v6("64:ff9b::/96", "in the NAT64 range (64:ff9b::/96)", last32),
  v6("64:ff9b:1::/48", "in the local-use NAT64 range (64:ff9b:1::/48)"),
  v6("100::/64", "in the discard range (100::/64)"),
  v6("2001::/32", "in the Teredo range (2001::/32)", (w) => ~last32(w) >>> 0),
  v6("2001:db8::/32", "in a documentation range (2001:db8::/32)"),
  v6("2001::/23", "in the IETF protocol assignments range (2001::/23)"),
  v6("2002::/16", "in the 6to4 range (2002::/16)", (w) => word32(w[1], w[2])),
  v6("3fff::/20", "in a documentation range (3fff::/20)"),
  v6("5f00::/16", "in the SRv6 SID range (5f00::/16)"),
  v6("fc00::/7", "in the unique-local range (fc00::/7)"),
  v6("fe80::/10", "in the link-local range (fe80::/10)"),
  v6("fec0::/10", "in the site-local range (fec0::/10)"),
  v6("ff00::/8", "in the multicast range (ff00::/8)"),
];

const V6_METADATA: readonly number[][] = [
  "fd00:ec2::254", // AWS IMDS over IPv6
  "fd00:ec2::23", // AWS EKS Pod Identity agent over IPv6
  "fd20:ce::254", // GCP metadata server over IPv6
].map((s) => parseIPv6(s) as number[]);

function inV6(w: number[], r: V6Range): boolean {
  let bits = r.bits;
  for (let i = 0; i < 8 && bits > 0; i++, bits -= 16) {
    const take = Math.min(16, bits);
    const mask = (0xffff << (16 - take)) & 0xffff;
    if (((w[i] ?? 0) & mask) !== ((r.prefix[i] ?? 0) & mask)) return false;
  }
  return true;
}

function classifyIPv6(w: number[]): AddressVerdict {
  if (V6_METADATA.some((m) => m.every((x, i) => x === w[i]))) return { kind: "metadata" };
  const zeroHead = w.slice(0, 7).every((x) => x === 0);
  if (zeroHead && w[7] === 0) return { kind: "denied", range: "the unspecified address (::)" };
  if (zeroHead && w[7] === 1) return { kind: "loopback" };
  for (const r of V6_DENIED) {
    if (!inV6(w, r)) continue;
    if (!r.embed) return { kind: "denied", range: r.label };
    const inner = r.embed(w);
    const innerVerdict = classifyIPv4(inner);
    if (innerVerdict.kind === "metadata") return { kind: "metadata" };
    const what =
      innerVerdict.kind === "denied" ? `which is ${innerVerdict.range}` : innerVerdict.kind === "loopback" ? "which is loopback" : "a public address";
    return { kind: "denied", range: `${r.label} and embeds ${formatIPv4(inner)}, ${what}` };
  }
  if (((w[0] ?? 0) & 0xe000) !== 0x2000) return { kind: "denied", range: "outside global unicast space (2000::/3)" };
  return { kind: "public" };
}

// ---------------------------------------------------------------------------------------------

/**
 * Whether a peer address — a bare IP as `CF-Connecting-IP` carries it (no port; brackets
 * tolerated) — is loopback: 127.0.0.0/8, ::1, or IPv4-mapped ::ffff:127.x.x.x. Anything else,
 * an unparseable value or a list of addresses included, is not.
 */
export function isLoopbackAddress(address: string): boolean {
  const s = address.trim();
  const v4n = parseIPv4(s);
  if (v4n !== null) return classifyIPv4(v4n).kind === "loopback";
  const w = parseIPv6(s.startsWith("[") && s.endsWith("]") ? s.slice(1, -1) : s);
  if (w === null) return false;
  if (w.slice(0, 7).every((x) => x === 0) && w[7] === 1) return true;
  const mapped = w.slice(0, 5).every((x) => x === 0) && w[5] === 0xffff;
  return mapped && classifyIPv4(last32(w)).kind === "loopback";
}

/**
 * Classifies a URL hostname as an IP literal: `a.b.c.d` or `[v6]` exactly as `URL.hostname`
 * serialises them. Returns null when the hostname is not an IP literal (a domain name).
 */
export function classifyHostLiteral(hostname: string): AddressVerdict | null {
  if (hostname.startsWith("[") && hostname.endsWith("]")) {
    const w = parseIPv6(hostname.slice(1, -1));
    return w === null ? { kind: "denied", range: "not a parseable IPv6 address" } : classifyIPv6(w);
  }
  const n = parseIPv4(hostname);
  return n === null ? null : classifyIPv4(n);
}

/** Cloud and orchestrator metadata names: never allowed, nor any name below them. */
const METADATA_NAMES: readonly string[] = [
  "metadata",
  "metadata.google.internal",
  "metadata.goog",
  "metadata.internal",
  "instance-data",
  "instance-data.ec2.internal",
  "metadata.ec2.internal",
  "metadata.azure.com",
  "metadata.azure.internal",
  "metadata.tencentyun.com",
  "metadata.platformequinix.com",
  "metadata.packet.net",
  "rancher-metadata",
  "rancher-metadata.rancher.internal",
  "kubernetes",
  "kubernetes.default",
  "kubernetes.default.svc",
  "kubernetes.default.svc.cluster.local",
];

export const isUnder = (name: string, domain: string): boolean => name === domain || name.endsWith(`.${domain}`);

/** True for a metadata name or any name below one (expects a lowercase name, no trailing dot). */
export function isMetadataName(name: string): boolean {
  return METADATA_NAMES.some((m) => isUnder(name, m));
}
