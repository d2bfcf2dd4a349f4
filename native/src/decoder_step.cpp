// The decoder's step in compiled code (issue 49): one call computes what the fused CPU decoder
// graph (nmtserve/export/cpu_graph.py) computes for a step, from that graph's own weights, with no
// graph executor between the products.
//
// Why: at one sentence a step of a small model is ~190 graph nodes of a few microseconds each
// (bench/step_profile.py: the demo's kernels ~60% of a step, ONNX Runtime's executor and the
// shape nodes most of the rest); here the same arithmetic is ~25 kernel calls a layer, the cache
// is read where it lies (no Gather of the past), and attention's softmax runs over each
// hypothesis' own past and source only.
//
// Batch invariance by construction: every value of a row is computed from that row's data alone,
// in an order fixed by the model's sizes and the row's own past and source lengths (kernels.h), so
// a sentence's step is the same bits alone, in any batch, and wherever its past starts in the
// cache window: no float64 sum is needed for it.
//
// The contract is the decoder graph's (nmtserve/graphs.py): the same feeds, the same outputs;
// nmtserve/runtime/native_step.py reads the weights out of the graph and checks the graph is one
// this step can run (written by cpu_graph.py, fp32 or int8 as quantize.py writes it: each product
// in the precision the graph holds it, int8.h), and the ONNX graph stays the reference
// (tests/test_native_step.py compares them).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "int8.h"
#include "kernels.h"
#include "search_state.h"
#include "team.h"

namespace py = pybind11;

namespace nmtnative {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Where run_steps' time goes (bench/step_profile.py): calls, steps, nanoseconds in the decoder's
// kernels (compute) and in the whole loop (the rest: the search's step and the ancestor table),
// the dead beams' rows left out (dead_rows) and the parked sentences' (parked_rows: done, waiting to
// be retired).
struct LoopClock {
  std::atomic<uint64_t> calls{0}, steps{0}, kernels_ns{0}, total_ns{0}, dead_rows{0}, parked_rows{0};
};
LoopClock loop_clock;

uint64_t clock_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

struct Norm {
  const float *w = nullptr, *b = nullptr;
  float eps = 1e-5f;
};

// A product x (M, K) @ W (K, N) + bias: W fp32, packed for gemm_nn, or int8 per column, packed
// for the int8 kernels (int8.h: the rows quantized as the int8 graph quantizes them).
struct Linear {
  int K = 0, N = 0;
  const float *w = nullptr;
  const int8_t *w8 = nullptr;
  const int32_t *colsum128 = nullptr;
  const float *scale = nullptr, *bias = nullptr;
};

struct Layer {
  Linear qkv, self_out, cross_q, cross_out, fc1, fc2;
  Norm self_norm, cross_norm, ffn_norm;  // the residuals' norms (pre-norm: the next sublayer's)
};

enum Activation { kRelu = 0, kGelu = 1, kSwish = 2 };

template <typename T>
const T *checked(const py::array &a, const char *name, std::vector<py::ssize_t> shape,
                 const char *what = "native decoder step") {
  const std::string head = std::string(what) + ": " + name;
  if (!py::isinstance<py::array_t<T>>(a) || !(a.flags() & py::array::c_style)) {
    throw std::invalid_argument(head + " has an unexpected dtype or layout");
  }
  if (a.ndim() != static_cast<py::ssize_t>(shape.size())) {
    throw std::invalid_argument(head + " has " + std::to_string(a.ndim()) + " dimensions, expected " +
                                std::to_string(shape.size()));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] >= 0 && a.shape(i) != shape[i]) {
      throw std::invalid_argument(head + " dimension " + std::to_string(i) + " is " + std::to_string(a.shape(i)) +
                                  ", expected " + std::to_string(shape[i]));
    }
  }
  return static_cast<const T *>(a.data());
}

template <typename T>
T *mutable_checked(py::array &a, const char *name, std::vector<py::ssize_t> shape) {
  checked<T>(a, name, shape);
  if (!a.writeable()) throw std::invalid_argument(std::string("native decoder step: ") + name + " is read-only");
  return static_cast<T *>(a.mutable_data());
}

// A vocabulary's embedding: embed (V, d) fp32, or embed.w8 (V, d) int8 with embed.rows_scale (V),
// or the int8 codes read out of a tied projection's packed panels (packed8: the same codes, so the
// table is held once); positions (P, d) from row ``offset``; the token's row times ``scale``, plus
// the position's row (then embed_norm, where there is one).
struct Embedding {
  const float *table = nullptr, *row_scale = nullptr, *positions = nullptr;
  const int8_t *table8 = nullptr;
  const int8_t *packed8 = nullptr;  // pack_int8's panels of a (d, V) product: token v is column v
  int panel = 0, quads = 0;         // that packing's panel width and quads of 4 k
  int rows = 0, position_rows = 0, offset = 0;
  float scale = 1.f;
  std::optional<Norm> norm;
};

// What the compiled graphs (the decoder's step, the encoder) share: the kernels, their weights read
// out of the graph's arrays (a product's packed for its kernel), and the products themselves.
class Products {
 protected:
  explicit Products(const char *what) : k_(kernels()), i8_(int8_kernels()), what_(what) {}

  [[noreturn]] void fail(const std::string &message) const { throw std::invalid_argument(std::string(what_) + ": " + message); }

  std::string kernels_name() const { return uses_int8_ ? std::string(k_.name) + " + int8 " + i8_.name : k_.name; }

  // An array read in place (norms, tables, biases): kept alive as long as this object.
  const float *weight(const py::dict &weights, const std::string &key, std::vector<py::ssize_t> shape) {
    if (!weights.contains(key)) fail("no weight " + key);
    py::array a = weights[key.c_str()].cast<py::array>();
    keep_.push_back(a);
    return checked<float>(a, key.c_str(), shape, what_);
  }
  const float *optional_weight(const py::dict &weights, const std::string &key, std::vector<py::ssize_t> shape) {
    return weights.contains(key) ? weight(weights, key, shape) : nullptr;
  }
  // w (K, N) fp32 packed for gemm_nn (the graph's array is not kept).
  const float *packed(const float *w, int rows, int cols) {
    const size_t panels = (static_cast<size_t>(cols) + k_.panel - 1) / k_.panel;
    packed_.emplace_back(panels * k_.panel * rows);
    k_.pack_nn(w, rows, cols, packed_.back().data());
    return packed_.back().data();
  }
  // A product's weight: key.w (K, N) fp32, or key.w8 (K, N) int8 with key.ws (N) its columns'
  // scales; key.b its bias (required with has_bias, else where there is one).
  Linear linear(const py::dict &weights, const std::string &key, int rows, int cols, bool has_bias) {
    return linear_columns(weights, key, rows, cols, 0, cols, has_bias);
  }
  // Columns [c0, c1) of a product's weight (K, N) (and of its bias): ``linear``'s Linear of that
  // slice, packed on its own; each output column is computed as in the whole product (the same bits).
  Linear linear_columns(const py::dict &weights, const std::string &key, int rows, int cols, int c0, int c1,
                        bool has_bias) {
    if (c0 < 0 || c1 > cols || c0 >= c1) fail("bad columns of " + key);
    Linear l;
    l.K = rows, l.N = c1 - c0;
    if (weights.contains(key + ".w8")) {
      py::array a = weights[(key + ".w8").c_str()].cast<py::array>();
      l.w8 = int8_pack(checked<int8_t>(a, (key + ".w8").c_str(), {rows, cols}, what_) + c0, rows, l.N, cols, 1, l.colsum128);
      l.scale = weight(weights, key + ".ws", {cols}) + c0;
      uses_int8_ = true;
    } else {
      if (!weights.contains(key + ".w")) fail("no weight " + key + ".w");
      py::array a = weights[(key + ".w").c_str()].cast<py::array>();
      const float *w = checked<float>(a, (key + ".w").c_str(), {rows, cols}, what_);
      if (l.N == cols) {
        l.w = packed(w, rows, cols);
      } else {  // pack_nn reads (K, N) rows whole: the slice's columns copied out first
        std::vector<float> slice(static_cast<size_t>(rows) * l.N);
        for (int k = 0; k < rows; ++k) {
          std::copy(w + static_cast<size_t>(k) * cols + c0, w + static_cast<size_t>(k) * cols + c1, slice.data() + static_cast<size_t>(k) * l.N);
        }
        l.w = packed(slice.data(), rows, l.N);
      }
    }
    l.bias = has_bias ? weight(weights, key + ".b", {cols}) : optional_weight(weights, key + ".b", {cols});
    if (l.bias) l.bias += c0;
    return l;
  }
  Norm norm(const py::dict &weights, const py::dict &eps, const std::string &key, int d) {
    Norm n;
    n.w = weight(weights, key + ".w", {d});
    n.b = weight(weights, key + ".b", {d});
    n.eps = eps[key.c_str()].cast<float>();
    return n;
  }
  std::optional<Norm> optional_norm(const py::dict &weights, const py::dict &eps, const std::string &key, int d) {
    return weights.contains(key + ".w") ? std::optional<Norm>(norm(weights, eps, key, d)) : std::nullopt;
  }

