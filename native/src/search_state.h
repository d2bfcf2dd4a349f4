// The beam search's state as the compiled step sees it: views of a BeamBatch's arrays and the
// step's rules, repeated rule for rule from search.py (search_step.cpp's text says how, and binds
// them; decoder_step.cpp's ``run_steps`` runs them between decoder steps with no Python between).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nmtnative {

namespace py = pybind11;

constexpr int kFairseq = 1;  // search.RULES index
constexpr int kOpenNMT = 2;
constexpr double kInf = std::numeric_limits<double>::infinity();

// A C-contiguous view of one of the batch's arrays, checked for its dtype.
template <typename T>
struct View {
  T *data = nullptr;
  py::ssize_t dim1 = 1, dim2 = 1;  // sizes of the trailing dimensions (row stride = dim1 * dim2)
  py::array keep;

  View() = default;
  View(const py::object &array, const char *name) {
    auto a = py::array::ensure(array);
    if (!a || !py::isinstance<py::array_t<T>>(a) || !(a.flags() & py::array::c_style)) {
      throw std::invalid_argument(std::string("BeamBatch.") + name + " has an unexpected dtype or layout");
    }
    keep = a;
    data = static_cast<T *>(a.mutable_data());
    if (a.ndim() > 1) dim1 = a.shape(1);
    if (a.ndim() > 2) dim2 = a.shape(2);
  }
  T &operator()(py::ssize_t i) const { return data[i]; }
  T &operator()(py::ssize_t i, py::ssize_t j) const { return data[i * dim1 + j]; }
  T &operator()(py::ssize_t i, py::ssize_t j, py::ssize_t k) const { return data[(i * dim1 + j) * dim2 + k]; }
};

template <typename T>
View<T> field(const py::object &batch, const char *name) {
  return View<T>(batch.attr(name), name);
}

// The batch's arrays, viewed once (``BeamBatch._grow`` makes a new Step when it replaces them).
struct Step {
  py::ssize_t k;
  int64_t eos;
  View<double> scores, penalty, pool_worst, cumulative;
  View<int64_t> tokens, parents, t, max_len, min_len, n_forced, prompt, pool_size, pool_capacity, loop_repeats,
      loop_ngram;
  View<int8_t> rule, stopping;
  View<bool> done, top_finished, align, confident;
  View<int32_t> sequences, forced;
  View<int16_t> aligned;
  // The pools (BeamBatch's text): per row its size; per slot (row, P + 1) and (row, P + 1, T).
  View<int64_t> pool_keep, fin_order, fin_len, fin_met;
  View<double> fin_score, fin_sum, fin_totals;
  View<int8_t> fin_flags;
  View<int32_t> fin_tokens;
  View<int16_t> fin_align;
  // The last ranking, (b, n) row-major: what ``apply`` applies.
  py::ssize_t ranked_rows = 0, n = 0;
  std::vector<int64_t> top_beam, top_token;
  std::vector<double> top_score;
  std::vector<char> ends, finishing;
  std::vector<std::pair<double, int64_t>> cands;
  std::vector<int64_t> parents_buf, tokens_buf;
  std::vector<double> scores_buf;
  std::vector<int32_t> seq_copy;
  std::vector<int16_t> aligned_copy;
  std::vector<double> cumulative_copy;

  explicit Step(const py::object &o)
      : k(o.attr("k").cast<py::ssize_t>()),
        eos(o.attr("eos_id").cast<int64_t>()),
        scores(field<double>(o, "scores")),
        penalty(field<double>(o, "penalty")),
        pool_worst(field<double>(o, "pool_worst")),
        cumulative(field<double>(o, "cumulative")),
        tokens(field<int64_t>(o, "tokens")),
        parents(field<int64_t>(o, "parents")),
        t(field<int64_t>(o, "t")),
        max_len(field<int64_t>(o, "max_len")),
        min_len(field<int64_t>(o, "min_len")),
        n_forced(field<int64_t>(o, "n_forced")),
        prompt(field<int64_t>(o, "prompt")),
        pool_size(field<int64_t>(o, "pool_size")),
        pool_capacity(field<int64_t>(o, "pool_capacity")),
        loop_repeats(field<int64_t>(o, "loop_repeats")),
        loop_ngram(field<int64_t>(o, "loop_ngram")),
        rule(field<int8_t>(o, "rule")),
        stopping(field<int8_t>(o, "stopping")),
        done(field<bool>(o, "done")),
        top_finished(field<bool>(o, "top_finished")),
        sequences(field<int32_t>(o, "sequences")),
        forced(field<int32_t>(o, "forced")),
        aligned(field<int16_t>(o, "aligned")),
        pool_keep(field<int64_t>(o, "pool_keep")),
        fin_order(field<int64_t>(o, "fin_order")),
        fin_len(field<int64_t>(o, "fin_len")),
        fin_met(field<int64_t>(o, "fin_met")),
        fin_score(field<double>(o, "fin_score")),
        fin_sum(field<double>(o, "fin_sum")),
        fin_totals(field<double>(o, "fin_totals")),
        fin_flags(field<int8_t>(o, "fin_flags")),
        fin_tokens(field<int32_t>(o, "fin_tokens")),
        fin_align(field<int16_t>(o, "fin_align")),
        parents_buf(k), tokens_buf(k), scores_buf(k) {
    align = field<bool>(o, "align");
    confident = field<bool>(o, "confident");
    if (fin_tokens.dim2 < sequences.dim2 || fin_order.dim1 != fin_tokens.dim1) {
      throw std::invalid_argument("BeamBatch's pools do not match its sequences");
    }
  }

