/**
 * The skills extension across several upstreams (src/front/skills.ts) with fake upstreams behind the
 * forwarder seam: skills/list walks every page of every skills upstream the grant reaches and
 * namespaces each entry's uri and resources; skills/get and resources/directory/read route by the
 * namespaced URI and map URIs back; a transparent upstream passes verbatim; and the advertised
 * extensions (legs.ts mergeCapabilities) are exactly those the gateway serves, with the settings
 * all skills upstreams agree on.
 */
import { describe, expect, it } from "vitest";
import type { GatewayConfig, UpstreamConfig } from "../../src/config/gateway-config.ts";
import { loadConfig } from "../../src/config/load.ts";
import type { Principal } from "../../src/config/principal.ts";
import type { CallContext, Outcome } from "../../src/protocol/call-context.ts";
import { mergeCapabilities } from "../../src/upstream/legs.ts";
import { directoryRead, exposeSkill, skillsGet, skillsList } from "../../src/front/skills.ts";
import { SKILLS_EXTENSION, TASKS_EXTENSION, mergeExtensions } from "../../src/protocol/extensions.ts";
import type { Json, JsonObject, JsonRpcRequest } from "../../src/wire/jsonrpc.ts";

const cfgOf = (names: string[]): GatewayConfig =>
  loadConfig(`egress:\n  allow_loopback: true\nupstreams:\n${names.map((n, i) => `  - {name: ${n}, url: 'http://127.0.0.1:${9000 + i}/mcp'}\n`).join("")}`, {});

const everyone: Principal = { sub: "local:unit", team: "default", roles: ["admin"], tools: null, authenticated: false };

const skill = (path: string, extra: string[] = []): JsonObject => ({
  uri: `skill://${path}/SKILL.md`,
  frontmatter: { name: path.split("/").at(-1)!, description: `The ${path} skill` },
  resources: [`skill://${path}/SKILL.md`, ...extra.map((e) => `skill://${path}/${e}`)].map((uri, i) => ({
    uri,
    digest: `sha256:${String(i).repeat(64)}`,
    size: 10 + i,
  })),
  _meta: { "example.com/kept": true },
});

interface FakeUpstream {
  caps?: JsonObject;
  /** Answers one request (already in the upstream's names). */
  answer(req: JsonRpcRequest): Json;
}

/** A CallContext whose upstreams are fakes; `sent` records what reached each upstream. */
function harness(cfg: GatewayConfig, fakes: Record<string, FakeUpstream>, opts: { era?: "legacy" | "modern"; who?: Principal } = {}) {
  const sent: { up: string; req: JsonRpcRequest }[] = [];
  const ctx = {
    cfg,
    era: opts.era ?? "legacy",
    principal: opts.who ?? everyone,
    callerFiltered: (opts.who ?? everyone).tools !== null,
    legs: { capabilities: async (up: UpstreamConfig) => fakes[up.name]?.caps },
  } as unknown as CallContext;
  const send = async (_ctx: CallContext, up: UpstreamConfig, req: JsonRpcRequest): Promise<Outcome> => {
    sent.push({ up: up.name, req });
    const result = fakes[up.name]!.answer(req);
    if (typeof result === "object" && result !== null && "error" in result)
      return { response: { jsonrpc: "2.0", id: req.id, error: result.error as never }, status: 200 };
    return { response: { jsonrpc: "2.0", id: req.id, result: result as JsonObject }, status: 200 };
  };
  return { ctx, send, sent };
}

const req = (method: string, params: JsonObject = {}): JsonRpcRequest => ({ jsonrpc: "2.0", id: 7, method, params });
const skillsCaps = (settings: JsonObject = {}): JsonObject => ({ resources: {}, extensions: { [SKILLS_EXTENSION]: settings } });

