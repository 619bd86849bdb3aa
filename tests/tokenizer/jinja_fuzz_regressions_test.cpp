// Bugs in the Jinja engine that jinja_fuzz (and writing it) found: signed integer overflow and
// float-to-int conversions out of range (undefined behaviour, or a 2^63-step loop for `**`),
// std::out_of_range escaping from number parsing, macros leaking their scope through a reference
// cycle on every render, and templates that hang, exhaust memory or overflow the stack (nested
// loops, 'x' * 10**12, a list nested in itself 10^5 times, a namespace that holds itself).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/paths.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/context.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace hibana {
namespace {

using testing::HasSubstr;

std::string render(const std::string& source) {
  return ChatTemplate::compile(source, "test").render(nlohmann::ordered_json::object());
}

void expect_render_error(const std::string& source, const std::string& needle) {
  try {
    render(source);
    ADD_FAILURE() << source << " rendered; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << source;
    EXPECT_THAT(e.what(), HasSubstr(needle)) << source;
  }
}

TEST(JinjaFuzzRegressions, IntegerOverflowFailsTheRender) {
  for (const char* source : {
           "{{ 9223372036854775807 + 1 }}",
           "{{ -9223372036854775807 - 2 }}",
           "{{ 4294967296 * 4294967296 }}",
           "{{ 2 ** 64 }}",
           "{{ 3 ** 9223372036854775807 }}",
           "{{ -(-9223372036854775807 - 1) }}",
           "{{ (-9223372036854775807 - 1) // -1 }}",
           "{{ (-9223372036854775807 - 1) | abs }}",
           "{{ [9223372036854775807, 1] | sum }}",
       }) {
    expect_render_error(source, "integer overflow");
  }
}

TEST(JinjaFuzzRegressions, IntegerResultsThatFitStayExact) {
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 10 ** 18 }} {{ 0 ** 0 }}"),
            "4611686018427387904 -9223372036854775808 1000000000000000000 1");
  // Used to multiply 2^63 times.
  EXPECT_EQ(render("{{ 1 ** 9223372036854775807 }} {{ (-1) ** 9223372036854775807 }}"), "1 -1");
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }} {{ 7 // -1 }} {{ -7 % -1 }}"), "0 -7 0");
  EXPECT_EQ(
      render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }} {{ 6 is divisibleby(-4) }}"),
      "True False");
  EXPECT_EQ(render("{{ -(-9223372036854775807) }} {{ (-9223372036854775807) | abs }}"),
            "9223372036854775807 9223372036854775807");
}

TEST(JinjaFuzzRegressions, StepsPastInt64EndRangesAndSlices) {
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 10) | list }}"),
            "[9223372036854775806]");
  EXPECT_EQ(render("{{ range(-9223372036854775807, -9223372036854775807 - 1, -5) | list }}"),
            "[-9223372036854775807]");
  EXPECT_EQ(render("{{ 'abc'[2::9223372036854775807] }} {{ [1, 2, 3][1::9223372036854775807] }}"),
            "c [2]");
}

TEST(JinjaFuzzRegressions, FloatToIntOutsideInt64FailsTheRender) {
  expect_render_error("{{ 1e300 | int }}", "64-bit integer");
  expect_render_error("{{ '1e300' | int }}", "64-bit integer");
  expect_render_error("{{ '%d' % 1e300 }}", "64-bit integer");
  expect_render_error("{{ '99999999999999999999' | int }}", "does not fit in 64 bits");
  EXPECT_EQ(render("{{ 2.9 | int }} {{ '-7' | int }} {{ '4.5' | int }} {{ '%d' % -3.7 }}"),
            "2 -7 4 -3");
}

TEST(JinjaFuzzRegressions, FloatLiteralsOutOfRangeAreInfinityOrZero) {
  EXPECT_EQ(render("{{ 1e999 }} {{ -1e999 }} {{ 1e-999 }}"), "inf -inf 0.0");
}

TEST(JinjaFuzzRegressions, HugeDigitsInFormatFieldsAndAttributePaths) {
  expect_render_error("{{ '{99999999999999999999999}'.format(1) }}", "str.format");
  EXPECT_EQ(render("{{ [[1]] | map(attribute='0.99999999999999999999') | list | length }}"), "1");
}

// A macro is stored in the scope it captures; the render must break that cycle (and a
// namespace holding itself) or every render of a template with a macro leaks its whole context.
TEST(JinjaFuzzRegressions, MacrosDoNotKeepTheirScopeAliveAfterTheRender) {
  const jinja::Body body = jinja::parse_template(jinja::lex_template(
      "{% macro m(x) %}[{{ x }}]{% endmacro %}{% set ns = namespace(f=m) %}"
      "{% set ns.self = ns %}{% for i in range(2) %}{% macro inner() %}{% endmacro %}"
      "{% set ns.inner = inner %}{% endfor %}{{ m(1) }}{{ ns.self.f(2) }}"));
  std::weak_ptr<jinja::Scope> watch;
  std::string out;
  {
    auto root = std::make_shared<jinja::Scope>();
    jinja::install_globals(*root);
    watch = root;
    jinja::Context ctx(root);
    jinja::render_body(body, ctx, out);
  }
  EXPECT_EQ(out, "[1][2]");
  EXPECT_TRUE(watch.expired()) << "a reference cycle keeps the template's scope alive";
}

