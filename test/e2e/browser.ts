/**
 * The browser the e2e suite drives: Debian's Chromium through playwright-core, headless. A test
 * that needs it is skipped, saying so, only on a machine without /usr/bin/chromium and only when
 * no browser is required; CI requires one (`.ci/run` sets PORTCULLIS_REQUIRE_BROWSER, as does a
 * `CI` variable), so there a missing Chromium fails the browser tests instead of skipping them.
 * Must never: download a browser, or start one anywhere but on this machine.
 */
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

export const CHROMIUM = "/usr/bin/chromium";
export const hasChromium = existsSync(CHROMIUM);
/** Whether this run must have a browser (CI): the browser tests then run, and fail without one. */
export const browserRequired = Boolean(process.env.CI || process.env.PORTCULLIS_REQUIRE_BROWSER);
/** Skip the browser tests: no Chromium here, and none required. */
export const skipBrowser = !hasChromium && !browserRequired;

/** Debian's Chromium, headless; without one (and required) it fails saying what is missing. */
export async function launchChromium(): Promise<Browser> {
  if (!hasChromium) throw new Error(`${CHROMIUM} is absent and this run requires a browser (apt-get install chromium)`);
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"], headless: true });
}
