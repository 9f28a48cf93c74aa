"""What a capture run is told (:class:`CaptureOptions`), how it ends (the exit codes) and the interrupts it takes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130


@dataclass
class CaptureOptions:
    """Everything a capture run is told: the ``capture`` command's flags (one field each, same names with
    ``_s`` for seconds), and a few knobs the tests turn (progress interval, polling, settle time)."""

    url: str
    out: Path
    trace_dir: Path | None
    concurrency: list[int]
    requests: int | None = None
    duration_s: float | None = None
    prompt_tokens: int = 128
    max_tokens: int = 64
    warmup: int = 2
    name: str | None = None
    stop_timeout_s: float = 3600.0
    start_timeout_s: float = 30.0
    file_timeout_s: float = 300.0
    no_profile: bool = False
    expect_ranks: int | None = None
    model: str | None = None
    seed: int = 0
    ignore_eos: bool = True
    temperature: float = 0.0
    api_key: str | None = None
    request_rate: float | None = None
    endpoint: str = "completions"
    request_timeout_s: float = 3600.0
    max_iterations: int | None = None
    delay_iterations: int | None = None
    force: bool = False
    progress_interval_s: float | None = None  # None: 1 s on a terminal, 10 s otherwise
    poll_s: float = 0.5
    settle_s: float = 5.0  # quiet time after which the files present are taken as all there are (world size unknown)
    metrics_interval_s: float = 0.5  # /metrics polls (vllm:num_requests_running) during each level's load


class Interrupts:
    """SIGINT/SIGTERM arrive here instead of raising KeyboardInterrupt in the middle of a call."""

    def __init__(self) -> None:
        self.count = 0
        self.signame: str | None = None
        self._waiters: list[asyncio.Future] = []

    def fire(self, signame: str) -> None:
        self.count += 1
        self.signame = signame
        for f in self._waiters:
            if not f.done():
                f.set_result(signame)
        self._waiters.clear()

    def next(self) -> asyncio.Future:
        f = asyncio.get_running_loop().create_future()
        self._waiters.append(f)
        return f
