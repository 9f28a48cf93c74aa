"""Load generator: keep exactly C streaming requests in flight against an OpenAI-compatible server.

Closed loop by default (C workers, each sends its next request when the previous one ends, like
``vllm bench serve --max-concurrency C`` with an infinite request rate); with ``request_rate`` the
requests are released as a Poisson process, still never more than C in flight.  Every request is a
streaming ``/v1/completions`` (or ``/v1/chat/completions``) call with
``stream_options.include_usage``; per request it records TTFT, inter-token latencies (between
streamed chunks), TPOT, end-to-end latency and token counts (from the usage chunk).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import AsyncGenerator, Callable

import httpx

from k25trace.capture.manifest import Distribution, LevelStats
from k25trace.stats import quantile


@dataclass
class RequestRecord:
    """One request as measured by the client (one line of ``requests.jsonl``); latencies in ms."""

    index: int
    ok: bool = False
    error: str | None = None
    sent_s: float = 0.0  # seconds after the load started
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int = 0
    chunks: int = 0
    finish_reason: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["itl_ms"] = [round(x, 3) for x in self.itl_ms]
        for k in ("sent_s", "ttft_ms", "e2e_ms", "tpot_ms"):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        return d


@dataclass
class LoadConfig:
    """What load to drive: C streaming requests in flight, until ``requests`` or ``duration_s``."""

    url: str
    model: str
    concurrency: int
    requests: int | None = None  # total requests; with duration, whichever ends first
    duration_s: float | None = None
    request_rate: float | None = None  # requests/s (Poisson); None = as fast as C allows
    max_tokens: int = 64
    ignore_eos: bool = True
    temperature: float = 0.0
    endpoint: str = "completions"  # or "chat"
    api_key: str | None = None
    seed: int = 0
    request_timeout_s: float = 3600.0
    extra_body: dict = field(default_factory=dict)


@dataclass
class LoadResult:
    """Every request's record, the load's span (``time.monotonic()``), the most requests seen in flight."""

    records: list[RequestRecord]
    started: float  # time.monotonic()
    ended: float
    max_in_flight: int
    aborted: bool

    @property
    def duration_s(self) -> float:
        return max(self.ended - self.started, 0.0)


class LoadGenerator:
    """Keeps ``concurrency`` streaming requests in flight (see the module doc); ``run()`` once, ``abort()`` any
    time. ``in_flight``, ``done``, ``errors`` and ``tokens_streamed`` are live counters for progress lines."""

    def __init__(self, cfg: LoadConfig, prompt: Callable[[int], list[int] | str]):
        if cfg.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if cfg.requests is None and cfg.duration_s is None:
            raise ValueError("give requests or duration_s")
        self.cfg = cfg
        self.prompt = prompt
        self.in_flight = 0
        self.max_in_flight = 0
        self.done = 0
        self.errors = 0
        self.tokens_streamed = 0
        self.records: list[RequestRecord] = []
        self._aborted = False
        self._tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self._t0 = 0.0

    def abort(self) -> None:
        """Stop sending, cancel what is in flight; :meth:`run` then returns what was recorded."""
        self._aborted = True
        self._stop.set()
        for t in list(self._tasks):
            t.cancel()

    def _payload(self, i: int) -> tuple[str, dict]:
        c = self.cfg
        p = self.prompt(i)
        body: dict = {
            "model": c.model,
            "max_tokens": c.max_tokens,
            "temperature": c.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if c.ignore_eos:
            body["ignore_eos"] = True
        if c.endpoint == "chat":
            text = p if isinstance(p, str) else " ".join(map(str, p))
            body["messages"] = [{"role": "user", "content": text}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = p
            path = "/v1/completions"
        body.update(c.extra_body)
        return path, body

    async def _one(self, client: httpx.AsyncClient, i: int, admitted_s: float) -> None:
        """One streaming request, recorded in ``self.records`` whatever happens to it. ``admitted_s``: when the
        load loop let it go (before the deadline, always); its ``sent_s``."""
        rec = RequestRecord(index=i)
        self.records.append(rec)
        path, body = self._payload(i)
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight
        stream = _Stream(rec, chat=self.cfg.endpoint == "chat", t_send=time.perf_counter())
        rec.sent_s = admitted_s  # the loop's decision time: a request admitted before the deadline says so exactly
        try:
            async with client.stream("POST", path, json=body) as resp:
                if resp.status_code != 200:
                    text = (await resp.aread())[:200].decode("utf-8", "replace").replace("\n", " ")
                    rec.error = f"HTTP {resp.status_code}: {text}"
                    return
                async with contextlib.aclosing(_sse_events(resp)) as events:
                    async for obj in events:
                        rec.error = _stream_error(obj)
                        if rec.error is not None:
                            return
                        self.tokens_streamed += _record_chunk(stream, obj, time.perf_counter())
            self.tokens_streamed += _finish(stream, time.perf_counter())
        except asyncio.CancelledError:
            rec.error = "cancelled"
            raise
        except httpx.HTTPError as e:
            rec.error = f"{type(e).__name__}: {e}"[:200]
        finally:
            self.in_flight -= 1
            self.done += 1
            if not rec.ok:
                self.errors += 1

    async def run(self) -> LoadResult:
        """Drive the load to its end (or :meth:`abort`); returns the records sorted by request index."""
        c = self.cfg
        limits = httpx.Limits(max_connections=c.concurrency + 8, max_keepalive_connections=c.concurrency + 8)
        timeout = httpx.Timeout(connect=60.0, read=c.request_timeout_s, write=60.0, pool=None)
        headers = {"Authorization": f"Bearer {c.api_key}"} if c.api_key else {}
        rng = random.Random(c.seed ^ 0x5EED)
        sem = asyncio.Semaphore(c.concurrency)

        def finished(task: asyncio.Task) -> None:
            self._tasks.discard(task)
            sem.release()

        self._t0 = time.monotonic()
        deadline = self._t0 + c.duration_s if c.duration_s else math.inf
        async with httpx.AsyncClient(
            base_url=c.url.rstrip("/"), limits=limits, timeout=timeout, headers=headers
        ) as client:
            i = 0
            try:
                while not self._stop.is_set():
                    if c.requests is not None and i >= c.requests:
                        break
                    if time.monotonic() >= deadline:
                        break
                    if c.request_rate:
                        wait = rng.expovariate(c.request_rate)
                        try:
                            await asyncio.wait_for(self._stop.wait(), min(wait, max(deadline - time.monotonic(), 0)))
                            break
                        except asyncio.TimeoutError:
                            pass
                        if time.monotonic() >= deadline:
                            break
                    await sem.acquire()
                    now = time.monotonic()
                    if self._stop.is_set() or now >= deadline:
                        sem.release()
                        break
                    t = asyncio.create_task(self._one(client, i, now - self._t0))
                    self._tasks.add(t)
                    t.add_done_callback(finished)
                    i += 1
                    if i % 64 == 0:
                        await asyncio.sleep(0)  # let started requests get going
                while self._tasks:
                    await asyncio.gather(*list(self._tasks), return_exceptions=True)
            except asyncio.CancelledError:
                self.abort()
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
                raise
        ended = time.monotonic()
        self.records.sort(key=lambda r: r.index)
        return LoadResult(self.records, self._t0, ended, self.max_in_flight, self._aborted)


# --- one streamed response ------------------------------------------------------------------------


async def _sse_events(resp: httpx.Response) -> AsyncGenerator[dict, None]:
    """The JSON objects of a server-sent-event stream's ``data:`` lines, until ``data: [DONE]``; lines that are
    not ``data:``, and data that is not a JSON object, are skipped. (The SSE framing is split by hand: cheaper
    than ``aiter_lines``.)"""
    buf = b""
    async for raw in resp.aiter_raw():
        buf += raw
        if b"\n" not in raw:
            continue
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def _stream_error(obj: dict) -> str | None:
    """The message of an error object sent in place of a chunk (at most 200 characters); None for a chunk."""
    if "error" not in obj or obj.get("choices"):
        return None
    err = obj["error"]
    return str(err.get("message", err) if isinstance(err, dict) else err)[:200]


@dataclass
class _Stream:
    """One request's stream as it is read: its record, and what the record does not keep."""

    rec: RequestRecord
    chat: bool
    t_send: float  # time.perf_counter() when the request was sent
    last: float | None = None  # when the previous token chunk arrived
    usage_tokens: int | None = None  # usage.completion_tokens, once the server sent it (0 is an answer)
    empty_final: float | None = None  # when a closing chunk with "" text arrived


