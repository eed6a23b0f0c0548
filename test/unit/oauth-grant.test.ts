/**
 * The pure parts of OAuth sign-in, in workerd: src/identity/oauth-grant.ts (which tool globs a
 * template covers, the offer a template or an enrollment code makes — tools outside the template
 * dropped, roles filtered, lifetime capped, no offer when no role survives — and the signed
 * offer the consent form carries: it opens only for the handle and secret it was signed for,
 * and a flipped byte, a truncated value or garbage opens to null) and src/identity/oauth-server.ts
 * (readProps fails closed on any shape but an OAuth grant's, userIdOf's spelling, newGrantJti's
 * shape and freshness). Owns nothing of the gateway; must never touch a binding.
 */
import { describe, expect, it } from "vitest";
import type { GrantTemplate } from "../../src/config/oauth-schema.ts";
import { decodeCanonical } from "../../src/identity/base64url.ts";
import { type GrantOffer, coveredTools, enrollmentOffer, openOffer, signOffer, templateOffer } from "../../src/identity/oauth-grant.ts";
import { readProps, userIdOf, newGrantJti } from "../../src/identity/oauth-server.ts";

const template: GrantTemplate = { tools: ["alpha__*", "beta__read", "gamma__get_?"], roles: ["agent", "auditor"], team: "connectors", lifetimeS: 7200 };
const budgeted: GrantTemplate = { ...template, budget: { calls: 50 } };

describe("coveredTools", () => {
  it("keeps a tool a template glob matches as a literal name, or that equals a template glob; drops the rest, in order", () => {
    const r = coveredTools(template, ["alpha__echo", "beta__read", "beta__write", "alpha__*", "gamma__get_x", "gamma__get_xy", "delta__x", "alpha"]);
    expect(r.kept).toEqual(["alpha__echo", "beta__read", "alpha__*", "gamma__get_x"]);
    expect(r.dropped).toEqual(["beta__write", "gamma__get_xy", "delta__x", "alpha"]);
  });

  it("a glob wider than the template's is dropped: alpha* is not covered by alpha__*, * is not covered by anything but *", () => {
    expect(coveredTools(template, ["alpha*", "*", "beta__*"])).toEqual({ kept: [], dropped: ["alpha*", "*", "beta__*"] });
    expect(coveredTools({ ...template, tools: ["*"] }, ["*", "anything", "a__*"])).toEqual({ kept: ["*", "anything", "a__*"], dropped: [] });
  });

  it("an empty template covers nothing; no tools keep nothing", () => {
    expect(coveredTools({ ...template, tools: [] }, ["alpha__echo"])).toEqual({ kept: [], dropped: ["alpha__echo"] });
    expect(coveredTools(template, [])).toEqual({ kept: [], dropped: [] });
  });

  // Was a bug: a template glob matched against the code's tool glob as if it were a literal name
  // let a template `?` match a code's `*` (gamma__get_? "covering" gamma__get_*, a wider grant).
  it("a code's `*` is not covered by a template's `?` (gamma__get_* is wider than gamma__get_?)", () => {
    expect(coveredTools(template, ["gamma__get_*"]).kept).toEqual([]);
  });

  it("a glob is covered by the same glob or by a prefix glob it starts with, and by nothing looser", () => {
    const t = { ...template, tools: ["github__*", "alpha__x?", "*"] };
    expect(coveredTools({ ...template, tools: ["github__*"] }, ["github__get_*", "github__*", "github__a?"]).dropped).toEqual([]);
    expect(coveredTools({ ...template, tools: ["github__*"] }, ["git*", "*", "gitlab__*"]).kept).toEqual([]);
    expect(coveredTools({ ...template, tools: ["alpha__x?"] }, ["alpha__x?", "alpha__xy", "alpha__x*"])).toEqual({
      kept: ["alpha__x?", "alpha__xy"],
      dropped: ["alpha__x*"],
    });
    expect(coveredTools(t, ["anything*", "?"]).dropped).toEqual([]);
  });
});

