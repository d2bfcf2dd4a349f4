// int8.h's product on AMX (Intel's tile units; compiled with -mamx-tile -mamx-int8 -mavx512f
// -mavx512bw): tdpbusd multiplies a tile of 16 rows' unsigned codes (64 k each) by a tile of 16
// columns' signed weights (16 quads of 4 k, the layout pack_int8 writes) into 16 x 16 int32 sums,
// exactly as vpdpbusd does lane by lane; the epilogue is int8_vnni.cpp's, in the same order (128
// x the column's sum out, then x column scale, x row scale, + bias), so every kernel gives the
// same bits (tests/test_native_step.py forces each).
//
// Layout: panels of 64 columns as the VNNI kernel's; the rows' codes and the panels' quads padded
// to 64 k (quad_align 16: codes 128, weights 0, so the padding adds 0) and the rows to 16
// (row_align: padded rows are computed and not stored). Per panel and block of 16 rows: tiles 0-3
// hold the panel's four 16-column sums, tile 4 the rows' codes, tiles 5 and 6 the weights.
//
// Linux lends the tiles to a process that asks (arch_prctl ARCH_REQ_XCOMP_PERM); int8_kernels()
// asks once and falls back to VNNI when refused. Each call loads its tile configuration (helper
// threads run calls too: the configuration is per thread) and releases the tiles at its end, so a
// thread switch does not save 8 KB of tile state.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "int8.h"
#include "int8_avx512.h"

namespace nmtnative {
namespace {

constexpr int kLanes = 16, kPanel = 4 * kLanes, kRows = 16, kQuadsPerTile = 16;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

const TileConfig &config() {
  static const TileConfig c = [] {
    TileConfig t;
    for (int i = 0; i < 7; ++i) t.rows[i] = kRows, t.colsb[i] = 64;  // 16 x 16 int32; 16 x 64 bytes
    return t;
  }();
  return c;
}

void gemm(const uint8_t *a, const float *row_scale, int M, int quads, const int8_t *w, const int32_t *colsum128,
          const float *col_scale, int N, const float *bias, float *y, int n_begin, int n_end) {
  _tile_loadconfig(&config());
  alignas(64) int32_t sums[kRows][kPanel];
  const size_t stride = static_cast<size_t>(quads) * 4;  // a row's code bytes (a multiple of 64)
  for (int n0 = n_begin; n0 < n_end; n0 += kPanel) {
    const int8_t *panel = w + static_cast<size_t>(n0) * 4 * quads;
    for (int m = 0; m < M; m += kRows) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int q = 0; q < quads; q += kQuadsPerTile) {
        _tile_loadd(4, a + static_cast<size_t>(m) * stride + 4 * q, stride);
        const int8_t *wq = panel + static_cast<size_t>(q) * 4 * kPanel;  // quad q: 64 columns x 4 codes
        _tile_loadd(5, wq, 4 * kPanel);
        _tile_dpbusd(0, 4, 5);
        _tile_loadd(6, wq + 4 * kLanes, 4 * kPanel);
        _tile_dpbusd(1, 4, 6);
        _tile_loadd(5, wq + 8 * kLanes, 4 * kPanel);
        _tile_dpbusd(2, 4, 5);
        _tile_loadd(6, wq + 12 * kLanes, 4 * kPanel);
        _tile_dpbusd(3, 4, 6);
      }
      _tile_stored(0, &sums[0][0], sizeof(int32_t) * kPanel);
      _tile_stored(1, &sums[0][kLanes], sizeof(int32_t) * kPanel);
      _tile_stored(2, &sums[0][2 * kLanes], sizeof(int32_t) * kPanel);
      _tile_stored(3, &sums[0][3 * kLanes], sizeof(int32_t) * kPanel);
      const int rows = M - m < kRows ? M - m : kRows;
      for (int c = 0; c < 4; ++c) {  // int8_vnni.cpp's epilogue (int8_avx512.h)
        const int col = n0 + c * kLanes;
        if (N - col <= 0) break;
        const Int8Columns16 out(col, N, colsum128, col_scale, bias);
        for (int r = 0; r < rows; ++r) {
          out.store(_mm512_load_si512(&sums[r][c * kLanes]), row_scale[m + r], y + static_cast<size_t>(m + r) * N);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

Int8Kernels int8_amx(const Int8Kernels &vnni) {
  // The rows' quantization is the VNNI kernel's (AVX-512); only the product differs.
  return Int8Kernels{"amx", kPanel, kQuadsPerTile, kRows, gemm, vnni.quantize};
}

}  // namespace nmtnative
