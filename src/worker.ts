/**
 * The Worker as a package module (`portcullis/worker`), for a gateway project that keeps its own
 * config (`portcullis init` writes the entry that uses it): `gateway(config)` registers the config
 * text built into that project's bundle (`portcullis build`: policy and mappings inlined, any size)
 * as the deployed config, and returns the gateway's fetch handler. The project's entry exports
 * that handler as its default and the Durable Object classes from `portcullis/objects`. Must
 * never: hold request logic (src/index.ts owns the app), or be imported by the gateway's own code.
 */
import app from "./index.ts";
import { useBuiltConfig } from "./config/deployed.ts";

/** The gateway's handler, serving `config` (a built config's text) unless a PORTCULLIS_CONFIG var is set. */
export function gateway(config: string): typeof app {
  useBuiltConfig(config);
  return app;
}
