#!/usr/bin/env python3
"""Cache hit rate of interleaved agent conversations that together outgrow the device pool.

  tools/load/agent_replay.py --bin build/hibana [--agents 8] [--turns 6] [--turn-tokens 800]
                             [--kv-cache-size 60MiB]

Each agent's conversation grows by a user turn of about --turn-tokens tokens (a slice of the
held-out text) and the model's short reply; the agents take turns round-robin, so by the time
an agent returns, the others' state has pushed much of its own out of the device pool and
into the SSD tier (a temporary --cache-dir). Prints the prefix cache's hit rate and where the
hits came from, read from /metrics. Standard library only.
"""
import argparse
import http.client
import json
import os
import sys
import tempfile

from hibana_server import metrics, start, stop

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chat(port, messages):
    body = json.dumps({"model": "hibana-tiny", "max_tokens": 16, "temperature": 0,
                       "messages": messages})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {data}")
    return data["choices"][0]["message"]["content"] or "", data["usage"]["prompt_tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--turn-tokens", type=int, default=800)
    ap.add_argument("--kv-cache-size", default="60MiB")
    ap.add_argument("--port", type=int, default=30118)
    a = ap.parse_args()

    text = open(os.path.join(ROOT, "models/hibana-tiny/heldout.txt"), encoding="utf-8").read()
    per_turn = a.turn_tokens * 3  # ~3 bytes per token on this text
    cache = tempfile.mkdtemp(prefix="hibana-replay-")
    log = open(os.path.join(cache, "server.log"), "w")
    p = start(a.bin, a.port, ["--kv-cache-size", a.kv_cache_size, "--cache-dir",
                              os.path.join(cache, "ssd")], log)
    try:
        pool_tokens = metrics("127.0.0.1", a.port)["hibana_kv_cache_pages_total"] * 64
        convs = [[] for _ in range(a.agents)]
        last_prompt = [0] * a.agents
        for turn in range(a.turns):
            for agent in range(a.agents):
                at = ((agent * a.turns + turn) * per_turn) % max(1, len(text) - per_turn)
                convs[agent].append({"role": "user", "content": text[at:at + per_turn]})
                reply, last_prompt[agent] = chat(a.port, convs[agent])
                convs[agent].append({"role": "assistant", "content": reply})
        m = metrics("127.0.0.1", a.port)
    finally:
        stop(p)
    total = sum(last_prompt)
    q = m["hibana_prefix_cache_queries_total"]
    hits = m["hibana_prefix_cache_hits_total"]
    dev = m["hibana_prefix_cache_device_hit_tokens_total"]
    ssd = m["hibana_prefix_cache_ssd_hit_tokens_total"]
    print(f"{a.agents} agents x {a.turns} turns; final conversations {total} tokens in all, "
          f"device pool {pool_tokens:.0f} tokens ({total / pool_tokens:.1f}x)")
    print(f"prompt tokens queried {q:.0f}, reused {hits:.0f} ({100 * hits / max(q, 1):.1f}%): "
          f"{dev:.0f} from the device pool, {ssd:.0f} from the SSD tier")
    print(f"SSD tier: {m['hibana_ssd_spilled_bytes_total'] / 2**20:.1f} MiB spilled, "
          f"{m['hibana_ssd_restored_bytes_total'] / 2**20:.1f} MiB restored in "
          f"{m['hibana_ssd_restore_seconds_total']:.3f} s, "
          f"{m['hibana_ssd_restores_declined_total']:.0f} restores declined by the cost model")
    print(f"(server log: {log.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
