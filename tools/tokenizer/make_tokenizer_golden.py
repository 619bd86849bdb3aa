#!/usr/bin/env python3
"""Golden token ids of the Qwen tokenizer, for tests/tokenizer/golden_test.cpp, and the speed of
the tokenizers package on tokenizer_bench's corpus.

Usage (from the repo root; no network needed):
    python3 tools/tokenizer/make_tokenizer_golden.py ASSETS [--out tests/fixtures/tokenizer]
        [--corpus FILE] [--docs-json FILE]

ASSETS is a copy of ../shared/assets (it needs qwen3-tokenizer/tokenizer.json, and
qwen2-tokenizer/ for the vocab.json + merges.txt form).

Writes OUT/qwen3_golden.jsonl: one line per document of a deterministic corpus (code in several
languages, prose in 20 scripts, emoji with ZWJ sequences and skin tones, combining marks, runs of
whitespace and digits, text around and inside special-token strings such as <|im_start|> and
<think>):
    {"text": ..., "ids": [...]}                          ids: tokenizers.Tokenizer.from_file(
                                                         qwen3 tokenizer.json).encode(text,
                                                         add_special_tokens=False).ids
and, when transformers can load ASSETS/qwen2-tokenizer (vocab.json + merges.txt), also
    "ids_vocab_merges": null | [...]                     AutoTokenizer(qwen2).encode(text,
                                                         add_special_tokens=False); null when
                                                         equal to "ids"
plus OUT/qwen3_golden.meta.json saying which packages and versions produced it.

--corpus FILE (written by `tokenizer_bench --write-corpus FILE`) times the tokenizers package
on that text, on one thread (RAYON_NUM_THREADS=1, set before tokenizers is imported), and prints
MB/s with the token count and the same FNV-1a hash of the ids tokenizer_bench prints.

--docs-json FILE writes the corpus as a JSON list of strings and stops (no tokenizers needed):
tools/tokenizer/golden_with_node.js encodes it with the npm "tokenizers" package, the same Rust
library, where Python's is not installed.

The corpus depends only on this file: a fixed splitmix64 generator, lists (no sets or dict
iteration order), no hash() of strings.
"""

import argparse
import json
import os
import sys
import time

# RAYON_NUM_THREADS must be set before tokenizers starts its thread pool.
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MASK64 = (1 << 64) - 1


class Rng:
    """splitmix64, so that the corpus is the same for every Python and every hash seed."""

    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        return self.next() % n

    def pick(self, items):
        return items[self.below(len(items))]

    def skewed(self, items):
        u = (self.next() >> 11) / float(1 << 53)
        return items[min(len(items) - 1, int(u * u * len(items)))]


# ---------------------------------------------------------------------------- material

