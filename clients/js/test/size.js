// The library's size as an app ships it: each entry bundled and minified with esbuild, then
// gzipped (`npm run size`; esbuild is a dev dependency, used only to measure).

import { build } from "esbuild";
import { gzipSync } from "node:zlib";

const kib = (n) => (n / 1024).toFixed(1) + " KiB";
for (const [name, entry] of [["core (lib/index.js)", "lib/index.js"], ["audio (lib/audio/index.js)", "lib/audio/index.js"]]) {
  const out = await build({ entryPoints: [entry], bundle: true, minify: true, format: "esm", write: false, logLevel: "silent" });
  const code = out.outputFiles[0].contents;
  console.log(`${name}: ${kib(code.length)} minified, ${kib(gzipSync(code, { level: 9 }).length)} gzip`);
}
for (const worklet of ["lib/audio/recorder-worklet.js", "lib/audio/player-worklet.js"]) {
  const out = await build({ entryPoints: [worklet], minify: true, write: false, logLevel: "silent" });
  const code = out.outputFiles[0].contents;
  console.log(`${worklet}: ${kib(code.length)} minified, ${kib(gzipSync(code, { level: 9 }).length)} gzip (loaded by URL)`);
}
