// Conversations render through the embedded model's chat template as transformers would
// render them, and the plan says how to read the output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "engine/json_recogniser.h"
#include "server/api_error.h"
#include "server/billing_header.h"
#include "server/fake_service.h"
#include "server/prompt_builder.h"
#include "server/server_fixture.h"

namespace hibana::server {
namespace {

using testing::EndsWith;
using testing::HasSubstr;
using testing::Not;

const char* kWeatherTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather of a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

PromptBuilder tiny_builder() {
  auto tok = test::tiny_tokenizer();
  return PromptBuilder(tok, read_template_info(test::tiny_model_dir(), *tok));
}

ChatRequest conversation(std::vector<ChatMessage> messages) {
  ChatRequest r;
  r.messages = std::move(messages);
  return r;
}

TEST(PromptBuilder, RendersToolCallsInHistoryWithObjectArguments) {
  ChatRequest r = conversation({
      {"system", "Be brief.", "", {}, "", ""},
      {"user", "Weather in Paris?", "", {}, "", ""},
      {"assistant", "", "", {{"call_1", "get_weather", R"({"city": "Paris"})"}}, "", ""},
      {"tool", "sunny", "", {}, "call_1", "get_weather"},
  });
  r.tools_json = kWeatherTools;
  PromptPlan p = tiny_builder().build(r);
  EXPECT_THAT(p.text, HasSubstr("Be brief.\n\nYou can call these tools."));
  EXPECT_THAT(p.text, HasSubstr("\"name\": \"get_weather\""));
  // Arguments are an object in the template (not a JSON string inside a string).
  EXPECT_THAT(p.text, HasSubstr(R"(<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call><|im_end|>)"));
  EXPECT_THAT(p.text, HasSubstr("<tool_response>\nsunny\n</tool_response>"));
  EXPECT_THAT(p.text, EndsWith("<|im_start|>assistant\n"));
  EXPECT_TRUE(p.parse_tool_calls);
  ASSERT_EQ(p.tools.size(), 1u);
  EXPECT_EQ(p.tools[0].name, "get_weather");
  EXPECT_EQ(p.reasoning, ReasoningMode::detect);  // the template leaves thinking to the model
  EXPECT_EQ(p.tokens, test::tiny_tokenizer()->encode(p.text, true));
}

TEST(PromptBuilder, ThinkingSwitch) {
  ChatRequest r = conversation({{"user", "hi", "", {}, "", ""}});
  r.enable_thinking = false;
  PromptPlan off = tiny_builder().build(r);
  EXPECT_THAT(off.text, EndsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_EQ(off.reasoning, ReasoningMode::off);
  r.enable_thinking = true;
  EXPECT_EQ(tiny_builder().build(r).reasoning, ReasoningMode::detect);
}

TEST(PromptBuilder, PreviousReasoningIsRendered) {
  ChatRequest r = conversation({{"user", "q", "", {}, "", ""},
                                {"assistant", "answer", "thought", {}, "", ""},
                                {"user", "again", "", {}, "", ""}});
  EXPECT_THAT(tiny_builder().build(r).text, HasSubstr("<think>\nthought\n</think>\n\nanswer"));
}

TEST(PromptBuilder, ForcedToolCallOpensTheCall) {
  ChatRequest r = conversation({{"user", "Weather?", "", {}, "", ""}});
  r.tools_json = kWeatherTools;
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = "get_weather";
  PromptPlan p = tiny_builder().build(r);
  EXPECT_THAT(
      p.text,
      EndsWith("<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "));
  EXPECT_EQ(p.forced_output, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  EXPECT_EQ(p.reasoning, ReasoningMode::off);
  // The engine keeps the arguments a JSON object; the parser gets the closing.
  EXPECT_EQ(p.constraint, JsonOutput::object);
  EXPECT_EQ(p.forced_suffix, "}\n</tool_call>");

  // "required" with a single tool names it.
  r.tool_choice = ToolChoice::required;
  EXPECT_EQ(tiny_builder().build(r).forced_output, p.forced_output);

  r.tools_json = R"([{"type": "function", "function": {"name": "a"}},
                     {"type": "function", "function": {"name": "b"}}])";
  p = tiny_builder().build(r);
  EXPECT_THAT(p.text, EndsWith("</think>\n\n<tool_call>\n"));
  EXPECT_EQ(p.forced_output, "<tool_call>\n");
  EXPECT_EQ(p.forced_suffix, "\n</tool_call>");
  EXPECT_EQ(p.constraint, JsonOutput::object);
}

// The forced call's JSON must satisfy the tools' parameters: the plan carries them compiled.
TEST(PromptBuilder, ForcedToolCallCarriesTheToolSchema) {
  auto fits = [](const PromptPlan& p, const std::string& doc) {
    JsonRecogniser r(p.schema);
    return r.feed(doc) && r.complete();
  };
  ChatRequest r = conversation({{"user", "Weather?", "", {}, "", ""}});
  r.tools_json = kWeatherTools;
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = "get_weather";
  PromptPlan p = tiny_builder().build(r);
  ASSERT_NE(p.schema, nullptr);
  EXPECT_TRUE(fits(p, R"({"city": "Paris"})"));
  EXPECT_FALSE(fits(p, R"({"city": 1})"));
  EXPECT_FALSE(fits(p, R"("Paris")"));  // the arguments are an object

  r.tool_choice = ToolChoice::required;
  r.tools_json = R"([{"type": "function", "function": {"name": "a",
                       "parameters": {"properties": {"x": {"enum": [1, 2]}}, "required": ["x"]}}},
                     {"type": "function", "function": {"name": "b"}}])";
  p = tiny_builder().build(r);
  ASSERT_NE(p.schema, nullptr);
  EXPECT_TRUE(fits(p, R"({"name": "a", "arguments": {"x": 2}})"));
  EXPECT_TRUE(fits(p, R"({"name": "b", "arguments": {"anything": [1]}})"));
  EXPECT_FALSE(fits(p, R"({"name": "a", "arguments": {"x": 3}})"));
  EXPECT_FALSE(fits(p, R"({"name": "c", "arguments": {}})"));
  EXPECT_FALSE(fits(p, R"({"name": "b"})"));

  // A malformed schema is the client's error; unsupported keywords are not.
  r.tools_json = R"([{"type": "function", "function": {"name": "a",
                       "parameters": {"properties": {"x": {"type": 5}}}}},
                     {"type": "function", "function": {"name": "b"}}])";
  try {
    tiny_builder().build(r);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_THAT(e.what(), HasSubstr("tools: the parameters of 'a'"));
    EXPECT_THAT(e.what(), HasSubstr("properties.x.type: expected a type name"));
  }
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = "a";
  EXPECT_THROW(tiny_builder().build(r), ApiError);
  r.tool_choice = ToolChoice::automatic;  // not enforced, so not compiled
  EXPECT_NO_THROW(tiny_builder().build(r));
  r.tool_choice = ToolChoice::named;
  r.tools_json = R"([{"type": "function", "function": {"name": "a",
                       "parameters": {"properties": {"x": {"type": "string", "pattern": "^a",
                                                           "format": "email"}}}}}])";
  EXPECT_TRUE(fits(tiny_builder().build(r), R"({"x": "not an email"})"));
}

