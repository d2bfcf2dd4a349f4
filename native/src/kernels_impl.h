// The kernels of kernels.h written once over an instruction set's vector type ``V`` (included by
// kernels_avx512.cpp, kernels_avx2.cpp and kernels_scalar.cpp, each compiled for its own set).
//
// V gives: T, W (lanes), zero(), set1(f), load(p), load_n(p, n, fill) (lanes >= n = fill),
// store(p, v), store_n(p, v, n), fma(a, b, c) = a * b + c rounded once, add, sub, mul, div, max,
// hsum(v) and hmax(v) (a fixed tree), hsums(v, out) (W hsums at once, each by hsum's tree),
// keep_n(v, n) (lanes >= n = 0), exp(v), above(v, f) (bit i: lane i > f).
#pragma once

#include <cmath>

#include "kernels.h"

namespace nmtnative {

template <class V>
struct Impl {
  using T = typename V::T;
  static constexpr int W = V::W;

  static constexpr int NB = 4 * W;  // a panel: 4 vectors of columns

  static void pack_nn(const float *w, int K, int N, float *out) {
    for (int n0 = 0; n0 < N; n0 += NB)
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < NB; ++j) *out++ = n0 + j < N ? w[static_cast<size_t>(k) * N + n0 + j] : 0.f;
  }

  // The register block of gemm_nn: RB rows x CV of a panel's 4 vectors, RB x CV accumulators, CV
  // weight vectors and a broadcast live at once. AVX-512 has 32 vector registers: 6 x 4 (29 live;
  // 4 x 4 read each weight vector for 4 rows only: its products 1.15-1.2x slower at 12-96 rows,
  // the demo's and the student's shapes, Intel Xeon AVX-512, session 32); AVX2 has 16: 6 x 2 (15
  // live; 4 x 4 spilled to the stack, 1.3-1.6x slower products). The bits do not depend on the
  // block: every output is one FMA chain over k in order.
  static constexpr int CV = W == 8 ? 2 : 4;
  static constexpr int RB = W >= 8 ? 6 : 4;

  // R rows against vectors [c0, c0 + CV) of one panel: each output one FMA chain over k (bias added
  // after); the panel's columns past N (zero-padded) are computed and not stored.
  template <int R>
  static inline void nn_block(const float *x, int K, const float *panel, int N, const float *bias, float *y, int m, int n0,
                              int c0) {
    T acc[R][CV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < CV; ++c) acc[r][c] = V::zero();
    const float *wk = panel + c0 * W;
    for (int k = 0; k < K; ++k, wk += NB) {
      T wv[CV];
      for (int c = 0; c < CV; ++c) wv[c] = V::load(wk + c * W);
      for (int r = 0; r < R; ++r) {
        const T xb = V::set1(x[(size_t)(m + r) * K + k]);
        for (int c = 0; c < CV; ++c) acc[r][c] = V::fma(xb, wv[c], acc[r][c]);
      }
    }
    for (int c = 0; c < CV; ++c) {
      const int col = n0 + (c0 + c) * W, n = N - col;
      if (n <= 0) break;
      for (int r = 0; r < R; ++r) {
        T v = acc[r][c];
        float *out = y + (size_t)(m + r) * N + col;
        if (n >= W) {
          if (bias) v = V::add(v, V::load(bias + col));
          V::store(out, v);
        } else {
          if (bias) v = V::add(v, V::load_n(bias + col, n, 0.f));
          V::store_n(out, v, n);
        }
      }
    }
  }

  template <int R = RB>
  static inline void nn_rows(const float *x, int rows, int K, const float *panel, int N, const float *bias, float *y,
                             int m, int n0, int c0) {  // rows < R: one block of them all
    if constexpr (R > 1) {
      if (rows == R - 1) {
        nn_block<R - 1>(x, K, panel, N, bias, y, m, n0, c0);
      } else {
        nn_rows<R - 1>(x, rows, K, panel, N, bias, y, m, n0, c0);
      }
    }
  }

