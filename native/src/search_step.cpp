// The beam search's step in compiled code (issue 49): nmtserve.decoding.search.BeamBatch's
// ranking of a step's candidates and its bookkeeping after them, on the batch's own arrays.
//
// The Python search (nmtserve/decoding/search.py) stays the reference and its text gives the
// rules; this file and search_state.h repeat them rule for rule, in the same float64 arithmetic, so that a step
// here leaves every array exactly as ``BeamBatch._advance_few`` / the vectorized step leave it
// (tests/test_native_search.py checks it step by step, and the served decodes on the held-out
// sets). A step is one call, ``step(state, ...)``: it ranks, puts the candidates that finish in
// their rows' pools (arrays of the batch, ``BeamBatch._pool_add``'s rules), then applies.
//
// What stays in Python: the repetition controls, terminology constraints and the full-vocabulary
// steps (fairseq's last step); a batch with any of them live takes the Python step.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

#include "search_state.h"

namespace {

using nmtnative::Step;
using nmtnative::View;

using Values = py::array_t<double, py::array::c_style | py::array::forcecast>;
using Ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using Attention = py::array_t<int16_t, py::array::c_style | py::array::forcecast>;

const int16_t *attention_of(const py::object &attention, py::ssize_t b, py::ssize_t k, Attention &keep) {
  if (attention.is_none()) return nullptr;
  keep = Attention::ensure(attention);
  if (!keep || keep.ndim() != 2 || keep.shape(0) < b || keep.shape(1) != k) {
    throw std::invalid_argument("attention must be (size, K) source positions");
  }
  return keep.data();
}

// From this many rows a step lets other Python threads run while it works (the server's second
// decode loop, its request threads): it touches no Python object then. Below, the ~0.2 us the
// hand-over costs is more than the work. ``release_gil_from(n)`` changes it (bench/native_search.py).
py::ssize_t release_rows = 4;

// One step on Candidates: ranked, the finishing candidates into their pools, applied.
void step(Step &self, py::ssize_t b, const Values &values, const Ids &ids, int64_t vocab, bool loops,
          bool confidence, const py::object &attention) {
  if (values.ndim() != 3 || ids.ndim() != 3 || values.shape(0) != b || values.shape(1) != self.k ||
      ids.shape(0) != b || ids.shape(1) != self.k || ids.shape(2) != values.shape(2)) {
    throw std::invalid_argument("candidates must be (size, K, m) values and ids");
  }
  Attention keep;
  const int16_t *positions = attention_of(attention, b, self.k, keep);
  std::optional<py::gil_scoped_release> free;
  if (b >= release_rows) free.emplace();
  self.advance(b, values.data(), ids.data(), values.shape(2), vocab, loops, positions, confidence);
}

// The engine's ancestor table after a step (engine.batcher: ``_Group.table`` (capacity, K, T),
// int32): rows [0, b) over times [lo, hi) follow their beams' parents (``BeamBatch.parents``).
void follow_parents(const py::array_t<int32_t, py::array::c_style> &table_obj,
                    const py::array_t<int64_t, py::array::c_style> &parents_obj, py::ssize_t b, py::ssize_t lo,
                    py::ssize_t hi) {
  py::array_t<int32_t, py::array::c_style> table = table_obj;
  if (table.ndim() != 3 || parents_obj.ndim() != 2 || parents_obj.shape(1) != table.shape(1) ||
      b > table.shape(0) || b > parents_obj.shape(0) || lo < 0 || hi > table.shape(2) || lo > hi) {
    throw std::invalid_argument("follow_parents: table (capacity, K, T), parents (capacity, K), 0 <= lo <= hi <= T");
  }
  std::vector<int32_t> copy;
  std::optional<py::gil_scoped_release> free;
  if (b >= release_rows) free.emplace();
  nmtnative::follow_parents_rows(table.mutable_data(), table.shape(1), table.shape(2), parents_obj.data(), b, lo, hi,
                                 copy);
}

// Rows of many arrays at once (the search's and the engine's per-sentence arrays when sentences
// leave): in each array, row dst[j] = row src[j] (row = the first axis), every source row read
// before any is written (numpy's ``a[dst] = a[src]``). One call instead of one indexing a array.
void move_rows(const std::vector<py::array> &arrays, const py::array_t<int64_t, py::array::c_style> &dst,
               const py::array_t<int64_t, py::array::c_style> &src) {
  if (dst.ndim() != 1 || src.ndim() != 1 || dst.shape(0) != src.shape(0)) {
    throw std::invalid_argument("move_rows: dst and src are int64 vectors of one length");
  }
  const py::ssize_t n = dst.shape(0);
  const int64_t *to = dst.data(), *from = src.data();
  for (const py::array &a : arrays) {
    if (a.ndim() < 1 || !(a.flags() & py::array::c_style) || !a.writeable()) {
      throw std::invalid_argument("move_rows: every array must be writeable and C-contiguous, with rows");
    }
    for (py::ssize_t j = 0; j < n; ++j) {
      if (to[j] < 0 || to[j] >= a.shape(0) || from[j] < 0 || from[j] >= a.shape(0)) {
        throw std::invalid_argument("move_rows: a row is out of range");
      }
    }
  }
  // No source row written before it is read (the usual move: the last live rows into the holes
  // of rows that left): each row straight to its place; else through a copy of the sources.
  bool disjoint = true;
  for (py::ssize_t i = 0; i < n && disjoint; ++i)
    for (py::ssize_t j = 0; j < n; ++j)
      if (to[i] == from[j] && i != j) {
        disjoint = false;
        break;
      }
  std::vector<std::pair<char *, size_t>> blocks;  // each array's data and row bytes
  for (const py::array &a : arrays)
    blocks.emplace_back(static_cast<char *>(const_cast<void *>(a.data())),
                        a.shape(0) ? static_cast<size_t>(a.nbytes() / a.shape(0)) : 0);
  std::vector<char> rows;
  py::gil_scoped_release free;  // plain copies in arrays the caller holds
  for (const auto &[data, row] : blocks) {
    if (disjoint) {
      for (py::ssize_t j = 0; j < n; ++j)
        if (to[j] != from[j]) std::copy_n(data + from[j] * row, row, data + to[j] * row);
      continue;
    }
    rows.resize(row * n);
    for (py::ssize_t j = 0; j < n; ++j) std::copy_n(data + from[j] * row, row, rows.data() + j * row);
    for (py::ssize_t j = 0; j < n; ++j) std::copy_n(rows.data() + j * row, row, data + to[j] * row);
  }
}

}  // namespace

