// The decode prior (issue 44): a version-2 artefact ships logprior.bin (float64 LE) and the
// local decode returns the posterior mode; a version 2 without it (or a version 1 with it) is refused.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { codePosterior, decodeHammingPrior, decodeNearestPrior, loadArtefact, priorPenalty, Privatizer, WEB_VERSION_PRIOR } from "../src/deniable.js";
import { brrFiles, madlibFiles, source, WORDS } from "./helpers.js";

/** The artefact `files` with a log prior (word 3 very improbable) and the manifest updated. */
function withPrior(files, { version = WEB_VERSION_PRIOR, ship = true } = {}) {
  const lp = new Float64Array(WORDS.length).fill(-1);
  lp[3] = -50;
  const out = { ...files };
  if (ship) out["logprior.bin"] = new Uint8Array(lp.buffer);
  const meta = JSON.parse(new TextDecoder().decode(files["manifest.json"]));
  meta.version = version;
  meta.prior = "counts:test.txt";
  if (ship) meta.files["logprior.bin"] = { bytes: 8 * WORDS.length, sha256: createHash("sha256").update(out["logprior.bin"]).digest("hex") };
  out["manifest.json"] = new TextEncoder().encode(JSON.stringify(meta));
  return out;
}

test("a version-2 artefact carries its prior; mismatched versions are refused", async () => {
  const a = await loadArtefact(source(withPrior(brrFiles())));
  assert.equal(a.prior, "counts:test.txt");
  assert.equal(a.logPrior[3], -50);
  assert.equal((await loadArtefact(source(brrFiles()))).prior, "uniform");
  await assert.rejects(loadArtefact(source(withPrior(brrFiles(), { ship: false }))), /logprior/);
  await assert.rejects(loadArtefact(source(withPrior(brrFiles(), { version: 1 }))), /logprior/);
});

test("brr: the posterior mode leaves an improbable word; ties go to the bytewise smaller code", async () => {
  const a = await loadArtefact(source(withPrior(brrFiles())));
  const q = a.codeBytes.slice(3 * 8, 4 * 8); // word 3's code exactly: every other code is 12 bits away
  assert.deepEqual(decodeHammingPrior(codePosterior(a.codeBytes, a.bits, a.logPrior, 1e6), q), [3]);
  // at eps 1 word 3 costs 49 flips: the other codes tie at 12 + 0, the bytewise smallest (word 9's) wins
  assert.deepEqual(decodeHammingPrior(codePosterior(a.codeBytes, a.bits, a.logPrior, 1), q), [9]);
  // the twin: a uniform prior decodes to word 3
  assert.deepEqual(decodeHammingPrior(codePosterior(a.codeBytes, a.bits, new Float64Array(WORDS.length), 1), q), [3]);
});

test("madlib: the posterior mode leaves an improbable word; ties go to the lowest id", async () => {
  const a = await loadArtefact(source(withPrior(madlibFiles())));
  const q = a.vectors.slice(3 * 10, 4 * 10);
  assert.deepEqual(decodeNearestPrior(a.vectors, q, 10, priorPenalty(a.logPrior, 1e6)), [3]);
  assert.deepEqual(decodeNearestPrior(a.vectors, q, 10, priorPenalty(a.logPrior, 1)), [0]);
  assert.deepEqual(decodeNearestPrior(a.vectors, q, 10, priorPenalty(new Float64Array(WORDS.length), 1)), [3]);
});

test("the privatizer decodes locally with the artefact's prior", async () => {
  for (const files of [brrFiles(), madlibFiles()]) {
    const a = await loadArtefact(source(withPrior(files)));
    const r = await new Privatizer(a, { epsilon: 1e6 }).privatize("The hockey game was great");
    assert.equal(r.text, "The hockey game was great");
    const p = new Privatizer(a, { epsilon: 1 });
    await p.privatize("was was was");
    assert.ok(p.posterior); // the posterior decoder was built and used
  }
});
