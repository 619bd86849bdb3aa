// tokenizer_bench: encode/decode speed of the byte-level BPE tokenizer on one thread, on a
// deterministic mixed corpus (code, English prose, prose in 15 scripts, emoji, digits,
// whitespace runs, decomposed accents that NFC must compose).
//
//   tokenizer_bench [--assets DIR] [--tokenizer PATH] [--mb N] [--write-corpus FILE]
//
// DIR defaults to $HIBANA_SHARED_ASSETS, else ../shared/assets (relative to the current
// directory); PATH defaults to DIR/qwen3-tokenizer. --write-corpus saves the exact text
// measured so that tools/tokenizer/make_tokenizer_golden.py --corpus FILE can time the
// tokenizers package on it; both print the token count and an FNV-1a hash of the ids, which
// must agree.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using hibana::Tokenizer;

class Rng {  // splitmix64: tiny, and the same everywhere
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
  // Small indices far more often than large ones, like word frequencies.
  size_t skewed(size_t n) {
    const double u = static_cast<double>(next() >> 11) / 9007199254740992.0;
    return std::min(n - 1, static_cast<size_t>(u * u * static_cast<double>(n)));
  }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  uint64_t state_;
};

struct Language {
  const char* name;
  std::vector<std::string_view> words;
  const char* separator;  // between words ("" for scripts written without spaces)
  const char* full_stop;
};

const std::vector<Language>& languages() {
  static const std::vector<Language> kLanguages = {
      {"english",
       {"the",        "of",      "and",     "to",      "a",       "in",      "is",    "that",
        "for",        "it",      "with",    "as",      "was",     "on",      "model", "token",
        "memory",     "request", "server",  "cache",   "because", "through", "while", "agents",
        "throughput", "latency", "however", "quickly", "decoder", "weights", "GPU",   "it's",
        "don't",      "we'll",   "they're", "I'm",     "you've",  "HTTP",    "JSON"},
       " ",
       "."},
      {"french",
       {"le",    "la",   "les",   "de",       "et",     "être",    "à",
        "très",  "déjà", "où",    "français", "garçon", "élève",   "noël",
        "forêt", "cœur", "l'été", "qu'il",    "ça",     "hôpital", "rêve"},
       " ",
       "."},
      {"german",
       {"der", "die", "das", "und", "über", "Straße", "Mädchen", "schön", "Größe", "für",
        "Fußgänger", "Äpfel", "Öl", "grün", "weiß", "Bücher", "möglich"},
       " ",
       "."},
      {"spanish",
       {"el", "la", "niño", "año", "mañana", "corazón", "¿qué", "está", "también", "canción",
        "pingüino", "sí", "árbol", "¡hola"},
       " ",
       "."},
      {"vietnamese",
       {"Việt", "Nam", "người", "được", "những", "không", "một", "trường", "tiếng", "ở", "đẹp",
        "nhiều", "chúng", "tôi", "học", "nước"},
       " ",
       "."},
      {"polish_turkish",
       {"źdźbło", "łódź", "żółw", "gęś", "Kraków", "ıspanak", "şehir", "ağaç", "İstanbul", "güzel",
        "çocuk", "öğrenci"},
       " ",
       "."},
      {"russian",
       {"и",    "в",     "не",     "на",     "я",      "что",    "тот",
        "быть", "с",     "модель", "память", "сервер", "быстро", "Москва",
        "ещё",  "объём", "токены", "запрос", "ответ",  "русский"},
       " ",
       "."},
      {"greek",
       {"και", "το", "να", "είναι", "Αθήνα", "μοντέλο", "μνήμη", "γρήγορα", "ελληνικά", "ψυχή",
        "ώρα", "ΰ", "ΐ"},
       " ",
       "."},
      {"arabic",
       {"في", "من", "على", "إلى", "هذا", "الذي", "النموذج", "الذاكرة", "سريع", "العربية", "مُحَمَّد",
        "كِتَاب"},
       " ",
       "."},
      {"hebrew",
       {"של", "את", "על", "זה", "עם", "מודל", "זיכרון", "מהיר", "עברית", "שָׁלוֹם"},
       " ",
       "."},
      {"hindi",
       {"और", "के", "है", "में", "की", "यह", "मॉडल", "स्मृति", "तेज़", "हिन्दी", "क़िला", "ज़िंदगी"},
       " ",
       "।"},
      {"thai",
       {"การ", "ที่", "และ", "ของ", "ใน", "ภาษาไทย", "โมเดล", "หน่วยความจำ", "เร็ว", "น้ำ", "ไม้"},
       "",
       " "},
      {"chinese",
       {"的", "是", "在", "我们", "模型", "内存", "服务器", "请求", "快速", "中文", "分词器",
        "推理", "引擎", "缓存", "代理", "工具"},
       "",
       "。"},
      {"japanese",
       {"の", "は", "を", "に", "モデル", "メモリ", "サーバー", "高速", "日本語", "ひらがな",
        "カタカナ", "トークン", "推論", "です", "ます"},
       "",
       "。"},
      {"korean",
       {"그리고", "모델", "메모리", "서버", "빠르게", "한국어", "토큰", "요청", "있습니다",
        "입니다"},
       " ",
       "."},
  };
  return kLanguages;
}

