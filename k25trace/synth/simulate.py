"""Simulation: the true timeline (ns, one global clock) of every step on every rank.

Per step: each rank's CPU walks the step's launches (annotation start, launch times, annotation end); each
GPU runs the ops on its streams as soon as they are launched and their stream and dependencies are free;
a collective starts on a rank when that rank reaches it and ends on every rank at the latest arrival plus
the transfer. Injected delays stretch a rank's op before the collective, so it arrives late.

All randomness comes from seeded ``random.Random`` streams (one per run, one per rank), drawn in a fixed
order: the same :class:`~k25trace.synth.config.Config` gives the same timeline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from k25trace.synth.config import Config, Delay
from k25trace.synth.program import Op, Program, build_program, step_plan


@dataclass
class StepSim:
    index: int
    prog: Program
    ann_start: list[int]  # per rank, true ns
    ann_end: list[int]
    launch_ts: list[list[int]]  # [rank][launch]
    start: list[list[int]]  # [rank][op]
    dur: list[list[int]]
    cpu_end: list[int]  # per rank, true ns (after the last launch of the step)


@dataclass
class _CpuTimeline:
    ann_start: list[int]
    ann_end: list[int]
    launch_ts: list[list[int]]
    cpu_end: list[int]


class _Simulator:
    """The state carried from step to step: random streams, per-GPU speed, when each stream is free."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.ranks = cfg.ranks
        self.rng = random.Random(f"synth-{cfg.seed}")
        self.rank_rngs = [random.Random(f"synth-{cfg.seed}-rank{r}") for r in range(self.ranks)]
        self.speed = [1.0 + self.rng.uniform(-0.01, 0.01) for _ in range(self.ranks)]  # persistent per GPU
        if cfg.noise_seed is not None:  # the same GPUs (speeds), another run: only the jitter and timing draws differ
            self.rng = random.Random(f"synth-{cfg.seed}-noise{cfg.noise_seed}")
            self.rank_rngs = [
                random.Random(f"synth-{cfg.seed}-noise{cfg.noise_seed}-rank{r}") for r in range(self.ranks)
            ]
        self.delays: tuple[Delay, ...] = tuple(cfg.delays)
        self.stream_free = [[0, 0, 0] for _ in range(self.ranks)]  # [rank][stream slot] -> true ns
        self._programs: dict[tuple[str, int, int], Program] = {}

    def program(self, phase: str, requests: int, tokens: int) -> Program:
        key = (phase, requests, tokens)
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = build_program(self.cfg, phase, requests, tokens)
        return prog

    def cpu_timeline(self, prog: Program, t_sched: int) -> _CpuTimeline:
        """Every rank's annotation and launch times for a step scheduled at ``t_sched``."""
        n = self.ranks
        timeline = _CpuTimeline([0] * n, [0] * n, [[0] * len(prog.launches) for _ in range(n)], [0] * n)
        for r in range(n):
            rank_rng = self.rank_rngs[r]
            t = t_sched + int(rank_rng.uniform(5_000, 60_000))
            timeline.ann_start[r] = t
            t += int(prog.pre_ns * rank_rng.uniform(0.9, 1.15))
            ann_closed = False
            for li, launch in enumerate(prog.launches):
                if launch.after_annotation and not ann_closed:
                    t += int(prog.ann_tail_ns * rank_rng.uniform(0.9, 1.2))
                    timeline.ann_end[r] = t
                    ann_closed = True
                t += int(launch.gap_before_ns * rank_rng.uniform(0.85, 1.3))
                timeline.launch_ts[r][li] = t
                t += int(launch.cpu_ns * rank_rng.uniform(0.9, 1.25))
            if not ann_closed:
                t += int(prog.ann_tail_ns * rank_rng.uniform(0.9, 1.2))
                timeline.ann_end[r] = t
            timeline.cpu_end[r] = t + int(rank_rng.uniform(20_000, 40_000))
        return timeline

    def gpu_timeline(
        self, step_index: int, prog: Program, launch_ts: list[list[int]]
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Every op's (start, duration) per rank: ``([rank][op], [rank][op])``, true ns."""
        n_ops = len(prog.ops)
        start = [[0] * n_ops for _ in range(self.ranks)]
        dur = [[0] * n_ops for _ in range(self.ranks)]
        k = 0  # ordinal of the next collective in the step
        for j, op in enumerate(prog.ops):
            arrivals = self._run_or_arrive(prog, j, op, launch_ts, start, dur)
            if op.coll is not None:
                self._collective(step_index, k, prog, j, op, arrivals, start, dur)
                k += 1
        return start, dur

    def _run_or_arrive(
        self, prog: Program, j: int, op: Op, launch_ts: list[list[int]], start: list[list[int]], dur: list[list[int]]
    ) -> list[int]:
        """When op ``j`` can start on each rank; a non-collective op is also run (start, duration recorded)."""
        graph = prog.launches[op.launch].name == "cudaGraphLaunch"
        arrivals = [0] * self.ranks
        for r in range(self.ranks):
            rank_rng = self.rank_rngs[r]
            free = self.stream_free[r]
            ready = launch_ts[r][op.launch] + (4_000 if graph else 2_500)
            s = max(ready, free[op.stream] + int(rank_rng.uniform(600, 1_500)))
            for d in op.deps:
                s = max(s, start[r][d] + dur[r][d] + 900)
            arrivals[r] = s
            if op.coll is None:
                drawn_ns = int(op.dur_ns * self.speed[r] * (1.0 + rank_rng.gauss(0.0, self.cfg.jitter)))
                dur[r][j] = max(600, drawn_ns)
                start[r][j] = s
                free[op.stream] = s + dur[r][j]
        return arrivals

    def _collective(
        self,
        step_index: int,
        k: int,
        prog: Program,
        j: int,
        op: Op,
        arrivals: list[int],
        start: list[list[int]],
        dur: list[list[int]],
    ) -> None:
        """The k-th collective of the step: injected delays, then a common end at the last arrival + transfer."""
        for r in range(self.ranks):
            for delay in self.delays:
                if delay.rank == r and delay.applies(step_index, k):
                    prev = _previous_on_stream(prog, j)
                    if prev is not None:
                        dur[r][prev] += delay.delay_ns
                    arrivals[r] += delay.delay_ns
        transfer = max(1000, int(op.dur_ns * (1.0 + self.rng.gauss(0.0, self.cfg.jitter / 2))))
        end = max(arrivals) + transfer
        for r in range(self.ranks):
            start[r][j] = arrivals[r]
            dur[r][j] = end - arrivals[r]
            self.stream_free[r][op.stream] = end


def _previous_on_stream(prog: Program, j: int) -> int | None:
    """The op before op ``j`` on the same stream (what an injected delay stretches)."""
    stream = prog.ops[j].stream
    for i in range(j - 1, -1, -1):
        if prog.ops[i].stream == stream:
            return i
    return None


def simulate(cfg: Config) -> Iterable[StepSim]:
    """Yield the simulated steps in order (a generator: one step in memory at a time)."""
    sim = _Simulator(cfg)
    t_sched = cfg.base_epoch_ns
    prev_d2h_end = cfg.base_epoch_ns
    for index, (phase, requests, tokens) in enumerate(step_plan(cfg)):
        prog = sim.program(phase, requests, tokens)
        cpu = sim.cpu_timeline(prog, t_sched)
        start, dur = sim.gpu_timeline(index, prog, cpu.launch_ts)
        yield StepSim(index, prog, cpu.ann_start, cpu.ann_end, cpu.launch_ts, start, dur, cpu.cpu_end)
        # next step: scheduler broadcast after every rank returned, async depth 1 (wait for step i-1's D2H)
        d2h_end = prev_d2h_end
        if prog.ops:
            d2h_end = max(start[r][-1] + dur[r][-1] for r in range(cfg.ranks))
        t_sched = max(max(cpu.cpu_end), prev_d2h_end) + int(sim.rng.uniform(80_000, 200_000))
        prev_d2h_end = d2h_end