PROSE = [
    ("english", " ", ".", "the of and to a in is that for it with as was on model token memory "
     "request server cache because through while agents throughput latency however quickly "
     "decoder weights GPU it's don't we'll they're I'm you've HTTP JSON Hello world".split()),
    ("french", " ", ".", "le la les de et être à très déjà où français garçon élève noël forêt "
     "cœur l'été qu'il ça hôpital rêve".split()),
    ("german", " ", ".", "der die das und über Straße Mädchen schön Größe für Fußgänger Äpfel Öl "
     "grün weiß Bücher möglich".split()),
    ("spanish", " ", ".", "el la niño año mañana corazón ¿qué está también canción pingüino sí "
     "árbol ¡hola".split()),
    ("vietnamese", " ", ".", "Việt Nam người được những không một trường tiếng ở đẹp nhiều chúng "
     "tôi học nước".split()),
    ("polish_turkish", " ", ".", "źdźbło łódź żółw gęś Kraków ıspanak şehir ağaç İstanbul güzel "
     "çocuk öğrenci".split()),
    ("russian", " ", ".", "и в не на я что тот быть с модель память сервер быстро Москва ещё "
     "объём токены запрос ответ русский".split()),
    ("ukrainian", " ", ".", "і та що це їжак ґанок моделі пам'ять швидко Київ".split()),
    ("greek", " ", ".", "και το να είναι Αθήνα μοντέλο μνήμη γρήγορα ελληνικά ψυχή ώρα ΰ ΐ".split()),
    ("arabic", " ", ".", "في من على إلى هذا الذي النموذج الذاكرة سريع العربية مُحَمَّد كِتَاب".split()),
    ("hebrew", " ", ".", "של את על זה עם מודל זיכרון מהיר עברית שָׁלוֹם".split()),
    ("hindi", " ", "।", "और के है में की यह मॉडल स्मृति तेज़ हिन्दी क़िला ज़िंदगी".split()),
    ("bengali", " ", "।", "এবং এই মডেল স্মৃতি দ্রুত বাংলা ভাষা কোৗ".split()),
    ("tamil", " ", ".", "மற்றும் இது மாதிரி நினைவகம் வேகமாக தமிழ் கொௗ".split()),
    ("thai", "", " ", "การ ที่ และ ของ ใน ภาษาไทย โมเดล หน่วยความจำ เร็ว น้ำ ไม้ ก็".split()),
    ("chinese", "", "。", "的 是 在 我们 模型 内存 服务器 请求 快速 中文 分词器 推理 引擎 缓存 代理 工具 你好".split()),
    ("japanese", "", "。", "の は を に モデル メモリ サーバー 高速 日本語 ひらがな カタカナ トークン 推論 です ます ｶﾀｶﾅ".split()),
    ("korean", " ", ".", "그리고 모델 메모리 서버 빠르게 한국어 토큰 요청 있습니다 입니다".split()),
    ("georgian", " ", ".", "და ეს მოდელი მეხსიერება სწრაფად ქართული".split()),
    ("armenian", " ", ".", "և այս մոդել հիշողություն արագ հայերեն".split()),
    ("amharic", " ", "።", "እና ይህ ሞዴል ማህደረ ትውስታ በፍጥነት አማርኛ".split()),
]

EMOJI = ["😀", "👍", "👍🏽", "👋🏿", "🚀", "❤️", "❤", "🔥", "🎉", "👨‍👩‍👧‍👦", "👩🏻‍💻", "🧑🏾‍🚀",
         "🏳️‍🌈", "🏴‍☠️", "🇯🇵", "🇺🇸", "🇫🇷", "✅", "🤖", "🧠", "☕", "1️⃣", "#️⃣", "©️", "🫠",
         "👁️‍🗨️", "🐈‍⬛", "🧔‍♀️"]

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
           "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>",
           "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
           "<|object_ref_start|>", "<|box_end|>", "<|vision_start|>", "<|image_pad|>"]

NEAR_SPECIAL = ["<|im_start", "<|im_start|", "im_start|>", "<|im_end|", "<<|im_end|>>",
                "<think", "</think", "<thinking>", "<|IM_START|>", "< |im_start|>", "<|>",
                "<tool_call >", "<|endoftext|>>"]

# Combining sequences: decomposed accents (NFC composes them), stacked marks, Hangul jamo,
# Indic nukta/vowel compositions, variation selectors, marks added after Unicode 9.0.
COMBINING = ["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0300", "A\u030a", "u\u0308\u0304",
             "Vie\u0323\u0302t", "i\u0307\u0301", "z\u0335\u0321\u0353\u0300\u0301\u0302",
             "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
             "\u0915\u093c", "\u09c7\u09be", "\u0b47\u0b3e", "\u0bc6\u0bd7", "q\u0307\u0323",
             "\u212b", "\u2126", "\uf900", "\u0344", "\u0f73", "s\u0323\u0307",
             "\u05e9\u05c1\u05b8", "\u0627\u0653", "\u3099\u304b", "\u304b\u3099", "e\ufe0f",
             "\u0301start", "x\u034f\u0301", "\u1e9b\u0323",
             # marks and a composition newer than Unicode 9.0, which tokenizers' NFC ignores
             "a\u1ac1\u0316", "\U00011935\U00011930", "e\u0301\u1dfa", "x\u0898\u0316"]

