#include "model/logits_output.h"

#include <cstring>

#include "core/device_memory.h"
#include "core/error.h"

namespace hibana {

namespace {

// Summaries of `logits` (rows of out.vocab floats, on the backend's device or the host).
void summarise(Backend& be, const Tensor& logits, const ForwardOptions& o, ForwardOutput& out) {
  const int64_t R = logits.shape[0], k = o.summary_k;
  check(static_cast<int64_t>(o.summary_temperature.size()) == R, ErrorKind::internal,
        "logits summaries: one temperature per logits row");
  const Device dev = logits.device;
  // (Host rows also beside a GPU backend: tensor parallelism gathers the logits on the host.)
  const bool on_host = dev == Device::cpu;
  // The penalties go on a copy: fetch_row returns the rows as computed.
  const bool penalised = o.penalties.rows() > 0;
  check(!penalised || o.penalties.rows() == R, ErrorKind::internal,
        "logits summaries: one row of penalties per logits row");
  OwnedTensor copy;
  const Tensor* rows = &logits;
  if (penalised) {
    copy = make_uninit_tensor(DType::f32, {R, logits.shape[1]}, dev);
    if (on_host) {
      be.Backend::penalise_rows(logits, o.penalties, copy.tensor);
    } else {
      be.penalise_rows(logits, o.penalties, copy.tensor);
    }
    rows = &copy.tensor;
  }
  OwnedTensor packed = make_uninit_tensor(DType::i32, {R, summary_words(k)}, dev);
  if (on_host) {
    be.Backend::logits_summary(*rows, o.summary_temperature, k, packed.tensor);
  } else {
    be.logits_summary(*rows, o.summary_temperature, k, packed.tensor);
  }
  out.penalties_applied = penalised;
  std::vector<int32_t> host(static_cast<size_t>(R * summary_words(k)));
  copy_to_host(packed.tensor, host.data());
  out.summaries.clear();
  for (int64_t r = 0; r < R; ++r) {
    out.summaries.push_back(unpack_summary(host.data() + r * summary_words(k), k));
  }
}

}  // namespace

void deliver_logits(Backend& be, std::shared_ptr<OwnedTensor> logits, const ForwardOptions& options,
                    ForwardOutput& out) {
  const Tensor& t = logits->tensor;
  const int64_t R = t.shape[0];
  if (options.summary_k <= 0) {
    out.logits.resize(static_cast<size_t>(R * out.vocab));
    copy_to_host(t, out.logits.data());
    return;
  }
  out.logits.clear();
  summarise(be, t, options, out);
  out.fetch_row = [logits](int64_t row, float* dst) {
    copy_to_host(logits->tensor.slice_rows(row, row + 1), dst);
  };
}

void summarise_host_logits(Backend& be, const ForwardOptions& options, int64_t rows,
                           ForwardOutput& out) {
  if (options.summary_k <= 0) return;
  const Tensor t(out.logits.data(), DType::f32, {rows, out.vocab}, Device::cpu);
  summarise(be, t, options, out);
  const float* base = out.logits.data();
  out.fetch_row = [base, vocab = out.vocab](int64_t row, float* dst) {
    std::memcpy(dst, base + row * vocab, static_cast<size_t>(vocab) * sizeof(float));
  };
}

}  // namespace hibana
