// Idle cores lent to a decoder step (issue 49).
//
// Why: the server runs one decode loop per core (nmtserve/server/triton_models.py cpu_layout), each
// on one thread, so a lone sentence's step ran on one core while the others idled. At one sentence
// a small model's step is bound by reading its weights (the demo's 6.7 MB of fp32 weights a step
// from L3), so a second core with its own caches nearly halves it; CTranslate2 gives a lone
// sentence every intra-op thread. Under load every loop is busy and nothing is lent: the loops
// keep the cores (measured: bench/native_step.py --against one-thread, bench/RESULTS.md).
//
// How: ``Team::team()`` holds helper threads, asleep until a step that may share begins. A step
// begins with a ``Team::Step`` (RAII); it shares when no other decode loop is busy at that moment:
// the load is the larger of the steps running and the loops engaged (``engage``: the engine's
// loops say when they have sentences, so a loop's Python between its steps counts too), and
// helper i joins while the load is at most ``cores - i - 1`` (``cores``: the process's CPU
// affinity count). ``parallel_for(n, fn)`` runs fn(0..n-1): the calling thread and the helpers claim
// chunks from one atomic word (epoch, chunks, next chunk), so a helper that is late, asleep or
// taken back costs nothing but its share; the call returns when every chunk is done. Helpers spin
// while a sharing step runs and a short grace after it (the next step of a lone sentence follows
// ~0.1 ms later), then sleep on a condition variable.
//
// The chunks split a product's output columns by whole panels (kernels.h, int8.h) and the rows of
// per-row work: every value is computed by the same code in the same order whichever thread runs
// it, so a step gives the same bits shared or not (tests/test_native_step.py checks it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace nmtnative {

class Team {
 public:
  static Team &team();

  // A decoder step in progress: counted while it lives; ``shared()``: whether helpers may join it.
  class Step {
   public:
    explicit Step(Team &team);
    ~Step();
    Step(const Step &) = delete;
    Step &operator=(const Step &) = delete;
    bool shared() const { return shared_; }

   private:
    Team &team_;
    bool shared_ = false;
  };

  // fn(chunk) for chunk in [0, n); with helpers when ``step`` shares and n > 1, else in order here.
  template <class F>
  void parallel_for(const Step &step, int n, F &&fn) {
    if (!step.shared() || n <= 1 || n > kMaxChunks) {
      for (int c = 0; c < n; ++c) fn(c);
      return;
    }
    run(n, &call<F>, &fn);
  }

  // Helpers started (0: sharing off); set_helpers stops or starts them (NMTSERVE_NATIVE_STEP_THREADS
  // at load: threads a lone step may use, helpers = threads - 1; default: min(cores, 4)).
  int helpers() const { return static_cast<int>(threads_.size()); }
  void set_helpers(int helpers);
  // A decode loop with work (+1) or idle again (-1): nmtserve/engine/batcher.py's loops.
  void engage(int delta) { engaged_.fetch_add(delta); }
  int load() const {
    const int running = running_.load(), engaged = engaged_.load();
    return running > engaged ? running : engaged;
  }
  // Chunks run by helpers since start (tests and benches: whether sharing happened).
  uint64_t helped() const { return helped_.load(std::memory_order_relaxed); }

 private:
  Team();  // the one Team is never destroyed (team())
  template <class F>
  static void call(const void *fn, int chunk) {
    (*static_cast<F *>(const_cast<void *>(fn)))(chunk);
  }
  void run(int n, void (*call)(const void *, int), const void *fn);
  void help(int index);
  static bool claim(std::atomic<uint64_t> &state, uint64_t s, int &chunk);
  void stop_helpers();

  int cores_ = 1;
  std::vector<std::thread> threads_;
  std::atomic<int> running_{0};      // steps in progress, any thread
  std::atomic<int> engaged_{0};      // decode loops with sentences (engage)
  std::atomic<bool> owned_{false};   // a sharing step is in progress (one at a time)
  std::atomic<bool> quit_{false};
  std::atomic<uint64_t> wake_{0};    // bumped when a sharing step begins (helpers wait for it)
  std::atomic<uint64_t> last_end_ns_{0};
  // The job in one word: epoch (high 32 bits), chunks (16 bits), next chunk (low 16 bits), so a
  // claim sees its job's size with its epoch; its function and context are written before the
  // word is published and used only after a claim in its epoch succeeded (the caller posts no
  // other job before every chunk of this one is done).
  static constexpr int kMaxChunks = 0xFFFF;
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};
  std::atomic<uint64_t> helped_{0};
  std::atomic<void (*)(const void *, int)> call_{nullptr};
  std::atomic<const void *> fn_{nullptr};
  std::mutex mutex_;
  std::condition_variable wake_cv_;
};

}  // namespace nmtnative
