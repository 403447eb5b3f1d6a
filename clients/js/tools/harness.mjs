// A JSON-lines harness for the Python parity tests (tests/test_js_*.py): one request per
// stdin line, one answer per stdout line. Not part of the client's API.
import { readFile } from "node:fs/promises";
import path from "node:path";
import { createInterface } from "node:readline";
import {
  codePosterior,
  decodeHamming,
  decodeHammingPrior,
  decodeNearestPrior,
  priorPenalty,
  decodeNearest,
  hammingTies,
  laplaceNoise,
  loadArtefact,
  lookupKey,
  Privatizer,
  randomizedResponse,
  render,
  split,
} from "../src/deniable.js";

const cache = new Map();
async function artefact(dir) {
  if (!cache.has(dir)) cache.set(dir, await loadArtefact((n) => readFile(path.join(dir, n))));
  return cache.get(dir);
}
const b64 = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64");
const unb64 = (s) => new Uint8Array(Buffer.from(s, "base64"));

const ops = {
  split: (r) => ({ parts: r.texts.map(split) }),
  lower: (r) => ({ lower: r.tokens.map((t) => t.toLowerCase()) }),
  // the vocabulary lookup key of each token (NFC, case folded)
  key: (r) => ({ keys: r.tokens.map((t) => lookupKey(t, true)) }),
  // texts from split parts and one output word per token (render's sentence case)
  render: (r) => ({
    texts: r.parts.map((p, t) => render(p, r.words.slice(r.offsets[t], r.offsets[t + 1]), { caseMode: "sentence" })),
  }),
  // noisy codes of ids (repeated `draws` times each), base64
  brr_noisy: async (r) => {
    const a = await artefact(r.artefact);
    const nb = a.bits / 8;
    const codes = new Uint8Array(r.ids.length * r.draws * nb);
    let k = 0;
    for (const id of r.ids) for (let t = 0; t < r.draws; t++) codes.set(a.codeBytes.subarray(id * nb, (id + 1) * nb), nb * k++);
    return { codes: b64(randomizedResponse(codes, a.bits, r.epsilon)) };
  },
  laplace: (r) => ({ noise: b64(laplaceNoise(r.count, r.dim, r.epsilon)) }),
  // radius of each draw and the cosine of its direction with the unit vector r.axis
  laplace_stats: (r) => {
    const z = laplaceNoise(r.count, r.dim, r.epsilon);
    const radius = new Float64Array(r.count);
    const cos = new Float64Array(r.count);
    for (let i = 0; i < r.count; i++) {
      let sq = 0, dot = 0;
      for (let k = 0; k < r.dim; k++) {
        sq += z[i * r.dim + k] ** 2;
        dot += z[i * r.dim + k] * r.axis[k];
      }
      radius[i] = Math.sqrt(sq);
      cos[i] = dot / radius[i];
    }
    return { radius: b64(radius), cos: b64(cos) };
  },
  brr_ties: async (r) => {
    const a = await artefact(r.artefact);
    return hammingTies(a.codes32, unb64(r.codes), a.bits);
  },
  brr_decode: async (r) => {
    const a = await artefact(r.artefact);
    return { ids: decodeHamming(a.codes32, unb64(r.codes), a.bits) };
  },
  // the posterior mode of the artefact's prior at r.epsilon (r.ignore_prior: a uniform log prior, the twin)
  brr_decode_prior: async (r) => {
    const a = await artefact(r.artefact);
    const lp = r.ignore_prior ? new Float64Array(a.size) : a.logPrior;
    return { ids: decodeHammingPrior(codePosterior(a.codeBytes, a.bits, lp, r.epsilon), unb64(r.codes)), prior: a.prior };
  },
  madlib_decode_prior: async (r) => {
    const a = await artefact(r.artefact);
    const q = unb64(r.vectors);
    const lp = r.ignore_prior ? new Float64Array(a.size) : a.logPrior;
    const ids = decodeNearestPrior(a.vectors, new Float32Array(q.buffer, q.byteOffset, q.length / 4), a.dim, priorPenalty(lp, r.epsilon));
    return { ids, prior: a.prior };
  },
  madlib_decode: async (r) => {
    const a = await artefact(r.artefact);
    const q = unb64(r.vectors);
    return { ids: decodeNearest(a.vectors, new Float32Array(q.buffer, q.byteOffset, q.length / 4), a.dim) };
  },
  // the float32 vectors the client uses (an 8-bit artefact's: rebuilt from its codes and levels)
  madlib_vectors: async (r) => {
    const a = await artefact(r.artefact);
    return { vectors: b64(a.vectors), quantized: a.quantized, version: a.manifest.version };
  },
  // local privatization of texts at epsilon (the Privatizer end to end): the output texts
  privatize: async (r) => {
    const a = await artefact(r.artefact);
    const out = await new Privatizer(a, { epsilon: r.epsilon }).privatizeBatch(r.texts);
    return { texts: out.map((x) => x.text) };
  },
};

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  try {
    process.stdout.write(JSON.stringify(await ops[req.op](req)) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: String(e) }) + "\n");
  }
}
