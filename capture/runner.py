"""One capture run: preflight, then per concurrency level warm up → start → load → stop once → files.

Safety rules (a second stop crashes some vLLM versions, and someone else's session is not ours to end): a
session this run did not start is never stopped; ``/stop_profile`` is sent exactly once per session we
started, whatever happens (load error, Ctrl-C, SIGTERM); after the stop, whatever it answered, the new trace
files are awaited, validated by streaming and copied into ``CAPTURE_DIR/c<C>/``; the manifest is rewritten
(atomically) after every level.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from k25trace.capture import files as trace_files
from k25trace.capture.client import (
    CaptureError,
    ControlClient,
    ServerInfo,
    StartOutcomeUnknown,
    StopResult,
    check_url,
    supports_start_body,
)
from k25trace.capture.load import LoadConfig, LoadGenerator, LoadResult, summarize
from k25trace.capture.manifest import (
    MANIFEST,
    check_manifest,
    file_entry,
    new_level,
    new_manifest,
    now_iso,
    write_manifest,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130
_WATCH_GRACE_S = 5.0  # most seconds a /metrics sample under way may delay the end of a level's load

_WORDS = ("time year people way day man thing woman life child world school state family student group "
          "country problem hand part place case week company system program question work government "
          "number night point home water room mother area money story fact month lot right study book "
          "eye job word business issue side kind head house service friend father power hour game line "
          "end member law car city community name president team minute idea kid body information back "
          "parent face others level office door health person art war history party result change "
          "morning reason research girl guy moment air teacher force education").split()


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


@dataclass
class RunningWatch:
    """``vllm:num_requests_running`` polled from ``/metrics`` while a level's load runs."""

    max: int | None = None
    samples: int = 0
    unavailable: str | None = None

    async def watch(self, control: ControlClient, interval: float, done: asyncio.Event) -> None:
        """Sample every ``interval`` seconds until ``done`` is set, and at least once whatever the load's length:
        the sample under way when ``done`` is set is finished, not dropped."""
        failures = 0
        while True:
            try:
                v = await control.running_requests()
            except CaptureError as e:
                self.unavailable = f"{e}: no running-requests gauge"
                return
            except httpx.HTTPError as e:
                failures += 1
                if failures >= 3:
                    self.unavailable = f"/metrics failed {failures} times ({type(e).__name__})"
                    return
            else:
                if v is None:
                    self.unavailable = "/metrics has no vllm:num_requests_running"
                    return
                self.samples += 1
                self.max = v if self.max is None else max(self.max, v)
            if done.is_set():
                return
            try:
                await asyncio.wait_for(done.wait(), interval)
                return
            except asyncio.TimeoutError:
                pass


@dataclass
class FileState:
    """A new trace file while it is awaited: how it looked when last checked, and the check."""

    name: str
    seen: trace_files.Seen | None = None
    check: trace_files.TraceCheck | None = None