describe("templateOffer", () => {
  it("is the template as it is, for the given source and sub, with the issuer for OIDC", () => {
    expect(templateOffer("access", "access:dana@example.com", template)).toEqual({
      source: "access",
      sub: "access:dana@example.com",
      team: "connectors",
      roles: ["agent", "auditor"],
      tools: ["alpha__*", "beta__read", "gamma__get_?"],
      lifetimeS: 7200,
    });
    const o = templateOffer("oidc", "(next)", budgeted, "https://idp.example.com");
    expect(o).toMatchObject({ source: "oidc", issuer: "https://idp.example.com", budget: { calls: 50 }, lifetimeS: 7200 });
    expect("issuer" in templateOffer("access", "x", template)).toBe(false);
    expect("budget" in templateOffer("access", "x", template)).toBe(false);
  });

  it("copies the template's lists: changing the offer leaves the template alone", () => {
    const o = templateOffer("access", "x", budgeted);
    o.tools.push("evil__*");
    o.roles.push("admin");
    o.budget!.calls = 1_000_000;
    expect(budgeted.tools).toEqual(["alpha__*", "beta__read", "gamma__get_?"]);
    expect(budgeted.roles).toEqual(["agent", "auditor"]);
    expect(budgeted.budget).toEqual({ calls: 50 });
  });
});

describe("enrollmentOffer", () => {
  const code = {
    sub: "person:dana",
    tools: ["alpha__echo", "beta__write", "beta__read", "*"],
    roles: ["agent", "admin"] as GrantOffer["roles"],
    ttlSeconds: 3600,
  };

  it("keeps the code's tools the template covers and its roles the template has; team and budget are the template's", () => {
    expect(enrollmentOffer(budgeted, code, "enr-1")).toEqual({
      source: "enrollment",
      sub: "person:dana",
      team: "connectors",
      roles: ["agent"],
      tools: ["alpha__echo", "beta__read"],
      lifetimeS: 3600,
      enrollment: "enr-1",
      budget: { calls: 50 },
    });
  });

  it("caps the lifetime at the template's", () => {
    expect(enrollmentOffer(template, { ...code, ttlSeconds: 86_400 }, "e")!.lifetimeS).toBe(7200);
    expect(enrollmentOffer(template, { ...code, ttlSeconds: 600 }, "e")!.lifetimeS).toBe(600);
  });

  it("a code whose roles the template has none of signs nobody in (null)", () => {
    expect(enrollmentOffer(template, { ...code, roles: ["admin", "operator"] }, "e")).toBeNull();
    expect(enrollmentOffer(template, { ...code, roles: [] }, "e")).toBeNull();
    // A code stored before the canonical-name rule, for a name the gateway now refuses, signs nobody in.
    expect(enrollmentOffer(template, { ...code, sub: "Person:Dana" }, "e")).toBeNull();
    expect(enrollmentOffer(template, { ...code, sub: "_dana" }, "e")).toBeNull();
  });

  it("a code none of whose tools the template covers still signs in, with no tools", () => {
    expect(enrollmentOffer(template, { ...code, tools: ["zeta__x"] }, "e")!.tools).toEqual([]);
  });
});

