// deniable's device decode kernels: WebAssembly SIMD (wasm32 + simd128), no libc.
//
// Built by clients/js/tools/build_wasm.sh (Debian's clang-14 and lld-14) into
// src/kernels.wasm.js; src/deniable.js runs them when the engine has WebAssembly SIMD and
// its typed-array kernels otherwise. Both give the same results (the tests run both).
// The caller (deniable.js) lays the inputs out in this module's memory; nothing here
// allocates.
#include <stdint.h>
#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(name)))

// ---- BRR: Hamming distances on packed codes --------------------------------------------

// Every code at the minimum distance from each query, in ascending ids.
// codes: nv codes of w v128 (bits = 128 w); queries: nq codes of w v128.
// best[i] (in/out): the minimum so far; count[i] (in/out): how many ids are at it (may exceed
// cap: the caller then rescans that query); ties[i * cap ...]: the first cap of them.
// Scans [v0, v1) of the vocabulary; the caller walks the vocabulary in blocks.
static inline void keep(int v, int d, int32_t *b, int32_t *count, int32_t *ties, int cap) {
  if (d < *b) {
    *b = d;
    *count = 0;
  }
  if (d == *b) {
    if (*count < cap) ties[*count] = v;
    *count += 1;
  }
}

static inline v128_t lanes32(v128_t p) {  // u8x16 byte counts -> u32x4 partial sums
  return wasm_u32x4_extadd_pairwise_u16x8(wasm_u16x8_extadd_pairwise_u8x16(p));
}

static inline int hsum32(v128_t s) {
  return wasm_i32x4_extract_lane(s, 0) + wasm_i32x4_extract_lane(s, 1) + wasm_i32x4_extract_lane(s, 2) +
         wasm_i32x4_extract_lane(s, 3);
}

EXPORT("hamming_scan")
void hamming_scan(const v128_t *codes, int v0, int v1, int w, const v128_t *queries, int nq, int32_t *best,
                  int32_t *count, int32_t *ties, int cap) {
  for (int i = 0; i < nq; i++) {
    int32_t b = best[i], c = count[i];
    int32_t *t = ties + (int64_t)i * cap;
    const v128_t *q = queries + (int64_t)i * w;
    int v = v0;
    if (w == 2) {
      const v128_t qa = q[0], qb = q[1];
      for (; v + 4 <= v1; v += 4) {
        const v128_t *y = codes + (int64_t)v * 2;
        v128_t p0 = wasm_i8x16_add(wasm_i8x16_popcnt(wasm_v128_xor(y[0], qa)), wasm_i8x16_popcnt(wasm_v128_xor(y[1], qb)));
        v128_t p1 = wasm_i8x16_add(wasm_i8x16_popcnt(wasm_v128_xor(y[2], qa)), wasm_i8x16_popcnt(wasm_v128_xor(y[3], qb)));
        v128_t p2 = wasm_i8x16_add(wasm_i8x16_popcnt(wasm_v128_xor(y[4], qa)), wasm_i8x16_popcnt(wasm_v128_xor(y[5], qb)));
        v128_t p3 = wasm_i8x16_add(wasm_i8x16_popcnt(wasm_v128_xor(y[6], qa)), wasm_i8x16_popcnt(wasm_v128_xor(y[7], qb)));
        v128_t s0 = lanes32(p0), s1 = lanes32(p1), s2 = lanes32(p2), s3 = lanes32(p3);
        // transpose-add: d = [sum(s0), sum(s1), sum(s2), sum(s3)]
        v128_t t01 = wasm_i32x4_add(wasm_i32x4_shuffle(s0, s1, 0, 4, 1, 5), wasm_i32x4_shuffle(s0, s1, 2, 6, 3, 7));
        v128_t t23 = wasm_i32x4_add(wasm_i32x4_shuffle(s2, s3, 0, 4, 1, 5), wasm_i32x4_shuffle(s2, s3, 2, 6, 3, 7));
        v128_t d = wasm_i32x4_add(wasm_i32x4_shuffle(t01, t23, 0, 1, 4, 5), wasm_i32x4_shuffle(t01, t23, 2, 3, 6, 7));
        if (wasm_i32x4_bitmask(wasm_i32x4_le(d, wasm_i32x4_splat(b)))) {
          keep(v, wasm_i32x4_extract_lane(d, 0), &b, &c, t, cap);
          keep(v + 1, wasm_i32x4_extract_lane(d, 1), &b, &c, t, cap);
          keep(v + 2, wasm_i32x4_extract_lane(d, 2), &b, &c, t, cap);
          keep(v + 3, wasm_i32x4_extract_lane(d, 3), &b, &c, t, cap);
        }
      }
    }
    for (; v < v1; v++) {
      const v128_t *y = codes + (int64_t)v * w;
      v128_t p = wasm_i32x4_splat(0);
      for (int k = 0; k < w; k++) p = wasm_i32x4_add(p, lanes32(wasm_i8x16_popcnt(wasm_v128_xor(y[k], q[k]))));
      int d = hsum32(p);
      if (d <= b) keep(v, d, &b, &c, t, cap);
    }
    best[i] = b;
    count[i] = c;
  }
}