/** An upstream serving `entries` one per page, cursors "1", "2", …; skills/get and directory reads by URI. */
function skillsUpstream(entries: JsonObject[], settings: JsonObject = {}, ttlMs = 30_000): FakeUpstream {
  return {
    caps: skillsCaps(settings),
    answer(r): Json {
      const p = r.params ?? {};
      if (r.method === "skills/list") {
        const at = typeof p.cursor === "string" ? Number(p.cursor) : 0;
        const page: JsonObject = { skills: entries.slice(at, at + 1), ttlMs, cacheScope: "public" };
        if (at + 1 < entries.length) page.nextCursor = String(at + 1);
        return page;
      }
      if (r.method === "skills/get") {
        const e = entries.find((s) => s.uri === p.uri);
        return e ? { skill: e } : { error: { code: -32602, message: `No skill is served at ${String(p.uri)}` } };
      }
      if (r.method === "resources/directory/read") {
        const dir = String(p.uri);
        if (p.cursor === "next") return { resources: [{ uri: `${dir}/b.md`, name: "b.md" }] };
        return {
          resources: [
            { uri: `${dir}/SKILL.md`, name: "SKILL.md", mimeType: "text/markdown" },
            { uri: `${dir}/references`, name: "references", mimeType: "inode/directory" },
          ],
          nextCursor: "next",
        };
      }
      return { error: { code: -32601, message: "Method not found" } };
    },
  };
}

describe("advertised extensions when aggregating", () => {
  it("keeps skills and tasks with the settings every declaring upstream agrees on, and drops unknown extensions", () => {
    expect(
      mergeExtensions([
        { [SKILLS_EXTENSION]: { directoryRead: true }, "example.com/other": {} },
        { [SKILLS_EXTENSION]: {}, [TASKS_EXTENSION]: {} },
        { "example.com/third": { x: 1 } },
      ]),
    ).toEqual({ [SKILLS_EXTENSION]: {}, [TASKS_EXTENSION]: {} });
    expect(mergeExtensions([{ [SKILLS_EXTENSION]: { directoryRead: true } }, { [SKILLS_EXTENSION]: { directoryRead: true } }, {}])).toEqual({
      [SKILLS_EXTENSION]: { directoryRead: true },
    });
    expect(mergeExtensions([{ [SKILLS_EXTENSION]: { directoryRead: true } }, { [SKILLS_EXTENSION]: { directoryRead: false } }])).toEqual({
      [SKILLS_EXTENSION]: {},
    });
    expect(mergeExtensions([{ "example.com/other": {} }, {}])).toBeUndefined();
    // A malformed declaration (not an object) declares nothing.
    expect(mergeExtensions([{ [SKILLS_EXTENSION]: true }])).toBeUndefined();
  });

  it("mergeCapabilities: several upstreams advertise only served extensions; one transparent upstream verbatim", () => {
    const several = mergeCapabilities(cfgOf(["alpha", "beta"]), {
      alpha: { capabilities: { tools: { listChanged: true }, extensions: { [SKILLS_EXTENSION]: { directoryRead: true }, "example.com/unknown": {} } } },
      beta: { capabilities: { resources: {}, extensions: { [SKILLS_EXTENSION]: { directoryRead: true }, [TASKS_EXTENSION]: {} } } },
    });
    expect(several.extensions).toEqual({ [SKILLS_EXTENSION]: { directoryRead: true }, [TASKS_EXTENSION]: {} });
    expect(several.tools).toEqual({ listChanged: true });
    const none = mergeCapabilities(cfgOf(["alpha", "beta"]), { alpha: { capabilities: { tools: {}, extensions: { "example.com/unknown": {} } } }, beta: {} });
    expect(none).toEqual({ tools: {} });
    const solo = { tools: {}, extensions: { "example.com/unknown": { a: 1 }, [SKILLS_EXTENSION]: { directoryRead: true } } };
    expect(mergeCapabilities(cfgOf(["solo"]), { solo: { capabilities: solo } })).toBe(solo);
  });
});

