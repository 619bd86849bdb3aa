// Tokenizer::load: which files a path means.
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace hibana {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec)) {
    throw Error(ErrorKind::not_found, path + ": no such tokenizer file or directory");
  }
  TokenizerSpec spec;
  std::string dir;
  if (fs::is_directory(p, ec)) {
    dir = path;
    const bool has_json = fs::is_regular_file(p / "tokenizer.json", ec);
    const bool has_vocab = fs::is_regular_file(p / "vocab.json", ec);
    const bool has_merges = fs::is_regular_file(p / "merges.txt", ec);
    if (has_json) {
      spec = read_tokenizer_json((p / "tokenizer.json").string());
    } else if (has_vocab && has_merges) {
      spec = read_vocab_and_merges(path);
    } else if (has_vocab || has_merges) {
      throw Error(ErrorKind::not_found, path + ": has " +
                                            (has_vocab ? "vocab.json but no merges.txt"
                                                       : "merges.txt but no vocab.json") +
                                            " (and no tokenizer.json)");
    } else {
      throw Error(ErrorKind::not_found,
                  path + ": no tokenizer.json, and no vocab.json + merges.txt");
    }
  } else {
    spec = read_tokenizer_json(path);
    dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  }
  // chat_template.jinja wins over tokenizer_config.json's "chat_template", as in transformers.
  try {
    spec.chat_template = read_chat_template(dir);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::not_found) throw;
  }
  auto tokenizer = std::make_unique<BpeTokenizer>(spec);
  log_debug("tokenizer ", spec.source, ": ", tokenizer->vocab_size(), " ids, ", spec.merges.size(),
            " merges, ", spec.added_tokens.size(), " added tokens");
  return tokenizer;
}

}  // namespace hibana
