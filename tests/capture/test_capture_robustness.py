"""Capture on odd input and a misbehaving server (issue 11: items 4, 14, 15, 18, 20)."""
from __future__ import annotations

from click.testing import CliRunner

from capture.cli import capture_command
from capture.runner import EXIT_ERROR


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
