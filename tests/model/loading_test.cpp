// Loading checkpoints: the layouts real checkpoints come in, and a clear error naming the file
// and the problem for every kind of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/numeric.h"
#include "io/checkpoint.h"
#include "io/hub.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "state/state_pool.h"
#include "support/fixture_model.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using testing::Not;

// A copy of a fixture checkpoint that a test may damage.
struct FixtureCopy {
  test::TempDir dir;
  explicit FixtureCopy(const std::string& name) {
    fs::copy(test::fixture_model_dir(name), dir.path(), fs::copy_options::recursive);
  }
  std::string path() const { return dir.path(); }
  nlohmann::json config() const {
    return nlohmann::json::parse(read_text_file(dir.file("config.json")));
  }
  void set_config(const nlohmann::json& j) const { dir.write("config.json", j.dump(2)); }
  // Rewrites a safetensors file keeping only the tensors `keep` accepts.
  template <typename Keep>
  void filter_tensors(const std::string& file, Keep keep) const {
    std::vector<std::vector<char>> data;
    std::vector<TensorToWrite> out;
    {
      SafetensorsFile f(dir.file(file));
      for (const auto& [name, info] : f.tensors()) {
        if (!keep(name)) continue;
        Tensor t = f.tensor(name);
        data.emplace_back(static_cast<char*>(t.data), static_cast<char*>(t.data) + info.nbytes);
        out.push_back({name, info.dtype, info.shape, nullptr});
      }
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].data = data[i].data();
    write_safetensors(dir.file(file), out);
  }
};

void expect_load_error(const std::string& path, ErrorKind kind, std::vector<std::string> needles) {
  try {
    Model::load(path, make_cpu_backend());
    FAIL() << "loaded a broken checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
  }
}

TEST(Loading, EveryFixtureLoads) {
  for (const std::string& name : test::fixture_model_names()) {
    SCOPED_TRACE(name);
    auto m = test::load_fixture_model(name);
    EXPECT_GT(m->parameter_count(), 0);
    EXPECT_GT(m->bytes_per_token(), 0u);
  }
}

TEST(Loading, ShardedIndexAndTiedEmbeddings) {
  auto m = test::load_fixture_model("qwen3_tied_gqa6");
  EXPECT_EQ(m->weights().lm_head.w.data, m->weights().embed.w.data);
  EXPECT_EQ(m->weights().embed.w.dtype, DType::f16);
}

TEST(Loading, Fp8WithBlockScales) {
  auto m = test::load_fixture_model("qwen3_fp8");
  const Weight& q = m->weights().layers[0].attn.q;
  EXPECT_EQ(q.w.dtype, DType::f8_e4m3);
  EXPECT_EQ(q.block_rows, 16);
  EXPECT_EQ(q.block_cols, 16);
}

