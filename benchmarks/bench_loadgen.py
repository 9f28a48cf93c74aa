"""How fast is capture's load generator, and what does it cost per request?

Starts the fake streaming server (tests/capture/fakevllm.py) in a separate process, so the client's
CPU time is measured alone, and drives it with capture.load at several concurrencies with no
server-side delay: the requests/s reached is the client's ceiling, and client CPU per request (and
per streamed token) is its overhead on top of what a real server's latencies show.

    python3 benchmarks/bench_loadgen.py [--tokens 16] [--requests 2000] [--concurrency 1,64,256]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from k25trace.capture.load import LoadConfig, LoadGenerator, summarize  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", default="1,64,256")
    a = ap.parse_args()
    srv = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "capture" / "fakevllm.py"), "--port", "0", "--tokens", str(a.tokens)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(srv.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        print(f"fake server pid {srv.pid} on {url}; {a.tokens} streamed tokens per request, no server delay")
        print(
            f"{'C':>5} {'requests':>9} {'req/s':>9} {'tok/s':>10} {'max in flight':>14} "
            f"{'client CPU/req':>15} {'client CPU/tok':>15} {'ttft p50':>9} {'itl p50':>8}"
        )
        for c in [int(x) for x in a.concurrency.split(",")]:
            n = max(a.requests, 2 * c)
            cfg = LoadConfig(url=url, model="fake-model", concurrency=c, requests=n, max_tokens=a.tokens)
            gen = LoadGenerator(cfg, lambda i: [1, 2, 3, 4])
            cpu0, t0 = time.process_time(), time.perf_counter()
            res = asyncio.run(gen.run())
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
            st = summarize(res)
            assert st["errors"] == 0, st["first_errors"]
            print(
                f"{c:>5} {n:>9} {n / wall:>9.0f} {st['output_tokens'] / wall:>10.0f} {st['max_in_flight']:>14} "
                f"{cpu / n * 1e3:>12.2f} ms {cpu / st['output_tokens'] * 1e6:>12.0f} us "
                f"{st['ttft_ms']['p50']:>9.2f} {st['itl_ms']['p50']:>8.3f}"
            )
    finally:
        srv.terminate()
        srv.wait(10)


if __name__ == "__main__":
    main()
