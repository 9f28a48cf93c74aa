"""The load generator really keeps C requests in flight and measures what the stream shows."""

from __future__ import annotations

import asyncio
import math

import pytest

from k25trace.capture.load import LoadConfig, LoadGenerator, summarize
from k25trace.stats import quantile


def _run(cfg, prompt=lambda i: [1, 2, 3]):
    return asyncio.run(LoadGenerator(cfg, prompt).run())


def test_c64_keeps_64_in_flight(fake):
    # the server holds the first 64 streams before their first token until all 64 are there: if the client keeps
    # 64 in flight the server sees 64 at once, however slowly this machine opens the connections
    s = fake(tokens=16, token_delay_s=0.02, ttft_delay_s=0.05, batch_barrier=64, metrics=False)
    cfg = LoadConfig(url=s.url, model="fake-model", concurrency=64, requests=192, max_tokens=16)
    res = _run(cfg)
    st = summarize(res)
    assert s.max_in_flight == 64  # measured by the server
    assert st["max_in_flight"] == 64  # and by the client
    assert st["requests"] == 192 and st["errors"] == 0 and s.completions == 192
    assert st["output_tokens"] == 192 * 16 and st["input_tokens"] == 192 * 3
    # the server's pacing shows through as lower bounds (a busy machine only adds): TTFT >= 50 ms, ITL and
    # TPOT about 20 ms (a chunk read late is followed by one read early, so the median stays near 20)
    assert st["ttft_ms"]["p50"] >= 50
    assert st["itl_ms"]["p50"] >= 18, st["itl_ms"]
    assert st["tpot_ms"]["p50"] >= 18, st["tpot_ms"]
    assert st["itl_ms"]["n"] == 192 * 15


def test_duration_bound_and_rate(fake):
    s = fake(tokens=4, token_delay_s=0.01)
    res = _run(LoadConfig(url=s.url, model="fake-model", concurrency=8, duration_s=0.6, max_tokens=4))
    # new requests stop at the deadline, those in flight finish (on any machine: no upper bound on the time)
    assert res.duration_s >= 0.6 and all(r.sent_s < 0.6 for r in res.records)
    assert len(res.records) > 8 and all(r.ok for r in res.records)
    res = _run(
        LoadConfig(url=s.url, model="fake-model", concurrency=8, requests=20, request_rate=40.0, max_tokens=4, seed=3)
    )
    st = summarize(res)
    assert st["requests"] == 20 and st["errors"] == 0
    # 20 Poisson arrivals at 40/s (seeded) are spread over about half a second, not sent at once
    sent = [r.sent_s for r in res.records]
    assert sent == sorted(sent) and sent[-1] - sent[0] > 0.15
    assert st["max_in_flight"] <= 8


def test_errors_are_recorded(fake):
    s = fake(completion_status=503)
    res = _run(LoadConfig(url=s.url, model="fake-model", concurrency=2, requests=3, max_tokens=4))
    st = summarize(res)
    assert st["errors"] == 3 and st["ttft_ms"]["p50"] is None
    assert "HTTP 503" in st["first_errors"][0]


def test_quantile_matches_numpy_linear():
    vals = [10.0, 1.0, 4.0, 2.0, 3.0]  # unsorted on purpose
    assert quantile(vals, 0.5) == 3.0
    assert quantile(vals, 0.9) == pytest.approx(7.6)
    assert quantile(vals, 0.99) == pytest.approx(9.76)
    assert quantile(vals, 0.0) == 1.0 and quantile(vals, 1.0) == 10.0
    assert quantile([5.0], 0.99) == 5.0
    assert math.isnan(quantile([], 0.5))
    for q in (-0.1, 1.5, 50):
        with pytest.raises(ValueError, match="q must be in"):
            quantile(vals, q)
    # statistics.quantiles(method="inclusive") cuts at the same points
    import statistics

    assert statistics.quantiles(vals, n=10, method="inclusive")[8] == pytest.approx(quantile(vals, 0.9))
