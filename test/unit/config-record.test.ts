/**
 * The config a gateway serves is on the record: the first request an isolate serves with a
 * config appends one `config.changed` entry to the global chain, named by the SHA-256 of the
 * config text (never the text), and further requests — or other isolates — add no second one.
 */
import { env, SELF } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ledgerObject } from "../../durable-objects/object-names.ts";
import { GLOBAL_CHAIN } from "../../src/ledger/records.ts";
import { sha256Hex } from "../../src/wire/canonical.ts";

describe("config.changed", () => {
  it("is recorded once per config, by hash", async () => {
    for (let i = 0; i < 3; i++) await SELF.fetch("http://127.0.0.1/summary");
    const global = ledgerObject(env, GLOBAL_CHAIN)!;
    const sha = sha256Hex(env.PORTCULLIS_CONFIG as string);
    let records: { kind: string; id: string; body: Record<string, unknown> }[] = [];
    for (let attempt = 0; attempt < 50 && records.length === 0; attempt++) {
      records = (await global.read(0, 1000)).filter((e) => e.kind === "config.changed");
      if (records.length === 0) await new Promise((r) => setTimeout(r, 20));
    }
    expect(records).toHaveLength(1);
    expect(records[0]!.id).toBe(`config:${sha}`);
    expect(records[0]!.body).toMatchObject({ what: "config", from: null, to: sha, by: "deploy", upstreams: ["alpha", "beta"] });
    expect(JSON.stringify(records[0])).not.toContain("allowed_hosts");
    // Appending the same config record again (another isolate) returns the stored entry, no new seq.
    const again = await global.append(
      [{ kind: "config.changed", id: `config:${sha}`, at: new Date().toISOString(), body: { what: "config", from: null, to: sha, by: "deploy" } }],
      {
        secret: "PORTCULLIS_SIGNING_KEY",
        gateway: "http://127.0.0.1",
      },
    );
    expect(again[0]!.seq).toBe((records[0] as unknown as { seq: number }).seq);
    expect((await global.read(0, 1000)).filter((e) => e.kind === "config.changed")).toHaveLength(1);
  });
});
