#!/usr/bin/env python3
"""Golden renders of every chat template in the shared assets, for tests/tokenizer/template_golden_test.cpp.

Usage (from the repo root, no network needed):
    python3 tools/templates/make_template_golden.py ../shared/assets [--out tests/fixtures/templates]

Writes, under --out:
  conversations.json   the test inputs: [{name, messages, tools?, kwargs}] (tools absent = None)
  templates.json       [{name, path (relative to the assets folder), sha256}]
  <template>.jsonl     one line per conversation: {"conversation": name, "kwargs": {...},
                       "rendered": text} or {"conversation", "kwargs", "error", "error_type"}
  meta.json            which renderer produced the files

Renderer: transformers.utils.chat_template_utils.render_jinja_template, called exactly as
PreTrainedTokenizerBase.apply_chat_template calls it (transformers 4.5x-5.x):
    render_jinja_template(conversations=[messages], tools=tools, documents=None,
                          chat_template=source, return_assistant_tokens_mask=False,
                          continue_final_message=False, add_generation_prompt=agp,
                          **{**special_tokens_map, **kwargs})
apply_chat_template passes the messages through unchanged, so no tokenizer object is needed;
the special tokens a tokenizer would add (bos_token/eos_token) are part of each case's kwargs.
Without transformers (--renderer jinja2, or when it cannot be imported) the script mirrors
transformers' _compile_jinja_template with jinja2 alone: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, tojson = json.dumps(ensure_ascii=False, ...),
raise_exception raising TemplateError. meta.json records which one ran.
"""

import argparse
import hashlib
import json
import os
import sys

# ---------------------------------------------------------------------------- tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a location.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

WRITE_FILE = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "  Write a file to disk.\nOverwrites existing files.  ",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path"},
                "content": {"type": "string"},
                "mode": {"type": "integer", "description": "Unix permission bits", "default": 420},
            },
            "required": ["path", "content"],
        },
    },
}

SEARCH_NESTED = {
    "type": "function",
    "function": {
        "name": "search_code",
        "description": "Search the repository — returns matching files ✓",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for", "x-custom-key": "custom value",
                          "minLength": 1},
                "filters": {
                    "type": "object",
                    "description": "Restrict the search",
                    "properties": {
                        "lang": {"type": "string", "enum": ["c++", "python", "rust"]},
                        "max_results": {"type": "integer", "minimum": 1, "maximum": 100},
                        "paths": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["lang"],
                },
                "exact": {"type": "boolean"},
                "threshold": {"type": ["number", "null"], "description": "Score cut-off"},
                "levels": {"type": "array", "items": {"type": "integer"}, "enum": [[1, 2], [3]]},
                "mode": {"anyOf": [{"type": "string"}, {"type": "null"}], "$comment": "nullable"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "return": {"type": "array", "items": {"type": "string"}},
    },
}

BARE_TOOL = {  # no {"type": "function", "function": ...} wrapper
    "name": "run_shell",
    "description": "Run a shell command",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
        "required": ["command"],
    },
}

TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}


def call(name, arguments, call_id=None, wrapped=True):
    fn = {"name": name, "arguments": arguments}
    if not wrapped:
        return fn
    tc = {"type": "function", "function": fn}
    if call_id:
        tc = {"id": call_id, **tc}
    return tc


def case(name, messages, tools=None, **kwargs):
    c = {"name": name, "messages": messages}
    if tools is not None:
        c["tools"] = tools
    kw = dict(TOKENS)
    kw.setdefault("add_generation_prompt", True)
    kw.update(kwargs)
    c["kwargs"] = kw
    return c


U = lambda text: {"role": "user", "content": text}
A = lambda text, **extra: {"role": "assistant", "content": text, **extra}
S = lambda text: {"role": "system", "content": text}
T = lambda text, **extra: {"role": "tool", "content": text, **extra}


