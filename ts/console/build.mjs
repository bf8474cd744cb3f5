// Builds the console into crates/server/console/ (index.html, console.js, console.css), which
// the server embeds; the built files are committed so building Herald needs no npm.
//
//   node build.mjs           write the bundle
//   node build.mjs --check   rebuild in memory and fail if it differs from the committed files
//
// esbuild's output is deterministic for one version (pinned exactly in package.json and
// package-lock.json), so the check is byte-for-byte. The SDK is bundled from its source through
// its public entry point (src/index.ts) only.
import { build } from "esbuild";
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "../../crates/server/console");
const check = process.argv.includes("--check");

const result = await build({
  entryPoints: [join(here, "src/main.ts")],
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  legalComments: "none",
  charset: "utf8",
  alias: { "@herald/sdk": join(here, "../sdk/src/index.ts") },
  write: false,
  outfile: join(out, "console.js"),
  logLevel: "warning",
});

const files = {
  "index.html": readFileSync(join(here, "src/index.html")),
  "console.css": readFileSync(join(here, "src/console.css")),
  "console.js": Buffer.from(result.outputFiles[0].contents),
};

if (check) {
  const stale = Object.entries(files).filter(([name, bytes]) => {
    try {
      return !readFileSync(join(out, name)).equals(bytes);
    } catch {
      return true;
    }
  });
  if (stale.length > 0) {
    console.error(
      `the committed console bundle is stale: ${stale.map(([n]) => n).join(", ")} in crates/server/console differ from ` +
        `a fresh build; run (cd ts/console && npm run build) and commit the result`,
    );
    process.exit(1);
  }
  console.log("console bundle is fresh (crates/server/console)");
} else {
  mkdirSync(out, { recursive: true });
  for (const [name, bytes] of Object.entries(files)) writeFileSync(join(out, name), bytes);
  console.log(`wrote ${Object.keys(files).map((n) => `${n} (${files[n].length} bytes)`).join(", ")} to crates/server/console`);
}