// --weights fp8: every projection and expert becomes fp8 with 128x128 block scales (routers
// and embeddings stay), each value within fp8's rounding of the original, so products move
// by a few percent; the converted model runs. (End-to-end logits are no test here: the tiny
// random fixtures amplify a 3% change in one GDN projection into a large logit change.)
TEST(Loading, ConvertsToFp8AtLoad) {
  auto ref = Model::load(test::fixture_model_dir("qwen3_next"), make_cpu_backend());
  LoadOptions o;
  o.fp8 = true;
  auto q = Model::load(test::fixture_model_dir("qwen3_next"), make_cpu_backend(), o);
  const LayerWeights& l0 = q->weights().layers[0];
  const LayerWeights& r0 = ref->weights().layers[0];
  EXPECT_EQ(l0.gdn.qkvz.w.dtype, DType::f8_e4m3);
  EXPECT_EQ(l0.moe.experts.down[1].w.dtype, DType::f8_e4m3);
  EXPECT_EQ(q->weights().layers[3].attn.o.w.dtype, DType::f8_e4m3);
  EXPECT_EQ(l0.moe.router.w.dtype, DType::bf16);
  EXPECT_EQ(q->weights().embed.w.dtype, DType::bf16);
  EXPECT_LT(q->weights().matrix_bytes, ref->weights().matrix_bytes);
  EXPECT_NE(q->fingerprint(), ref->fingerprint());

  // On the CPU both qkvz keep the checkpoint's packed row order and their column map (the
  // fold is for GPUs: on the CPU it would copy mapped weights into the heap), so row r of the
  // fp8 matrix is row r of the bf16 one.
  ASSERT_FALSE(r0.gdn.qkvz_order.empty());
  ASSERT_FALSE(l0.gdn.qkvz_order.empty());
  for (auto [a, b] : {std::pair{&r0.gdn.qkvz, &l0.gdn.qkvz},
                      {&r0.moe.experts.gate[2], &l0.moe.experts.gate[2]}}) {
    ASSERT_EQ(b->block_rows, 128);
    for (int64_t r = 0; r < a->rows(); ++r) {
      for (int64_t k = 0; k < a->cols(); ++k) {
        const float v = bf16_to_f32(a->w.row<uint16_t>(r)[k]);
        const float s = b->scale.row<float>(r / 128)[k / 128];
        const float d = f8e4m3_to_f32(b->w.row<uint8_t>(r)[k]) * s;
        ASSERT_LE(std::fabs(d - v), std::max(std::fabs(v) / 16.0f, s / 1024.0f)) << r << "," << k;
      }
    }
  }
  // x · wᵀ with the fp8 weight stays within 5% of the output's scale.
  const Weight &a = r0.gdn.qkvz, &b = l0.gdn.qkvz;
  const int64_t K = a.cols(), N = a.rows();
  std::vector<float> x(3 * K), y1(3 * N), y2(3 * N);
  for (int64_t i = 0; i < 3 * K; ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  auto be = make_cpu_backend();
  be->matmul(Tensor(x.data(), DType::f32, {3, K}), a, Tensor(y1.data(), DType::f32, {3, N}));
  be->matmul(Tensor(x.data(), DType::f32, {3, K}), b, Tensor(y2.data(), DType::f32, {3, N}));
  float scale = 0.0f, worst = 0.0f;
  for (size_t i = 0; i < y1.size(); ++i) {
    scale = std::max(scale, std::fabs(y1[i]));
    worst = std::max(worst, std::fabs(y1[i] - y2[i]));
  }
  EXPECT_LT(worst, 0.05f * scale);

  StatePool pool(q->state_spec(), 64, 4, 1);
  SequenceState seq(pool);
  std::vector<int32_t> ids = {3, 14, 15, 92, 65, 35, 89, 79};
  seq.reserve(8);
  SequenceInput in;
  in.tokens = ids;
  in.pages = seq.pages();
  in.slot = seq.slot();
  ForwardOutput out;
  q->forward(std::span<const SequenceInput>(&in, 1), pool.views(), {}, out);
  for (float v : out.logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(Loading, HubLayoutNestedConfigFusedExpertsAndVision) {
  auto m = test::load_fixture_model("qwen3_5_moe");
  EXPECT_EQ(m->config().arch, Arch::qwen3_5_moe);
  EXPECT_EQ(m->weights().layers[0].moe.experts.gate.size(), 5u);
}

TEST(Loading, HybridLayerTypesAndMtp) {
  auto next = test::load_fixture_model("qwen3_next");
  EXPECT_EQ(next->config().num_deltanet_layers(), 3);  // full_attention_interval 4
  EXPECT_EQ(next->config().ffns[1], FfnKind::dense);   // mlp_only_layers [1]
  EXPECT_TRUE(next->has_mtp());
  auto q35 = test::load_fixture_model("qwen3_5");
  EXPECT_EQ(q35->config().mixers[1], MixerKind::attention);  // explicit layer_types
  EXPECT_EQ(q35->config().rotary_dim, 4);                    // partial rotary 0.25 of 16
}

TEST(Loading, MissingShard) {
  FixtureCopy c("qwen3_tied_gqa6");
  fs::remove(c.dir.file("model-00003-of-00008.safetensors"));
  expect_load_error(
      c.path(), ErrorKind::not_found,
      {"model-00003-of-00008.safetensors", "model.safetensors.index.json", "missing"});
  try {  // a plain directory: no word of downloads
    Model::load(c.path(), make_cpu_backend());
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), Not(HasSubstr("hibana pull")));
  }
}

TEST(Loading, AShardMissingFromAHubSnapshotPointsAtPull) {
  test::TempDir hub;
  const fs::path snap = fs::path(hub.path()) / "models--acme--sharded" / "snapshots" / "0123abcd";
  fs::create_directories(snap);
  for (const auto& e : fs::directory_iterator(test::fixture_model_dir("qwen3_tied_gqa6"))) {
    if (e.path().filename() != "model-00003-of-00008.safetensors") {
      fs::copy_file(e.path(), snap / e.path().filename());
    }
  }
  expect_load_error(snap.string() + "/", ErrorKind::not_found,
                    {"model-00003-of-00008.safetensors", "hibana pull"});
}

TEST(Loading, TruncatedShard) {
  FixtureCopy c("qwen3_dense");
  fs::resize_file(c.dir.file("model.safetensors"),
                  fs::file_size(c.dir.file("model.safetensors")) - 100);
  expect_load_error(c.path(), ErrorKind::corrupt_data, {"model.safetensors", "truncated"});
}

TEST(Loading, IndexNamesTensorThatIsNotInItsShard) {
  FixtureCopy c("qwen3_tied_gqa6");
  auto j = nlohmann::json::parse(read_text_file(c.dir.file("model.safetensors.index.json")));
  j["weight_map"]["model.norm.weight"] = "model-00001-of-00008.safetensors";
  if (j["weight_map"]["model.embed_tokens.weight"] == "model-00001-of-00008.safetensors") {
    j["weight_map"]["model.norm.weight"] = "model-00002-of-00008.safetensors";
  }
  c.dir.write("model.safetensors.index.json", j.dump());
  expect_load_error(c.path(), ErrorKind::corrupt_data, {"model.norm.weight", "is not there"});
}

TEST(Loading, MissingTensor) {
  FixtureCopy c("qwen3_dense");
  c.filter_tensors("model.safetensors",
                   [](const std::string& n) { return n != "model.layers.1.mlp.up_proj.weight"; });
  expect_load_error(c.path(), ErrorKind::not_found, {"model.layers.1.mlp.up_proj.weight"});
}

TEST(Loading, ShapeMismatch) {
  FixtureCopy c("qwen3_dense");
  auto j = c.config();
  j["intermediate_size"] = 128;
  c.set_config(j);
  expect_load_error(c.path(), ErrorKind::invalid_argument,
                    {"model.layers.0.mlp.gate_proj.weight", "[136, 72]", "[128, 72]"});
}

TEST(Loading, UnknownDtypeInCheckpoint) {
  FixtureCopy c("qwen3_dense");
  // Rewrite the header's first dtype to one safetensors defines but we do not implement.
  std::string bytes = read_text_file(c.dir.file("model.safetensors"));
  size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"F8E\"");
  c.dir.write("model.safetensors", bytes);
  expect_load_error(c.path(), ErrorKind::unsupported, {"unknown dtype 'F8E'", "model.safetensors"});
}