describe("skills/list across upstreams", () => {
  const cfg = cfgOf(["alpha", "beta", "gamma"]);
  const alphaSkills = [skill("pdf-forms", ["references/FIELDS.md"]), skill("acme/release-notes")];
  const betaSkills = [skill("deploy")];
  const fakes = () => ({
    alpha: skillsUpstream(alphaSkills, { directoryRead: true }, 30_000),
    beta: skillsUpstream(betaSkills, {}, 5_000),
    gamma: { caps: { tools: {} }, answer: () => ({ error: { code: -32601, message: "Method not found" } }) } as FakeUpstream,
  });

  it("walks every page of every skills upstream and namespaces each uri and resource uri", async () => {
    const h = harness(cfg, fakes(), { era: "modern" });
    const out = await skillsList(h.ctx, req("skills/list", { _meta: { "example.com/trace": "t1" } }), h.send);
    const r = out.response.result as JsonObject;
    const skills = r.skills as JsonObject[];
    expect(skills.map((s) => s.uri)).toEqual(["alpha+skill://pdf-forms/SKILL.md", "alpha+skill://acme/release-notes/SKILL.md", "beta+skill://deploy/SKILL.md"]);
    expect((skills[0]!.resources as JsonObject[]).map((x) => x.uri)).toEqual([
      "alpha+skill://pdf-forms/SKILL.md",
      "alpha+skill://pdf-forms/references/FIELDS.md",
    ]);
    // Everything but the URIs is verbatim.
    expect(skills[0]!.frontmatter).toEqual(alphaSkills[0]!.frontmatter);
    expect((skills[0]!.resources as JsonObject[])[1]).toMatchObject({ digest: (alphaSkills[0]!.resources as JsonObject[])[1]!.digest, size: 11 });
    expect(skills[2]!._meta).toEqual({ "example.com/kept": true });
    expect(r.nextCursor).toBeUndefined();
    // Modern caching fields: the smallest upstream ttl, public only when every page was public and the caller unfiltered.
    expect(r).toMatchObject({ ttlMs: 5_000, cacheScope: "public", resultType: "complete" });
    // alpha was asked twice (its second page by its own cursor), beta once, gamma (no extension) never; params kept.
    expect(h.sent.map((s) => [s.up, s.req.params?.cursor ?? null])).toEqual([
      ["alpha", null],
      ["beta", null],
      ["alpha", "1"],
    ]);
    expect(h.sent.every((s) => (s.req.params?._meta as JsonObject | undefined)?.["example.com/trace"] === "t1")).toBe(true);
  });

  it("a grant that cannot reach an upstream sees none of its skills, and that upstream is not asked", async () => {
    const who: Principal = { ...everyone, sub: "agent:a", roles: ["agent"], tools: ["alpha__*"], authenticated: true };
    const h = harness(cfg, fakes(), { era: "modern", who });
    const r = (await skillsList(h.ctx, req("skills/list"), h.send)).response.result as JsonObject;
    expect((r.skills as JsonObject[]).map((s) => s.uri)).toEqual(["alpha+skill://pdf-forms/SKILL.md", "alpha+skill://acme/release-notes/SKILL.md"]);
    expect(h.sent.every((s) => s.up === "alpha")).toBe(true);
    expect(r.cacheScope).toBe("private");
    const g = await skillsGet(h.ctx, req("skills/get", { uri: "beta+skill://deploy/SKILL.md" }), h.send);
    expect(g.response.error?.code).toBe(-32602);
    expect(h.sent.some((s) => s.up === "beta")).toBe(false);
  });

  it("refuses a client cursor (-32602, 400 for modern) and answers -32601 when no upstream serves skills", async () => {
    const h = harness(cfg, fakes(), { era: "modern" });
    const c = await skillsList(h.ctx, req("skills/list", { cursor: "1" }), h.send);
    expect(c.response.error?.code).toBe(-32602);
    expect(c.status).toBe(400);
    expect(h.sent).toHaveLength(0);
    const bare = harness(cfgOf(["gamma", "delta"]), { gamma: fakes().gamma, delta: { caps: { extensions: { "example.com/x": {} } }, answer: () => ({}) } });
    const m = await skillsList(bare.ctx, req("skills/list"), bare.send);
    expect(m.response.error?.code).toBe(-32601);
    expect(m.status).toBe(200); // legacy client
    expect(bare.sent).toHaveLength(0);
  });

  it("legacy clients get no caching fields stamped on the aggregate", async () => {
    const h = harness(cfg, fakes(), { era: "legacy" });
    const r = (await skillsList(h.ctx, req("skills/list"), h.send)).response.result as JsonObject;
    expect(Object.keys(r)).toEqual(["skills"]);
    expect((r.skills as Json[]).length).toBe(3);
  });
});