  static void gemm_nn(const float *x, int M, int K, const float *w, int N, const float *bias, float *y, int n_begin,
                      int n_end) {
    for (int n0 = n_begin; n0 < n_end; n0 += NB) {  // a panel stays in cache while every row passes
      const float *panel = w + static_cast<size_t>(n0) * K;
      for (int c0 = 0; c0 < 4 && n0 + c0 * W < N; c0 += CV) {
        int m = 0;
        for (; m + RB <= M; m += RB) nn_block<RB>(x, K, panel, N, bias, y, m, n0, c0);
        if (m < M) nn_rows(x, M - m, K, panel, N, bias, y, m, n0, c0);
      }
    }
  }

  static float dot(const float *a, const float *b, int n) {
    T acc = V::zero();
    int i = 0;
    for (; i + W <= n; i += W) acc = V::fma(V::load(a + i), V::load(b + i), acc);
    if (i < n) acc = V::fma(V::load_n(a + i, n - i, 0.f), V::load_n(b + i, n - i, 0.f), acc);
    return V::hsum(acc);
  }

  // out[j] = dot(a, b[j] + off, n) for j < 4, each the same FMA chain and sum as dot's: four
  // independent chains at once (one dot's chain is a latency-bound line of FMAs), ``a`` loaded once.
  static void dot4(const float *a, const float *const *b, int off, int n, float *out) {
    T acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    int i = 0;
    for (; i + W <= n; i += W) {
      const T av = V::load(a + i);
      for (int j = 0; j < 4; ++j) acc[j] = V::fma(av, V::load(b[j] + off + i), acc[j]);
    }
    if (i < n) {
      const T av = V::load_n(a + i, n - i, 0.f);
      for (int j = 0; j < 4; ++j) acc[j] = V::fma(av, V::load_n(b[j] + off + i, n - i, 0.f), acc[j]);
    }
    for (int j = 0; j < 4; ++j) out[j] = V::hsum(acc[j]);
  }

  // out[j] = dot(a, b[j] + off, n) for j < W, each the same FMA chain and sum as dot's: W chains
  // at once, their W sums by V::hsums (one hsum a dot was most of a short dot's time).
  static void dots(const float *a, const float *const *b, int off, int n, float *out) {
    T acc[W];
    for (int j = 0; j < W; ++j) acc[j] = V::zero();
    int i = 0;
    for (; i + W <= n; i += W) {
      const T av = V::load(a + i);
      for (int j = 0; j < W; ++j) acc[j] = V::fma(av, V::load(b[j] + off + i), acc[j]);
    }
    if (i < n) {
      const T av = V::load_n(a + i, n - i, 0.f);
      for (int j = 0; j < W; ++j) acc[j] = V::fma(av, V::load_n(b[j] + off + i, n - i, 0.f), acc[j]);
    }
    V::hsums(acc, out);
  }

  static void axpy(float a, const float *x, float *y, int n) {
    const T av = V::set1(a);
    int i = 0;
    for (; i + W <= n; i += W) V::store(y + i, V::fma(av, V::load(x + i), V::load(y + i)));
    if (i < n) V::store_n(y + i, V::fma(av, V::load_n(x + i, n - i, 0.f), V::load_n(y + i, n - i, 0.f)), n - i);
  }

  static float max(const float *x, int n) {
    T acc = V::set1(-INFINITY);
    int i = 0;
    for (; i + W <= n; i += W) acc = V::max(acc, V::load(x + i));
    if (i < n) acc = V::max(acc, V::load_n(x + i, n - i, -INFINITY));
    return V::hmax(acc);
  }

  static float exp_shifted(const float *x, int n, float shift, float *out) {
    const T s = V::set1(shift);
    T acc = V::zero();
    int i = 0;
    for (; i + W <= n; i += W) {
      const T e = V::exp(V::sub(V::load(x + i), s));
      V::store(out + i, e);
      acc = V::add(acc, e);
    }
    if (i < n) {
      const T e = V::keep_n(V::exp(V::sub(V::load_n(x + i, n - i, 0.f), s)), n - i);
      V::store_n(out + i, e, n - i);
      acc = V::add(acc, e);
    }
    return V::hsum(acc);
  }

