"""Capture on odd input and a misbehaving server (issue 11: items 4, 14, 15, 18, 20)."""

from __future__ import annotations

import asyncio

from click.testing import CliRunner

from k25trace.capture.cli import capture_command
from k25trace.capture.client import ControlClient
from k25trace.capture.load import LoadConfig, LoadGenerator
from k25trace.capture.runner import EXIT_ERROR, EXIT_INCOMPLETE
from manifest_shape import check_shape


def _ranks(lv):
    return sorted(f["rank"] for f in lv["files"] if f["valid"] and not f["frontend"])


# ------------------------------------------------------------------------------- 18: malformed --url


def test_malformed_url_is_a_clear_error_not_a_traceback(tmp_path):
    # 'http://[::1' made httpx raise InvalidURL ("Invalid port: ':1'") out of the command
    for url, why in (
        ("http://[::1", "unclosed '['"),
        ("http://h:x", "not a valid URL"),
        ("localhost:8000", "did you mean http://localhost:8000"),
        ("ftp://h", "http or https"),
        ("http://", "no host"),
        ("http://h:99999", "out of range"),
        ("http://h/?a=1", "query"),
    ):
        r = CliRunner().invoke(
            capture_command, ["--url", url, "--trace-dir", str(tmp_path), "--out", str(tmp_path / "o")]
        )
        assert r.exit_code == 2, (url, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (url, r.exception)
        assert "Invalid value for '--url'" in r.output and why in r.output, (url, r.output)
    assert not (tmp_path / "o").exists()


def test_malformed_url_through_the_api(run_cap, tmp_path):
    class Bad:
        url = "http://[::1"
        trace_dir = tmp_path

    rc, _, err, m = run_cap(Bad())
    assert rc == EXIT_ERROR and "unclosed '['" in err and m is None


# ------------------------------------------------------------------------------- 20: zero-token streams


def test_zero_token_stream_is_not_one_token_and_the_level_is_not_complete(fake, run_cap):
    # the stream: one chunk {"text": "", "finish_reason": "length"}, then usage.completion_tokens = 0; it was
    # counted as 1 token (the empty chunk) and the level marked complete
    s = fake(empty_stream=True)
    rc, _, err, m = run_cap(s)
    lv = m["levels"][0]
    st = lv["stats"]
    assert st["output_tokens"] == 0 and st["completed"] == 0 and st["errors"] == 2
    assert "usage.completion_tokens = 0" in st["first_errors"][0]
    assert rc == EXIT_INCOMPLETE and m["complete"] is False and m["status"] == "incomplete"
    assert "none of the 2 request(s) produced a token" in err and "not complete" in err
    assert any("produced a token" in w for w in lv["warnings"])
    assert s.stop_calls == 1


def test_zero_token_stream_without_usage(fake):
    s = fake(empty_stream=True, usage=False)
    res = asyncio.run(
        LoadGenerator(
            LoadConfig(url=s.url, model="fake-model", concurrency=1, requests=1, max_tokens=4), lambda i: [1, 2]
        ).run()
    )
    r = res.records[0]
    assert (r.ok, r.output_tokens, r.chunks, r.ttft_ms) == (False, 0, 0, None)
    assert r.error.startswith("no tokens generated (no token in the stream") and r.finish_reason == "length"


def test_tokens_with_empty_text_still_count(fake):
    # what vLLM streams for tokens whose text the detokenizer holds back: "" mid-stream, and at the end "" with
    # finish_reason "length" (a real token here: usage says 5); a capture of a real server saw 23 for 24 tokens
    for usage, chunks in ((True, 5), (False, 4)):
        s = fake(tokens=5, empty_texts=(1, 4), usage=usage)
        res = asyncio.run(
            LoadGenerator(
                LoadConfig(url=s.url, model="fake-model", concurrency=1, requests=1, max_tokens=5), lambda i: [1, 2]
            ).run()
        )
        r = res.records[0]
        # without usage the closing "" chunk cannot be told from a stream that generated nothing: not counted
        assert (r.ok, r.output_tokens, r.chunks, len(r.itl_ms)) == (True, chunks, chunks, chunks - 1), usage


def test_token_counts_from_usage_and_from_chunks(fake):
    # the non-empty case still counts right: by usage, and by chunks when the server sends no usage
    for usage in (True, False):
        s = fake(tokens=5, usage=usage)
        res = asyncio.run(
            LoadGenerator(
                LoadConfig(url=s.url, model="fake-model", concurrency=1, requests=1, max_tokens=5), lambda i: [1, 2]
            ).run()
        )
        r = res.records[0]
        assert (r.ok, r.output_tokens, r.chunks, len(r.itl_ms)) == (True, 5, 5, 4), usage
        assert r.input_tokens == (2 if usage else None)


# ------------------------------------------------------------------------------- 14: unanswered /start_profile


def test_start_timeout_is_followed_by_one_stop_and_the_files_are_salvaged(fake, run_cap, tmp_path):
    # /start_profile answers only after the client gave up (the server was slow to start its profiler, then
    # did): capture used to report the timeout and send no stop, leaving the server profiling
    s = fake(world_size=2, start_mode="late")
    rc, _, err, m = run_cap(s, start_timeout_s=0.3)
    assert s.start_calls == 1 and s.stop_calls == 1 and not s.profiling
    assert [c for c in s.calls if c[0] == "POST" and "profile" in c[1]] == [
        ("POST", "/start_profile"),
        ("POST", "/stop_profile"),
    ]
    assert s.completions == 0  # no load in a window whose start is unknown
    assert rc == EXIT_ERROR and m["status"] == "failed"
    lv = m["levels"][0]
    assert lv["start_status"] == "timeout" and lv["stop_status"] == "200" and lv["status"] == "failed"
    assert _ranks(lv) == [0, 1] and all(f["valid"] for f in lv["files"])
    check_shape(m, tmp_path / "cap")
    flat = " ".join(err.split())
    assert "outcome is unknown" in flat and "answered 200: the server is not profiling" in flat
    assert "salvaged" in flat and "--start-timeout" in flat and "MAY STILL BE PROFILING" not in flat
    assert "outcome is unknown" in m["error"]


def test_start_reset_after_it_took_effect(fake, run_cap):
    s = fake(start_mode="reset")
    rc, _, err, m = run_cap(s)
    lv = m["levels"][0]
    assert s.stop_calls == 1 and not s.profiling and rc == EXIT_ERROR
    assert lv["start_status"] == "reset" and _ranks(lv) == [0]


def test_start_timeout_that_never_took_effect_ends_without_waiting_for_files(fake, run_cap):
    s = fake(start_mode="late_noop")
    rc, _, err, m = run_cap(s, start_timeout_s=0.3, file_timeout_s=3600.0, settle_s=0.3)
    lv = m["levels"][0]
    assert s.stop_calls == 1 and rc == EXIT_ERROR and lv["files"] == []
    assert "no trace file appeared" in " ".join(err.split())


def test_start_and_stop_both_unanswered_warn_loudly(fake, run_cap):
    s = fake(start_mode="hang")
    rc, _, err, m = run_cap(s, start_timeout_s=0.3, stop_timeout_s=0.3, file_timeout_s=0.3)
    lv = m["levels"][0]
    assert s.start_calls == 1 and s.stop_calls == 1 and rc == EXIT_ERROR
    assert lv["start_status"] == "timeout" and lv["stop_status"] == "timeout"
    flat = " ".join(err.split())
    assert "MAY STILL BE PROFILING" in flat and f"curl -X POST {s.url}/stop_profile" in flat
    assert "MAY STILL BE PROFILING" in m["error"]


def test_start_not_connected_sends_no_stop(fake, run_cap, monkeypatch):
    # the server is gone between preflight and start: nothing was sent, nothing to stop
    s = fake()
    real = ControlClient.start_profile

    async def refused(self, *a, **kw):
        s.stop()  # the port is closed now: a connect error, not an unknown outcome
        return await real(self, *a, **kw)

    monkeypatch.setattr(ControlClient, "start_profile", refused)
    rc, _, err, m = run_cap(s)
    assert rc == EXIT_ERROR and "/start_profile failed: ConnectError" in err
    assert s.stop_calls == 0 and m["levels"][0]["start_status"] is None


def test_cli_start_timeout_option(fake, tmp_path):
    s = fake(start_mode="late")
    r = CliRunner().invoke(
        capture_command,
        [
            "--url",
            s.url,
            "--trace-dir",
            str(s.trace_dir),
            "--out",
            str(tmp_path / "o"),
            "--concurrency",
            "1",
            "--warmup",
            "0",
            "--start-timeout",
            "0.3",
            "--file-timeout",
            "10",
        ],
    )
    assert r.exit_code == EXIT_ERROR and s.stop_calls == 1 and not s.profiling
