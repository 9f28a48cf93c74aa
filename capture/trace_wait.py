"""After a level's one stop: await its new trace files, check them by streaming, copy them into the capture."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from k25trace.capture import files as trace_files
from k25trace.capture.client import StopResult
from k25trace.capture.manifest import ExtraFile, ManifestFile
from k25trace.capture.options import CaptureOptions, Interrupts


@dataclass
class FileState:
    """A new trace file while it is awaited: how it looked when last checked, and the check."""

    name: str
    seen: trace_files.Seen | None = None
    check: trace_files.TraceCheck | None = None


@dataclass
class TraceFiles:
    """The trace directory as one level's files are awaited and copied (``say``: the run's progress lines)."""

    opts: CaptureOptions
    say: Callable[[str], None]
    interrupts: Interrupts
    interval: float  # seconds between progress lines

    async def wait_for_files(
        self, before: dict, prefix: str | None, stop: StopResult, maybe_none: bool = False
    ) -> tuple[dict, int | None]:
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
            workers_ok = {s.check.rank for s in states.values() if s.check and s.check.ok and not s.check.frontend}
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
        """The ranks expected: ``--expect-ranks``, else the world size the first worker trace states."""
        if self.opts.expect_ranks:
            return self.opts.expect_ranks
        for s in sorted(states.values(), key=lambda s: s.name):
            if s.check and not s.check.frontend and s.check.world_size:
                return s.check.world_size
        return None

    def collect(
        self, level_dir: Path, states: dict[str, FileState], world: int | None, before: dict, prefix: str | None
    ) -> tuple[list[ManifestFile], list[int], list[ExtraFile], list[str]]:
        """Copy the level's files into ``level_dir``; returns (their entries, the ranks missing, the extra files
        copied along, warnings)."""
        o = self.opts
        assert o.trace_dir is not None
        level_dir.mkdir(parents=True, exist_ok=True)
        entries: list[ManifestFile] = []
        warnings: list[str] = []
        for s in sorted(states.values(), key=lambda s: s.name):
            src = o.trace_dir / s.name
            c = s.check
            rel = f"{level_dir.name}/{s.name}"
            rank, world_size = (c.rank, c.world_size) if c else (None, None)
            try:
                size, sha = trace_files.copy_with_hash(src, level_dir / s.name)
            except OSError as e:
                entries.append(
                    ManifestFile(
                        rel,
                        rank=rank,
                        world_size=world_size,
                        frontend=trace_files.is_frontend_name(s.name),
                        size=0,
                        sha256=None,
                        valid=False,
                        problem=f"copy failed: {e}",
                    )
                )
                continue
            valid = bool(c and c.ok)
            problem = c.problem if c else "not checked"
            steps = c.steps if c else None
            if valid and c is not None and size != c.size:
                # it changed after it was validated: check the copy itself
                c2 = trace_files.check_trace_file(level_dir / s.name)
                valid, problem, steps = c2.ok, c2.problem, c2.steps
            entries.append(
                ManifestFile(
                    rel,
                    rank=rank,
                    world_size=world_size,
                    frontend=bool(c.frontend) if c else trace_files.is_frontend_name(s.name),
                    size=size,
                    sha256=sha,
                    valid=valid,
                    problem=problem,
                    vllm_version=c.metadata.get("vllm_version") if c else None,
                    step_markers=steps.steps if steps and valid else None,
                    decode_batch_sizes=dict(steps.decode_batches) if steps and steps.source and valid else None,
                )
            )
        ws = {e.world_size for e in entries if e.world_size and not e.frontend}
        if o.expect_ranks and ws and ws != {o.expect_ranks}:
            warnings.append(f"--expect-ranks {o.expect_ranks} but the traces say world_size {sorted(ws)}")
        ok_ranks = {e.rank for e in entries if e.valid and not e.frontend and e.rank is not None}
        if world is not None:
            missing = sorted(set(range(world)) - ok_ranks)
        else:
            missing = [] if ok_ranks or any(e.valid and not e.frontend for e in entries) else [0]
        # the key-averages tables (not traces) ride along as extras
        extras: list[ExtraFile] = []
        for n in trace_files.new_files(before, trace_files.snapshot(o.trace_dir), prefix):
            if n.endswith(".txt"):
                try:
                    size, sha = trace_files.copy_with_hash(o.trace_dir / n, level_dir / n)
                    extras.append(ExtraFile(f"{level_dir.name}/{n}", size, sha))
                except OSError:
                    pass
        return entries, missing, extras, warnings