  // The embedding; with ``packed_elsewhere`` its table is set later (use_packed), none in the weights.
  Embedding embedding(const py::dict &weights, const py::dict &eps, int d, float scale, int offset,
                      bool packed_elsewhere = false) {
    Embedding e;
    e.scale = scale, e.offset = offset;
    const bool int8 = weights.contains("embed.w8");
    if (packed_elsewhere) {
      if (int8 || weights.contains("embed")) fail("an embedding table given twice");
      uses_int8_ = true;
    } else if (int8) {
      py::array table = weights["embed.w8"].cast<py::array>();
      e.rows = static_cast<int>(table.shape(0));
      e.table8 = checked<int8_t>(table, "embed.w8", {-1, d}, what_);
      keep_.push_back(table);
      e.row_scale = weight(weights, "embed.rows_scale", {e.rows});
      uses_int8_ = true;
    } else {
      e.table = weight(weights, "embed", {-1, d});
      e.rows = static_cast<int>(weights["embed"].cast<py::array>().shape(0));
    }
    e.positions = weight(weights, "positions", {-1, d});
    e.position_rows = static_cast<int>(weights["positions"].cast<py::array>().shape(0));
    e.norm = optional_norm(weights, eps, "embed_norm", d);
    return e;
  }
  // The embedding's table from a tied int8 projection (l: K = d, N = V): its packed panels and its
  // columns' scales (the table's rows'). The same codes and scales as the table's: the same bits.
  void use_packed(Embedding &e, const Linear &l, int d) const {
    if (!l.w8 || l.K != d) fail("the embedding's table is not a tied int8 projection of width d");
    e.packed8 = l.w8, e.row_scale = l.scale, e.rows = l.N;
    e.panel = i8_.panel, e.quads = int8_quads(l.K, i8_.quad_align);
  }
  // Token ``id`` at ``position`` (checked by the caller) into out (d).
  void embed(const Embedding &e, int id, int position, int d, float *out) const {
    const float *p = e.positions + static_cast<size_t>(position + e.offset) * d;
    if (e.packed8) {  // column id of its panel: quad q's 4 codes at q * panel * 4
      const int8_t *column = e.packed8 + (static_cast<size_t>(id / e.panel) * e.panel * e.quads + id % e.panel) * 4;
      const float rs = e.row_scale[id];
      for (int c = 0; c < d; ++c) {
        const float v = static_cast<float>(column[static_cast<size_t>(c / 4) * e.panel * 4 + c % 4]) * rs;
        out[c] = (e.scale != 1.f ? v * e.scale : v) + p[c];
      }
    } else if (e.table8) {  // the int8 table's row: its codes times the row's scale (the graph's Cast, Mul)
      const int8_t *row = e.table8 + static_cast<size_t>(id) * d;
      const float rs = e.row_scale[id];
      for (int c = 0; c < d; ++c) {
        const float v = static_cast<float>(row[c]) * rs;
        out[c] = (e.scale != 1.f ? v * e.scale : v) + p[c];
      }
    } else {
      const float *row = e.table + static_cast<size_t>(id) * d;
      for (int c = 0; c < d; ++c) out[c] = (e.scale != 1.f ? row[c] * e.scale : row[c]) + p[c];
    }
    if (e.norm) k_.layer_norm(out, d, e.norm->w, e.norm->b, e.norm->eps, out);
  }

  // W (K, N) int8, element (k, n) at w[k * k_stride + n * n_stride], packed for the int8 kernels.
  const int8_t *int8_pack(const int8_t *w, int K, int N, std::ptrdiff_t k_stride, std::ptrdiff_t n_stride,
                          const int32_t *&colsum128) {
    const size_t panels = (static_cast<size_t>(N) + i8_.panel - 1) / i8_.panel;
    packed8_.emplace_back(panels * i8_.panel * 4 * static_cast<size_t>(int8_quads(K, i8_.quad_align)));
    colsums_.emplace_back(N);
    pack_int8(w, K, N, k_stride, n_stride, i8_.panel, i8_.quad_align, packed8_.back().data(), colsums_.back().data());
    colsum128 = colsums_.back().data();
    return packed8_.back().data();
  }

  // y (M, N) = x (M, K) @ W + bias, in fp32 (gemm_nn) or int8 (the rows quantized as the int8
  // graph does: scale = max(max|x|, 1e-30) / 127, codes = round-half-even(x / scale) + 128).
  // A product's output columns go to the step's threads by whole panels (team.h) when it shares.
  void apply(const Linear &l, const float *x, size_t M, float *y, const Team::Step &step) const {
    const int panel = l.w8 ? i8_.panel : k_.panel, panels = (l.N + panel - 1) / panel;
    const int chunks = shares(step, M * l.K * l.N, !l.w8 ? kShareWork : i8_.row_align > 1 ? SIZE_MAX : kShareWork8, panels);
    const int N = l.N, Mi = static_cast<int>(M);
    auto columns = [panel, panels, chunks, N](int c, int &begin, int &end) {
      begin = c * panels / chunks * panel;
      end = std::min(N, (c + 1) * panels / chunks * panel);
    };
    if (!l.w8) {
      team_.parallel_for(step, chunks, [&, x, y](int c) {
        int begin, end;
        columns(c, begin, end);
        k_.gemm_nn(x, Mi, l.K, l.w, N, l.bias, y, begin, end);
      });
      return;
    }
    thread_local std::vector<uint8_t> codes;
    thread_local std::vector<float> scales;
    const int quads = int8_quads(l.K, i8_.quad_align);
    const size_t stride = static_cast<size_t>(quads) * 4;
    codes.assign((M + i8_.row_align - 1) / i8_.row_align * i8_.row_align * stride, 128);
    scales.resize(M);
    for (size_t m = 0; m < M; ++m) i8_.quantize(x + m * l.K, l.K, codes.data() + m * stride, &scales[m]);
    const uint8_t *a = codes.data();  // this thread's buffers, named before a helper runs the lambda
    const float *row_scale = scales.data();
    team_.parallel_for(step, chunks, [&, a, row_scale, y](int c) {
      int begin, end;
      columns(c, begin, end);
      i8_.gemm(a, row_scale, Mi, quads, l.w8, l.colsum128, l.scale, N, l.bias, y, begin, end);
    });
  }

  // x + out @ w + bias, then the norm, over N rows of d: post-norm x = y = LN(sum); pre-norm
  // x = sum, y = LN(sum).
  void residual(const float *out, const Linear &l, size_t N, int d, bool pre_norm, float *x, float *y,
                const Norm &norm, std::vector<float> &tmp, const Team::Step &step) const {
    apply(l, out, N, tmp.data(), step);
    for (size_t n = 0; n < N; ++n) {
      float *t = tmp.data() + n * d;
      float *xn = x + n * d;
      for (int c = 0; c < d; ++c) t[c] = xn[c] + t[c];
      k_.layer_norm(t, d, norm.w, norm.b, norm.eps, y + n * d);
      if (pre_norm) {
        std::memcpy(xn, t, sizeof(float) * d);
      } else {
        std::memcpy(xn, y + n * d, sizeof(float) * d);
      }
    }
  }

  // LN(x) of N rows of d into y (y may be x).
  void norm_rows(const Norm &norm, const float *x, size_t N, int d, float *y) const {
    for (size_t n = 0; n < N; ++n) k_.layer_norm(x + n * d, d, norm.w, norm.b, norm.eps, y + n * d);
  }
  // What the first layer reads of the embedded rows x: its input norm (pre-norm), else x itself.
  void first_input(const std::optional<Norm> &first_norm, const float *x, size_t N, int d, float *y) const {
    if (first_norm) {
      norm_rows(*first_norm, x, N, d, y);
    } else {
      std::memcpy(y, x, sizeof(float) * N * d);
    }
  }

  // The feed-forward's activation, in place.
  void activate(int activation, float *hidden, size_t n) const {
    if (activation == kRelu) {
      k_.relu(hidden, static_cast<int>(n));
    } else if (activation == kSwish) {
      k_.swish(hidden, static_cast<int>(n));
    } else {
      for (size_t c = 0; c < n; ++c) hidden[c] = 0.5f * hidden[c] * (1.f + std::erf(hidden[c] * 0.70710678118654752f));
    }
  }

  // The chunks a step's work of ``work`` units (multiply-adds, or rows x vocabulary) over ``units``
  // (panels, rows) goes in: 1 unless the step shares and the work is ``enough``; else up to
  // kChunksPerThread a thread (a late helper then leaves less to the caller).
  int shares(const Team::Step &step, size_t work, size_t enough, int units) const {
    return step.shared() && work >= enough ? std::min(units, kChunksPerThread * (team_.helpers() + 1)) : 1;
  }
  // A product or a set of rows is shared out from this much work (multiply-adds, or rows x vocabulary).
  static constexpr size_t kShareWork = 32768;
  // int8 products cost a fraction of fp32's a multiply-add (VNNI 4x): shared from more work. AMX
  // products are not shared: measured slower shared on this project's 2-core Xeon (demo, 32 rows:
  // 500 us a step alone, 625 shared; VNNI 700 -> 650), where the two cores' tile units may be one.
  static constexpr size_t kShareWork8 = 16 * kShareWork;
  static constexpr int kChunksPerThread = 2;
  const Kernels &k_;
  const Int8Kernels &i8_;
  Team &team_ = Team::team();
  const char *what_;  // "native decoder step", "native encoder": the start of every error message
  bool uses_int8_ = false;
  std::vector<py::object> keep_;  // the weights' arrays read in place (norms, tables, biases), a shared table's owner
  std::deque<std::vector<float>> packed_;  // the products' weights, packed (kernels.h pack_nn)
  std::deque<std::vector<int8_t>> packed8_;  // int8 products' weights, packed (int8.h pack_int8)
  std::deque<std::vector<int32_t>> colsums_;
};

