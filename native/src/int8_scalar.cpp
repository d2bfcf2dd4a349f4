// int8.h's product in portable code (any CPU), and the run-time choice among the three.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <cpuid.h>

#include "int8.h"

namespace nmtnative {
namespace {

constexpr int kPanel = 4;

void gemm(const uint8_t *a, const float *row_scale, int M, int quads, const int8_t *w, const int32_t *,
          const float *col_scale, int N, const float *bias, float *y, int n_begin, int n_end) {
  const size_t stride = static_cast<size_t>(quads) * 4;
  for (int n0 = n_begin; n0 < n_end; n0 += kPanel) {
    const int8_t *panel = w + static_cast<size_t>(n0) * 4 * quads;
    for (int m = 0; m < M; ++m) {
      const uint8_t *row = a + m * stride;
      int32_t acc[kPanel] = {0, 0, 0, 0};
      for (int q = 0; q < quads; ++q)
        for (int j = 0; j < kPanel; ++j)
          for (int i = 0; i < 4; ++i)
            acc[j] += (static_cast<int32_t>(row[4 * q + i]) - 128) * panel[(static_cast<size_t>(q) * kPanel + j) * 4 + i];
      for (int j = 0; j < kPanel && n0 + j < N; ++j) {
        float v = (static_cast<float>(acc[j]) * col_scale[n0 + j]) * row_scale[m];
        if (bias) v = v + bias[n0 + j];
        y[static_cast<size_t>(m) * N + n0 + j] = v;
      }
    }
  }
}

void quantize(const float *x, int K, uint8_t *codes, float *scale) {
  float top = 0.f;
  for (int k = 0; k < K; ++k) top = std::max(top, std::fabs(x[k]));
  const float s = int8_row_scale(top);
  for (int k = 0; k < K; ++k) codes[k] = int8_code(x[k], s);
  *scale = s;
}

}  // namespace

Int8Kernels int8_scalar() { return Int8Kernels{"scalar", kPanel, 1, 1, gemm, quantize}; }

const Int8Kernels &int8_kernels() {
  static const Int8Kernels chosen = [] {
    __builtin_cpu_init();
    const char *forced = std::getenv("NMTSERVE_NATIVE_INT8_KERNELS");  // tests: every kernel on one CPU
    const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vnni");
    const bool avx2 = __builtin_cpu_supports("avx2");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool amx_cpu = vnni && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 24 & 1) && (edx >> 25 & 1);
    if (forced && std::strcmp(forced, "scalar") == 0) return int8_scalar();
    if (forced && std::strcmp(forced, "avx2") == 0 && avx2) return int8_avx2();
    if (forced && std::strcmp(forced, "avx512-vnni") == 0 && vnni) return int8_vnni();
    if (amx_cpu && amx_permitted()) return int8_amx(int8_vnni());  // AMX-TILE and AMX-INT8 (CPUID 7: EDX 24, 25)
    if (vnni) return int8_vnni();
    if (avx2) return int8_avx2();
    return int8_scalar();
  }();
  return chosen;
}

}  // namespace nmtnative