def conversations():
    weather_call = call("get_weather", {"location": "Paris", "unit": "celsius"}, "call_1")
    return [
        case("single_user", [U("Hello")]),
        case("system_user", [S("You are terse."), U("Hi there")]),
        case("multi_turn", [U("What is 2+2?"), A("4"), U("And 3+3?")]),
        case("multi_turn_no_generation", [U("What is 2+2?"), A("4")], add_generation_prompt=False),
        case("thinking_off", [S("Be brief."), U("Explain RAII.")], enable_thinking=False),
        case("thinking_on", [U("Explain RAII.")], enable_thinking=True),
        case("reasoning_history",
             [U("Q1"), A("Answer 1", reasoning_content="Thinking about Q1"), U("Q2")]),
        case("reasoning_last_no_generation",
             [U("Q1"), A("Answer 1", reasoning_content="\nThinking about Q1\n")],
             add_generation_prompt=False),
        case("reasoning_empty",
             [U("Q1"), A("Answer 1", reasoning_content="")], add_generation_prompt=False),
        case("think_in_content_last",
             [U("Q1"), A("<think>\nplan it\n</think>\n\nThe answer.")], add_generation_prompt=False),
        case("think_in_content_history",
             [U("Q1"), A("<think>\nplan it\n</think>\n\nThe answer."), U("Q2")]),
        case("unclosed_think_in_content", [U("Q1"), A("<think>never closed"), U("Q2")]),
        case("tools_basic", [U("Weather in Paris?")], tools=[WEATHER]),
        case("tools_with_system", [S("You are a weather bot."), U("Weather in Paris?")],
             tools=[WEATHER, WRITE_FILE]),
        case("tools_nested_schema", [U("Find the parser")], tools=[SEARCH_NESTED, BARE_TOOL]),
        case("tools_empty_list", [U("Hi")], tools=[]),
        case("tool_call_dict_args",
             [U("Weather in Paris?"), A("", tool_calls=[weather_call]),
              T("18 degrees, sunny", tool_call_id="call_1")], tools=[WEATHER]),
        case("tool_call_string_args",
             [U("Weather in Paris?"),
              A("", tool_calls=[call("get_weather", '{"location": "Paris"}', "call_1")]),
              T("18 degrees", tool_call_id="call_1")], tools=[WEATHER]),
        case("tool_call_with_content",
             [U("Weather in Paris?"), A("Let me check.", tool_calls=[weather_call]),
              T("18 degrees"), A("It is 18 degrees."), U("Thanks")], tools=[WEATHER]),
        case("tool_call_null_content",
             [U("Weather in Paris?"), A(None, tool_calls=[weather_call]), T("18 degrees")],
             tools=[WEATHER]),
        case("tool_call_unwrapped",
             [U("Run ls"), A("", tool_calls=[call("run_shell", {"command": "ls -la"}, wrapped=False)]),
              T("total 0")], tools=[BARE_TOOL]),
        case("parallel_tool_calls",
             [U("Weather in Paris and Rome?"),
              A("", tool_calls=[call("get_weather", {"location": "Paris"}, "c1"),
                                call("get_weather", {"location": "Rome"}, "c2")]),
              T("Paris: 18"), T("Rome: 25"), A("Paris 18, Rome 25.")],
             tools=[WEATHER], add_generation_prompt=False),
        case("multi_step_tools",
             [S("Agent mode."), U("Write hello.txt then check it"),
              A("", reasoning_content="Need to write first.",
                tool_calls=[call("write_file", {"path": "/tmp/hello.txt", "content": "hi\n"})]),
              T("ok"),
              A("", reasoning_content="Now check.",
                tool_calls=[call("run_shell", {"command": "cat /tmp/hello.txt", "timeout": 5})]),
              T("hi")], tools=[WRITE_FILE, BARE_TOOL]),
        case("nested_args",
             [U("Search"),
              A("", tool_calls=[call("search_code", {
                  "query": "parse(", "filters": {"lang": "c++", "max_results": 10, "paths": ["src/", "tests/"]},
                  "exact": True, "threshold": None, "levels": [1, 2], "ratio": 0.5, "big": 1e20,
                  "whole": 3.0, "neg": -7})]),
              T('{"hits": []}')], tools=[SEARCH_NESTED]),
        case("tool_response_in_user",
             [U("Do it"), A("", tool_calls=[weather_call]),
              U("<tool_response>\n18 degrees\n</tool_response>")], tools=[WEATHER]),
        case("tool_message_first", [T("orphan result"), U("What was that?")]),
        case("empty_content", [U("")]),
        case("unicode",
             [S("Réponds en français 🇫🇷"), U("こんにちは 🌸 café — naïve \u2028 end"),
              A("Ça va ✓", reasoning_content="日本語で考える"), U("Ünïcödé again")],
             tools=[SEARCH_NESTED]),
        case("whitespace_content",
             [S("  padded system  \n"), U("\n  hello  \n"), A("  answer  \n\n"), U("\tnext\t")]),
        case("special_characters",
             [U("Template-looking text: {{ x }} {% if %} {# c #} and \\ backslash \"quotes\" 'single'"),
              A("</tool_call> <tool_call> literal tags")]),
        case("content_parts", [U([{"type": "text", "text": "Describe this."}])]),
        case("assistant_none_content", [U("Q"), A(None), U("Q2")]),
        case("no_user_message", [S("Only a system prompt")]),
        case("system_not_first", [U("Hi"), S("Late system")]),
        case("thinking_off_with_tools",
             [U("Weather?"), A("", tool_calls=[weather_call]), T("18")],
             tools=[WEATHER], enable_thinking=False),
        case("nemotron_keep_history_thinking",
             [U("Q1"), A("A1", reasoning_content="R1"), U("Q2"), A("A2", reasoning_content="R2"), U("Q3")],
             truncate_history_thinking=False),
        case("long_agent_session",
             [S("You are a coding agent."), U("Fix the bug in parser.cpp"),
              A("I'll look at the file.", reasoning_content="Start by reading.",
                tool_calls=[call("run_shell", {"command": "cat parser.cpp"}, "t1")]),
              T("int main() { return 1; }"),
              A("", tool_calls=[call("write_file", {"path": "parser.cpp", "content": "int main() {\n  return 0;\n}\n", "mode": 420}, "t2")]),
              T("written"),
              A("Fixed: main now returns 0."),
              U("Now run the tests"),
              A("", reasoning_content="Run ctest.",
                tool_calls=[call("run_shell", {"command": "ctest"}, "t3"),
                            call("run_shell", {"command": "ctest -R parser", "timeout": 60.5}, "t4")]),
              T("100% tests passed"), T("1/1 passed")],
             tools=[BARE_TOOL, WRITE_FILE]),
    ]


