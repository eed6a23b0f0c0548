/**
 * Parsing SSE (src/wire/sse.ts over eventsource-parser) does not depend on where a stream's
 * chunks break: a CRLF split across two chunks ends one line, not two (one event, as in one
 * chunk), and for any valid stream — LF, CRLF or CR line ends, comments, `retry`, ids carried
 * over, blocks that only set an id, multi-line and non-ASCII data — every split of its bytes
 * gives the same events, and they are the events the stream was written with.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { parseSse, type SseEvent } from "../../src/wire/sse.ts";

function streamOf(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
}

async function parse(chunks: Uint8Array[]): Promise<{ events: SseEvent[]; retries: number[] }> {
  const events: SseEvent[] = [];
  const retries: number[] = [];
  for await (const ev of parseSse(streamOf(chunks), (ms) => retries.push(ms))) events.push(ev);
  return { events, retries };
}

const enc = new TextEncoder();
const bytes = (...parts: string[]) => parts.map((p) => enc.encode(p));

/** `whole` cut at each of `cuts` (byte offsets, any order, repeats allowed). */
function split(whole: Uint8Array, cuts: number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((c) => c % (whole.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let from = 0;
  for (const c of [...at, whole.length]) {
    out.push(whole.slice(from, c));
    from = c;
  }
  return out;
}

describe("a CRLF split across chunks", () => {
  it("ends one line: the two chunkings give the same single event", async () => {
    const apart = await parse(bytes("data: {a}\r", "\ndata: {b}\r\n\r\n"));
    const together = await parse(bytes("data: {a}\r\ndata: {b}\r\n\r\n"));
    expect(together.events).toEqual([{ data: "{a}\n{b}" }]);
    expect(apart.events).toEqual(together.events);
  });

  it("a CR at a chunk's end before a blank line, and a lone CR line end, still read as the stream says", async () => {
    const crlfBlank = await parse(bytes("id: 1\r\ndata: x\r", "\n\r", "\n"));
    expect(crlfBlank.events).toEqual([{ id: "1", data: "x" }]);
    const crOnly = await parse(bytes("data: x\r", "\rdata: y\r\r"));
    expect(crOnly.events).toEqual([{ data: "x" }, { data: "y" }]);
  });
});

describe("the adapter's own rules", () => {
  it("ids carry over to later events; a block that only sets an id is an event with empty data; comments are not data", async () => {
    const { events, retries } = await parse(bytes(": hello\n\nid: a\ndata: 1\n\ndata: 2\n\nid: b\n\nretry: 250\nevent: note\ndata: 3\n\n"));
    expect(events).toEqual([
      { id: "a", data: "1" },
      { id: "a", data: "2" },
      { id: "b", data: "" },
      { id: "b", event: "note", data: "3" },
    ]);
    expect(retries).toEqual([250]);
  });

  it("an id holding NUL is ignored; an incomplete last block is not an event", async () => {
    const { events } = await parse(bytes("id: ok\ndata: 1\n\nid: bad\0\ndata: 2\n\ndata: never ends"));
    expect(events).toEqual([
      { id: "ok", data: "1" },
      { id: "ok", data: "2" },
    ]);
  });
});

// ---- any split of a valid stream gives the same events ---------------------------------------

interface Block {
  comment?: string;
  id?: string;
  event?: string;
  retry?: number;
  /** Data lines; none: a block that only sets an id (or nothing). */
  data: string[];
}

const text = (chars: string) => fc.string({ unit: fc.constantFrom(...chars), maxLength: 12 });
// No CR or LF inside a value (they end lines); the one space after the colon is the writer's, so a value may start with its own.
const value = fc.string({ unit: fc.constantFrom(...'abc{}":,é€😀 01'), maxLength: 16 });
const block: fc.Arbitrary<Block> = fc.record(
  {
    comment: text("xyz "),
    id: value,
    event: text("abcde").filter((s) => s !== ""),
    retry: fc.nat({ max: 100_000 }),
    data: fc.array(value, { maxLength: 3 }),
  },
  { requiredKeys: ["data"] },
);
const eol = fc.constantFrom("\n", "\r\n", "\r");

/**
 * The stream text of `blocks` (each line ended by one of `eols`, in turn), and the events it
 * means. A CR ending a line, then an LF ending the blank line after it, would read as one CRLF:
 * that blank line ends in CRLF instead.
 */
function written(blocks: Block[], eols: string[]): { wire: string; events: SseEvent[]; retries: number[] } {
  let i = 0;
  let prev = "";
  const end = (blank = false) => {
    let e = eols[i++ % eols.length]!;
    if (blank && prev === "\r" && e === "\n") e = "\r\n";
    prev = e;
    return e;
  };
  let wire = "";
  const events: SseEvent[] = [];
  const retries: number[] = [];
  let lastId: string | undefined;
  for (const b of blocks) {
    if (b.comment !== undefined) wire += `:${b.comment}${end()}`;
    if (b.id !== undefined) wire += `id: ${b.id}${end()}`;
    if (b.event !== undefined) wire += `event: ${b.event}${end()}`;
    if (b.retry !== undefined) {
      wire += `retry: ${b.retry}${end()}`;
      retries.push(b.retry);
    }
    for (const d of b.data) wire += `data: ${d}${end()}`;
    wire += end(true);
    if (b.id !== undefined) lastId = b.id;
    if (b.data.length === 0 && b.id === undefined) continue; // nothing to dispatch
    const ev: SseEvent = { data: b.data.join("\n") };
    if (lastId !== undefined) ev.id = lastId;
    if (b.event !== undefined && b.data.length > 0) ev.event = b.event;
    events.push(ev);
  }
  return { wire, events, retries };
}

describe("any split of a valid stream gives the same events", () => {
  it("whole, byte by byte, or cut anywhere (inside CRLF and inside UTF-8 sequences included)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(block, { maxLength: 6 }),
        fc.array(eol, { minLength: 1, maxLength: 4 }),
        fc.array(fc.nat(), { maxLength: 12 }),
        async (blocks, eols, cuts) => {
          const w = written(blocks, eols);
          const whole = enc.encode(w.wire);
          const once = await parse([whole]);
          expect(once.events).toEqual(w.events);
          expect(once.retries).toEqual(w.retries);
          expect(await parse(split(whole, cuts))).toEqual(once);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("every single cut point of one mixed stream", async () => {
    const w = written(
      [
        { id: "s/0", retry: 500, data: [""] },
        { comment: " keep-alive", data: [] },
        { id: "s/1", event: "message", data: ['{"a":"é"}', '{"b":"😀"}'] },
        { data: ["no id of its own"] },
        { id: "s/2", data: [] },
      ],
      ["\r\n", "\n", "\r"],
    );
    const whole = enc.encode(w.wire);
    const once = await parse([whole]);
    expect(once.events).toEqual(w.events);
    for (let c = 0; c <= whole.length; c++) expect(await parse(split(whole, [c])), `cut at ${c}`).toEqual(once);
    for (let c = 0; c + 1 <= whole.length; c++) expect(await parse(split(whole, [c, c + 1])), `byte ${c} alone`).toEqual(once);
  });
});
