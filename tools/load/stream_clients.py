#!/usr/bin/env python3
"""Load test: waves of concurrent streaming clients against a running `hibana serve`, a third
of them hanging up mid-stream, checking that every other stream completes, that the server's
queue drains after each wave, and that its memory comes back to where it was: the live heap as
the server's allocator counts it (hibana_memory_bytes{kind="heap"}), with RSS printed beside it.
Under AddressSanitizer RSS keeps growing while the heap does not (its allocator keeps freed
memory in quarantine and per-size caches), so the heap is what is judged unless --judge rss.

  tools/load/stream_clients.py --url http://127.0.0.1:30001 --pid PID [--clients 128] [--waves 3]

Exit status 0 when every wave passed. Python standard library only.
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

from hibana_server import metrics


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def client(url, i, hang_up_after, max_tokens, results):
    u = urllib.parse.urlparse(url)
    body = json.dumps({
        "model": "hibana-tiny",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": f"Client {i}: write a short Python function."}],
    })
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        if hang_up_after == 0:
            c.sock.close()  # gone before the first byte of the reply
            results[i] = "hung up"
            return
        r = c.getresponse()
        if r.status != 200:
            results[i] = f"status {r.status}: {r.read()[:200]!r}"
            return
        chunks = 0
        done = False
        ids = set()
        finish = None
        while True:
            line = r.fp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                if line.strip() == b"data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])  # every event must be one JSON object
                if chunk.get("object") != "chat.completion.chunk":
                    results[i] = f"malformed chunk: {line[:200]!r}"
                    return
                ids.add(chunk["id"])
                for choice in chunk.get("choices", []):
                    finish = choice.get("finish_reason") or finish
                chunks += 1
                if hang_up_after is not None and chunks >= hang_up_after:
                    c.sock.close()  # the client goes away mid-stream
                    results[i] = "hung up"
                    return
        if not done:
            results[i] = f"stream ended without [DONE] after {chunks} chunks"
        elif len(ids) != 1 or finish not in ("stop", "length"):
            results[i] = f"ids {ids}, finish_reason {finish!r}"
        else:
            results[i] = "done"
    except Exception as e:  # noqa: BLE001 - every failure is reported
        results[i] = f"error: {e}"


def heap_mib(url):
    u = urllib.parse.urlparse(url)
    for name, value in metrics(u.hostname, u.port).items():
        if name.startswith("hibana_memory_bytes{") and 'kind="heap"' in name:
            return value / 2**20
    return None


def wait_drained(url, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        u = urllib.parse.urlparse(url)
        m = metrics(u.hostname, u.port)
        if m["hibana_requests_running"] == 0 and m["hibana_requests_waiting"] == 0:
            return True
        time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's pid, for its RSS")
    ap.add_argument("--clients", type=int, default=128)
    ap.add_argument("--waves", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rss-slack-mib", type=float, default=64.0,
                    help="how far above the first wave's RSS later waves may end")
    ap.add_argument("--heap-slack-mib", type=float, default=16.0,
                    help="how far above the first wave's live heap later waves may end")
    ap.add_argument("--judge", choices=("heap", "rss"), default="heap",
                    help="which memory figure must come back (heap: the allocator's live bytes)")
    a = ap.parse_args()

    ok = True
    after, heaps = [], []
    heap0 = heap_mib(a.url)
    print(f"before any load: RSS {rss_kib(a.pid) / 1024:.1f} MiB, heap "
          f"{'unknown' if heap0 is None else f'{heap0:.1f} MiB'}", flush=True)
    for wave in range(a.waves):
        results = [None] * a.clients
        t0 = time.time()
        rng = random.Random(wave)
        # Every third client hangs up at a random point: before the reply (0) or after 1..N chunks.
        hang = [rng.randint(0, a.max_tokens) if i % 3 == 2 else None for i in range(a.clients)]
        threads = [threading.Thread(target=client, args=(a.url, i, hang[i], a.max_tokens, results))
                   for i in range(a.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        drained = wait_drained(a.url)
        rss = rss_kib(a.pid) / 1024
        after.append(rss)
        heap = heap_mib(a.url)
        heaps.append(heap)
        done = results.count("done")
        hung = results.count("hung up")
        bad = [r for r in results if r not in ("done", "hung up")]
        print(f"wave {wave + 1}: {a.clients} clients in {time.time() - t0:.1f} s: {done} completed, "
              f"{hung} hung up, {len(bad)} failed; queue drained: {drained}; RSS {rss:.1f} MiB, heap "
              f"{'unknown' if heap is None else f'{heap:.1f} MiB'}",
              flush=True)
        for r in bad[:5]:
            print("  failure:", r)
        # A client that meant to hang up late may see its stream finish first; no other
        # client may end any way but [DONE].
        early = [i for i in range(a.clients) if hang[i] is None and results[i] != "done"]
        if bad or early or not drained:
            ok = False
    judge = a.judge if heaps[0] is not None else "rss"
    if judge == "heap" and len(heaps) > 1 and heaps[-1] > heaps[0] + a.heap_slack_mib:
        print(f"live heap grew across waves: {heaps[0]:.1f} -> {heaps[-1]:.1f} MiB")
        ok = False
    if judge == "rss" and len(after) > 1 and after[-1] > after[0] + a.rss_slack_mib:
        print(f"RSS grew across waves: {after[0]:.1f} -> {after[-1]:.1f} MiB")
        ok = False
    print("load test:", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