class DecoderStep : Products {
 public:
  DecoderStep(const py::dict &config, const py::dict &weights) : Products("native decoder step") {
    auto cfg = [&](const char *key) { return config[key]; };
    d_ = cfg("d_model").cast<int>();
    h_ = cfg("heads").cast<int>();
    dk_ = d_ / h_;
    n_layers_ = cfg("layers").cast<int>();
    vocab_ = cfg("vocab").cast<int>();
    d_ff_ = cfg("d_ff").cast<int>();
    candidates_ = cfg("candidates").cast<int>();
    activation_ = cfg("activation").cast<int>();
    align_layer_ = cfg("alignment_layer").cast<int>();
    pre_norm_ = cfg("pre_norm").cast<bool>();
    tied_ = cfg("tied").cast<bool>();
    if (d_ % h_ || n_layers_ < 1 || vocab_ < 1 || candidates_ < 1 || candidates_ > vocab_ || align_layer_ < 0 ||
        align_layer_ >= n_layers_ || activation_ < 0 || activation_ > 2) {
      throw std::invalid_argument("native decoder step: inconsistent configuration");
    }
    const py::dict eps = config["eps"].cast<py::dict>();
    auto w = [&](const std::string &key, std::vector<py::ssize_t> shape) { return weight(weights, key, shape); };
    auto optional_w = [&](const std::string &key, std::vector<py::ssize_t> shape) {
      return optional_weight(weights, key, shape);
    };
    auto norm = [&](const std::string &key) { return Products::norm(weights, eps, key, d_); };
    auto optional_norm = [&](const std::string &key) { return Products::optional_norm(weights, eps, key, d_); };
    auto linear = [&](const std::string &key, int rows, int cols, bool has_bias) {
      return Products::linear(weights, key, rows, cols, has_bias);
    };
    // The int8 embedding read out of the tied projection's panels (read_cpu_decoder: the same table).
    const bool in_generator = config.contains("embed_in_generator") && cfg("embed_in_generator").cast<bool>();
    embed_ = embedding(weights, eps, d_, cfg("embed_scale").cast<float>(), cfg("position_offset").cast<int>(),
                       in_generator);
    first_norm_ = optional_norm("first_norm");
    final_norm_ = optional_norm("final_norm");
    if (pre_norm_ != first_norm_.has_value()) throw std::invalid_argument("native decoder step: pre-norm needs first_norm");
    for (int i = 0; i < n_layers_; ++i) {
      const std::string p = std::to_string(i) + ".";
      Layer l;
      l.qkv = linear(p + "qkv", d_, 3 * d_, true);
      l.self_out = linear(p + "self_out", d_, d_, false);
      l.cross_q = linear(p + "cross_q", d_, d_, false);
      l.cross_out = linear(p + "cross_out", d_, d_, false);
      l.fc1 = linear(p + "fc1", d_, d_ff_, false);
      l.fc2 = linear(p + "fc2", d_ff_, d_, false);
      l.self_norm = norm(p + "self_norm");
      l.cross_norm = norm(p + "cross_norm");
      l.ffn_norm = norm(p + "ffn_norm");
      layers_.push_back(l);
    }
    // The projection onto the vocabulary: tied, the table (V, d) projected onto (generator.table
    // fp32, or generator.table8 int8 per row with generator.table_scale), transposed into the
    // product's panels; else generator.w / generator.w8 (d, V) as any product.
    generator_.K = d_, generator_.N = vocab_;
    if (tied_ && weights.contains("generator.table8")) {
      py::array a = weights["generator.table8"].cast<py::array>();
      generator_.w8 = int8_pack(checked<int8_t>(a, "generator.table8", {vocab_, d_}), d_, vocab_, 1, d_, generator_.colsum128);
      generator_.scale = w("generator.table_scale", {vocab_});
      uses_int8_ = true;
    } else if (tied_) {
      const float *table = w("generator.table", {vocab_, d_});
      std::vector<float> transposed(static_cast<size_t>(d_) * vocab_);
      for (int v = 0; v < vocab_; ++v)
        for (int c = 0; c < d_; ++c) transposed[static_cast<size_t>(c) * vocab_ + v] = table[static_cast<size_t>(v) * d_ + c];
      generator_.w = packed(transposed.data(), d_, vocab_);
    } else {
      generator_ = linear("generator", d_, vocab_, false);
    }
    generator_.bias = optional_w("final_bias", {vocab_});
    logits_mask_ = w("logits_mask", {vocab_});
    for (int v = 0; v < vocab_; ++v) finite_tokens_ += std::isfinite(logits_mask_[v]) ? 1 : 0;
    if (in_generator) use_packed(embed_, generator_, d_);
    if (config.contains("vocabularies")) {
      for (const py::handle &ids : config["vocabularies"].cast<py::list>()) restrict_to(ids.cast<py::array>());
    }
  }

  // A restricted vocabulary (nmtserve.runtime.vocabulary, CTranslate2's use_vmap): the projection
  // onto its ids alone (their columns of the projection, packed on their own: each logit the same
  // bits as the whole projection's), the mask and bias at its ids; a row restricted to it gets its
  // log-softmax over these alone and its candidates among them.
  struct Restriction {
    std::vector<int32_t> ids;  // ascending: TopK's lower id first on equal values stays
    Linear generator;
    std::vector<float> mask, bias, scale;
  };
  void restrict_to(const py::array &array) {
    if (array.ndim() != 1) fail("a vocabulary restriction is a list of token ids");
    const py::ssize_t n = array.shape(0);
    const int32_t *given = checked<int32_t>(array, "vocabulary", {n}, what_);
    auto r = std::make_unique<Restriction>();
    r->ids.assign(given, given + n);
    int finite = 0;
    for (py::ssize_t i = 0; i < n; ++i) {
      if (given[i] < 0 || given[i] >= vocab_ || (i && given[i] <= given[i - 1])) {
        fail("a vocabulary restriction's ids must be ascending, distinct and in [0, vocab)");
      }
      finite += std::isfinite(logits_mask_[given[i]]) ? 1 : 0;
    }
    if (finite < candidates_) {
      fail("a vocabulary restriction of " + std::to_string(finite) + " allowed tokens is smaller than the step's " +
           std::to_string(candidates_) + " candidates");
    }
    const int N = static_cast<int>(n), K = d_;
    Linear &l = r->generator;
    l.K = K, l.N = N;
    if (generator_.w8) {  // the columns out of pack_int8's panels: (k, v) at panel v / P, quad k / 4
      const int P = i8_.panel, quads = int8_quads(K, i8_.quad_align);
      std::vector<int8_t> columns(static_cast<size_t>(K) * N);
      for (int j = 0; j < N; ++j) {
        const int v = r->ids[j];
        const int8_t *column = generator_.w8 + (static_cast<size_t>(v / P) * P * quads + v % P) * 4;
        for (int k = 0; k < K; ++k) columns[static_cast<size_t>(k) * N + j] = column[static_cast<size_t>(k / 4) * P * 4 + k % 4];
      }
      l.w8 = int8_pack(columns.data(), K, N, N, 1, l.colsum128);
      for (int v : r->ids) r->scale.push_back(generator_.scale[v]);
      l.scale = r->scale.data();
    } else {  // pack_nn's panels: (k, v) at panel v / P, row k
      const int P = k_.panel;
      std::vector<float> columns(static_cast<size_t>(K) * N);
      for (int j = 0; j < N; ++j) {
        const int v = r->ids[j];
        const float *panel = generator_.w + static_cast<size_t>(v / P) * P * K + v % P;
        for (int k = 0; k < K; ++k) columns[static_cast<size_t>(k) * N + j] = panel[static_cast<size_t>(k) * P];
      }
      l.w = packed(columns.data(), K, N);
    }
    for (int v : r->ids) r->mask.push_back(logits_mask_[v]);
    if (generator_.bias) {
      for (int v : r->ids) r->bias.push_back(generator_.bias[v]);
      l.bias = r->bias.data();
    }
    restrictions_.push_back(std::move(r));
  }

  // The tied int8 projection when the embedding reads its panels (an encoder's table to share), else null.
  const Linear *packed_table() const { return embed_.packed8 ? &generator_ : nullptr; }
  std::vector<int> restriction_sizes() const {
    std::vector<int> sizes;
    for (const auto &r : restrictions_) sizes.push_back(static_cast<int>(r->ids.size()));
    return sizes;
  }

  using Products::kernels_name;