def _record_chunk(st: _Stream, obj: dict, now: float) -> int:
    """Account one chunk that arrived at ``now`` (TTFT, inter-token latency, finish reason, usage); returns 1 when
    it carried a token, else 0. Changes only ``st`` and its record."""
    rec = st.rec
    counted = 0
    choices = obj.get("choices")
    if choices and isinstance(choices[0], dict):
        ch = choices[0]
        finish = ch.get("finish_reason")
        if st.chat:
            delta = ch.get("delta") or {}
            is_token = bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))
        else:
            # a chunk with text is a token, and so is one with empty text mid-stream (its text held back by the
            # detokenizer: an incomplete UTF-8 sequence). The closing chunk with "" and its finish_reason is one
            # only if usage says so (see _finish): a stream that generated nothing ends with just such a chunk
            text = ch.get("text")
            is_token = bool(text) or (text == "" and not finish)
            if text == "" and finish:
                st.empty_final = now
        if finish:
            rec.finish_reason = finish
        if is_token:
            _token(st, now)
            counted = 1
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if isinstance(usage.get("prompt_tokens"), int):
            rec.input_tokens = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            st.usage_tokens = usage["completion_tokens"]
    return counted


def _token(st: _Stream, now: float) -> None:
    rec = st.rec
    if st.last is None:
        rec.ttft_ms = (now - st.t_send) * 1e3
    else:
        rec.itl_ms.append((now - st.last) * 1e3)
    st.last = now
    rec.chunks += 1


