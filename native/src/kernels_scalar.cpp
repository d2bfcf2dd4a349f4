// kernels_impl.h in portable scalar code (any CPU; std::fma rounds as the vector FMAs do).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels_impl.h"

namespace nmtnative {
namespace {

struct V1 {
  using T = float;
  static constexpr int W = 1;
  static inline T zero() { return 0.f; }
  static inline T set1(float f) { return f; }
  static inline T load(const float *p) { return *p; }
  static inline T load_n(const float *p, int n, float fill) { return n > 0 ? *p : fill; }
  static inline void store(float *p, T v) { *p = v; }
  static inline void store_n(float *p, T v, int n) {
    if (n > 0) *p = v;
  }
  static inline T keep_n(T v, int n) { return n > 0 ? v : 0.f; }
  static inline T fma(T a, T b, T c) { return std::fma(a, b, c); }
  static inline T add(T a, T b) { return a + b; }
  static inline T sub(T a, T b) { return a - b; }
  static inline T mul(T a, T b) { return a * b; }
  static inline T div(T a, T b) { return a / b; }
  static inline unsigned above(T v, float f) { return v > f ? 1u : 0u; }
  static inline T max(T a, T b) { return a > b ? a : b; }
  static inline float hsum(T v) { return v; }
  static inline void hsums(const T *v, float *out) { out[0] = v[0]; }
  static inline float hmax(T v) { return v; }
  static inline T exp(T x) { return x < -87.f ? 0.f : std::exp(x < 88.f ? x : 88.f); }
};

}  // namespace

Kernels kernels_scalar() { return Impl<V1>::table("scalar"); }

const Kernels &kernels() {
  static const Kernels chosen = [] {
    __builtin_cpu_init();
    const char *forced = std::getenv("NMTSERVE_NATIVE_KERNELS");  // tests: every kernel set on one CPU
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (forced && std::strcmp(forced, "scalar") == 0) return kernels_scalar();
    if (forced && std::strcmp(forced, "avx2") == 0 && avx2) return kernels_avx2();
    if (avx512) return kernels_avx512();
    if (avx2) return kernels_avx2();
    return kernels_scalar();
  }();
  return chosen;
}

}  // namespace nmtnative