  py::dict run(const py::array &input_ids, const py::array &position, const py::array &past_key,
               const py::array &past_value, const py::array &cache_rows, const py::array &past_mask,
               const std::vector<py::array> &memory_keys, const std::vector<py::array> &memory_values,
               const py::array &src_mask, bool want_attention, bool want_log_probs,
               const py::object &vocabularies_given) const {
    if (input_ids.ndim() != 2 || past_key.ndim() != 5 || src_mask.ndim() != 2) {
      throw std::invalid_argument("native decoder step: input_ids (B, K), past_key (T, R, L, h, d_k), src_mask (B, S)");
    }
    const py::ssize_t B = input_ids.shape(0), K = input_ids.shape(1), T = past_key.shape(0), R = past_key.shape(1);
    const py::ssize_t S = src_mask.shape(1);
    Inputs in;
    in.ids = checked<int32_t>(input_ids, "input_ids", {B, K});
    in.position = checked<int32_t>(position, "position", {B});
    in.past_key = checked<float>(past_key, "past_key", {T, R, n_layers_, h_, dk_});
    in.past_value = checked<float>(past_value, "past_value", {T, R, n_layers_, h_, dk_});
    in.cache_rows = checked<int32_t>(cache_rows, "cache_rows", {B, K, T});
    in.rows_stride = T;
    const bool *mask = checked<bool>(past_mask, "past_mask", {B, T});
    const bool *src = checked<bool>(src_mask, "src_mask", {B, S});
    memories(in, memory_keys, memory_values, B, S);
    in.B = B, in.K = K, in.R = R, in.S = S;
    in.vocabulary = vocabularies(vocabularies_given, B);
    check_tokens(in);
    for (py::ssize_t i = 0; i < B * K * T; ++i) {
      if (in.cache_rows[i] < 0 || in.cache_rows[i] >= R) throw std::invalid_argument("native decoder step: a cache row is out of range");
    }
    // Each sentence's real past times and source positions, in order: every softmax runs over
    // these alone, whatever the window and the padding around them.
    Lists &lists = lists_for(B);
    for (py::ssize_t b = 0; b < B; ++b) {
      for (py::ssize_t t = 0; t < T; ++t)
        if (mask[b * T + t]) lists.times[b].push_back(static_cast<int>(t));
      for (py::ssize_t s = 0; s < S; ++s)
        if (src[b * S + s]) lists.sources[b].push_back(static_cast<int>(s));
    }
    std::vector<py::ssize_t> kv_shape{B, K, n_layers_, h_, dk_};
    py::array_t<float> new_key(kv_shape), new_value(kv_shape);
    py::dict result = outputs(in, want_attention, want_log_probs, new_key.mutable_data(), new_value.mutable_data(), lists);
    result["new_key"] = new_key;
    result["new_value"] = new_value;
    return result;
  }

  // The served engine's step (nmtserve/engine/batcher.py), on its own arrays, with no feeds built:
  // rows [0, b) of a beam-width group, each sentence's past the pool times [start[s], g) through
  // its ancestor table, its source the first src_len[s] positions of its memory. The step's K/V go
  // straight into the pool at time g, hypothesis n (= s * K + k) in row n, and the table records
  // it (table[s, k, g] = n): what ``run`` + the engine's ``_store_new_kv`` did, with the same
  // arithmetic in the same order (a row's softmax runs over the same past and source either way).
  py::dict run_pool(int b, int g, const py::array &tokens, const py::array &steps, py::array &pool_key,
                    py::array &pool_value, py::array &table, const py::array &start, const py::array &src_len,
                    const std::vector<py::array> &memory_keys, const std::vector<py::array> &memory_values,
                    bool want_attention, bool want_log_probs, const py::object &memory_rows,
                    const py::object &vocabularies_given) const {
    if (tokens.ndim() != 2) throw std::invalid_argument("native decoder step: tokens (b, K)");
    const py::ssize_t K = tokens.shape(1);
    if (b > tokens.shape(0) || b > steps.shape(0)) {
      throw std::invalid_argument("native decoder step: the search's arrays hold fewer than " + std::to_string(b) + " rows");
    }
    Pool pool = pool_of(b, g, K, pool_key, pool_value, table, start, src_len, memory_keys, memory_values, memory_rows);
    pool.in.vocabulary = vocabularies(vocabularies_given, b);
    const int64_t *tok = checked<int64_t>(tokens, "tokens", {-1, K});
    const int64_t *t_of = checked<int64_t>(steps, "steps", {-1});
    Lists &lists = lists_for(b);
    step_inputs(pool, b, g, tok, t_of, lists);
    const size_t at = static_cast<size_t>(g) * pool.R * n_layers_ * d_;  // pool time g, row 0
    py::dict result = outputs(pool.in, want_attention, want_log_probs, pool.key + at, pool.value + at, lists);
    for (py::ssize_t n = 0; n < b * K; ++n) pool.table[n * pool.T_table + g] = static_cast<int32_t>(n);
    return result;
  }

  // The engine's steps with no Python between them (engine.batcher's ``_steps_compiled``): from
  // pool time ``g``, each step is ``run_pool``'s, then the search's compiled step on its top
  // 2K + 1 candidates (search_step.cpp: ranked, finished hypotheses into their pools, applied;
  // each hypothesis' most attended source position first where ``attention``), then the ancestor
  // table follows the parents over [t_lo, g + 1): what the engine's Python does between steps, in
  // the same order on the same arrays, so the results are the same bits. Stops after a step where
  // ``park`` sentences are done, or all, or ``park_steps`` steps after the first was done (the
  // engine retires them; until then a done one is parked: not computed, its rows untouched; park
  // 1: a step where one is done), before the pool's last time (the engine compacts), after
  // ``max_steps`` (cancellations are looked at between calls), before a step that needs every
  // token's log-probability (fairseq's last step, when ``full_steps``), and when ``interrupt[0]``
  // is set (a request arrived: the engine admits it). At least one step (none where every row is
  // done already); returns how many ran.
  // Touches no Python object while it runs: the other threads (the server's requests) run.
  int run_steps(Step &search, int b, int g, int t_lo, int max_steps, const py::array &interrupt, int64_t vocab,
                py::array &pool_key, py::array &pool_value, py::array &table, const py::array &start,
                const py::array &src_len, const std::vector<py::array> &memory_keys,
                const std::vector<py::array> &memory_values, bool loops, bool confidence, bool want_attention,
                bool full_steps, int park, int park_steps, const py::object &memory_rows,
                const py::object &vocabularies_given) const {
    const py::ssize_t K = search.k;
    if (search.tokens.dim1 != K || b > search.tokens.keep.shape(0) || b > search.t.keep.shape(0) ||
        b > search.parents.keep.shape(0)) {
      throw std::invalid_argument("native decoder steps: the search's arrays do not fit " + std::to_string(b) + " rows");
    }
    if (max_steps < 1 || t_lo < 0 || t_lo > g) throw std::invalid_argument("native decoder steps: max_steps >= 1, 0 <= t_lo <= g");
    if (park < 1 || park_steps < 0) throw std::invalid_argument("native decoder steps: park >= 1, park_steps >= 0");

    const int32_t *flag = checked<int32_t>(interrupt, "interrupt", {1});
    Pool pool = pool_of(b, g, K, pool_key, pool_value, table, start, src_len, memory_keys, memory_values, memory_rows);
    pool.in.vocabulary = vocabularies(vocabularies_given, b);
    for (py::ssize_t s = 0; s < b; ++s) {
      if (pool.first[s] < t_lo) throw std::invalid_argument("native decoder steps: a sentence starts before t_lo");
    }
    const size_t N = static_cast<size_t>(b * K), C = candidates_, m = std::min<size_t>(2 * K + 1, C);
    const py::ssize_t S = pool.S;
    std::vector<float> top_values(N * C), attention(want_attention ? N * S : 0);
    std::vector<int32_t> top_ids(N * C), copy;
    std::vector<double> values(N * m);
    std::vector<int64_t> ids(N * m);
    std::vector<int16_t> positions(want_attention ? N : 0);
    Outputs out{top_values.data(), top_ids.data(), nullptr, nullptr, want_attention ? attention.data() : nullptr, nullptr};
    const size_t slice = static_cast<size_t>(pool.R) * n_layers_ * d_;  // one pool time
    // A sentence's beams after its first are dead until its first ranked step (score
    // search.py _INITIAL_OTHER_BEAMS, -1e9; a forced prefix step keeps it): nothing they compute
    // is read, so they are left out (dead_rows) where that is exact: every live beam's 2K + 1
    // candidates are then finite (at most EOS banned), so the ranking's first 2K all come from
    // live beams, as they do when the dead ones are computed (-1e9 + a log-probability).
    const bool skip_dead = static_cast<py::ssize_t>(candidates_) >= 2 * K + 1 && finite_tokens_ >= 2 * K + 1;
    std::vector<int32_t> live;
    // Sentences done in an earlier step of this call, waiting for the engine to retire them (until
    // ``park`` of them are done, at most ``park_steps`` more steps): no row of theirs is computed,
    // their search and ancestor rows are left as they were. The engine retires the same results
    // as when it took each at once, in fewer round trips through Python.
    std::vector<char> parked(static_cast<size_t>(b), 0);
    int parked_count = 0, waited = 0;
    for (py::ssize_t s = 0; s < b; ++s) {  // (the engine retires done ones before it calls: none)
      if (search.done(s)) parked[s] = 1, ++parked_count;
    }
    if (parked_count == b) return 0;
    uint64_t left_out = 0, parked_rows = 0;
    int done_steps = 0;
    py::gil_scoped_release release;
    const uint64_t began = clock_ns();
    uint64_t kernels_ns = 0;
    for (;;) {
      Lists &lists = lists_for(b);
      step_inputs(pool, b, g, search.tokens.data, search.t.data, lists);
      out.new_key = pool.key + g * slice, out.new_value = pool.value + g * slice;
      const bool dead = live_rows(search, b, skip_dead, parked_count ? parked.data() : nullptr, live);
      if (dead) {
        parked_rows += static_cast<uint64_t>(parked_count) * K;
        left_out += N - live.size() - static_cast<size_t>(parked_count) * K;
      }
      const uint64_t kernels_began = clock_ns();
      compute(pool.in, out, lists, dead ? &live : nullptr);
      kernels_ns += clock_ns() - kernels_began;
      for (size_t n = 0; n < N; ++n) pool.table[n * pool.T_table + g] = static_cast<int32_t>(n);
      for (size_t n = 0; n < N; ++n) {  // the engine's Candidates: the first m of each hypothesis', widened
        for (size_t j = 0; j < m; ++j) values[n * m + j] = top_values[n * C + j], ids[n * m + j] = top_ids[n * C + j];
      }
      if (want_attention) {  // numpy's argmax: the first of the largest
        for (size_t n = 0; n < N; ++n) {
          const float *a = attention.data() + n * S;
          py::ssize_t best = 0;
          for (py::ssize_t j = 1; j < S; ++j)
            if (a[j] > a[best]) best = j;
          positions[n] = static_cast<int16_t>(best);
        }
      }
      const int16_t *where = want_attention ? positions.data() : nullptr;
      const char *waiting = parked_count ? parked.data() : nullptr;
      search.parked = waiting;
      search.advance(b, values.data(), ids.data(), static_cast<py::ssize_t>(m), vocab, loops, where, confidence);
      search.parked = nullptr;
      follow_parents_rows(pool.table, K, pool.T_table, search.parents.data, b, t_lo, g + 1, copy, waiting);
      ++g, ++done_steps;
      if (parked_count) ++waited;
      for (py::ssize_t s = 0; s < b; ++s) {
        if (!parked[s] && search.done(s)) parked[s] = 1, ++parked_count;
      }
      const bool retire = parked_count && (parked_count >= park || parked_count == b || waited >= park_steps);
      if (retire || g + 1 >= pool.T || done_steps >= max_steps || __atomic_load_n(flag, __ATOMIC_ACQUIRE)) break;
      bool eos_forced = false;  // search.BeamBatch.wants_log_probs
      for (py::ssize_t s = 0; full_steps && s < b; ++s)
        eos_forced = eos_forced || (!parked[s] && search.rule(s) == kFairseq && search.t(s) + 1 >= search.max_len(s));
      if (eos_forced) break;
    }
    loop_clock.calls += 1, loop_clock.steps += done_steps;
    loop_clock.kernels_ns += kernels_ns, loop_clock.total_ns += clock_ns() - began, loop_clock.dead_rows += left_out;
    loop_clock.parked_rows += parked_rows;
    return done_steps;
  }