  // Rows a step leaves exactly as they are (DecoderStep::run_steps' parked sentences: done, waiting
  // for the engine to retire them), or null: every row of [0, b) steps.
  const char *parked = nullptr;
  bool steps_row(py::ssize_t row) const { return parked == nullptr || !parked[row]; }

  // The length the penalty sees: generated tokens after the prompt; OpenNMT's counts the start token.
  int64_t counted(py::ssize_t row) const {
    return std::max<int64_t>(t(row) + 1 - prompt(row), 1) + (rule(row) == kOpenNMT ? 1 : 0);
  }

  // Whether the candidate ``token`` from ``beam`` makes the hypothesis end with the same block of
  // n <= loop_ngram tokens written loop_repeats times in a row (search.BeamBatch._loops_one).
  bool looped(py::ssize_t row, int64_t step, int64_t beam, int64_t token) const {
    const int64_t repeats = loop_repeats(row);
    const int32_t *seq = &sequences(row, beam, 0);
    for (int64_t n = 1; n <= loop_ngram(row); ++n) {
      if (step + 1 < repeats * n || token != seq[step - n]) continue;
      bool periodic = true;
      for (int64_t i = step + 1 - (repeats - 1) * n; i < step && periodic; ++i) periodic = seq[i] == seq[i - n];
      if (periodic) return true;
    }
    return false;
  }

  // search.BeamBatch._cannot_improve_one, after this step's pool and top_finished.
  bool cannot_improve(py::ssize_t row, double best_running, int64_t counted_length) const {
    if (pool_size(row) < pool_capacity(row)) return false;
    if (rule(row) == kOpenNMT) return top_finished(row);
    const int stop = stopping(row);
    if (stop == 1) return true;
    const double p = penalty(row);
    const double length = (stop == 2 && p > 0) ? static_cast<double>(max_len(row) - prompt(row))
                                                : static_cast<double>(counted_length);
    return best_running / std::pow(length, p) <= pool_worst(row);
  }

