// deniable on the device: word-level metric differential privacy in the browser or in Node.
//
// The text never leaves the device. A loaded artefact (codes or vectors of the whole
// vocabulary, fetched whole and verified by SHA-256) lets the device privatize every word:
//   - BRR: randomized response on the word's packed binary code, then the nearest code in
//     Hamming distance (ties uniform), then a uniform word of that code;
//   - madlib: multivariate Laplace noise on the word's vector, then the nearest vector (float32
//     vectors, or 8-bit ones: madlib over that quantized embedding, docs/device.md).
// An artefact with a decode prior (manifest "prior", logprior.bin) decodes to the posterior
// mode instead (src/deniable/mechanisms/_posterior.py; typed arrays, not the wasm kernels).
// In "local" mode the decode runs here; in "split" mode only the noisy codes/vectors go to
// the server's POST /v1/decode (post-processing: no privacy cost), never a word.
//
// Randomness: only crypto.getRandomValues. No runtime dependencies.
// Mirrors src/deniable/text.py (tokenizer, sentence case), src/deniable/privatizer.py (OOV
// policy), src/deniable/mechanisms/brr.py and laplace.py (samplers, decode rules).

import { KERNELS_WASM } from "./kernels.wasm.js";
import { MARK_CLASS, SPACE_CLASS, UNICODE_VERSION, WORD_CLASS } from "./unicode.js";

export { UNICODE_VERSION };

/** Format of the web artefact this client reads (manifest.json "format" / "version"). */
export const WEB_FORMAT = "deniable-web-device";
export const WEB_VERSION = 1;
/** The version of an artefact whose decode assumes a non-uniform prior (it ships logprior.bin). */
export const WEB_VERSION_PRIOR = 2;
/** The version of a madlib artefact with 8-bit vectors (qvectors.bin + levels.bin; a prior optional). */
export const WEB_VERSION_QUANTIZED = 3;

// ---------------------------------------------------------------------------------------
// Tokenizer: the same rules as deniable.text
// ---------------------------------------------------------------------------------------

// a letter or digit, then letters, digits and combining marks (deniable.text.WORD_PATTERN)
const WORD = `[${WORD_CLASS}](?:[${WORD_CLASS}]|[${MARK_CLASS}])*`;
const WORD_SPLIT = new RegExp(`(${WORD})`, "u");
const IS_WORD = new RegExp(`^${WORD}$`, "u");
const SENTENCE_END = new RegExp(`[.!?]["'\\u2019\\u201d\\u00bb)\\]]*[${SPACE_CLASS}]`, "u");

/** `[sep0, word1, sep1, ..., sepN]`, words at odd positions; `join(split(t)) === t`. */
export function split(text) {
  if (typeof text !== "string") throw new TypeError("text: expected a string");
  return text.split(WORD_SPLIT);
}

/** The word tokens of `text`, in order. */
export function words(text) {
  return split(text).filter((_, i) => i % 2 === 1);
}

/** Inverse of split. */
export function join(parts) {
  return parts.join("");
}

/** True when `s` is exactly one word token. */
export function isWord(s) {
  return IS_WORD.test(s);
}

/** The form of a word token looked up in a vocabulary: NFC, lower-cased first with `foldCase` (deniable.text.lookup_key). */
export function lookupKey(token, foldCase = false) {
  return (foldCase ? token.toLowerCase() : token).normalize("NFC");
}

/** `word` with its first character upper case, if that stays one word (Python's capitalize rule). */
export function capitalize(word) {
  if (!word) return word;
  const first = String.fromCodePoint(word.codePointAt(0));
  const out = first.toUpperCase() + word.slice(first.length);
  return isWord(out) ? out : word;
}

/** Does the separator end a sentence (`.`, `!` or `?`, closing quotes/brackets, whitespace)? */
export function endsSentence(separator) {
  return SENTENCE_END.test(separator);
}

/**
 * Render output words between the original separators with the case policy.
 * `parts`: split(text); `out`: one output word per word token (lower case vocabulary words).
 * case: "sentence" (capital at the start and after a sentence end), "lower".
 */
export function render(parts, out, { caseMode = "sentence", foldCase = true } = {}) {
  if (caseMode !== "sentence" && caseMode !== "lower") throw new RangeError("case: 'sentence' or 'lower'");
  const p = parts.slice();
  for (let k = 0, j = 1; j < p.length; k++, j += 2) {
    let w = out[k];
    if (caseMode === "sentence" && foldCase && (k === 0 || endsSentence(p[j - 1]))) w = capitalize(w);
    p[j] = w;
  }
  return p.join("");
}

// ---------------------------------------------------------------------------------------
// Randomness: crypto.getRandomValues only
// ---------------------------------------------------------------------------------------

const POOL = new Uint32Array(16384); // 64 KiB, the most one getRandomValues call may fill
let poolPos = POOL.length;

function u32() {
  if (poolPos >= POOL.length) {
    globalThis.crypto.getRandomValues(POOL);
    poolPos = 0;
  }
  return POOL[poolPos++];
}

const TWO53 = 9007199254740992;

/** A uniform integer in [0, 2^53) (numpy's double construction: 27 + 26 bits). */
export function randomBits53() {
  return (u32() >>> 5) * 67108864 + (u32() >>> 6);
}

/** A uniform integer in [0, n), 1 <= n <= 2^32, exactly (rejection sampling). */
export function randomInt(n) {
  if (!(n >= 1 && n <= 4294967296 && Number.isInteger(n))) throw new RangeError("randomInt: n in [1, 2^32]");
  const limit = Math.floor(4294967296 / n) * n;
  for (;;) {
    const x = u32();
    if (x < limit) return x % n;
  }
}