 private:
  // Below this a beam's score is search.py's _INITIAL_OTHER_BEAMS (-1e9, kept through a forced
  // prefix): a beam no hypothesis has reached yet. A real score (a sum of log-probabilities over
  // at most max_target_len tokens) is orders of magnitude above it.
  static constexpr double kDeadScore = -5e8;
  // The rows to compute when some are left out: per sentence its beams up to its last live one
  // (dead ones are its last beams: beams are in rank order; where ``skip_dead``), none of a parked
  // sentence's. False when every row is computed. Dead beams are never a parent under run_steps'
  // condition; they stay dead through a forced prefix.
  static bool live_rows(const Step &search, int b, bool skip_dead, const char *parked, std::vector<int32_t> &live) {
    const py::ssize_t K = search.k;
    live.clear();
    bool any = false;
    for (py::ssize_t s = 0; s < b; ++s) {
      py::ssize_t count = K;
      if (parked && parked[s]) {
        count = 0;
      } else if (skip_dead && search.t(s) + 1 < search.max_len(s)) {
        // (At a sentence's last step its beams may finish, dead ones too: computed then.)
        while (count > 1 && search.scores(s, count - 1) <= kDeadScore) --count;
      }
      any = any || count < K;
      for (py::ssize_t k = 0; k < count; ++k) live.push_back(static_cast<int32_t>(s * K + k));
    }
    return any;
  }
  struct Inputs {
    const int32_t *ids, *position;
    const int32_t *cache_rows;  // hypothesis n's ancestor row at time t: cache_rows[n * rows_stride + t]
    size_t rows_stride;
    const float *past_key, *past_value;  // (time, R, L, h, d_k)
    std::vector<const float *> memory_keys, memory_values;  // per layer (B, h, d_k, S) / (B, h, S, d_k)
    const int64_t *memory_row = nullptr;  // sentence s's memory is row memory_row[s] (null: row s)
    const int32_t *vocabulary = nullptr;  // sentence s's restricted vocabulary (-1: none; null: none for any)
    py::ssize_t B, K, R, S;
  };
  // The sentences' vocabularies (None: every one whole), checked: B values in [-1, restrictions).
  const int32_t *vocabularies(const py::object &given, py::ssize_t B) const {
    if (given.is_none()) return nullptr;
    const py::array a = py::reinterpret_borrow<py::array>(given);
    const int32_t *v = checked<int32_t>(a, "vocabularies", {-1});
    if (a.shape(0) < B) throw std::invalid_argument("native decoder step: fewer vocabularies than sentences");
    for (py::ssize_t s = 0; s < B; ++s) {
      if (v[s] < -1 || v[s] >= static_cast<int32_t>(restrictions_.size())) {
        throw std::invalid_argument("native decoder step: a vocabulary is out of range");
      }
    }
    return v;
  }
  // Per sentence: the past times it attends and its source positions, in order.
  struct Lists {
    std::vector<std::vector<int>> times, sources;
  };
  static Lists &lists_for(py::ssize_t B) {
    thread_local Lists lists;  // capacity kept between steps
    if (static_cast<py::ssize_t>(lists.times.size()) < B) lists.times.resize(B), lists.sources.resize(B);
    for (py::ssize_t b = 0; b < B; ++b) lists.times[b].clear(), lists.sources[b].clear();
    return lists;
  }
  // The group's arrays for steps at pool time g, checked once (with the GIL held).
  struct Pool {
    Inputs in;  // ids and position: step_inputs
    py::ssize_t T = 0, R = 0, S = 0, T_table = 0;
    const int64_t *first = nullptr, *length = nullptr;
    float *key = nullptr, *value = nullptr;
    int32_t *table = nullptr;
    std::vector<int32_t> ids, position;
  };
  Pool pool_of(int b, int g, py::ssize_t K, py::array &pool_key, py::array &pool_value, py::array &table,
               const py::array &start, const py::array &src_len, const std::vector<py::array> &memory_keys,
               const std::vector<py::array> &memory_values, const py::object &memory_rows) const {
    if (pool_key.ndim() != 5 || table.ndim() != 3 || memory_keys.empty() || memory_keys[0].ndim() != 4) {
      throw std::invalid_argument("native decoder step: tokens (b, K), pools (T, R, L, h, d_k), table (b, K, T), memories (b, h, d_k, S)");
    }
    Pool p;
    p.T = pool_key.shape(0), p.R = pool_key.shape(1), p.S = memory_keys[0].shape(3);
    const py::ssize_t rows = table.shape(0);
    if (b < 1 || b > rows || b > start.shape(0) || b > src_len.shape(0) || b * K > p.R || g < 0 || g >= p.T ||
        table.shape(1) != K || table.shape(2) < p.T) {
      throw std::invalid_argument("native decoder step: the group's arrays do not fit " + std::to_string(b) +
                                  " rows at time " + std::to_string(g));
    }
    p.first = checked<int64_t>(start, "start", {-1});
    p.length = checked<int64_t>(src_len, "src_len", {-1});
    p.key = mutable_checked<float>(pool_key, "pool_key", {p.T, p.R, n_layers_, h_, dk_});
    p.value = mutable_checked<float>(pool_value, "pool_value", {p.T, p.R, n_layers_, h_, dk_});
    p.table = mutable_checked<int32_t>(table, "table", {rows, K, -1});
    p.T_table = table.shape(2);
    const py::ssize_t memory_count = memory_keys[0].shape(0);
    memories(p.in, memory_keys, memory_values, memory_count, p.S);
    if (!memory_rows.is_none()) {  // the engine's slots: a sentence's memory stays where it was written
      const py::array slots = py::reinterpret_borrow<py::array>(memory_rows);
      p.in.memory_row = checked<int64_t>(slots, "memory_rows", {-1});
      if (slots.shape(0) < b) throw std::invalid_argument("native decoder step: fewer memory rows than sentences");
      for (py::ssize_t s = 0; s < b; ++s) {
        if (p.in.memory_row[s] < 0 || p.in.memory_row[s] >= memory_count) {
          throw std::invalid_argument("native decoder step: a memory row is out of range");
        }
      }
    } else if (memory_count < b) {
      throw std::invalid_argument("native decoder step: fewer memories than sentences");
    }
    p.in.B = b, p.in.K = K, p.in.R = p.R, p.in.S = p.S;
    p.in.past_key = p.key, p.in.past_value = p.value;
    p.in.cache_rows = p.table, p.in.rows_stride = p.T_table;
    return p;
  }
  // A step's token ids, positions and each sentence's past times and source positions, from the
  // search's tokens (b, K) and steps (b,), checked (no Python object touched).
  void step_inputs(Pool &p, int b, int g, const int64_t *tok, const int64_t *t_of, Lists &lists) const {
    const py::ssize_t K = p.in.K;
    p.ids.resize(b * K), p.position.resize(b);
    for (py::ssize_t n = 0; n < b * K; ++n) p.ids[n] = tok[n] < 0 || tok[n] > INT32_MAX ? -1 : static_cast<int32_t>(tok[n]);
    for (py::ssize_t s = 0; s < b; ++s) p.position[s] = t_of[s] < 0 || t_of[s] > INT32_MAX ? -1 : static_cast<int32_t>(t_of[s]);
    p.in.ids = p.ids.data(), p.in.position = p.position.data();
    check_tokens(p.in);
    for (py::ssize_t s = 0; s < b; ++s) {
      if (p.first[s] < 0 || p.first[s] > g) throw std::invalid_argument("native decoder step: a sentence starts after the step");
      if (p.length[s] < 0 || p.length[s] > p.S) throw std::invalid_argument("native decoder step: a source is longer than its memory");
      for (int t = static_cast<int>(p.first[s]); t < g; ++t) {
        lists.times[s].push_back(t);
        for (py::ssize_t k = 0; k < K; ++k) {
          const int32_t r = p.table[(s * K + k) * p.T_table + t];
          if (r < 0 || r >= p.R) throw std::invalid_argument("native decoder step: a cache row is out of range");
        }
      }
      for (int q = 0; q < p.length[s]; ++q) lists.sources[s].push_back(q);
    }
  }
  void memories(Inputs &in, const std::vector<py::array> &keys, const std::vector<py::array> &values, py::ssize_t B,
                py::ssize_t S) const {
    if (static_cast<int>(keys.size()) != n_layers_ || static_cast<int>(values.size()) != n_layers_) {
      throw std::invalid_argument("native decoder step: one memory key and value per layer");
    }
    for (int i = 0; i < n_layers_; ++i) {
      in.memory_keys.push_back(checked<float>(keys[i], "memory_key", {B, h_, dk_, S}));
      in.memory_values.push_back(checked<float>(values[i], "memory_value", {B, h_, S, dk_}));
    }
  }
  void check_tokens(const Inputs &in) const {
    for (py::ssize_t n = 0; n < in.B * in.K; ++n) {
      if (in.ids[n] < 0 || in.ids[n] >= embed_.rows) throw std::invalid_argument("native decoder step: a token id is out of range");
    }
    for (py::ssize_t b = 0; b < in.B; ++b) {
      const long p = static_cast<long>(in.position[b]) + embed_.offset;
      if (p < 0 || p >= embed_.position_rows) throw std::invalid_argument("native decoder step: a position is out of range");
    }
  }
  // The step's outputs (new K/V written at new_key / new_value, (B * K, L, h, d_k) each).
  py::dict outputs(const Inputs &in, bool want_attention, bool want_log_probs, float *new_key, float *new_value,
                   const Lists &lists) const {
    const py::ssize_t B = in.B, K = in.K, S = in.S;
    const int C = candidates_;
    py::array_t<float> top_values({B, K, static_cast<py::ssize_t>(C)});
    py::array_t<int32_t> top_ids({B, K, static_cast<py::ssize_t>(C)});
    py::array_t<float> attention, log_probs;
    if (want_attention) attention = py::array_t<float>({B, K, S});
    if (want_log_probs) log_probs = py::array_t<float>({B, K, static_cast<py::ssize_t>(vocab_)});
    Outputs out{top_values.mutable_data(), top_ids.mutable_data(), new_key, new_value,
                want_attention ? attention.mutable_data() : nullptr, want_log_probs ? log_probs.mutable_data() : nullptr};
    {
      py::gil_scoped_release release;
      compute(in, out, lists);
    }
    py::dict result;
    result["top_log_probs"] = top_values;
    result["top_ids"] = top_ids;
    if (want_attention) result["attention"] = attention;
    if (want_log_probs) result["log_probs"] = log_probs;
    return result;
  }
  struct Outputs {
    float *top_values;
    int32_t *top_ids;
    float *new_key, *new_value, *attention, *log_probs;
  };