  // Rows [0, b) ranked: each row's best n = min(2K, K m) continuations (score desc, then the lower
  // index in the (K, V) layout), forced prefix tokens, OpenNMT's cut, which end the hypothesis
  // (EOS or the loop cut) and which finish. Returns whether any finishes.
  bool rank(py::ssize_t b, const double *val, const int64_t *tok, py::ssize_t m, int64_t vocab, bool loops) {
    ranked_rows = b;
    n = std::min<py::ssize_t>(2 * k, k * m);
    const size_t size = static_cast<size_t>(b * n);
    top_beam.resize(size);
    top_token.resize(size);
    top_score.resize(size);
    ends.resize(size);
    finishing.resize(size);
    cands.resize(static_cast<size_t>(k * m));
    bool any = false;
    for (py::ssize_t row = 0; row < b; ++row) {
      if (!steps_row(row)) {  // parked: nothing ranked, nothing finishes
        std::fill_n(finishing.begin() + row * n, n, false);
        continue;
      }
      const int64_t step = t(row);
      const bool no_eos = step < min_len(row);  // below min_length EOS has probability 0
      const bool only_eos = rule(row) == kFairseq && step + 1 >= max_len(row);
      for (py::ssize_t beam = 0; beam < k; ++beam) {
        const double running = scores(row, beam);
        const double *v = val + (row * k + beam) * m;
        const int64_t *id = tok + (row * k + beam) * m;
        bool forced_eos = false;  // fairseq's last step: EOS or nothing, where EOS is a candidate
        if (only_eos) forced_eos = std::find(id, id + m, eos) != id + m;
        for (py::ssize_t j = 0; j < m; ++j) {
          const bool banned = (no_eos && id[j] == eos) || (forced_eos && id[j] != eos);
          cands[beam * m + j] = {-(running + (banned ? -kInf : v[j])), beam * vocab + id[j]};
        }
      }
      std::partial_sort(cands.begin(), cands.begin() + n, cands.end());
      const bool forcing = step < n_forced(row);
      const bool at_max = step + 1 >= max_len(row);
      const bool opennmt = rule(row) == kOpenNMT;
      const bool loop_cut = loops && loop_repeats(row) && step >= n_forced(row);
      for (py::ssize_t j = 0; j < n; ++j) {
        int64_t beam = cands[j].second / vocab, token = cands[j].second % vocab;
        double score = -cands[j].first;
        if (opennmt && j >= k) score = -kInf;  // OpenNMT keeps its top K candidates only
        if (forcing) {  // a prefix token: every beam continues itself with it, adding 0
          beam = j < k ? j : 0;
          token = forced(row, step);
          score = j < k ? scores(row, j) : -kInf;
        }
        const bool end = token == eos || (loop_cut && looped(row, step, beam, token));
        const size_t at = static_cast<size_t>(row * n + j);
        top_beam[at] = beam;
        top_token[at] = token;
        top_score[at] = score;
        ends[at] = end;
        finishing[at] = j < k && (end || at_max) && score > -kInf;
        any = any || finishing[at];
      }
    }
    return any;
  }

  // The hypotheses of the last ranking that finish, into their rows' pools in rank order
  // (search.BeamBatch._finish_one and _pool_add): fairseq keeps its first pool_keep; a pool with
  // room takes a hypothesis, a full one when it beats the worst; over pool_keep the live slots are
  // sorted best first (stable) and the last dropped. Reads the beams before ``apply`` moves them.
  void finish(const int16_t *attention) {
    for (py::ssize_t row = 0; row < ranked_rows; ++row) {
      if (!steps_row(row)) continue;
      const int64_t step = t(row), counted_length = counted(row);
      const double length_penalty = std::pow(static_cast<double>(counted_length), penalty(row));
      for (py::ssize_t j = 0; j < n; ++j) {
        const size_t at = static_cast<size_t>(row * n + j);
        if (!finishing[at]) continue;
        const int64_t keep = pool_keep(row);
        int64_t size = pool_size(row);
        if (rule(row) == kFairseq && size >= keep) break;  // fairseq finalizes the first K and no more
        const double sum = top_score[at], score = sum / length_penalty;
        int64_t *order = &fin_order(row, 0);
        if (size >= keep && !(score > worst(row, size))) continue;
        const int64_t slot = order[size], beam = top_beam[at], length = step + 1;
        int32_t *out = &fin_tokens(row, slot, 0);
        std::copy_n(&sequences(row, beam, 0), step, out);
        out[step] = static_cast<int32_t>(top_token[at]);
        int8_t flags = 0;
        if (attention && align(row)) {
          int16_t *where = &fin_align(row, slot, 0);
          std::copy_n(&aligned(row, beam, 0), step, where);
          where[step] = attention[row * k + beam];
          flags |= 1;
        }
        if (confident(row)) {
          double *totals = &fin_totals(row, slot, 0);
          std::copy_n(&cumulative(row, beam, 0), step, totals);
          totals[step] = sum;
          flags |= 2;
        }
        fin_len(row, slot) = length;
        fin_score(row, slot) = score;
        fin_sum(row, slot) = sum;
        fin_met(row, slot) = -1;
        fin_flags(row, slot) = flags;
        if (++size > keep) {
          std::stable_sort(order, order + size,
                           [&](int64_t a, int64_t c) { return fin_score(row, a) > fin_score(row, c); });
          --size;
        }
        pool_size(row) = size;
        pool_worst(row) = size >= keep ? worst(row, size) : -kInf;
      }
    }
  }

  // One step of rows [0, b) on their candidates (b, K, m): ranked, the finishing ones into their
  // pools, applied (search_step.cpp's ``step`` and DecoderStep::run_steps both take it).
  void advance(py::ssize_t b, const double *val, const int64_t *tok, py::ssize_t m, int64_t vocab, bool loops,
               const int16_t *attention, bool confidence) {
    if (rank(b, val, tok, m, vocab, loops)) finish(attention);
    apply(attention, confidence);
  }

