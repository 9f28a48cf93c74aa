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
import random
import re
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
from rich.console import Console

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
from k25trace.capture.level_checks import check_batch, check_output, level_ok, print_summary, unknown_start_message
from k25trace.capture.load import LoadConfig, LoadGenerator, LoadResult, level_stats
from k25trace.capture.manifest import (
    MANIFEST,
    Manifest,
    ManifestLevel,
    check_manifest,
    new_manifest,
    now_iso,
    write_manifest,
)
from k25trace.capture.options import (
    EXIT_ERROR,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CaptureOptions,
    Interrupts,
)
from k25trace.capture.trace_wait import TraceFiles

# importable from here, as before the options and checks had modules of their own
__all__ = ["EXIT_ERROR", "EXIT_INCOMPLETE", "EXIT_INTERRUPTED", "EXIT_OK", "CaptureOptions", "Run", "run_capture"]
PromptFn = Callable[[int], list[int] | str]  # request index -> its prompt (token ids, or text)

_WATCH_GRACE_S = 5.0  # most seconds a /metrics sample under way may delay the end of a level's load

_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education"
).split()


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
class Run:
    """One capture run: its options, consoles, interrupts and manifest; :meth:`main` runs it."""

    opts: CaptureOptions
    err: Console
    out: Console
    interrupts: Interrupts = field(default_factory=Interrupts)
    manifest: Manifest = field(default_factory=Manifest)
    manifest_started: bool = False  # True once the preflight passed and the manifest was first written
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
        write_manifest(self.opts.out, self.manifest.to_json())

    # ---------------------------------------------------------------- output dir
    def prepare_out(self) -> None:
        out = self.opts.out
        if out.exists() and not out.is_dir():
            raise CaptureError(f"--out {out} exists and is not a directory")
        if out.exists() and any(out.iterdir()):
            if not self.opts.force:
                what = "holds a capture (manifest.json)" if (out / MANIFEST).exists() else "is not empty"
                raise CaptureError(
                    f"--out {out} {what}; choose a new directory, or pass --force to replace "
                    "the previous capture's manifest and level directories"
                )
            if (out / MANIFEST).exists():
                old = check_manifest(out)
                if old is None:
                    raise CaptureError(
                        f"--force: {out / MANIFEST} is not a k25trace capture manifest (no "
                        "k25trace_capture key); not replacing it. Choose a new --out."
                    )
                if old.problems:
                    raise CaptureError(
                        f"--force: {out / MANIFEST} is damaged ({old.summary()}), so which directories belong "
                        "to the previous capture is unknown; nothing was removed. Remove the previous capture "
                        "by hand, or choose a new --out."
                    )
                for lv in old.levels:
                    d = out / lv.dir
                    if d.is_dir() and not d.is_symlink() and d.resolve().parent == out.resolve():
                        shutil.rmtree(d)
                (out / MANIFEST).unlink()
        out.mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- prompts
    async def make_prompt_fn(self, control: ControlClient, info: ServerInfo, model: str, seed: int) -> PromptFn:
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

        def token_prompt(i: int) -> list[int] | str:
            r = random.Random(f"{seed}:{i}")
            return r.choices(pool, k=n)

        def text_prompt(i: int) -> list[int] | str:
            r = random.Random(f"{seed}:{i}")
            return " ".join(r.choice(_WORDS) for _ in range(n))

        return token_prompt if pool else text_prompt

    # ---------------------------------------------------------------- load with progress
    async def drive(
        self,
        control_url: str,
        model: str,
        concurrency: int,
        requests: int | None,
        duration: float | None,
        prompt: PromptFn,
        label: str,
        seed: int,
    ) -> LoadResult:
        o = self.opts
        cfg = LoadConfig(
            url=control_url,
            model=model,
            concurrency=concurrency,
            requests=requests,
            duration_s=duration,
            request_rate=o.request_rate,
            max_tokens=o.max_tokens,
            ignore_eos=o.ignore_eos,
            temperature=o.temperature,
            endpoint=o.endpoint,
            api_key=o.api_key,
            seed=seed,
            request_timeout_s=o.request_timeout_s,
        )
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
                self.say(
                    f"{label}: {gen.done}{total} requests done, {gen.in_flight} in flight, "
                    f"{rate:,.0f} tok/s, {gen.errors} errors, {now - t0:,.0f}s"
                )

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
                self.say(
                    "[yellow]/stop_profile was already sent and is not repeated; waiting for it "
                    "(interrupt again to stop waiting)[/]"
                )
            else:
                self.say(f"waiting for /stop_profile: {time.monotonic() - t0:,.0f}s (the server writes the traces)")

    # ---------------------------------------------------------------- one level
    async def run_level(
        self, control: ControlClient, info: ServerInfo, model: str, conc: int, prompt: PromptFn, level_index: int
    ) -> ManifestLevel:
        """One level: warm up, start profiling, C concurrent requests, the one stop, the files; returns its
        manifest entry (also appended to the manifest)."""
        o = self.opts
        level = ManifestLevel(f"c{conc}", conc, profiled=not o.no_profile)
        self.manifest.levels.append(level)
        requests = o.requests if o.requests is not None else (None if o.duration_s else conc)
        seed = o.seed + 1000 * level_index
        await self.warm_up(model, conc, prompt, seed, level.name)
        if self.interrupts.count:
            level.status = "interrupted"
            return level
        before = trace_files.snapshot(o.trace_dir) if o.trace_dir is not None and not o.no_profile else {}
        prefix: str | None = None
        unknown: StartOutcomeUnknown | None = None
        if o.no_profile:
            level.started_at = now_iso()
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
        level.stopped_at = now_iso()
        if result is not None:
            self.record_load(level, result)
        if stop is not None:
            await self.record_files(level, stop, before, prefix, unknown)
        if result is not None and not result.aborted:
            check_batch(o, level, requests, self.say)
        level.status = "interrupted" if self.interrupts.count else "done"
        if unknown is not None:
            level.status = "failed"
            self.save()
            raise CaptureError(unknown_start_message(o, level, unknown, stop))
        return level

    async def warm_up(self, model: str, conc: int, prompt: PromptFn, seed: int, name: str) -> None:
        """``--warmup`` unprofiled requests (prompts of their own), at most ``conc`` at a time; failures are
        reported, not fatal."""
        o = self.opts
        if o.warmup <= 0:
            return
        self.say(f"{name}: warm-up, {o.warmup} requests")
        wres = await self.drive(
            o.url,
            model,
            min(o.warmup, conc),
            o.warmup,
            None,
            lambda i: prompt(10_000_000 + seed + i),
            f"{name} warm-up",
            seed,
        )
        werr = sum(1 for r in wres.records if not r.ok)
        if werr:
            first = next(r.error for r in wres.records if not r.ok)
            self.say(f"[yellow]{name}: {werr} warm-up request(s) failed: {first}[/]")

    def start_body(self, info: ServerInfo, level: ManifestLevel) -> tuple[dict | None, str | None]:
        """(the /start_profile body, the file prefix it asks for): vLLM 0.32+ takes a ``profile_prefix`` (so our
        files are told apart from anyone else's) and the iteration window; older servers an empty POST."""
        o = self.opts
        if not supports_start_body(info.version):
            if o.max_iterations is not None or o.delay_iterations is not None:
                level.warnings.append(
                    "max/delay iterations need vLLM 0.32+ over HTTP; set them in "
                    "--profiler-config instead (ignored here)"
                )
            return None, None
        safe = re.sub(r"[^A-Za-z0-9._-]", "-", self.manifest.name or "k25")
        prefix = f"k25-{safe}"[:80].rstrip("-._") + f"-{level.name}-{secrets.token_hex(3)}"
        body: dict = {"profile_prefix": prefix}
        if o.max_iterations is not None:
            body["max_iterations"] = o.max_iterations
        if o.delay_iterations is not None:
            body["delay_iterations"] = o.delay_iterations
        return body, prefix

    async def start_profiling(
        self, control: ControlClient, info: ServerInfo, level: ManifestLevel
    ) -> tuple[str | None, StartOutcomeUnknown | None]:
        """POST /start_profile; returns (file prefix, the unknown outcome of an unanswered start or None). Raises
        on a refusal (404/409/other): then nothing was started and nothing is owed. Otherwise one stop is owed."""
        o = self.opts
        name = level.name
        body, prefix = self.start_body(info, level)
        level.profile_prefix = prefix
        level.started_at = now_iso()
        unknown: StartOutcomeUnknown | None = None
        try:
            await control.start_profile(body, str(o.trace_dir), info.version, o.start_timeout_s)
        except StartOutcomeUnknown as e:  # sent, never answered: the server may be profiling
            unknown = e
            level.start_status = e.status
            level.start_detail = e.detail
            self.say(
                f"[red]{name}: /start_profile got no answer ({e.status} after {e.seconds:,.1f}s; "
                f"--start-timeout {o.start_timeout_s:g}s): whether the server is profiling now is "
                "unknown. Sending the one /stop_profile so that it is not left profiling; no load "
                "for this level.[/]"
            )
        else:
            level.start_status = "200"
            self.say(f"{name}: profiling started" + (f" (prefix {prefix})" if prefix else ""))
        self.profiling_active = True
        return prefix, unknown

    async def load(
        self,
        control: ControlClient,
        model: str,
        level: ManifestLevel,
        requests: int | None,
        prompt: PromptFn,
        seed: int,
    ) -> LoadResult:
        """The level's load (C concurrent streaming requests), with /metrics polled for the running requests."""
        o = self.opts
        name, conc = level.name, level.concurrency or 0
        self.say(
            f"{name}: {conc} concurrent streaming requests"
            + (f", {requests} in all" if requests else "")
            + (f", {o.duration_s}s" if o.duration_s else "")
        )
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
        level.max_running_requests = running.max
        level.running_requests_samples = running.samples
        if running.unavailable:
            level.running_requests_note = running.unavailable
        return result

    def record_load(self, level: ManifestLevel, result: LoadResult) -> None:
        """The level's request statistics, and every request in ``<level>/requests.jsonl``."""
        level.stats = level_stats(result)
        check_output(level, self.say)
        level_dir = self.opts.out / level.dir
        level_dir.mkdir(parents=True, exist_ok=True)
        with open(level_dir / "requests.jsonl", "w") as f:
            for r in result.records:
                f.write(json.dumps(r.to_json()) + "\n")
        level.requests_file = f"{level.dir}/requests.jsonl"

    async def record_files(
        self,
        level: ManifestLevel,
        stop: StopResult,
        before: dict,
        prefix: str | None,
        unknown: StartOutcomeUnknown | None,
    ) -> None:
        """After the stop, whatever it answered: wait for the level's trace files, check and copy them."""
        name = level.name
        level.stop_status = stop.status
        level.stop_seconds = round(stop.seconds, 3)
        level.stop_detail = stop.detail
        colour = "green" if stop.status == "200" else "yellow"
        self.say(f"{name}: /stop_profile → [{colour}]{stop.status}[/] after {stop.seconds:,.1f}s")
        self.save()
        traces = TraceFiles(self.opts, self.say, self.interrupts, self.interval)
        states, world = await traces.wait_for_files(before, prefix, stop, maybe_none=unknown is not None)
        entries, missing, extras, warns = traces.collect(self.opts.out / level.dir, states, world, before, prefix)
        if unknown is not None and not entries:
            missing = []  # no session may ever have started: nothing is missing (the error says so)
        level.files, level.missing_ranks, level.extra_files = entries, missing, extras
        level.world_size = world
        level.warnings += warns
        if missing:
            self.say(f"[red]{name}: missing rank(s) {missing}; kept the {len(entries)} file(s) that arrived[/]")
        bad = [e.path for e in entries if not e.valid]
        if bad:
            self.say(f"[red]{name}: incomplete file(s): {', '.join(bad)}[/]")

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
            if self.manifest_started:
                self.manifest.status = "failed"
                self.manifest.error = str(e)
                self.manifest.finished_at = now_iso()
                lv = self.manifest.levels[-1] if self.manifest.levels else None
                if lv is not None and lv.status == "running":
                    lv.status = "failed"
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
                raise CaptureError(
                    f"--trace-dir {o.trace_dir} is not a directory on this host; it must be the "
                    "server's torch_profiler_dir"
                )
        self.say(f"preflight {o.url} ...")
        info = await control.preflight(str(o.trace_dir.resolve()) if o.trace_dir else None, not o.no_profile)
        model = o.model or info.models[0]
        if model not in info.models:
            raise CaptureError(f"--model {model} is not served; /v1/models lists {', '.join(info.models)}")
        if info.max_model_len and o.prompt_tokens + o.max_tokens > info.max_model_len:
            raise CaptureError(
                f"--prompt-tokens {o.prompt_tokens} + --max-tokens {o.max_tokens} exceed the "
                f"server's max_model_len {info.max_model_len}"
            )
        self.say(
            f"vLLM {info.version or '?'}, model {model}"
            + ("" if o.no_profile else f", profiler routes present, traces in {o.trace_dir}")
        )
        self.prepare_out()
        settings = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(o).items()
            if k not in ("api_key", "force", "progress_interval_s", "poll_s", "settle_s")
        }
        name = o.name or f"{model.rstrip('/').split('/')[-1]}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.manifest = new_manifest(
            name, o.url, info.version, model, info.server_args, settings, max_model_len=info.max_model_len
        )
        self.manifest_started = True
        self.save()
        prompt = await self.make_prompt_fn(control, info, model, o.seed)

        rc = EXIT_OK
        for i, conc in enumerate(o.concurrency):
            if self.interrupts.count:
                break
            level = await self.run_level(control, info, model, conc, prompt, i)
            self.save()
            if not level_ok(level):
                rc = EXIT_INCOMPLETE
        interrupted = self.interrupts.count > 0
        done_all = len(self.manifest.levels) == len(o.concurrency)
        self.manifest.finished_at = now_iso()
        self.manifest.complete = (
            not interrupted and done_all and rc == EXIT_OK and all(level_ok(lv) for lv in self.manifest.levels)
        )
        self.manifest.status = (
            "interrupted" if interrupted else ("complete" if self.manifest.complete else "incomplete")
        )
        self.save()
        print_summary(self.manifest, o.out, self.out)
        if interrupted:
            return EXIT_INTERRUPTED
        return EXIT_OK if self.manifest.complete else EXIT_INCOMPLETE


def run_capture(opts: CaptureOptions, err: Console | None = None, out: Console | None = None) -> int:
    """Run a capture to the end; returns the process exit code."""
    if out is None:
        out = Console()
        if not out.is_terminal:
            out = Console(width=120)
    run = Run(opts, err or Console(stderr=True), out)
    return asyncio.run(run.main())