  // One step of rows [0, B K), or of ``live`` alone (ascending; per sentence its first beams,
  // dead_rows): the other rows' K/V are not written, their top values are -inf and their attention
  // zero. A row's values are the same computed with any other rows (each product's row is its
  // own; the kernels' order is per row), so the live rows' bits are those of the whole step.
  void compute(const Inputs &in, const Outputs &out, const Lists &lists, const std::vector<int32_t> *live = nullptr) const {
    const Team::Step step(team_);
    const size_t B = in.B, K = in.K, R = in.R, S = in.S, N = B * K;
    const int d = d_, h = h_, dk = dk_, L = n_layers_;
    thread_local std::vector<float> x, y, qkv, mixed, tmp, hidden, logits, scores, probs, row;
    thread_local std::vector<const float *> k_rows, v_rows;
    thread_local std::vector<int32_t> every;
    if (live == nullptr) {
      every.resize(N);
      for (size_t n = 0; n < N; ++n) every[n] = static_cast<int32_t>(n);
      live = &every;
    }
    const std::vector<int32_t> &rows_of = *live;  // computed row j is hypothesis rows_of[j]
    const size_t M = rows_of.size();
    if (M < N) {  // the rows left out: no candidate, no attention
      for (size_t n = 0, j = 0; n < N; ++n) {
        if (j < M && static_cast<size_t>(rows_of[j]) == n) {
          ++j;
          continue;
        }
        std::fill(out.top_values + n * candidates_, out.top_values + (n + 1) * candidates_, -std::numeric_limits<float>::infinity());
        std::fill(out.top_ids + n * candidates_, out.top_ids + (n + 1) * candidates_, 0);
      }
    }
    size_t longest = 0;
    for (size_t b = 0; b < B; ++b) longest = std::max(longest, lists.times[b].size());
    k_rows.resize(longest + 1), v_rows.resize(longest + 1);
    x.resize(M * d), y.resize(M * d), qkv.resize(M * 3 * d), mixed.resize(M * d), tmp.resize(M * d);
    hidden.resize(M * d_ff_), logits.resize(M * vocab_), row.resize(vocab_);
    scores.resize(static_cast<size_t>(h) * (longest + 1)), probs.resize((K + 1) * S + 1);
    const std::vector<std::vector<int>> &times = lists.times, &sources = lists.sources;
    // Embedding: token row * scale + position row (+ LayerNorm).
    for (size_t j = 0; j < M; ++j) {
      const size_t n = rows_of[j];
      embed(embed_, in.ids[n], in.position[n / K], d, x.data() + j * d);
    }
    first_input(first_norm_, x.data(), M, d, y.data());
    const size_t row_stride = static_cast<size_t>(L) * d;  // one (time, cache row) of the pool
    for (int i = 0; i < L; ++i) {
      const Layer &l = layers_[i];
      // Self-attention: Q (scaled), K, V of the new token in one product.
      apply(l.qkv, y.data(), M, qkv.data(), step);
      for (size_t j = 0; j < M; ++j) {
        const size_t n = rows_of[j];
        const float *q = qkv.data() + j * 3 * d, *k_new = q + d, *v_new = q + 2 * d;
        std::memcpy(out.new_key + (n * L + i) * d, k_new, sizeof(float) * d);
        std::memcpy(out.new_value + (n * L + i) * d, v_new, sizeof(float) * d);
        const std::vector<int> &ts = times[n / K];
        const int32_t *rows = in.cache_rows + n * in.rows_stride;
        const int count = static_cast<int>(ts.size());
        for (int c = 0; c < count; ++c) {
          const size_t t = ts[c], at = (t * R + rows[t]) * row_stride + static_cast<size_t>(i) * d;
          k_rows[c] = in.past_key + at;
          v_rows[c] = in.past_value + at;
        }
        k_.self_attention(q, k_rows.data(), v_rows.data(), count, k_new, v_new, h, dk, scores.data(), mixed.data() + j * d);
      }
      residual(mixed.data(), l.self_out, M, d, pre_norm_, x.data(), y.data(), l.self_norm, tmp, step);
      // Cross-attention over the sentence's source (keys (h, d_k, S), values (h, S, d_k)).
      apply(l.cross_q, y.data(), M, qkv.data(), step);
      const bool aligning = out.attention && i == align_layer_;
      for (size_t b = 0, j = 0; b < B; ++b) {  // a sentence's hypotheses together (its source's keys read once)
        size_t count = 0;  // its computed rows: its first ``count`` beams
        while (j + count < M && static_cast<size_t>(rows_of[j + count]) / K == b) ++count;
        float *align = aligning ? out.attention + b * K * S : nullptr;
        if (align) std::fill(align, align + K * S, 0.f);
        if (count) {
          const size_t mb = in.memory_row ? static_cast<size_t>(in.memory_row[b]) : b;
          k_.cross_attention(qkv.data() + j * d, static_cast<int>(count), in.memory_keys[i] + mb * h * dk * S,
                             in.memory_values[i] + mb * h * S * dk, static_cast<int>(S), sources[b].data(),
                             static_cast<int>(sources[b].size()), h, dk, probs.data(), mixed.data() + j * d, align);
        }
        j += count;
      }
      residual(mixed.data(), l.cross_out, M, d, pre_norm_, x.data(), y.data(), l.cross_norm, tmp, step);
      // Feed-forward.
      apply(l.fc1, y.data(), M, hidden.data(), step);
      activate(activation_, hidden.data(), M * d_ff_);
      residual(hidden.data(), l.fc2, M, d, pre_norm_, x.data(), y.data(), l.ffn_norm, tmp, step);
    }
    if (final_norm_) norm_rows(*final_norm_, y.data(), M, d, y.data());
    if (!in.vocabulary) {
      project(nullptr, y.data(), rows_of.data(), M, out, step, logits, row);
      return;
    }
    // Rows by their sentence's vocabulary (-1: the whole one), each set gathered and projected.
    thread_local std::vector<float> picked;
    thread_local std::vector<int32_t> hypotheses;
    for (int v = -1; v < static_cast<int>(restrictions_.size()); ++v) {
      hypotheses.clear();
      picked.resize(M * d);
      for (size_t j = 0; j < M; ++j) {
        if (in.vocabulary[rows_of[j] / K] != v) continue;
        std::memcpy(picked.data() + hypotheses.size() * d, y.data() + j * d, sizeof(float) * d);
        hypotheses.push_back(rows_of[j]);
      }
      if (hypotheses.empty()) continue;
      project(v < 0 ? nullptr : restrictions_[v].get(), picked.data(), hypotheses.data(), hypotheses.size(), out, step,
              logits, row);
    }
  }