/** Uniform in (0, 1], multiples of 2^-53 (never 0: safe under log). */
function uniformOpen0() {
  return (randomBits53() + 1) / TWO53;
}

let spareNormal = null;

/** A standard normal deviate (Box-Muller on two uniforms). */
export function standardNormal() {
  if (spareNormal !== null) {
    const z = spareNormal;
    spareNormal = null;
    return z;
  }
  const r = Math.sqrt(-2 * Math.log(uniformOpen0()));
  const t = 2 * Math.PI * (randomBits53() / TWO53);
  spareNormal = r * Math.sin(t);
  return r * Math.cos(t);
}

/** Gamma(shape = k, scale) for an integer k >= 1: the sum of k exponentials, exactly. */
export function gammaInt(k, scale) {
  let s = 0;
  for (let i = 0; i < k; i++) s -= Math.log(uniformOpen0());
  return s * scale;
}

// ---------------------------------------------------------------------------------------
// Mechanisms' samplers (the same laws as brr.py and laplace.py)
// ---------------------------------------------------------------------------------------

function checkEpsilon(epsilon) {
  if (typeof epsilon !== "number" || !Number.isFinite(epsilon) || epsilon <= 0) {
    throw new RangeError("epsilon: a finite number > 0");
  }
  return epsilon;
}

/** BRR's flip probability 1 / (1 + e^eps), computed as in brr.flip_probability. */
export function flipProbability(epsilon) {
  const t = Math.exp(-checkEpsilon(epsilon));
  return t / (1 + t);
}

/**
 * Randomized response on packed codes (Uint8Array of n * bytes): each bit flipped
 * independently with probability p, as brr.sample_flip_masks does it: one 53-bit uniform
 * per bit, flipped when u < p (u = k / 2^53), i.e. when k < ceil(p * 2^53).
 */
export function randomizedResponse(codes, bits, epsilon) {
  const threshold = Math.ceil(flipProbability(epsilon) * TWO53);
  const out = Uint8Array.from(codes);
  const bytes = bits / 8;
  const n = out.length / bytes;
  for (let r = 0; r < n; r++) {
    for (let j = 0; j < bits; j++) {
      if (randomBits53() < threshold) out[r * bytes + (j >> 3)] ^= 0x80 >>> (j & 7);
    }
  }
  return out;
}

/**
 * `count` draws of d-dimensional noise with density ∝ exp(-eps ||z||): a uniform direction
 * (a normalised standard normal vector) times a Gamma(d, 1/eps) radius, as
 * laplace.sample_laplace_noise. Float64Array of count * d.
 */
