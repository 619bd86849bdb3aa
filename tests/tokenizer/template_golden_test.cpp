// Every conversation of tests/fixtures/templates/conversations.json rendered with every
// template of templates.json must equal, byte for byte, what transformers rendered
// (tools/templates/make_template_golden.py writes both files and the <template>.jsonl goldens).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "support/paths.h"
#include "tokenizer/chat_template.h"

namespace hibana {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string golden_dir() {
  return test::fixtures_dir() + "/templates";
}

ordered_json read_json_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ordered_json::parse(ss.str());
}

// Where two renders first differ, with some context, for a readable failure.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  size_t from = i > 60 ? i - 60 : 0;
  return "first difference at byte " + std::to_string(i) + "\n  want: ..." +
         ordered_json(want.substr(from, 120)).dump() + "\n  got:  ..." +
         ordered_json(got.substr(from, 120)).dump();
}

ordered_json context_for(const ordered_json& conversation, const ordered_json& kwargs) {
  ordered_json context = kwargs;
  context["messages"] = conversation["messages"];
  if (conversation.contains("tools")) context["tools"] = conversation["tools"];
  return context;
}

TEST(TemplateGolden, EveryTemplateMatchesTransformers) {
  const std::string dir = golden_dir();
  if (!fs::exists(dir + "/templates.json") || !fs::exists(dir + "/conversations.json")) {
    GTEST_SKIP() << "no goldens in " << dir << ": run tools/templates/make_template_golden.py";
  }
  if (!fs::exists(test::shared_assets() + "/models")) {
    GTEST_SKIP() << "shared assets not found at " << test::shared_assets();
  }
  std::map<std::string, ordered_json> conversations;
  for (const auto& c : read_json_file(dir + "/conversations.json")) {
    conversations[c["name"].get<std::string>()] = c;
  }
  int compared = 0;
  for (const auto& entry : read_json_file(dir + "/templates.json")) {
    const std::string name = entry["name"].get<std::string>();
    const std::string golden = dir + "/" + name + ".jsonl";
    if (!fs::exists(golden)) {
      ADD_FAILURE() << "templates.json lists " << name << " but " << golden << " is missing";
      continue;
    }
    std::string source =
        read_chat_template(test::shared_assets() + "/" + entry["path"].get<std::string>());
    ChatTemplate tmpl = ChatTemplate::compile(source, name);
    std::ifstream in(golden);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      ordered_json row = ordered_json::parse(line);
      const std::string conv = row["conversation"].get<std::string>();
      SCOPED_TRACE(name + " / " + conv);
      ASSERT_TRUE(conversations.count(conv)) << "unknown conversation " << conv;
      ordered_json context = context_for(conversations[conv], row["kwargs"]);
      ++compared;
      if (row.contains("error")) {
        try {
          std::string got = tmpl.render(context);
          ADD_FAILURE() << "transformers raised \"" << row["error"].get<std::string>()
                        << "\" but we rendered " << ordered_json(got).dump();
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
          if (row.value("error_type", "") == "TemplateError") {  // raise_exception(message)
            EXPECT_EQ(std::string(e.what()), row["error"].get<std::string>());
          }
        }
        continue;
      }
      const std::string want = row["rendered"].get<std::string>();
      std::string got;
      try {
        got = tmpl.render(context);
      } catch (const Error& e) {
        ADD_FAILURE() << "render failed: " << e.what();
        continue;
      }
      EXPECT_TRUE(got == want) << first_difference(want, got);
    }
  }
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace hibana