  static void add(float *y, const float *x, int n) {
    int i = 0;
    for (; i + W <= n; i += W) V::store(y + i, V::add(V::load(y + i), V::load(x + i)));
    if (i < n) V::store_n(y + i, V::add(V::load_n(y + i, n - i, 0.f), V::load_n(x + i, n - i, 0.f)), n - i);
  }

  static void relu(float *x, int n) {
    int i = 0;
    for (; i + W <= n; i += W) V::store(x + i, V::max(V::load(x + i), V::zero()));
    if (i < n) V::store_n(x + i, V::max(V::load_n(x + i, n - i, 0.f), V::zero()), n - i);
  }

  static inline T swish_v(T v) {  // x * sigmoid(x) = x / (1 + exp(-x))
    return V::div(v, V::add(V::set1(1.f), V::exp(V::sub(V::zero(), v))));
  }

  static void swish(float *x, int n) {
    int i = 0;
    for (; i + W <= n; i += W) V::store(x + i, swish_v(V::load(x + i)));
    if (i < n) V::store_n(x + i, swish_v(V::load_n(x + i, n - i, 0.f)), n - i);
  }

  static void layer_norm(const float *x, int d, const float *w, const float *b, float eps, float *out) {
    T acc = V::zero();
    int i = 0;
    for (; i + W <= d; i += W) acc = V::add(acc, V::load(x + i));
    if (i < d) acc = V::add(acc, V::load_n(x + i, d - i, 0.f));
    const float mean = V::hsum(acc) / static_cast<float>(d);
    const T mv = V::set1(mean);
    acc = V::zero();
    for (i = 0; i + W <= d; i += W) {
      const T c = V::sub(V::load(x + i), mv);
      acc = V::fma(c, c, acc);
    }
    if (i < d) {
      const T c = V::keep_n(V::sub(V::load_n(x + i, d - i, 0.f), mv), d - i);
      acc = V::fma(c, c, acc);
    }
    const float var = V::hsum(acc) / static_cast<float>(d);
    const T inv = V::set1(1.f / std::sqrt(var + eps));
    for (i = 0; i + W <= d; i += W) {
      const T c = V::mul(V::sub(V::load(x + i), mv), inv);
      V::store(out + i, V::fma(c, V::load(w + i), V::load(b + i)));
    }
    if (i < d) {
      const int n = d - i;
      const T c = V::mul(V::sub(V::load_n(x + i, n, 0.f), mv), inv);
      V::store_n(out + i, V::fma(c, V::load_n(w + i, n, 0.f), V::load_n(b + i, n, 0.f)), n);
    }
  }

  // Heads [j0, j0 + G) of one hypothesis' mix: out + j dk = sum over c < count of p[j n + c] x
  // rows[c] + j dk, then + p[j n + count] x last + j dk, each head's outputs one FMA chain per
  // element in c order as axpy's into a zeroed out (the same bits); the heads' chains side by side
  // (one head's is a latency-bound line of count + 1 FMAs). G and NV are template arguments so that
  // the G x NV accumulators stay in registers.
  template <int NV, int G>
  static inline void mix_heads(const float *p, int n, const float *const *rows, int count, const float *last, int j0,
                               int dk, int tail, float *out) {
    T acc[G][NV];
    for (int j = 0; j < G; ++j)
      for (int v = 0; v < NV; ++v) acc[j][v] = V::zero();
    for (int c = 0; c <= count; ++c) {
      const float *row = c < count ? rows[c] : last;
      for (int j = 0; j < G; ++j) {
        const T av = V::set1(p[(j0 + j) * n + c]);
        const float *x = row + (j0 + j) * dk;
        for (int v = 0; v < NV - 1; ++v) acc[j][v] = V::fma(av, V::load(x + v * W), acc[j][v]);
        acc[j][NV - 1] = V::fma(av, tail ? V::load_n(x + (NV - 1) * W, tail, 0.f) : V::load(x + (NV - 1) * W),
                                acc[j][NV - 1]);
      }
    }
    for (int j = 0; j < G; ++j) {
      float *o = out + (j0 + j) * dk;
      for (int v = 0; v < NV - 1; ++v) V::store(o + v * W, acc[j][v]);
      if (tail) {
        V::store_n(o + (NV - 1) * W, acc[j][NV - 1], tail);
      } else {
        V::store(o + (NV - 1) * W, acc[j][NV - 1]);
      }
    }
  }

