/**
 * Durable Object names (durable-objects/object-names.ts): every client-supplied id is format-checked
 * before it addresses an object (a malformed one addresses nothing), every name carries its
 * kind so names of different kinds never coincide within a namespace (property test over
 * adversarial ids; `principal:<sub>` names three objects — credentials, tasks, history — in
 * three namespaces), and,
 * through the Worker, a run id presented as `Mcp-Session-Id` or a session id presented as
 * `Portcullis-Run-Id` opens nothing of the other kind and leaves it byte-for-byte untouched.
 * The test config's upstreams point at a closed port; the caller is the loopback actor.
 */
import { env, runInDurableObject, SELF } from "cloudflare:test";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  REVOCATION_SHARDS,
  RUN_ID,
  SESSION_ID,
  credentialsObject,
  historyObject,
  roundObject,
  legObject,
  newSessionId,
  revocationObject,
  runObject,
  sessionObject,
  taskObject,
} from "../../durable-objects/object-names.ts";
import type { SessionApi, SessionRecord } from "../../durable-objects/contract.ts";

const ACTOR = "local:unit";
const hex48 = fc.stringMatching(/^[0-9a-f]{48}$/);
const runId = fc.stringMatching(/^[A-Za-z0-9_-]{8,128}$/);
/** Ids built to look like other kinds' names or ids. */
const tricky = fc.oneof(
  fc.string(),
  fc.string({ unit: fc.constantFrom("a", "f", "0", "9", ":", "-", "_", "\u0000", "A", "/") }),
  hex48,
  runId,
  hex48.map((h) => `session:${h}`),
  runId.map((r) => `run:${r}`),
  fc.string().map((s) => `leg:${s}`),
  fc.nat(20).map((n) => `shard-${n}`),
  fc.string().map((s) => `principal:${s}`),
);
const upstreamName = fc.stringMatching(/^[a-z][a-z0-9-]{0,30}$/);
const upstreamUrl = fc.webUrl().map((u) => new URL(u).href);

type Kind = "session" | "run" | "leg" | "shard" | "principal" | "tasks" | "history" | "round";
/** The namespace (binding) each kind's objects live in: a name addresses an object only within its namespace. */
const NAMESPACE: Record<Kind, string> = {
  session: "SESSIONS",
  run: "SESSIONS",
  leg: "SESSIONS",
  shard: "REVOCATIONS",
  principal: "CREDENTIALS",
  tasks: "TASKS",
  history: "HISTORY",
  round: "ROUNDS",
};
const PREFIX: Record<Kind, string> = {
  session: "session:",
  run: "run:",
  leg: "leg:",
  shard: "shard-",
  principal: "principal:",
  tasks: "principal:",
  history: "principal:",
  round: "round:",
};
/** Where an object is: its namespace and its name. */
const addressOf = ([kind, name]: [Kind, string]) => `${NAMESPACE[kind]}\u0000${name}`;
/** The name an object was addressed by, read off the stub (workerd keeps it on ids made with idFromName). */
function nameOf(api: unknown): string {
  const name = (api as DurableObjectStub).id.name;
  if (typeof name !== "string") throw new Error("this workerd does not expose DurableObjectId.name");
  return name;
}
function namesOf(id: string, up: string, url: string): Array<[Kind, string]> {
  const out: Array<[Kind, string]> = [];
  const s = sessionObject(env, id);
  if (s) out.push(["session", nameOf(s)]);
  const r = runObject(env, id);
  if (r) out.push(["run", nameOf(r)]);
  out.push(
    ["leg", nameOf(legObject(env, id, up, url))],
    ["shard", nameOf(revocationObject(env, id))],
    ["principal", nameOf(credentialsObject(env, id))],
    ["tasks", nameOf(taskObject(env, id))],
    ["history", nameOf(historyObject(env, id))],
    ["round", nameOf(roundObject(env, id))],
  );
  return out;
}

