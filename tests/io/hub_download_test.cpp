// `hub_pull` against a fake hub on 127.0.0.1: the cache layout huggingface_hub reads, resumed and
// restarted downloads, hash checks, the hub's errors, and what is refused before bytes move.
#include "io/hub.h"

#include <gtest/gtest.h>

#if HIBANA_HAVE_PULL  // the build has libcurl and libcrypto

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/digest.h"
#include "support/fake_hub.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

namespace fs = std::filesystem;
using test::FakeHub;
using test::FakeHubFile;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

std::vector<FakeHubFile> model_files() {
  return {
      {"config.json", R"({"architectures": ["Qwen3ForCausalLM"]})", false},
      {"tokenizer.json", R"({"model": {}})", false},
      {"model-00001-of-00002.safetensors", random_bytes(300000, 1), true},
      {"model-00002-of-00002.safetensors", random_bytes(200000, 2), true},
      {"README.md", "# a model\n", false},
      {"original/consolidated.pth", random_bytes(1000, 3), true},
      {"extra/notes.json", "{}", false},
  };
}

constexpr const char* kRepo = "acme/tiny-model";

HubPullOptions options(const FakeHub& hub, const test::TempDir& cache) {
  HubPullOptions o;
  o.repo = kRepo;
  o.endpoint = hub.endpoint();
  o.cache_dir = cache.path();
  o.token = "";
  o.retries = 2;
  return o;
}