WHITESPACE = [" ", "  ", "    ", "\t", "\n", "\r\n", "\r", "\n\n\n", " \n", "\u00a0", "\u3000",
              "\u2028", "\u2029", "\u180e", "\u0085", "\u000b", "\u000c", "\u001c", "\u001f",
              "\u200b", "\u2009", "\u202f", "\ufeff", "\u1680", "\u205f", "\u2003\u2003"]

DIGITS = ["0", "7", "42", "1234567890", "3.14159", "1e-9", "0xDEADBEEF", "2024-06-11",
          "١٢٣٤", "०१२३", "１２３", "²", "½", "Ⅻ", "⑦", "𝟘𝟙", "٣.١٤", "1,000,000", "৪২"]

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "’s", "'x",
                "it's", "IT'S", "o'clock", "rock'n'roll", "'", "''", "ſ", "'ſ", "K"]


def identifier(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    parts = []
    for _ in range(1 + rng.below(3)):
        parts.append("".join(letters[rng.below(26)] for _ in range(2 + rng.below(7))))
    return ("_" if rng.below(2) else "").join(parts)


def number(rng):
    s = str(rng.below(1000000))
    if rng.below(4) == 0:
        s += "." + str(rng.below(1000))
    return s


def prose(rng, lang):
    _, sep, stop, words = lang
    out = []
    for _ in range(2 + rng.below(5)):
        sentence = []
        for _ in range(4 + rng.below(12)):
            roll = rng.below(30)
            if roll == 0:
                w = number(rng)
            elif roll == 1:
                w = identifier(rng)
            elif roll == 2:
                w = rng.pick(EMOJI)
            else:
                w = rng.skewed(words)
            if rng.below(10) == 0:
                w += rng.pick([",", ";", ":", "!", "?", "…", "—", "\"", ")"])
            sentence.append(w)
        out.append(sep.join(sentence) + stop)
    return " ".join(out)


CODE_TEMPLATES = [
    # Python
    "def {a}({b}, {c}=None):\n    \"\"\"Return the {b}.\"\"\"\n    if {c} is None:\n        {c} = {{}}\n"
    "    for i in range({n}):\n        {c}[i] = {b} ** 2  # square\n    return {c}\n",
    # C++
    "#include <vector>\n\nstatic int {a}(const std::vector<int>& {b}) {{\n  int {c} = 0;\n"
    "  for (int x : {b}) {c} += x * {n};\n  return {c};\n}}\n",
    # JavaScript
    "export async function {a}({b}) {{\n\tconst {c} = await fetch(`/api/v1/{b}?limit=${{{n}}}`);\n"
    "\treturn {c}.json();\n}}\n",
    # Rust
    "fn {a}({b}: &[u8]) -> Result<usize, Error> {{\n    let mut {c} = 0usize;\n"
    "    for &x in {b}.iter() {{ {c} += x as usize; }}\n    Ok({c})\n}}\n",
    # Go
    "func {a}({b} []string) (map[string]int, error) {{\n\t{c} := make(map[string]int)\n"
    "\tfor _, s := range {b} {{\n\t\t{c}[s]++\n\t}}\n\treturn {c}, nil\n}}\n",
    # shell
    "for f in $(ls ./{a}/*.txt); do\n  grep -n \"{b}\" \"$f\" | wc -l >> {c}.log\ndone\n",
    # JSON
    "{{\"{a}\": [{n}, {n}], \"{b}\": {{\"enabled\": true, \"name\": \"{c}\", \"ratio\": 0.{n}}}}}\n",
    # HTML
    "<div class=\"{a}\">\n  <p id='{b}'>&lt;{c}&gt; &amp; {n}</p>\n  <!-- {a} -->\n</div>\n",
    # SQL
    "SELECT {a}.id, COUNT(*) AS {b}\n  FROM {a}\n  JOIN {c} ON {c}.{a}_id = {a}.id\n"
    " WHERE {a}.score >= {n}\n GROUP BY 1\n ORDER BY 2 DESC;\n",
    # Tool call in the Qwen3-Coder form
    "<tool_call>\n<function={a}>\n<parameter={b}>\n{n}\n</parameter>\n</function>\n</tool_call>",
]


def code(rng):
    t = rng.pick(CODE_TEMPLATES)
    return t.format(a=identifier(rng), b=identifier(rng), c=identifier(rng), n=number(rng))


def random_unicode(rng, length):
    # Blocks from many scripts, symbols, private use and the supplementary planes.
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x9FF), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1FFF),
              (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xE000, 0xE0FF), (0xF900, 0xFAFF), (0xFE00, 0xFFFD), (0x10000, 0x1014F),
              (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F)]
    out = []
    for _ in range(length):
        lo, hi = rng.pick(ranges)
        cp = lo + rng.below(hi - lo + 1)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def piece(rng, kind):
    if kind == 0:
        return prose(rng, PROSE[0])
    if kind == 1:
        return prose(rng, rng.pick(PROSE[1:]))
    if kind == 2:
        return code(rng)
    if kind == 3:
        return "".join(rng.pick(EMOJI) + rng.pick(["", " ", "", "\n", "x"]) for _ in range(3 + rng.below(12)))
    if kind == 4:
        return " ".join(rng.pick(["", "x", "A", "ο"]) + rng.pick(COMBINING) + rng.pick(["", "s", "!", " "])
                        for _ in range(3 + rng.below(10)))
    if kind == 5:
        return "".join(rng.pick(WHITESPACE) * (1 + rng.below(4)) + rng.pick(["word", "", "1", ".", "é", "中"])
                       for _ in range(4 + rng.below(12)))
    if kind == 6:
        return " ".join(rng.pick(DIGITS) * (1 + rng.below(3)) for _ in range(3 + rng.below(10)))
    if kind == 7:
        out = []
        for _ in range(3 + rng.below(8)):
            out.append(rng.pick(SPECIAL + NEAR_SPECIAL))
            out.append(rng.pick(["", " ", "\n", "user\n", "assistant\n", "x", "  ", "你好"]))
        return "".join(out)
    if kind == 8:
        return " ".join(rng.pick(["I", "you", "it", "They", "JOHN", "x", "", "'"]) + rng.pick(CONTRACTIONS)
                        for _ in range(4 + rng.below(10)))
    if kind == 9:
        return random_unicode(rng, 10 + rng.below(60))
    if kind == 10:
        return " " * (1 + rng.below(70)) + rng.pick(["", "x", "\n", "\t"]) + "\n" * rng.below(6) + "0" * rng.below(30)
    # A chat turn the way the chat template writes one.
    role = rng.pick(["system", "user", "assistant", "tool"])
    body = prose(rng, rng.pick(PROSE))
    if role == "assistant" and rng.below(2):
        body = "<think>\n" + prose(rng, PROSE[0]) + "\n</think>\n\n" + body
    return "<|im_start|>" + role + "\n" + body + "<|im_end|>\n"


