/**
 * The console's response headers and its one stylesheet: a Content-Security-Policy that allows
 * no script at all, no images, no frames and no forms posting elsewhere — only the inline
 * `<style>` whose SHA-256 it names — plus the anti-framing, no-sniff, no-store and referrer headers
 * every console response carries. Must never: allow 'unsafe-inline', any script source, or a
 * stylesheet other than the constant below.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { utf8ToBytes } from "@noble/hashes/utils.js";

/** The console's whole stylesheet (inline; the CSP allows exactly this text by its hash). */
export const CONSOLE_CSS = `
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #5b6370; --line: #d5d9df; --bg: #ffffff; --panel: #f5f7f9; --ok: #1d7f3a; --bad: #b3261e; --warn: #8a5a00; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e8eb; --muted: #9aa3ae; --line: #3a4048; --bg: #15181c; --panel: #1e2227; --ok: #5fcf80; --bad: #ff8a80; --warn: #e3b341; } }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; padding: .6rem 1.2rem; border-bottom: 1px solid var(--line); background: var(--panel); }
header .brand { font-weight: 700; }
header nav { display: flex; flex-wrap: wrap; row-gap: .2rem; }
header nav a { margin-right: .9rem; white-space: nowrap; }
header .who { margin-left: auto; color: var(--muted); font-size: .9em; }
header form { display: inline; margin: 0; }
main { padding: 1rem 1.2rem 3rem; max-width: 80rem; }
a { color: inherit; }
h1 { font-size: 1.35rem; margin: .4rem 0 1rem; }
h2 { font-size: 1.1rem; margin: 1.6rem 0 .6rem; }
table { border-collapse: collapse; width: 100%; margin: .4rem 0 1rem; }
th, td { text-align: left; vertical-align: top; padding: .35rem .5rem; border-bottom: 1px solid var(--line); overflow-wrap: anywhere; }
th { font-weight: 600; color: var(--muted); font-size: .9em; overflow-wrap: normal; white-space: nowrap; }
table.facts th { width: 12rem; }
pre { background: var(--panel); border: 1px solid var(--line); padding: .7rem; overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere; font-size: .88em; }
code { font-size: .9em; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.state { font-weight: 600; white-space: nowrap; }
.state-approved, .state-consumed, .ok { color: var(--ok); }
.state-rejected, .state-expired, .bad { color: var(--bad); }
.state-pending, .warn { color: var(--warn); }
.notice { border: 1px solid var(--line); border-left: 4px solid var(--warn); background: var(--panel); padding: .6rem .8rem; margin: .8rem 0; }
.notice.good { border-left-color: var(--ok); }
.notice.error { border-left-color: var(--bad); }
form.resolve, form.box { border: 1px solid var(--line); padding: .8rem; margin: .8rem 0; max-width: 44rem; }
label { display: block; margin: .4rem 0 .2rem; font-weight: 600; }
textarea, input[type=text], select { width: 100%; font: inherit; padding: .35rem; border: 1px solid var(--line); background: var(--bg); color: var(--fg); }
textarea { min-height: 4.5rem; }
button { font: inherit; padding: .35rem .9rem; margin: .5rem .5rem 0 0; cursor: pointer; }
button[disabled] { cursor: not-allowed; opacity: .55; }
form.filters { display: flex; gap: .8rem; align-items: end; flex-wrap: wrap; margin-bottom: .6rem; }
form.filters label { margin: 0; }
form.filters select, form.filters input { width: 14rem; }
section.box { border: 1px solid var(--line); padding: .2rem .9rem .8rem; margin: .8rem 0; max-width: 52rem; }
label.confirm { font-weight: normal; }
a.button { display: inline-block; border: 1px solid var(--line); background: var(--panel); padding: .35rem .9rem; text-decoration: none; }
button.danger { color: var(--bad); }
button.proposed { outline: 3px solid var(--warn); font-weight: 700; }
@media (max-width: 720px) { main { padding: .8rem .7rem 2rem; } table { display: block; overflow-x: auto; max-width: 100%; } table:not(.facts) td { overflow-wrap: break-word; min-width: 5rem; } form.filters select, form.filters input { width: 100%; } }
.tiles { display: flex; flex-wrap: wrap; gap: .8rem; margin: .6rem 0 1rem; }
.tile { border: 1px solid var(--line); background: var(--panel); padding: .6rem .9rem; min-width: 11rem; display: flex; flex-direction: column; gap: .15rem; }
.tile-label { color: var(--muted); font-size: .85em; }
.tile-value { font-size: 1.5rem; font-weight: 700; }
svg.chart { width: 100%; max-width: 52rem; height: auto; display: block; margin: .3rem 0 .8rem; }
svg.chart .chart-axis { stroke: var(--line); }
svg.chart .chart-label { fill: var(--muted); font-size: 12px; }
.chart-ok { fill: var(--ok); } .chart-bad { fill: var(--bad); } .chart-warn { fill: var(--warn); } .chart-other { fill: var(--muted); }
.legend { display: flex; gap: 1rem; flex-wrap: wrap; font-size: .9em; margin: .2rem 0; }
.legend .key::before { content: ""; display: inline-block; width: .8em; height: .8em; margin-right: .35em; vertical-align: -.05em; background: currentColor; }
.key.chart-ok { color: var(--ok); } .key.chart-bad { color: var(--bad); } .key.chart-warn { color: var(--warn); } .key.chart-other { color: var(--muted); }
`;

function base64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/** The CSP source that allows exactly CONSOLE_CSS as an inline style. */
export const STYLE_HASH = `sha256-${base64(sha256(utf8ToBytes(CONSOLE_CSS)))}`;

/** No script, no images, no plugins, no frames (either way), forms only to this origin. */
export const CONSOLE_CSP = `default-src 'none'; style-src '${STYLE_HASH}'; img-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`;

/**
 * Decision: `Referrer-Policy: same-origin`, not `no-referrer`. Chromium serializes the Origin of a
 * form POST as `null` when the page's policy is `no-referrer` (Fetch: "serializing a request
 * origin"), which would make the console's own Origin check refuse every form. `same-origin`
 * sends no Referer to any other origin (what no-referrer protects), and console URLs carry only
 * hold and record ids, never a token.
 */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": CONSOLE_CSP,
  "x-frame-options": "DENY",
  "referrer-policy": "same-origin",
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

/** `res` with every console security header set (a copy when its headers are immutable). */
export function withSecurityHeaders(res: Response): Response {
  let out = res;
  try {
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) out.headers.set(k, v);
  } catch {
    out = new Response(res.body, res);
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) out.headers.set(k, v);
  }
  return out;
}
