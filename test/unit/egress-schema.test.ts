// The `egress:` config schema, and the low-level parsers the egress check is built on.
import { describe, expect, it } from "vitest";
import { classifyHostLiteral, isMetadataName, parseIPv4, parseIPv6 } from "../../src/wire/hosts.ts";
import { matchesHostPattern, punycodeDecode } from "../../src/egress/rules.ts";
import { DEFAULT_EGRESS_RULES, egressSchema } from "../../src/config/egress-schema.ts";

const issues = (input: unknown): string[] => {
  const r = egressSchema.safeParse(input);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
};

describe("egress schema", () => {
  it("defaults: https only, any public host, port 443, no redirects", () => {
    expect(egressSchema.parse({})).toEqual({
      allow_loopback: false,
      allow_ip_literals: false,
      hosts: [],
      ports: [443],
      max_redirects: 0,
      max_response_bytes: 16 * 1024 * 1024,
      timeout_ms: 30_000,
    });
    expect(DEFAULT_EGRESS_RULES).toEqual(egressSchema.parse({}));
    expect(Object.isFrozen(DEFAULT_EGRESS_RULES) && Object.isFrozen(DEFAULT_EGRESS_RULES.hosts)).toBe(true);
  });

  it("parses every field", () => {
    expect(
      egressSchema.parse({
        allow_loopback: true,
        allow_ip_literals: true,
        hosts: ["API.Example.COM.", "*.Corp.Internal", "b\u00fccher.example", "2001:DB8::1", "8.8.8.8"],
        ports: [443, 8443],
        max_redirects: 5,
        max_response_bytes: 1024,
        timeout: "2m",
      }),
    ).toEqual({
      allow_loopback: true,
      allow_ip_literals: true,
      hosts: ["api.example.com", "*.corp.internal", "xn--bcher-kva.example", "[2001:db8::1]", "8.8.8.8"],
      ports: [443, 8443],
      max_redirects: 5,
      max_response_bytes: 1024,
      timeout_ms: 120_000,
    });
    expect(egressSchema.parse({ timeout: 1500 }).timeout_ms).toBe(1500);
    expect(egressSchema.parse({ timeout: "500ms" }).timeout_ms).toBe(500);
    expect(egressSchema.parse({ timeout: "30s" }).timeout_ms).toBe(30_000);
  });

  it("rejects unknown fields and bad values, reporting each", () => {
    const got = issues({
      allow_loopback: "yes",
      bogus: 1,
      hosts: [
        "*",
        "a.example.com:8443",
        "https://a.example.com/",
        "*.*.example.com",
        "metadata.google.internal",
        "x.metadata.goog",
        "*.10.0.0.1",
        "*.1.2.3",
        "*.[::1]",
      ],
      ports: [0, 70000, 1.5],
      max_redirects: 6,
      max_response_bytes: 0,
      timeout: "soon",
    });
    const expected = [
      /^allow_loopback: /,
      /^: Unrecognized key.*bogus/,
      /^hosts\.0: "\*" is not a pattern here/,
      /^hosts\.1: .*no port/,
      /^hosts\.2: /,
      /^hosts\.3: /,
      /^hosts\.4: .*cloud metadata host name/,
      /^hosts\.5: .*cloud metadata host name/,
      /^hosts\.6: .*not an IP literal/,
      /^hosts\.7: .*not an IP literal/,
      /^hosts\.8: /,
      /^ports\.0: /,
      /^ports\.1: /,
      /^ports\.2: /,
      /^max_redirects: /,
      /^max_response_bytes: /,
      /^timeout: /,
    ];
    for (const re of expected)
      expect(
        got.some((g) => re.test(g)),
        `${re} in ${JSON.stringify(got)}`,
      ).toBe(true);
    expect(issues({ ports: [] })).toEqual(["ports: list at least one port (443 is the default)"]);
    expect(issues({ timeout: "20m" })[0]).toMatch(/between 1 ms and 15 minutes/);
  });
});

