// The WebAssembly SIMD kernels give exactly the typed-array kernels' results (which mirror the
// Python decoders: tests/test_device_decode.py). A seeded generator makes the inputs
// (test data only: the client's own randomness is crypto.getRandomValues).
import assert from "node:assert/strict";
import { test } from "node:test";
import { activeKernels, decodeNearest, hammingTies, useKernels } from "../src/deniable.js";

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function both(fn) {
  try {
    useKernels("js");
    const js = fn();
    useKernels("wasm");
    const wasm = fn();
    return { js, wasm };
  } finally {
    useKernels("auto");
  }
}

test("WebAssembly SIMD kernels are available in Node and chosen by default", () => {
  assert.equal(activeKernels(), "wasm");
  assert.equal(useKernels("js"), "js");
  assert.equal(useKernels("auto"), "wasm");
  assert.throws(() => useKernels("gpu"), RangeError);
});

for (const bits of [128, 256, 384]) {
  test(`hamming ties: wasm = js (${bits} bits, duplicate codes, odd vocabulary sizes, > 32-way ties)`, () => {
    const r = rng(bits);
    const bytes = bits / 8;
    for (const nv of [1, 5, 4097, 9003]) {
      const codes8 = new Uint8Array(nv * bytes).map(() => (r() * 256) | 0);
      // 40 copies of code 0 (a 40-way tie, beyond the kernel's 32) and a few near codes
      for (let c = 1; c < Math.min(nv, 41); c++) codes8.copyWithin(c * 7 * bytes % (nv * bytes), 0, bytes);
      const codes = new Uint32Array(codes8.buffer);
      const nq = 37;
      const q = new Uint8Array(nq * bytes).map(() => (r() * 256) | 0);
      q.set(codes8.subarray(0, bytes), 0); // exact hit on the 40-way tie
      for (let i = 1; i < nq && i < nv; i += 3) { // near misses of vocabulary codes
        q.set(codes8.subarray(i * bytes, (i + 1) * bytes), i * bytes);
        q[i * bytes + (i % bytes)] ^= 1 << (i % 8);
      }
      const { js, wasm } = both(() => hammingTies(codes, q, bits));
      assert.deepEqual(wasm, js);
    }
  });
}

test("nearest vector: wasm = js (near ties, duplicates, far-out and tiny queries, odd sizes)", () => {
  const r = rng(7);
  for (const [nv, dim] of [[1, 3], [7, 1], [4099, 50], [2001, 7], [300, 64]]) {
    const vectors = new Float32Array(nv * dim).map(() => (r() - 0.5) * 4);
    for (let c = 1; c < Math.min(nv, 80); c++) vectors.copyWithin((c * 13 % nv) * dim, 0, dim); // a 80-way duplicate
    const nq = 45;
    const q = new Float32Array(nq * dim);
    for (let i = 0; i < nq; i++) {
      const v = (i * 31) % nv;
      const scale = i % 9 === 0 ? 1e6 : i % 9 === 1 ? 1e-30 : i % 9 === 2 ? 1e-3 : 1;
      for (let k = 0; k < dim; k++) q[i * dim + k] = vectors[v * dim + k] + (r() - 0.5) * scale;
    }
    q.set(vectors.subarray(0, dim), 0); // exactly on the duplicated vector: the lowest id wins
    for (let k = 0; k < dim; k++) q[dim + k] = (vectors[k] + vectors[((13 % nv) * dim) + k]) / 2;
    const { js, wasm } = both(() => decodeNearest(vectors, q, dim));
    assert.deepEqual(wasm, js);
    assert.equal(wasm[0], 0);
  }
});

test("nearest vector: equidistant words within float32 rounding go to the exact float64 rule", () => {
  // two words whose float32 scores |y|^2 - 2 q.y tie but whose exact sums differ by one ulp of float64
  const dim = 4;
  const vectors = new Float32Array([1, 0, 0, 0, 1 + 2 ** -23, 0, 0, 0, 0, 1, 0, 0]);
  const q = new Float32Array([1 + 2 ** -22, 0, 0, 0, 0.5, 0.5, 0, 0]);
  const { js, wasm } = both(() => decodeNearest(vectors, q, dim));
  assert.deepEqual(wasm, js);
  assert.deepEqual(js, [1, 0]);
});

test("nearest vector: clusters of words a few float32 ulps apart (float32 scores cannot order them) decode as js", () => {
  const r = rng(11);
  for (const dim of [50, 9]) {
    const base = Array.from({ length: dim }, () => (r() - 0.5) * 8);
    const near = () => Float32Array.from(base, (b) => Math.fround(b * (1 + (((r() * 5) | 0) - 2) * 2 ** -23)));
    const nv = 203; // more than the 64 candidates the kernel keeps per query: its overflow path
    const vectors = new Float32Array(nv * dim);
    for (let v = 0; v < nv; v++) vectors.set(v % 3 === 0 ? near() : Float32Array.from(near(), (x, k) => x + (k === v % dim ? 0.5 : 0)), v * dim);
    const few = new Float32Array(60 * dim); // 20 near-duplicates only: within the 64 kept
    for (let v = 0; v < 60; v++) few.set(v % 3 === 0 ? near() : Float32Array.from(near(), (x, k) => x + (k === v % dim ? 0.5 : 0)), v * dim);
    const nq = 40;
    const q = new Float32Array(nq * dim);
    for (let i = 0; i < nq; i++) q.set(near(), i * dim);
    for (const vocab of [vectors, few]) {
      const { js, wasm } = both(() => decodeNearest(vocab, q, dim));
      assert.deepEqual(wasm, js);
    }
  }
});
