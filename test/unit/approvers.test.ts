/**
 * Separation of duties (src/governance/approvers.ts) as a table: the requester never resolves its
 * own hold (admin included), under any spelling of its name (case, width); `holds.unresolvable` rules are resolved by nobody (admin included);
 * admin resolves the rest; everyone else needs a `holds.resolvers` entry whose rule globs, roles
 * and teams (absent: the hold's own team; `*`: any; else one of them) all match, with a mapping's
 * `approval` matched as `(mapping)`. And who may see a team's holds at all.
 */
import { describe, expect, it } from "vitest";
import type { HoldsConfig } from "../../src/config/gateway-config.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { Role } from "../../src/config/roles.ts";
import { mayResolve, maySeeTeam } from "../../src/governance/approvers.ts";

const DEFAULTS: HoldsConfig = { expiresMs: 4 * 3_600_000, waitMs: 0, resolvers: [{ rules: ["*"], roles: ["approver"] }], unresolvable: [], webhooks: [] };
const cfg = (extra: Partial<HoldsConfig>): HoldsConfig => ({ ...DEFAULTS, ...extra });
const who = (sub: string, team: string, ...roles: Role[]): Principal => ({ sub, team, roles, tools: ["*"], authenticated: true });
const hold = (principal: string, team: string, rule: string | null) => ({ principal, team, rule });

const custom = cfg({
  resolvers: [
    { rules: ["payments.*"], roles: ["approver"], teams: ["finance"] },
    { rules: ["deploy-*", "(mapping)"], roles: ["operator"] },
    { rules: ["db.drop?"], roles: ["approver"], teams: ["*"] },
  ],
  unresolvable: ["never-*", "prod.wipe"],
});

type Case = [name: string, holds: HoldsConfig, approver: Principal, hold: ReturnType<typeof hold>, ok: boolean, why?: RegExp];

const CASES: Case[] = [
  // the requester, whatever its roles
  ["self, approver", DEFAULTS, who("human:ann", "eng", "approver"), hold("human:ann", "eng", "r1"), false, /raised this hold/],
  ["self, admin", DEFAULTS, who("human:root", "eng", "admin"), hold("human:root", "eng", "r1"), false, /raised this hold/],
  ["self is by sub, not by team", DEFAULTS, who("agent:bot", "ops", "admin"), hold("agent:bot", "eng", "r1"), false, /separation of duties/],
  // any spelling of the requester's name: case, width, compatibility forms (a grant for Agent:selfappr on agent:selfappr's hold)
  [
    "self in another case, approver",
    DEFAULTS,
    who("Agent:selfappr", "eng", "approver"),
    hold("agent:selfappr", "eng", "r1"),
    false,
    /is a spelling of agent:selfappr/,
  ],
  ["self in another case, admin", DEFAULTS, who("agent:SelfAppr", "eng", "admin"), hold("agent:selfappr", "eng", "r1"), false, /separation of duties/],
  ["self in full-width letters", DEFAULTS, who("ａｇｅｎｔ:selfappr", "eng", "approver"), hold("agent:selfappr", "eng", "r1"), false, /separation of duties/],
  ["an OIDC sub in another case", DEFAULTS, who("oidc:idp:U-42", "eng", "approver"), hold("oidc:idp:u-42", "eng", "r1"), false, /separation of duties/],
  // unresolvable rules: nobody, admin neither
  [
    "unresolvable glob, approver",
    custom,
    who("human:ann", "finance", "approver"),
    hold("agent:bot", "finance", "never-ever"),
    false,
    /cannot be resolved by anyone.*never-\*/,
  ],
  ["unresolvable exact, admin", custom, who("human:root", "eng", "admin"), hold("agent:bot", "eng", "prod.wipe"), false, /holds\.unresolvable: prod\.wipe/],
  ["unresolvable is a glob, not a prefix", custom, who("human:root", "eng", "admin"), hold("agent:bot", "eng", "prod.wipeout"), true],
  // admin resolves anything else, any team, any rule
  ["admin, other team, no resolver fits", custom, who("human:root", "ops", "admin"), hold("agent:bot", "eng", "anything"), true],
  ["admin, mapping hold", custom, who("human:root", "ops", "admin"), hold("agent:bot", "eng", null), true],
  // the default resolver: approvers of the hold's own team, any rule
  ["default: approver, own team", DEFAULTS, who("human:ann", "eng", "approver"), hold("agent:bot", "eng", "r1"), true],
  [
    "default: approver, other team",
    DEFAULTS,
    who("human:ann", "ops", "approver"),
    hold("agent:bot", "eng", "r1"),
    false,
    /may not resolve holds of rule r1 in team eng/,
  ],
  ["default: mapping hold is (mapping), matched by *", DEFAULTS, who("human:ann", "eng", "approver"), hold("agent:bot", "eng", null), true],
  ["default: role mismatch (auditor)", DEFAULTS, who("human:ann", "eng", "auditor"), hold("agent:bot", "eng", "r1"), false, /roles auditor/],
  ["default: role mismatch (operator)", DEFAULTS, who("human:ann", "eng", "operator", "auditor"), hold("agent:bot", "eng", "r1"), false],
  ["no resolvers at all", cfg({ resolvers: [] }), who("human:ann", "eng", "approver"), hold("agent:bot", "eng", "r1"), false],
  // rule globs
  [
    "glob payments.* matches payments.refund in a named team",
    custom,
    who("human:fin", "finance", "approver"),
    hold("agent:bot", "finance", "payments.refund"),
    true,
  ],
  ["glob payments.* does not match payment.refund", custom, who("human:fin", "finance", "approver"), hold("agent:bot", "finance", "payment.refund"), false],
  ["? matches one character", custom, who("human:ann", "eng", "approver"), hold("agent:bot", "eng", "db.drops"), true],
  ["? does not match two", custom, who("human:ann", "eng", "approver"), hold("agent:bot", "eng", "db.dropss"), false],
  // teams: absent = the hold's own team; named; *
  ["teams named: the approver's own team is not implied", custom, who("human:fin", "eng", "approver"), hold("agent:bot", "eng", "payments.refund"), false],
  ["teams named: another named team", custom, who("human:eng", "eng", "approver"), hold("agent:bot", "finance", "payments.refund"), true],
  ["teams *: any team", custom, who("human:ann", "sales", "approver"), hold("agent:bot", "eng", "db.drop1"), true],
  ["teams absent: own team only", custom, who("human:op", "eng", "operator"), hold("agent:bot", "eng", "deploy-prod"), true],
  ["teams absent: not another team", custom, who("human:op", "ops", "operator"), hold("agent:bot", "eng", "deploy-prod"), false],
  // the mapping's approval: (mapping)
  ["(mapping) listed for operators", custom, who("human:op", "eng", "operator"), hold("agent:bot", "eng", null), true],
  ["(mapping) not listed for approvers here", custom, who("human:ann", "eng", "approver"), hold("agent:bot", "eng", null), false, /rule \(mapping\)/],
  ["(mapping) is literal: a rule named mapping is not it", custom, who("human:op", "eng", "operator"), hold("agent:bot", "eng", "mapping"), false],
];

