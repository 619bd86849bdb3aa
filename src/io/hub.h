// The Hugging Face hub: where its local cache lives, what it holds (`hibana ls`), and `hibana
// pull`, which downloads a model from the Hugging Face hub into the hub's local cache, laid out
// as huggingface_hub lays it out (models--ORG--NAME/{blobs,snapshots/COMMIT,refs/REVISION}, blobs
// named by their LFS sha256 or git blob id, partial blobs as BLOB.incomplete, a lock per blob in
// .locks/), so hibana, transformers and `hf` share one copy. Resumes partial files, retries
// transient failures, checks every blob's size and hash, and checks the disk has room first.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hibana {

// Where downloads go: $HF_HUB_CACHE, $HUGGINGFACE_HUB_CACHE, $HF_HOME/hub,
// $XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub (the first that is set).
std::string hub_cache_dir();
// "models--ORG--NAME": the folder of ORG/NAME in a cache root (and in its .locks/).
std::string hub_repo_folder(const std::string& repo);
// The commit a refs/REVISION file names, surrounding whitespace dropped; empty without one.
std::string hub_read_ref(const std::string& ref_file);
// "ORG/NAME@REVISION" split at its '@' ({model, "main"} without one); nothing is checked.
struct HubRef {
  std::string repo;
  std::string revision = "main";
};
HubRef parse_hub_ref(const std::string& model);
// The snapshot folder REVISION names in a repo folder (.../models--ORG--NAME): the commit its
// refs/REVISION file names, else REVISION itself as a commit; for "main" with neither, the only
// snapshot there is. Empty when none is. --model and `hibana ls` both choose by it.
std::string hub_snapshot_dir(const std::string& repo_dir, const std::string& revision);
// Every place a model named ORG/NAME may be found, hub_cache_dir() first.
std::vector<std::string> hub_cache_roots();
// $HF_ENDPOINT (trailing '/' removed) or https://huggingface.co.
std::string hub_endpoint();
// $HF_TOKEN, $HUGGING_FACE_HUB_TOKEN, or the token file ($HF_TOKEN_PATH, else $HF_HOME/token,
// else ~/.cache/huggingface/token); empty when none.
std::string hub_token();

struct HubFile {
  std::string path;  // in the repository ("model-00001-of-00002.safetensors")
  uint64_t size = 0;
  std::string blob_id;  // LFS sha256, or git blob sha1
  bool lfs = false;
};

struct HubProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // over the files still to download
  size_t files_done = 0, files_total = 0;
  std::string current;  // a file being downloaded now
};

struct HubPullOptions {
  std::string repo;                  // ORG/NAME
  std::string revision = "main";     // branch, tag or commit
  std::vector<std::string> include;  // globs (fnmatch, as `hf download --include`); empty:
                                     // the top-level files a model needs (*.json, *.safetensors,
                                     // *.jinja, *.txt, tokenizer.model, *.tiktoken)
  std::string cache_dir;             // empty: hub_cache_dir()
  std::string endpoint;              // empty: hub_endpoint()
  std::string token;                 // empty: hub_token()
  int jobs = 4;                      // files downloaded at once
  int retries = 5;                   // per file, resuming each time
  // Called with config.json's text before any other file is fetched; throw to stop the pull
  // (the CLI refuses architectures hibana cannot run before gigabytes move).
  std::function<void(const std::string& config_json)> check_config;
  // Called once the listing is in and the disk has room: what is to come (bytes_done: what
  // earlier partial downloads already hold), and the commit the revision names.
  std::function<void(const HubProgress&, const std::string& commit)> started;
  // Called about once a second from the calling thread while files download.
  std::function<void(const HubProgress&)> progress;
};

struct HubPullResult {
  std::string snapshot_dir;  // pass it (or ORG/NAME) to --model
  std::string commit;
  std::vector<HubFile> files;
  size_t files_downloaded = 0;
  uint64_t bytes_downloaded = 0;
};

HubPullResult hub_pull(const HubPullOptions& options);

// A model in the hub cache (`hibana ls`).
struct HubCachedModel {
  std::string repo;               // ORG/NAME
  std::string dir;                // .../models--ORG--NAME
  std::string snapshot;           // hub_snapshot_dir(dir, "main")'s commit (empty: none)
  std::vector<std::string> refs;  // revisions with a ref
  uint64_t bytes = 0;    // of its blobs
  bool partial = false;  // an unfinished download (.incomplete blobs) is there
};
std::vector<HubCachedModel> hub_cached_models();

// Whether `path` is one of the files a pull fetches by default.
bool hub_default_file(const std::string& path);

}  // namespace hibana
