// Egress: a table of hostile URL forms that must all be refused, and the forms that must pass.
// Runs in workerd, so the URL parser here is the one the Worker's fetch uses.
import { describe, expect, it } from "vitest";
import { checkEgress } from "../../src/egress/rules.ts";
import { egressSchema, type EgressInput } from "../../src/config/egress-schema.ts";

const rules = (r: EgressInput = {}) => egressSchema.parse(r);
const STRICT = rules({ allow_loopback: false });
const LOOPBACK = rules({ allow_loopback: true });
/** Everything a config can open up: metadata and non-public ranges must still be refused. */
const PERMISSIVE = rules({ allow_loopback: true, allow_ip_literals: true, ports: [443, 8443, 80, 22] });
const onLoopback = { gatewayOnLoopback: true };

/**
 * kind — `loopback`: canonically plain loopback (refused unless allow_loopback, which may allow it);
 * `never`: refused under every config; `policy`: refused by default and with allow_loopback, but a
 * permissive config (allow_ip_literals, more ports) may open it.
 */
type Kind = "loopback" | "never" | "policy";
const HOSTILE: [string, Kind, string][] = [
  // Alternate IPv4 encodings of loopback: the URL parser rewrites them all to 127.x.y.z.
  ["http://2130706433/", "loopback", "decimal integer"],
  ["http://0177.0.0.1/", "loopback", "octal octet"],
  ["http://0x7f.1/", "loopback", "hex + short form"],
  ["http://127.1/", "loopback", "short form a.b"],
  ["http://127.0.1/", "loopback", "short form a.b.c"],
  ["http://0x7f000001/", "loopback", "hex integer"],
  ["http://017700000001/", "loopback", "octal integer"],
  ["http://0x7F.0x0.0x0.0x1/", "loopback", "hex per octet"],
  ["http://0177.1/", "loopback", "octal + short"],
  ["http://127.000.000.001/", "loopback", "zero-padded octets"],
  ["http://0x7f.0.00.1/", "loopback", "mixed encodings"],
  ["http://127.0.0.1./", "loopback", "trailing dot"],
  ["http://%31%32%37.0.0.1/", "loopback", "percent-encoded digits"],
  ["http://127%2e0%2e0%2e1/", "loopback", "percent-encoded dots"],
  ["http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "loopback", "fullwidth digits"],
  ["http://127\u30020\u30020\u30021/", "loopback", "ideographic full stops"],
  ["http://127.255.255.254:8080/", "loopback", "top of 127/8"],
  ["https://127.0.0.1/", "loopback", "https to loopback"],
  ["http://localhost/", "loopback", "localhost"],
  ["http://LOCALHOST./", "loopback", "uppercase, trailing dot"],
  ["http://\u24db\u24de\u24d2\u24d0\u24db\u24d7\u24de\u24e2\u24e3/", "loopback", "circled letters (IDNA)"],
  ["http://api.localhost/", "loopback", "*.localhost"],
  ["http://[::1]/", "loopback", "IPv6 loopback"],
  ["http://[0:0:0:0:0:0:0:1]/", "loopback", "IPv6 loopback uncompressed"],
  // IPv6 forms that embed IPv4: never plain loopback, refused even with allow_loopback.
  ["http://[::ffff:127.0.0.1]/", "never", "IPv4-mapped loopback"],
  ["http://[::ffff:7f00:1]/", "never", "IPv4-mapped loopback (hex)"],
  ["http://[0:0:0:0:0:ffff:127.0.0.1]/", "never", "IPv4-mapped uncompressed"],
  ["http://[::127.0.0.1]/", "never", "IPv4-compatible loopback"],
  ["http://[::7f00:1]/", "never", "IPv4-compatible (hex)"],
  ["http://[::ffff:0:7f00:1]/", "never", "IPv4-translated"],
  ["http://[64:ff9b::127.0.0.1]/", "never", "NAT64 loopback"],
  ["http://[64:ff9b::a9fe:a9fe]/", "never", "NAT64 metadata"],
  ["http://[64:ff9b:1::a00:1]/", "never", "local-use NAT64"],
  ["http://[2002:7f00:1::]/", "never", "6to4 of 127.0.0.1"],
  ["http://[2002:a9fe:a9fe::1]/", "never", "6to4 of metadata"],
  ["http://[2001:0:0:0:0:0:80ff:fffe]/", "never", "Teredo (client 127.0.0.1)"],
  ["http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "never", "Teredo"],
  ["http://[::ffff:8.8.8.8]/", "never", "IPv4-mapped public address"],
  // Unspecified, broadcast, "this network".
  ["http://0.0.0.0/", "never", "0.0.0.0"],
  ["http://0/", "never", "0 (→ 0.0.0.0)"],
  ["http://0x0/", "never", "0x0"],
  ["http://0.0.0.0:8787/", "never", "0.0.0.0 with port"],
  ["http://[::]/", "never", "IPv6 unspecified"],
  ["http://[0:0:0:0:0:0:0:0]/", "never", "IPv6 unspecified uncompressed"],
  ["http://255.255.255.255/", "never", "broadcast"],
  ["http://4294967295/", "never", "broadcast as integer"],
  // Cloud metadata addresses, in many spellings.
  ["http://169.254.169.254/latest/meta-data/", "never", "IMDS"],
  ["http://169.254.169.254./", "never", "IMDS trailing dot"],
  ["http://2852039166/", "never", "IMDS decimal"],
  ["http://0xa9fea9fe/", "never", "IMDS hex"],
  ["http://0251.0376.0251.0376/", "never", "IMDS octal"],
  ["http://0xa9.0xfe.0xa9.0xfe/", "never", "IMDS hex octets"],
  ["http://169.254.43518/", "never", "IMDS short a.b.c"],
  ["http://169.16689662/", "never", "IMDS short a.b"],
  ["http://[::ffff:169.254.169.254]/", "never", "IMDS IPv4-mapped"],
  ["http://[::ffff:a9fe:a9fe]/", "never", "IMDS IPv4-mapped hex"],
  ["http://[fd00:ec2::254]/", "never", "AWS IMDS IPv6"],
  ["http://[FD00:EC2:0:0:0:0:0:254]/", "never", "AWS IMDS IPv6 uppercase, uncompressed"],
  ["http://100.100.100.200/", "never", "Alibaba metadata"],
  ["https://168.63.129.16/", "never", "Azure WireServer (public space)"],
  ["http://192.0.0.192/", "never", "Oracle metadata"],
  ["http://169.254.170.2/v2/credentials", "never", "ECS credentials"],
  // Cloud metadata names.
  ["http://metadata.google.internal/computeMetadata/v1/", "never", "GCP metadata"],
  ["https://METADATA.GOOGLE.INTERNAL./", "never", "GCP metadata uppercase, trailing dot"],
  ["https://metadata.google.internal../", "never", "two trailing dots"],
  ["http://metadata/", "never", "bare metadata"],
  ["http://metadata./", "never", "bare metadata, trailing dot"],
  ["https://metadata.goog/", "never", "metadata.goog"],
  ["http://instance-data/", "never", "instance-data"],
  ["http://instance-data.ec2.internal/", "never", "AWS instance-data"],
  ["https://metadata.azure.com/", "never", "Azure metadata name"],
  ["https://kubernetes.default.svc/", "never", "Kubernetes API"],
  ["https://kubernetes.default.svc.cluster.local/", "never", "Kubernetes API FQDN"],
  ["https://x.metadata.google.internal/", "never", "below a metadata name"],
  ["https://\uff4d\uff45\uff54\uff41\uff44\uff41\uff54\uff41.google.internal/", "never", "fullwidth letters"],
  ["https://\u24dc\u24d4\u24e3\u24d0\u24d3\u24d0\u24e3\u24d0.\u24d6\u24de\u24de\u24d6/", "never", "circled letters"],
  ["https://meta\u00addata.goog/", "never", "soft hyphen (IDNA maps it away)"],
  ["https://xn--metadata-.goog/", "never", "punycode spelling of metadata"],
  ["https://meta%64ata.google.internal/", "never", "percent-encoded letter"],
  ["https://metadata%2egoogle%2einternal/", "never", "percent-encoded dots"],
  ["https://metadata.google.internal\u3002/", "never", "ideographic full stop"],
  ["https://metadata.example.com/", "policy", "metadata.* (allowed only if listed)"],
  // Private, link-local, CGNAT, ULA, multicast, reserved, documentation, benchmarking.
  ["https://10.0.0.1/", "never", "10/8"],
  ["http://012.0.0.1/", "never", "10/8 octal"],
  ["http://167772161/", "never", "10/8 decimal"],
  ["https://172.16.0.1/", "never", "172.16/12"],
  ["https://172.31.255.255/", "never", "top of 172.16/12"],
  ["https://192.168.1.1/", "never", "192.168/16"],
  ["https://0xc0a80101/", "never", "192.168/16 hex"],
  ["https://192.168.257/", "never", "192.168/16 short"],
  ["https://169.254.1.1/", "never", "link-local"],
  ["https://100.64.0.1/", "never", "CGNAT"],
  ["https://100.127.255.254/", "never", "top of CGNAT"],
  ["https://[fc00::1]/", "never", "ULA fc00::/8"],
  ["https://[fd12:3456:789a::1]/", "never", "ULA fd00::/8"],
  ["https://[fe80::1]/", "never", "IPv6 link-local"],
  ["https://[febf:ffff::1]/", "never", "top of fe80::/10"],
  ["https://[fec0::1]/", "never", "site-local"],
  ["https://224.0.0.1/", "never", "multicast"],
  ["https://239.255.255.250/", "never", "SSDP multicast"],
  ["https://[ff02::1]/", "never", "IPv6 multicast"],
  ["https://240.0.0.1/", "never", "reserved 240/4"],
  ["https://198.18.0.1/", "never", "benchmarking"],
  ["https://198.19.255.255/", "never", "top of benchmarking"],
  ["https://192.0.2.1/", "never", "TEST-NET-1"],
  ["https://198.51.100.1/", "never", "TEST-NET-2"],
  ["https://203.0.113.1/", "never", "TEST-NET-3"],
  ["https://192.0.0.8/", "never", "IETF protocol assignments"],
  ["https://192.88.99.1/", "never", "6to4 relay anycast"],
  ["https://[2001:db8::1]/", "never", "IPv6 documentation"],
  ["https://[3fff::1]/", "never", "IPv6 documentation 3fff::/20"],
  ["https://[100::1]/", "never", "discard"],
  ["https://[4000::1]/", "never", "outside 2000::/3"],
  // Private name suffixes and wildcard-DNS services (allowed only when listed in hosts).
  ["https://db.internal/", "policy", ".internal"],
  ["https://printer.local/", "policy", ".local"],
  ["https://nas.localdomain/", "policy", ".localdomain"],
  ["https://router.home.arpa/", "policy", ".home.arpa"],
  ["https://wiki.intranet/", "policy", ".intranet"],
  ["https://git.corp/", "policy", ".corp"],
  ["https://nas.lan/", "policy", ".lan"],
  ["https://intranet/", "policy", "single-label name"],
  ["https://169.254.169.254.nip.io/", "policy", "nip.io"],
  ["https://127.0.0.1.sslip.io/", "policy", "sslip.io"],
  ["https://a..example.com/", "never", "empty label"],
  // Userinfo.
  ["https://user:pass@api.example.com/", "never", "userinfo"],
  ["https://user@api.example.com/", "never", "username only"],
  ["https://:pass@api.example.com/", "never", "password only"],
  ["https://api.example.com@10.0.0.1/", "never", "host-looking userinfo"],
  ["https://api.example.com:443@evil.example/", "never", "host:port-looking userinfo"],
  ["http://1.1.1.1 &@2.2.2.2# @3.3.3.3/", "never", "parser-confusion userinfo"],
  // Other schemes.
  ["file:///etc/passwd", "never", "file:"],
  ["ftp://api.example.com/", "never", "ftp:"],
  ["gopher://api.example.com:70/_GET%20/", "never", "gopher:"],
  ["data:text/plain,hello", "never", "data:"],
  ["javascript:alert(1)", "never", "javascript:"],
  ["ws://api.example.com/", "never", "ws:"],
  ["wss://api.example.com/", "never", "wss:"],
  ["dict://127.0.0.1:11211/", "never", "dict:"],
  ["blob:https://api.example.com/0d1c", "never", "blob:"],
  // http to public hosts, and ports.
  ["http://api.example.com/mcp", "never", "http to a public host"],
  ["http://api.example.com:443/", "never", "http on 443"],
  ["https://api.example.com:8443/", "policy", "port not in the default list"],
  ["https://api.example.com:22/", "policy", "ssh port"],
  ["https://api.example.com:0/", "never", "port 0"],
  ["https://api.example.com:65535/", "never", "high port"],
  // Public IP literals (refused unless allow_ip_literals).
  ["https://8.8.8.8/", "policy", "public IPv4 literal"],
  ["https://134744072/", "policy", "public IPv4 as integer"],
  ["https://[2606:4700:4700::1111]/", "policy", "public IPv6 literal"],
  // Not URLs at all.
  ["not a url", "never", "relative string"],
  ["http://[fe80::1%25eth0]/", "never", "zone id"],
  ["http://256.0.0.1/", "never", "octet out of range"],
  ["http://0x100000000/", "never", "integer out of range"],
  ["https://", "never", "no host"],
  [`https://a.example.com/${"x".repeat(17_000)}`, "never", "over 16 KB"],
];

describe("egress: hostile URL forms", () => {
  it("has a table of at least 80 forms", () => {
    expect(HOSTILE.length).toBeGreaterThanOrEqual(80);
  });

  it.each(HOSTILE)("refuses %s (%s: %s) with allow_loopback: false", (url) => {
    const d = checkEgress(url, STRICT, onLoopback);
    expect(d.ok, JSON.stringify(d)).toBe(false);
    if (!d.ok) expect(d.reason.length).toBeGreaterThan(0);
  });

  it.each(HOSTILE.filter(([, k]) => k !== "loopback"))("refuses %s (%s: %s) with allow_loopback: true", (url) => {
    expect(checkEgress(url, LOOPBACK, onLoopback).ok).toBe(false);
  });

  it.each(HOSTILE.filter(([, k]) => k === "never"))("refuses %s (%s: %s) under the most permissive rules", (url) => {
    expect(checkEgress(url, PERMISSIVE, onLoopback).ok).toBe(false);
  });

  it.each(HOSTILE.filter(([, k]) => k === "loopback"))("allows %s (%s: %s) only with allow_loopback on a loopback gateway", (url) => {
    const d = checkEgress(url, LOOPBACK, onLoopback);
    expect(d.ok, JSON.stringify(d)).toBe(true);
    expect(checkEgress(url, LOOPBACK, { gatewayOnLoopback: false }).ok).toBe(false);
  });

  it("gives short human reasons", () => {
    const reason = (url: string, r = STRICT) => {
      const d = checkEgress(url, r, onLoopback);
      return d.ok ? "(allowed)" : d.reason;
    };
    expect(reason("http://api.example.com/")).toBe("http is only allowed for loopback upstreams");
    expect(reason("https://10.0.0.1/")).toContain("IP literal 10.0.0.1 is in a private range");
    expect(reason("http://169.254.169.254/")).toBe("cloud metadata address");
    expect(reason("https://168.63.129.16/", PERMISSIVE)).toBe("cloud metadata address");
    expect(reason("http://[::ffff:a9fe:a9fe]/")).toBe("cloud metadata address");
    expect(reason("https://metadata.google.internal./")).toBe("cloud metadata host name");
    expect(reason("https://xn--metadata-.goog/")).toBe("cloud metadata host name");
    expect(reason("http://[::ffff:7f00:1]/", LOOPBACK)).toContain("embeds 127.0.0.1, which is loopback");
    expect(reason("http://[2002:a00:1::]/")).toContain("embeds 10.0.0.1, which is in a private range");
    expect(reason("https://100.64.0.1/")).toContain("carrier-grade NAT");
    expect(reason("http://127.0.0.1/")).toContain("allow_loopback");
    expect(reason("http://127.0.0.1/", LOOPBACK)).toBe("(allowed)");
    expect(checkEgress("http://127.0.0.1/", LOOPBACK, { gatewayOnLoopback: false })).toEqual({
      ok: false,
      reason: "egress.allow_loopback is only honoured while the gateway listens on loopback",
    });
    expect(reason("https://api.example.com:8443/")).toBe("port 8443 is not allowed (egress.ports: 443)");
    expect(reason("ftp://api.example.com/")).toBe("scheme ftp: is not allowed (https only)");
    expect(reason("https://u:p@api.example.com/?token=secret")).not.toContain("secret");
  });
});

describe("egress: allowed forms", () => {
  const ALLOWED: [string, ReturnType<typeof rules>, string][] = [
    ["https://api.example.com/mcp", STRICT, "api.example.com"],
    ["https://api.example.com:443/x", STRICT, "api.example.com"],
    ["https://API.Example.COM./mcp", STRICT, "api.example.com."],
    ["https://xn--bcher-kva.example/", STRICT, "xn--bcher-kva.example"],
    ["https://b\u00fccher.example/", STRICT, "xn--bcher-kva.example"],
    ["http://127.0.0.1:8787/mcp", LOOPBACK, "127.0.0.1"],
    ["http://localhost:3001/mcp", LOOPBACK, "localhost"],
    ["http://[::1]:9/mcp", LOOPBACK, "[::1]"],
    ["https://localhost/", LOOPBACK, "localhost"],
    ["https://api.example.com:8443/", rules({ ports: [443, 8443] }), "api.example.com"],
    ["https://a.b.example.com/", rules({ hosts: ["*.example.com", "api.github.com"] }), "a.b.example.com"],
    ["https://API.GITHUB.COM/", rules({ hosts: ["*.example.com", "api.github.com"] }), "api.github.com"],
    ["https://db.internal/", rules({ hosts: ["db.internal"] }), "db.internal"],
    ["https://x.corp.internal/", rules({ hosts: ["*.corp.internal"] }), "x.corp.internal"],
    ["https://metadata.example.com/", rules({ hosts: ["metadata.example.com"] }), "metadata.example.com"],
    ["https://8.8.8.8/", rules({ allow_ip_literals: true }), "8.8.8.8"],
    ["https://[2606:4700:4700::1111]/", rules({ allow_ip_literals: true }), "[2606:4700:4700::1111]"],
    ["https://134744072/", rules({ allow_ip_literals: true, hosts: ["8.8.8.8"] }), "8.8.8.8"],
  ];

  it.each(ALLOWED)("allows %s", (url, r, host) => {
    const d = checkEgress(url, r, onLoopback);
    expect(d.ok, JSON.stringify(d)).toBe(true);
    if (d.ok) expect(d.url.hostname).toBe(host);
  });

  it("applies the host allowlist", () => {
    const r = rules({ hosts: ["*.example.com", "api.github.com"] });
    for (const url of ["https://example.com/", "https://github.com/", "https://evil.com/", "https://example.com.evil.com/", "https://evilexample.com/"]) {
      expect(checkEgress(url, r, onLoopback).ok, url).toBe(false);
    }
    expect(checkEgress("https://9.9.9.9/", rules({ allow_ip_literals: true, hosts: ["8.8.8.8"] }), onLoopback).ok).toBe(false);
  });

  it("never unlocks denied ranges through hosts", () => {
    const r = rules({ allow_ip_literals: true, hosts: ["10.0.0.1", "[fd00::1]"] });
    expect(checkEgress("https://10.0.0.1/", r, onLoopback).ok).toBe(false);
    expect(checkEgress("https://[fd00::1]/", r, onLoopback).ok).toBe(false);
  });

  it("returns the parsed URL it decided on, detached from the caller's object", () => {
    const d = checkEgress("http://2130706433:8787/mcp?x=1", LOOPBACK, onLoopback);
    expect(d.ok && d.url.href).toBe("http://127.0.0.1:8787/mcp?x=1");
    const input = new URL("https://api.example.com/mcp");
    const d2 = checkEgress(input, STRICT, onLoopback);
    expect(d2.ok).toBe(true);
    input.hostname = "169.254.169.254";
    expect(d2.ok && d2.url.hostname).toBe("api.example.com");
    expect(checkEgress(input, STRICT, onLoopback).ok).toBe(false);
  });
});
