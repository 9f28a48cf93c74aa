"""Capture on odd input and a misbehaving server (issue 11: items 4, 14, 15, 18, 20)."""
from __future__ import annotations

import asyncio

from click.testing import CliRunner

from capture.cli import capture_command
from capture.load import LoadConfig, LoadGenerator
from capture.runner import EXIT_ERROR, EXIT_INCOMPLETE


# ------------------------------------------------------------------------------- 18: malformed --url


def test_malformed_url_is_a_clear_error_not_a_traceback(tmp_path):
    # 'http://[::1' made httpx raise InvalidURL ("Invalid port: ':1'") out of the command
    for url, why in (("http://[::1", "unclosed '['"), ("http://h:x", "not a valid URL"),
                     ("localhost:8000", "did you mean http://localhost:8000"), ("ftp://h", "http or https"),
                     ("http://", "no host"), ("http://h:99999", "out of range"), ("http://h/?a=1", "query")):
        r = CliRunner().invoke(capture_command, ["--url", url, "--trace-dir", str(tmp_path), "--out",
                                                 str(tmp_path / "o")])
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
    res = asyncio.run(LoadGenerator(LoadConfig(url=s.url, model="fake-model", concurrency=1, requests=1,
                                               max_tokens=4), lambda i: [1, 2]).run())
    r = res.records[0]
    assert (r.ok, r.output_tokens, r.chunks, r.ttft_ms) == (False, 0, 0, None)
    assert r.error.startswith("no tokens generated (no token in the stream") and r.finish_reason == "length"


def test_token_counts_from_usage_and_from_chunks(fake):
    # the non-empty case still counts right: by usage, and by chunks when the server sends no usage
    for usage in (True, False):
        s = fake(tokens=5, usage=usage)
        res = asyncio.run(LoadGenerator(LoadConfig(url=s.url, model="fake-model", concurrency=1, requests=1,
                                                   max_tokens=5), lambda i: [1, 2]).run())
        r = res.records[0]
        assert (r.ok, r.output_tokens, r.chunks, len(r.itl_ms)) == (True, 5, 5, 4), usage
        assert r.input_tokens == (2 if usage else None)
