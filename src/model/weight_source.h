// Where a model's tensors come from: a checkpoint on disk or a random generator. The
// architecture code asks for tensors by name and expected shape and never cares which.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace hibana {

class Checkpoint;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // A [rows, cols] matrix in its storage dtype (with fp8 block scales when present).
  virtual Weight matrix(const std::string& name, int64_t rows, int64_t cols) = 0;
  // `count` matrices of [rows, cols] stacked in one [count, rows, cols] tensor.
  virtual std::vector<Weight> stacked(const std::string& name, int64_t count, int64_t rows,
                                      int64_t cols) = 0;
  // A float tensor of `numel` elements (any shape with that count) converted to f32.
  // `dummy_value` says how a random model fills it: kOnes, kZeros, or kRandom.
  enum class Fill { ones, zeros, random, log_uniform_1_16 };
  virtual Tensor vector_f32(const std::string& name, int64_t numel, Fill fill) = 0;

  std::vector<std::shared_ptr<void>> owned;  // memory the returned views point into
  size_t matrix_bytes = 0;
};

std::unique_ptr<WeightSource> make_checkpoint_source(std::shared_ptr<Checkpoint> checkpoint);
// Random matrices for benchmarks at real shapes. `pooled` (the weights are to be copied to a
// device): each matrix is a view into a pool of random values (one per column count, as large
// as its largest matrix, page-locked where the GPU backend gives it) instead of memory of its
// own, so the host neither touches nor fills the model's bytes — the 80B's 77.5 GB in fp8 were
// most of a GPU benchmark run's start-up; every matrix still gets its own device copy.
std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed, bool with_mtp,
                                                bool pooled = false);

}  // namespace hibana
