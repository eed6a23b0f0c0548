/**
 * Turning a console page (Hono JSX) into the HTTP answer: the doctype, the HTML content type, the
 * status, and every console security header; and the 303 redirects the console's forms answer
 * with. Must never: build markup from strings, or redirect anywhere but a console path.
 */
import type { HtmlEscapedString } from "hono/utils/html";
import { withSecurityHeaders } from "./headers.ts";

export async function htmlResponse(
  page: HtmlEscapedString | Promise<HtmlEscapedString>,
  status = 200,
  headers: Record<string, string> = {},
): Promise<Response> {
  // A JSX node stringifies to markup whose every value was escaped when it was rendered.
  const body = `<!doctype html>\n${await (await page).toString()}`;
  return withSecurityHeaders(new Response(body, { status, headers: { ...headers, "content-type": "text/html; charset=utf-8" } }));
}

/** 303 See Other to a console path (after a form, or to the sign-in page). */
export function seeOther(path: string, headers: Record<string, string> = {}): Response {
  if (!/^\/console(\/|\?|$)/.test(path)) throw new Error(`the console redirects only within /console, not to ${path}`);
  return withSecurityHeaders(new Response(null, { status: 303, headers: { ...headers, location: path } }));
}
