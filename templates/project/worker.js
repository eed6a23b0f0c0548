// This gateway's Worker: Portcullis from the installed package (`npm update portcullis` upgrades
// it), serving the config built from portcullis.yaml. `npx portcullis build` writes
// .portcullis/build/config.js (portcullis.yaml with its policy and mappings inlined, any size);
// `npx portcullis dev` and `npx portcullis deploy` run it first. Written by `npx portcullis init`.
import config from "./.portcullis/build/config.js";
import { gateway } from "portcullis/worker";

export * from "portcullis/objects";
export default gateway(config);
