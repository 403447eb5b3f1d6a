// madlib artefacts with 8-bit vectors (version 3: qvectors.bin + levels.bin): the client rebuilds
// the float32 vectors by table lookup, so every decoder sees the very vectors Python quantized.
import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeNearest, loadArtefact, Privatizer, WEB_VERSION_QUANTIZED } from "../src/deniable.js";
import { madlibQuantizedFiles, source, WORDS } from "./helpers.js";

test("an 8-bit artefact's vectors are levels[k, codes[v, k]], bit for bit", async () => {
  const a = await loadArtefact(source(madlibQuantizedFiles()));
  assert.equal(WEB_VERSION_QUANTIZED, 3);
  assert.equal(a.quantized, true);
  assert.equal(a.dim, 10);
  assert.equal(a.vectors.length, WORDS.length * 10);
  for (let v = 0; v < WORDS.length; v++) {
    for (let k = 0; k < 10; k++) assert.equal(a.vectors[v * 10 + k], Math.fround(k + (k === v ? 200 : 0) / 10));
  }
  // its own vector decodes to each word
  assert.deepEqual(decodeNearest(a.vectors, a.vectors, a.dim), WORDS.map((_, i) => i));
});

test("an 8-bit artefact privatizes like a float32 one (local, huge epsilon)", async () => {
  const p = new Privatizer(await loadArtefact(source(madlibQuantizedFiles())), { epsilon: 1e6 });
  const r = await p.privatize("The HOCKEY game, was great! nasa");
  assert.equal(r.text, "The hockey game, was great! Nasa");
  assert.equal(r.changed, 0);
});

test("version, dtype and files must agree", async () => {
  await assert.rejects(loadArtefact(source(madlibQuantizedFiles({ version: 1 }))), /version 1 with madlib uint8/);
  await assert.rejects(loadArtefact(source(madlibQuantizedFiles({ dtype: "float32-le" }))), /version 3 with madlib float32-le/);
  await assert.rejects(loadArtefact(source(madlibQuantizedFiles({ drop: "levels.bin" }))), /levels\.bin size/);
  await assert.rejects(loadArtefact(source(madlibQuantizedFiles({ version: 4 }))), /format version 4/);
});
