"""``k25trace capture``: the click command (registered by ``k25trace.cli``; also ``python3 -m k25trace.capture``).

Every option's destination is the name of a :class:`~k25trace.capture.runner.CaptureOptions` field, so the
command builds its options object in one step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from k25trace.capture.client import CaptureError, check_url
from k25trace.capture.runner import CaptureOptions, run_capture


def _url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_url(value)
    except CaptureError as e:
        raise click.BadParameter(str(e).removeprefix("--url ")) from None


def _levels(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        out = [int(x) for x in str(value).replace(" ", "").split(",") if x]
    except ValueError:
        raise click.BadParameter("a comma-separated list of integers, e.g. 1,64,256") from None
    if not out or any(c < 1 for c in out):
        raise click.BadParameter("each concurrency must be >= 1")
    if len(set(out)) != len(out):
        raise click.BadParameter("each concurrency level only once (one directory per level)")
    return out


EPILOG = """\b
Per level: warm up, note the files already in --trace-dir, POST /start_profile, drive exactly C
concurrent streaming requests, POST /stop_profile ONCE (never retried; read timeout --stop-timeout),
then, whatever it answered, wait for the new trace files (one per rank, world size read from the
traces or --expect-ranks, plus the front-end file when present), validate them by streaming and copy
them into CAPTURE_DIR/c<C>/ with CAPTURE_DIR/manifest.json (rewritten atomically after each level).

\b
--out must be a new or empty directory: a previous capture is never overwritten silently.
--force replaces the previous capture there (its manifest and level directories).

\b
Ctrl-C / SIGTERM: stops the load, sends the one stop, salvages the files, writes the manifest.
A second Ctrl-C stops waiting for /stop_profile or for files. A session this run did not start
(409 on start) is never stopped. A /start_profile that goes unanswered (--start-timeout, reset)
may have started one: it gets the one stop, its files are kept, and the run ends (exit 1); if
that stop fails too, a warning says the server may still be profiling.

\b
Exit status: 0 complete; 1 error (server unreachable, profiling not enabled, session already
active, bad options); 3 incomplete (missing ranks, invalid files, a level with no successful
request); 130 interrupted.

\b
Server side (vLLM 0.13+), settings that keep /stop_profile short:
  --profiler-config '{"profiler":"torch","torch_profiler_dir":"/abs/dir",
    "torch_profiler_with_stack":false,"torch_profiler_dump_cuda_time_total":false,
    "ignore_frontend":true}'
"""


@click.command("capture", epilog=EPILOG, context_settings={"max_content_width": 100})
@click.option("--url", required=True, callback=_url, help="vLLM server base URL, e.g. http://127.0.0.1:8000")
@click.option(
    "--trace-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The server's torch_profiler_dir (same host). Required unless --no-profile.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="CAPTURE_DIR: new or empty directory for the traces and manifest.json.",
)
@click.option(
    "--concurrency",
    "concurrency",
    default="1",
    show_default=True,
    callback=_levels,
    help="Comma-separated levels; one profiling window per level.",
)
@click.option(
    "--requests",
    "requests",
    type=click.IntRange(min=1),
    help="Requests per level [default: one per concurrent slot, i.e. C]; with --duration, whichever ends first.",
)
@click.option(
    "--duration",
    "duration_s",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds of load per level (new requests stop after it; in-flight ones finish).",
)
@click.option(
    "--request-rate",
    type=click.FloatRange(min=0, min_open=True),
    help="Poisson arrivals at this many requests/s, still at most C in flight [default: inf].",
)
@click.option(
    "--prompt-tokens",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Prompt length in tokens (random tokens of the server's own tokenizer via /tokenize).",
)
@click.option(
    "--max-tokens", default=64, show_default=True, type=click.IntRange(min=1), help="Output tokens per request."
)
@click.option(
    "--ignore-eos/--no-ignore-eos",
    default=True,
    show_default=True,
    help="Generate exactly --max-tokens per request (keeps the decode batch at C).",
)
@click.option(
    "--temperature",
    default=0.0,
    show_default=True,
    type=float,
    help="Sampling temperature of every request (0: greedy, so runs repeat).",
)
@click.option(
    "--endpoint",
    type=click.Choice(["completions", "chat"]),
    default="completions",
    show_default=True,
    help="The OpenAI API the requests use: /v1/completions or /v1/chat/completions.",
)
@click.option(
    "--warmup",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Unprofiled requests before each level's window.",
)
@click.option("--name", help="Capture name [default: <model>-<date>-<time>].")
@click.option("--model", help="Model to request [default: the first of /v1/models].")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for prompts and arrivals.")
@click.option("--api-key", envvar="OPENAI_API_KEY", help="Bearer token [env: OPENAI_API_KEY].")
@click.option(
    "--start-timeout",
    "start_timeout_s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Read timeout (s) of /start_profile. Unanswered in time: one /stop_profile is sent anyway.",
)
@click.option(
    "--stop-timeout",
    "stop_timeout_s",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Read timeout (s) of the single /stop_profile call.",
)
@click.option(
    "--file-timeout",
    "file_timeout_s",
    default=300.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="How long (s) to wait for the trace files after the stop returned.",
)
@click.option(
    "--request-timeout",
    "request_timeout_s",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Read timeout (s) of each streaming request (the engine stalls while traces export).",
)
@click.option(
    "--expect-ranks",
    type=click.IntRange(min=1),
    help="Worker count to wait for [default: distributedInfo.world_size of the first trace].",
)
@click.option(
    "--max-iterations",
    type=click.IntRange(min=0),
    help="vLLM 0.32+: auto-stop the workers' profiler after N engine steps.",
)
@click.option(
    "--delay-iterations",
    type=click.IntRange(min=0),
    help="vLLM 0.32+: start recording N engine steps after /start_profile.",
)
@click.option("--no-profile", is_flag=True, help="Load and latency numbers only (the macro benchmark).")
@click.option("--force", is_flag=True, help="Replace a previous capture in --out.")
def capture_command(**options: Any) -> None:
    """Drive a running vLLM server's profiler under load and keep the traces safe.

    Writes CAPTURE_DIR/c<C>/*.pt.trace.json.gz (+ requests.jsonl) and CAPTURE_DIR/manifest.json,
    then prints a summary per level and the next command (k25trace load CAPTURE_DIR --db ...).

    \b
    Example:
        k25trace capture --url http://127.0.0.1:8000 --trace-dir /abs/dir --out cap --concurrency 1,8,64 \\
            --max-tokens 256
    """
    rc = run_capture(CaptureOptions(**options))
    if rc:
        raise SystemExit(rc)