  // Every head's mix, in groups of up to 4 heads (2 where a head's outputs are 5 to 8 vectors).
  template <int NV>
  static void mix_all_heads(const float *p, int n, const float *const *rows, int count, const float *last, int h,
                            int dk, int tail, float *out) {
    constexpr int kGroup = NV <= 4 ? 4 : 2;
    int j0 = 0;
    for (; j0 + kGroup <= h; j0 += kGroup) mix_heads<NV, kGroup>(p, n, rows, count, last, j0, dk, tail, out);
    switch (h - j0) {
      case 3: mix_heads<NV, 3>(p, n, rows, count, last, j0, dk, tail, out); break;
      case 2: mix_heads<NV, 2>(p, n, rows, count, last, j0, dk, tail, out); break;
      case 1: mix_heads<NV, 1>(p, n, rows, count, last, j0, dk, tail, out); break;
      default: break;
    }
  }

  // work: h * (count + 1) floats (each head's weights, then its outputs mixed with the other heads').
  static void self_attention(const float *q, const float *const *k_rows, const float *const *v_rows, int count,
                             const float *k_new, const float *v_new, int h, int dk, float *work, float *out) {
    const int n = count + 1;
    for (int j = 0; j < h; ++j) {
      const int head = j * dk;
      float *wj = work + static_cast<size_t>(j) * n;
      int c = 0;
      if constexpr (W > 4)
        for (; c + W <= count; c += W) dots(q + head, k_rows + c, head, dk, wj + c);
      for (; c + 4 <= count; c += 4) dot4(q + head, k_rows + c, head, dk, wj + c);
      for (; c < count; ++c) wj[c] = dot(q + head, k_rows[c] + head, dk);
      wj[count] = dot(q + head, k_new + head, dk);
      divide(wj, n, exp_shifted(wj, n, max(wj, n), wj));  // the weights
    }
    const int tail = dk % W;
    switch ((dk + W - 1) / W) {
      case 1: mix_all_heads<1>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 2: mix_all_heads<2>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 3: mix_all_heads<3>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 4: mix_all_heads<4>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 5: mix_all_heads<5>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 6: mix_all_heads<6>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 7: mix_all_heads<7>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      case 8: mix_all_heads<8>(work, n, v_rows, count, v_new, h, dk, tail, out); break;
      default:
        for (int j = 0; j < h; ++j) {
          const float *wj = work + static_cast<size_t>(j) * n;
          float *o = out + j * dk;
          for (int e = 0; e < dk; ++e) o[e] = 0.f;
          for (int c = 0; c < count; ++c) axpy(wj[c], v_rows[c] + j * dk, o, dk);
          axpy(wj[count], v_new + j * dk, o, dk);
        }
    }
  }

  // x[i] /= total for i < n: each the one correctly rounded quotient a scalar division gives.
  static void divide(float *x, int n, float total) {
    const T tv = V::set1(total);
    int i = 0;
    for (; i + W <= n; i += W) V::store(x + i, V::div(V::load(x + i), tv));
    if (i < n) V::store_n(x + i, V::div(V::load_n(x + i, n - i, 1.f), tv), n - i);
  }