TEST(Loading, UnsupportedArchitecture) {
  FixtureCopy c("qwen3_dense");
  auto j = c.config();
  j["model_type"] = "llama";
  j["architectures"] = {"LlamaForCausalLM"};
  c.set_config(j);
  expect_load_error(c.path(), ErrorKind::unsupported,
                    {"config.json", "unsupported architecture", "llama", "LlamaForCausalLM"});
}

TEST(Loading, BadConfigValues) {
  FixtureCopy c("qwen3_dense");
  auto j = c.config();
  j["num_key_value_heads"] = 4;  // 6 heads are not a multiple of 4
  c.set_config(j);
  expect_load_error(c.path(), ErrorKind::invalid_argument, {"num_attention_heads"});
  j = c.config();
  j.erase("hidden_size");
  c.set_config(j);
  expect_load_error(c.path(), ErrorKind::invalid_argument, {"hidden_size", "missing"});
  c.dir.write("config.json", "{ not json");
  expect_load_error(c.path(), ErrorKind::invalid_argument, {"config.json", "not valid JSON"});
}

TEST(Loading, MissingDirectoryAndConfig) {
  expect_load_error("/nonexistent/model/dir", ErrorKind::not_found, {"/nonexistent/model/dir"});
  FixtureCopy c("qwen3_dense");
  fs::remove(c.dir.file("config.json"));
  expect_load_error(c.path(), ErrorKind::not_found, {"config.json"});
}

