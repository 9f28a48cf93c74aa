"""Ctrl-C / SIGTERM to a real ``python -m capture`` process in the middle of a profiling window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from manifest_shape import check_shape

ROOT = Path(__file__).resolve().parents[2]


def _spawn(s, out, *extra):
    cmd = [
        sys.executable,
        "-m",
        "k25trace.capture",
        "--url",
        s.url,
        "--trace-dir",
        str(s.trace_dir),
        "--out",
        str(out),
        "--concurrency",
        "4",
        "--prompt-tokens",
        "4",
        "--max-tokens",
        "1000",
        "--warmup",
        "0",
        *extra,
    ]
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def _wait(cond, timeout=20.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_load_stops_once_and_salvages(fake, tmp_path, sig):
    s = fake(world_size=2, tokens=1000, token_delay_s=0.05)  # each request would take ~50 s
    out = tmp_path / "cap"
    p = _spawn(s, out)
    try:
        assert _wait(lambda: s.profiling and s.in_flight == 4), "load never got going"
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stderr
    assert took < 10, took
    assert s.start_calls == 1 and s.stop_calls == 1 and not s.profiling
    m = json.loads((out / "manifest.json").read_text())
    check_shape(m, out)
    assert m["status"] == "interrupted" and m["complete"] is False
    lv = m["levels"][0]
    assert lv["stop_status"] == "200"
    assert sorted(f["rank"] for f in lv["files"] if f["valid"] and not f["frontend"]) == [0, 1]
    assert lv["stats"]["aborted"] is True and lv["stats"]["max_in_flight"] == 4
    assert sig.name in stderr


def test_interrupts_during_a_slow_stop_never_repeat_it(fake, tmp_path):
    # The load ends by itself (2 tokens); the stop then hangs for 30 s.
    s = fake(stop_delay_s=30.0, files_after_reply=True)
    out = tmp_path / "cap"
    p = _spawn(s, out, "--file-timeout", "0.5", "--max-tokens", "2")
    try:
        assert _wait(lambda: s.stop_calls == 1), "stop never sent"
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)  # first: only a message, keeps waiting for the stop
        time.sleep(0.7)
        assert p.poll() is None
        p.send_signal(signal.SIGINT)  # second: stop waiting, salvage, exit
        stdout, stderr = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stderr
    assert s.stop_calls == 1 and s.start_calls == 1
    assert "not repeated" in stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["levels"][0]["stop_status"] == "interrupted"
    assert m["status"] == "interrupted"


def test_second_interrupt_after_load_abort_gives_up_on_stop(fake, tmp_path):
    s = fake(stop_delay_s=30.0, files_after_reply=True, tokens=1000, token_delay_s=0.05)
    out = tmp_path / "cap"
    p = _spawn(s, out, "--file-timeout", "0.5")
    try:
        assert _wait(lambda: s.profiling and s.in_flight == 4)
        p.send_signal(signal.SIGINT)  # stops the load, sends the stop
        assert _wait(lambda: s.stop_calls == 1)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)  # stop waiting for it
        stdout, stderr = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130
    assert s.stop_calls == 1
    m = json.loads((out / "manifest.json").read_text())
    lv = m["levels"][0]
    assert lv["stop_status"] == "interrupted" and lv["missing_ranks"] == [0]
