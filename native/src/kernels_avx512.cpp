// kernels_impl.h for AVX-512F (compiled with -mavx512f -mavx512dq -mfma; chosen when the CPU has it).
#include <immintrin.h>

#include "kernels_impl.h"

namespace nmtnative {
namespace {

struct V512 {
  using T = __m512;
  static constexpr int W = 16;
  static inline __mmask16 first(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static inline T zero() { return _mm512_setzero_ps(); }
  static inline T set1(float f) { return _mm512_set1_ps(f); }
  static inline T load(const float *p) { return _mm512_loadu_ps(p); }
  static inline T load_n(const float *p, int n, float fill) { return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first(n), p); }
  static inline void store(float *p, T v) { _mm512_storeu_ps(p, v); }
  static inline void store_n(float *p, T v, int n) { _mm512_mask_storeu_ps(p, first(n), v); }
  static inline T keep_n(T v, int n) { return _mm512_maskz_mov_ps(first(n), v); }
  static inline T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static inline T add(T a, T b) { return _mm512_add_ps(a, b); }
  static inline T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static inline T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static inline T div(T a, T b) { return _mm512_div_ps(a, b); }
  static inline unsigned above(T v, float f) { return _mm512_cmp_ps_mask(v, _mm512_set1_ps(f), _CMP_GT_OQ); }
  static inline T max(T a, T b) { return _mm512_max_ps(a, b); }
  static inline float hsum(T v) {  // (lanes i + 8), then (i + 4), (i + 2), (i + 1): a fixed tree
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  // out[j] = hsum(v[j]) for j < 16, each by hsum's own tree (the same pairs added at each level,
  // so the same bits), the 16 trees in 15 vector adds: 4 levels of paired shuffles, then the
  // results out of their transposed order.
  static inline void hsums(const T *v, float *out) {
    T u[8], w[4], x[2];
    for (int j = 0; j < 8; ++j)  // lanes i + (i + 8): [v2j's 8 | v2j+1's 8]
      u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int k = 0; k < 4; ++k)  // i + (i + 4): 128-bit lane l of w[k] is v[4k + l]'s 4
      w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int m = 0; m < 2; ++m)  // i + (i + 2): lane l holds v[8m + l]'s 2, then v[8m + 4 + l]'s
      x[m] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * m], w[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(w[2 * m], w[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // 0 + 1: element 4l + t is v[4t + l]'s sum
    const T r = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, r));
  }
  static inline float hmax(T v) { return _mm512_reduce_max_ps(v); }
  // exp(x): x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series to r^6 (relative error < 4e-8),
  // 2^n into the exponent bits; 0 below -87 (e^-87 is the smallest normal's order), capped at e^88.
  static inline T exp(T x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.f), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(88.f));
    const T n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    T r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    T p = _mm512_set1_ps(1.f / 720.f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~under), _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
  }
};

}  // namespace

Kernels kernels_avx512() { return Impl<V512>::table("avx512"); }

}  // namespace nmtnative
