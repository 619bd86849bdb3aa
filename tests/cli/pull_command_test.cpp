// `hibana pull` as a user runs it: the embedded model's files from a fake hub (HF_ENDPOINT), then
// `hibana run --model ORG/NAME` on what was pulled; an architecture hibana cannot run is refused
// before its weights are asked for.
#include <gtest/gtest.h>

#if HIBANA_HAVE_PULL  // the build has libcurl and libcrypto

#include <filesystem>
#include <fstream>

#include "support/fake_hub.h"
#include "support/paths.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string env_for(const test::FakeHub& hub, const test::TempDir& cache) {
  return "HF_ENDPOINT=" + hub.endpoint() + " HF_HUB_CACHE='" + cache.path() +
         "' HF_TOKEN= HF_TOKEN_PATH=/nonexistent HF_HUB_OFFLINE= ";
}

// `hibana ls` seeing only `cache` (not this machine's own hub cache).
test::CommandResult list(const test::TempDir& cache) {
  const std::string at = "'" + cache.path() + "'";
  return test::run_command("HF_HUB_CACHE=" + at + " HF_HOME=" + at + " XDG_CACHE_HOME=" + at +
                           " HOME=" + at + " '" + test::hibana_binary() + "' ls");
}

TEST(PullCommand, APulledModelRunsLikeTheSameFilesOnDisk) {
  const fs::path tiny = fs::path(HIBANA_SOURCE_DIR) / "models" / "hibana-tiny";
  std::vector<test::FakeHubFile> files;
  for (const auto& e : fs::directory_iterator(tiny)) {
    const std::string name = e.path().filename().string();
    files.push_back({name, read(e.path()), name.ends_with(".safetensors")});
  }
  test::FakeHub hub("acme/tiny", files);
  test::TempDir cache;
  const auto pulled = test::run_command(env_for(hub, cache) + "'" + test::hibana_binary() +
                                        "' pull acme/tiny --jobs 3");
  ASSERT_EQ(pulled.status, 0) << pulled.err;
  EXPECT_NE(pulled.out.find("serve it: hibana serve acme/tiny"), std::string::npos) << pulled.out;
  EXPECT_EQ(hub.file_requests("README.md"), 0u);
  EXPECT_EQ(hub.file_requests("loss.png"), 0u);

  const std::string args = " --prompt-ids 1,2,3 -n 6 --print-ids --temperature 0";
  const auto from_hub = test::run_command("HF_HUB_CACHE='" + cache.path() + "' '" +
                                          test::hibana_binary() + "' run --model acme/tiny" + args);
  const auto from_disk = test::run_hibana("run --model '" + tiny.string() + "'" + args);
  ASSERT_EQ(from_hub.status, 0) << from_hub.err;
  ASSERT_EQ(from_disk.status, 0) << from_disk.err;
  EXPECT_EQ(from_hub.out, from_disk.out);

  const auto again =
      test::run_command(env_for(hub, cache) + "'" + test::hibana_binary() + "' pull acme/tiny");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.out.find("is up to date"), std::string::npos) << again.out;

  auto listed = list(cache);
  ASSERT_EQ(listed.status, 0) << listed.err;
  EXPECT_NE(listed.out.find("acme/tiny"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("runs (qwen3_next)"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("unfinished"), std::string::npos) << listed.out;
  cache.write("models--acme--tiny/blobs/" + std::string(64, 'a') + ".incomplete", "part");
  listed = list(cache);
  EXPECT_NE(listed.out.find("unfinished download"), std::string::npos) << listed.out;
}

TEST(PullCommand, AnArchitectureHibanaCannotRunIsRefusedBeforeItsWeights) {
  test::FakeHub hub(
      "acme/llama",
      {{"config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})", false},
       {"model.safetensors", std::string(4096, 'w'), true}});
  test::TempDir cache;
  const auto r =
      test::run_command(env_for(hub, cache) + "'" + test::hibana_binary() + "' pull acme/llama");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(hub.file_requests("model.safetensors"), 0u);
  const auto forced = test::run_command(env_for(hub, cache) + "'" + test::hibana_binary() +
                                        "' pull acme/llama --force");
  EXPECT_EQ(forced.status, 0) << forced.err;
  EXPECT_EQ(hub.file_requests("model.safetensors"), 1u);
  const auto listed = list(cache);
  EXPECT_NE(listed.out.find("no: unsupported architecture"), std::string::npos) << listed.out;
}

TEST(PullCommand, APullIntoAnotherCacheDirSaysWhereTheModelIs) {
  test::FakeHub hub("acme/small", {{"config.json", "{}", false},
                                   {"model.safetensors", std::string(100, 'w'), true}});
  test::TempDir cache, elsewhere;
  const auto r =
      test::run_command(env_for(hub, cache) + "'" + test::hibana_binary() +
                        "' pull acme/small --force --cache-dir '" + elsewhere.path() + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  // HF_HUB_CACHE is `cache`: `hibana serve acme/small` would not find it in `elsewhere`.
  EXPECT_NE(
      r.out.find("serve it: hibana serve " + elsewhere.path() + "/models--acme--small/snapshots/"),
      std::string::npos)
      << r.out;
  EXPECT_TRUE(std::filesystem::exists(fs::path(elsewhere.path()) / "models--acme--small" / "refs" /
                                      "main"));
}

TEST(PullCommand, AnEmptyCacheSaysHowToFillIt) {
  test::TempDir cache;
  const auto listed = list(cache);
  EXPECT_EQ(listed.status, 0);
  EXPECT_NE(listed.out.find("hibana pull ORG/NAME"), std::string::npos) << listed.out;
}

}  // namespace
}  // namespace hibana

#endif  // HIBANA_HAVE_PULL
