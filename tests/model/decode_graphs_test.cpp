// DecodeGraphs (decode steps recorded once per bucket, then replayed) against a backend that only
// pretends to record: no compute (the bodies here write the logits themselves), a count of the
// recordings it was asked to replay.
#include "model/decode_graphs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/state_views.h"

namespace hibana {
namespace {

class RecordingBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string name() const override { return "recording"; }
  bool can_capture() const override { return true; }
  void begin_capture() override { recording = true; }
  std::shared_ptr<void> end_capture() override {
    recording = false;
    return std::make_shared<int>(0);  // a recording of whatever ran since begin_capture
  }
  void replay(const std::shared_ptr<void>&) override { ++replays; }
  void synchronize() override { ++waits; }

  bool recording = false;
  int replays = 0;
  int waits = 0;

  // No compute: the bodies of this test call none of these.
  void embedding(const Weight&, const Tensor&, Tensor) override { unused(); }
  void rmsnorm(const Tensor&, const Tensor&, float, bool, Tensor) override { unused(); }
  void matmul(const Tensor&, const Weight&, Tensor) override { unused(); }
  void gather_columns(const Tensor&, const Tensor&, Tensor) override { unused(); }
  void rope(Tensor, int64_t, int64_t, int64_t, double, const BatchLayout&) override { unused(); }
  void add(Tensor, const Tensor&) override { unused(); }
  void mul_sigmoid(Tensor, const Tensor&) override { unused(); }
  void add_sigmoid_scaled(Tensor, const Tensor&, const Tensor&) override { unused(); }
  void silu_mul(const Tensor&, const Tensor&, Tensor) override { unused(); }
  void store_kv(const Tensor&, const Tensor&, Tensor, Tensor, const BatchLayout&) override {
    unused();
  }
  void attention(const Tensor&, int64_t, const Tensor&, const Tensor&, float, const BatchLayout&,
                 Tensor) override {
    unused();
  }
  void gdn_conv(const Tensor&, const Tensor&, Tensor, const BatchLayout&, Tensor) override {
    unused();
  }
  void gdn_recurrence(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                      const GdnShape&, Tensor, const BatchLayout&, Tensor) override {
    unused();
  }
  void gated_rmsnorm(const Tensor&, const Tensor&, const Tensor&, float, Tensor) override {
    unused();
  }
  void moe_route(const Tensor&, int64_t, bool, const Tensor&, Tensor, Tensor) override { unused(); }
  void moe_experts(const Tensor&, const Tensor&, const Tensor&, const ExpertWeights&,
                   Tensor) override {
    unused();
  }
  void copy_slot(Tensor, int64_t, int64_t) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw Error(ErrorKind::internal, "not in this test"); }
};

// A step whose recording throws part-way (an op the recording cannot take, say) must never be
// replayed: the recording holds only the ops before the throw. Its bucket runs op by op from
// then on, with the body's own results every step. (Before, the half recording was kept and
// replayed from the next step on.)
TEST(DecodeGraphs, AStepWhoseRecordingThrowsIsNeverReplayed) {
  RecordingBackend be;
  const int64_t vocab = 8;
  DecodeGraphs graphs(be, vocab, false, false);
  int runs = 0;
  const DecodeGraphs::Body body = [&](const Tensor&, const BatchLayout&, Tensor logits) {
    if (be.recording) throw Error(ErrorKind::unsupported, "cannot be recorded");
    ++runs;
    std::fill(logits.ptr<float>(), logits.ptr<float>() + logits.numel(), static_cast<float>(runs));
  };
  const std::vector<int32_t> token = {3};
  SequenceInput in;
  in.tokens = token;
  in.start_pos = 5;
  const StateViews state;
  ForwardOutput out;
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    ASSERT_TRUE(graphs.run({&in, 1}, state, ForwardOptions{}, body, out));
    EXPECT_EQ(runs, step) << "the step did not run op by op";
    ASSERT_EQ(out.logits.size(), static_cast<size_t>(vocab));
    EXPECT_EQ(out.logits[0], static_cast<float>(step));
  }
  EXPECT_EQ(be.replays, 0);
  EXPECT_EQ(graphs.replays(), 0);
}

// The other way: a recording that succeeds is replayed from the next step on, the body not run.
TEST(DecodeGraphs, AStepRecordedOnceIsReplayed) {
  RecordingBackend be;
  DecodeGraphs graphs(be, 8, false, false);
  int runs = 0;
  const DecodeGraphs::Body body = [&](const Tensor&, const BatchLayout&, Tensor logits) {
    ++runs;
    std::fill(logits.ptr<float>(), logits.ptr<float>() + logits.numel(), 1.0f);
  };
  const std::vector<int32_t> token = {3};
  SequenceInput in;
  in.tokens = token;
  const StateViews state;
  ForwardOutput out;
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(graphs.run({&in, 1}, state, ForwardOptions{}, body, out));
  }
  EXPECT_EQ(runs, 2);  // the first step op by op, then its recording
  EXPECT_EQ(be.replays, 2);
  EXPECT_EQ(graphs.replays(), 2);
}

// A step's inputs go up without a wait (the host's copy stays in the bucket until the step's
// end waits); a step that throws before that end waits for the device before it leaves, so the
// next step may refill the copy (before, nothing waited: an upload still reading it raced).
TEST(DecodeGraphs, AStepThatThrowsWaitsForItsUpload) {
  RecordingBackend be;
  DecodeGraphs graphs(be, 8, false, false);
  const DecodeGraphs::Body body = [&](const Tensor&, const BatchLayout&, Tensor) {
    throw Error(ErrorKind::internal, "an op failed");
  };
  const std::vector<int32_t> token = {3};
  SequenceInput in;
  in.tokens = token;
  const StateViews state;
  ForwardOutput out;
  EXPECT_THROW(graphs.run({&in, 1}, state, ForwardOptions{}, body, out), Error);
  EXPECT_EQ(be.waits, 1);
}

}  // namespace
}  // namespace hibana
