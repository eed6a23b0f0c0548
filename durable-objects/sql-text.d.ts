/**
 * How TypeScript sees a `.sql` file the Worker imports: its text. wrangler's default module rules
 * (and the Cloudflare vitest plugin's, which read the same wrangler.toml) load `**\/*.sql` as a
 * Text module, so `import schema from "../migrations/0001_ledger.sql"` is the file's contents in
 * the deploy bundle, `wrangler dev` and the unit tests alike. Owns only that declaration. Must
 * never: declare anything that is not a text import.
 */
declare module "*.sql" {
  const text: string;
  export default text;
}