def _finish(st: _Stream, end: float) -> int:
    """Close the record of a stream that ended at ``end``: latency, token counts, and whether it succeeded (a
    stream without any token is an error). Returns 1 when the closing "" chunk turned out to carry a token."""
    rec = st.rec
    counted = 0
    rec.e2e_ms = (end - st.t_send) * 1e3
    if st.empty_final is not None and st.usage_tokens is not None and rec.chunks < st.usage_tokens:
        # usage counts one more token than the chunks with text: the closing "" chunk carried it
        _token(st, st.empty_final)
        counted = 1
    rec.output_tokens = st.usage_tokens if st.usage_tokens is not None else rec.chunks
    if rec.output_tokens == 0:
        rec.error = (
            "no tokens generated ("
            + ("usage.completion_tokens = 0" if st.usage_tokens == 0 else "no token in the stream")
            + (f", finish_reason {rec.finish_reason}" if rec.finish_reason else "")
            + ")"
        )
    elif rec.chunks == 0:
        rec.error = f"stream ended without any token chunk (usage says {rec.output_tokens})"
    else:
        if rec.output_tokens > 1 and rec.ttft_ms is not None:
            rec.tpot_ms = (rec.e2e_ms - rec.ttft_ms) / (rec.output_tokens - 1)
        rec.ok = True
    return counted


# --- statistics ----------------------------------------------------------------------------------


def dist(values: list[float | None]) -> Distribution:
    """Mean, p50, p90 and p99 (:func:`k25trace.stats.quantile`, rounded to 3 decimals) and n; None values are
    left out, and with none left every statistic is None."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return Distribution(n=0)
    return Distribution(
        mean=round(sum(vals) / len(vals), 3),
        p50=round(quantile(vals, 0.50), 3),
        p90=round(quantile(vals, 0.90), 3),
        p99=round(quantile(vals, 0.99), 3),
        n=len(vals),
    )


def level_stats(result: LoadResult) -> LevelStats:
    """The level's ``stats`` in the manifest: counts, throughput and latency distributions of the successful
    requests, the first distinct errors."""
    recs = result.records
    ok = [r for r in recs if r.ok]
    out_tok = sum(r.output_tokens for r in ok)
    in_tok = sum(r.input_tokens or 0 for r in ok)
    dur = result.duration_s
    return LevelStats(
        requests=len(recs),
        completed=len(ok),
        errors=len(recs) - len(ok),
        output_tokens=out_tok,
        input_tokens=in_tok,
        duration_s=round(dur, 4),
        output_tok_s=round(out_tok / dur, 3) if dur > 0 else None,
        request_throughput=round(len(ok) / dur, 4) if dur > 0 else None,
        max_in_flight=result.max_in_flight,
        aborted=result.aborted,
        ttft_ms=dist([r.ttft_ms for r in ok]),
        tpot_ms=dist([r.tpot_ms for r in ok if r.tpot_ms is not None]),
        itl_ms=dist([x for r in ok for x in r.itl_ms]),
        e2e_ms=dist([r.e2e_ms for r in ok]),
        first_errors=sorted({r.error for r in recs if r.error})[:5],
    )


def summarize(result: LoadResult) -> dict:
    """:func:`level_stats` as the manifest's JSON object."""
    return level_stats(result).to_json()