describe("client-supplied ids are format-checked before they address an object", () => {
  it("addresses a session only by a 48-hex id and a run only by an 8–128 [A-Za-z0-9_-] id", () => {
    const sid = newSessionId();
    expect(SESSION_ID.test(sid)).toBe(true);
    expect(nameOf(sessionObject(env, sid))).toBe(`session:${sid}`);
    expect(nameOf(runObject(env, "run-0001"))).toBe("run:run-0001");
    for (const bad of ["run:abcdefgh", `session:${sid}`, sid.toUpperCase(), sid.slice(1), `${sid}0`, ` ${sid}`, `${sid}\n`, "", "leg:x"]) {
      expect(sessionObject(env, bad), bad).toBeNull();
    }
    for (const bad of [`session:${sid}`, "run:abcdefgh", "abc", "x".repeat(129), "run id 01", "abcdefg\u0000", "shard-1-x:y", "../../../../", "ünïcode-id"]) {
      expect(runObject(env, bad), bad).toBeNull();
    }
  });

  it("null exactly when the id fails its format (fuzzed)", () => {
    fc.assert(
      fc.property(tricky, (id) => {
        expect(sessionObject(env, id) === null).toBe(!SESSION_ID.test(id));
        expect(runObject(env, id) === null).toBe(!RUN_ID.test(id));
      }),
      { numRuns: 500 },
    );
  });

  it("builds ids that are not client input into their own kind only", () => {
    expect(nameOf(legObject(env, "agent:a", "alpha", "http://127.0.0.1:9/mcp"))).toBe("leg:agent:a\u0000alpha\u0000http://127.0.0.1:9/mcp");
    expect(nameOf(credentialsObject(env, "agent:a"))).toBe("principal:agent:a");
    expect(nameOf(taskObject(env, "agent:a"))).toBe("principal:agent:a");
    // The same name in two namespaces is two objects: a principal's tasks never open its credentials.
    expect(env.TASKS.idFromName("principal:agent:a").toString()).not.toBe(env.CREDENTIALS.idFromName("principal:agent:a").toString());
    // Likewise a principal's history is a third object, in its own namespace.
    expect(nameOf(historyObject(env, "agent:a"))).toBe("principal:agent:a");
    const ids = ["HISTORY", "TASKS", "CREDENTIALS"].map((ns) => (env[ns] as DurableObjectNamespace).idFromName("principal:agent:a").toString());
    expect(new Set(ids).size).toBe(3);
    fc.assert(
      fc.property(tricky, (sub) => {
        expect(nameOf(taskObject(env, sub))).toBe(`principal:${sub}`);
        expect(nameOf(historyObject(env, sub))).toBe(`principal:${sub}`);
      }),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(tricky, (jti) => {
        const m = /^shard-(\d+)$/.exec(nameOf(revocationObject(env, jti)));
        expect(m).not.toBeNull();
        expect(Number(m![1])).toBeLessThan(REVOCATION_SHARDS);
        expect(nameOf(revocationObject(env, jti))).toBe(nameOf(revocationObject(env, jti)));
      }),
      { numRuns: 300 },
    );
  });
});

describe("names of different kinds never coincide", () => {
  it("one id used as every kind at once gives one object per kind, each name with its kind's prefix", () => {
    fc.assert(
      fc.property(tricky, upstreamName, upstreamUrl, (id, up, url) => {
        const names = namesOf(id, up, url);
        expect(new Set(names.map(addressOf)).size).toBe(names.length);
        for (const [kind, n] of names) expect(n.startsWith(PREFIX[kind])).toBe(true);
      }),
      { numRuns: 400 },
    );
  });

  it("two ids address the same object only when they are the same kind and the same id (shards excepted: a shard holds many jtis)", () => {
    const side = fc.record({ id: tricky, up: upstreamName, url: upstreamUrl });
    // Half the pairs share the id (as another kind, or with another upstream), where collisions would hide.
    const pair = fc.tuple(side, side, fc.boolean()).map(([a, b, same]) => [a, same ? { ...b, id: a.id } : b] as const);
    fc.assert(
      fc.property(pair, ([a, b]) => {
        const nb = new Map<string, Array<[Kind, string]>>();
        for (const e of namesOf(b.id, b.up, b.url)) nb.set(addressOf(e), [...(nb.get(addressOf(e)) ?? []), e]);
        for (const [kind, n] of namesOf(a.id, a.up, a.url)) {
          for (const [kindB] of nb.get(addressOf([kind, n])) ?? []) {
            expect(kindB).toBe(kind);
            if (kind === "leg") expect([a.id, a.up, a.url]).toEqual([b.id, b.up, b.url]);
            else if (kind !== "shard") expect(a.id).toBe(b.id);
          }
        }
      }),
      { numRuns: 400 },
    );
  });

  it("a leg's name tells its principal, upstream and URL apart even when the principal holds NULs", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom("a", "\u0000", ":", "b") }),
        fc.string({ unit: fc.constantFrom("a", "\u0000", ":", "b") }),
        upstreamName,
        upstreamName,
        upstreamUrl,
        upstreamUrl,
        (p1, p2, u1, u2, w1, w2) => {
          const same = nameOf(legObject(env, p1, u1, w1)) === nameOf(legObject(env, p2, u2, w2));
          expect(same).toBe(p1 === p2 && u1 === u2 && w1 === w2);
        },
      ),
      { numRuns: 400 },
    );
  });
});