@dataclass
class Run:
    """One capture run: its options, consoles, interrupts and manifest; :meth:`main` runs it."""

    opts: CaptureOptions
    err: Console
    out: Console
    interrupts: Interrupts = field(default_factory=Interrupts)
    manifest: dict = field(default_factory=dict)
    profiling_active: bool = False  # True between our 200 on start and our single stop call

    # ---------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        self.err.print(msg, highlight=False, soft_wrap=True)

    @property
    def interval(self) -> float:
        if self.opts.progress_interval_s is not None:
            return self.opts.progress_interval_s
        return 1.0 if self.err.is_terminal else 10.0

    def save(self) -> None:
        write_manifest(self.opts.out, self.manifest)

    # ---------------------------------------------------------------- output dir
    def prepare_out(self) -> None:
        out = self.opts.out
        if out.exists() and not out.is_dir():
            raise CaptureError(f"--out {out} exists and is not a directory")
        if out.exists() and any(out.iterdir()):
            if not self.opts.force:
                what = "holds a capture (manifest.json)" if (out / MANIFEST).exists() else "is not empty"
                raise CaptureError(f"--out {out} {what}; choose a new directory, or pass --force to replace "
                                   "the previous capture's manifest and level directories")
            if (out / MANIFEST).exists():
                old = check_manifest(out)
                if old is None:
                    raise CaptureError(f"--force: {out / MANIFEST} is not a k25trace capture manifest (no "
                                       "k25trace_capture key); not replacing it. Choose a new --out.")
                if old.problems:
                    raise CaptureError(
                        f"--force: {out / MANIFEST} is damaged ({old.summary()}), so which directories belong "
                        "to the previous capture is unknown; nothing was removed. Remove the previous capture "
                        "by hand, or choose a new --out.")
                for lv in old.levels:
                    d = out / lv.dir
                    if d.is_dir() and not d.is_symlink() and d.resolve().parent == out.resolve():
                        shutil.rmtree(d)
                (out / MANIFEST).unlink()
        out.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- prompts
    async def make_prompt_fn(self, control: ControlClient, info: ServerInfo, model: str, seed: int):
        o = self.opts
        rng = random.Random(o.seed)
        text = " ".join(rng.choice(_WORDS) for _ in range(max(4 * o.prompt_tokens, 2000)))
        pool: list[int] = []
        if info.tokenize and o.endpoint == "completions":
            try:
                pool = await control.tokenize(model, text)
            except Exception as e:  # noqa: BLE001 - fall back to text prompts
                self.say(f"[yellow]/tokenize failed ({e}); using text prompts (token counts approximate)[/]")
                pool = []
        n = o.prompt_tokens

        if pool:
            def prompt(i: int) -> list[int]:
                r = random.Random(f"{seed}:{i}")
                return r.choices(pool, k=n)
        else:
            def prompt(i: int) -> str:
                r = random.Random(f"{seed}:{i}")
                return " ".join(r.choice(_WORDS) for _ in range(n))
        return prompt

    # ---------------------------------------------------------------- load with progress
    async def drive(self, control_url: str, model: str, concurrency: int, requests: int | None,
                    duration: float | None, prompt, label: str, seed: int) -> LoadResult:
        o = self.opts
        cfg = LoadConfig(url=control_url, model=model, concurrency=concurrency, requests=requests,
                         duration_s=duration, request_rate=o.request_rate, max_tokens=o.max_tokens,
                         ignore_eos=o.ignore_eos, temperature=o.temperature, endpoint=o.endpoint,
                         api_key=o.api_key, seed=seed, request_timeout_s=o.request_timeout_s)
        gen = LoadGenerator(cfg, prompt)
        task = asyncio.create_task(gen.run())

        async def ticker() -> None:
            t0 = time.monotonic()
            last_tok, last_t = 0, t0
            while True:
                await asyncio.sleep(self.interval)
                now = time.monotonic()
                rate = (gen.tokens_streamed - last_tok) / max(now - last_t, 1e-9)
                last_tok, last_t = gen.tokens_streamed, now
                total = f"/{requests}" if requests else ""
                self.say(f"{label}: {gen.done}{total} requests done, {gen.in_flight} in flight, "
                         f"{rate:,.0f} tok/s, {gen.errors} errors, {now - t0:,.0f}s")

        tick = asyncio.create_task(ticker())
        intr = self.interrupts.next()
        try:
            if self.interrupts.count:
                gen.abort()
            else:
                done, _ = await asyncio.wait({task, intr}, return_when=asyncio.FIRST_COMPLETED)
                if intr in done:
                    self.say(f"[yellow]{self.interrupts.signame}: stopping the load[/]")
                    gen.abort()
            return await task
        finally:
            tick.cancel()
            if not task.done():
                gen.abort()
                await asyncio.gather(task, return_exceptions=True)

    # ---------------------------------------------------------------- stop, exactly once
    async def stop_once(self, control: ControlClient) -> StopResult:
        """The one /stop_profile of the session we started, waited for (a second interrupt stops waiting, never
        sends another)."""
        assert self.profiling_active
        self.profiling_active = False  # from here on, never send another stop for this session
        self.say(f"POST /stop_profile (once; read timeout {self.opts.stop_timeout_s:,g}s) ...")
        task = asyncio.create_task(control.stop_profile(self.opts.stop_timeout_s))
        t0 = time.monotonic()
        while True:
            intr = self.interrupts.next()
            tick = asyncio.create_task(asyncio.sleep(max(self.interval, 5.0)))
            done, _ = await asyncio.wait({task, intr, tick}, return_when=asyncio.FIRST_COMPLETED)
            tick.cancel()
            if task in done:
                return task.result()
            if intr in done:
                if self.interrupts.count >= 2:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    self.say("[yellow]gave up waiting for /stop_profile (it was sent; the server finishes it)[/]")
                    return StopResult("interrupted", time.monotonic() - t0, "client stopped waiting")
                self.say("[yellow]/stop_profile was already sent and is not repeated; waiting for it "
                         "(interrupt again to stop waiting)[/]")
            else:
                self.say(f"waiting for /stop_profile: {time.monotonic() - t0:,.0f}s (the server writes the traces)")

    # ---------------------------------------------------------------- files
    async def wait_for_files(self, before: dict, prefix: str | None, stop: StopResult,
                             maybe_none: bool = False) -> tuple[dict, int | None]:
        """Wait until every rank's file is complete. ``maybe_none``: the session may never have started
        (its /start_profile went unanswered), so a 200 stop followed by a quiet directory ends the wait."""
        o = self.opts
        assert o.trace_dir is not None
        states: dict[str, FileState] = {}
        t0 = time.monotonic()
        last_report = 0.0
        last_change = t0
        stop_ok = stop.status == "200"
        intr = self.interrupts.next()
        while True:
            now_snap = trace_files.snapshot(o.trace_dir)
            names = trace_files.new_files(before, now_snap, prefix)
            pending_tmp = [n for n in names if n.endswith(".pt.trace.json.tmp")]
            for n in names:
                if not trace_files.is_trace_name(n):
                    continue
                st = states.setdefault(n, FileState(n))
                seen = now_snap[n]
                if st.seen != seen:
                    last_change = time.monotonic()
                if st.check is None or (not st.check.ok and st.seen != seen):
                    st.seen = seen
                    st.check = await asyncio.to_thread(trace_files.check_trace_file, o.trace_dir / n)
                    # a size change while reading would be caught next round
                    st.seen = trace_files.snapshot_one(o.trace_dir / n) or seen
            world = self.world_size(states)
            workers_ok = {s.check.rank for s in states.values()
                          if s.check and s.check.ok and not s.check.frontend}
            all_ok = all(s.check and s.check.ok for s in states.values()) and not pending_tmp
            settled = time.monotonic() - last_change >= o.settle_s
            if world is not None:
                done = all_ok and set(range(world)) <= workers_ok
            else:
                done = all_ok and bool(workers_ok) and (stop_ok or settled)
            if maybe_none and stop_ok and settled and not states and not pending_tmp:
                return states, world
            if done:
                return states, world
            elapsed = time.monotonic() - t0
            if elapsed >= o.file_timeout_s:
                self.say(f"[red]gave up waiting for trace files after {elapsed:,.0f}s[/]")
                return states, world
            if intr.done():
                self.say("[yellow]interrupted: keeping the trace files that are complete now[/]")
                return states, world
            if elapsed - last_report >= self.interval:
                last_report = elapsed
                parts = []
                for s in sorted(states.values(), key=lambda s: s.name):
                    who = "frontend" if s.check and s.check.frontend else f"rank {s.check.rank if s.check else '?'}"
                    state = "complete" if s.check and s.check.ok else "incomplete"
                    size = s.seen.size if s.seen else 0
                    parts.append(f"{who} {size / 1e6:,.1f} MB {state}")
                parts += [f"{n} (.tmp) {now_snap[n].size / 1e6:,.1f} MB" for n in pending_tmp]
                exp = f"{len(workers_ok)}/{world}" if world is not None else f"{len(workers_ok)}/?"
                self.say(f"waiting for trace files ({exp} ranks, {elapsed:,.0f}s): " + ("; ".join(parts) or "none yet"))
            try:
                await asyncio.wait_for(asyncio.shield(intr), o.poll_s)
            except asyncio.TimeoutError:
                pass

    def world_size(self, states: dict[str, FileState]) -> int | None:
        if self.opts.expect_ranks:
            return self.opts.expect_ranks
        for s in sorted(states.values(), key=lambda s: s.name):
            if s.check and not s.check.frontend and s.check.world_size:
                return s.check.world_size
        return None

    def collect(self, level_dir: Path, states: dict[str, FileState], world: int | None,
                before: dict, prefix: str | None) -> tuple[list[dict], list[int], list[dict], list[str]]:
        o = self.opts
        assert o.trace_dir is not None
        level_dir.mkdir(parents=True, exist_ok=True)
        entries, warnings = [], []
        for s in sorted(states.values(), key=lambda s: s.name):
            src = o.trace_dir / s.name
            c = s.check
            rel = f"{level_dir.name}/{s.name}"
            rank, world_size = (c.rank, c.world_size) if c else (None, None)
            try:
                size, sha = trace_files.copy_with_hash(src, level_dir / s.name)
            except OSError as e:
                entries.append(file_entry(rel, rank=rank, world_size=world_size,
                                          frontend=trace_files.is_frontend_name(s.name), size=0, sha256=None,
                                          valid=False, problem=f"copy failed: {e}"))
                continue
            valid = bool(c and c.ok)
            problem = c.problem if c else "not checked"
            steps = c.steps if c else None
            if valid and c is not None and size != c.size:
                # it changed after it was validated: check the copy itself
                c2 = trace_files.check_trace_file(level_dir / s.name)
                valid, problem, steps = c2.ok, c2.problem, c2.steps
            entries.append(file_entry(
                rel, rank=rank, world_size=world_size,
                frontend=bool(c.frontend) if c else trace_files.is_frontend_name(s.name), size=size, sha256=sha,
                valid=valid, problem=problem, vllm_version=c.metadata.get("vllm_version") if c else None,
                step_markers=steps.steps if steps and valid else None,
                decode_batch_sizes=({str(b): n for b, n in steps.decode_batches.items()}
                                    if steps and steps.source and valid else None)))
        ws = {e["world_size"] for e in entries if e["world_size"] and not e["frontend"]}
        if o.expect_ranks and ws and ws != {o.expect_ranks}:
            warnings.append(f"--expect-ranks {o.expect_ranks} but the traces say world_size {sorted(ws)}")
        ok_ranks = {e["rank"] for e in entries if e["valid"] and not e["frontend"] and e["rank"] is not None}
        if world is not None:
            missing = sorted(set(range(world)) - ok_ranks)
        else:
            missing = [] if ok_ranks or any(e["valid"] and not e["frontend"] for e in entries) else [0]
        # the key-averages tables (not traces) ride along as extras
        extras = []
        for n in trace_files.new_files(before, trace_files.snapshot(o.trace_dir), prefix):
            if n.endswith(".txt"):
                try:
                    size, sha = trace_files.copy_with_hash(o.trace_dir / n, level_dir / n)
                    extras.append({"path": f"{level_dir.name}/{n}", "size": size, "sha256": sha})
                except OSError:
                    pass
        return entries, missing, extras, warnings

    # ---------------------------------------------------------------- one level
    async def run_level(self, control: ControlClient, info: ServerInfo, model: str, conc: int,
                        prompt, level_index: int) -> dict:
        """One level: warm up, start profiling, C concurrent requests, the one stop, the files; returns its
        manifest entry (also appended to the manifest)."""
        o = self.opts
        level = new_level(f"c{conc}", conc, profiled=not o.no_profile)
        self.manifest["levels"].append(level)
        requests = o.requests if o.requests is not None else (None if o.duration_s else conc)
        seed = o.seed + 1000 * level_index
        await self.warm_up(model, conc, prompt, seed, level["name"])
        if self.interrupts.count:
            level["status"] = "interrupted"
            return level
        before = trace_files.snapshot(o.trace_dir) if not o.no_profile else {}
        prefix: str | None = None
        unknown: StartOutcomeUnknown | None = None
        if o.no_profile:
            level["started_at"] = now_iso()
        else:
            prefix, unknown = await self.start_profiling(control, info, level)
        result: LoadResult | None = None
        stop: StopResult | None = None
        try:
            if unknown is None:
                result = await self.load(control, model, level, requests, prompt, seed)
        finally:
            if self.profiling_active:
                stop = await self.stop_once(control)
        level["stopped_at"] = now_iso()
        if result is not None:
            self.record_load(level, result)
        if stop is not None:
            await self.record_files(level, stop, before, prefix, unknown)
        if result is not None and not result.aborted:
            self.check_batch(level, requests)
        level["status"] = "interrupted" if self.interrupts.count else "done"
        if unknown is not None:
            level["status"] = "failed"
            self.save()
            raise CaptureError(self.unknown_start_message(level, unknown, stop))
        return level

    async def warm_up(self, model: str, conc: int, prompt, seed: int, name: str) -> None:
        """``--warmup`` unprofiled requests (prompts of their own), at most ``conc`` at a time; failures are
        reported, not fatal."""
        o = self.opts
        if o.warmup <= 0:
            return
        self.say(f"{name}: warm-up, {o.warmup} requests")
        wres = await self.drive(o.url, model, min(o.warmup, conc), o.warmup, None,
                                lambda i: prompt(10_000_000 + seed + i), f"{name} warm-up", seed)
        werr = sum(1 for r in wres.records if not r.ok)
        if werr:
            first = next(r.error for r in wres.records if not r.ok)
            self.say(f"[yellow]{name}: {werr} warm-up request(s) failed: {first}[/]")

    def start_body(self, info: ServerInfo, level: dict) -> tuple[dict | None, str | None]:
        """(the /start_profile body, the file prefix it asks for): vLLM 0.32+ takes a ``profile_prefix`` (so our
        files are told apart from anyone else's) and the iteration window; older servers an empty POST."""
        o = self.opts
        if not supports_start_body(info.version):
            if o.max_iterations is not None or o.delay_iterations is not None:
                level["warnings"].append("max/delay iterations need vLLM 0.32+ over HTTP; set them in "
                                         "--profiler-config instead (ignored here)")
            return None, None
        safe = re.sub(r"[^A-Za-z0-9._-]", "-", self.manifest.get("name") or "k25")
        prefix = f"k25-{safe}"[:80].rstrip("-._") + f"-{level['name']}-{secrets.token_hex(3)}"
        body: dict = {"profile_prefix": prefix}
        if o.max_iterations is not None:
            body["max_iterations"] = o.max_iterations
        if o.delay_iterations is not None:
            body["delay_iterations"] = o.delay_iterations
        return body, prefix

    async def start_profiling(self, control: ControlClient, info: ServerInfo,
                              level: dict) -> tuple[str | None, StartOutcomeUnknown | None]:
        """POST /start_profile; returns (file prefix, the unknown outcome of an unanswered start or None). Raises
        on a refusal (404/409/other): then nothing was started and nothing is owed. Otherwise one stop is owed."""
        o = self.opts
        name = level["name"]
        body, prefix = self.start_body(info, level)
        level["profile_prefix"] = prefix
        level["started_at"] = now_iso()
        unknown: StartOutcomeUnknown | None = None
        try:
            await control.start_profile(body, str(o.trace_dir), info.version, o.start_timeout_s)
        except StartOutcomeUnknown as e:  # sent, never answered: the server may be profiling
            unknown = e
            level["start_status"] = e.status
            level["start_detail"] = e.detail
            self.say(f"[red]{name}: /start_profile got no answer ({e.status} after {e.seconds:,.1f}s; "
                     f"--start-timeout {o.start_timeout_s:g}s): whether the server is profiling now is "
                     "unknown. Sending the one /stop_profile so that it is not left profiling; no load "
                     "for this level.[/]")
        else:
            level["start_status"] = "200"
            self.say(f"{name}: profiling started" + (f" (prefix {prefix})" if prefix else ""))
        self.profiling_active = True
        return prefix, unknown

    async def load(self, control: ControlClient, model: str, level: dict, requests: int | None, prompt,
                   seed: int) -> LoadResult:
        """The level's load (C concurrent streaming requests), with /metrics polled for the running requests."""
        o = self.opts
        name, conc = level["name"], level["concurrency"]
        self.say(f"{name}: {conc} concurrent streaming requests"
                 + (f", {requests} in all" if requests else "") + (f", {o.duration_s}s" if o.duration_s else ""))
        running = RunningWatch()
        load_done = asyncio.Event()
        watch = asyncio.create_task(running.watch(control, o.metrics_interval_s, load_done))
        try:
            result = await self.drive(o.url, model, conc, requests, o.duration_s, prompt, name, seed)
        finally:
            load_done.set()
            await asyncio.wait({watch}, timeout=_WATCH_GRACE_S)  # let the sample under way finish
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
        level["max_running_requests"] = running.max
        level["running_requests_samples"] = running.samples
        if running.unavailable:
            level["running_requests_note"] = running.unavailable
        return result

    def record_load(self, level: dict, result: LoadResult) -> None:
        """The level's request statistics, and every request in ``<level>/requests.jsonl``."""
        level["stats"] = summarize(result)
        self.check_output(level)
        level_dir = self.opts.out / level["dir"]
        level_dir.mkdir(parents=True, exist_ok=True)
        with open(level_dir / "requests.jsonl", "w") as f:
            for r in result.records:
                f.write(json.dumps(r.to_json()) + "\n")
        level["requests_file"] = f"{level['dir']}/requests.jsonl"

    async def record_files(self, level: dict, stop: StopResult, before: dict, prefix: str | None,
                           unknown: StartOutcomeUnknown | None) -> None:
        """After the stop, whatever it answered: wait for the level's trace files, check and copy them."""
        name = level["name"]
        level["stop_status"] = stop.status
        level["stop_seconds"] = round(stop.seconds, 3)
        level["stop_detail"] = stop.detail
        colour = "green" if stop.status == "200" else "yellow"
        self.say(f"{name}: /stop_profile → [{colour}]{stop.status}[/] after {stop.seconds:,.1f}s")
        self.save()
        states, world = await self.wait_for_files(before, prefix, stop, maybe_none=unknown is not None)
        entries, missing, extras, warns = self.collect(self.opts.out / level["dir"], states, world, before, prefix)
        if unknown is not None and not entries:
            missing = []  # no session may ever have started: nothing is missing (the error says so)
        level["files"], level["missing_ranks"], level["extra_files"] = entries, missing, extras
        level["world_size"] = world
        level["warnings"] += warns
        if missing:
            self.say(f"[red]{name}: missing rank(s) {missing}; kept the {len(entries)} file(s) that arrived[/]")
        bad = [e["path"] for e in entries if not e["valid"]]
        if bad:
            self.say(f"[red]{name}: incomplete file(s): {', '.join(bad)}[/]")

    def unknown_start_message(self, level: dict, e: StartOutcomeUnknown, stop: StopResult | None) -> str:
        name = level["name"]
        kept = sum(1 for f in level["files"] if f["valid"])
        head = (f"{name}: /start_profile got no answer ({e.status} after {e.seconds:,.1f}s), so its outcome is "
                f"unknown; one /stop_profile was sent")
        if stop is not None and stop.status == "200":
            files = (f"{kept} trace file(s) of the window were salvaged into {name}/ (no load ran in it)" if kept
                     else "no trace file appeared, so the start had not taken effect")
            return (f"{head} and answered 200: the server is not profiling; {files}. If the server is just slow "
                    f"to start its profiler, raise --start-timeout (now {self.opts.start_timeout_s:g}s).")
        got = f"answered {stop.status}" if stop is not None else "could not be sent"
        return (f"{head} and {got}.\n"
                f"WARNING: the server at {self.opts.url} MAY STILL BE PROFILING (its traces grow, its engine "
                "slows down). Check it; once it answers again, send one POST /stop_profile by hand "
                f"(curl -X POST {self.opts.url}/stop_profile) and look for trace files in {self.opts.trace_dir}.")

    def check_batch(self, level: dict, requests: int | None) -> None:
        """Record the decode batch the engine reached (traces' step markers, /metrics), warn when it fell
        short of the level's concurrency: such a level measures a smaller batch than its name says."""
        conc = level["concurrency"]
        workers = [f for f in level["files"]
                   if f["valid"] and not f["frontend"] and f.get("decode_batch_sizes") is not None]
        level["decode_batch_sizes_seen"] = None
        level["decode_batch_sizes_rank"] = None
        level["max_decode_batch_seen"] = None
        if workers:
            first = min(workers, key=lambda f: (f["rank"] if f["rank"] is not None else 1 << 30, f["path"]))
            level["decode_batch_sizes_seen"] = first["decode_batch_sizes"]
            level["decode_batch_sizes_rank"] = first["rank"]
            # data-parallel engines batch apart: add up each DP group's largest batch (TP ranks share theirs)
            groups: dict[int, int] = {}
            for f in workers:
                dp = trace_files.dp_from_name(f["path"].rsplit("/", 1)[-1]) or 0
                top = max(map(int, f["decode_batch_sizes"]), default=0)
                groups[dp] = max(groups.get(dp, 0), top)
            level["max_decode_batch_seen"] = sum(groups.values())
        by_markers = level["max_decode_batch_seen"]
        by_metrics = level.get("max_running_requests")
        seen = by_markers if by_markers is not None else by_metrics
        level["reached_concurrency"] = None if seen is None else seen >= conc
        if level["profiled"] and level["files"] and not workers:
            level["warnings"].append("no engine-step markers in the worker traces: the decode batch reached is "
                                     "known only from /metrics" + ("" if by_metrics is not None else " (unavailable)"))
        if seen is None or seen >= conc:
            return
        hist = level["decode_batch_sizes_seen"]
        parts = []
        if by_markers is not None:
            shown = ", ".join(f"{n} at batch {b}" for b, n in sorted(((int(b), n) for b, n in (hist or {}).items())))
            parts.append(f"decode steps in rank {level['decode_batch_sizes_rank']}'s trace: {shown or 'none'}")
        if by_metrics is not None:
            parts.append(f"at most {by_metrics} request(s) running on /metrics "
                         f"({level['running_requests_samples']} samples)")
        o = self.opts
        more = f"more requests per level (--requests, now {requests})" if requests else "a longer --duration"
        msg = (f"{level['name']}: the engine never ran a decode batch of {conc} ({'; '.join(parts)}): this level "
               f"measures batch {seen}, not {conc}. Make the requests overlap: longer outputs (--max-tokens, now "
               f"{o.max_tokens}, with --ignore-eos), {more}; and check the server's --max-num-seqs.")
        level["warnings"].append(msg)
        self.say(f"[yellow]{msg}[/]")

    def check_output(self, level: dict) -> None:
        """Say so when the level's requests produced nothing: such a level is not complete."""
        st = level["stats"]
        if not st["requests"] or st["completed"] or st["aborted"]:
            return
        zero = sum(1 for e in st["first_errors"] if e.startswith("no tokens generated"))
        why = "; ".join(st["first_errors"]) or "no request completed"
        if zero:
            msg = (f"{level['name']}: none of the {st['requests']} request(s) produced a token ({why}): "
                   "the level is not complete")
        else:
            msg = (f"{level['name']}: none of the {st['requests']} request(s) succeeded ({why}): "
                   "the level is not complete")
        level["warnings"].append(msg)
        self.say(f"[red]{msg}[/]")

    def level_ok(self, level: dict) -> bool:
        """Done, with tokens, and (profiled) every rank's file there and valid."""
        st = level.get("stats") or {}
        if level["status"] != "done" or not st.get("completed") or not st.get("output_tokens"):
            return False
        if level["profiled"]:
            return not level["missing_ranks"] and all(f["valid"] for f in level["files"]) and bool(level["files"])
        return True

    # ---------------------------------------------------------------- whole run
    async def main(self) -> int:
        o = self.opts
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.interrupts.fire, sig.name)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        control: ControlClient | None = None
        try:
            o.url = check_url(o.url)
            control = ControlClient(o.url, o.api_key)
            return await self._main(control)
        except CaptureError as e:
            self.say(f"[red]error:[/] {e}")
            if self.manifest:
                self.manifest["status"] = "failed"
                self.manifest["error"] = str(e)
                self.manifest["finished_at"] = now_iso()
                lv = self.manifest["levels"][-1] if self.manifest["levels"] else None
                if lv is not None and lv["status"] == "running":
                    lv["status"] = "failed"
                self.save()
            return EXIT_ERROR
        finally:
            if control is not None:
                await control.aclose()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass

    async def _main(self, control: ControlClient) -> int:
        o = self.opts
        if not o.no_profile:
            if o.trace_dir is None:
                raise CaptureError("--trace-dir is required (the server's torch_profiler_dir), or use --no-profile")
            if not o.trace_dir.is_dir():
                raise CaptureError(f"--trace-dir {o.trace_dir} is not a directory on this host; it must be the "
                                   "server's torch_profiler_dir")
        self.say(f"preflight {o.url} ...")
        info = await control.preflight(str(o.trace_dir.resolve()) if o.trace_dir else None, not o.no_profile)
        model = o.model or info.models[0]
        if model not in info.models:
            raise CaptureError(f"--model {model} is not served; /v1/models lists {', '.join(info.models)}")
        if info.max_model_len and o.prompt_tokens + o.max_tokens > info.max_model_len:
            raise CaptureError(f"--prompt-tokens {o.prompt_tokens} + --max-tokens {o.max_tokens} exceed the "
                               f"server's max_model_len {info.max_model_len}")
        self.say(f"vLLM {info.version or '?'}, model {model}"
                 + ("" if o.no_profile else f", profiler routes present, traces in {o.trace_dir}"))
        self.prepare_out()
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(o).items()
                    if k not in ("api_key", "force", "progress_interval_s", "poll_s", "settle_s")}
        name = o.name or f"{model.rstrip('/').split('/')[-1]}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.manifest = new_manifest(name, o.url, info.version, model, info.server_args, settings,
                                     max_model_len=info.max_model_len)
        self.save()
        prompt = await self.make_prompt_fn(control, info, model, o.seed)

        rc = EXIT_OK
        for i, conc in enumerate(o.concurrency):
            if self.interrupts.count:
                break
            level = await self.run_level(control, info, model, conc, prompt, i)
            self.save()
            if not self.level_ok(level):
                rc = EXIT_INCOMPLETE
        interrupted = self.interrupts.count > 0
        done_all = len(self.manifest["levels"]) == len(o.concurrency)
        self.manifest["finished_at"] = now_iso()
        self.manifest["complete"] = (not interrupted and done_all and rc == EXIT_OK
                                     and all(self.level_ok(lv) for lv in self.manifest["levels"]))
        self.manifest["status"] = ("interrupted" if interrupted
                                   else ("complete" if self.manifest["complete"] else "incomplete"))
        self.save()
        self.print_summary()
        if interrupted:
            return EXIT_INTERRUPTED
        return EXIT_OK if self.manifest["complete"] else EXIT_INCOMPLETE

    @staticmethod
    def batch_cell(lv: dict) -> str:
        b = lv.get("max_decode_batch_seen")
        if b is None:
            b = lv.get("max_running_requests")
        if b is None:
            return "-"
        return f"{b}!" if b < lv["concurrency"] else str(b)

    def print_summary(self) -> None:
        m = self.manifest
        t = Table(title=f"capture {m['name']} ({m['status']})")
        for col in ("level", "reqs", "err", "conc", "batch", "tok/s", "ttft p50", "tpot p50",
                    "itl p99", "stop", "stop s", "files", "missing"):
            t.add_column(col, justify="right" if col not in ("level", "stop") else "left")

        def f(x, fmt="{:,.1f}"):
            return "-" if x is None else fmt.format(x)

        for lv in m["levels"]:
            st = lv.get("stats") or {}
            nfiles = sum(1 for x in lv["files"] if x["valid"])
            t.add_row(lv["name"], f(st.get("requests"), "{}"), f(st.get("errors"), "{}"),
                      f(st.get("max_in_flight"), "{}"), self.batch_cell(lv), f(st.get("output_tok_s")),
                      f((st.get("ttft_ms") or {}).get("p50")), f((st.get("tpot_ms") or {}).get("p50"), "{:,.2f}"),
                      f((st.get("itl_ms") or {}).get("p99")), lv.get("stop_status") or "-",
                      f(lv.get("stop_seconds")), f"{nfiles}/{len(lv['files'])}" if lv["profiled"] else "-",
                      ",".join(map(str, lv["missing_ranks"])) or "-")
        self.out.print(t)
        self.out.print("latencies in ms; conc = most requests in flight; batch = largest decode batch the engine "
                       "ran (step markers, else /metrics running; ! = below the level's concurrency); "
                       "files = valid/copied", highlight=False)
        outp = str(self.opts.out)
        if any(lv["profiled"] and lv["files"] for lv in m["levels"]):
            self.out.print(f"next: k25trace load {outp} --db {outp.rstrip('/')}.duckdb", highlight=False,
                           soft_wrap=True)
        else:
            self.out.print(f"manifest: {os.path.join(outp, MANIFEST)}", highlight=False, soft_wrap=True)


def run_capture(opts: CaptureOptions, err: Console | None = None, out: Console | None = None) -> int:
    """Run a capture to the end; returns the process exit code."""
    if out is None:
        out = Console()
        if not out.is_terminal:
            out = Console(width=120)
    run = Run(opts, err or Console(stderr=True), out)
    return asyncio.run(run.main())
