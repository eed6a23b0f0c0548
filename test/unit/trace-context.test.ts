/**
 * W3C Trace Context as the gateway reads and writes it (src/wire/trace-context.ts): a valid
 * `traceparent` is continued (trace id kept, its parent recorded, a new span of the gateway's
 * own), anything else starts a new sampled trace; `tracestate` rides only with a valid
 * traceparent and within 512 printable characters; the upstream gets version 00 with the
 * gateway's span as its parent.
 */
import { describe, expect, it } from "vitest";
import { parseTraceparent, traceHeaders, traceOf } from "../../src/wire/trace-context.ts";

const TID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PID = "00f067aa0ba902b7";
const headers = (h: Record<string, string>) => new Headers(h);

describe("traceparent", () => {
  it("parses version 00 and later versions; refuses what the spec says is invalid", () => {
    expect(parseTraceparent(`00-${TID}-${PID}-01`)).toEqual({ traceId: TID, parentId: PID, flags: "01" });
    expect(parseTraceparent(` 00-${TID}-${PID}-00 `)).toEqual({ traceId: TID, parentId: PID, flags: "00" });
    // A later version may carry more fields after a dash; the first four are read.
    expect(parseTraceparent(`01-${TID}-${PID}-01-what-comes-next`)).toEqual({ traceId: TID, parentId: PID, flags: "01" });
    for (const bad of [
      "",
      `ff-${TID}-${PID}-01`, // version ff is invalid
      `00-${TID}-${PID}-01-extra`, // version 00 has exactly four fields
      `00-${"0".repeat(32)}-${PID}-01`, // all-zero trace id
      `00-${TID}-${"0".repeat(16)}-01`, // all-zero parent id
      `00-${TID.toUpperCase()}-${PID}-01`, // uppercase hex
      `00-${TID.slice(1)}-${PID}-01`, // short trace id
      `00-${TID}-${PID}-1`, // short flags
      `00_${TID}_${PID}_01`,
    ])
      expect(parseTraceparent(bad), bad).toBeNull();
    expect(parseTraceparent(null)).toBeNull();
  });

  it("continues an incoming trace with a span of its own, and sends that span as the upstream's parent", () => {
    const t = traceOf(headers({ traceparent: `00-${TID}-${PID}-01`, tracestate: "vendor=abc,other=1" }));
    expect(t.traceId).toBe(TID);
    expect(t.parentSpanId).toBe(PID);
    expect(t.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(t.spanId).not.toBe(PID);
    expect(t.flags).toBe("01");
    expect(t.tracestate).toBe("vendor=abc,other=1");
    expect(traceHeaders(t)).toEqual([
      ["traceparent", `00-${TID}-${t.spanId}-01`],
      ["tracestate", "vendor=abc,other=1"],
    ]);
    // A later version is answered in version 00.
    expect(traceHeaders(traceOf(headers({ traceparent: `02-${TID}-${PID}-00-x` })))[0]![1]).toMatch(new RegExp(`^00-${TID}-[0-9a-f]{16}-00$`));
  });

  it("starts a new sampled trace when there is none or it is malformed; a tracestate without a valid traceparent, or too long, is dropped", () => {
    const fresh = traceOf(headers({ tracestate: "vendor=abc" }));
    expect(fresh.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(fresh.traceId).not.toBe("0".repeat(32));
    expect(fresh.parentSpanId).toBeNull();
    expect(fresh.flags).toBe("01");
    expect(fresh).not.toHaveProperty("tracestate");
    expect(traceHeaders(fresh)).toEqual([["traceparent", `00-${fresh.traceId}-${fresh.spanId}-01`]]);
    const broken = traceOf(headers({ traceparent: `00-${TID}-${PID}-01-extra`, tracestate: "vendor=abc" }));
    expect(broken.traceId).not.toBe(TID);
    expect(broken).not.toHaveProperty("tracestate");
    expect(traceOf(headers({ traceparent: `00-${TID}-${PID}-01`, tracestate: `v=${"a".repeat(511)}` }))).not.toHaveProperty("tracestate");
    expect(traceOf(headers({ traceparent: `00-${TID}-${PID}-01`, tracestate: `v=${"a".repeat(509)}` })).tracestate).toHaveLength(511);
    // Two requests never share a span, and two new traces never share a trace id.
    const ids = new Set(Array.from({ length: 200 }, () => traceOf(headers({})).traceId));
    expect(ids.size).toBe(200);
    const spans = new Set(Array.from({ length: 200 }, () => traceOf(headers({ traceparent: `00-${TID}-${PID}-01` })).spanId));
    expect(spans.size).toBe(200);
  });
});