const LEGACY = { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25" };
const MODERN = {
  "content-type": "application/json",
  accept: "application/json, text/event-stream",
  "mcp-protocol-version": "2026-07-28",
  "mcp-method": "server/discover",
};
const META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

/** Every row of every table of the object behind `api`, to compare before and after. */
function dump(api: SessionApi): Promise<Record<string, unknown[]>> {
  return runInDurableObject(api as unknown as DurableObjectStub, (_i, state) => {
    const out: Record<string, unknown[]> = {};
    for (const t of ["meta", "events", "streams", "idmap", "pending", "answers"]) out[t] = state.storage.sql.exec(`SELECT * FROM ${t}`).toArray();
    return out;
  });
}
async function seedSession(id: string, principal: string): Promise<SessionApi> {
  const api = sessionObject(env, id)!;
  const now = Date.now();
  const rec: SessionRecord = {
    v: 1,
    id,
    principal,
    protocolVersion: "2025-11-25",
    clientCapabilities: {},
    upstreams: {},
    createdAt: now,
    touchedAt: now,
    ttlS: 3600,
  };
  expect(await api.create(rec)).toBe(true);
  return api;
}

describe("through the Worker, ids of one kind never open an object of another", () => {
  it("Mcp-Session-Id: run:<id> (and the bare id) of the caller's own run answers 404 and leaves the run untouched", async () => {
    // A run id that is also a well-formed session id: the bare id addresses session:<id>, never run:<id>.
    const id = "d".repeat(48);
    const run = runObject(env, id)!;
    expect(await run.claimRun(ACTOR, id, 3600)).toBe(true);
    const before = await dump(run);
    for (const sid of [`run:${id}`, id]) {
      for (const [method, body] of [
        ["POST", JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" })],
        ["GET", undefined],
        ["DELETE", undefined],
      ] as const) {
        const r = await SELF.fetch("http://127.0.0.1/mcp", {
          method,
          headers: { ...LEGACY, "mcp-session-id": sid, ...(method === "GET" ? { accept: "text/event-stream" } : {}) },
          body,
        });
        expect(r.status, `${method} ${sid}`).toBe(404);
        const j = (await r.json()) as { error: { code: number; message: string } };
        expect(j.error.code).toBe(-32000);
        expect(j.error.message).toMatch(/session/i);
      }
    }
    expect(await dump(run)).toEqual(before);
    expect(await run.claimRun(ACTOR, id, 3600)).toBe(true);
    expect((await run.open(ACTOR))?.ended).toBeFalsy();
  });

  it("a session id as Portcullis-Run-Id opens a run of that name, never the session (the caller's or another's)", async () => {
    for (const owner of [ACTOR, "agent:owner"]) {
      const sid = newSessionId();
      const session = await seedSession(sid, owner);
      const before = await dump(session);
      const r = await SELF.fetch("http://127.0.0.1/mcp", {
        method: "POST",
        headers: { ...MODERN, "portcullis-run-id": sid },
        body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "server/discover", params: { _meta: META } }),
      });
      expect(r.status, owner).toBe(200);
      const j = (await r.json()) as { result: { supportedVersions: string[] } };
      expect(j.result.supportedVersions).toContain("2026-07-28");
      expect(await dump(session)).toEqual(before);
      expect((await session.open(owner))?.protocolVersion).toBe("2025-11-25");
      if (owner !== ACTOR) expect(await session.open(ACTOR)).toBeNull();
      const run = await runObject(env, sid)!.open(ACTOR);
      expect(run).toMatchObject({ id: sid, principal: ACTOR, protocolVersion: "2026-07-28", upstreams: {} });
    }
  });

  it("a malformed Portcullis-Run-Id (e.g. session:<id>) is refused with 400 before any object is addressed", async () => {
    const sid = newSessionId();
    const session = await seedSession(sid, ACTOR);
    const before = await dump(session);
    for (const bad of [`session:${sid}`, "short", "run:abcdefgh"]) {
      const r = await SELF.fetch("http://127.0.0.1/mcp", {
        method: "POST",
        headers: { ...MODERN, "portcullis-run-id": bad },
        body: JSON.stringify({ jsonrpc: "2.0", id: 8, method: "server/discover", params: { _meta: META } }),
      });
      expect(r.status, bad).toBe(400);
    }
    expect(await dump(session)).toEqual(before);
  });
});
