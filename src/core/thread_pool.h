// A fixed pool of worker threads running one parallel loop at a time.
// Work items are claimed dynamically; kernels must make every output element depend only on
// its own inputs (never on which thread or in what order items ran), so results are the same
// for any thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hibana {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for i in [0, n), splitting the range over the calling thread and the workers.
  // Exceptions thrown by fn are rethrown (the first one) after every item has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void run_items();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_size_ = 0;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::mutex run_mutex_;  // one parallel_for at a time
};

// The process-wide pool used by the CPU backend (created on first use).
ThreadPool& default_thread_pool();
// Sets the thread count of the default pool; must be called before its first use.
void set_default_thread_count(int threads);

}  // namespace hibana
