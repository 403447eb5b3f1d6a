// Builds small web artefacts in memory (the same layout as deniable.binarize.device.web_artefact).
import { createHash } from "node:crypto";
import { Artefact, WEB_FORMAT, WEB_VERSION } from "../src/deniable.js";

export const WORDS = ["the", "hockey", "game", "was", "great", "puck", "goal", "rocket", "orbit", "nasa"];

function manifestFor(mechanism, files, extra) {
  const meta = { format: WEB_FORMAT, version: WEB_VERSION, mechanism, vocab_size: WORDS.length, lowercase: true, fingerprint: "test", ...extra, files: {} };
  for (const [name, bytes] of Object.entries(files)) meta.files[name] = { bytes: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
  return meta;
}

/** name -> bytes of a brr artefact with distinct 64-bit codes (word i: bits i*6..i*6+5 set). */
export function brrFiles() {
  const codes = new Uint8Array(WORDS.length * 8);
  WORDS.forEach((_, i) => {
    for (let b = i * 6; b < i * 6 + 6; b++) codes[i * 8 + (b >> 3)] |= 0x80 >>> (b & 7);
  });
  const files = { "words.txt": new TextEncoder().encode(WORDS.join("\n") + "\n"), "codes.bin": codes };
  files["manifest.json"] = new TextEncoder().encode(JSON.stringify(manifestFor("brr", files, { bits: 64 })));
  return files;
}

/** name -> bytes of a madlib artefact: word i at 10 * e_i in 10 dimensions. */
export function madlibFiles() {
  const vec = new Float32Array(WORDS.length * 10);
  WORDS.forEach((_, i) => (vec[i * 10 + i] = 10));
  const files = { "words.txt": new TextEncoder().encode(WORDS.join("\n") + "\n"), "vectors.bin": new Uint8Array(vec.buffer) };
  files["manifest.json"] = new TextEncoder().encode(JSON.stringify(manifestFor("madlib", files, { dim: 10, dtype: "float32-le" })));
  return files;
}

/**
 * name -> bytes of a madlib artefact with 8-bit vectors (version 3): word i at level 200 of
 * dimension i and level 0 elsewhere, the levels of dimension k being k + c / 10 (float32).
 */
export function madlibQuantizedFiles({ version = 3, dtype = "uint8", drop = null } = {}) {
  const dim = 10;
  const codes = new Uint8Array(WORDS.length * dim);
  WORDS.forEach((_, i) => (codes[i * dim + i] = 200));
  const levels = new Float32Array(dim * 256);
  for (let k = 0; k < dim; k++) for (let c = 0; c < 256; c++) levels[k * 256 + c] = k + c / 10;
  const files = { "words.txt": new TextEncoder().encode(WORDS.join("\n") + "\n"), "qvectors.bin": codes, "levels.bin": new Uint8Array(levels.buffer) };
  if (drop) delete files[drop];
  files["manifest.json"] = new TextEncoder().encode(JSON.stringify({ ...manifestFor("madlib", files, { dim, dtype }), version }));
  return files;
}

export const source = (files) => async (name) => {
  if (!(name in files)) throw new Error(`no ${name}`);
  return files[name];
};

export { Artefact };