// `hibana ls` describes the snapshot --model ORG/NAME loads: here refs/main names a commit whose
// snapshot is gone, and the one snapshot there is what both choose (ls said the missing one).
TEST(Loading, TheHubCacheListingNamesTheSnapshotModelLoads) {
  test::TempDir home;
  const fs::path repo = fs::path(home.path()) / "hub" / "models--acme--tiny";
  fs::create_directories(repo / "snapshots" / "0123abcd");
  home.write("hub/models--acme--tiny/refs/main", "deadbeef\n");
  home.write("hub/models--acme--tiny/snapshots/0123abcd/config.json", "{}");
  test::ScopedEnv hf_home("HF_HOME", home.path().c_str()), hub_cache("HF_HUB_CACHE", nullptr);
  EXPECT_EQ(resolve_model_dir("acme/tiny"), (repo / "snapshots" / "0123abcd").string());
  const std::vector<HubCachedModel> listed = hub_cached_models();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].snapshot, "0123abcd");
  // A second snapshot leaves main without one, for both.
  fs::create_directories(repo / "snapshots" / "4567cdef");
  EXPECT_THROW(resolve_model_dir("acme/tiny"), Error);
  EXPECT_EQ(hub_cached_models()[0].snapshot, "");
  // An empty ref names no snapshot (the snapshots folder itself was taken for one).
  home.write("hub/models--acme--tiny/refs/main", "\n");
  EXPECT_THROW(resolve_model_dir("acme/tiny"), Error);
  EXPECT_EQ(hub_snapshot_dir(repo.string(), "main"), "");
  EXPECT_EQ(hub_snapshot_dir(repo.string(), "4567cdef"), (repo / "snapshots" / "4567cdef").string());
}

TEST(Loading, HubCacheLayout) {
  test::TempDir home;
  fs::path repo = fs::path(home.path()) / "hub" / "models--acme--tiny-qwen";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "blobs");
  fs::path snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(snap);
  home.write("hub/models--acme--tiny-qwen/refs/main", "0123abcd\n");
  // Files are symlinks into blobs/, as the hub client stores them.
  for (const auto& e : fs::directory_iterator(test::fixture_model_dir("qwen3_dense"))) {
    fs::path blob = repo / "blobs" / e.path().filename();
    fs::copy_file(e.path(), blob);
    fs::create_symlink(blob, snap / e.path().filename());
  }
  test::ScopedEnv hf_home("HF_HOME", home.path().c_str()), hub_cache("HF_HUB_CACHE", nullptr);
  EXPECT_EQ(resolve_model_dir("acme/tiny-qwen"), snap.string());
  auto m = Model::load("acme/tiny-qwen", make_cpu_backend());
  EXPECT_EQ(m->config().arch, Arch::qwen3);
  try {
    resolve_model_dir("acme/absent");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_found);
    EXPECT_THAT(e.what(), HasSubstr("models--acme--absent"));
  }
}

}  // namespace
}  // namespace hibana
