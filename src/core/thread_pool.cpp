#include "core/thread_pool.h"

#include <memory>

namespace hibana {

namespace {
// Set while a thread runs items of a parallel loop: a nested parallel_for then runs inline
// instead of waiting for workers that are busy with the outer loop.
thread_local bool t_in_parallel_region = false;

struct RegionGuard {
  bool saved = t_in_parallel_region;
  RegionGuard() { t_in_parallel_region = true; }
  ~RegionGuard() { t_in_parallel_region = saved; }
};
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_items() {
  RegionGuard guard;
  for (;;) {
    int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= job_size_) break;
    try {
      (*job_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      // A loop whose items are all claimed may already be over: its caller does not wait for
      // a worker not yet counted, and may post the next loop at once. Joining it would claim a
      // stale index from the spent counter and could run that index of the next loop a second
      // time. Counted here, while items are left, the worker holds the caller until it leaves.
      if (next_.load() >= job_size_) continue;
      ++active_;
    }
    run_items();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty() || t_in_parallel_region) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    next_.store(0);
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  run_items();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_ == 0 && next_.load() >= job_size_; });
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

namespace {
int g_thread_count = 0;
}

void set_default_thread_count(int threads) {
  g_thread_count = threads;
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool(g_thread_count);
  return pool;
}

}  // namespace hibana
