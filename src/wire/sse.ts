/**
 * Server-Sent Events: encoding frames for clients and parsing upstream streams.
 * Owns: the wire format (id, event, retry, data lines) in both directions.
 * Must never: buffer a whole stream before yielding, or treat a comment line as data.
 */
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

/** Parses an SSE byte stream into events; yields each as soon as its blank line arrives. */
export async function* parseSse(body: ReadableStream<Uint8Array>, onRetry?: (ms: number) => void): AsyncGenerator<SseEvent> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let data: string[] = [];
  let id: string | undefined;
  let event: string | undefined;
  let sawField = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      for (let nl = buf.search(/\r\n|\r|\n/); nl >= 0; nl = buf.search(/\r\n|\r|\n/)) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (sawField) {
            const ev: SseEvent = { data: data.join("\n") };
            if (id !== undefined) ev.id = id;
            if (event !== undefined) ev.event = event;
            yield ev;
          }
          data = [];
          event = undefined;
          sawField = false;
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "data") {
          data.push(val);
          sawField = true;
        } else if (field === "id") {
          if (!val.includes("\0")) id = val;
          sawField = true;
        } else if (field === "event") {
          event = val;
          sawField = true;
        } else if (field === "retry") {
          if (/^\d+$/.test(val)) onRetry?.(Number(val));
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}
