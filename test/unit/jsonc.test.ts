/**
 * cli/jsonc.ts's edits, the ones `portcullis import` makes to a client's config file (a pure
 * module: no Node API, so it runs here in workerd): dropMembers takes out the servers that move
 * behind the gateway and leaves every kept member byte for byte — the blanks and comments before
 * it, its comma and a comment on the rest of its line, a JSONC trailing comma — in multi-line and
 * one-line files; setMember then adds the gateway entry after what was kept (after a trailing comma,
 * or with a comma put before a kept member's same-line comment, which stays on its line). Every
 * result is scanned again (it is still JSONC) and its values compared.
 */
import { describe, expect, it } from "vitest";
import { applyEdits, dropMembers, indentUnit, type JsonNode, member, scanJsonc, setMember } from "../../cli/jsonc.ts";

/** The object at `key` of `text`'s root. */
const objectAt = (text: string, key: string): JsonNode => {
  const m = member(scanJsonc(text), key);
  if (m?.value.kind !== "object") throw new Error(`no object at ${key}`);
  return m.value;
};

/** `text` with the members of its `servers` object named in `drop` taken out. */
function dropped(text: string, drop: string[]): string {
  const edit = dropMembers(text, objectAt(text, "servers"), (k) => drop.includes(k));
  return edit ? applyEdits(text, [edit]) : text;
}

const FILE = `{
  // the user's own servers
  "servers": {
    // moved: an HTTP server
    "web": { "type": "http", "url": "https://web.example/mcp" },
    /* kept: runs on this machine */
    "fs": {
      "command": "npx", // the launcher
      "args": ["-y", "fs"]
    }, // fs stays direct
    "api": { "url": "https://api.example/mcp" } /* after api */ ,
    "tool": { "command": "tool" }
  },
  "other": [1, 2]
}
`;

describe("dropMembers", () => {
  it("drops the first, a middle and the last member, leaving each kept member's bytes, comments and commas", () => {
    const out = dropped(FILE, ["web", "api"]);
    expect(out).toBe(`{
  // the user's own servers
  "servers": {
    /* kept: runs on this machine */
    "fs": {
      "command": "npx", // the launcher
      "args": ["-y", "fs"]
    }, // fs stays direct
    "tool": { "command": "tool" }
  },
  "other": [1, 2]
}
`);
    expect(Object.keys(objectAt(out, "servers").json as object)).toEqual(["fs", "tool"]);
    // The last member dropped: the one before it loses its comma, keeps its comment.
    const noTool = dropped(FILE, ["tool"]);
    expect(noTool).toContain(`"api": { "url": "https://api.example/mcp" } /* after api */ \n  },`);
    expect(Object.keys(objectAt(noTool, "servers").json as object)).toEqual(["web", "fs", "api"]);
    // Both ends dropped.
    const middle = dropped(FILE, ["web", "tool"]);
    expect(Object.keys(objectAt(middle, "servers").json as object)).toEqual(["fs", "api"]);
    expect(middle).toContain("    }, // fs stays direct\n");
  });

  it("keeps a JSONC trailing comma, handles a one-line object, and leaves {} when nothing is kept", () => {
    const trailing = `{"servers": {\n  "a": 1,\n  "b": 2,\n}}`;
    expect(dropped(trailing, ["b"])).toBe(`{"servers": {\n  "a": 1,\n}}`);
    expect(dropped(trailing, ["a"])).toBe(`{"servers": {\n  "b": 2,\n}}`);
    const oneLine = `{"servers":{"a":1,"b":{"c":[2]},"d":3},"x":0}`;
    expect(dropped(oneLine, ["a"])).toBe(`{"servers":{"b":{"c":[2]},"d":3},"x":0}`);
    expect(dropped(oneLine, ["d"])).toBe(`{"servers":{"a":1,"b":{"c":[2]}},"x":0}`);
    expect(dropped(oneLine, ["a", "d"])).toBe(`{"servers":{"b":{"c":[2]}},"x":0}`);
    expect(dropped(oneLine, ["a", "b", "d"])).toBe(`{"servers":{},"x":0}`);
    expect(dropped(FILE, ["web", "fs", "api", "tool"])).toContain(`"servers": {},\n  "other"`);
  });

  it("is no edit when nothing is dropped", () => {
    expect(dropMembers(FILE, objectAt(FILE, "servers"), () => false)).toBeNull();
  });

  it("with setMember, adds the gateway entry after what was kept, in the file's indentation", () => {
    const out = dropped(FILE, ["web", "api", "tool"]);
    const unit = indentUnit(FILE, scanJsonc(FILE));
    const withEntry = applyEdits(out, [setMember(out, objectAt(out, "servers"), "portcullis", { url: "http://127.0.0.1:8787/mcp" }, unit)]);
    expect(withEntry).toContain(`    }, // fs stays direct\n    "portcullis": {\n      "url": "http://127.0.0.1:8787/mcp"\n    }\n  },`);
    expect(Object.keys(objectAt(withEntry, "servers").json as object)).toEqual(["fs", "portcullis"]);
    // After a trailing comma; after a last member with no comma but a comment (the comma goes before the comment).
    const trailing = `{\n  "servers": {\n    "a": 1,\n  }\n}`;
    expect(applyEdits(trailing, [setMember(trailing, objectAt(trailing, "servers"), "b", 2, "  ")])).toBe(`{\n  "servers": {\n    "a": 1,\n    "b": 2\n  }\n}`);
    const commented = `{\n  "servers": {\n    "a": 1 // a's note\n  }\n}`;
    expect(applyEdits(commented, [setMember(commented, objectAt(commented, "servers"), "b", 2, "  ")])).toBe(
      `{\n  "servers": {\n    "a": 1, // a's note\n    "b": 2\n  }\n}`,
    );
    const oneLine = `{"servers":{"a":1}}`;
    expect(applyEdits(oneLine, [setMember(oneLine, objectAt(oneLine, "servers"), "b", 2, "")])).toBe(`{"servers":{"a":1,"b":2}}`);
    // Into an emptied list.
    const empty = dropped(FILE, ["web", "fs", "api", "tool"]);
    const into = applyEdits(empty, [setMember(empty, objectAt(empty, "servers"), "portcullis", { url: "u" }, unit)]);
    expect(objectAt(into, "servers").json).toEqual({ portcullis: { url: "u" } });
    expect(into).toContain('  // the user\'s own servers\n  "servers": {\n    "portcullis": {\n      "url": "u"\n    }\n  },');
  });
});