export function laplaceNoise(count, dim, epsilon) {
  checkEpsilon(epsilon);
  const out = new Float64Array(count * dim);
  for (let r = 0; r < count; r++) {
    let sq = 0;
    for (let i = 0; i < dim; i++) {
      const g = standardNormal();
      out[r * dim + i] = g;
      sq += g * g;
    }
    const norm = sq === 0 ? 1 : Math.sqrt(sq);
    const radius = gammaInt(dim, 1 / epsilon);
    for (let i = 0; i < dim; i++) out[r * dim + i] = (out[r * dim + i] / norm) * radius;
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Decoders (the same rules as the Python decoders; docs/device.md "Tie rules")
// ---------------------------------------------------------------------------------------

function popcount32(x) {
  x -= (x >>> 1) & 0x55555555;
  x = (x & 0x33333333) + ((x >>> 2) & 0x33333333);
  x = (x + (x >>> 4)) & 0x0f0f0f0f;
  return Math.imul(x, 0x01010101) >>> 24;
}

function asWords32(bytes) {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return new Uint32Array(copy.buffer);
}

/** The little-endian float32 values of a file's bytes (vectors.bin, levels.bin). */
function float32LE(bytes) {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = dv.getFloat32(i * 4, true);
  return out;
}

// Vocabulary rows are scanned in blocks that stay in cache while every query of the batch
// visits them (BLOCK codes of 32 bytes: 128 KiB).
const BLOCK = 4096;
const M1 = 0x55555555;
const M2 = 0x33333333;
const M4 = 0x0f0f0f0f;

/** Nibble-wise popcount of x (each 4-bit field holds its count, <= 4): the first two SWAR steps. */
function nibbles(x) {
  x -= (x >>> 1) & M1;
  return (x & M2) + ((x >>> 2) & M2);
}

/** popcount(a) + popcount(b) + popcount(c) + popcount(d) of four 32-bit words (<= 128). */
function popcount4(a, b, c, d) {
  let s = nibbles(a) + nibbles(b); // nibbles <= 8
  s = (s & M4) + ((s >>> 4) & M4); // bytes <= 16
  const t = nibbles(c) + nibbles(d);
  s += (t & M4) + ((t >>> 4) & M4); // bytes <= 32
  return Math.imul(s, 0x01010101) >>> 24;
}

/**
 * hammingTies on typed arrays (the reference the wasm kernel must equal, and the path for
 * codes that are not a multiple of 128 bits): the vocabulary is scanned in cache-sized blocks, each visited by every
 * query; 256-bit codes take an unrolled path with the query in locals and a nibble-wise
 * popcount summed over four words at once; a code is abandoned as soon as its partial
 * distance exceeds the query's best (it can be neither better nor tied), so the ties and
 * distances are exactly those of a full scan.
 */
function hammingTiesJs(codes, queries, bits) {
  const w32 = bits / 32;
  const q = asWords32(queries);
  const nq = q.length / w32;
  const nv = codes.length / w32;
  const best = new Int32Array(nq).fill(bits + 1); // per query: the minimum so far and every id at it
  const ties = Array.from({ length: nq }, () => []);
  for (let v0 = 0; v0 < nv; v0 += BLOCK) {
    const v1 = Math.min(nv, v0 + BLOCK);
    for (let i = 0; i < nq; i++) {
      const qb = i * w32;
      let b = best[i];
      let list = ties[i];
      if (w32 === 8) {
        const q0 = q[qb], q1 = q[qb + 1], q2 = q[qb + 2], q3 = q[qb + 3];
        const q4 = q[qb + 4], q5 = q[qb + 5], q6 = q[qb + 6], q7 = q[qb + 7];
        for (let v = v0, c = v0 * 8; v < v1; v++, c += 8) {
          let d = popcount4(codes[c] ^ q0, codes[c + 1] ^ q1, codes[c + 2] ^ q2, codes[c + 3] ^ q3);
          if (d > b) continue;
          d += popcount4(codes[c + 4] ^ q4, codes[c + 5] ^ q5, codes[c + 6] ^ q6, codes[c + 7] ^ q7);
          if (d < b) {
            b = d;
            list = [v];
          } else if (d === b) {
            list.push(v);
          }
        }
      } else {
        for (let v = v0; v < v1; v++) {
          const base = v * w32;
          let d = 0;
          for (let k = 0; k < w32 && d <= b; k++) d += popcount32(codes[base + k] ^ q[qb + k]);
          if (d < b) {
            b = d;
            list = [v];
          } else if (d === b) {
            list.push(v);
          }
        }
      }
      best[i] = b;
      ties[i] = list;
    }
  }
  return { ties, distances: Array.from(best) };
}

/**
 * BRR's decode: a distinct code uniformly among those at minimum Hamming distance, then a
 * word uniformly among the words of that code (brr.HammingDecoder.decode).
 */
export function decodeHamming(codes, queries, bits) {
  const w32 = bits / 32;
  const { ties } = hammingTies(codes, queries, bits);
  return ties.map((ids) => {
    const groups = new Map(); // code -> its tied words (words sharing a code are all tied)
    for (const id of ids) {
      const key = Array.from(codes.subarray(id * w32, (id + 1) * w32)).join(",");
      const g = groups.get(key);
      if (g) g.push(id);
      else groups.set(key, [id]);
    }
    const list = [...groups.values()];
    const chosen = list[randomInt(list.length)];
    return chosen[randomInt(chosen.length)];
  });
}

/**
 * madlib's exact decode on typed arrays (the reference the wasm kernel must equal): for each
 * query, the word whose vector is nearest in Euclidean distance, computed as
 * sum((q_i - y_i)^2) in float64 from the float32 values; ties (equal float64 sums) go to the
 * lowest id.
 */
function decodeNearestJs(vectors, queries, dim) {
  const nq = queries.length / dim;
  const nv = vectors.length / dim;
  const best = new Float64Array(nq).fill(Infinity);
  const arg = new Int32Array(nq);
  for (let v = 0; v < nv; v++) {
    const base = v * dim;
    for (let i = 0; i < nq; i++) {
      const qb = i * dim;
      const bound = best[i];
      let s = 0;
      // partial sums only grow (non-negative terms, monotone rounding): stop once s >= the
      // best so far, which could not win; a full sum is the same as without the early stop
      for (let k = 0; k < dim; k += 8) {
        const end = Math.min(k + 8, dim);
        for (let j = k; j < end; j++) {
          const t = queries[qb + j] - vectors[base + j];
          s += t * t;
        }
        if (s >= bound) break;
      }
      if (s < bound) {
        best[i] = s;
        arg[i] = v;
      }
    }
  }
  return Array.from(arg);
}

// ---------------------------------------------------------------------------------------
// WebAssembly SIMD kernels (wasm/kernels.c, built by tools/build_wasm.sh): the same results
// as the typed-array kernels above, which run where the engine lacks WebAssembly SIMD.
// ---------------------------------------------------------------------------------------

let kernelChoice = "auto";
let wasmModule; // undefined: not compiled yet; null: unavailable here

/**
 * Which decode kernels run: "auto" (WebAssembly SIMD where available, else typed arrays),
 * "wasm" (throws where unavailable) or "js". Returns the kernels now in use ("wasm" or "js").
 */
export function useKernels(choice = "auto") {
  if (!["auto", "wasm", "js"].includes(choice)) throw new RangeError("kernels: 'auto', 'wasm' or 'js'");
  if (choice === "wasm" && !kernelModule()) throw new Error("kernels: WebAssembly SIMD is not available here");
  kernelChoice = choice;
  return activeKernels();
}

/** The kernels the decoders use now: "wasm" or "js". */
export function activeKernels() {
  return kernelChoice !== "js" && kernelModule() ? "wasm" : "js";
}

function kernelModule() {
  if (wasmModule === undefined) {
    wasmModule = null;
    try {
      const bin = atob(KERNELS_WASM);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
      if (WebAssembly.validate(bytes)) wasmModule = new WebAssembly.Module(bytes); // < 4 KiB: synchronous is allowed
    } catch {
      wasmModule = null;
    }
  }
  return wasmModule;
}

/** One module instance (its own memory) per vocabulary payload: the payload, then scratch space. */
class WasmKernel {
  constructor(payloadBytes) {
    this.inst = new WebAssembly.Instance(kernelModule(), {});
    this.mem = this.inst.exports.memory;
    this.base = (this.inst.exports.__heap_base.value + 15) & ~15;
    this.payload = this.base;
    this.scratch = (this.payload + payloadBytes + 15) & ~15;
    this.ensure(this.scratch);
  }

  /** Grow the memory to hold `end` bytes. */
  ensure(end) {
    const need = end - this.mem.buffer.byteLength;
    if (need > 0) this.mem.grow(Math.ceil(need / 65536));
    return this.mem.buffer;
  }
}

const kernels = new WeakMap(); // vocabulary typed array -> its WasmKernel

const TIE_CAP = 32; // ties kept per query in wasm; a query with more is rescanned in JS
const QUERY_CHUNK = 256;

/** hammingTies on the WebAssembly kernel (bits a multiple of 128). */
function hammingTiesWasm(codes, queries, bits) {
  let k = kernels.get(codes);
  if (!k) {
    k = new WasmKernel(codes.byteLength);
    new Uint32Array(k.mem.buffer, k.payload, codes.length).set(codes);
    kernels.set(codes, k);
  }
  const rowBytes = bits / 8;
  const w = bits / 128;
  const nq = queries.length / rowBytes;
  const nv = codes.length / (bits / 32);
  const ties = new Array(nq);
  const distances = new Array(nq);
  const block = Math.max(4, (131072 / rowBytes) & ~3);
  for (let q0 = 0; q0 < nq; q0 += QUERY_CHUNK) {
    const n = Math.min(QUERY_CHUNK, nq - q0);
    const qPtr = k.scratch;
    const bestPtr = qPtr + n * rowBytes;
    const countPtr = bestPtr + 4 * n;
    const tiesPtr = countPtr + 4 * n;
    let buf = k.ensure(tiesPtr + 4 * n * TIE_CAP);
    new Uint8Array(buf, qPtr, n * rowBytes).set(queries.subarray(q0 * rowBytes, (q0 + n) * rowBytes));
    new Int32Array(buf, bestPtr, n).fill(bits + 1);
    new Int32Array(buf, countPtr, n).fill(0);
    for (let v0 = 0; v0 < nv; v0 += block) {
      k.inst.exports.hamming_scan(k.payload, v0, Math.min(nv, v0 + block), w, qPtr, n, bestPtr, countPtr, tiesPtr, TIE_CAP);
    }
    buf = k.mem.buffer;
    const best = new Int32Array(buf, bestPtr, n);
    const count = new Int32Array(buf, countPtr, n);
    const found = new Int32Array(buf, tiesPtr, n * TIE_CAP);
    for (let i = 0; i < n; i++) {
      if (count[i] > TIE_CAP) {
        const one = hammingTiesJs(codes, queries.subarray((q0 + i) * rowBytes, (q0 + i + 1) * rowBytes), bits);
        ties[q0 + i] = one.ties[0];
        distances[q0 + i] = one.distances[0];
      } else {
        ties[q0 + i] = Array.from(found.subarray(i * TIE_CAP, i * TIE_CAP + count[i]));
        distances[q0 + i] = best[i];
      }
    }
  }
  return { ties, distances };
}

/**
 * For each packed query code, every word id whose code is at the minimum Hamming distance
 * (ascending ids) and that distance. `codes`: Uint32Array view of the vocabulary codes.
 * WebAssembly SIMD for codes of a multiple of 128 bits, else the typed-array kernel.
 */
export function hammingTies(codes, queries, bits) {
  if (bits % 128 === 0 && activeKernels() === "wasm") return hammingTiesWasm(codes, queries, bits);
  return hammingTiesJs(codes, queries, bits);
}

const CAND_CAP = 64; // madlib candidates kept per query in wasm; a query with more is rescanned in JS
const U32 = 2 ** -24; // float32 unit roundoff
const U64 = 2 ** -53;

/** The vocabulary in groups of 4 vectors, dimension-interleaved, and float32 squared norms (+Inf for padding). */
function nearestKernel(vectors, dim) {
  let k = kernels.get(vectors);
  if (k) return k;
  const nv = vectors.length / dim;
  const groups = Math.ceil(nv / 4);
  k = new WasmKernel(groups * 4 * (dim + 1) * 4);
  const yt = new Float32Array(k.mem.buffer, k.payload, groups * 4 * dim);
  const norms = new Float32Array(k.mem.buffer, k.payload + groups * 4 * dim * 4, groups * 4).fill(Infinity);
  let ymax = 0;
  for (let v = 0; v < nv; v++) {
    const g = v >> 2;
    const j = v & 3;
    let sq = 0;
    for (let d = 0; d < dim; d++) {
      const y = vectors[v * dim + d];
      yt[(g * dim + d) * 4 + j] = y;
      sq += y * y;
    }
    norms[v] = sq;
    if (sq > ymax) ymax = sq;
  }
  k.groups = groups;
  k.norms = k.payload + groups * 4 * dim * 4;
  k.ymax = Math.sqrt(ymax) * (1 + 1e-6);
  kernels.set(vectors, k);
  return k;
}

/**
 * The exact nearest of each query among the candidates the float32 kernel kept: the float64
 * sum of squares, scanned in ascending ids, replaced only on a strictly smaller sum (the rule
 * of decodeNearestJs, so the same id).
 */
function exactAmong(vectors, queries, dim, i, ids) {
  let best = Infinity;
  let arg = 0;
  for (const v of ids) {
    let s = 0;
    for (let j = 0; j < dim; j++) {
      const t = queries[i * dim + j] - vectors[v * dim + j];
      s += t * t;
    }
    if (s < best) {
      best = s;
      arg = v;
    }
  }
  return arg;
}

/** decodeNearest on the WebAssembly kernel: float32 candidates, then the exact float64 rule. */
function decodeNearestWasm(vectors, queries, dim) {
  const k = nearestKernel(vectors, dim);
  const nq = queries.length / dim;
  const out = new Array(nq);
  const groupBytes = dim * 16;
  const block = Math.max(1, Math.floor(131072 / groupBytes));
  for (let q0 = 0; q0 < nq; q0 += QUERY_CHUNK) {
    const n = Math.min(QUERY_CHUNK, nq - q0);
    const qPtr = k.scratch;
    const marginPtr = qPtr + 16 * n * dim; // each query value splatted to 4 lanes
    const loPtr = marginPtr + 4 * n;
    const countPtr = loPtr + 4 * n;
    const candPtr = countPtr + 4 * n;
    const scorePtr = candPtr + 4 * n * CAND_CAP;
    let buf = k.ensure(scorePtr + 4 * n * CAND_CAP);
    const q = queries.subarray(q0 * dim, (q0 + n) * dim);
    const qs = new Float32Array(buf, qPtr, 4 * n * dim);
    for (let j = 0; j < n * dim; j++) qs.fill(q[j], 4 * j, 4 * j + 4);
    const margin = new Float32Array(buf, marginPtr, n);
    const fallback = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      let sq = 0;
      for (let j = 0; j < dim; j++) sq += q[i * dim + j] * q[i * dim + j];
      const qn = Math.sqrt(sq) * (1 + 1e-6);
      const scale = k.ymax * k.ymax + 2 * qn * k.ymax;
      // |float32 score - exact| <= (dim + 3) u32 * scale for every word; twice that (both the
      // best and a candidate err), doubled again for slack, plus the float64 sums' error
      const m = 4 * (dim + 4) * U32 * scale + 4 * (dim + 2) * U64 * (qn + k.ymax) ** 2;
      margin[i] = m;
      if (!Number.isFinite(m) || !Number.isFinite(Math.fround(m)) || !Number.isFinite(Math.fround(scale))) fallback[i] = 1;
    }
    new Float32Array(buf, loPtr, n).fill(Infinity);
    new Int32Array(buf, countPtr, n).fill(0);
    for (let g0 = 0; g0 < k.groups; g0 += block) {
      k.inst.exports.nearest_scan(k.payload, k.norms, g0, Math.min(k.groups, g0 + block), dim, qPtr, n, marginPtr, loPtr, countPtr, candPtr, scorePtr, CAND_CAP);
    }
    buf = k.mem.buffer;
    const lo = new Float32Array(buf, loPtr, n);
    const count = new Int32Array(buf, countPtr, n);
    const cand = new Int32Array(buf, candPtr, n * CAND_CAP);
    const score = new Float32Array(buf, scorePtr, n * CAND_CAP);
    const mg = new Float32Array(buf, marginPtr, n);
    for (let i = 0; i < n; i++) {
      if (fallback[i] || count[i] > CAND_CAP || count[i] === 0) {
        out[q0 + i] = decodeNearestJs(vectors, queries.subarray((q0 + i) * dim, (q0 + i + 1) * dim), dim)[0];
        continue;
      }
      const ids = [];
      for (let r = 0; r < count[i]; r++) if (score[i * CAND_CAP + r] <= lo[i] + mg[i]) ids.push(cand[i * CAND_CAP + r]);
      out[q0 + i] = exactAmong(vectors, queries, dim, q0 + i, ids);
    }
  }
  return out;
}

/**
 * madlib's exact decode: for each query, the word whose vector is nearest in Euclidean
 * distance, computed as sum((q_i - y_i)^2) in float64 from the float32 values; ties (equal
 * float64 sums) go to the lowest id. With WebAssembly SIMD, float32 scores |y|^2 - 2 q.y keep
 * every word within a proven rounding margin of the best, and the exact rule picks among them.
 */
export function decodeNearest(vectors, queries, dim) {
  if (activeKernels() === "wasm") return decodeNearestWasm(vectors, queries, dim);
  return decodeNearestJs(vectors, queries, dim);
}

// ---------------------------------------------------------------------------------------
// Posterior decoders: the artefact's prior (manifest "prior", logprior.bin), issue 44
// (src/deniable/mechanisms/_posterior.py). Typed arrays only: the WebAssembly kernels serve
// the nearest-neighbour decode (a uniform prior) and are not used here.
// ---------------------------------------------------------------------------------------

/** `(max log prior - log prior(y)) / epsilon` per word, in float64 as _posterior._penalty computes it. */
export function priorPenalty(logPrior, epsilon) {
  checkEpsilon(epsilon);
  let max = -Infinity;
  for (let i = 0; i < logPrior.length; i++) if (logPrior[i] > max) max = logPrior[i];
  const pen = new Float64Array(logPrior.length);
  for (let i = 0; i < logPrior.length; i++) pen[i] = (max - logPrior[i]) / epsilon;
  return pen;
}

/**
 * madlib's posterior mode: argmin_y ||q - y|| + penalty(y), the distance sqrt of the float64
 * sum of squares (as decodeNearestJs), ties to the lowest id. Python scores in float32: the
 * two agree wherever the two best scores differ by more than float32 rounding.
 */
export function decodeNearestPrior(vectors, queries, dim, penalty) {
  const nq = queries.length / dim;
  const nv = vectors.length / dim;
  const best = new Float64Array(nq).fill(Infinity);
  const arg = new Int32Array(nq);
  for (let v = 0; v < nv; v++) {
    const base = v * dim;
    const pen = penalty[v];
    for (let i = 0; i < nq; i++) {
      const b = best[i];
      if (pen >= b) continue; // the distance is >= 0: no better
      const qb = i * dim;
      // stop once the partial sum proves the score above the best (with room for rounding)
      const lim = (b - pen) * (b - pen) * (1 + 1e-9);
      let s = 0;
      for (let k = 0; k < dim; k += 8) {
        const end = Math.min(k + 8, dim);
        for (let j = k; j < end; j++) {
          const t = queries[qb + j] - vectors[base + j];
          s += t * t;
        }
        if (s > lim) break;
      }
      const score = Math.sqrt(s) + pen;
      if (score < b) {
        best[i] = score;
        arg[i] = v;
      }
    }
  }
  return Array.from(arg);
}

function compareBytes(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/**
 * The distinct codes of a BRR artefact in the posterior decoder's order (CodePosteriorDecoder):
 * each code's most probable word (lowest id on ties) and its penalty in flips, the codes in
 * increasing penalty, equal penalties in bytewise code order.
 */
export function codePosterior(codeBytes, bits, logPrior, epsilon) {
  const nb = bits / 8;
  const n = codeBytes.length / nb;
  const groups = new Map(); // code -> [best word, its log prior]
  for (let id = 0; id < n; id++) {
    const key = Array.from(codeBytes.subarray(id * nb, (id + 1) * nb)).join(",");
    const g = groups.get(key);
    if (!g) groups.set(key, [id, logPrior[id]]);
    else if (logPrior[id] > g[1]) groups.set(key, [id, logPrior[id]]);
  }
  let max = -Infinity;
  for (let i = 0; i < n; i++) if (logPrior[i] > max) max = logPrior[i];
  const list = [...groups.values()].map(([word, lp]) => ({ word, pen: (max - lp) / epsilon, code: codeBytes.subarray(word * nb, (word + 1) * nb) }));
  list.sort((a, b) => a.pen - b.pen || compareBytes(a.code, b.code));
  const codes = new Uint8Array(list.length * nb);
  list.forEach((g, r) => codes.set(g.code, r * nb));
  return { codes32: asWords32(codes), pen: Float64Array.from(list, (g) => g.pen), word: Int32Array.from(list, (g) => g.word), bits };
}

/**
 * BRR's posterior mode: argmin over distinct codes of hamming(q, c) + penalty(c), the word
 * its most probable; equal scores go to the code first in the order of codePosterior. The
 * codes are scanned in increasing penalty: once a penalty reaches the best score, no later
 * code can beat it.
 */
export function decodeHammingPrior(post, queries) {
  const w32 = post.bits / 32;
  const q = asWords32(queries);
  const nq = q.length / w32;
  const ng = post.pen.length;
  const out = new Array(nq);
  for (let i = 0; i < nq; i++) {
    const qb = i * w32;
    let best = Infinity;
    let arg = 0;
    for (let g = 0; g < ng; g++) {
      const pen = post.pen[g];
      if (pen >= best) break;
      const base = g * w32;
      const c = post.codes32;
      let d;
      if (w32 === 8) {
        // 256-bit codes: the nibble-wise popcount of hammingTiesJs, abandoned after half when it cannot win
        d = popcount4(c[base] ^ q[qb], c[base + 1] ^ q[qb + 1], c[base + 2] ^ q[qb + 2], c[base + 3] ^ q[qb + 3]);
        if (d + pen >= best) continue;
        d += popcount4(c[base + 4] ^ q[qb + 4], c[base + 5] ^ q[qb + 5], c[base + 6] ^ q[qb + 6], c[base + 7] ^ q[qb + 7]);
      } else {
        d = 0;
        for (let k = 0; k < w32; k++) d += popcount32(c[base + k] ^ q[qb + k]);
      }
      const score = d + pen;
      if (score < best) {
        best = score;
        arg = g;
      }
    }
    out[i] = post.word[arg];
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Artefacts: manifest.json + whole files, verified with SHA-256
// ---------------------------------------------------------------------------------------

async function sha256Hex(bytes) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

function fetcher(source, headers) {
  if (typeof source === "function") return async (name) => new Uint8Array(await source(name));
  const base = String(source).endsWith("/") ? String(source) : `${source}/`;
  return async (name) => {
    const res = await fetch(new URL(name, base), { credentials: "same-origin", headers });
    if (!res.ok) throw new Error(`artefact: ${name}: HTTP ${res.status}`);
    return new Uint8Array(await res.arrayBuffer());
  };
}

/**
 * Load a web artefact whole: `source` is the folder's URL (ending with the artefact id) or a
 * function name -> bytes (Node: name => fs.readFile(path.join(dir, name))); `headers` go with
 * every fetch (an API key). Every file is checked against the manifest's size and SHA-256
 * before use. The URLs name only the artefact and its files: nothing about the text.
 */
export async function loadArtefact(source, { headers = {} } = {}) {
  const get = fetcher(source, headers);
  const manifestBytes = await get("manifest.json");
  const manifest = JSON.parse(new TextDecoder().decode(manifestBytes));
  if (manifest.format !== WEB_FORMAT) throw new Error(`artefact: not a ${WEB_FORMAT} manifest`);
  if (![WEB_VERSION, WEB_VERSION_PRIOR, WEB_VERSION_QUANTIZED].includes(manifest.version)) {
    throw new Error(`artefact: format version ${manifest.version}, this client reads ${WEB_VERSION} to ${WEB_VERSION_QUANTIZED}`);
  }
  // version 2: a prior; 3: 8-bit madlib vectors, a prior when the manifest names one; 1: neither
  const hasPrior = Boolean(manifest.files?.["logprior.bin"]);
  const wantsPrior = manifest.version === WEB_VERSION_QUANTIZED ? manifest.prior !== undefined : manifest.version === WEB_VERSION_PRIOR;
  if (hasPrior !== wantsPrior) {
    throw new Error(`artefact: format version ${manifest.version} with${hasPrior ? "" : "out"} logprior.bin`);
  }
  if ((manifest.version === WEB_VERSION_QUANTIZED) !== (manifest.mechanism === "madlib" && manifest.dtype === "uint8")) {
    throw new Error(`artefact: format version ${manifest.version} with ${manifest.mechanism} ${manifest.dtype ?? ""} vectors`);
  }
  const files = {};
  for (const [name, spec] of Object.entries(manifest.files)) {
    const bytes = await get(name);
    if (bytes.length !== spec.bytes) throw new Error(`artefact: ${name}: ${bytes.length} bytes, expected ${spec.bytes}`);
    const digest = await sha256Hex(bytes);
    if (digest !== spec.sha256) throw new Error(`artefact: ${name}: sha256 mismatch`);
    files[name] = bytes;
  }
  // the content address the service names it by (/v1/device, POST /v1/decode's "artefact"): the
  // first 16 hex digits of the manifest's sha256 (deniable.binarize.device.web_artefact_id)
  const id = (await sha256Hex(manifestBytes)).slice(0, 16);
  return new Artefact(manifest, files, id);
}

/** A verified artefact in memory: the vocabulary and the codes (brr) or vectors (madlib). */
export class Artefact {
  constructor(manifest, files, id = undefined) {
    this.manifest = manifest;
    /** The content address (loadArtefact computes it; the manifest cannot hold its own hash). */
    this.id = id;
    this.mechanism = manifest.mechanism;
    const text = new TextDecoder("utf-8", { fatal: true }).decode(files["words.txt"]);
    this.words = text.split("\n");
    if (this.words.length && this.words[this.words.length - 1] === "") this.words.pop();
    if (this.words.length !== manifest.vocab_size) throw new Error("artefact: words.txt does not match vocab_size");
    this.foldCase = Boolean(manifest.lowercase);
    this.index = new Map();
    this.words.forEach((w, i) => this.index.set(w, i));
    if (this.mechanism === "brr") {
      this.bits = manifest.bits;
      this.codeBytes = files["codes.bin"];
      if (this.codeBytes.length !== this.size * (this.bits / 8)) throw new Error("artefact: codes.bin size");
      this.codes32 = asWords32(this.codeBytes);
    } else if (this.mechanism === "madlib" && manifest.dtype === "uint8") {
      // 8-bit vectors: vectors[v, k] = levels[k, codes[v, k]] (a table lookup: the float32 values of
      // deniable.embedding.quantize, bit for bit). The mechanism is madlib over these vectors.
      this.dim = manifest.dim;
      this.quantized = true;
      const codes = files["qvectors.bin"];
      const raw = files["levels.bin"];
      if (!codes || codes.length !== this.size * this.dim) throw new Error("artefact: qvectors.bin size");
      if (!raw || raw.length !== this.dim * 256 * 4) throw new Error("artefact: levels.bin size");
      const levels = float32LE(raw);
      this.vectors = new Float32Array(this.size * this.dim);
      for (let v = 0, i = 0; v < this.size; v++) {
        for (let k = 0; k < this.dim; k++, i++) this.vectors[i] = levels[k * 256 + codes[i]];
      }
    } else if (this.mechanism === "madlib") {
      this.dim = manifest.dim;
      this.quantized = false;
      const raw = files["vectors.bin"];
      if (!raw || raw.length !== this.size * this.dim * 4) throw new Error("artefact: vectors.bin size");
      this.vectors = float32LE(raw);
    } else {
      throw new Error(`artefact: unknown mechanism ${this.mechanism}`);
    }
    /** The decode's prior: "uniform" (nearest neighbour) or the manifest's (zipf, zipf:S, counts:NAME). */
    this.prior = "uniform";
    this.logPrior = null;
    const lp = files["logprior.bin"];
    if (lp) {
      if (lp.length !== this.size * 8) throw new Error("artefact: logprior.bin size");
      const dv = new DataView(lp.buffer, lp.byteOffset, lp.byteLength);
      this.logPrior = new Float64Array(this.size);
      for (let i = 0; i < this.size; i++) this.logPrior[i] = dv.getFloat64(i * 8, true); // little-endian
      this.prior = String(manifest.prior);
    }
  }

  get size() {
    return this.words.length;
  }

  /** Vocabulary id of a token (lookupKey: NFC, case folded for a lower-case vocabulary), -1 when absent. */
  lookup(token) {
    const id = this.index.get(lookupKey(token, this.foldCase));
    return id === undefined ? -1 : id;
  }
}

// ---------------------------------------------------------------------------------------
// The privatizer
// ---------------------------------------------------------------------------------------

function toBase64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

/**
 * Privatize texts on the device.
 *
 * options: epsilon (required); mode "local" (decode here; nothing is sent) or "split"
 * (only noisy codes/vectors go to decodeUrl, shuffled and padded to a multiple of padTo
 * with noisy codes of random words); oov "random" (default: a uniformly random vocabulary
 * word, then privatized) or "drop"; case "sentence" (default) or "lower"; artefactId (default:
 * the loaded artefact's id) and headers for split mode; fetch (default globalThis.fetch).
 */
export class Privatizer {
  constructor(artefact, { epsilon, mode = "local", decodeUrl = "/v1/decode", artefactId, padTo = 16, oov = "random", case: caseMode = "sentence", headers = {}, fetch: fetchFn } = {}) {
    if (!(artefact instanceof Artefact)) throw new TypeError("artefact: an Artefact (loadArtefact)");
    if (mode !== "local" && mode !== "split") throw new RangeError("mode: 'local' or 'split'");
    if (oov !== "random") throw new RangeError("oov: 'random' (the only private policy on the device)");
    this.artefact = artefact;
    this.epsilon = checkEpsilon(epsilon);
    this.mode = mode;
    this.decodeUrl = decodeUrl;
    // split mode names the artefact by its content address: the loaded one's unless given
    this.artefactId = artefactId ?? artefact.id;
    if (mode === "split" && typeof this.artefactId !== "string") {
      throw new TypeError("artefactId: the artefact's id (see /v1/device) for split mode; loadArtefact sets it");
    }
    this.padTo = Math.max(1, padTo | 0);
    this.caseMode = caseMode;
    this.headers = headers;
    this.fetch = fetchFn ?? ((...a) => globalThis.fetch(...a));
  }

  /** Ids after the OOV policy: known tokens keep theirs, unknown ones get a uniformly random id. */
  inputIds(tokens) {
    const ids = tokens.map((t) => this.artefact.lookup(t));
    return { ids: ids.map((id) => (id >= 0 ? id : randomInt(this.artefact.size))), oov: ids.filter((i) => i < 0).length, known: ids };
  }

  /** The noisy payload of each id: packed codes (brr) or float32 vectors (madlib). */
  perturb(ids) {
    const a = this.artefact;
    if (a.mechanism === "brr") {
      const nb = a.bits / 8;
      const codes = new Uint8Array(ids.length * nb);
      ids.forEach((id, r) => codes.set(a.codeBytes.subarray(id * nb, (id + 1) * nb), r * nb));
      return randomizedResponse(codes, a.bits, this.epsilon);
    }
    const d = a.dim;
    const noise = laplaceNoise(ids.length, d, this.epsilon);
    const out = new Float32Array(ids.length * d);
    for (let r = 0; r < ids.length; r++) {
      for (let k = 0; k < d; k++) out[r * d + k] = noise[r * d + k] + a.vectors[ids[r] * d + k];
    }
    return out;
  }

  /** Decode noisy payloads here (the posterior mode of the artefact's prior, if it has one). */
  decodeLocal(noisy) {
    const a = this.artefact;
    if (a.logPrior) {
      if (a.mechanism === "brr") {
        this.posterior ??= codePosterior(a.codeBytes, a.bits, a.logPrior, this.epsilon);
        return decodeHammingPrior(this.posterior, noisy);
      }
      this.posterior ??= priorPenalty(a.logPrior, this.epsilon);
      return decodeNearestPrior(a.vectors, noisy, a.dim, this.posterior);
    }
    return a.mechanism === "brr" ? decodeHamming(a.codes32, noisy, a.bits) : decodeNearest(a.vectors, noisy, a.dim);
  }

  /** Decode noisy payloads on the server (POST decodeUrl): shuffled, padded; never a word. */
  async decodeRemote(noisy) {
    const a = this.artefact;
    const row = a.mechanism === "brr" ? a.bits / 8 : a.dim * 4;
    const bytes = new Uint8Array(noisy.buffer, noisy.byteOffset, noisy.byteLength);
    const n = bytes.length / row;
    const total = Math.max(this.padTo, Math.ceil(n / this.padTo) * this.padTo);
    const pad = [];
    for (let i = n; i < total; i++) pad.push(randomInt(a.size));
    const padBytes = pad.length ? this.perturb(pad) : new Uint8Array(0);
    const all = new Uint8Array(total * row);
    all.set(bytes, 0);
    all.set(new Uint8Array(padBytes.buffer, padBytes.byteOffset, padBytes.byteLength), n * row);
    const order = Array.from({ length: total }, (_, i) => i); // Fisher-Yates: positions hide which rows are real
    for (let i = total - 1; i > 0; i--) {
      const j = randomInt(i + 1);
      [order[i], order[j]] = [order[j], order[i]];
    }
    const sent = new Uint8Array(total * row);
    order.forEach((src, dst) => sent.set(all.subarray(src * row, (src + 1) * row), dst * row));
    const key = a.mechanism === "brr" ? "codes" : "vectors";
    const res = await this.fetch(this.decodeUrl, {
      method: "POST",
      headers: { "content-type": "application/json", ...this.headers },
      // epsilon: the service's posterior decode of a non-uniform prior depends on it (public: chosen here)
      body: JSON.stringify({ artefact: this.artefactId, [key]: toBase64(sent), epsilon: this.epsilon }),
    });
    if (!res.ok) throw new Error(`decode: HTTP ${res.status}`);
    const got = (await res.json()).ids;
    const out = new Array(n);
    order.forEach((src, dst) => {
      if (src < n) out[src] = got[dst];
    });
    return out;
  }

  /** Privatize one text: {text, tokens, oov, changed}. */
  async privatize(text) {
    const [r] = await this.privatizeBatch([text]);
    return r;
  }

  /** Privatize texts (all tokens perturbed and decoded in one batch). */
  async privatizeBatch(texts) {
    const parts = texts.map(split);
    const tokens = parts.flatMap((p) => p.filter((_, i) => i % 2 === 1));
    const { ids, known } = this.inputIds(tokens);
    const noisy = this.perturb(ids);
    const out = ids.length === 0 ? [] : this.mode === "local" ? this.decodeLocal(noisy) : await this.decodeRemote(noisy);
    const result = [];
    let k = 0;
    for (const p of parts) {
      const n = (p.length - 1) / 2;
      const outWords = out.slice(k, k + n).map((id) => this.artefact.words[id]);
      const changed = known.slice(k, k + n).filter((id, j) => id >= 0 && out[k + j] !== id).length;
      const oovHere = known.slice(k, k + n).filter((id) => id < 0).length;
      result.push({ text: render(p, outWords, { caseMode: this.caseMode, foldCase: this.artefact.foldCase }), tokens: n, oov: oovHere, changed });
      k += n;
    }
    return result;
  }
}