// hub_pull(o) fails with an Error whose message holds `text` (and of `kind`, when given).
void expect_pull_error(const HubPullOptions& o, std::optional<ErrorKind> kind,
                       const std::string& text) {
  try {
    hub_pull(o);
    FAIL() << "no error; wanted one saying " << text;
  } catch (const Error& e) {
    if (kind) {
      EXPECT_EQ(e.kind(), *kind) << e.what();
    }
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

fs::path repo_dir(const test::TempDir& cache) {
  return fs::path(cache.path()) / "models--acme--tiny-model";
}

class HubPull : public ::testing::Test {
 protected:
  // No token from the environment or a token file of this machine.
  test::ScopedEnv no_token_{"HF_TOKEN", nullptr};
  test::ScopedEnv no_old_token_{"HUGGING_FACE_HUB_TOKEN", nullptr};
  test::ScopedEnv no_token_file_{"HF_TOKEN_PATH", "/nonexistent/hibana-test-token"};
  test::ScopedEnv online_{"HF_HUB_OFFLINE", nullptr};
  test::ScopedEnv online_too_{"TRANSFORMERS_OFFLINE", nullptr};
  // The fake hub is on this machine: no proxy in between.
  test::ScopedEnv no_proxy_{"no_proxy", "127.0.0.1,localhost"};
  test::ScopedEnv no_proxy_upper_{"NO_PROXY", "127.0.0.1,localhost"};
  test::TempDir cache_;
};

TEST(Digest, MatchesKnownSha256AndGitBlobIds) {
  Digest sha(Digest::Kind::sha256);
  sha.update("abc", 3);
  EXPECT_EQ(sha.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Digest git(Digest::Kind::git_blob_sha1, 6);  // `echo hello | git hash-object --stdin`
  git.update("hello\n", 6);
  EXPECT_EQ(git.hex(), "ce013625030ba8dba906f756967f9e9ca394464a");
}

TEST_F(HubPull, WritesTheLayoutHuggingfaceHubReads) {
  FakeHub hub(kRepo, model_files());
  HubPullOptions o = options(hub, cache_);
  o.token = "hf_tok";
  const HubPullResult r = hub_pull(o);
  const fs::path repo = repo_dir(cache_);
  EXPECT_EQ(r.commit, hub.commit);
  EXPECT_EQ(read(repo / "refs" / "main"), hub.commit);  // no newline
  EXPECT_EQ(r.snapshot_dir, (repo / "snapshots" / hub.commit).string());
  // The top-level model files, not README.md, original/ or a nested json.
  ASSERT_EQ(r.files.size(), 4u);
  EXPECT_EQ(r.files_downloaded, 4u);
  EXPECT_EQ(r.bytes_downloaded,
            500000u + model_files()[0].content.size() + model_files()[1].content.size());
  for (const auto& f : model_files()) {
    const fs::path link = repo / "snapshots" / hub.commit / f.path;
    if (!hub_default_file(f.path)) {
      EXPECT_FALSE(fs::exists(link)) << f.path;
      continue;
    }
    ASSERT_TRUE(fs::is_symlink(link)) << f.path;
    EXPECT_EQ(fs::read_symlink(link), fs::path("../../blobs") / f.blob_id()) << f.path;
    EXPECT_EQ(read(link), f.content) << f.path;
    EXPECT_FALSE(fs::exists(repo / "blobs" / (f.blob_id() + ".incomplete")));
  }
  EXPECT_TRUE(fs::exists(fs::path(cache_.path()) / ".locks" / "models--acme--tiny-model"));
  // The hub got the token; its "CDN" (another host name) did not.
  size_t cdn = 0;
  for (const auto& s : hub.seen()) {
    EXPECT_EQ(s.auth, s.path == "cdn" ? "" : "Bearer hf_tok") << s.path;
    cdn += s.path == "cdn";
  }
  EXPECT_EQ(cdn, 2u);  // the two LFS files came through the redirect

  test::ScopedEnv cache_env("HF_HUB_CACHE", cache_.path().c_str());
  EXPECT_EQ(resolve_model_dir(kRepo), r.snapshot_dir);
}

TEST_F(HubPull, ASecondPullOnlyAsksForTheListing) {
  FakeHub hub(kRepo, model_files());
  hub_pull(options(hub, cache_));
  const uint64_t served = hub.bytes_served;
  const size_t asked = hub.seen().size();
  const HubPullResult again = hub_pull(options(hub, cache_));
  EXPECT_EQ(again.files_downloaded, 0u);
  EXPECT_EQ(again.bytes_downloaded, 0u);
  EXPECT_EQ(hub.bytes_served, served);
  ASSERT_EQ(hub.seen().size(), asked + 1);
  EXPECT_EQ(hub.seen().back().path, "api");
}

TEST_F(HubPull, ACutConnectionResumesWhereItStopped) {
  FakeHub hub(kRepo, {model_files()[0], model_files()[2]});
  hub.cut_after = 100000;
  const HubPullResult r = hub_pull(options(hub, cache_));
  EXPECT_EQ(read(fs::path(r.snapshot_dir) / model_files()[2].path), model_files()[2].content);
  const auto seen = hub.seen();
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.back().range, "bytes=100000-");
  EXPECT_EQ(hub.bytes_served, 300000u + model_files()[0].content.size());
}

TEST_F(HubPull, APartialFileFromAnEarlierRunIsResumed) {
  const FakeHubFile weights = model_files()[2];
  FakeHub hub(kRepo, {model_files()[0], weights});
  test::TempDir& cache = cache_;
  cache.write("models--acme--tiny-model/blobs/" + weights.blob_id() + ".incomplete",
              weights.content.substr(0, 123456));
  const HubPullResult r = hub_pull(options(hub, cache));
  EXPECT_EQ(read(fs::path(r.snapshot_dir) / weights.path), weights.content);
  EXPECT_EQ(hub.seen().back().range, "bytes=123456-");
  EXPECT_EQ(r.bytes_downloaded, 300000u - 123456u + model_files()[0].content.size());
}

TEST_F(HubPull, AServerThatIgnoresTheRangeStartsTheFileOver) {
  const FakeHubFile weights = model_files()[2];
  FakeHub hub(kRepo, {model_files()[0], weights});
  hub.ignore_ranges = true;
  cache_.write("models--acme--tiny-model/blobs/" + weights.blob_id() + ".incomplete",
               weights.content.substr(0, 5000));
  const HubPullResult r = hub_pull(options(hub, cache_));
  EXPECT_EQ(read(fs::path(r.snapshot_dir) / weights.path), weights.content);
  EXPECT_EQ(hub.file_requests(weights.path), 1u);  // restarted within the one answer
  EXPECT_EQ(hub.bytes_served, weights.content.size() + model_files()[0].content.size());
}

TEST_F(HubPull, AnEmptyFileIsABlobToo) {
  FakeHub hub(kRepo, {model_files()[0], model_files()[2], {"empty.txt", "", false}});
  const HubPullResult r = hub_pull(options(hub, cache_));
  EXPECT_TRUE(fs::is_symlink(fs::path(r.snapshot_dir) / "empty.txt"));
  EXPECT_EQ(read(fs::path(r.snapshot_dir) / "empty.txt"), "");
}

TEST_F(HubPull, AGatedModelsFilesNeedAToken) {
  FakeHub hub(kRepo, model_files());
  hub.required_token = "hf_secret";
  hub.gate_files_only = true;  // as the hub does: the listing is public, the files are not
  try {
    hub_pull(options(hub, cache_));
    FAIL() << "a gated model's files were pulled without a token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is gated"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(repo_dir(cache_) / "refs"));
}

TEST_F(HubPull, ContentThatDoesNotMatchItsHashIsNeverKept) {
  const FakeHubFile weights = model_files()[2];
  FakeHub hub(kRepo, {model_files()[0], weights});
  hub.corrupt.insert(weights.path);
  HubPullOptions o = options(hub, cache_);
  o.retries = 1;
  try {
    hub_pull(o);
    FAIL() << "a corrupted download was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the hub's hash"), std::string::npos)
        << e.what();
  }
  const fs::path repo = repo_dir(cache_);
  EXPECT_FALSE(fs::exists(repo / "blobs" / weights.blob_id()));
  EXPECT_FALSE(fs::exists(repo / "blobs" / (weights.blob_id() + ".incomplete")));
  EXPECT_FALSE(fs::exists(repo / "snapshots" / hub.commit / weights.path));
  EXPECT_FALSE(fs::exists(repo / "refs" / "main"));  // the model is not ready: no ref to it
  EXPECT_EQ(hub.file_requests(weights.path), 2u);    // the first try and one retry
}