  // The projection of M rows y (M, d), hypotheses hyp[M], onto the whole vocabulary or ``r``'s:
  // each row's log-softmax and top-k (candidates as token ids); rows go to the step's threads when
  // it shares (each chunk its own scratch row where the full log-probs are not an output; a
  // restricted row's full log-probs are -inf off its vocabulary).
  void project(const Restriction *r, const float *y, const int32_t *hyp, size_t M, const Outputs &out,
               const Team::Step &step, std::vector<float> &logits, std::vector<float> &row) const {
    const Linear &gen = r ? r->generator : generator_;
    const int V = gen.N;
    const float *mask = r ? r->mask.data() : logits_mask_;
    const int32_t *ids = r ? r->ids.data() : nullptr;
    logits.resize(M * V);
    apply(gen, y, M, logits.data(), step);
    const int chunks = shares(step, M * V, kShareWork, static_cast<int>(M));
    row.resize(static_cast<size_t>(chunks) * V);
    const float *all_logits = logits.data();
    float *scratch = row.data();
    const int C = candidates_;
    team_.parallel_for(step, chunks, [&, all_logits, scratch, hyp, mask, ids](int c) {
      for (size_t j = c * M / chunks; j < (c + 1) * M / chunks; ++j) {
        const size_t n = hyp[j];
        float *log_probs = out.log_probs && !ids ? out.log_probs + n * vocab_ : scratch + static_cast<size_t>(c) * V;
        k_.log_softmax_top(all_logits + j * V, mask, V, C, log_probs, out.top_values + n * C, out.top_ids + n * C);
        if (!ids) continue;
        for (int i = 0; i < C; ++i) out.top_ids[n * C + i] = ids[out.top_ids[n * C + i]];
        if (out.log_probs) {
          float *full = out.log_probs + n * vocab_;
          std::fill(full, full + vocab_, -std::numeric_limits<float>::infinity());
          for (int i = 0; i < V; ++i) full[ids[i]] = log_probs[i];
        }
      }
    });
  }

  int d_, h_, dk_, n_layers_, vocab_, d_ff_, candidates_, activation_, align_layer_, finite_tokens_ = 0;
  bool pre_norm_, tied_;
  Embedding embed_;
  const float *logits_mask_ = nullptr;
  Linear generator_;
  std::vector<std::unique_ptr<Restriction>> restrictions_;  // set at construction, read-only after
  std::optional<Norm> first_norm_, final_norm_;
  std::vector<Layer> layers_;
};


// The fused CPU encoder graph (cpu_graph.py's build_cpu_encoder) in compiled code: the source's
// embedding, the layers, and every decoder layer's cross-attention keys and values of the memory,
// from the graph's own weights. Only each sentence's real tokens (ids other than the padding id)
// are computed: a token attends its sentence's real tokens alone (what the graph's key mask does),
// each product's row is its token's alone, so a sentence's memory is the same bits alone and in any
// batch, by construction. The memory's padding positions are zeros (the decoder never reads them).
class EncoderStep : Products {
 public:
  // ``table_from``: a DecoderStep whose embedding is the tied int8 projection's panels, where the
  // config says the source's table is that one (read_cpu_encoder checked the same codes and scales).
  EncoderStep(const py::dict &config, const py::dict &weights, const py::object &table_from)
      : Products("native encoder") {
    auto cfg = [&](const char *key) { return config[key]; };
    d_ = cfg("d_model").cast<int>();
    h_ = cfg("heads").cast<int>();
    dk_ = d_ / h_;
    n_layers_ = cfg("layers").cast<int>();
    memory_layers_ = cfg("memory_layers").cast<int>();
    d_ff_ = cfg("d_ff").cast<int>();
    activation_ = cfg("activation").cast<int>();
    pre_norm_ = cfg("pre_norm").cast<bool>();
    pad_id_ = cfg("pad_id").cast<int>();
    if (d_ % h_ || n_layers_ < 1 || memory_layers_ < 1 || activation_ < 0 || activation_ > 2) {
      fail("inconsistent configuration");
    }
    const py::dict eps = config["eps"].cast<py::dict>();
    const bool shared = config.contains("embed_from_decoder") && cfg("embed_from_decoder").cast<bool>();
    embed_ = embedding(weights, eps, d_, cfg("embed_scale").cast<float>(), cfg("position_offset").cast<int>(), shared);
    if (shared) {
      const Linear *table = table_from.is_none() ? nullptr : table_from.cast<const DecoderStep &>().packed_table();
      if (!table) fail("no decoder's table to share");
      use_packed(embed_, *table, d_);
      keep_.push_back(table_from);  // the decoder's panels live as long as this encoder
    }
    first_norm_ = optional_norm(weights, eps, "first_norm", d_);
    final_norm_ = optional_norm(weights, eps, "final_norm", d_);
    if (pre_norm_ != first_norm_.has_value()) fail("pre-norm needs first_norm");
    for (int i = 0; i < n_layers_; ++i) {
      const std::string p = std::to_string(i) + ".";
      Layer l;
      l.qkv = linear(weights, p + "qkv", d_, 3 * d_, true);
      l.out = linear(weights, p + "self_out", d_, d_, false);
      l.fc1 = linear(weights, p + "fc1", d_, d_ff_, false);
      l.fc2 = linear(weights, p + "fc2", d_ff_, d_, false);
      l.self_norm = norm(weights, eps, p + "self_norm", d_);
      l.ffn_norm = norm(weights, eps, p + "ffn_norm", d_);
      layers_.push_back(l);
    }
    // The memory's K and V, one product per decoder layer (columns [2 i d, 2 (i + 1) d) of the
    // graph's one): a buffer of N x 2d instead of N x 2Ld (NLLB-200: 12x smaller), the same bits.
    for (int i = 0; i < memory_layers_; ++i) {
      memory_.push_back(linear_columns(weights, "memory_kv", d_, 2 * memory_layers_ * d_, 2 * i * d_, 2 * (i + 1) * d_, true));
    }
  }

  using Products::kernels_name;

  // src_ids (B, S) int32 -> (memory keys, memory values): per decoder layer (B, h, d_k, S) and
  // (B, h, S, d_k), as the encoder graph's outputs.
  py::tuple run(const py::array &src_ids) const {
    if (src_ids.ndim() != 2) fail("src_ids must be (B, S)");
    const py::ssize_t B = src_ids.shape(0), S = src_ids.shape(1);
    const int32_t *ids = checked<int32_t>(src_ids, "src_ids", {B, S}, what_);
    if (S + embed_.offset > embed_.position_rows) {
      fail("a source of " + std::to_string(S) + " tokens is longer than the position table");
    }
    // Each sentence's real tokens: their positions, and their rows in the batch's product rows.
    std::vector<int> first(B + 1, 0), positions;
    for (py::ssize_t b = 0; b < B; ++b) {
      for (py::ssize_t s = 0; s < S; ++s) {
        const int32_t id = ids[b * S + s];
        if (id < 0 || id >= embed_.rows) fail("a token id is out of range");
        if (id != pad_id_) positions.push_back(static_cast<int>(s));
      }
      first[b + 1] = static_cast<int>(positions.size());
    }
    std::vector<py::array_t<float>> keys, values;
    for (int i = 0; i < memory_layers_; ++i) {
      keys.emplace_back(std::vector<py::ssize_t>{B, h_, dk_, S});
      values.emplace_back(std::vector<py::ssize_t>{B, h_, S, dk_});
    }
    std::vector<float *> key_out, value_out;
    for (int i = 0; i < memory_layers_; ++i) {
      key_out.push_back(keys[i].mutable_data());
      value_out.push_back(values[i].mutable_data());
      std::fill(key_out.back(), key_out.back() + B * h_ * dk_ * S, 0.f);
      std::fill(value_out.back(), value_out.back() + B * h_ * S * dk_, 0.f);
    }
    {
      py::gil_scoped_release release;
      compute(ids, B, S, first, positions, key_out, value_out);
    }
    py::list k, v;
    for (int i = 0; i < memory_layers_; ++i) k.append(keys[i]), v.append(values[i]);
    return py::make_tuple(k, v);
  }

 private:
  struct Layer {
    Linear qkv, out, fc1, fc2;
    Norm self_norm, ffn_norm;  // the residuals' norms (pre-norm: the next sublayer's, the last the final)
  };

