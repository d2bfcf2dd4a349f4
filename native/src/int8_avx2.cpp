// int8.h's product on AVX2 (compiled with -mavx2 -mfma): the rows' codes made signed (code - 128,
// in [-127, 127]); vpmaddubsw multiplies their magnitudes by the weights carrying the codes' signs
// (each pair's sum at most 2 x 127 x 127: no int16 saturation), vpmaddwd sums the pairs into int32
// lanes. Exact int32 sums, as int8_vnni.cpp's.
//
// The signed codes and their magnitudes are made once a call (M x K bytes each, thread-local), not
// once per panel and row block: the inner loop is then two broadcasts from memory and, per weight
// vector, vpsignb, vpmaddubsw, vpmaddwd, vpaddd (8 vector operations per row and 4 k instead of 10).
// On an AVX2-only AMD EPYC (Zen 3) the products ran 1.07-1.17x faster, the same bits. Where no row
// has a negative code (a ReLU's output: the feed-forward's second product), the magnitudes are the
// codes and vpsignb has nothing to do: it is left out (6 operations instead of 8), the same sums.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "int8.h"

namespace nmtnative {
namespace {

constexpr int kLanes = 8, kPanel = 4 * kLanes;

inline __m256i first(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

// The register block: kRows rows x kVectors of a panel's 4 vectors. AVX2 has 16 vector registers;
// 2 x 4 (8 accumulators, 4 weight vectors and the row's temporaries) spilled; 3 x 2 does not and was
// the fastest of 1 x 4, 2 x 4, 4 x 2 and 3 x 2 (student int8 bulk steps 1.35-1.74x 2 x 4's, AVX2-only
// EPYC). The sums are exact int32 whatever the block.
constexpr int kRows = 3, kVectors = 2;

template <int R, bool kSigned>
inline void block(const uint8_t *magnitudes, const int8_t *signs, const float *row_scale, int quads, const int8_t *panel,
                  const float *col_scale, int N, const float *bias, float *y, int m, int n0, int c0) {
  __m256i acc[R][kVectors];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kVectors; ++c) acc[r][c] = _mm256_setzero_si256();
  const size_t stride = static_cast<size_t>(quads) * 4;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t *wq = panel + c0 * 4 * kLanes;
  for (int q = 0; q < quads; ++q, wq += 4 * kPanel) {
    __m256i wv[kVectors];
    for (int c = 0; c < kVectors; ++c) wv[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wq + c * 4 * kLanes));
    for (int r = 0; r < R; ++r) {
      int32_t four_magnitudes;
      __builtin_memcpy(&four_magnitudes, magnitudes + (m + r) * stride + 4 * q, 4);
      const __m256i magnitude = _mm256_set1_epi32(four_magnitudes);
      if constexpr (kSigned) {
        int32_t four_signs;
        __builtin_memcpy(&four_signs, signs + (m + r) * stride + 4 * q, 4);
        const __m256i signed_codes = _mm256_set1_epi32(four_signs);
        for (int c = 0; c < kVectors; ++c) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(wv[c], signed_codes));
          acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(pairs, ones));
        }
      } else {
        for (int c = 0; c < kVectors; ++c) {
          acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, wv[c]), ones));
        }
      }
    }
  }
  for (int c = 0; c < kVectors; ++c) {
    const int col = n0 + (c0 + c) * kLanes, n = N - col;
    if (n <= 0) break;
    const __m256i keep = first(n);
    const __m256 cs = _mm256_maskload_ps(col_scale + col, keep);
    const __m256 b = bias ? _mm256_maskload_ps(bias + col, keep) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][c]), cs), _mm256_set1_ps(row_scale[m + r]));
      if (bias) v = _mm256_add_ps(v, b);
      _mm256_maskstore_ps(y + static_cast<size_t>(m + r) * N + col, keep, v);
    }
  }
}