TEST(PromptBuilder, JsonOutputSwitchesThinkingOff) {
  ChatRequest r = conversation({{"user", "Give JSON", "", {}, "", ""}});
  r.json_output = JsonOutput::object;
  PromptPlan p = tiny_builder().build(r);
  EXPECT_THAT(p.text, EndsWith("<think>\n\n</think>\n\n"));
  EXPECT_EQ(p.constraint, JsonOutput::object);
  EXPECT_EQ(p.reasoning, ReasoningMode::off);
}

TEST(PromptBuilder, CheckpointAtTheLastUserMessage) {
  ChatRequest r = conversation({{"system", "You are helpful.", "", {}, "", ""},
                                {"user", "first question", "", {}, "", ""},
                                {"assistant", "first answer", "", {}, "", ""},
                                {"user", "second question", "", {}, "", ""}});
  PromptPlan p = tiny_builder().build(r);
  ASSERT_GT(p.checkpoint_at, 0);
  auto tok = test::tiny_tokenizer();
  std::vector<int32_t> head(p.tokens.begin(), p.tokens.begin() + p.checkpoint_at);
  const std::string before = tok->decode(head);
  // Everything before the last user message's text, and nothing of it.
  EXPECT_THAT(before, HasSubstr("first answer<|im_end|>"));
  EXPECT_THAT(before, Not(HasSubstr("second")));
  EXPECT_LE(p.text.find("second question") - before.size(), 40u);
  // The next turn's prompt starts with the same tokens.
  r.messages.push_back({"assistant", "second answer", "", {}, "", ""});
  r.messages.push_back({"user", "third", "", {}, "", ""});
  PromptPlan next = tiny_builder().build(r);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), next.tokens.begin()));
  EXPECT_GT(next.checkpoint_at, p.checkpoint_at);
}

TEST(PromptBuilder, ToolChoiceErrorsAndNone) {
  ChatRequest r = conversation({{"user", "x", "", {}, "", ""}});
  r.tool_choice = ToolChoice::required;
  EXPECT_THROW(tiny_builder().build(r), ApiError);
  r.tools_json = kWeatherTools;
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = "nope";
  try {
    tiny_builder().build(r);
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_THAT(e.what(), HasSubstr("'nope'"));
  }
  r.tool_choice = ToolChoice::none;
  PromptPlan p = tiny_builder().build(r);
  EXPECT_THAT(p.text, Not(HasSubstr("<tools>")));
  EXPECT_FALSE(p.parse_tool_calls);
}