describe("routing by namespaced skill URI", () => {
  const cfg = cfgOf(["alpha", "beta"]);
  const fakes = () => ({
    alpha: skillsUpstream([skill("pdf-forms", ["references/FIELDS.md"])], { directoryRead: true }),
    beta: skillsUpstream([skill("deploy")]),
  });

  it("skills/get reaches the owning upstream with its own URI and maps the entry's URIs back", async () => {
    const h = harness(cfg, fakes(), { era: "modern" });
    const out = await skillsGet(h.ctx, req("skills/get", { uri: "alpha+skill://pdf-forms/SKILL.md" }), h.send);
    expect(h.sent).toEqual([{ up: "alpha", req: expect.objectContaining({ method: "skills/get", params: { uri: "skill://pdf-forms/SKILL.md" } }) }]);
    const r = out.response.result as JsonObject;
    expect(r.skill).toEqual(exposeSkill(cfg.upstreams[0]!, skill("pdf-forms", ["references/FIELDS.md"])));
    expect((r.skill as JsonObject).uri).toBe("alpha+skill://pdf-forms/SKILL.md");
    // The fake gave no caching fields (a 2025-11-25 upstream): a modern client gets the conservative ones.
    expect(r).toMatchObject({ ttlMs: 0, cacheScope: "private" });
  });

  it("skills/get: an upstream's own error passes; unknown prefixes and bad params are refused without forwarding", async () => {
    const h = harness(cfg, fakes(), { era: "modern" });
    const miss = await skillsGet(h.ctx, req("skills/get", { uri: "beta+skill://nope/SKILL.md" }), h.send);
    expect(miss.response.error).toMatchObject({ code: -32602, message: "No skill is served at skill://nope/SKILL.md" });
    expect(h.sent).toHaveLength(1);
    const unknown = await skillsGet(h.ctx, req("skills/get", { uri: "gamma+skill://x/SKILL.md" }), h.send);
    expect(unknown.response.error).toMatchObject({ code: -32602, data: { uri: "gamma+skill://x/SKILL.md" } });
    const bare = await skillsGet(h.ctx, req("skills/get", { uri: "skill://pdf-forms/SKILL.md" }), h.send);
    expect(bare.response.error?.code).toBe(-32602);
    const bad = await skillsGet(h.ctx, req("skills/get", { uri: 3 }), h.send);
    expect(bad.response.error?.code).toBe(-32602);
    expect(bad.status).toBe(400);
    expect(h.sent).toHaveLength(1);
  });

  it("resources/directory/read: routed where directoryRead is declared, children mapped, the upstream's cursor round-trips", async () => {
    const h = harness(cfg, fakes(), { era: "legacy" });
    const first = await directoryRead(h.ctx, req("resources/directory/read", { uri: "alpha+skill://pdf-forms" }), h.send);
    const r = first.response.result as JsonObject;
    expect((r.resources as JsonObject[]).map((x) => [x.uri, x.mimeType ?? null])).toEqual([
      ["alpha+skill://pdf-forms/SKILL.md", "text/markdown"],
      ["alpha+skill://pdf-forms/references", "inode/directory"],
    ]);
    expect(r.nextCursor).toBe("next");
    expect(r.ttlMs).toBeUndefined(); // legacy client: nothing stamped
    const second = await directoryRead(h.ctx, req("resources/directory/read", { uri: "alpha+skill://pdf-forms", cursor: "next" }), h.send);
    expect(((second.response.result as JsonObject).resources as JsonObject[])[0]!.uri).toBe("alpha+skill://pdf-forms/b.md");
    expect(h.sent.map((s) => s.req.params)).toEqual([{ uri: "skill://pdf-forms" }, { uri: "skill://pdf-forms", cursor: "next" }]);
    // beta did not declare directoryRead: refused here, never forwarded.
    const refused = await directoryRead(h.ctx, req("resources/directory/read", { uri: "beta+skill://deploy" }), h.send);
    expect(refused.response.error).toMatchObject({ code: -32602, data: { uri: "beta+skill://deploy" } });
    expect(h.sent).toHaveLength(2);
  });
});

describe("one transparent upstream", () => {
  it("passes skills requests verbatim (cursor included) and the answer unchanged", async () => {
    const cfg = cfgOf(["solo"]);
    expect(cfg.upstreams[0]!.namespaced).toBe(false);
    const h = harness(cfg, { solo: skillsUpstream([skill("pdf-forms"), skill("deploy")]) }, { era: "legacy" });
    const page = await skillsList(h.ctx, req("skills/list", { cursor: "1" }), h.send);
    expect(page.response.result).toEqual({ skills: [skill("deploy")], ttlMs: 30_000, cacheScope: "public" });
    expect(h.sent[0]!.req).toEqual(req("skills/list", { cursor: "1" }));
    const got = await skillsGet(h.ctx, req("skills/get", { uri: "skill://deploy/SKILL.md" }), h.send);
    expect(got.response.result).toEqual({ skill: skill("deploy") });
    const dir = await directoryRead(h.ctx, req("resources/directory/read", { uri: "skill://deploy" }), h.send);
    expect(((dir.response.result as JsonObject).resources as JsonObject[])[0]!.uri).toBe("skill://deploy/SKILL.md");
  });
});
