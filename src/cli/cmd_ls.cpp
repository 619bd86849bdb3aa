// hibana ls: the models in the Hugging Face hub cache, their size, and whether hibana runs them.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "core/byte_text.h"
#include "core/error.h"
#include "io/hub.h"
#include "io/mapped_file.h"
#include "model/config.h"

namespace hibana::cli {

namespace {

// "runs: <model_type>", or why not (the config parser's reason, without the file's path).
std::string verdict(const HubCachedModel& m) {
  if (m.snapshot.empty()) return "no snapshot for main";
  const std::string config = m.dir + "/snapshots/" + m.snapshot + "/config.json";
  try {
    const ModelConfig c = parse_model_config(read_text_file(config), "config.json");
    return "runs (" + c.model_type + ")";
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("config.json: ", 0) == 0) why = why.substr(13);
    return "no: " + why.substr(0, 80);
  }
}

int list_models() {
  const auto models = hub_cached_models();
  if (models.empty()) {
    std::printf("no models in %s (get one with `hibana pull ORG/NAME`)\n", hub_cache_dir().c_str());
    return 0;
  }
  std::printf("%-44s %10s  %s\n", "MODEL", "SIZE", "HIBANA");
  for (const auto& m : models) {
    std::string name = m.repo;
    for (const auto& r : m.refs) {
      if (r != "main") name += " @" + r;
    }
    std::printf("%-44s %10s  %s%s\n", name.c_str(), byte_text(static_cast<double>(m.bytes)).c_str(),
                verdict(m).c_str(), m.partial ? " [unfinished download: pull it again]" : "");
  }
  return 0;
}

}  // namespace

void add_ls_command(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("ls", "list the models in the Hugging Face hub cache");
  cmd->callback([&action] { action = [] { return list_models(); }; });
}

}  // namespace hibana::cli
