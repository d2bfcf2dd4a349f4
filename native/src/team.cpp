// team.h: idle cores lent to a decoder step.
#include "team.h"

#include <immintrin.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>

namespace nmtnative {
namespace {

// How long helpers keep spinning after a sharing step ends: a lone sentence's next step follows
// after the engine's Python between steps (~0.1 ms, bench/step_profile.py), so they are still
// awake for it; past this they sleep and cost nothing.
constexpr uint64_t kGraceNs = 300'000;
constexpr int kMaxThreads = 16;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

int affinity_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

}  // namespace

Team &Team::team() {
  static Team *team = new Team();  // never destroyed: helpers must not be joined during exit
  return *team;
}

Team::Team() : cores_(affinity_cores()) {
  int threads = cores_ < 4 ? cores_ : 4;
  if (const char *env = std::getenv("NMTSERVE_NATIVE_STEP_THREADS")) {
    const int asked = std::atoi(env);
    if (asked >= 1) threads = asked < kMaxThreads ? asked : kMaxThreads;
  }
  set_helpers(threads - 1);
}

void Team::stop_helpers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_.store(true);
  }
  wake_cv_.notify_all();
  for (std::thread &t : threads_) t.join();
  threads_.clear();
  quit_.store(false);
}

void Team::set_helpers(int helpers) {
  if (helpers < 0) helpers = 0;
  if (helpers > kMaxThreads - 1) helpers = kMaxThreads - 1;
  stop_helpers();
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { help(i); });
}

Team::Step::Step(Team &team) : team_(team) {
  team.running_.fetch_add(1);
  bool free = false;
  if (!team.threads_.empty() && team.load() <= team.cores_ - 1 && team.owned_.compare_exchange_strong(free, true)) {
    shared_ = true;
    {
      std::lock_guard<std::mutex> lock(team.mutex_);
      team.wake_.fetch_add(1);
    }
    team.wake_cv_.notify_all();
  }
}

Team::Step::~Step() {
  if (shared_) {
    team_.last_end_ns_.store(now_ns());
    team_.owned_.store(false);
  }
  team_.running_.fetch_sub(1);
}

// A chunk of the job in ``s`` (a value of ``state``), if one is left and the job is still that one.
bool Team::claim(std::atomic<uint64_t> &state, uint64_t s, int &chunk) {
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(s & 0xFFFF), n = static_cast<uint32_t>((s >> 16) & 0xFFFF);
    if (next >= n) return false;
    const uint64_t expected_epoch = s >> 32;
    if (state.compare_exchange_weak(s, s + 1)) {
      chunk = static_cast<int>(next);
      return true;
    }
    if (s >> 32 != expected_epoch) return false;  // another job now: claim from a fresh look
  }
}

void Team::run(int n, void (*call)(const void *, int), const void *fn) {
  const uint64_t epoch = (state_.load() >> 32) + 1;
  call_.store(call), fn_.store(fn);
  done_.store(0);
  state_.store(epoch << 32 | static_cast<uint64_t>(n) << 16);  // published: chunks 0..n-1 may be claimed
  int chunk;
  while (claim(state_, state_.load(), chunk)) {
    call(fn, chunk);
    done_.fetch_add(1);
  }
  while (done_.load() < n) _mm_pause();  // a helper finishing its chunk
}

void Team::help(int index) {
  uint64_t seen = wake_.load();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_cv_.wait(lock, [&] { return quit_.load() || wake_.load() != seen; });
      if (quit_.load()) return;
    }
    seen = wake_.load();
    // Spin while a sharing step runs (and a grace after it) and this helper's core is free: a
    // load of at most cores - index - 1.
    while (!quit_.load()) {
      if (load() > cores_ - index - 1) break;
      const uint64_t s = state_.load();
      if ((s & 0xFFFF) < ((s >> 16) & 0xFFFF)) {
        // The job's function and context, read before the claim: a claim in this epoch means the
        // job is still this one (its caller waits for every chunk before posting the next).
        void (*call)(const void *, int) = call_.load();
        const void *fn = fn_.load();
        int chunk;
        if (claim(state_, s, chunk)) {
          call(fn, chunk);
          done_.fetch_add(1);
          helped_.fetch_add(1, std::memory_order_relaxed);
        }
        continue;
      }
      if (!owned_.load() && now_ns() - last_end_ns_.load() > kGraceNs) break;
      _mm_pause();
    }
  }
}

}  // namespace nmtnative
