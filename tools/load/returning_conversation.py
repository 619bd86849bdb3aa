#!/usr/bin/env python3
"""Time to first token for an agent's returning conversation, by where its state comes from:
recomputed (--no-prefix-cache), kept in the device pool, or restored from the SSD tier after
a server restart. Uses the Anthropic API (its usage reports cache_read_input_tokens).

  tools/load/returning_conversation.py --bin build/hibana [--tokens 32768] [--model DIR]

Each measurement is the latency of a max_tokens=1 request whose last user turn is new, so
only that turn needs computing when the history's state is found. Standard library only.
"""
import argparse
import http.client
import json
import os
import sys
import tempfile
import time

from hibana_server import start, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def ask(port, messages):
    body = json.dumps({"model": "hibana-tiny", "max_tokens": 1, "temperature": 0,
                       "messages": messages})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.time()
    c.request("POST", "/v1/messages", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    dt = time.time() - t0
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {data}")
    u = data["usage"]
    return dt, u["input_tokens"] + u.get("cache_read_input_tokens", 0), u.get("cache_read_input_tokens", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", default="", help="model directory (default: the embedded model)")
    ap.add_argument("--tokens", type=int, default=32768, help="about this many history tokens")
    ap.add_argument("--port", type=int, default=30117)
    a = ap.parse_args()

    text = open(os.path.join(ROOT, "models/hibana-tiny/heldout.txt"), encoding="utf-8").read()
    # ~3 bytes per token for this tokenizer on code; trimmed by the server's count below.
    history = (text * (1 + a.tokens * 3 // len(text)))[: a.tokens * 3]
    turn1 = [{"role": "user", "content": history}]
    model_args = [a.model] if a.model else []
    cache = tempfile.mkdtemp(prefix="hibana-returning-")
    log = open(os.path.join(cache, "server.log"), "w")
    rows = []

    def returning(reply):
        return turn1 + [{"role": "assistant", "content": reply},
                        {"role": "user", "content": "Now summarise that in one line."}]

    ssd = ["--cache-dir", os.path.join(cache, "ssd")]
    # (label, server flags, whether this server first sees the first turn itself)
    runs = [("recomputed (--no-prefix-cache)", ["--no-prefix-cache"], True),
            ("device pool", ssd, True),  # the first turn leaves its state in the pool
            ("SSD tier, after a restart", ssd, False)]  # a fresh process finds it on disk
    for label, flags, first_turn_here in runs:
        p = start(a.bin, a.port, model_args + flags, log)
        ask(a.port, [{"role": "user", "content": "warm up"}])
        if first_turn_here:
            ask(a.port, turn1)
        dt, n, cached = ask(a.port, returning("OK."))
        rows.append((label, dt, n, cached))
        stop(p)  # a clean shutdown flushes the prefix cache to the SSD tier

    base = rows[0][1]
    print(f"{'state from':32} {'TTFT s':>8} {'prompt':>7} {'reused':>7} {'speed-up':>8}")
    for name, dt, n, cached in rows:
        print(f"{name:32} {dt:8.3f} {n:7d} {cached:7d} {base / dt:7.1f}x")
    print(f"(server log: {log.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
