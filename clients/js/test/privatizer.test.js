import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeHamming, decodeNearest, hammingTies, loadArtefact, Privatizer } from "../src/deniable.js";
import { brrFiles, madlibFiles, source, WORDS } from "./helpers.js";

test("loadArtefact verifies sizes and sha256 of every file", async () => {
  const files = brrFiles();
  const a = await loadArtefact(source(files));
  assert.equal(a.size, WORDS.length);
  assert.equal(a.lookup("Hockey"), 1);
  assert.equal(a.lookup("zzz"), -1);
  const bad = { ...files, "codes.bin": files["codes.bin"].slice() };
  bad["codes.bin"][0] ^= 1;
  await assert.rejects(loadArtefact(source(bad)), /sha256/);
  const wrongVersion = { ...files, "manifest.json": new TextEncoder().encode(JSON.stringify({ ...JSON.parse(new TextDecoder().decode(files["manifest.json"])), version: 99 })) };
  await assert.rejects(loadArtefact(source(wrongVersion)), /version/);
});

for (const [name, make] of [["brr", brrFiles], ["madlib", madlibFiles]]) {
  test(`${name}: a huge epsilon returns the words, separators and sentence case kept`, async () => {
    const p = new Privatizer(await loadArtefact(source(make())), { epsilon: 1e6 });
    const r = await p.privatize("The HOCKEY game, was great! nasa…");
    assert.equal(r.text, "The hockey game, was great! Nasa…");
    assert.equal(r.tokens, 6);
    assert.equal(r.changed, 0);
  });

  test(`${name}: OOV tokens become random vocabulary words`, async () => {
    const p = new Privatizer(await loadArtefact(source(make())), { epsilon: 1e6 });
    const r = await p.privatize("zzqx qqzz");
    assert.equal(r.oov, 2);
    for (const w of r.text.toLowerCase().split(" ")) assert.ok(WORDS.includes(w));
  });

  test(`${name}: split mode sends only noisy rows, padded and shuffled, never a word`, async () => {
    const a = await loadArtefact(source(make()));
    const sent = [];
    const fakeFetch = async (url, init) => {
      sent.push({ url, body: init.body });
      const body = JSON.parse(init.body);
      const raw = Buffer.from(body.codes ?? body.vectors, "base64");
      const rows = new Uint8Array(raw);
      // decode like the server would (here: the same local decoder)
      const ids = name === "brr" ? decodeHamming(a.codes32, rows, a.bits) : decodeNearest(a.vectors, new Float32Array(rows.buffer, rows.byteOffset, rows.length / 4), a.dim);
      return { ok: true, json: async () => ({ ids }) };
    };
    const p = new Privatizer(a, { epsilon: 1e6, mode: "split", artefactId: "abc", fetch: fakeFetch, padTo: 8 });
    const r = await p.privatize("The hockey game was great");
    assert.equal(r.text, "The hockey game was great");
    assert.equal(sent.length, 1);
    const body = JSON.parse(sent[0].body);
    assert.deepEqual(Object.keys(body).sort(), [name === "brr" ? "codes" : "vectors", "artefact", "epsilon"].sort());
    assert.equal(body.epsilon, 1e6); // the service's posterior decode (a non-uniform prior) depends on it
    const rows = Buffer.from(body.codes ?? body.vectors, "base64").length / (name === "brr" ? 8 : 40);
    assert.equal(rows, 8); // 5 tokens padded to 8
    for (const w of ["hockey", "game", "great", "The"]) assert.ok(!sent[0].body.includes(w));
  });
}

test("hamming ties list every word at the minimum distance; decode picks among them", async () => {
  const a = await loadArtefact(source(brrFiles()));
  const q = new Uint8Array(8); // all zeros: every code has 6 bits set -> all tied at 6
  const { ties, distances } = hammingTies(a.codes32, q, 64);
  assert.deepEqual(ties[0], WORDS.map((_, i) => i));
  assert.equal(distances[0], 6);
  const seen = new Set();
  for (let i = 0; i < 400; i++) seen.add(decodeHamming(a.codes32, q, 64)[0]);
  assert.equal(seen.size, WORDS.length);
});

test("nearest vector: ties go to the lowest id", () => {
  const vectors = new Float32Array([1, 0, 0, 1, 1, 0]);
  assert.deepEqual(decodeNearest(vectors, new Float32Array([0.5, 0.5, 1, 0]), 2), [0, 0]);
});

test("bad options are refused", async () => {
  const a = await loadArtefact(source(brrFiles()));
  assert.throws(() => new Privatizer(a, { epsilon: -1 }), RangeError);
  assert.throws(() => new Privatizer(a, { epsilon: 1, mode: "cloud" }), RangeError);
  assert.throws(() => new Privatizer({}, { epsilon: 1 }), TypeError);
});