  // o (nv vectors, the last ``tail`` lanes wide when tail > 0) = sum over c < count of p[c] x
  // rows + pos[c] * stride, c in order, held in registers: the same FMA chain per element as
  // axpy's into a zeroed o (axpy stores and reloads o for every c). ``al``: += p[c].
  template <int NV>
  static inline void mix(const float *p, const float *rows, const int *pos, int count, int stride, int tail, float *al,
                         float *o) {
    T acc[NV];
    for (int v = 0; v < NV; ++v) acc[v] = V::zero();
    for (int c = 0; c < count; ++c) {
      const T av = V::set1(p[c]);
      const float *x = rows + static_cast<size_t>(pos[c]) * stride;
      for (int v = 0; v < NV - 1; ++v) acc[v] = V::fma(av, V::load(x + v * W), acc[v]);
      acc[NV - 1] = V::fma(av, tail ? V::load_n(x + (NV - 1) * W, tail, 0.f) : V::load(x + (NV - 1) * W), acc[NV - 1]);
      if (al) al[pos[c]] += p[c];
    }
    for (int v = 0; v < NV - 1; ++v) V::store(o + v * W, acc[v]);
    if (tail) {
      V::store_n(o + (NV - 1) * W, acc[NV - 1], tail);
    } else {
      V::store(o + (NV - 1) * W, acc[NV - 1]);
    }
  }

  // NB queries (rows d apart) against positions [s0, s0 + n) (n <= W) of one head's keys (dk, S):
  // each score one FMA chain over d_k in order from 0, into out (rows S apart) + s0. NB is a
  // template argument so that the NB accumulators stay in registers (a runtime count kept them on
  // the stack: a store and a load in every FMA's chain).
  template <int NB>
  static inline void scores(const float *qb, int d, const float *kj, int S, int s0, int n, int dk, float *out) {
    T acc[NB];
    for (int b = 0; b < NB; ++b) acc[b] = V::zero();
    for (int c = 0; c < dk; ++c) {
      const float *k = kj + static_cast<size_t>(c) * S + s0;
      const T kv = n == W ? V::load(k) : V::load_n(k, n, 0.f);
      for (int b = 0; b < NB; ++b) acc[b] = V::fma(V::set1(qb[static_cast<size_t>(b) * d + c]), kv, acc[b]);
    }
    for (int b = 0; b < NB; ++b) {
      float *full = out + static_cast<size_t>(b) * S + s0;
      if (n == W) {
        V::store(full, acc[b]);
      } else {
        V::store_n(full, acc[b], n);
      }
    }
  }

