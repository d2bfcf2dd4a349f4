// The AVX-512 int8 kernels' epilogue (int8_vnni.cpp, int8_amx.cpp; compiled with -mavx512f
// -mavx512bw): 16 columns' exact int32 sums of a row into the graph's floats, in its order (128 x
// the column's sum out, then x column scale, x row scale, + bias), so both give the same bits.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace nmtnative {

// The columns [col, col + 16) of y (rows of N), past N masked off.
struct Int8Columns16 {
  __mmask16 keep;
  __m512i zero_point;
  __m512 cs, b;
  bool has_bias;
  int col;

  Int8Columns16(int col_, int N, const int32_t *colsum128, const float *col_scale, const float *bias) : col(col_) {
    const int n = N - col;
    keep = n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
    zero_point = _mm512_maskz_loadu_epi32(keep, colsum128 + col);
    cs = _mm512_maskz_loadu_ps(keep, col_scale + col);
    has_bias = bias != nullptr;
    b = has_bias ? _mm512_maskz_loadu_ps(keep, bias + col) : _mm512_setzero_ps();
  }

  // One row's sums of the unsigned codes (zero point 128) times the weights, into y's row.
  void store(__m512i sums, float row_scale, float *y_row) const {
    const __m512i sum = _mm512_sub_epi32(sums, zero_point);
    __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), cs), _mm512_set1_ps(row_scale));
    if (has_bias) v = _mm512_add_ps(v, b);
    _mm512_mask_storeu_ps(y_row + col, keep, v);
  }
};

}  // namespace nmtnative
