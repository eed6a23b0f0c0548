/**
 * Signed checkpoints (C2SP signed-note and tlog-checkpoint): the generic note operations match
 * golang.org/x/mod/sumdb/note's published vectors byte for byte (key id, signature line, Open's
 * rules for unknown keys, bad signatures and malformed notes); a checkpoint signed with the
 * gateway's key (key name = origin) verifies against its public JWKS and states origin, size and
 * head hash; any change to the body, the signature or the key is refused. The worked example in
 * docs/ledger.md verifies as printed there.
 */
import { describe, expect, it } from "vitest";
import { generateSigningKey } from "../../src/identity/keys.ts";
import { chainEntries, EMPTY_HEAD } from "../../src/ledger/chain.ts";
import { checkpointOrigin, noteKeyId, openNote, signCheckpoint, signingKeyFrom, signNote, verifyCheckpoint } from "../../src/ledger/checkpoint.ts";
import { verifyExport } from "../../src/ledger/export-verifier.ts";
import { verifyReceipt } from "../../src/ledger/receipt.ts";
import ledgerDoc from "../../docs/ledger.md?raw";

const unb64 = (s: string) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
const b64url = (b: Uint8Array) =>
  btoa(String.fromCharCode(...b))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

// golang.org/x/mod/sumdb/note note_test.go: keys as `name+hash+base64(0x01 ‖ key)`.
const PETER_SKEY = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"; // PRIVATE+KEY+PeterNeumann+c74f20a3+…
const PETER_VKEY = "ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"; // PeterNeumann+c74f20a3+…
const ENOCH_VKEY = "ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"; // EnochRoot+af0cfe78+…
const TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
const PETER_SIG = "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
const ENOCH_SIG = "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n";

const peterPub = unb64(PETER_VKEY).slice(1);
const peter = { name: "PeterNeumann", publicKey: peterPub };
const enoch = { name: "EnochRoot", publicKey: unb64(ENOCH_VKEY).slice(1) };
const peterJwk = { kty: "OKP", crv: "Ed25519", d: b64url(unb64(PETER_SKEY).slice(1)), x: b64url(peterPub) };

describe("signed notes: golang.org/x/mod/sumdb/note vectors", () => {
  it("the key id is SHA-256(name ‖ \\n ‖ 0x01 ‖ key)[:4]", () => {
    expect(hex(noteKeyId("PeterNeumann", peterPub))).toBe("c74f20a3");
    expect(hex(noteKeyId("EnochRoot", enoch.publicKey))).toBe("af0cfe78");
  });

  it("signing reproduces Go's signed note byte for byte", async () => {
    expect(await signNote(TEXT, "PeterNeumann", peterJwk)).toBe(`${TEXT}\n${PETER_SIG}`);
    await expect(signNote("abc", "PeterNeumann", peterJwk)).rejects.toThrow(/newline/);
    await expect(signNote(TEXT, "a+b", peterJwk)).rejects.toThrow(/key name/);
  });

  it("opening: unknown keys are ignored, every known key must verify, at least one must sign", async () => {
    const both = `${TEXT}\n${PETER_SIG}${ENOCH_SIG}`;
    const one = await openNote(both, [peter]);
    expect(one.ok && one.text === TEXT && one.signer.name === "PeterNeumann").toBe(true);
    expect((await openNote(both, [peter, enoch])).ok).toBe(true);
    expect(await openNote(both, [])).toEqual({ ok: false, reason: expect.stringMatching(/no verifiable signatures/) });
    // A name or id that matches no known key is an unknown key (not a failure).
    expect((await openNote(`${TEXT}\n${PETER_SIG.replace("PeterNeumann", "CarmenSandiego")}`, [peter])).ok).toBe(false);
    expect((await openNote(`${TEXT}\n${PETER_SIG.replace("PeterNeumann", "CarmenSandiego")}${PETER_SIG}`, [peter])).ok).toBe(true);
    // A known key whose signature fails rejects the whole note, even next to a good one.
    const bad = `${PETER_SIG.slice(0, 60)}ABCD${PETER_SIG.slice(60)}`;
    expect(await openNote(`${TEXT}\n${bad}`, [peter])).toEqual({ ok: false, reason: "invalid signature for key PeterNeumann+c74f20a3" });
    expect((await openNote(`${TEXT}\n${ENOCH_SIG}${bad}`, [peter, enoch])).ok).toBe(false);
    // More than 100 signatures is malformed.
    expect((await openNote(`${TEXT}\n${PETER_SIG.repeat(101)}`, [peter])).ok).toBe(false);
    expect((await openNote(`${TEXT}\n${PETER_SIG.repeat(16)}`, [peter])).ok).toBe(true);
  });

  it("malformed notes are refused (Go's badMsgs)", async () => {
    const badMsgs = [
      TEXT,
      `${TEXT}\n`,
      `${TEXT}\n${PETER_SIG.slice(0, -1)}`,
      `\u0001${TEXT}\n${PETER_SIG}`,
      `${TEXT}\n\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=`,
      `${TEXT}\n${PETER_SIG}Unexpected line.\n`,
      `${TEXT}\n${PETER_SIG.replace("=\n", "\n")}`, // unpadded base64
    ];
    for (const msg of badMsgs) expect(await openNote(msg, [peter])).toEqual({ ok: false, reason: expect.stringMatching(/^malformed note/) });
  });

  it("the text is everything before the LAST blank line", async () => {
    const text = "first paragraph\n\nsecond paragraph\n";
    const note = await signNote(text, "PeterNeumann", peterJwk);
    const opened = await openNote(note, [peter]);
    expect(opened.ok && opened.text).toBe(text);
  });
});

