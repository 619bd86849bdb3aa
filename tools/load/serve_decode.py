#!/usr/bin/env python3
"""Decode speed through the HTTP API: what agents get from `hibana serve`, to set beside what
`hibana bench decode` measures for the forward pass alone.

  tools/load/serve_decode.py --bin build/hibana [--clients 1,8] [--prompt-tokens 4000]
                             [--max-tokens 256] [-- SERVE ARGS...]

Starts `BIN serve` with SERVE ARGS (for the GPU shapes: --device cuda --load-format dummy
--config bench/configs/qwen3-8b.json --dtype bf16 --kv-cache-size 24GiB), then for each client
count N sends N streaming chat completions at once (temperature 0 or --sampling, ignore_eos,
each prompt different from the first word on, so no prefix is shared) and times every streamed
chunk.
Per N it prints the median time to first token, each stream's decode rate (its tokens after the
first over the time from first to last), and the steady rate: the tokens all streams produced
while every one of them was decoding (after the last first token, before the first last
token) over that window, which is what `bench decode --batch N` measures, plus the
server's own overheads (HTTP, scheduling, sampling, detokenising, streaming). Standard library
only.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time

from hibana_server import start, stop


def prompt_text(i, words, rng):
    """About `words` words of plain text, distinct per client from its first word on."""
    vocab = ["agent", "buffer", "kernel", "tensor", "sparks", "memory", "decode", "prompt",
             "server", "stream", "token", "cache", "tool", "call", "reply", "state"]
    return f"client {i}: " + " ".join(rng.choice(vocab) for _ in range(words))


# Fields merged into every request (--sampling).
SAMPLING = {"temperature": 0}


def stream_one(port, model, text, max_tokens, out):
    """One streaming chat completion; fills out with chunk times and the usage."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": text}],
                       "max_tokens": max_tokens, "ignore_eos": True, **SAMPLING,
                       "stream": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    out["sent"] = time.monotonic()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out["error"] = f"status {r.status}: {r.read()[:300]!r}"
        return
    times = []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("usage"):
            out["usage"] = event["usage"]
        for choice in event.get("choices", []):
            if choice.get("delta", {}).get("content"):
                times.append(time.monotonic())
    out["times"] = times
    c.close()


def run_wave(port, model, n, words, max_tokens, rng):
    results = [dict() for _ in range(n)]
    texts = [prompt_text(i, words, rng) for i in range(n)]
    threads = [threading.Thread(target=stream_one, args=(port, model, texts[i], max_tokens,
                                                         results[i])) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    for r in results:
        if len(r.get("times", [])) < 2:
            raise RuntimeError("a stream produced fewer than two chunks")
    ttft = statistics.median(r["times"][0] - r["sent"] for r in results)
    per_stream = [(r["usage"]["completion_tokens"] - 1) / (r["times"][-1] - r["times"][0])
                  for r in results]
    chunks = sum(len(r["times"]) for r in results)
    tokens = sum(r["usage"]["completion_tokens"] for r in results)
    # The window in which every stream was decoding: chunks in it, scaled to tokens (a chunk
    # carries one token unless the detokeniser held bytes back).
    t0 = max(r["times"][0] for r in results)
    t1 = min(r["times"][-1] for r in results)
    steady = None
    if t1 > t0:
        inside = sum(sum(1 for x in r["times"] if t0 < x <= t1) for r in results)
        steady = inside * (tokens / chunks) / (t1 - t0)
    prompt_tokens = statistics.median(r["usage"]["prompt_tokens"] for r in results)
    return ttft, per_stream, steady, prompt_tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--clients", default="1,8", help="comma-separated client counts")
    ap.add_argument("--prompt-tokens", type=int, default=4000,
                    help="about this many prompt tokens per client")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--port", type=int, default=30917)
    ap.add_argument("--model", default="", help="model name in requests (default: the first "
                    "/v1/models entry)")
    ap.add_argument("--log", default=os.devnull, help="where the server's output goes")
    ap.add_argument("--ready-timeout", type=float, default=900,
                    help="seconds to wait for the model to load")
    ap.add_argument("--sampling", default="",
                    help='JSON fields for every request instead of {"temperature": 0}, e.g. '
                    'Qwen3-Coder\'s defaults: {"temperature": 0.7, "top_p": 0.8, "top_k": 20, '
                    '"repetition_penalty": 1.05}')
    ap.add_argument("serve_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.sampling:
        SAMPLING.clear()
        SAMPLING.update(json.loads(a.sampling))
    extra = a.serve_args[1:] if a.serve_args[:1] == ["--"] else a.serve_args
    counts = [int(x) for x in a.clients.split(",") if x]
    if not counts or min(counts) < 1:
        ap.error("--clients: positive counts")
    rng = random.Random(1)
    with open(a.log, "w") as log:
        server = start(a.bin, a.port, extra, log, ready_timeout=a.ready_timeout)
        try:
            model = a.model
            if not model:
                c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
                c.request("GET", "/v1/models")
                model = json.loads(c.getresponse().read())["data"][0]["id"]
            # About 1.3 tokens per word of this text; one short warm-up request first (graph
            # capture, first-use allocations).
            words = max(1, int(a.prompt_tokens / 1.3))
            run_wave(a.port, model, 1, 16, 8, rng)
            print(f"serve {' '.join(extra)}; requests {json.dumps(SAMPLING)}")
            print(f"{'clients':>7} {'prompt':>7} {'ttft s':>8} {'stream tok/s (min/median)':>26}"
                  f" {'steady tok/s':>13} {'per stream':>11}")
            for n in counts:
                ttft, per, steady, prompt = run_wave(a.port, model, n, words, a.max_tokens, rng)
                per_text = f"{min(per):.1f} / {statistics.median(per):.1f}"
                steady_text = f"{steady:13.1f} {steady / n:11.2f}" if steady else \
                    f"{'-':>13} {'-':>11}"
                print(f"{n:7d} {prompt:7.0f} {ttft:8.3f} {per_text:>26} {steady_text}",
                      flush=True)
            # How the tokens were drawn: from summaries of their logits rows, or rows fetched.
            c = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
            c.request("GET", "/metrics")
            for line in c.getresponse().read().decode().splitlines():
                if line.startswith(("hibana_summary_draws_total", "hibana_whole_row_fetches_total",
                                    "hibana_generation_tokens_total")):
                    print(line)
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