# ---------------------------------------------------------------------------- templates

KNOWN_NAMES = {
    "models/Qwen3-30B-A3B/tokenizer_config.json": "qwen3",
    "models/Qwen3-Coder-30B-A3B-Instruct/tokenizer_config.json": "qwen3-coder",
    "models/Qwen3-Coder-30B-A3B-Instruct/chat_template.llamacpp-updated-variant.jinja": "qwen3-coder-llamacpp",
    "models/Qwen3.5-2B/chat_template.jinja": "qwen3.5-nothink",
    "models/Qwen3.5-4B/chat_template.jinja": "qwen3.5-think",
    "models/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16/chat_template.jinja": "nemotron-3-nano",
}


def template_source(path):
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            value = json.load(f).get("chat_template")
        if isinstance(value, list):
            value = next((t["template"] for t in value if t.get("name") == "default"), None)
        return value
    with open(path, encoding="utf-8") as f:
        return f.read()


def discover_templates(assets):
    """Every distinct chat template under assets/models, named stably."""
    found, seen = [], set()
    models = os.path.join(assets, "models")
    for model in sorted(os.listdir(models)):
        folder = os.path.join(models, model)
        if not os.path.isdir(folder):
            continue
        # tokenizer_config.json first: it is the upstream file when a .jinja copy repeats it.
        files = sorted((f for f in os.listdir(folder)
                        if f == "tokenizer_config.json" or (f.startswith("chat_template") and f.endswith(".jinja"))),
                       key=lambda f: (f != "tokenizer_config.json", f))
        for f in files:
            rel = f"models/{model}/{f}"
            source = template_source(os.path.join(assets, rel))
            if not source:
                continue
            digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            name = KNOWN_NAMES.get(rel) or (model + "." + f.rsplit(".", 1)[0]).lower()
            found.append({"name": name, "path": rel, "sha256": digest, "source": source})
    return found


# ---------------------------------------------------------------------------- rendering

def transformers_renderer():
    from transformers.utils.chat_template_utils import render_jinja_template
    import transformers

    def render(source, messages, tools, kwargs):
        kwargs = dict(kwargs)
        agp = kwargs.pop("add_generation_prompt", False)
        rendered, _ = render_jinja_template(
            conversations=[messages], tools=tools, documents=None, chat_template=source,
            return_assistant_tokens_mask=False, continue_final_message=False,
            add_generation_prompt=agp, **kwargs)
        return rendered[0]

    return render, f"transformers {transformers.__version__} render_jinja_template"


def jinja2_renderer():
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    cache = {}

    def render(source, messages, tools, kwargs):
        if source not in cache:
            cache[source] = env.from_string(source)
        kwargs = dict(kwargs)
        agp = kwargs.pop("add_generation_prompt", False)
        return cache[source].render(messages=messages, tools=tools, documents=None,
                                    add_generation_prompt=agp, **kwargs)

    return render, f"jinja2 {jinja2.__version__} mirroring transformers' _compile_jinja_template"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("assets", help="the shared assets folder (holds models/)")
    parser.add_argument("--out", default="tests/fixtures/templates")
    parser.add_argument("--renderer", choices=["auto", "transformers", "jinja2"], default="auto")
    args = parser.parse_args()

    if args.renderer == "jinja2":
        render, renderer = jinja2_renderer()
    else:
        try:
            render, renderer = transformers_renderer()
        except ImportError:
            if args.renderer == "transformers":
                raise
            render, renderer = jinja2_renderer()
    print("renderer:", renderer, file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    cases = conversations()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    with open(os.path.join(args.out, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")

    templates = discover_templates(args.assets)
    with open(os.path.join(args.out, "templates.json"), "w", encoding="utf-8") as f:
        json.dump([{k: t[k] for k in ("name", "path", "sha256")} for t in templates], f, indent=1)
        f.write("\n")

    for t in templates:
        lines, errors = [], 0
        for c in cases:
            # Fresh copies: a template must not see another render's objects.
            messages = json.loads(json.dumps(c["messages"]))
            tools = json.loads(json.dumps(c["tools"])) if "tools" in c else None
            row = {"conversation": c["name"], "kwargs": c["kwargs"]}
            try:
                row["rendered"] = render(t["source"], messages, tools, c["kwargs"])
            except Exception as e:  # the template raised: record it, the C++ side must raise too
                row["error"] = str(e)
                row["error_type"] = type(e).__name__
                errors += 1
            lines.append(json.dumps(row, ensure_ascii=False))
        with open(os.path.join(args.out, t["name"] + ".jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        print(f"{t['name']}: {len(cases)} conversations, {errors} errors", file=sys.stderr)

    with open(os.path.join(args.out, "meta.json"), "w", encoding="utf-8") as f:
        json.dump({"renderer": renderer, "python": sys.version.split()[0]}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