def make_documents(count=240):
    rng = Rng(0x51C0DE)
    docs = []
    for i in range(count):
        parts = []
        # Every kind leads some documents, and the rest are mixes.
        first = i % 12
        parts.append(piece(rng, first))
        for _ in range(2 + rng.below(8)):
            parts.append(piece(rng, rng.below(12)))
        docs.append(rng.pick(["", "\n", " ", "\n\n"]).join(parts))
    # Edge cases a generator would rarely hit.
    docs += ["", " ", "\n", "a", "Hello world", "Hello world!", " Hello", "   leading",
             "trailing   ", "<|im_start|>", "<|im_start|>user\nhi<|im_end|>\n",
             "<|im_start|><|im_end|>", "<think></think>", "x" * 300, " " * 300, "\n" * 50,
             "1" * 100, "中" * 200, "😀" * 50, "a\u0301" * 40, "\r\n" * 20, "ab\u180ecd",
             "\u3000\u3000text", "tab\t\t\tend"]
    return docs


# ---------------------------------------------------------------------------- encoding


def fnv1a_ids(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for c in (str(i) + ",").encode():
            h = ((h ^ c) * 0x100000001B3) & MASK64
    return h


def time_corpus(tokenizer, path):
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    best = None
    ids = None
    for _ in range(3):
        t0 = time.perf_counter()
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    mb = len(data) / 1e6
    print(f"tokenizers encode (one call, one thread): {mb / best:.1f} MB/s on {mb:.2f} MB, "
          f"{len(ids)} tokens, ids fnv1a {fnv1a_ids(ids):016x}")
    lines = text.splitlines(keepends=True)
    t0 = time.perf_counter()
    batch = tokenizer.encode_batch(lines, add_special_tokens=False)
    dt = time.perf_counter() - t0
    print(f"tokenizers encode_batch (one call per line, RAYON_NUM_THREADS=1): {mb / dt:.1f} MB/s, "
          f"{sum(len(e.ids) for e in batch)} tokens")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("assets", help="a copy of ../shared/assets")
    ap.add_argument("--out", default="tests/fixtures/tokenizer")
    ap.add_argument("--corpus", help="time tokenizers on this file (tokenizer_bench --write-corpus)")
    ap.add_argument("--docs-json", help="write the documents as a JSON list and stop")
    args = ap.parse_args()

    docs = make_documents()
    if args.docs_json:
        with open(args.docs_json, "w", encoding="utf-8") as f:
            json.dump(docs, f, ensure_ascii=False)
        print(f"wrote {len(docs)} documents to {args.docs_json}")
        return 0

    import tokenizers

    qwen3 = tokenizers.Tokenizer.from_file(os.path.join(args.assets, "qwen3-tokenizer", "tokenizer.json"))
    meta = {"tokenizers": tokenizers.__version__, "documents": len(docs),
            "ids": "tokenizers.Tokenizer.from_file(qwen3-tokenizer/tokenizer.json).encode(text, add_special_tokens=False)"}

    qwen2 = None
    try:
        import transformers

        qwen2 = transformers.AutoTokenizer.from_pretrained(os.path.join(args.assets, "qwen2-tokenizer"))
        meta["transformers"] = transformers.__version__
        meta["ids_vocab_merges"] = (f"transformers.AutoTokenizer({type(qwen2).__name__}) on qwen2-tokenizer/ "
                                    "(vocab.json + merges.txt), encode(text, add_special_tokens=False); "
                                    "null when equal to ids")
    except Exception as e:  # transformers missing or unable to load the folder
        print(f"warning: no vocab.json + merges.txt golden ({type(e).__name__}: {e})", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "qwen3_golden.jsonl")
    differing = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for text in docs:
            ids = qwen3.encode(text, add_special_tokens=False).ids
            row = {"text": text, "ids": ids}
            if qwen2 is not None:
                other = qwen2.encode(text, add_special_tokens=False)
                row["ids_vocab_merges"] = None if other == ids else other
                differing += other != ids
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    with open(os.path.join(args.out, "qwen3_golden.meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"wrote {len(docs)} documents to {path} ({os.path.getsize(path) / 1e6:.2f} MB)"
          + (f"; vocab.json + merges.txt differs on {differing}" if qwen2 is not None else ""))

    if args.corpus:
        time_corpus(qwen3, args.corpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