describe("checkpoints", () => {
  it("sign and verify; tampering, another key and a malformed note are refused", async () => {
    const { privateJwk, publicJwk } = await generateSigningKey("ledger-key-1");
    const key = signingKeyFrom(JSON.stringify(privateJwk));
    const entries = chainEntries("team-a", EMPTY_HEAD, [{ kind: "decision", id: "d1", at: "2026-12-01T00:00:00.000Z", body: { x: 1 } }]);
    const origin = checkpointOrigin("https://gw.example.com", "team-a");
    expect(origin).toBe("gw.example.com/ledger/team-a");
    expect(checkpointOrigin("https://gw.example.com/base/", "team-b")).toBe("gw.example.com/base/ledger/team-b");
    expect(checkpointOrigin("https://gw.example.com/a+b", "t")).toBe("gw.example.com/a%2Bb/ledger/t");
    const note = await signCheckpoint(origin, 1, entries[0]!.hash, key);
    const hashB64 = btoa(String.fromCharCode(...(entries[0]!.hash.match(/../g) ?? []).map((h) => Number.parseInt(h, 16))));
    // tlog-checkpoint body; the key name in the signature line is the origin.
    expect(note.startsWith(`gw.example.com/ledger/team-a\n1\n${hashB64}\n\n`)).toBe(true);
    expect(note).toMatch(/\n\n\u2014 gw\.example\.com\/ledger\/team-a [A-Za-z0-9+/]{91}=\n$/);
    // The key id in the signature is the signed-note key id of (origin, public key).
    const blob = unb64(note.trim().split(" ").pop()!);
    expect(hex(blob.slice(0, 4))).toBe(hex(noteKeyId(origin, unb64(publicJwk.x.replace(/-/g, "+").replace(/_/g, "/").padEnd(44, "=")))));
    const jwks = { keys: [publicJwk] };
    expect(await verifyCheckpoint(note, jwks)).toEqual({ ok: true, origin, size: 1, hash: entries[0]!.hash, kid: "ledger-key-1" });
    expect((await verifyCheckpoint(note.replace("\n1\n", "\n2\n"), jwks)).ok).toBe(false);
    expect((await verifyCheckpoint(note.replace("gw.example.com/ledger/team-a\n", "gw.example.com/ledger/team-b\n"), jwks)).ok).toBe(false);
    const other = await generateSigningKey("other");
    expect((await verifyCheckpoint(note, { keys: [other.publicJwk] })).ok).toBe(false);
    expect((await verifyCheckpoint(note, { keys: [other.publicJwk, publicJwk] })).ok).toBe(true);
    const sigStart = note.lastIndexOf(" ") + 1;
    const flipped = note.slice(0, sigStart + 10) + (note[sigStart + 10] === "A" ? "B" : "A") + note.slice(sigStart + 11);
    expect((await verifyCheckpoint(flipped, jwks)).ok).toBe(false);
    expect((await verifyCheckpoint("garbage", jwks)).ok).toBe(false);
    expect((await verifyCheckpoint("", jwks)).ok).toBe(false);
    // A key set secret signs with its active key.
    const set = signingKeyFrom(JSON.stringify({ keys: [other.privateJwk, privateJwk], active: "ledger-key-1" }));
    expect(set.kid).toBe("ledger-key-1");
    await expect(signCheckpoint(origin, -1, entries[0]!.hash, key)).rejects.toThrow();
    await expect(signCheckpoint(origin, 1, "not-a-hash", key)).rejects.toThrow();
  });

  it("a signed body that is not a tlog checkpoint is refused; extension lines are allowed", async () => {
    const { privateJwk, publicJwk } = await generateSigningKey("k");
    const jwks = { keys: [publicJwk] };
    const origin = "gw.example.com/ledger/team-a";
    const hash = btoa(String.fromCharCode(...new Uint8Array(32).fill(7)));
    const signed = (body: string) => signNote(body, origin, privateJwk);
    expect((await verifyCheckpoint(await signed(`${origin}\n5\n${hash}\n`), jwks)).ok).toBe(true);
    expect((await verifyCheckpoint(await signed(`${origin}\n5\n${hash}\nan extension\n`), jwks)).ok).toBe(true);
    expect(await verifyCheckpoint(await signed(`${origin}\n05\n${hash}\n`), jwks)).toEqual({ ok: false, reason: expect.stringMatching(/leading zeros/) });
    expect((await verifyCheckpoint(await signed(`${origin}\n-5\n${hash}\n`), jwks)).ok).toBe(false);
    expect((await verifyCheckpoint(await signed(`${origin}\n5\n`), jwks)).ok).toBe(false);
    expect((await verifyCheckpoint(await signed(`${origin}\n5\n${hash.slice(0, -4)}\n`), jwks)).ok).toBe(false);
    // Signed under another key name than the origin: an unknown key for this checkpoint.
    expect((await verifyCheckpoint(await signNote(`${origin}\n5\n${hash}\n`, "gw.example.com/k", privateJwk), jwks)).ok).toBe(false);
  });
});