  void compute(const int32_t *ids, size_t B, size_t S, const std::vector<int> &first, const std::vector<int> &positions,
               const std::vector<float *> &key_out, const std::vector<float *> &value_out) const {
    const Team::Step step(team_);
    const size_t N = positions.size();
    const int d = d_, h = h_, dk = dk_;
    if (N == 0) return;
    size_t longest = 0;
    for (size_t b = 0; b < B; ++b) longest = std::max(longest, static_cast<size_t>(first[b + 1] - first[b]));
    thread_local std::vector<float> x, y, qkv, mixed, tmp, hidden, kv, keys, vals, work;  // capacity kept between calls
    thread_local std::vector<int> order;
    x.resize(N * d), y.resize(N * d), qkv.resize(N * 3 * d), mixed.resize(N * d), tmp.resize(N * d);
    hidden.resize(N * d_ff_), kv.resize(N * 2 * d), keys.resize(static_cast<size_t>(d) * longest);
    vals.resize(static_cast<size_t>(d) * longest), work.resize((longest + 1) * longest + 1), order.resize(longest);
    for (size_t c = 0; c < longest; ++c) order[c] = static_cast<int>(c);
    // Embedding: token row * scale + position row (+ LayerNorm).
    for (size_t b = 0; b < B; ++b) {
      for (int n = first[b]; n < first[b + 1]; ++n) {
        embed(embed_, ids[b * S + positions[n]], positions[n], d, x.data() + static_cast<size_t>(n) * d);
      }
    }
    first_input(first_norm_, x.data(), N, d, y.data());
    for (const Layer &l : layers_) {
      apply(l.qkv, y.data(), N, qkv.data(), step);
      for (size_t b = 0; b < B; ++b) {  // a sentence's tokens attend each other: keys (h, d_k, n), values (h, n, d_k)
        const int n0 = first[b], n = first[b + 1] - first[b];
        if (n == 0) continue;
        for (int t = 0; t < n; ++t) {
          const float *row = qkv.data() + static_cast<size_t>(n0 + t) * 3 * d;
          for (int j = 0; j < h; ++j) {
            for (int c = 0; c < dk; ++c) {
              keys[(static_cast<size_t>(j) * dk + c) * n + t] = row[d + j * dk + c];
              vals[(static_cast<size_t>(j) * n + t) * dk + c] = row[2 * d + j * dk + c];
            }
          }
        }
        // The queries are the qkv rows' first d columns: copied to rows of d for the kernel.
        for (int t = 0; t < n; ++t) std::memcpy(tmp.data() + static_cast<size_t>(t) * d, qkv.data() + static_cast<size_t>(n0 + t) * 3 * d, sizeof(float) * d);
        k_.cross_attention(tmp.data(), n, keys.data(), vals.data(), n, order.data(), n, h, dk, work.data(),
                           mixed.data() + static_cast<size_t>(n0) * d, nullptr);
      }
      residual(mixed.data(), l.out, N, d, pre_norm_, x.data(), y.data(), l.self_norm, tmp, step);
      apply(l.fc1, y.data(), N, hidden.data(), step);
      activate(activation_, hidden.data(), N * d_ff_);
      residual(hidden.data(), l.fc2, N, d, pre_norm_, x.data(), y.data(), l.ffn_norm, tmp, step);
    }
    if (final_norm_) norm_rows(*final_norm_, y.data(), N, d, y.data());
    // Every decoder layer's cross-attention K and V of the memory: (N, 2d) a layer, then each
    // token's into its sentence's position.
    for (int i = 0; i < memory_layers_; ++i) {
      apply(memory_[i], y.data(), N, kv.data(), step);
      for (size_t b = 0; b < B; ++b) {
        float *ko = key_out[i] + b * h * dk * S, *vo = value_out[i] + b * h * S * dk;
        for (int n = first[b]; n < first[b + 1]; ++n) {
          const size_t s = positions[n];
          const float *k_row = kv.data() + static_cast<size_t>(n) * 2 * d, *v_row = k_row + d;
          for (int j = 0; j < h; ++j) {
            for (int c = 0; c < dk; ++c) ko[(static_cast<size_t>(j) * dk + c) * S + s] = k_row[j * dk + c];
            std::memcpy(vo + (static_cast<size_t>(j) * S + s) * dk, v_row + j * dk, sizeof(float) * dk);
          }
        }
      }
    }
    // A long batch's buffers are not kept for the next (a server's memory would stay at its
    // largest batch's: NLLB-200, 8 sentences of 100 tokens, ~40 MB a decode loop); small ones are.
    size_t held = 0;
    for (const auto *v : {&x, &y, &qkv, &mixed, &tmp, &hidden, &kv, &keys, &vals, &work}) held += v->capacity() * sizeof(float);
    if (held > kKeptBytes) {
      for (auto *v : {&x, &y, &qkv, &mixed, &tmp, &hidden, &kv, &keys, &vals, &work}) std::vector<float>().swap(*v);
    }
  }
  static constexpr size_t kKeptBytes = size_t{16} << 20;

  int d_, h_, dk_, n_layers_, memory_layers_, d_ff_, activation_;
  bool pre_norm_;
  int pad_id_;
  Embedding embed_;
  std::optional<Norm> first_norm_, final_norm_;
  std::vector<Layer> layers_;
  std::vector<Linear> memory_;  // per decoder layer: its K and V of the memory
};
}  // namespace

void register_decoder_step(py::module_ &module) {
  module.def("kernels", [] { return std::string(kernels().name); },
             "The instruction set the decoder step's kernels were chosen for on this CPU.");
  module.def("step_threads", [] { return Team::team().helpers() + 1; },
             "Threads a decoder step may use when no other step runs (NMTSERVE_NATIVE_STEP_THREADS; team.h).");
  module.def("set_step_threads", [](int threads) { Team::team().set_helpers(threads - 1); }, py::arg("threads"),
             "Set the threads a lone decoder step may use (1: never share); call with no step running.");
  module.def("engage", [](int delta) { Team::team().engage(delta); }, py::arg("delta"),
             "A decode loop has sentences (+1) or is idle again (-1): a step lends idle cores only while "
             "no other loop is busy (team.h).");
  module.def(
      "loop_clock",
      [](bool reset) {
        py::dict d;
        d["calls"] = loop_clock.calls.load(), d["steps"] = loop_clock.steps.load();
        d["kernels_ns"] = loop_clock.kernels_ns.load(), d["total_ns"] = loop_clock.total_ns.load();
        d["dead_rows"] = loop_clock.dead_rows.load(), d["parked_rows"] = loop_clock.parked_rows.load();
        if (reset) {
          loop_clock.calls = 0, loop_clock.steps = 0, loop_clock.kernels_ns = 0, loop_clock.total_ns = 0;
          loop_clock.dead_rows = 0, loop_clock.parked_rows = 0;
        }
        return d;
      },
      py::arg("reset") = false,
      "DecoderStep.run_steps' calls, steps and nanoseconds (in the decoder's kernels and in all), and the dead "
      "beams' rows it left out (bench/step_profile.py).");
  module.def("step_chunks_helped", [] { return Team::team().helped(); },
             "Chunks of decoder steps that helper threads ran since the module loaded.");
  py::class_<EncoderStep>(module, "EncoderStep",
                          "The fused CPU encoder graph in compiled code, from its weights (batch-invariant).")
      .def(py::init<const py::dict &, const py::dict &, const py::object &>(), py::arg("config"), py::arg("weights"),
           py::arg("table_from") = py::none())
      .def_property_readonly("kernels", [](const EncoderStep &s) { return s.kernels_name(); })
      .def("run", &EncoderStep::run, py::arg("src_ids"),
           "src_ids (B, S) int32 -> (memory keys, memory values): per decoder layer (B, h, d_k, S) / (B, h, S, d_k).");
  py::class_<DecoderStep>(module, "DecoderStep",
                          "The fused CPU decoder graph's step in compiled code, from its weights (batch-invariant).")
      .def(py::init<const py::dict &, const py::dict &>(), py::arg("config"), py::arg("weights"))
      .def_property_readonly("kernels", [](const DecoderStep &s) { return s.kernels_name(); })
      .def("run", &DecoderStep::run, py::arg("input_ids"), py::arg("position"), py::arg("past_key"),
           py::arg("past_value"), py::arg("cache_rows"), py::arg("past_mask"), py::arg("memory_keys"),
           py::arg("memory_values"), py::arg("src_mask"), py::arg("attention") = false, py::arg("log_probs") = false,
           py::arg("vocabularies") = py::none(),
           "One step: the decoder graph's outputs by name (attention and log_probs when asked); sentence b's "
           "candidates from restricted vocabulary vocabularies[b] (int32, -1: the whole) where given.")
      .def_property_readonly("restrictions", [](const DecoderStep &s) { return s.restriction_sizes(); },
                             "The sizes of the restricted vocabularies given at construction (config's vocabularies).")
      .def("run_pool", &DecoderStep::run_pool, py::arg("b"), py::arg("g"), py::arg("tokens"), py::arg("steps"),
           py::arg("pool_key"), py::arg("pool_value"), py::arg("table"), py::arg("start"), py::arg("src_len"),
           py::arg("memory_keys"), py::arg("memory_values"), py::arg("attention") = false, py::arg("log_probs") = false,
           py::arg("memory_rows") = py::none(), py::arg("vocabularies") = py::none(),
           "The served engine's step on its own arrays: rows [0, b) at pool time g (sentence s's memory at row "
           "memory_rows[s], or s); the new K/V into the pool and the table; returns top_log_probs, top_ids (and "
           "attention, log_probs when asked).")
      .def("run_steps", &DecoderStep::run_steps, py::arg("search"), py::arg("b"), py::arg("g"), py::arg("t_lo"),
           py::arg("max_steps"), py::arg("interrupt"), py::arg("vocab"), py::arg("pool_key"), py::arg("pool_value"),
           py::arg("table"), py::arg("start"), py::arg("src_len"), py::arg("memory_keys"), py::arg("memory_values"),
           py::arg("loops"), py::arg("confidence"), py::arg("attention"), py::arg("full_steps"), py::arg("park") = 1,
           py::arg("park_steps") = 0, py::arg("memory_rows") = py::none(), py::arg("vocabularies") = py::none(),
           "The engine's steps from pool time g with no Python between them: each run_pool's step, the search's "
           "compiled step (a Step of the group's BeamBatch) and the ancestor table; stops once park sentences are "
           "done (or all, or park_steps steps after the first was; done ones wait uncomputed), before the pool's "
           "last time, after max_steps, or once interrupt[0] is set. Returns the steps run.");
}

}  // namespace nmtnative
