import { describe, expect, it } from "vitest";
import { parseMessage } from "../../src/wire/jsonrpc.ts";
import { encodeEvent, parseSse } from "../../src/wire/sse.ts";

describe("parseMessage", () => {
  const cases: [string, { ok: boolean; code?: number; id?: unknown }][] = [
    ['{"jsonrpc":"2.0","id":1,"method":"ping"}', { ok: true }],
    ['{"jsonrpc":"2.0","method":"notifications/initialized"}', { ok: true }],
    ['{"jsonrpc":"2.0","id":"a","result":{}}', { ok: true }],
    ["{not json", { ok: false, code: -32700, id: null }],
    ["[]", { ok: false, code: -32600 }],
    ['[{"jsonrpc":"2.0","id":1,"method":"ping"}]', { ok: false, code: -32600 }],
    ['"str"', { ok: false, code: -32600 }],
    ['{"jsonrpc":"1.0","id":7,"method":"ping"}', { ok: false, code: -32600, id: 7 }],
    ['{"jsonrpc":"2.0","id":{},"method":"ping"}', { ok: false, code: -32600, id: null }],
    ['{"jsonrpc":"2.0","id":3,"method":5}', { ok: false, code: -32600, id: 3 }],
    ['{"jsonrpc":"2.0","id":4,"method":"x","params":[1]}', { ok: false, code: -32600, id: 4 }],
    ['{"jsonrpc":"2.0","id":5}', { ok: false, code: -32600, id: 5 }],
  ];
  for (const [text, want] of cases) {
    it(`classifies ${text.slice(0, 40)}`, () => {
      const v = parseMessage(text);
      expect(v.ok).toBe(want.ok);
      if (!v.ok) {
        expect(v.code).toBe(want.code);
        if ("id" in want) expect(v.id).toEqual(want.id);
      }
    });
  }
});

function streamOf(chunks: string[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(enc.encode(ch));
      c.close();
    },
  });
}

describe("SSE", () => {
  it("round-trips events split across chunks, CRLF, comments and multi-line data", async () => {
    const dec = new TextDecoder();
    const wire =
      dec.decode(encodeEvent({ id: "s/0", retry: 500, data: "" })) +
      ": comment\n\n" +
      dec.decode(encodeEvent({ id: "s/1", data: '{"a":1}\n{"b":2}' })).replace(/\n/g, "\r\n");
    const retries: number[] = [];
    const out = [];
    for await (const ev of parseSse(streamOf([wire.slice(0, 7), wire.slice(7, 30), wire.slice(30)]), (ms) => retries.push(ms))) out.push(ev);
    expect(retries).toEqual([500]);
    expect(out).toEqual([
      { id: "s/0", data: "" },
      { id: "s/1", data: '{"a":1}\n{"b":2}' },
    ]);
  });
});
