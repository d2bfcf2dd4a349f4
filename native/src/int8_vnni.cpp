// int8.h's product on AVX-512 VNNI (compiled with -mavx512f -mavx512bw -mavx512vnni): vpdpbusd
// multiplies the rows' unsigned codes by the signed weights, four at a time, into int32 lanes
// (no saturation); 128 x the column's sum takes the zero point back out. Exact int32 sums.
#include <immintrin.h>

#include "int8.h"
#include "int8_avx512.h"

namespace nmtnative {
namespace {

constexpr int kLanes = 16, kPanel = 4 * kLanes;

// acc + the dot products of a's unsigned and b's signed bytes, in place: GCC 12 copies each
// accumulator of _mm512_dpbusd_epi32 to a temporary register and back (two moves a vpdpbusd).
inline __m512i dpbusd(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
  return acc;
}

template <int R>
inline void block(const uint8_t *a, const float *row_scale, int quads, const int8_t *panel, const int32_t *colsum128,
                  const float *col_scale, int N, const float *bias, float *y, int m, int n0) {
  __m512i acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_si512();
  const size_t stride = static_cast<size_t>(quads) * 4;
  const int8_t *wq = panel;
  for (int q = 0; q < quads; ++q, wq += 4 * kPanel) {
    __m512i wv[4];
    for (int c = 0; c < 4; ++c) wv[c] = _mm512_loadu_si512(wq + c * 4 * kLanes);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      __builtin_memcpy(&four, a + (m + r) * stride + 4 * q, 4);
      const __m512i ab = _mm512_set1_epi32(four);
      for (int c = 0; c < 4; ++c) acc[r][c] = dpbusd(acc[r][c], ab, wv[c]);
    }
  }
  for (int c = 0; c < 4; ++c) {
    const int col = n0 + c * kLanes;
    if (N - col <= 0) break;
    const Int8Columns16 out(col, N, colsum128, col_scale, bias);
    for (int r = 0; r < R; ++r) out.store(acc[r][c], row_scale[m + r], y + static_cast<size_t>(m + r) * N);
  }
}

void gemm(const uint8_t *a, const float *row_scale, int M, int quads, const int8_t *w, const int32_t *colsum128,
          const float *col_scale, int N, const float *bias, float *y, int n_begin, int n_end) {
  for (int n0 = n_begin; n0 < n_end; n0 += kPanel) {
    const int8_t *panel = w + static_cast<size_t>(n0) * 4 * quads;
    int m = 0;
    for (; m + 4 <= M; m += 4) block<4>(a, row_scale, quads, panel, colsum128, col_scale, N, bias, y, m, n0);
    for (; m < M; ++m) block<1>(a, row_scale, quads, panel, colsum128, col_scale, N, bias, y, m, n0);
  }
}

void quantize(const float *x, int K, uint8_t *codes, float *scale) {
  __m512 top = _mm512_setzero_ps();
  int k = 0;
  for (; k + kLanes <= K; k += kLanes) top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  if (k < K) top = _mm512_max_ps(top, _mm512_abs_ps(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (K - k)) - 1u), x + k)));
  const float s = int8_row_scale(_mm512_reduce_max_ps(top));
  const __m512 sv = _mm512_set1_ps(s);
  const __m512i zero_point = _mm512_set1_epi32(128), low = _mm512_setzero_si512();
  for (k = 0; k < K; k += kLanes) {
    const int n = K - k < kLanes ? K - k : kLanes;
    const __mmask16 keep = n == kLanes ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
    // rounded to nearest, ties to even (MXCSR's default), then saturated into [0, 255]
    __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_div_ps(_mm512_maskz_loadu_ps(keep, x + k), sv)), zero_point);
    q = _mm512_max_epi32(q, low);
    _mm512_mask_cvtusepi32_storeu_epi8(codes + k, keep, q);
  }
  *scale = s;
}

}  // namespace

Int8Kernels int8_vnni() { return Int8Kernels{"avx512-vnni", kPanel, 1, 1, gemm, quantize}; }

}  // namespace nmtnative