describe("docs/ledger.md", () => {
  it("the worked example verifies as printed: key id, signed note, export and receipt", async () => {
    const block = (marker: string) => new RegExp(`<!-- example:${marker} -->\\n\`\`\`\\w+\\n([\\s\\S]*?)\`\`\``).exec(ledgerDoc)?.[1];
    const jwks = JSON.parse(block("jwks")!);
    const lines = block("export")!.trimEnd().split("\n");
    expect(lines.length).toBe(6);
    const report = await verifyExport(lines, jwks, { keep: () => true });
    expect(report.problems).toEqual([]);
    expect(report.chains).toMatchObject({ "team-a": { entries: 2, anchored: 2, unanchored: 0 }, _global: { entries: 1, anchored: 1 } });
    const receipt = {
      chain: "team-a",
      seq: 2,
      hash: "7eb1fb671733ad705e76898114c9772d0ba50c9249d76f3bf05d208377f0e728",
      decision_id: "7c1e4a52-3f0b-4d8e-9a61-2b5f0c9d4e17",
    };
    expect(verifyReceipt({ _meta: { "portcullis/receipt": receipt } }, report)).toMatchObject({ ok: true, anchored: true });
    const pub = unb64(jwks.keys[0].x.replace(/-/g, "+").replace(/_/g, "/").padEnd(44, "="));
    expect(hex(pub)).toBe("25715eb75650425e8941d968ff19653e124e416a187bc9b5b53e4c8ced73c21b");
    expect(hex(noteKeyId("gw.example.com/ledger/team-a", pub))).toBe("e64f2fb5");
    expect(ledgerDoc).toContain(`gw.example.com/ledger/team-a+e64f2fb5+${btoa(String.fromCharCode(1, ...pub))}`);
    // The private example key in the document signs exactly the note it shows.
    const priv = JSON.parse(/```json\n(\{"kty":"OKP","crv":"Ed25519","kid":"example-1","d":[^\n]*)\n```/.exec(ledgerDoc)![1]!);
    const note = (JSON.parse(lines[3]!) as { checkpoint: { note: string } }).checkpoint.note;
    expect(await signCheckpoint("gw.example.com/ledger/team-a", 2, receipt.hash, signingKeyFrom(JSON.stringify(priv)))).toBe(note);
    expect(ledgerDoc).toContain(note.trimEnd());
  });
});