template <bool kSigned, int R = kRows>
inline void rows(const uint8_t *magnitudes, const int8_t *signs, const float *row_scale, int count, int quads,
                 const int8_t *panel, const float *col_scale, int N, const float *bias, float *y, int m, int n0,
                 int c0) {  // count < R rows: one block of them all
  if constexpr (R > 1) {
    if (count == R - 1) {
      block<R - 1, kSigned>(magnitudes, signs, row_scale, quads, panel, col_scale, N, bias, y, m, n0, c0);
    } else {
      rows<kSigned, R - 1>(magnitudes, signs, row_scale, count, quads, panel, col_scale, N, bias, y, m, n0, c0);
    }
  }
}

void gemm(const uint8_t *a, const float *row_scale, int M, int quads, const int8_t *w, const int32_t *,
          const float *col_scale, int N, const float *bias, float *y, int n_begin, int n_end) {
  // The rows' signed codes (code - 128) and their magnitudes, once (each thread its own).
  thread_local std::vector<uint8_t> magnitude_store;
  thread_local std::vector<int8_t> sign_store;
  const size_t count = static_cast<size_t>(M) * quads * 4;
  if (magnitude_store.size() < count) magnitude_store.resize(count), sign_store.resize(count);
  uint8_t *magnitudes = magnitude_store.data();
  int8_t *signs = sign_store.data();
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i seen = _mm256_setzero_si256();  // the sign bits of every signed code, or-ed
  bool negative = false;
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256i signed_codes = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(a + i)), flip);
    seen = _mm256_or_si256(seen, signed_codes);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(signs + i), signed_codes);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(magnitudes + i), _mm256_abs_epi8(signed_codes));
  }
  for (; i < count; ++i) {
    signs[i] = static_cast<int8_t>(a[i] ^ 0x80);
    magnitudes[i] = static_cast<uint8_t>(std::abs(static_cast<int>(signs[i])));
    negative = negative || signs[i] < 0;
  }
  negative = negative || _mm256_movemask_epi8(seen) != 0;
  auto products = [&](auto is_signed) {
    constexpr bool kSigned = decltype(is_signed)::value;
    for (int n0 = n_begin; n0 < n_end; n0 += kPanel) {
      const int8_t *panel = w + static_cast<size_t>(n0) * 4 * quads;
      for (int c0 = 0; c0 < 4 && n0 + c0 * kLanes < N; c0 += kVectors) {
        int m = 0;
        for (; m + kRows <= M; m += kRows) {
          block<kRows, kSigned>(magnitudes, signs, row_scale, quads, panel, col_scale, N, bias, y, m, n0, c0);
        }
        if (m < M) rows<kSigned>(magnitudes, signs, row_scale, M - m, quads, panel, col_scale, N, bias, y, m, n0, c0);
      }
    }
  };
  if (negative) {
    products(std::true_type{});
  } else {
    products(std::false_type{});
  }
}

void quantize(const float *x, int K, uint8_t *codes, float *scale) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 top = _mm256_setzero_ps();
  int k = 0;
  for (; k + kLanes <= K; k += kLanes) top = _mm256_max_ps(top, _mm256_and_ps(_mm256_loadu_ps(x + k), magnitude));
  __m128 t = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
  t = _mm_max_ps(t, _mm_movehl_ps(t, t));
  t = _mm_max_ss(t, _mm_shuffle_ps(t, t, 1));
  float m = _mm_cvtss_f32(t);
  for (int j = k; j < K; ++j) m = std::max(m, std::fabs(x[j]));
  const float s = int8_row_scale(m);
  const __m256 sv = _mm256_set1_ps(s);
  const __m256i zero_point = _mm256_set1_epi32(128), low = _mm256_setzero_si256(), high = _mm256_set1_epi32(255);
  for (k = 0; k + kLanes <= K; k += kLanes) {
    // _mm256_cvtps_epi32 rounds as MXCSR says: to nearest, ties to even (the default)
    __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + k), sv)), zero_point);
    q = _mm256_min_epi32(_mm256_max_epi32(q, low), high);
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i *>(codes + k), _mm_packus_epi16(words, words));
  }
  for (; k < K; ++k) codes[k] = int8_code(x[k], s);
  *scale = s;
}

}  // namespace

Int8Kernels int8_avx2() { return Int8Kernels{"avx2", kPanel, 1, 1, gemm, quantize}; }

}  // namespace nmtnative