  // The lowest score among a row's ``size`` live hypotheses.
  double worst(py::ssize_t row, int64_t size) const {
    double low = kInf;
    for (int64_t i = 0; i < size; ++i) low = std::min(low, fin_score(row, fin_order(row, i)));
    return low;
  }

  // The last ranking applied to rows [0, b) once its finishing candidates are in their pools: the
  // first K candidates that run on become the beams (dead ones: EOS, parent 0, -inf), each beam's
  // tokens (alignments, running scores) follow its parent, and the stopping rules mark ``done``.
  void apply(const int16_t *attention, bool confidence) {
    const py::ssize_t b = ranked_rows;
    int64_t width = 0;  // reorder only the steps some row has taken (as the vectorized step)
    for (py::ssize_t row = 0; row < b; ++row)
      if (steps_row(row)) width = std::max(width, t(row));
    seq_copy.resize(static_cast<size_t>(k * width));
    if (attention) aligned_copy.resize(static_cast<size_t>(k * width));
    if (confidence) cumulative_copy.resize(static_cast<size_t>(k * width));
    for (py::ssize_t row = 0; row < b; ++row) {
      if (!steps_row(row)) continue;
      const int64_t step = t(row);
      py::ssize_t chosen = 0;
      for (py::ssize_t j = 0; j < n && chosen < k; ++j) {
        const size_t at = static_cast<size_t>(row * n + j);
        if (ends[at]) continue;
        parents_buf[chosen] = top_beam[at];
        tokens_buf[chosen] = top_token[at];
        scores_buf[chosen] = top_score[at];
        ++chosen;
      }
      for (; chosen < k; ++chosen) {  // dead beams
        parents_buf[chosen] = 0;
        tokens_buf[chosen] = eos;
        scores_buf[chosen] = -kInf;
      }
      for (py::ssize_t beam = 0; beam < k; ++beam) {
        const int64_t parent = parents_buf[beam];
        std::copy_n(&sequences(row, parent, 0), width, &seq_copy[beam * width]);
        if (attention) std::copy_n(&aligned(row, parent, 0), width, &aligned_copy[beam * width]);
        if (confidence) std::copy_n(&cumulative(row, parent, 0), width, &cumulative_copy[beam * width]);
      }
      for (py::ssize_t beam = 0; beam < k; ++beam) {
        std::copy_n(&seq_copy[beam * width], width, &sequences(row, beam, 0));
        sequences(row, beam, step) = static_cast<int32_t>(tokens_buf[beam]);
        if (attention) {
          std::copy_n(&aligned_copy[beam * width], width, &aligned(row, beam, 0));
          aligned(row, beam, step) = attention[row * k + parents_buf[beam]];
        }
        if (confidence) {
          std::copy_n(&cumulative_copy[beam * width], width, &cumulative(row, beam, 0));
          cumulative(row, beam, step) = scores_buf[beam];
        }
        tokens(row, beam) = tokens_buf[beam];
        parents(row, beam) = parents_buf[beam];
        scores(row, beam) = scores_buf[beam];
      }
      const int64_t counted_length = counted(row);
      const bool at_max = step + 1 >= max_len(row);
      t(row) = step + 1;
      const size_t first = static_cast<size_t>(row * n);
      top_finished(row) = n > 0 && ends[first] && top_score[first] > -kInf;
      done(row) = at_max || cannot_improve(row, scores_buf[0], counted_length);
    }
  }
};

// The engine's ancestor table after a step (engine.batcher: ``_Group.table`` (capacity, K, time),
// int32): rows [0, b) over times [lo, hi) follow their beams' parents (``BeamBatch.parents``,
// (>= b, K)), but the ``parked`` ones (when given); ``copy`` is scratch.
inline void follow_parents_rows(int32_t *table, py::ssize_t k, py::ssize_t time, const int64_t *parents,
                                py::ssize_t b, py::ssize_t lo, py::ssize_t hi, std::vector<int32_t> &copy,
                                const char *parked = nullptr) {
  const py::ssize_t width = hi - lo;
  copy.resize(static_cast<size_t>(k * width));
  for (py::ssize_t row = 0; row < b; ++row) {
    if (parked && parked[row]) continue;
    int32_t *rows = table + row * k * time;
    for (py::ssize_t beam = 0; beam < k; ++beam) {
      std::copy_n(rows + parents[row * k + beam] * time + lo, width, &copy[beam * width]);
    }
    for (py::ssize_t beam = 0; beam < k; ++beam) std::copy_n(&copy[beam * width], width, rows + beam * time + lo);
  }
}

}  // namespace nmtnative
