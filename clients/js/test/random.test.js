import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { flipProbability, gammaInt, laplaceNoise, randomBits53, randomInt, randomizedResponse, standardNormal } from "../src/deniable.js";

const SRC = new URL("../src/", import.meta.url);

test("the source never uses Math.random (randomness only from crypto.getRandomValues)", () => {
  for (const name of readdirSync(SRC)) {
    if (!name.endsWith(".js")) continue;
    const code = readFileSync(new URL(name, SRC), "utf8");
    assert.ok(!/Math\s*\.\s*random/.test(code), `${name} uses Math.random`);
  }
  const main = readFileSync(new URL("deniable.js", SRC), "utf8");
  assert.ok(main.includes("crypto.getRandomValues"));
});

test("randomInt is uniform (chi-square, 7 cells, 70k draws)", () => {
  const counts = new Array(7).fill(0);
  for (let i = 0; i < 70000; i++) counts[randomInt(7)]++;
  const chi = counts.reduce((s, c) => s + (c - 10000) ** 2 / 10000, 0);
  assert.ok(chi < 22.46, `chi2 ${chi}`); // 6 df, p = 0.001
  assert.throws(() => randomInt(0), RangeError);
});

test("randomBits53 spans [0, 2^53)", () => {
  let max = 0;
  for (let i = 0; i < 1000; i++) max = Math.max(max, randomBits53());
  assert.ok(max < 2 ** 53 && max > 2 ** 52);
});

test("flip probability is 1 / (1 + e^eps) and bits flip at that rate", () => {
  assert.equal(flipProbability(0.5), Math.exp(-0.5) / (1 + Math.exp(-0.5)));
  assert.throws(() => flipProbability(0), RangeError);
  assert.throws(() => flipProbability(NaN), RangeError);
  const n = 4000;
  const noisy = randomizedResponse(new Uint8Array(n * 8), 64, 1.0);
  let ones = 0;
  for (const b of noisy) for (let k = 0; k < 8; k++) ones += (b >> k) & 1;
  const p = flipProbability(1.0);
  const sd = Math.sqrt(n * 64 * p * (1 - p));
  assert.ok(Math.abs(ones - n * 64 * p) < 5 * sd, `${ones} flips`);
  const wrong = flipProbability(1.2); // the twin: the rate of another epsilon is rejected
  assert.ok(Math.abs(ones - n * 64 * wrong) > 5 * sd);
});

test("normal and gamma moments", () => {
  let s = 0, s2 = 0;
  const n = 50000;
  for (let i = 0; i < n; i++) {
    const z = standardNormal();
    s += z;
    s2 += z * z;
  }
  assert.ok(Math.abs(s / n) < 0.03 && Math.abs(s2 / n - 1) < 0.04);
  let g = 0;
  for (let i = 0; i < 5000; i++) g += gammaInt(50, 0.5);
  assert.ok(Math.abs(g / 5000 - 25) < 0.5); // mean k * scale, sd 3.5 / sqrt(5000) per draw
});

test("laplace noise: radius mean d / eps", () => {
  const d = 20, eps = 2, n = 3000;
  const z = laplaceNoise(n, d, eps);
  let mean = 0;
  for (let r = 0; r < n; r++) {
    let sq = 0;
    for (let k = 0; k < d; k++) sq += z[r * d + k] ** 2;
    mean += Math.sqrt(sq) / n;
  }
  assert.ok(Math.abs(mean - d / eps) < 0.3, `mean radius ${mean}`);
});
