/**
 * The deployed config's source (src/config/deployed.ts): a PORTCULLIS_CONFIG var wins when set,
 * else the config a project's bundle registered (src/worker.ts `gateway`), else none — and an
 * empty built config is refused at load, never served. Owns no state beyond the module's own.
 */
import { describe, expect, it } from "vitest";
import { deployedConfigSource, deployedConfigText, useBuiltConfig } from "../../src/config/deployed.ts";

describe("the deployed config", () => {
  it("is the var when set, else the built one, else none", () => {
    // Nothing registered in this isolate yet: the var or nothing.
    expect(deployedConfigText({})).toBeUndefined();
    expect(deployedConfigSource({})).toBe("none");
    expect(deployedConfigText({ PORTCULLIS_CONFIG: "upstreams: []" })).toBe("upstreams: []");
    useBuiltConfig("built: true\n");
    expect(deployedConfigText({})).toBe("built: true\n");
    expect(deployedConfigSource({})).toBe("built");
    // A var that is set still wins (an operator's own var, this repository's dev); a blank one does not count.
    expect(deployedConfigText({ PORTCULLIS_CONFIG: "var: true" })).toBe("var: true");
    expect(deployedConfigSource({ PORTCULLIS_CONFIG: "var: true" })).toBe("var");
    expect(deployedConfigText({ PORTCULLIS_CONFIG: "  " })).toBe("built: true\n");
  });
  it("refuses an empty built config", () => {
    expect(() => useBuiltConfig("")).toThrow(/the built config is empty/);
    expect(() => useBuiltConfig(undefined as unknown as string)).toThrow(/the built config is empty/);
    expect(deployedConfigText({})).toBe("built: true\n");
  });
});
