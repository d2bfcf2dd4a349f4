// kernels_impl.h for AVX2 with FMA (compiled with -mavx2 -mfma; chosen when the CPU has them).
#include <immintrin.h>

#include "kernels_impl.h"

namespace nmtnative {
namespace {

struct V256 {
  using T = __m256;
  static constexpr int W = 8;
  static inline __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static inline T zero() { return _mm256_setzero_ps(); }
  static inline T set1(float f) { return _mm256_set1_ps(f); }
  static inline T load(const float *p) { return _mm256_loadu_ps(p); }
  static inline T load_n(const float *p, int n, float fill) {
    const __m256i m = first(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static inline void store(float *p, T v) { _mm256_storeu_ps(p, v); }
  static inline void store_n(float *p, T v, int n) { _mm256_maskstore_ps(p, first(n), v); }
  static inline T keep_n(T v, int n) { return _mm256_and_ps(v, _mm256_castsi256_ps(first(n))); }
  static inline T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static inline T add(T a, T b) { return _mm256_add_ps(a, b); }
  static inline T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static inline T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static inline T div(T a, T b) { return _mm256_div_ps(a, b); }
  static inline unsigned above(T v, float f) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(f), _CMP_GT_OQ))); }
  static inline T max(T a, T b) { return _mm256_max_ps(a, b); }
  static inline float hsum(T v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  // out[j] = hsum(v[j]) for j < 8, each by hsum's own tree (the same bits; see V512's).
  static inline void hsums(const T *v, float *out) {
    T u[4], x[2];
    for (int j = 0; j < 4; ++j)  // i + (i + 4): [v2j's 4 | v2j+1's 4]
      u[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x20),
                           _mm256_permute2f128_ps(v[2 * j], v[2 * j + 1], 0x31));
    for (int m = 0; m < 2; ++m)  // i + (i + 2): lane l holds v[4m + l]'s 2, then v[4m + 2 + l]'s
      x[m] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * m], u[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm256_shuffle_ps(u[2 * m], u[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // 0 + 1: element 4l + t is v[2t + l]'s sum
    const T r = _mm256_add_ps(_mm256_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm256_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  static inline float hmax(T v) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
  }
  static inline T exp(T x) {  // as kernels_avx512.cpp's
    const T under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
    const T n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    T r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    T p = _mm256_set1_ps(1.f / 720.f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
};

}  // namespace

Kernels kernels_avx2() { return Impl<V256>::table("avx2"); }

}  // namespace nmtnative
