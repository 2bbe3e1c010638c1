// The declarations name exactly what the modules export (tsc checks the types; this, the names).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";

async function declared(file) {
  const text = await readFile(new URL(file, import.meta.url), "utf8");
  const names = [...text.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map((m) => m[1]);
  return names.sort();
}

for (const [module, types] of [["../lib/index.js", "../lib/index.d.ts"], ["../lib/audio/index.js", "../lib/audio/index.d.ts"]]) {
  test(`${types} declares every export of ${module}`, async () => {
    // The audio module reads `import.meta.url` only when used: importing it in Node is safe.
    const exported = Object.keys(await import(module)).sort();
    assert.deepEqual(await declared(types), exported);
  });
}