describe("mayResolve", () => {
  it.each(CASES)("%s", (_name, holds, approver, h, ok, why) => {
    const r = mayResolve(holds, approver, h);
    expect(r.ok).toBe(ok);
    if (!r.ok) {
      expect(r.status).toBe(403);
      expect(r.why.length).toBeGreaterThan(10);
      if (why) expect(r.why).toMatch(why);
    }
  });

  it("the self check comes before admin and unresolvable", () => {
    const r = mayResolve(custom, who("human:root", "eng", "admin"), hold("human:root", "eng", "prod.wipe"));
    expect(r).toMatchObject({ ok: false, why: expect.stringMatching(/raised this hold/) });
  });
});

describe("maySeeTeam", () => {
  const SEE: [name: string, holds: HoldsConfig, viewer: Principal, team: string, ok: boolean][] = [
    ["approver of the team", DEFAULTS, who("h:a", "eng", "approver"), "eng", true],
    ["auditor of the team", DEFAULTS, who("h:a", "eng", "auditor"), "eng", true],
    ["operator of the team", DEFAULTS, who("h:a", "eng", "operator"), "eng", true],
    ["agent of the team", DEFAULTS, who("h:a", "eng", "agent"), "eng", false],
    ["approver of another team", DEFAULTS, who("h:a", "ops", "approver"), "eng", false],
    ["admin of another team", DEFAULTS, who("h:a", "ops", "admin"), "eng", true],
    ["resolver entry naming the team", custom, who("h:a", "eng", "approver"), "finance", true],
    ["resolver entry naming the team, wrong role", custom, who("h:a", "eng", "auditor"), "finance", false],
    ["resolver entry with *", custom, who("h:a", "eng", "approver"), "sales", true],
    ["no entry names it", cfg({ resolvers: [{ rules: ["*"], roles: ["approver"], teams: ["finance"] }] }), who("h:a", "eng", "approver"), "sales", false],
  ];
  it.each(SEE)("%s", (_name, holds, viewer, team, ok) => {
    expect(maySeeTeam(holds, viewer, team)).toBe(ok);
  });
});
