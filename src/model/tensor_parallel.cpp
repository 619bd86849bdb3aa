#include "model/tensor_parallel.h"

#include <algorithm>

#include "core/device_memory.h"
#include "core/error.h"

namespace hibana {

TensorParallel::TensorParallel(const ModelConfig& c, Shard shard)
    : comm(std::move(shard.comm)), plan(shard.plan), local(shard_config(c, plan)) {
  check(comm && plan.ranks == comm->size() && plan.rank == comm->rank(), ErrorKind::internal,
        "the shard plan does not match the communicator");
  for (int r = 0; r < plan.ranks; ++r) {
    vocab_parts.push_back(split_evenly(c.vocab_size, r, plan.ranks, plan.block).size());
  }
}

void sum_over_ranks(Communicator* comm, Tensor t) {
  if (!comm || comm->size() == 1) return;
  check(t.is_contiguous() && t.dtype == DType::f32 && t.device == comm->device(),
        ErrorKind::internal,
        "sum_over_ranks: a contiguous f32 tensor on the communicator's device");
  comm->all_reduce_sum(t.ptr<float>(), t.numel());
}

void embed_rows(const TensorParallel& tp, Backend& be, const Weight& table,
                std::span<const int32_t> ids, Tensor out) {
  const int64_t T = static_cast<int64_t>(ids.size()), H = out.shape[1];
  const Device dev = be.device();
  const size_t row = static_cast<size_t>(H) * sizeof(float);
  OwnedTensor whole = make_tensor(DType::f32, {T, H}, dev);  // zeros
  std::vector<int32_t> local, at;
  for (int64_t t = 0; t < T; ++t) {
    if (ids[t] >= tp.plan.vocab.begin && ids[t] < tp.plan.vocab.end) {
      local.push_back(static_cast<int32_t>(ids[t] - tp.plan.vocab.begin));
      at.push_back(static_cast<int32_t>(t));
    }
  }
  if (!local.empty()) {
    const int64_t n = static_cast<int64_t>(local.size());
    OwnedTensor lid = make_uninit_tensor(DType::i32, {n}, dev);
    copy_from_host(local.data(), lid.tensor);
    OwnedTensor rows = make_uninit_tensor(DType::f32, {n, H}, dev);
    be.embedding(table, lid.tensor, rows.tensor);
    for (int64_t i = 0; i < n; ++i) {
      copy_bytes(whole.tensor.row<float>(at[i]), dev, rows.tensor.row<float>(i), dev, row);
    }
  }
  sum_over_ranks(tp.comm.get(), whole.tensor);
  for (int64_t t = 0; t < T; ++t) {
    copy_bytes(out.row<float>(t), dev, whole.tensor.row<float>(t), dev, row);
  }
}

void gather_logits(const TensorParallel& tp, std::span<const float> local, int64_t rows,
                   float* logits) {
  const int ranks = tp.plan.ranks;
  std::vector<int64_t> counts(ranks);
  int64_t vocab = 0;
  for (int r = 0; r < ranks; ++r) {
    counts[r] = rows * tp.vocab_parts[r];
    vocab += tp.vocab_parts[r];
  }
  std::vector<float> blocks(static_cast<size_t>(rows * vocab));
  tp.comm->all_gather(local.data(), blocks.data(), counts);
  // blocks holds rank 0's [rows, part 0], then rank 1's [rows, part 1], ...
  const float* src = blocks.data();
  int64_t column = 0;
  for (int r = 0; r < ranks; ++r) {
    const int64_t part = tp.vocab_parts[r];
    for (int64_t i = 0; i < rows; ++i, src += part) {
      std::copy(src, src + part, logits + i * vocab + column);
    }
    column += part;
  }
}

void clear_recurrent_slot(const StateViews& state, int32_t slot) {
  for (const std::vector<Tensor>* list : {&state.conv, &state.ssm}) {
    for (const Tensor& t : *list) {
      zero_bytes(t.row<char>(slot), t.device, static_cast<size_t>(t.numel() / t.shape[0]) * 4);
    }
  }
}

}  // namespace hibana