namespace nmtnative {
void register_decoder_step(py::module_ &module);  // decoder_step.cpp
}

PYBIND11_MODULE(nmtserve_native, module) {
  module.doc() = "nmtserve's compiled decode step: the beam search's ranking and bookkeeping (issue 49)";
  module.attr("ABI") = 11;  // bumped when the interface changes: nmtserve.decoding.native refuses another
  py::class_<Step>(module, "Step", "A BeamBatch's arrays, viewed once (a new one after the batch grows).")
      .def(py::init<const py::object &>(), py::arg("batch"));
  module.def("step", &step, py::arg("state"), py::arg("size"), py::arg("values"), py::arg("ids"), py::arg("vocab"),
             py::arg("loops"), py::arg("confidence"), py::arg("attention") = py::none(),
             "One step on candidates: ranked, the finished hypotheses into their rows' pools, applied.");
  module.def(
      "release_gil_from", [](py::ssize_t rows) { release_rows = rows; }, py::arg("rows"),
      "From how many rows a step releases the GIL while it works (default 4; a huge number: never).");
  module.def("follow_parents", &follow_parents, py::arg("table"), py::arg("parents"), py::arg("size"), py::arg("lo"),
             py::arg("hi"), "The engine's ancestor table: rows [0, size) over times [lo, hi) follow their parents.");
  module.def("move_rows", &move_rows, py::arg("arrays"), py::arg("dst"), py::arg("src"),
             "In every array (C-contiguous, rows on the first axis) row dst[j] = row src[j], sources read first.");
  nmtnative::register_decoder_step(module);
}
