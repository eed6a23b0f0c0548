/**
 * The skills extension (SEP-2640) through Portcullis on the production build, in both eras, with
 * the SDK v2 client's SkillsClient: two skills upstreams (test/fixtures/skills-upstream.ts, one with
 * `directoryRead`, one without, skills paged one per page) plus the conformance upstream behind a
 * namespaced gateway, and one skills upstream behind a transparent gateway. Checks the aggregated
 * listing (both upstreams, every URI namespaced, entries otherwise as the upstream serves them),
 * skills/get, SKILL.md and other files read through resources/read (content equal to a direct
 * read, digests verified by the client), directory reads routed per upstream, the advertised
 * extensions being exactly the served ones, and a grant that cannot reach an upstream seeing none
 * of its skills. Starts its own upstreams and gateways; all on loopback.
 */
import type { Client } from "@modelcontextprotocol/client";
import { type Skill, SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from "vitest";
import * as z from "zod/v4";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { type SkillsUpstream, startSkillsUpstream } from "../fixtures/skills-upstream.ts";
import { freePort, startPortcullis } from "./harness.ts";
import { closeSessions, type Era, grantFor, sessionClient } from "./mcp.ts";

const SKILLS = "io.modelcontextprotocol/skills";
const TASKS = "io.modelcontextprotocol/tasks";
const UNKNOWN = "com.example/unserved";

const BETA_SKILLS = {
  "changelog-audit": {
    "SKILL.md":
      "---\nname: changelog-audit\ndescription: Check a changelog against the merged changes.\n---\n# Changelog audit\n\nCompare every entry with its pull request.\n",
    "scripts/audit.sh": "#!/bin/sh\necho audit\n",
  },
  "incident-review": {
    "SKILL.md": "---\nname: incident-review\ndescription: Run a blameless incident review.\n---\n# Incident review\n",
  },
  "on-call": {
    "SKILL.md": "---\nname: on-call\ndescription: Hand over the on-call shift.\n---\n# On call\n",
  },
};

let alpha: SkillsUpstream;
let beta: SkillsUpstream;
let gw: Awaited<ReturnType<typeof startPortcullis>>;
let solo: Awaited<ReturnType<typeof startPortcullis>>;
let alphaOnlyToken = "";

beforeAll(async () => {
  alpha = await startSkillsUpstream({ name: "alpha-skills", extensions: { [UNKNOWN]: { level: 1 } } });
  beta = await startSkillsUpstream({ name: "beta-skills", skills: BETA_SKILLS, directoryRead: false, pageSize: 2 });
  const signingKey = JSON.stringify((await generateSigningKey("skills-e2e")).privateJwk);
  const [port, soloPort] = [await freePort(), await freePort()];
  gw = await startPortcullis(
    `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: alpha
    url: ${alpha.url}
    timeout: 30s
  - name: beta
    url: ${beta.url}
    timeout: 30s
  - name: conf
    url: ${inject("conformanceUrl")}
    timeout: 30s
`,
    port,
    { PORTCULLIS_SIGNING_KEY: signingKey },
  );
  solo = await startPortcullis(
    `
actor: local:e2e
egress:
  allow_loopback: true
upstreams:
  - name: alpha
    url: ${alpha.url}
    timeout: 30s
`,
    soloPort,
  );
  const origin = new URL(gw.url).origin;
  alphaOnlyToken = (
    await grantFor(signingKey, origin, { sub: "agent:alpha-only", team: "e2e", roles: ["agent"], tools: ["alpha__*", "conf__*"], ttlSeconds: 900 }, 86400)
  ).token;
});

afterAll(async () => {
  await Promise.all([gw?.stop(), solo?.stop(), alpha?.close(), beta?.close()]);
});

type Mode = Era;
const connect = (url: string, mode: Mode, token?: string): Promise<Client> => sessionClient("skills-e2e", url, token, mode);
afterEach(closeSessions);

/** An upstream's entry as the namespaced gateway shows it: the entry's uri and every resource uri prefixed. */
function namespaced(prefix: string, e: Skill): Skill {
  if (e.resources === "dynamic") return { ...e, uri: `${prefix}+${e.uri}` };
  return { ...e, uri: `${prefix}+${e.uri}`, resources: e.resources.map((r) => ({ ...r, uri: `${prefix}+${r.uri}` })) };
}

const byUri = (a: { uri: string }, b: { uri: string }) => (a.uri < b.uri ? -1 : a.uri > b.uri ? 1 : 0);
const DirectoryPage = z.looseObject({
  resources: z.array(z.looseObject({ uri: z.string(), name: z.string(), mimeType: z.string().optional() })),
  nextCursor: z.string().optional(),
});
const ReadResult = z.looseObject({ contents: z.array(z.looseObject({ uri: z.string(), text: z.string().optional(), mimeType: z.string().optional() })) });

for (const mode of ["legacy", { pin: "2026-07-28" }] as Mode[]) {
  const era = mode === "legacy" ? "legacy" : "modern";
  describe(`skills through the gateway, ${era} client`, () => {
    it("advertises exactly the extensions it serves: skills with the settings both upstreams serve, tasks, nothing unknown", async () => {
      const direct = await connect(alpha.url, mode);
      expect(direct.getServerCapabilities()?.extensions).toEqual({ [SKILLS]: { directoryRead: true }, [UNKNOWN]: { level: 1 } });
      const client = await connect(gw.url, mode);
      expect(client.getProtocolEra()).toBe(era);
      // directoryRead: alpha serves it, beta does not, so it is not advertised for the aggregate.
      // tasks: the conformance upstream declares it on its 2026-07-28 leg only.
      expect(client.getServerCapabilities()?.extensions).toEqual(era === "modern" ? { [SKILLS]: {}, [TASKS]: {} } : { [SKILLS]: {} });
      const skills = new SkillsClient(client);
      expect(skills.supported).toBe(true);
      expect(skills.directoryRead).toBe(false);
    });

    it("lists both upstreams' skills, every page, namespaced; skills/get returns the same entry", async () => {
      const client = await connect(gw.url, mode);
      const skills = new SkillsClient(client);
      const listing = await skills.list();
      expect(listing.invalid).toEqual([]);
      const expected = [...alpha.entries.map((e) => namespaced("alpha", e)), ...beta.entries.map((e) => namespaced("beta", e))];
      expect(expected.length).toBe(5);
      expect([...listing.skills].sort(byUri)).toEqual([...expected].sort(byUri));
      for (const s of listing.skills) {
        expect(s.uri.startsWith("alpha+skill://") || s.uri.startsWith("beta+skill://")).toBe(true);
        for (const r of s.resources as { uri: string }[]) expect(r.uri.startsWith(s.uri.slice(0, s.uri.indexOf("+") + 1))).toBe(true);
      }
      if (era === "modern") expect(listing).toMatchObject({ ttlMs: 0, cacheScope: "private" });
      const pdf = listing.skills.find((s) => s.uri === "alpha+skill://pdf-forms/SKILL.md")!;
      expect((await skills.get(pdf.uri)).skill).toEqual(pdf);
      const audit = listing.skills.find((s) => s.uri === "beta+skill://changelog-audit/SKILL.md")!;
      expect((await skills.get(audit.uri)).skill).toEqual(audit);
      // A cursor on the aggregate is refused; an unknown skill is -32602.
      await expect(client.request({ method: "skills/list", params: { cursor: "x" } }, z.looseObject({}))).rejects.toThrow(/cursor/i);
      await expect(skills.get("alpha+skill://no-such-skill/SKILL.md")).rejects.toThrow();
    });

    it("reads SKILL.md and other skill files through resources/read, byte for byte what the upstream serves", async () => {
      const direct = await connect(alpha.url, mode);
      const directManifest = await direct.request({ method: "resources/read", params: { uri: "skill://pdf-forms/SKILL.md" } }, ReadResult);
      const directFields = await direct.request({ method: "resources/read", params: { uri: "skill://pdf-forms/references/FIELDS.md" } }, ReadResult);
      const client = await connect(gw.url, mode);
      const skills = new SkillsClient(client);
      const pdf = (await skills.get("alpha+skill://pdf-forms/SKILL.md")).skill;
      const manifest = await skills.read(pdf);
      expect(manifest.verified).toBe(true);
      expect(manifest.uri).toBe("alpha+skill://pdf-forms/SKILL.md");
      expect(manifest.text).toBe(directManifest.contents[0]!.text);
      expect(manifest.frontmatter).toEqual({ name: "pdf-forms", description: "Fill in PDF forms from structured data." });
      const fields = await skills.read(pdf, "references/FIELDS.md");
      expect(fields.verified).toBe(true);
      expect(fields.text).toBe(directFields.contents[0]!.text);
      // Raw resources/read: the content's uri is the namespaced one the client asked for.
      const raw = await client.request({ method: "resources/read", params: { uri: "beta+skill://on-call/SKILL.md" } }, ReadResult);
      expect(raw.contents.map((c) => [c.uri, c.mimeType])).toEqual([["beta+skill://on-call/SKILL.md", "text/markdown"]]);
      expect(raw.contents[0]!.text).toBe(BETA_SKILLS["on-call"]["SKILL.md"]);
      const onCall = (await skills.get("beta+skill://on-call/SKILL.md")).skill;
      expect((await skills.read(onCall)).text).toBe(BETA_SKILLS["on-call"]["SKILL.md"]);
    });

    it("routes resources/directory/read to the upstream that serves it, children namespaced; refuses it for the other", async () => {
      // Every page (the fixture pages one child at a time), the upstream's cursor round-tripping through the gateway.
      const walk = async (c: Client, uri: string) => {
        const all: z.infer<typeof DirectoryPage>["resources"] = [];
        let cursor: string | undefined;
        for (let i = 0; i < 10; i++) {
          const page = await c.request({ method: "resources/directory/read", params: { uri, ...(cursor ? { cursor } : {}) } }, DirectoryPage);
          all.push(...page.resources);
          if (!page.nextCursor) return { all, pages: i + 1 };
          cursor = page.nextCursor;
        }
        throw new Error("too many directory pages");
      };
      const direct = await walk(await connect(alpha.url, mode), "skill://pdf-forms");
      const client = await connect(gw.url, mode);
      const through = await walk(client, "alpha+skill://pdf-forms");
      expect(through.pages).toBe(2);
      expect(through.all).toEqual(direct.all.map((r) => ({ ...r, uri: `alpha+${r.uri}` })));
      expect(through.all.map((r) => [r.uri, r.mimeType])).toEqual([
        ["alpha+skill://pdf-forms/SKILL.md", "text/markdown"],
        ["alpha+skill://pdf-forms/references", "inode/directory"],
      ]);
      await expect(client.request({ method: "resources/directory/read", params: { uri: "beta+skill://on-call" } }, DirectoryPage)).rejects.toThrow(
        /not a directory/,
      );
    });

    it("a grant that cannot reach an upstream sees none of its skills and cannot fetch them", async () => {
      const client = await connect(gw.url, mode, alphaOnlyToken);
      const skills = new SkillsClient(client);
      const { skills: listed } = await skills.list();
      expect(listed.map((s) => s.uri).sort()).toEqual(alpha.entries.map((e) => `alpha+${e.uri}`).sort());
      await expect(skills.get("beta+skill://on-call/SKILL.md")).rejects.toThrow();
      await expect(client.request({ method: "resources/read", params: { uri: "beta+skill://on-call/SKILL.md" } }, ReadResult)).rejects.toThrow();
      const { resources } = await client.listResources();
      expect(resources.some((r) => r.uri.startsWith("beta+"))).toBe(false);
      expect(resources.map((r) => r.uri)).toContain("alpha+skill://pdf-forms/SKILL.md");
    });

    it("one transparent upstream: capabilities and skills exactly as the upstream serves them", async () => {
      const direct = await connect(alpha.url, mode);
      const client = await connect(solo.url, mode);
      expect(client.getServerCapabilities()?.extensions).toEqual(direct.getServerCapabilities()?.extensions);
      const skills = new SkillsClient(client);
      expect(skills.directoryRead).toBe(true);
      expect((await skills.list()).skills).toEqual(alpha.entries);
      // Paging is the upstream's own: a cursor passes through.
      const first = await client.request(
        { method: "skills/list", params: {} },
        z.looseObject({ skills: z.array(z.unknown()), nextCursor: z.string().optional() }),
      );
      expect(first.skills.length).toBe(1);
      expect(typeof first.nextCursor).toBe("string");
      const second = await client.request(
        { method: "skills/list", params: { cursor: first.nextCursor! } },
        z.looseObject({ skills: z.array(z.looseObject({ uri: z.string() })) }),
      );
      expect(second.skills.map((s) => s.uri)).toEqual([alpha.entries[1]!.uri]);
      const manifest = await skills.read(alpha.entries[0]!);
      expect(manifest.uri).toBe("skill://pdf-forms/SKILL.md");
      expect(manifest.verified).toBe(true);
      const dir = await skills.readDirectory("skill://pdf-forms");
      expect(dir.resources.map((r) => r.uri)).toContain("skill://pdf-forms/SKILL.md");
    });
  });
}