  // nq queries of one sentence (its beams: rows of h * dk), every head, against its source. The
  // scores are register-blocked (up to 4 queries and 16 positions at once, each key vector loaded
  // once for them), each score still one FMA chain over d_k in order from 0: the bits of one query
  // alone (the attention of a row does not depend on the rows beside it). Only the positions up to
  // the last attended one are scored (the memory is as wide as the group's longest source: a
  // short sentence's tail was scored and never read), and each output is mixed in registers (mix):
  // the same bits as before both (bench/RESULTS.md "Session 33").
  static void cross_attention(const float *q, int nq, const float *keys, const float *values, int S, const int *pos,
                              int count, int h, int dk, float *work, float *out, float *align) {
    const int d = h * dk;
    float *gathered = work + static_cast<size_t>(nq) * S;
    int used = 0;  // positions [0, used) hold every attended one
    for (int c = 0; c < count; ++c) used = pos[c] + 1 > used ? pos[c] + 1 : used;
    const int nv = (dk + W - 1) / W, tail = dk % W;
    for (int j = 0; j < h; ++j) {
      const int head = j * dk;
      const float *kj = keys + static_cast<size_t>(j) * dk * S, *vj = values + static_cast<size_t>(j) * S * dk;
      for (int s0 = 0; s0 < used; s0 += W) {
        const int n = used - s0 < W ? used - s0 : W;
        int b0 = 0;
        for (; b0 + 4 <= nq; b0 += 4) scores<4>(q + static_cast<size_t>(b0) * d + head, d, kj, S, s0, n, dk, work + static_cast<size_t>(b0) * S);
        switch (nq - b0) {
          case 3: scores<3>(q + static_cast<size_t>(b0) * d + head, d, kj, S, s0, n, dk, work + static_cast<size_t>(b0) * S); break;
          case 2: scores<2>(q + static_cast<size_t>(b0) * d + head, d, kj, S, s0, n, dk, work + static_cast<size_t>(b0) * S); break;
          case 1: scores<1>(q + static_cast<size_t>(b0) * d + head, d, kj, S, s0, n, dk, work + static_cast<size_t>(b0) * S); break;
          default: break;
        }
      }
      for (int b = 0; b < nq; ++b) {
        const float *full = work + static_cast<size_t>(b) * S;
        for (int c = 0; c < count; ++c) gathered[c] = full[pos[c]];
        float *o = out + static_cast<size_t>(b) * d + head;
        if (count == 0) {
          for (int e = 0; e < dk; ++e) o[e] = 0.f;
          continue;
        }
        const float top = max(gathered, count);
        divide(gathered, count, exp_shifted(gathered, count, top, gathered));  // the weights
        float *al = align ? align + static_cast<size_t>(b) * S : nullptr;
        switch (nv) {
          case 1: mix<1>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 2: mix<2>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 3: mix<3>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 4: mix<4>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 5: mix<5>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 6: mix<6>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 7: mix<7>(gathered, vj, pos, count, dk, tail, al, o); break;
          case 8: mix<8>(gathered, vj, pos, count, dk, tail, al, o); break;
          default:
            for (int e = 0; e < dk; ++e) o[e] = 0.f;
            for (int c = 0; c < count; ++c) {
              axpy(gathered[c], vj + static_cast<size_t>(pos[c]) * dk, o, dk);
              if (al) al[pos[c]] += gathered[c];
            }
        }
      }
    }
    if (align)
      for (int s = 0; s < nq * S; ++s) align[s] /= static_cast<float>(h);
  }

  static inline void insert(float value, int id, int C, int &filled, float *values, int *ids) {
    if (filled == C && !(value > values[C - 1])) return;
    int at = filled < C ? filled : C - 1;
    while (at > 0 && values[at - 1] < value) {
      values[at] = values[at - 1];
      ids[at] = ids[at - 1];
      --at;
    }
    values[at] = value;
    ids[at] = id;
    if (filled < C) ++filled;
  }

  static void log_softmax_top(const float *logits, const float *mask, int n_vocab, int C, float *lp, float *values, int *ids) {
    const float top = max(logits, n_vocab);
    const float lse = std::log(exp_shifted(logits, n_vocab, top, lp));
    const T tv = V::set1(top), lv = V::set1(lse);
    int v = 0;
    for (; v + W <= n_vocab; v += W)
      V::store(lp + v, V::add(V::sub(V::sub(V::load(logits + v), tv), lv), V::load(mask + v)));
    for (; v < n_vocab; ++v) lp[v] = ((logits[v] - top) - lse) + mask[v];
    // Scan in id order; once C are held, only a vector's values above the C-th are offered (in
    // lane order): insert would turn the others away.
    int filled = 0;
    v = 0;
    for (; v < n_vocab && filled < C; ++v) insert(lp[v], v, C, filled, values, ids);
    for (; v + W <= n_vocab; v += W) {
      for (unsigned lanes = V::above(V::load(lp + v), values[C - 1]); lanes != 0; lanes &= lanes - 1) {
        const int j = __builtin_ctz(lanes);
        insert(lp[v + j], v + j, C, filled, values, ids);
      }
    }
    for (; v < n_vocab; ++v) insert(lp[v], v, C, filled, values, ids);
  }

  static Kernels table(const char *name) {
    return Kernels{name, NB, pack_nn, gemm_nn, dot, axpy, max, exp_shifted, add, relu, swish, layer_norm,
                   self_attention, log_softmax_top, cross_attention};
  }
};

}  // namespace nmtnative
