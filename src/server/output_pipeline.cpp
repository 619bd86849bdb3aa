#include "server/output_pipeline.h"

#include <string_view>

namespace hibana::server {

namespace {

constexpr std::string_view kThink = "<think>";

void merge(ChoiceDelta& into, OutputDelta&& d) {
  into.reasoning += d.reasoning;
  into.content += d.content;
  for (auto& t : d.tool_calls) into.tool_calls.push_back(std::move(t));
}

}  // namespace

std::string utf8_lossy(const std::string& bytes) {
  // The JSON writer replaces invalid UTF-8 itself; this keeps "token" strings readable by
  // clients that compare them with the content.
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  auto cont = [&](size_t k) {
    return k < bytes.size() && (static_cast<unsigned char>(bytes[k]) & 0xC0) == 0x80;
  };
  while (i < bytes.size()) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xE  ? 3
                 : (c >> 3) == 0x1E ? 4
                                    : 0;
    bool ok = len > 0 && (len == 1 || c >= 0xC2);
    for (size_t k = 1; ok && k < len; ++k) ok = cont(i + k);
    if (ok) {
      out.append(bytes, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      while (i < bytes.size() && cont(i)) ++i;
    }
  }
  return out;
}

struct OutputPipeline::Impl {
  Impl(const Tokenizer& tok, PipelineOptions o)
      : tokenizer(tok), options(std::move(o)), decoder(tok), stops(options.stops) {
    if (options.raw) return;
    if (options.reasoning != ReasoningMode::detect)
      make_parser(options.reasoning == ReasoningMode::inside);
  }

  void make_parser(bool reasoning) {
    OutputParserOptions po;
    po.reasoning = reasoning;
    po.tool_calls = options.parse_tool_calls;
    po.tools = options.tools;
    po.make_id = options.make_tool_id;
    parser.emplace(std::move(po));
  }

  // Text after stop matching goes to the parser (or, in detect mode, waits until the first
  // characters show whether the model opened <think>).
  void route(std::string_view text, bool final, ChoiceDelta& out) {
    if (options.raw) {
      out.content.append(text);
      raw_text.append(text);
      return;
    }
    if (!parser) {
      lead.append(text);
      size_t i = lead.find_first_not_of(" \t\r\n");
      std::string_view rest =
          i == std::string::npos ? std::string_view{} : std::string_view(lead).substr(i);
      const bool undecided = rest.size() < kThink.size() && kThink.substr(0, rest.size()) == rest;
      if (undecided && !final) return;
      make_parser(rest.substr(0, kThink.size()) == kThink);
      std::string held = std::move(lead);
      lead.clear();
      merge(out, parser->push(held));
      return;
    }
    merge(out, parser->push(text));
  }

  void attach_logprobs(ChoiceDelta& d, bool final) {
    if (pending_logprobs.empty()) return;
    if (!d.has_output() && !final) return;
    for (auto& e : pending_logprobs) d.logprobs.push_back(std::move(e));
    pending_logprobs.clear();
  }

  LogprobEntry entry(int32_t token, float logprob) {
    LogprobEntry e;
    e.bytes = tokenizer.token_bytes(token);
    e.token = utf8_lossy(e.bytes);
    e.logprob = logprob;
    return e;
  }

  const Tokenizer& tokenizer;
  PipelineOptions options;
  StreamDecoder decoder;
  StopMatcher stops;
  std::optional<OutputParser> parser;
  std::string lead;
  std::string raw_text;
  ParsedOutput raw_result;
  std::vector<LogprobEntry> pending_logprobs;
  std::vector<LogprobEntry> all_logprobs;
  int64_t tokens = 0;
  int64_t reasoning_tokens = 0;
  bool finished = false;
};

OutputPipeline::OutputPipeline(const Tokenizer& tokenizer, PipelineOptions options)
    : impl_(std::make_unique<Impl>(tokenizer, std::move(options))) {}
OutputPipeline::~OutputPipeline() = default;
OutputPipeline::OutputPipeline(OutputPipeline&&) noexcept = default;
OutputPipeline& OutputPipeline::operator=(OutputPipeline&&) noexcept = default;

ChoiceDelta OutputPipeline::start() {
  ChoiceDelta out;
  Impl& m = *impl_;
  if (m.options.forced_output.empty() || m.options.raw) return out;
  if (!m.parser) m.make_parser(false);
  merge(out, m.parser->push(m.options.forced_output));
  return out;
}

ChoiceDelta OutputPipeline::push(const StreamEvent& token) {
  Impl& m = *impl_;
  ChoiceDelta out;
  if (m.finished) return out;
  ++m.tokens;
  std::string text = m.decoder.push(token.token);
  if (!text.empty()) m.route(m.stops.push(text), false, out);
  if (m.stops.stopped()) {
    // Nothing after the stop string is wanted: flush the parser's held text now.
    if (!m.options.raw) {
      if (!m.parser) m.route("", true, out);
      merge(out, m.parser->finish());
    }
    m.finished = true;
  }
  // Logprobs cover every token up to the one that completed a stop string.
  if (m.options.logprobs) {
    LogprobEntry e = m.entry(token.token, token.logprob);
    for (const TokenLogprob& t : token.top_logprobs) e.top.push_back(m.entry(t.token, t.logprob));
    m.all_logprobs.push_back(e);
    m.pending_logprobs.push_back(std::move(e));
  }
  if (!out.reasoning.empty() && out.content.empty() && out.tool_calls.empty()) ++m.reasoning_tokens;
  m.attach_logprobs(out, m.finished);
  return out;
}

ChoiceDelta OutputPipeline::finish(bool complete, std::string_view closing) {
  Impl& m = *impl_;
  ChoiceDelta out;
  if (!m.finished) {
    m.finished = true;
    std::string rest = m.decoder.flush();
    rest += closing;
    if (complete) rest += m.options.forced_suffix;
    std::string text = m.stops.push(rest);
    if (!m.stops.stopped()) text += m.stops.flush();
    m.route(text, true, out);
    if (!m.options.raw) {
      if (!m.parser) m.route("", true, out);
      merge(out, m.parser->finish());
    }
  }
  m.attach_logprobs(out, true);
  return out;
}

bool OutputPipeline::stopped() const {
  return impl_->stops.stopped();
}
const StopString* OutputPipeline::matched_stop() const {
  return impl_->stops.matched();
}

const ParsedOutput& OutputPipeline::result() const {
  Impl& m = *impl_;
  if (m.options.raw || !m.parser) {
    m.raw_result.content = m.raw_text;
    return m.raw_result;
  }
  return m.parser->result();
}

const std::vector<LogprobEntry>& OutputPipeline::logprobs() const {
  return impl_->all_logprobs;
}
int64_t OutputPipeline::tokens() const {
  return impl_->tokens;
}
int64_t OutputPipeline::reasoning_tokens() const {
  return impl_->reasoning_tokens;
}

}  // namespace hibana::server
