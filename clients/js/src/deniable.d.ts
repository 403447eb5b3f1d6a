// Types of deniable.js (the on-device client of deniable; docs/device.md).

export declare const UNICODE_VERSION: string;
export declare const WEB_FORMAT: "deniable-web-device";
export declare const WEB_VERSION: 1;
/** The version of an artefact whose decode assumes a non-uniform prior (ships logprior.bin). */
export declare const WEB_VERSION_QUANTIZED: 3;
export declare const WEB_VERSION_PRIOR: 2;

// -- tokenizer (the same rules as deniable.text) --
export declare function split(text: string): string[];
export declare function words(text: string): string[];
export declare function join(parts: string[]): string;
export declare function isWord(s: string): boolean;
/** The form of a word token looked up in a vocabulary: NFC, lower-cased first with `foldCase`. */
export declare function lookupKey(token: string, foldCase?: boolean): string;
export declare function capitalize(word: string): string;
export declare function endsSentence(separator: string): boolean;
export declare function render(
  parts: string[],
  out: string[],
  options?: { caseMode?: "sentence" | "lower"; foldCase?: boolean },
): string;

// -- randomness (crypto.getRandomValues only) --
export declare function randomBits53(): number;
export declare function randomInt(n: number): number;
export declare function standardNormal(): number;
export declare function gammaInt(k: number, scale: number): number;

// -- samplers and decoders --
export declare function flipProbability(epsilon: number): number;
export declare function randomizedResponse(codes: Uint8Array, bits: number, epsilon: number): Uint8Array;
export declare function laplaceNoise(count: number, dim: number, epsilon: number): Float64Array;
export declare function hammingTies(
  codes: Uint32Array,
  queries: Uint8Array,
  bits: number,
): { ties: number[][]; distances: number[] };
export declare function decodeHamming(codes: Uint32Array, queries: Uint8Array, bits: number): number[];
export declare function decodeNearest(vectors: Float32Array, queries: Float32Array, dim: number): number[];
/** `(max log prior - log prior(y)) / epsilon` per word (float64). */
export declare function priorPenalty(logPrior: Float64Array, epsilon: number): Float64Array;
/** madlib's posterior mode: argmin ||q - y|| + penalty(y), ties to the lowest id (typed arrays). */
export declare function decodeNearestPrior(vectors: Float32Array, queries: Float32Array, dim: number, penalty: Float64Array): number[];
export interface CodePosterior {
  codes32: Uint32Array;
  pen: Float64Array;
  word: Int32Array;
  bits: number;
}
/** BRR's distinct codes in the posterior decoder's order (increasing penalty, then bytewise). */
export declare function codePosterior(codeBytes: Uint8Array, bits: number, logPrior: Float64Array, epsilon: number): CodePosterior;
/** BRR's posterior mode: argmin hamming + penalty over distinct codes, the code's most probable word. */
export declare function decodeHammingPrior(post: CodePosterior, queries: Uint8Array): number[];
/** Which decode kernels run: "auto" (WebAssembly SIMD where available), "wasm" or "js"; returns the active ones. */
export declare function useKernels(choice?: "auto" | "wasm" | "js"): "wasm" | "js";
/** The decode kernels in use now. */
export declare function activeKernels(): "wasm" | "js";

// -- artefacts --
export interface FileSpec {
  bytes: number;
  sha256: string;
}
export interface Manifest {
  format: "deniable-web-device";
  /** 1; 2: a decode prior (logprior.bin); 3: madlib with 8-bit vectors (qvectors.bin + levels.bin). */
  version: 1 | 2 | 3;
  mechanism: "brr" | "madlib";
  vocab_size: number;
  lowercase: boolean;
  fingerprint: string;
  bits?: number;
  dim?: number;
  /** madlib: "float32-le" (vectors.bin) or "uint8" (codes and a per-dimension level table). */
  dtype?: "float32-le" | "uint8";
  files: Record<string, FileSpec>;
  [key: string]: unknown;
}
export type Source = string | URL | ((name: string) => Promise<ArrayBuffer | Uint8Array>);
export declare function loadArtefact(source: Source, options?: { headers?: Record<string, string> }): Promise<Artefact>;
export declare class Artefact {
  constructor(manifest: Manifest, files: Record<string, Uint8Array>, id?: string);
  readonly manifest: Manifest;
  /** The content address (first 16 hex digits of the manifest's sha256): split mode's default artefactId. */
  readonly id?: string;
  readonly mechanism: "brr" | "madlib";
  readonly words: string[];
  readonly foldCase: boolean;
  readonly size: number;
  readonly bits?: number;
  readonly dim?: number;
  readonly codeBytes?: Uint8Array;
  readonly codes32?: Uint32Array;
  /** madlib: the float32 vectors (of an 8-bit artefact: the levels its codes name, bit for bit). */
  readonly vectors?: Float32Array;
  /** madlib: true for 8-bit vectors (madlib over that quantized embedding). */
  readonly quantized?: boolean;
  /** The decode's prior: "uniform" (nearest neighbour) or the manifest's ("zipf", "zipf:S", "counts:NAME"). */
  readonly prior: string;
  /** log prior(y) per word (logprior.bin), null under a uniform prior. */
  readonly logPrior: Float64Array | null;
  lookup(token: string): number;
}

// -- the privatizer --
export interface PrivatizerOptions {
  epsilon: number;
  mode?: "local" | "split";
  decodeUrl?: string;
  artefactId?: string;
  padTo?: number;
  oov?: "random";
  case?: "sentence" | "lower";
  headers?: Record<string, string>;
  fetch?: typeof fetch;
}
export interface PrivatizeResult {
  text: string;
  tokens: number;
  oov: number;
  changed: number;
}
export declare class Privatizer {
  constructor(artefact: Artefact, options: PrivatizerOptions);
  readonly epsilon: number;
  readonly mode: "local" | "split";
  privatize(text: string): Promise<PrivatizeResult>;
  privatizeBatch(texts: string[]): Promise<PrivatizeResult[]>;
  perturb(ids: number[]): Uint8Array | Float32Array;
  decodeLocal(noisy: Uint8Array | Float32Array): number[];
  decodeRemote(noisy: Uint8Array | Float32Array): Promise<number[]>;
}
