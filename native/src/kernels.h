// The native decoder step's kernels (issue 49), one table per instruction set: AVX-512, AVX2 with
// FMA, and portable scalar code. The step picks one table at load time (``kernels()``).
//
// Every kernel computes each output from its own row's data in an order that depends only on the
// sizes of that row's reductions (a model dimension, a sentence's own past or source length),
// never on how many rows run beside it or where they sit: a sentence's step is the same bits in
// any batch, by construction. Products are accumulated with fused multiply-adds, in order.
#pragma once

#include <cstddef>

namespace nmtnative {

struct Kernels {
  const char *name;
  int panel;  // columns of a packed weight's panel (pack_nn)
  // w (K, N) packed for gemm_nn: panels of ``panel`` columns (the last zero-padded), each (K, panel)
  // contiguous, so a product streams its weights in order; out: ceil(N / panel) * panel * K floats.
  void (*pack_nn)(const float *w, int K, int N, float *out);
  // y (M, N) = x (M, K) @ w (K, N) [+ bias (N)], w packed by pack_nn; each y[m][n] one FMA chain
  // over k in order. Only the columns [n_begin, n_end) (n_begin a multiple of ``panel``, n_end one
  // or N): a step's threads each take a share of the panels (team.h), each column computed alike.
  void (*gemm_nn)(const float *x, int M, int K, const float *w, int N, const float *bias, float *y, int n_begin,
                  int n_end);
  float (*dot)(const float *a, const float *b, int n);
  void (*axpy)(float a, const float *x, float *y, int n);  // y += a * x
  float (*max)(const float *x, int n);
  float (*exp_shifted)(const float *x, int n, float shift, float *out);  // out = exp(x - shift); -> sum
  void (*add)(float *y, const float *x, int n);  // y += x
  void (*relu)(float *x, int n);
  void (*swish)(float *x, int n);
  void (*layer_norm)(const float *x, int d, const float *w, const float *b, float eps, float *out);
  // One hypothesis' self-attention, every head: its past's key and value rows (all heads each,
  // in time order) and its new entry; softmax over the past and the new entry alone. out (h * dk);
  // work: h * (count + 1) floats.
  void (*self_attention)(const float *q, const float *const *k_rows, const float *const *v_rows, int count,
                         const float *k_new, const float *v_new, int h, int dk, float *work, float *out);
  // The cross-attention of nq hypotheses of one sentence (queries q (nq, h * dk)), every head:
  // keys (h, dk, S), values (h, S, dk), the source's real positions pos[count] in order; out
  // (nq, h * dk); align (nq, S, or null) += each head's probs / h. work: (nq + 1) * S floats. Each
  // hypothesis' values are the bits it gets alone.
  // A row's log-softmax over V logits plus the mask (as the graph: LogSoftmax, then Add), into
  // log_probs (V floats, the output or scratch), and its best C, highest first, equal values by the
  // lower id (TopK's order).
  void (*log_softmax_top)(const float *logits, const float *mask, int V, int C, float *log_probs, float *values,
                          int *ids);
  void (*cross_attention)(const float *q, int nq, const float *keys, const float *values, int S, const int *pos,
                          int count, int h, int dk, float *work, float *out, float *align);
};

const Kernels &kernels();
Kernels kernels_avx512();
Kernels kernels_avx2();
Kernels kernels_scalar();

}  // namespace nmtnative
