"""Shared helpers of the load tools: start and stop `hibana serve`, read its /metrics."""
import http.client
import signal
import subprocess
import time


def start(bin_, port, extra, log, ready_timeout=120):
    """Starts `BIN serve` on 127.0.0.1:PORT with EXTRA arguments; returns once /health is 200
    (within ready_timeout seconds: /health answers 503 while the model loads)."""
    p = subprocess.Popen([bin_, "serve", "--host", "127.0.0.1", "--port", str(port), *extra],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(int(ready_timeout * 10)):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            raise RuntimeError("server exited; see its log")
        time.sleep(0.1)
    raise RuntimeError("server did not become ready")


def stop(p):
    """SIGTERM: a clean shutdown, which flushes the prefix cache to the SSD tier."""
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=300)


def metrics(host, port):
    """The server's /metrics as {name: value}: each series under its full name with labels,
    and also under its bare name (the first series of that name)."""
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    c.close()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
            out.setdefault(name.split("{", 1)[0], float(value))
    return out