TEST(JinjaFuzzRegressions, RunawayTemplatesFailInsteadOfHanging) {
  expect_render_error(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
      "too much work");
  expect_render_error(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
      "{{ f(60) }}",
      "too much work");
  EXPECT_EQ(render("{{ '' * 1000000000000000000 }}{{ ([] * 1000000000000000000) | length }}"), "0");
  // Each of these walks a long value on every iteration.
  for (const char* walk : {"'y' in s", "s[5]", "s | length", "s.count('y')", "s[1:2]",
                           "'y' is in(s)", "5 in l", "l | sum", "l.index(0)"}) {
    expect_render_error(std::string("{% set s = 'x' * 1000000 %}{% set l = [0] * 100000 %}"
                                    "{% for i in range(100000) %}{{ ") +
                            walk + " }}{% endfor %}",
                        "too much work");
  }
}

TEST(JinjaFuzzRegressions, HugeStringsAndListsFailBeforeTheyAreBuilt) {
  expect_render_error("{{ 'x' * 900000000000 }}", "over the limit");
  expect_render_error("{{ [1, 2] * 1000000000 }}", "over the limit");
  expect_render_error("{{ 'x' | indent(1000000000000) }}", "builds a string");
  expect_render_error("{{ [1, [2]] | tojson(indent=1000000000000) }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ [s] * 100 }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ ([s] * 100) | join }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ '{0}{0}'.format(s) }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ '%s%s' % (s, s) }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ s ~ s }}", "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ 'ab' | replace('', s) }}", "builds a string");
  expect_render_error(
      "{% set ns = namespace(s='xx') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      "builds a string");
  expect_render_error("{% set s = 'x' * 9000000 %}{{ ([s] * 100) | map('upper') | list }}",
                      "builds a string");
  expect_render_error("{% set s = 'x' * 1100000 %}{{ s | list | length }}", "over the limit");
  expect_render_error("{% set s = 'x ' * 1100000 %}{{ s.split() | length }}", "over the limit");
}

TEST(JinjaFuzzRegressions, DeepNestingFailsInsteadOfOverflowingTheStack) {
  expect_render_error(
      "{% set st = namespace(l=[]) %}{% for i in range(100000) %}{% set st.l = [st.l] %}"
      "{% endfor %}",
      "deeper than 512");
  expect_render_error(
      "{% set st = namespace(n=none) %}{% for i in range(100000) %}"
      "{% set st.n = namespace(x=st.n) %}{% endfor %}",
      "deeper than 512");
  expect_render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested");
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 100000; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  try {
    ChatTemplate::compile("{{ x | length }}", "test").render({{"x", deep}});
    ADD_FAILURE() << "rendered a context nested 100000 deep";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("deeper than 512"));
  }
}

// The limits leave real templates room: each model's template renders a 5000-message
// conversation with tool calls, reasoning and 50 tools.
TEST(JinjaFuzzRegressions, RealTemplatesStayWithinTheLimits) {
  nlohmann::ordered_json context = {{"add_generation_prompt", true}};
  auto& messages = context["messages"] = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You are helpful."}});
  for (int i = 0; i < 5000; ++i) {
    switch (i % 4) {
      case 0:
        messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(i)}});
        break;
      case 1:
        messages.push_back(
            {{"role", "assistant"},
             {"content", ""},
             {"reasoning_content", "Let me look that up."},
             {"tool_calls",
              {{{"type", "function"},
                {"function", {{"name", "tool_1"}, {"arguments", {{"a", "x"}, {"b", 2}}}}}}}}});
        break;
      case 2:
        messages.push_back({{"role", "tool"}, {"content", "{\"result\": 21}"}});
        break;
      default:
        messages.push_back({{"role", "assistant"}, {"content", "The answer is 42."}});
    }
  }
  auto& tools = context["tools"] = nlohmann::ordered_json::array();
  for (int t = 0; t < 50; ++t) {
    tools.push_back(
        {{"type", "function"},
         {"function",
          {{"name", "tool_" + std::to_string(t)},
           {"description", "Does a thing."},
           {"parameters",
            {{"type", "object"},
             {"properties", {{"a", {{"type", "string"}}}, {"b", {{"type", "integer"}}}}},
             {"required", {"a"}}}}}}});
  }
  const std::string models = test::shared_assets() + "/models/";
  for (const char* model : {"Qwen3-30B-A3B", "Qwen3-Coder-30B-A3B-Instruct", "Qwen3.5-4B",
                            "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"}) {
    SCOPED_TRACE(model);
    const ChatTemplate t = ChatTemplate::compile(read_chat_template(models + model), model);
    EXPECT_GT(t.render(context).size(), 100000u);
  }
}

}  // namespace
}  // namespace hibana