const std::vector<std::string_view>& emoji() {
  static const std::vector<std::string_view> kEmoji = {"😀",
                                                       "👍",
                                                       "👍🏽",
                                                       "🚀",
                                                       "❤️",
                                                       "🔥",
                                                       "🎉",
                                                       "👨‍👩‍👧‍👦",
                                                       "👩🏻‍💻",
                                                       "🏳️‍🌈",
                                                       "🇯🇵",
                                                       "🇺🇸",
                                                       "✅",
                                                       "🤖",
                                                       "🧠",
                                                       "☕"};
  return kEmoji;
}

std::string identifier(Rng& rng) {
  static constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyz";
  std::string s;
  const size_t parts = 1 + rng.below(3);
  for (size_t p = 0; p < parts; ++p) {
    if (p) s += rng.below(2) ? "_" : "";
    const size_t len = 2 + rng.below(7);
    for (size_t i = 0; i < len; ++i) s += kLetters[rng.below(kLetters.size())];
  }
  return s;
}

std::string number(Rng& rng) {
  std::string s = std::to_string(rng.below(1000000));
  if (rng.below(4) == 0) {
    s += '.';
    s += std::to_string(rng.below(1000));
  }
  return s;
}

std::string prose(Rng& rng, const Language& lang) {
  std::string text;
  const size_t sentences = 2 + rng.below(6);
  for (size_t s = 0; s < sentences; ++s) {
    const size_t words = 4 + rng.below(14);
    for (size_t w = 0; w < words; ++w) {
      if (w) text += lang.separator;
      const size_t roll = rng.below(40);
      if (roll == 0) {
        text += number(rng);
      } else if (roll == 1) {
        text += identifier(rng);
      } else if (roll == 2) {
        text += rng.pick(emoji());
      } else {
        text += lang.words[rng.skewed(lang.words.size())];
      }
      if (rng.below(12) == 0) text += ",";
    }
    text += lang.full_stop;
    text += " ";
  }
  return text;
}

std::string code(Rng& rng) {
  const std::string a = identifier(rng), b = identifier(rng), c = identifier(rng);
  switch (rng.below(6)) {
    case 0:
      return "def " + a + "(" + b + ", " + c + "=None):\n    \"\"\"Return the " + b +
             ".\"\"\"\n    if " + c + " is None:\n        " + c + " = {}\n    for i in range(" +
             number(rng) + "):\n        " + c + "[i] = " + b + " ** 2  # square\n    return " + c +
             "\n";
    case 1:
      return "#include <vector>\n\nstatic int " + a + "(const std::vector<int>& " + b +
             ") {\n  int " + c + " = 0;\n  for (int x : " + b + ") " + c + " += x * " +
             number(rng) + ";\n  return " + c + ";\n}\n";
    case 2:
      return "export async function " + a + "(" + b + ") {\n\tconst " + c +
             " = await fetch(`/api/v1/" + b + "?limit=${" + number(rng) + "}`);\n\treturn " + c +
             ".json();\n}\n";
    case 3:
      return "fn " + a + "(" + b + ": &[u8]) -> Result<usize, Error> {\n    let mut " + c +
             " = 0usize;\n    for &x in " + b + ".iter() { " + c + " += x as usize; }\n    Ok(" +
             c + ")\n}\n";
    case 4:
      return "{\"" + a + "\": [" + number(rng) + ", " + number(rng) + "], \"" + b +
             "\": {\"enabled\": true, \"name\": \"" + c + "\"}}\n";
    default:
      return "for f in $(ls ./" + a + "/*.txt); do\n  grep -n \"" + b + "\" \"$f\" | wc -l >> " +
             c + ".log\ndone\n";
  }
}

std::string whitespace_and_digits(Rng& rng) {
  std::string s;
  s += std::string(1 + rng.below(40), ' ');
  s += std::to_string(rng.next());
  s += std::string(1 + rng.below(6), '\n');
  s += "\t\t" + number(rng) + "\r\n";
  s += std::string(rng.below(12), ' ') + "0x" + std::to_string(rng.below(65536)) + "\n\n\n";
  return s;
}

// Accented Latin written decomposed (letter + combining mark), which NFC has to compose.
std::string decomposed(Rng& rng) {
  static const std::vector<std::string_view> kWords = {"Cafe\u0301",      "nai\u0308ve",
                                                       "Ange\u0301lique", "man\u0303ana",
                                                       "Zu\u0308rich",    "Vie\u0323\u0302t"};
  std::string s;
  for (int i = 0; i < 6; ++i) s += std::string(rng.pick(kWords)) + " ";
  return s;
}

