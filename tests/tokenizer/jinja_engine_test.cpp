// The Jinja engine, construct by construct. Expected outputs are what jinja2 3.1 renders under
// transformers' settings (trim_blocks, lstrip_blocks, ImmutableSandboxedEnvironment, its own
// tojson); each was checked by hand and against jinja2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/paths.h"
#include "tokenizer/chat_template.h"

namespace hibana {
namespace {

using json = nlohmann::ordered_json;

std::string render(const std::string& source, const std::string& context = "{}") {
  return ChatTemplate::compile(source, "test").render(json::parse(context));
}

struct Case {
  const char* name;
  const char* source;
  const char* context;
  const char* expected;
};

const Case kCases[] = {
    {"text_and_print", "a{{ 1 + 2 }}b{{ 'x' ~ 3 }}", "{}", "a3bx3"},
    {"python_values",
     "{{ none }} {{ true }} {{ false }} {{ 3 }} {{ 2.5 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ "
     "-0.0 }}",
     "{}", "None True False 3 2.5 1e+16 1e-05 0.30000000000000004 -0.0"},
    {"repr_of_containers",
     "{{ [1, 'a', none, true, 2.0] }} {{ {'k': \"it's\", 'n': [1]} }} {{ (1,) }} {{ ('a', 'b') }}",
     "{}", "[1, 'a', None, True, 2.0] {'k': \"it's\", 'n': [1]} (1,) ('a', 'b')"},
    {"string_repr_escapes",
     "{{ ['tab\\there', 'nl\\n', 'back\\\\slash', 'q\"', \"both'\\\"\", 'é ✓', '\\x07'] }}", "{}",
     "['tab\\there', 'nl\\n', 'back\\\\slash', 'q\"', 'both\\'\"', 'é ✓', '\\x07']"},
    {"arithmetic",
     "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
     "{{ 1 + 2.0 }} {{ true + 1 }} {{ 'ab' * 2 }} {{ [1] + [2] }}",
     "{}", "3 -4 2 -2 3.5 1024 0.5 3.0 2 abab [1, 2]"},
    {"comparisons",
     "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'b' in 'abc' }} {{ 2 not "
     "in [1, 3] }} {{ 'k' in {'k': 1} }} {{ none == none }}",
     "{}", "True False True True True True True True"},
    {"logic_returns_operands",
     "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ [] and 1 }} {{ not none }} {{ x or 'dflt' }}", "{}",
     "x b [] True dflt"},
    {"ternary", "{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'only' if false }}]", "{}",
     "yn[]"},
    {"precedence",
     "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 'a' ~ (1 + 2) }} {{ "
     "items|length - 1 }}",
     "{\"items\": [1, 2, 3]}", "7 9 4 True a3 2"},
    {"if_elif_else",
     "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %},{% "
     "endfor %}",
     "{}", "one,two,many,"},
    {"for_loop_vars",
     "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 "
     "}}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
     "{}", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
    {"for_prev_next",
     "{% for x in [1, 2, 3] %}[{{ loop.previtem }}/{{ loop.nextitem }}]{% if loop.previtem is "
     "defined %}p{% endif %}{% endfor %}",
     "{}", "[/2][1/3]p[2/]p"},
    {"for_else_and_filter",
     "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in range(10) if x is odd %}{{ x }}{{ "
     "',' if not loop.last }}{% endfor %}",
     "{}", "empty 1,3,5,7,9"},
    {"for_unpack_items",
     "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in d.items() %}{{ k }}{% "
     "endfor %}{% for k in d %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1;a=2;baba"},
    {"for_break_continue",
     "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% "
     "endif %}{{ x }}{% endfor %}",
     "{}", "0134"},
    {"for_scoping",
     "{% set x = 'out' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}",
     "{}", "out1out2out"},
    {"loop_cycle_nested",
     "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.cycle('-', '+') }}{{ a }}{{ b }}{% endfor "
     "%}{{ loop.index }}{% endfor %}",
     "{}", "-1x+1y1-2x+2y2"},
    {"namespace",
     "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set "
     "ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
     "{}", "6 0123"},
    {"set_tuple_and_block",
     "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}  Hi {{ a }}  {% endset %}[{{ blk }}]{% set "
     "up | upper | trim %} shout {% endset %}[{{ up }}]",
     "{}", "12[  Hi 1  ][SHOUT]"},
    {"macro_defaults_kwargs",
     "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{{ varargs }}{{ kwargs }}{% endmacro "
     "%}{{ m(1) }}|{{ m(1, 2, 3, 4, z=5) }}|{{ m(a='x', c='y') }}",
     "{}", "1BNone(){}|123(4,){'z': 5}|xBy(){}"},
    {"macro_sees_globals_late", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}",
     "{}", "late"},
    {"call_block",
     "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') "
     "%}inner {{ 1 + 1 }}{% endcall %}",
     "{}", "<b>inner 2</b>"},
    {"filter_block", "{% filter upper %}hello {{ 'world' }}{% endfilter %}", "{}", "HELLO WORLD"},
    {"whitespace_control",
     "<ul>\n  {% for x in [1, 2] %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n  {%- if true "
     "-%}\n   A   \n  {%- endif %}\nB {{- ' C ' -}} D\n{%+ if true %}plus{% endif %}\n",
     "{}", "<ul>\n    <li>1</li>\n    <li>2</li>\n</ul>AB C D\nplus"},
    {"comments_and_raw",
     "a  {# comment #}\n  b\n  {# line comment #}\nc{% raw %}{{ not parsed }}{% endraw %}d", "{}",
     "a    b\nc{{ not parsed }}d"},
    {"trailing_newline_dropped", "line\n", "{}", "line"},
    {"crlf_normalized", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", "{}", "a\nb\n"},
    {"string_methods",
     "{{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b "
     "'.split() }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'Hello'.startswith('He') }}{{ "
     "'Hello'.endswith(('x', 'lo')) }}|{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'hello "
     "world'.title() }}{{ 'hELLO'.capitalize() }}|{{ 'aXbX'.replace('X', '-') }}|{{ "
     "'abcabc'.find('c') }}{{ 'abc'.find('z') }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}{{ "
     "'x\\n\\n'.rstrip('\\n') }}",
     "{}",
     "a b|hi|['a', 'b', '', 'c']|['a', 'b']|['a b', 'c']|TrueTrue|ABCabcHello "
     "WorldHello|a-b-|2-1|x\nx"},
    {"string_slicing",
     "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ s[:-1] }}|{{ s[::2] }}|{{ s[0] }}{{ s[-1] }}|{{ "
     "l[1:] }}|{{ l[::-1] }}|{{ l[5:9] }}",
     "{\"s\": \"héllo\", \"l\": [1, 2, 3]}", "él|olléh|lo|héll|hlo|ho|[2, 3]|[3, 2, 1]|[]"},
    {"filters_text",
     "{{ 'hello world'|title }}|{{ 'hELLo'|capitalize }}|{{ '  x  '|trim }}|{{ 'xxyxx'|trim('x') "
     "}}|{{ 'a-b'|replace('-', '+') }}|{{ 'abc'|upper }}{{ 'ABC'|lower }}|{{ 'one two  "
     "three'|wordcount }}|{{ '<a href=\"x\">&'|e }}|{{ 'abc'|reverse }}|{{ "
     "'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}",
     "{}",
     "Hello World|Hello|x|y|a+b|ABCabc|3|&lt;a href=&#34;x&#34;&gt;&amp;|cba|a\n  b\n\n  c|  a\n  "
     "b"},
    {"filters_sequences",
     "{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['a', "
     "'A', 'b']|unique|list }}|{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}|{{ [1, 2]|join(', ') "
     "}}|{{ 'ab'|list }}|{{ [1, 2, 3]|length }}{{ 'héllo'|count }}|{{ [1, 2, 3]|reverse|list }}|{{ "
     "[1, 2, 3]|sum }}|{{ [4, 2, 8]|min }}{{ [4, 2, 8]|max }}",
     "{}", "[1, 2, 3]|['A', 'b', 'c']|[3, 2, 1]|['a', 'b']|13|1, 2|['a', 'b']|35|[3, 2, 1]|6|28"},
    {"filters_map_select",
     "{{ users|map(attribute='name')|join(',') }}|{{ "
     "users|selectattr('admin')|map(attribute='name')|list }}|{{ "
     "users|rejectattr('admin')|list|length }}|{{ [1, 2, 3, 4]|select('even')|list }}|{{ [1, 2, 3, "
     "4]|reject('odd')|list }}|{{ ['a', 'b', 'c']|reject('in', ['b'])|list }}|{{ ['x', "
     "'y']|map('upper')|list }}|{{ users|selectattr('name', 'equalto', 'bo')|list }}",
     "{\"users\": [{\"name\": \"al\", \"admin\": true}, {\"name\": \"bo\", \"admin\": false}]}",
     "al,bo|['al']|1|[2, 4]|[2, 4]|['a', 'c']|['X', 'Y']|[{'name': 'bo', 'admin': False}]"},
    {"filters_numbers",
     "{{ -3|abs }}|{{ '42'|int }}{{ '4.7'|int }}{{ 'x'|int }}{{ 'x'|int(7) }}{{ 3.9|int }}|{{ "
     "'2.5'|float }}{{ 'x'|float }}|{{ 2.675|round(2) }}{{ 2.5|round }}{{ 3|round }}{{ "
     "2.1|round(0, 'ceil') }}{{ 2.9|round(method='floor') }}",
     "{}", "3|424073|2.50.0|2.672.033.02.0"},
    {"filters_default_string",
     "{{ missing|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|{{ "
     "none|default('d', true) }}|{{ 5|string ~ 1 }}|{{ none|string }}|{{ d|string }}|{{ [true, "
     "none]|string }}|{{ 3|safe }}",
     "{\"d\": {\"a\": [1, 2.5, null, true, \"s\"]}}",
     "d||d|d|51|None|{'a': [1, 2.5, None, True, 's']}|[True, None]|3"},
    {"filters_items_dictsort",
     "{{ d|items|list }}|{{ d|dictsort }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d|list "
     "}}|{{ missing|items|list }}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "[('b', 1), ('a', 2)]|[('a', 2), ('b', 1)]|[('a', 2), ('b', 1)]|['b', 'a']|[]"},
    {"tojson_variants",
     "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ v|tojson(separators=(',', ':')) }}|{{ "
     "v|tojson(sort_keys=true) }}|{{ 'é\"\\n\\t\\x01'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) "
     "}}|{{ [1.0, 1e20, 0.1, -5]|tojson }}|{{ {}|tojson }}{{ []|tojson(indent=2) }}",
     "{\"v\": {\"z\": 1, \"a\": [true, null, \"x\"], \"m\": {}}}",
     "{\"z\": 1, \"a\": [true, null, \"x\"], \"m\": {}}|{\n  \"z\": 1,\n  \"a\": [\n    true,\n    "
     "null,\n    \"x\"\n  ],\n  \"m\": {}\n}|{\"z\":1,\"a\":[true,null,\"x\"],\"m\":{}}|{\"a\": "
     "[true, null, \"x\"], \"m\": {}, \"z\": 1}|\"é\\\"\\n\\t\\u0001\"|\"\\u00e9\"|[1.0, 1e+20, "
     "0.1, -5]|{}[]"},
    {"tests_types",
     "{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1 is integer }}{{ 1.0 is float "
     "}}{{ 's' is string }}{{ {} is mapping }}{{ [] is sequence }}{{ 's' is sequence }}{{ {} is "
     "iterable }}{{ 1 is iterable }}{{ none is none }}{{ true is boolean }}{{ 0 is boolean }}{{ "
     "true is true }}{{ 1 is true }}{{ false is false }}{{ range is callable }}",
     "{}", "TrueTrueFalseTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueFalseTrueFalseTrueTrue"},
    {"tests_values",
     "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is "
     "divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 2 is in [1, 2] }}{{ 1 is eq 1 }}{{ 1 is equalto "
     "2 }}{{ 1 is ne 2 }}{{ 3 is gt 2 }}{{ 3 is lt 2 }}{{ 3 is ge 3 }}{{ 2 is le 1 }}{{ 'abc' is "
     "lower }}{{ 'ABC' is upper }}{{ x is not none }}{{ none is sameas none }}",
     "{\"x\": 1}",
     "TrueFalseTrueTrueTrueTrueFalseTrueTrueFalseTrueTrueFalseTrueFalseTrueTrueTrueTrue"},
    {"undefined_semantics",
     "[{{ missing }}]{% if missing %}t{% else %}f{% endif %}{{ missing|length }}{% for x in "
     "missing %}x{% endfor %}{{ 'a' in missing }}{{ missing is iterable }}[{{ d.nokey }}]{{ "
     "d.nokey is defined }}{{ missing ~ 'z' }}",
     "{\"d\": {}}", "[]f0FalseTrue[]Falsez"},
    {"dict_methods_and_attrs",
     "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}|{{ d.keys()|list }}|{{ d.values()|list "
     "}}|{{ d['a'] }}{{ d.a }}|{{ d.items()|list }}",
     "{\"d\": {\"a\": 1, \"b\": [2]}}", "1None5|['a', 'b']|[1, [2]]|11|[('a', 1), ('b', [2])]"},
    {"strings_in_lists",
     "{{ l|join }}|{{ l[0] }}{{ l[-1] }}{{ l[10] }}|{{ 'x' if l[10] is undefined }}",
     "{\"l\": [\"a\", \"b\"]}", "ab|ab|x"},
    {"unicode_whitespace_strip", "[{{ s|trim }}][{{ s.strip() }}][{{ s.split()|length }}]",
     "{\"s\": \"　  word   \"}", "[word][word][1]"},
    {"string_format_ops",
     "{{ '%s is %d' % ('x', 3) }}|{{ '%s'|format('y') }}|{{ '{} and {name}'.format(1, name='n') }}",
     "{}", "x is 3|y|1 and n"},
    {"range_variants", "{{ range(3)|list }}{{ range(1, 7, 2)|list }}{{ range(3, 0, -1)|list }}",
     "{}", "[0, 1, 2][1, 3, 5][3, 2, 1]"},
    {"dict_literal_order", "{{ {'z': 1, 'a': 2}|tojson }}{% set d = dict(b=1, a=2) %}{{ d }}", "{}",
     "{\"z\": 1, \"a\": 2}{'b': 1, 'a': 2}"},
    {"generation_tag", "A{% generation %}B{{ 1 }}{% endgeneration %}C", "{}", "AB1C"},
};

TEST(JinjaEngine, RendersLikeJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    try {
      EXPECT_EQ(render(c.source, c.context), c.expected);
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(JinjaEngine, ContextDefaultsMatchTransformers) {
  EXPECT_EQ(render("{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}"
                   "{{ enable_thinking is defined }}"),
            "TrueTrueFalseFalse");
  EXPECT_EQ(render("{{ tools|length }}", R"({"tools": [{"a": 1}]})"), "1");
}

TEST(JinjaEngine, TemplateIsReusableAcrossRenders) {
  ChatTemplate t = ChatTemplate::compile(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
      "{{ ns.n }}",
      "reuse");
  EXPECT_EQ(t.render(json::parse(R"({"messages": [1, 2]})")), "2");
  EXPECT_EQ(t.render(json::parse(R"({"messages": [1, 2, 3]})")), "3");
}

// Compile-time rejections name the construct and its line.
void expect_compile_error(const std::string& source, ErrorKind kind, const std::string& needle) {
  try {
    ChatTemplate::compile(source, "bad.jinja");
    ADD_FAILURE() << "compiled: " << source;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.jinja"), std::string::npos) << e.what();
  }
}

TEST(JinjaEngine, UnsupportedConstructsFailAtCompileTime) {
  expect_compile_error("a\n{{ x|frobnicate }}", ErrorKind::unsupported,
                       "line 2: unsupported filter 'frobnicate' is not supported");
  expect_compile_error("a\nb\n{% include 'other.jinja' %}", ErrorKind::unsupported,
                       "line 3: unsupported tag 'include'");
  expect_compile_error("{% extends 'base' %}", ErrorKind::unsupported, "tag 'extends'");
  expect_compile_error("{% do items.append(1) %}", ErrorKind::unsupported, "tag 'do'");
  expect_compile_error("{% if x is frobbed %}{% endif %}", ErrorKind::unsupported,
                       "unsupported test 'frobbed'");
  expect_compile_error("{% for x in y recursive %}{% endfor %}", ErrorKind::unsupported,
                       "recursive for loops");
  expect_compile_error("{{ f(*args) }}", ErrorKind::unsupported, "*args");
  expect_compile_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}",
                       ErrorKind::unsupported, "nesting deeper than 256 levels");
}

TEST(JinjaEngine, MalformedTemplatesFailAtCompileTime) {
  expect_compile_error("{% if x %}never closed", ErrorKind::invalid_argument,
                       "unexpected end of template, expected 'endif'");
  expect_compile_error("{{ 1 + }}", ErrorKind::invalid_argument, "line 1");
  expect_compile_error("\n\n{% break %}", ErrorKind::invalid_argument,
                       "line 3: 'break' outside of a loop");
  expect_compile_error("{{ 'unterminated }}", ErrorKind::invalid_argument, "unterminated string");
  expect_compile_error("{# no end", ErrorKind::invalid_argument, "Missing end of comment tag");
  expect_compile_error("{% endfor %}", ErrorKind::invalid_argument, "endfor");
}

void expect_render_error(const std::string& source, const std::string& message,
                         const std::string& context = "{}") {
  ChatTemplate t = ChatTemplate::compile(source, "t.jinja");
  try {
    t.render(json::parse(context));
    ADD_FAILURE() << "rendered: " << source;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(JinjaEngine, RuntimeErrors) {
  // raise_exception: the template's own message, verbatim.
  expect_render_error(
      "{% if role != 'user' %}{{ raise_exception('Bad role: ' ~ role) }}{% endif %}",
      "Bad role: tool", R"({"role": "tool"})");
  // Everything else: template name, line and jinja2's wording.
  expect_render_error("x\n{{ foo.bar }}", "chat template 't.jinja' line 2: 'foo' is undefined");
  expect_render_error("{{ d.a.b }}",
                      "chat template 't.jinja' line 1: 'dict object' has no attribute 'a'",
                      R"({"d": {}})");
  expect_render_error(
      "{{ 'a' ~ 1 + 2 }}",
      "chat template 't.jinja' line 1: can only concatenate str (not \"int\") to str");
  expect_render_error(
      "{{ '<' + m.content }}",
      "chat template 't.jinja' line 1: can only concatenate str (not \"NoneType\") to str",
      R"({"m": {"content": null}})");
  expect_render_error(
      "{% set l = [] %}{{ l.append(1) }}",
      "chat template 't.jinja' line 1: access to attribute 'append' of 'list' object is unsafe.");
  expect_render_error("{% for x in none %}{% endfor %}",
                      "chat template 't.jinja' line 1: 'NoneType' object is not iterable");
  expect_render_error("{{ x|items }}",
                      "chat template 't.jinja' line 1: Can only get item pairs from a mapping.",
                      R"({"x": "str"})");
  expect_render_error("{{ 1 // 0 }}",
                      "chat template 't.jinja' line 1: integer division or modulo by zero");
  expect_render_error(
      "{{ f|tojson }}",
      "chat template 't.jinja' line 1: Object of type Undefined is not JSON serializable");
}

TEST(JinjaEngine, ReadsTemplatesFromModelDirectories) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "hibana_template_dir_test";
  fs::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json")
        << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  }
  EXPECT_EQ(read_chat_template(dir.string()), "D");
  EXPECT_EQ(read_chat_template((dir / "tokenizer_config.json").string()), "D");
  { std::ofstream(dir / "chat_template.jinja") << "J"; }
  EXPECT_EQ(read_chat_template(dir.string()), "J");
  fs::remove_all(dir);
  EXPECT_THROW(read_chat_template(dir.string()), Error);
}

// The real Qwen3 template, with outputs written out by reading the template.
class Qwen3Template : public testing::Test {
 protected:
  void SetUp() override {
    std::string dir = test::shared_assets() + "/models/Qwen3-30B-A3B";
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no Qwen3 assets at " << dir;
    tmpl_ = std::make_unique<ChatTemplate>(ChatTemplate::compile(read_chat_template(dir), "qwen3"));
  }
  std::string render(const std::string& context) { return tmpl_->render(json::parse(context)); }
  std::unique_ptr<ChatTemplate> tmpl_;
};

TEST_F(Qwen3Template, SystemAndUser) {
  EXPECT_EQ(render(R"({"messages": [{"role": "system", "content": "You are terse."},
                                    {"role": "user", "content": "Hi"}],
                       "add_generation_prompt": true})"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, ThinkingDisabledAddsEmptyThinkBlock) {
  EXPECT_EQ(render(R"({"messages": [{"role": "user", "content": "Hi"}],
                       "add_generation_prompt": true, "enable_thinking": false})"),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_F(Qwen3Template, ReasoningKeptOnlyAfterLastUserTurn) {
  EXPECT_EQ(render(R"({"messages": [
      {"role": "user", "content": "Q1"},
      {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
      {"role": "user", "content": "Q2"},
      {"role": "assistant", "content": "<think>\nR2\n</think>\n\nA2"}]})"),
            "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nR2\n</think>\n\nA2"
            "<|im_end|>\n");
}

TEST_F(Qwen3Template, ToolsAndToolCalls) {
  EXPECT_EQ(
      render(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                 "messages": [
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "", "tool_calls": [
          {"type": "function", "function": {"name": "f", "arguments": {"b": 1, "a": "é"}}},
          {"type": "function", "function": {"name": "f", "arguments": "{\"raw\": true}"}}]},
        {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2"}],
                 "add_generation_prompt": true})"),
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
      "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n"
      "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}\n"
      "</tools>\n\nFor each function call, return a json object with function name and arguments "
      "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nGo<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": "
      "\"é\"}}"
      "\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"raw\": true}}\n</tool_call>"
      "<|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n"
      "</tool_response><|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace hibana
