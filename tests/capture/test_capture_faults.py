"""Capture against the scriptable fake server: every way the profiler control and the files can go wrong."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from k25trace.capture.cli import capture_command
from k25trace.capture.runner import EXIT_ERROR, EXIT_INCOMPLETE, EXIT_OK
from manifest_shape import check_shape


def _level(m, name="c2"):
    return next(lv for lv in m["levels"] if lv["name"] == name)


def _ranks(lv):
    return sorted(f["rank"] for f in lv["files"] if f["valid"] and not f["frontend"])


def test_two_levels_empty_200(fake, run_cap, tmp_path):
    s = fake(world_size=2)
    rc, out, err, m = run_cap(s, concurrency=[1, 3], warmup=2)
    assert rc == EXIT_OK, err
    check_shape(m, tmp_path / "cap")
    assert m["complete"] is True and m["vllm_version"] == "0.32.0" and m["model"] == "fake-model"
    assert s.start_calls == 2 and s.stop_calls == 2 and not s.profiling
    for name, c in (("c1", 1), ("c3", 3)):
        lv = _level(m, name)
        assert lv["stop_status"] == "200" and lv["profiled"]
        assert _ranks(lv) == [0, 1] and lv["missing_ranks"] == []
        assert [f["frontend"] for f in lv["files"]].count(True) == 1
        assert all(f["world_size"] == 2 for f in lv["files"] if not f["frontend"])
        st = lv["stats"]
        assert st["requests"] == c and st["errors"] == 0 and st["max_in_flight"] == c
        assert st["output_tokens"] == 4 * c and st["input_tokens"] == 8 * c
        # the profile prefix (0.32+) was sent and every copied file carries it
        assert all(Path(f["path"]).name.startswith(lv["profile_prefix"]) for f in lv["files"])
        assert (tmp_path / "cap" / name / "requests.jsonl").read_text().count("\n") == c
        assert lv["extra_files"]  # the key-averages tables ride along
    # warm-up requests (2 per level) are not in the stats
    assert s.completions == 2 * 2 + 1 + 3
    assert "k25trace load" in out and "c3" in out
    assert s.start_bodies[0]["profile_prefix"] != s.start_bodies[1]["profile_prefix"]


def test_200_with_connection_close(fake, run_cap):
    s = fake(stop_mode="close200")
    rc, _, err, m = run_cap(s)
    assert rc == EXIT_OK, err
    assert _level(m)["stop_status"] == "200" and s.stop_calls == 1


def test_500_on_stop_files_still_checked(fake, run_cap):
    s = fake(stop_mode="500", world_size=2)
    rc, _, err, m = run_cap(s)
    lv = _level(m)
    assert s.stop_calls == 1
    assert lv["stop_status"] == "500" and "profile method failed" in lv["stop_detail"]
    assert _ranks(lv) == [0, 1] and rc == EXIT_OK


def test_stop_slower_than_client_timeout(fake, run_cap):
    # The server answers after 2.5 s and writes the files only then; the client gives up after 0.5 s.
    s = fake(stop_delay_s=2.5, files_after_reply=True)
    rc, _, err, m = run_cap(s, stop_timeout_s=0.5)
    lv = _level(m)
    assert lv["stop_status"] == "timeout" and lv["stop_seconds"] < 2.0
    assert s.stop_calls == 1  # never retried
    assert _ranks(lv) == [0] and rc == EXIT_OK, err


def test_connection_reset_on_stop(fake, run_cap):
    s = fake(stop_mode="reset", world_size=2)
    rc, _, err, m = run_cap(s)
    lv = _level(m)
    assert lv["stop_status"] == "reset"
    assert s.stop_calls == 1
    assert _ranks(lv) == [0, 1] and rc == EXIT_OK, err


def test_404_routes_print_profiler_config(fake, run_cap):
    s = fake(routes=False)
    rc, _, err, m = run_cap(s)
    assert rc == EXIT_ERROR
    assert s.start_calls == 0 and s.stop_calls == 0
    flat = " ".join(err.split())
    assert "--profiler-config" in flat and '"torch_profiler_with_stack":false' in flat
    assert '"torch_profiler_dump_cuda_time_total":false' in flat and '"ignore_frontend":true' in flat
    assert str(s.trace_dir) in flat
    assert m is None  # nothing written for a server that cannot profile


def test_409_on_start_never_stops_someone_elses_session(fake, run_cap):
    s = fake(start_status=409)
    rc, _, err, m = run_cap(s, concurrency=[1, 2])
    assert rc == EXIT_ERROR
    assert "already active" in err
    assert s.start_calls == 1 and s.stop_calls == 0
    assert m["status"] == "failed" and m["complete"] is False
    assert m["levels"][0]["status"] == "failed" and len(m["levels"]) == 1


def test_rank_that_arrives_late(fake, run_cap):
    s = fake(world_size=3, late_ranks={2: 1.5})
    rc, _, err, m = run_cap(s)
    lv = _level(m)
    assert rc == EXIT_OK, err
    assert _ranks(lv) == [0, 1, 2] and lv["missing_ranks"] == []
    assert "waiting for trace files (2/3 ranks" in err


def test_rank_that_never_arrives(fake, run_cap, tmp_path):
    s = fake(world_size=3, never_ranks={1})
    rc, out, err, m = run_cap(s, file_timeout_s=1.0)
    lv = _level(m)
    assert rc == EXIT_INCOMPLETE
    assert lv["missing_ranks"] == [1] and _ranks(lv) == [0, 2]
    assert m["complete"] is False and m["status"] == "incomplete"
    assert "missing rank(s) [1]" in err
    check_shape(m, tmp_path / "cap")


def test_expect_ranks_overrides_missing_world_size(fake, run_cap):
    s = fake(world_size=2)
    rc, _, err, m = run_cap(s, expect_ranks=4, file_timeout_s=0.5)
    lv = _level(m)
    assert rc == EXIT_INCOMPLETE and lv["missing_ranks"] == [2, 3]
    assert any("world_size" in w for w in lv["warnings"])


def test_gz_still_being_written_then_finished(fake, run_cap):
    s = fake(world_size=2, partial_ranks={1: 1.2})
    rc, _, err, m = run_cap(s)
    lv = _level(m)
    assert rc == EXIT_OK, err
    assert _ranks(lv) == [0, 1] and all(f["valid"] for f in lv["files"])
    assert "rank 1" in err and "incomplete" in err  # the progress line saw it half written


def test_gz_never_finished_is_kept_but_invalid(fake, run_cap, tmp_path):
    s = fake(world_size=2, partial_ranks={1: float("inf")})
    rc, _, err, m = run_cap(s, file_timeout_s=1.0)
    lv = _level(m)
    assert rc == EXIT_INCOMPLETE
    bad = [f for f in lv["files"] if not f["valid"]]
    assert len(bad) == 1 and bad[0]["rank"] == 1 and "end-of-stream" in bad[0]["problem"]
    assert lv["missing_ranks"] == [1]
    check_shape(m, tmp_path / "cap")


def test_load_errors_still_stop_once(fake, run_cap):
    s = fake(completion_status=500)
    rc, _, err, m = run_cap(s)
    lv = _level(m)
    assert s.stop_calls == 1 and not s.profiling
    assert lv["stats"]["errors"] == 2 and lv["stats"]["requests"] == 2
    assert rc == EXIT_INCOMPLETE  # a level without one successful request is not a capture


def test_no_profile_only_load(fake, run_cap, tmp_path):
    s = fake()
    rc, out, err, m = run_cap(s, no_profile=True, trace_dir=None, concurrency=[1, 4])
    assert rc == EXIT_OK, err
    assert s.start_calls == 0 and s.stop_calls == 0
    check_shape(m, tmp_path / "cap")
    assert [lv["profiled"] for lv in m["levels"]] == [False, False]
    assert _level(m, "c4")["stats"]["max_in_flight"] == 4 and _level(m, "c4")["files"] == []


def test_old_server_gets_no_body_and_no_prefix(fake, run_cap):
    s = fake(version="0.20.1", prefix_from_body=False)
    rc, _, err, m = run_cap(s, max_iterations=5)
    assert rc == EXIT_OK, err
    assert s.start_bodies == [None]
    assert _level(m)["profile_prefix"] is None
    assert any("0.32" in w for w in _level(m)["warnings"])


def test_new_server_gets_iteration_bounds(fake, run_cap):
    s = fake()
    rc, _, err, _ = run_cap(s, max_iterations=40, delay_iterations=5)
    assert rc == EXIT_OK
    body = s.start_bodies[0]
    assert body["max_iterations"] == 40 and body["delay_iterations"] == 5 and body["profile_prefix"]


def test_refuses_to_overwrite_a_capture(fake, run_cap, tmp_path):
    s = fake()
    assert run_cap(s)[0] == EXIT_OK
    first = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    assert first["max_model_len"] == 4096  # what the server's /v1/models says (report --by sol --context)
    rc, _, err, m = run_cap(s)
    assert rc == EXIT_ERROR and "--force" in err
    assert m == first and s.start_calls == 1
    rc, _, err, m = run_cap(s, force=True)
    assert rc == EXIT_OK and m["started_at"] != first["started_at"] and s.start_calls == 2


def test_unknown_model_and_too_long_prompt(fake, run_cap):
    s = fake()
    rc, _, err, _ = run_cap(s, model="nope")
    assert rc == EXIT_ERROR and "fake-model" in err
    rc, _, err, _ = run_cap(s, prompt_tokens=4000, max_tokens=200)
    assert rc == EXIT_ERROR and "max_model_len" in err
    assert s.start_calls == 0


def test_unreachable_server(run_cap, tmp_path):
    class Dead:
        url = "http://127.0.0.1:9"
        trace_dir = tmp_path

    rc, _, err, _ = run_cap(Dead())
    assert rc == EXIT_ERROR and "cannot reach" in err


def test_cli_options(fake, tmp_path):
    s = fake(world_size=1)
    r = CliRunner().invoke(capture_command, ["--url", s.url, "--out", str(tmp_path / "o"), "--concurrency", "1,x"])
    assert r.exit_code == 2 and "comma-separated" in r.output
    r = CliRunner().invoke(capture_command, ["--url", s.url, "--out", str(tmp_path / "o"), "--concurrency", "2,2"])
    assert r.exit_code == 2
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
            "2",
            "--requests",
            "5",
            "--prompt-tokens",
            "4",
            "--max-tokens",
            "3",
            "--warmup",
            "0",
            "--seed",
            "7",
            "--name",
            "my run",
        ],
    )
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["name"] == "my run" and m["levels"][0]["stats"]["requests"] == 5
    assert m["levels"][0]["profile_prefix"].startswith("k25-my-run-c2-")
    r = CliRunner().invoke(capture_command, ["--help"])
    assert "--force" in r.output and "--no-profile" in r.output and "--stop-timeout" in r.output


def test_cli_builds_the_options_object_once(monkeypatch, tmp_path):
    """Every flag lands in its CaptureOptions field (the command passes them through by name)."""
    from k25trace.capture import cli

    seen = []
    monkeypatch.setattr(cli, "run_capture", lambda opts: seen.append(opts) or 0)
    r = CliRunner().invoke(
        capture_command,
        [
            "--url",
            "http://127.0.0.1:9/",
            "--trace-dir",
            str(tmp_path),
            "--out",
            str(tmp_path / "o"),
            "--concurrency",
            "1,4",
            "--requests",
            "9",
            "--duration",
            "2.5",
            "--request-rate",
            "3",
            "--prompt-tokens",
            "5",
            "--max-tokens",
            "6",
            "--no-ignore-eos",
            "--temperature",
            "0.5",
            "--endpoint",
            "chat",
            "--warmup",
            "1",
            "--name",
            "n",
            "--model",
            "m",
            "--seed",
            "4",
            "--api-key",
            "k",
            "--start-timeout",
            "7",
            "--stop-timeout",
            "8",
            "--file-timeout",
            "9",
            "--request-timeout",
            "10",
            "--expect-ranks",
            "2",
            "--max-iterations",
            "11",
            "--delay-iterations",
            "12",
            "--no-profile",
            "--force",
        ],
    )
    assert r.exit_code == 0, r.output
    (o,) = seen
    assert (o.url, o.trace_dir, o.out, o.concurrency) == ("http://127.0.0.1:9", tmp_path, tmp_path / "o", [1, 4])
    assert (o.requests, o.duration_s, o.request_rate, o.prompt_tokens, o.max_tokens) == (9, 2.5, 3.0, 5, 6)
    assert (o.ignore_eos, o.temperature, o.endpoint, o.warmup, o.name, o.model, o.seed, o.api_key) == (
        False,
        0.5,
        "chat",
        1,
        "n",
        "m",
        4,
        "k",
    )
    assert (o.start_timeout_s, o.stop_timeout_s, o.file_timeout_s, o.request_timeout_s) == (7.0, 8.0, 9.0, 10.0)
    assert (o.expect_ranks, o.max_iterations, o.delay_iterations, o.no_profile, o.force) == (2, 11, 12, True, True)
