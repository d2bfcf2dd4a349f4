// The decoder step's int8 products (issue 49): the int8 CPU graph's arithmetic
// (nmtserve/export/quantize.py), one kernel per instruction set, chosen at run time.
//
// A product y = x @ W (+ bias) where W (K, N) is int8 per column (symmetric, codes in [-127, 127],
// one scale per column) and x is quantized per row as the graph does it: scale = max(max|x|, 1e-30)
// / 127, codes = round-half-even(x / scale) + 128 as uint8. The row's codes times the column's are
// summed in int32, exactly (so any order, any tiling and any batch give the same sum), then
// y = float(sum) * column scale * row scale (+ bias), each product rounded as the graph's nodes
// round them (MatMulIntegerToFloat or QGemm, then Mul, then Add).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace nmtnative {

struct Int8Kernels {
  const char *name;
  int panel;       // columns of a packed panel (pack_int8)
  int quad_align;  // the rows' codes and the panels' quads padded to a multiple of this many quads (4 k each)
  int row_align;   // the rows' codes padded to a multiple of this many rows (code 128; not stored)
  // y (M, N) from the rows' uint8 codes a (M, 4 * quads: zero point 128, padded with 128), their
  // scales, W packed by pack_int8 (with colsum128: 128 x each column's code sum, for kernels that
  // multiply the unsigned codes), the columns' scales and an optional bias. Only the columns
  // [n_begin, n_end) (n_begin a multiple of ``panel``, n_end one or N): a step's threads' shares.
  void (*gemm)(const uint8_t *a, const float *row_scale, int M, int quads, const int8_t *w, const int32_t *colsum128,
               const float *col_scale, int N, const float *bias, float *y, int n_begin, int n_end);
  // One row x (K) as the graph quantizes it: *scale = max(max|x|, 1e-30) / 127, codes (K) =
  // round-half-even(x / scale) + 128, saturated to [0, 255] (IEEE division, the default rounding:
  // the same codes from every kernel).
  void (*quantize)(const float *x, int K, uint8_t *codes, float *scale);
};

inline float int8_row_scale(float top) { return (top > 1e-30f ? top : 1e-30f) / 127.f; }

// One value's code: round-half-even(x / scale) + 128, saturated (the vector kernels' rule, lane by lane).
inline uint8_t int8_code(float x, float scale) {
  const float q = std::nearbyint(x / scale) + 128.f;
  return static_cast<uint8_t>(std::min(255.f, std::max(0.f, q)));
}

// The quads (groups of 4 k) a row of K codes takes for kernels padding them to quad_align.
inline int int8_quads(int K, int quad_align) { return ((K + 3) / 4 + quad_align - 1) / quad_align * quad_align; }

// W's codes, element (k, n) at w[k * k_stride + n * n_stride], into panels of ``panel`` columns:
// for each panel, for each group of 4 k, the panel's columns' 4 codes in a row (zero past K and
// N); out: ceil(N / panel) * panel * 4 * int8_quads(K, quad_align) bytes; colsum128 (N): 128 x
// the column's sum.
inline void pack_int8(const int8_t *w, int K, int N, std::ptrdiff_t k_stride, std::ptrdiff_t n_stride, int panel,
                      int quad_align, int8_t *out, int32_t *colsum128) {
  const int quads = int8_quads(K, quad_align);
  for (int n0 = 0; n0 < N; n0 += panel)
    for (int q = 0; q < quads; ++q)
      for (int j = 0; j < panel; ++j)
        for (int i = 0; i < 4; ++i) {
          const int k = 4 * q + i, n = n0 + j;
          *out++ = (k < K && n < N) ? w[k * k_stride + n * n_stride] : 0;
        }
  for (int n = 0; n < N; ++n) {
    int32_t s = 0;
    for (int k = 0; k < K; ++k) s += w[k * k_stride + n * n_stride];
    colsum128[n] = 128 * s;
  }
}

const Int8Kernels &int8_kernels();
Int8Kernels int8_vnni();
Int8Kernels int8_avx2();
Int8Kernels int8_scalar();
Int8Kernels int8_amx(const Int8Kernels &vnni);
bool amx_permitted();  // asks Linux for the tile data state (once per process is enough)

}  // namespace nmtnative