TEST_F(HubPull, AGatedModelNeedsAToken) {
  FakeHub hub(kRepo, model_files());
  hub.required_token = "hf_secret";
  try {
    hub_pull(options(hub, cache_));
    FAIL() << "a gated model was pulled without a token";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("gated"), std::string::npos) << m;
    EXPECT_NE(m.find("HF_TOKEN"), std::string::npos) << m;
  }
  test::ScopedEnv token("HF_TOKEN", " hf_secret\n");  // trimmed, as huggingface_hub does
  const HubPullResult r = hub_pull(options(hub, cache_));
  EXPECT_EQ(r.files_downloaded, 4u);
  const auto seen = hub.seen();
  EXPECT_EQ(seen.front().auth, "");  // the first, refused listing
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].auth, seen[i].path == "cdn" ? "" : "Bearer hf_secret") << seen[i].path;
  }
}

TEST_F(HubPull, TheTokenFileIsRead) {
  cache_.write("token", "hf_from_file\n");
  test::ScopedEnv path("HF_TOKEN_PATH", cache_.file("token").c_str());
  EXPECT_EQ(hub_token(), "hf_from_file");
}

TEST_F(HubPull, UnknownModelsAndRevisionsAreNamed) {
  FakeHub hub(kRepo, model_files());
  HubPullOptions o = options(hub, cache_);
  o.repo = "acme/other";
  expect_pull_error(o, ErrorKind::not_found, "acme/other: no such model");
  o = options(hub, cache_);
  o.revision = "v9";
  expect_pull_error(o, ErrorKind::not_found, "no such revision");
}

TEST_F(HubPull, APinnedCommitWritesNoRef) {
  FakeHub hub(kRepo, model_files());
  HubPullOptions o = options(hub, cache_);
  o.revision = hub.commit;
  hub_pull(o);
  EXPECT_FALSE(fs::exists(repo_dir(cache_) / "refs"));
}

TEST_F(HubPull, TheConfigIsCheckedBeforeTheWeightsMove) {
  FakeHub hub(kRepo, model_files());
  HubPullOptions o = options(hub, cache_);
  std::string seen_config;
  o.check_config = [&](const std::string& text) {
    seen_config = text;
    throw Error(ErrorKind::unsupported, "not a model we run");
  };
  EXPECT_THROW(hub_pull(o), Error);
  EXPECT_EQ(seen_config, model_files()[0].content);
  EXPECT_EQ(hub.file_requests(model_files()[2].path), 0u);
  EXPECT_EQ(hub.file_requests(model_files()[3].path), 0u);
}

TEST_F(HubPull, RepositoriesWithoutAConfigOrSafetensorsAreRefusedUpFront) {
  FakeHub gguf(kRepo, {{"config.json", "{}", false}, {"model-q4.gguf", "GGUF", true}});
  expect_pull_error(options(gguf, cache_), ErrorKind::unsupported, "model-q4.gguf");
  EXPECT_EQ(gguf.seen().size(), 1u);  // the listing only
  FakeHub no_config(kRepo, {{"model.safetensors", "x", true}});
  EXPECT_THROW(hub_pull(options(no_config, cache_)), Error);
  EXPECT_EQ(no_config.seen().size(), 1u);
}

TEST_F(HubPull, IncludeGlobsPickFilesLikeHfDownload) {
  FakeHub hub(kRepo, model_files());
  HubPullOptions o = options(hub, cache_);
  o.include = {"original/*", "README.md"};
  const HubPullResult r = hub_pull(o);
  ASSERT_EQ(r.files.size(), 2u);
  EXPECT_EQ(fs::read_symlink(fs::path(r.snapshot_dir) / "original/consolidated.pth"),
            fs::path("../../../blobs") / model_files()[5].blob_id());
  o.include = {"*.bin"};
  EXPECT_THROW(hub_pull(o), Error);
}

TEST_F(HubPull, BadInputFailsWithoutTheNetwork) {
  HubPullOptions o;
  o.cache_dir = cache_.path();
  o.endpoint = "http://127.0.0.1:1";
  o.retries = 0;
  for (const char* repo : {"", "qwen", "a/b/c", "../x", "a/..", "a b/c", "/abs"}) {
    o.repo = repo;
    try {
      hub_pull(o);
      FAIL() << repo;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << repo << ": " << e.what();
    }
  }
  o.repo = kRepo;
  expect_pull_error(o, ErrorKind::io, "cannot reach");
  test::ScopedEnv offline("HF_HUB_OFFLINE", "1");
  expect_pull_error(o, std::nullopt, "HF_HUB_OFFLINE");
}

}  // namespace
}  // namespace hibana

#endif  // HIBANA_HAVE_PULL