TEST(PromptBuilder, OneCallWhenParallelCallsAreOff) {
  ChatRequest r = conversation({{"user", "x", "", {}, "", ""}});
  r.tools_json = kWeatherTools;
  r.parallel_tool_calls = false;
  PromptPlan p = tiny_builder().build(r);
  ASSERT_EQ(p.internal_stops.size(), 1u);
  EXPECT_EQ(p.internal_stops[0].text, "</tool_call>");
  EXPECT_TRUE(p.internal_stops[0].keep);
}

TEST(PromptBuilder, FinalAssistantMessageIsContinued) {
  ChatRequest r = conversation(
      {{"user", "Count to 3", "", {}, "", ""}, {"assistant", "1, 2,", "", {}, "", ""}});
  PromptPlan p = tiny_builder().build(r);
  EXPECT_THAT(p.text, EndsWith("<|im_start|>assistant\n1, 2,"));
  // An empty final assistant message is dropped: a normal generation prompt.
  r.messages.back().content.clear();
  EXPECT_THAT(tiny_builder().build(r).text,
              EndsWith("<|im_start|>user\nCount to 3<|im_end|>\n<|im_start|>assistant\n"));
}

TEST(PromptBuilder, LateSystemMessages) {
  ChatRequest r = conversation({{"user", "a", "", {}, "", ""},
                                {"system", "reminder", "", {}, "", ""},
                                {"user", "b", "", {}, "", ""}});
  EXPECT_THAT(tiny_builder().build(r).text, HasSubstr("<|im_start|>system\nreminder<|im_end|>"));
  // A template that refuses them gets them as user messages.
  auto tok = test::tiny_tokenizer();
  TemplateInfo strict{
      "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
      "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
      "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "", "<|im_end|>"};
  PromptPlan p = PromptBuilder(tok, strict).build(r);
  EXPECT_THAT(p.text, HasSubstr("<|im_start|>user\nreminder<|im_end|>"));
}

TEST(PromptBuilder, TemplateErrorsAre400) {
  auto tok = test::tiny_tokenizer();
  TemplateInfo failing{"{{ raise_exception('no tools here') }}", "", ""};
  try {
    PromptBuilder(tok, failing).build(conversation({{"user", "a", "", {}, "", ""}}));
    ADD_FAILURE();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_THAT(e.what(), HasSubstr("no tools here"));
  }
}

TEST(PromptBuilder, XmlToolFormatFromTheTemplate) {
  auto tok = test::tiny_tokenizer();
  TemplateInfo xml{
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{# <function=NAME> #}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "", ""};
  PromptBuilder b(tok, xml);
  EXPECT_EQ(b.tool_call_format(), ToolCallFormat::xml);
  ChatRequest r = conversation({{"user", "x", "", {}, "", ""}});
  r.tools_json = kWeatherTools;
  r.tool_choice = ToolChoice::named;
  r.tool_choice_name = "get_weather";
  PromptPlan p = b.build(r);
  EXPECT_EQ(p.forced_output, "<tool_call>\n<function=get_weather>\n");
  // The engine constrains the rest of the call (XmlCallConstraint), not a JSON document.
  EXPECT_EQ(p.constraint, JsonOutput::none);
  ASSERT_TRUE(p.xml_call);
  EXPECT_TRUE(p.xml_call->named);
  ASSERT_EQ(p.xml_call->tools.size(), 1u);
  EXPECT_EQ(p.xml_call->tools[0].name, "get_weather");
  ASSERT_EQ(p.xml_call->tools[0].params.size(), 1u);
  EXPECT_EQ(p.xml_call->tools[0].params[0].name, "city");
  EXPECT_TRUE(p.xml_call->tools[0].params[0].text);
  EXPECT_EQ(p.forced_suffix, "\n</tool_call>");
  r.tool_choice = ToolChoice::automatic;
  EXPECT_FALSE(b.build(r).xml_call);
}

TEST(PromptBuilder, BillingNonceDoesNotChangeThePrompt) {
  auto render = [](const std::string& cch, const std::string& suffix) {
    ChatRequest r = conversation(
        {{"system",
          normalize_billing_header("x-anthropic-billing-header: cc_version=2.1.197." + suffix +
                                   "; cc_entrypoint=cli; cch=" + cch + ";\nYou are Claude Code."),
          "",
          {},
          "",
          ""},
         {"user", "hi", "", {}, "", ""}});
    return tiny_builder().build(r).tokens;
  };
  EXPECT_EQ(render("eb6c6", "3d9"), render("0aaa9", "f51"));
}

}  // namespace
}  // namespace hibana::server