describe("egress building blocks", () => {
  it("parseIPv4 accepts only canonical dotted decimal", () => {
    expect(parseIPv4("127.0.0.1")).toBe(0x7f000001);
    expect(parseIPv4("255.255.255.255")).toBe(0xffffffff);
    for (const s of ["0x7f.0.0.1", "127.1", "0177.0.0.1", "01.2.3.4", "256.0.0.1", "1.2.3.4.", "1.2.3.4.5", "", "a.b.c.d", " 1.2.3.4"]) {
      expect(parseIPv4(s), s).toBeNull();
    }
  });

  it("parseIPv6 handles compression and dotted tails, and rejects malformed input", () => {
    expect(parseIPv6("::")).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(parseIPv6("::1")).toEqual([0, 0, 0, 0, 0, 0, 0, 1]);
    expect(parseIPv6("::ffff:1.2.3.4")).toEqual([0, 0, 0, 0, 0, 0xffff, 0x0102, 0x0304]);
    expect(parseIPv6("1:2:3:4:5:6:1.2.3.4")).toEqual([1, 2, 3, 4, 5, 6, 0x0102, 0x0304]);
    expect(parseIPv6("fd00:ec2::254")).toEqual([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]);
    for (const s of [
      "",
      ":::",
      "1:::2",
      "1::2::3",
      "12345::",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7",
      "1:2:3:4:5:6:7:8::",
      "::1.2.3",
      "::1.2.3.4:5",
      "g::",
      "fe80::1%eth0",
    ]) {
      expect(parseIPv6(s), s).toBeNull();
    }
  });

  it("classifies host literals as URL.hostname serialises them", () => {
    expect(classifyHostLiteral("api.example.com")).toBeNull();
    expect(classifyHostLiteral("8.8.8.8")).toEqual({ kind: "public" });
    expect(classifyHostLiteral("[2606:4700::1111]")).toEqual({ kind: "public" });
    expect(classifyHostLiteral("127.0.0.5")).toEqual({ kind: "loopback" });
    expect(classifyHostLiteral("[::1]")).toEqual({ kind: "loopback" });
    expect(classifyHostLiteral("169.254.169.254")).toEqual({ kind: "metadata" });
    expect(classifyHostLiteral("[fd20:ce::254]")).toEqual({ kind: "metadata" });
    expect(classifyHostLiteral("[64:ff9b::a9fe:a9fe]")).toEqual({ kind: "metadata" }); // NAT64 of 169.254.169.254
    expect(classifyHostLiteral("[64:ff9b::6440:c8]")).toEqual({
      kind: "denied",
      range: "in the NAT64 range (64:ff9b::/96) and embeds 100.64.0.200, which is in the carrier-grade NAT range (100.64.0.0/10)",
    });
  });

  it("decodes punycode (RFC 3492 vectors)", () => {
    expect(punycodeDecode("bcher-kva")).toBe("b\u00fccher");
    expect(punycodeDecode("e1afmkfd")).toBe("\u043f\u0440\u0438\u043c\u0435\u0440");
    expect(punycodeDecode("p1ai")).toBe("\u0440\u0444");
    expect(punycodeDecode("metadata-")).toBe("metadata");
    expect(punycodeDecode("ihqwcrb4cv8a8dqg056pqjye")).toBe("\u4ed6\u4eec\u4e3a\u4ec0\u4e48\u4e0d\u8bf4\u4e2d\u6587");
    expect(punycodeDecode("!!!")).toBeNull();
    expect(punycodeDecode("99999999999")).toBeNull();
  });

  it("matches metadata names and host patterns", () => {
    expect(isMetadataName("metadata.google.internal")).toBe(true);
    expect(isMetadataName("a.b.metadata.goog")).toBe(true);
    expect(isMetadataName("notmetadata.goog")).toBe(false);
    expect(matchesHostPattern("a.example.com", "*.example.com")).toBe(true);
    expect(matchesHostPattern("a.b.example.com", "*.example.com")).toBe(true);
    expect(matchesHostPattern("example.com", "*.example.com")).toBe(false);
    expect(matchesHostPattern("badexample.com", "*.example.com")).toBe(false);
    expect(matchesHostPattern("api.github.com", "api.github.com")).toBe(true);
    expect(matchesHostPattern("x.api.github.com", "api.github.com")).toBe(false);
  });
});
