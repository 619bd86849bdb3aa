// hibana cache stats|clear --cache-dir DIR: what the SSD tier holds, and removing it.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "state/ssd_store.h"

namespace hibana::cli {

void add_cache_command(CLI::App& app, Action& action) {
  CLI::App* cache = app.add_subcommand("cache", "inspect or clear the SSD state cache");
  cache->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  CLI::App* stats = cache->add_subcommand("stats", "blocks and bytes per model in a cache dir");
  stats->add_option("--cache-dir", *dir, "the serve --cache-dir")->required();
  stats->callback([&action, dir] {
    action = [dir] {
      auto models = SsdStore::summarize(*dir);
      if (models.empty()) {
        std::printf("%s: no cached state\n", dir->c_str());
        return 0;
      }
      uint64_t blocks = 0, bytes = 0;
      std::printf("%-18s %10s %14s\n", "model fingerprint", "blocks", "bytes");
      for (const auto& m : models) {
        std::printf("%016llx %10llu %14llu (%.1f MiB)%s%s\n",
                    static_cast<unsigned long long>(m.fingerprint),
                    static_cast<unsigned long long>(m.blocks),
                    static_cast<unsigned long long>(m.bytes), m.bytes / 1048576.0,
                    m.part.empty() ? "" : " ", m.part.c_str());
        blocks += m.blocks;
        bytes += m.bytes;
      }
      std::printf("total: %llu blocks, %.1f MiB in %s\n", static_cast<unsigned long long>(blocks),
                  bytes / 1048576.0, dir->c_str());
      return 0;
    };
  });
  auto clear_dir = std::make_shared<std::string>();
  CLI::App* clear = cache->add_subcommand("clear", "delete every cached block in a cache dir");
  clear->add_option("--cache-dir", *clear_dir, "the serve --cache-dir")->required();
  clear->callback([&action, clear_dir] {
    action = [clear_dir] {
      const uint64_t n = SsdStore::clear_dir(*clear_dir);
      std::printf("removed %llu blocks from %s\n", static_cast<unsigned long long>(n), clear_dir->c_str());
      return 0;
    };
  });
}

}  // namespace hibana::cli
