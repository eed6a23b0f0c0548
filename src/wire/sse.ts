/**
 * Server-Sent Events: encoding frames for clients and parsing upstream streams (the project's
 * thin adapter over eventsource-parser, which reads the wire format).
 * Owns: the wire format (id, event, retry, data lines) in both directions, and the last event id.
 * Must never: buffer a whole stream before yielding, or treat a comment line as data.
 */
import { createParser } from "eventsource-parser";
export interface SseEvent {
  id?: string;
  event?: string;
  data: string;
  retry?: number;
}

const encoder = new TextEncoder();

export function encodeEvent(ev: SseEvent): Uint8Array {
  let out = "";
  if (ev.id !== undefined) out += `id: ${ev.id}\n`;
  if (ev.event !== undefined) out += `event: ${ev.event}\n`;
  if (ev.retry !== undefined) out += `retry: ${ev.retry}\n`;
  for (const line of ev.data.split("\n")) out += `data: ${line}\n`;
  return encoder.encode(`${out}\n`);
}

export function encodeComment(text: string): Uint8Array {
  return encoder.encode(`: ${text}\n\n`);
}

/**
 * Parses an SSE byte stream into events; yields each as soon as its blank line arrives. The
 * parsing is eventsource-parser's (lines ended by CRLF, LF or CR wherever a chunk boundary falls,
 * comments, `retry`); this adapter keeps the last event id (an event without an `id` field
 * carries the one before it) and yields a block that sets an id without data as an event with
 * empty data, so a stream can be resumed from it.
 */
export async function* parseSse(body: ReadableStream<Uint8Array>, onRetry?: (ms: number) => void): AsyncGenerator<SseEvent> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const ready: SseEvent[] = [];
  let lastId: string | undefined;
  // The event of the block whose id was just reported (onId comes right before that block's onEvent).
  let withId: SseEvent | undefined;
  const parser = createParser({
    onId(id) {
      lastId = id;
      withId = { data: "", id };
      ready.push(withId);
    },
    onEvent(m) {
      const ev: SseEvent = m.id !== undefined && withId ? withId : { data: "" };
      ev.data = m.data;
      if (ev !== withId) {
        if (lastId !== undefined) ev.id = lastId;
        ready.push(ev);
      }
      if (m.event !== undefined) ev.event = m.event;
      withId = undefined;
    },
    onRetry: (ms) => onRetry?.(ms),
  });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(value);
      while (ready.length > 0) yield ready.shift()!;
    }
  } finally {
    reader.releaseLock();
  }
}