describe("signOffer / openOffer", () => {
  const secret = "gateway-signing-secret";
  const offer = enrollmentOffer(budgeted, { sub: "person:dana", tools: ["alpha__echo"], roles: ["agent"], ttlSeconds: 3600 }, "enr-7")!;
  const signed = signOffer(secret, "handle-1", offer);

  it("round-trips for the handle and secret it was signed for, and carries no more than the offer", () => {
    expect(signed).toMatch(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
    expect(openOffer(secret, "handle-1", signed)).toEqual(offer);
    const body = JSON.parse(new TextDecoder().decode(decodeCanonical(signed.split(".")[0]!)!));
    expect(body).toEqual(offer);
  });

  it("does not open for another handle or another secret", () => {
    expect(openOffer(secret, "handle-2", signed)).toBeNull();
    expect(openOffer("another-secret", "handle-1", signed)).toBeNull();
    expect(openOffer(secret, "", signed)).toBeNull();
  });

  it("a flipped character anywhere (body or mac) opens to null", () => {
    for (let i = 0; i < signed.length; i++) {
      if (signed[i] === ".") continue;
      const flipped = signed.slice(0, i) + (signed[i] === "A" ? "B" : "A") + signed.slice(i + 1);
      expect(openOffer(secret, "handle-1", flipped), `position ${i}`).toBeNull();
    }
  });

  it("a body re-signed with widened contents but the old mac opens to null", () => {
    const wide = signOffer(secret, "handle-1", { ...offer, roles: ["admin"], tools: ["*"] });
    const forged = `${wide.split(".")[0]}.${signed.split(".")[1]}`;
    expect(openOffer(secret, "handle-1", forged)).toBeNull();
    // Signed properly, the widened one does open: the mac is what binds the contents.
    expect(openOffer(secret, "handle-1", wide)!.roles).toEqual(["admin"]);
  });

  it("a truncated value opens to null", () => {
    const [body, mac] = signed.split(".") as [string, string];
    for (const t of [signed.slice(0, -1), signed.slice(0, -8), `${body}.`, body, `.${mac}`, signed.slice(1), signed.slice(0, body.length + 2)]) {
      expect(openOffer(secret, "handle-1", t), t).toBeNull();
    }
  });

  it("garbage, null, extra parts and oversized values open to null", () => {
    for (const g of [null, "", ".", "..", "a.b", "a.b.c", `${signed}.x`, "%%%.%%%", "not a signed offer", "x".repeat(20_000)]) {
      expect(openOffer(secret, "handle-1", g), String(g).slice(0, 40)).toBeNull();
    }
  });

  it("a value signed properly whose body is not an offer (bad role, no sub, not JSON) opens to null", () => {
    const bad = [{ ...offer, roles: ["root"] }, { ...offer, sub: 7 }, { ...offer, tools: "alpha__*" }, "just a string"] as unknown as GrantOffer[];
    for (const b of bad) expect(openOffer(secret, "handle-1", signOffer(secret, "handle-1", b))).toBeNull();
  });
});

describe("readProps", () => {
  const props = {
    jti: "oa_x",
    sub: "person:dana",
    team: "connectors",
    roles: ["agent"],
    tools: ["alpha__echo"],
    exp: 1_900_000_000,
    client_id: "c1",
    source: "enrollment",
  };

  it("reads an OAuth grant's props, copying its lists and dropping unknown fields", () => {
    const input = { ...props, budget: { calls: 5 }, extra: "ignored" };
    const p = readProps(input)!;
    expect(p).toEqual({ ...props, budget: { calls: 5 } });
    expect(p.tools).not.toBe(input.tools);
    expect(p.roles).not.toBe(input.roles);
    for (const source of ["access", "oidc", "enrollment"]) expect(readProps({ ...props, source })?.source).toBe(source);
  });

  it("refuses anything else (fail closed)", () => {
    const bad: unknown[] = [
      null,
      undefined,
      "props",
      42,
      [],
      {},
      { ...props, jti: undefined },
      { ...props, sub: 1 },
      { ...props, team: null },
      { ...props, client_id: undefined },
      { ...props, roles: ["root"] },
      { ...props, roles: "agent" },
      { ...props, tools: [1] },
      { ...props, tools: undefined },
      { ...props, exp: "1900000000" },
      { ...props, source: "password" },
      { ...props, source: undefined },
      { ...props, budget: null },
      { ...props, budget: { calls: "5" } },
      { ...props, budget: 5 },
    ];
    for (const b of bad) expect(readProps(b), JSON.stringify(b) ?? String(b)).toBeNull();
  });
});

describe("userIdOf / newGrantJti", () => {
  it("userIdOf is u_ + base64url of the sub: no colon, deterministic, distinct per sub", () => {
    const subs = ["access:dana@example.com", "oidc:idp.example.com:42", "person:dana", "", "ü:✓"];
    const ids = subs.map(userIdOf);
    for (const [i, id] of ids.entries()) {
      expect(id).toMatch(/^u_[A-Za-z0-9_-]*$/);
      expect(new TextDecoder().decode(decodeCanonical(id.slice(2))!)).toBe(subs[i]);
      expect(userIdOf(subs[i]!)).toBe(id);
    }
    expect(new Set(ids).size).toBe(subs.length);
  });

  it("newGrantJti is oa_ + 128 random bits in base64url, fresh each time", () => {
    const jtis = Array.from({ length: 200 }, newGrantJti);
    for (const j of jtis) {
      expect(j).toMatch(/^oa_[A-Za-z0-9_-]{22}$/);
      expect(decodeCanonical(j.slice(3))!.length).toBe(16);
    }
    expect(new Set(jtis).size).toBe(200);
  });
});
