// The communicator of one rank: every collective is the identity.
#include <cstring>

#include "core/error.h"
#include "parallel/communicator.h"

namespace hibana {

namespace {
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Device device() const override { return Device::cpu; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    check(counts.size() == 1, ErrorKind::internal, "all_gather: one count per rank");
    if (recv != send) std::memcpy(recv, send, static_cast<size_t>(counts[0]) * sizeof(float));
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}

 protected:
  void abort_all(int) override {}
};
}  // namespace

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

}  // namespace hibana