std::string document(Rng& rng) {
  std::string doc;
  const size_t parts = 3 + rng.below(8);
  for (size_t p = 0; p < parts; ++p) {
    const size_t kind = rng.below(20);
    if (kind < 6) {
      doc += prose(rng, languages()[0]);
    } else if (kind < 12) {
      doc += prose(rng, languages()[1 + rng.below(languages().size() - 1)]);
    } else if (kind < 17) {
      doc += code(rng);
    } else if (kind < 19) {
      doc += whitespace_and_digits(rng);
    } else {
      doc += decomposed(rng);
    }
    doc += rng.below(3) ? "\n" : "\n\n";
  }
  return doc;
}

std::string make_corpus(size_t bytes) {
  Rng rng(20240611);
  std::string corpus;
  while (corpus.size() < bytes) corpus += document(rng) + "\n";
  return corpus;
}

uint64_t fnv1a_ids(const std::vector<int32_t>& ids) {
  // Over the decimal ids each followed by ',' so that Python can compute the same.
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids) {
    for (char c : std::to_string(id) + ",") {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001B3ull;
    }
  }
  return h;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string assets;
  if (const char* env = std::getenv("HIBANA_SHARED_ASSETS"); env && *env) assets = env;
  if (assets.empty()) assets = "../shared/assets";
  std::string tokenizer_path;
  std::string corpus_out;
  double megabytes = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--assets") {
      assets = value();
    } else if (arg == "--tokenizer") {
      tokenizer_path = value();
    } else if (arg == "--mb") {
      megabytes = std::atof(value().c_str());
    } else if (arg == "--write-corpus") {
      corpus_out = value();
    } else {
      std::fprintf(stderr,
                   "usage: tokenizer_bench [--assets DIR] [--tokenizer PATH] [--mb N] "
                   "[--write-corpus FILE]\n");
      return 2;
    }
  }
  if (tokenizer_path.empty()) tokenizer_path = assets + "/qwen3-tokenizer";

  try {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<Tokenizer> tok = Tokenizer::load(tokenizer_path);
    std::printf("load %s: %.3f s, %lld ids\n", tokenizer_path.c_str(), seconds_since(t0),
                static_cast<long long>(tok->vocab_size()));

    const std::string corpus = make_corpus(static_cast<size_t>(megabytes * 1024 * 1024));
    const double mb = static_cast<double>(corpus.size()) / 1e6;
    if (!corpus_out.empty()) {
      std::ofstream out(corpus_out, std::ios::binary);
      out.write(corpus.data(), static_cast<std::streamsize>(corpus.size()));
      if (!out) throw hibana::Error(hibana::ErrorKind::io, corpus_out + ": cannot write");
      std::printf("corpus written to %s\n", corpus_out.c_str());
    }

    // First pass fills the word cache; the best of the following passes is reported, with the
    // cold pass beside it.
    std::vector<int32_t> ids;
    double cold = 0, best = 1e30;
    for (int pass = 0; pass < 4; ++pass) {
      t0 = std::chrono::steady_clock::now();
      ids = tok->encode(corpus);
      const double s = seconds_since(t0);
      if (pass == 0) cold = s;
      best = std::min(best, s);
    }
    std::printf("corpus: %.2f MB, %zu tokens (%.2f bytes/token), ids fnv1a %016llx\n", mb,
                ids.size(), static_cast<double>(corpus.size()) / static_cast<double>(ids.size()),
                static_cast<unsigned long long>(fnv1a_ids(ids)));
    std::printf("encode (one call, one thread): %.1f MB/s (first pass %.1f MB/s)\n", mb / best,
                mb / cold);

    // Many short calls, as a server sees them: one call per line.
    t0 = std::chrono::steady_clock::now();
    size_t line_tokens = 0;
    for (size_t pos = 0; pos < corpus.size();) {
      size_t end = corpus.find('\n', pos);
      end = end == std::string::npos ? corpus.size() : end + 1;
      line_tokens += tok->encode(std::string_view(corpus).substr(pos, end - pos)).size();
      pos = end;
    }
    std::printf("encode (one call per line): %.1f MB/s, %zu tokens\n", mb / seconds_since(t0),
                line_tokens);

    t0 = std::chrono::steady_clock::now();
    const std::string text = tok->decode(ids);
    std::printf("decode: %.1f MB/s, round trip %s\n", mb / seconds_since(t0),
                text == corpus ? "exact" : "differs (NFC composed the decomposed accents)");

    t0 = std::chrono::steady_clock::now();
    hibana::StreamDecoder stream(*tok);
    size_t streamed = 0;
    for (int32_t id : ids) streamed += stream.push(id).size();
    streamed += stream.flush().size();
    std::printf("stream decode: %.1f Mtokens/s, %zu bytes\n",
                static_cast<double>(ids.size()) / 1e6 / seconds_since(t0), streamed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