// ---- madlib: candidates for the nearest vector ------------------------------------------

// Append v (score a) to one query's candidate list; compact a full list against the minimum m.
// Returns the new count (cap + 1: overflowed, the caller rescans that query).
static inline int32_t add_candidate(int v, float a, float m, float mg, int32_t c, int32_t *t, float *ts, int cap) {
  if (c >= cap) {  // compact: keep what is still within margin of the minimum
    int n = 0;
    for (int r = 0; r < c; r++) {
      if (ts[r] <= m + mg) {
        t[n] = t[r];
        ts[n] = ts[r];
        n++;
      }
    }
    if (n >= cap) return cap + 1;
    c = n;
  }
  t[c] = v;
  ts[c] = a;
  return c + 1;
}

// Fold 4 lanes of scores of group g into one query's state.
static inline void fold(v128_t s, int g, float *m, float mg, int32_t *c, int32_t *t, float *ts, int cap) {
  if (*c > cap || !wasm_i32x4_bitmask(wasm_f32x4_le(s, wasm_f32x4_splat(*m + mg)))) return;
  float sv[4];
  wasm_v128_store(sv, s);
  for (int j = 0; j < 4 && *c <= cap; j++) {
    const float a = sv[j];
    if (!(a <= *m + mg)) continue;
    if (a < *m) *m = a;
    *c = add_candidate(g * 4 + j, a, *m, mg, *c, t, ts, cap);
  }
}

// yt: the vocabulary in groups of 4 vectors, dimension-interleaved (group g, dim k, lane j at
// yt[(g * dim + k) * 4 + j]); norms[v] = |y_v|^2 (float32). qs: the queries, each value
// repeated 4 times (query i, dim k at qs[(i * dim + k) * 4 ...]). For query i, the float32
// score a(v) = |y_v|^2 - 2 q.y_v of every v in groups [g0, g1) is compared with the running
// minimum lo[i] (in/out); ids with a(v) <= lo + margin[i] are appended to cand[i * cap ...]
// with their scores in score[i * cap ...] (ascending ids); a full list is compacted against
// the current minimum, and count[i] > cap says it overflowed (the caller rescans that query).
// The caller keeps margin above twice the float32 rounding error (plus the float64 one), so
// the exact nearest is among the candidates within margin of the final minimum.
// Four queries share each load of a group (register blocking).
EXPORT("nearest_scan")
void nearest_scan(const v128_t *yt, const float *norms, int g0, int g1, int dim, const v128_t *qs, int nq,
                  const float *margin, float *lo, int32_t *count, int32_t *cand, float *score, int cap) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) {
    const v128_t *q0 = qs + (int64_t)i * dim, *q1 = q0 + dim, *q2 = q1 + dim, *q3 = q2 + dim;
    for (int g = g0; g < g1; g++) {
      const v128_t *y = yt + (int64_t)g * dim;
      v128_t a0 = wasm_f32x4_splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
      for (int k = 0; k < dim; k++) {
        const v128_t yk = y[k];
        a0 = wasm_f32x4_add(a0, wasm_f32x4_mul(q0[k], yk));
        a1 = wasm_f32x4_add(a1, wasm_f32x4_mul(q1[k], yk));
        a2 = wasm_f32x4_add(a2, wasm_f32x4_mul(q2[k], yk));
        a3 = wasm_f32x4_add(a3, wasm_f32x4_mul(q3[k], yk));
      }
      const v128_t n = wasm_v128_load(norms + g * 4);
      const v128_t *acc[4] = {&a0, &a1, &a2, &a3};
      for (int r = 0; r < 4; r++) {
        const v128_t s = wasm_f32x4_sub(n, wasm_f32x4_add(*acc[r], *acc[r]));
        fold(s, g, lo + i + r, margin[i + r], count + i + r, cand + (int64_t)(i + r) * cap,
             score + (int64_t)(i + r) * cap, cap);
      }
    }
  }
  for (; i < nq; i++) {
    const v128_t *q = qs + (int64_t)i * dim;
    for (int g = g0; g < g1; g++) {
      const v128_t *y = yt + (int64_t)g * dim;
      v128_t a = wasm_f32x4_splat(0.0f);
      for (int k = 0; k < dim; k++) a = wasm_f32x4_add(a, wasm_f32x4_mul(q[k], y[k]));
      const v128_t s = wasm_f32x4_sub(wasm_v128_load(norms + g * 4), wasm_f32x4_add(a, a));
      fold(s, g, lo + i, margin[i], count + i, cand + (int64_t)i * cap, score + (int64_t)i * cap, cap);
    }
  }
}
