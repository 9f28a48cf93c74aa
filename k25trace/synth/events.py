"""Kineto JSON text: one rank's trace file written event by event, laid out exactly as ``json.dumps(obj,
indent=4)`` would (the layout of a real vLLM trace), without building the objects.

``ts``/``dur`` are microseconds relative to the rank's ``baseTimeNanoseconds``, rendered with ``repr`` of
``ns / 1000`` (a whole number of ns, at most 3 decimals). The static parts of GPU events are rendered once per
(name, stream, collective args) by :class:`_Templates`.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from k25trace.synth.config import Config
from k25trace.synth.kernels import GEOMETRY, SMS
from k25trace.synth.program import MAIN, STREAM_IDS, Op
from k25trace.synth.simulate import StepSim

_IND = "        "


@dataclass
class RankMeta:
    """One rank's identity and clock: recorded time = true time + ``offset_ns``; ``ts`` is relative to ``base_ns``
    (on the rank's clock); ``export_ns`` (the time in the file name) is set once the run's length is known."""

    rank: int
    offset_ns: int
    base_ns: int
    pid: int
    export_ns: int = 0


def _f(ns: int) -> str:
    return repr(ns / 1000)


def _list_lines(vals: Sequence[int], ind: str) -> str:
    return "[\n" + ",\n".join(f"{ind}    {v}" for v in vals) + f"\n{ind}]"


class _Templates:
    """Pre-rendered static parts of GPU events, per (name, device, stream)."""

    def __init__(self, device: int, ranks: int, rename: dict[str, str] | None = None):
        self.device = device
        self.ranks = ranks
        self.rename = rename or {}
        self.ranks_str = json.dumps("[" + ", ".join(str(i) for i in range(ranks)) + "]")
        self.cache: dict[tuple[str, int, tuple | None], tuple[str, str, str | None]] = {}

    def gpu(self, op: Op, stream_id: int) -> tuple[str, str, str | None]:
        """(head up to ``"ts": ``, middle up to ``"correlation": ``, tail or None): the event is head + ts + dur
        + External id + middle + correlation + tail; memcpy/memset have no fixed tail (bytes vary per event)."""
        key = (op.name, stream_id, op.coll_args)  # collective args (message sizes) differ per call site and batch
        t = self.cache.get(key)
        if t is not None:
            return t
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[op.kind]
        name = json.dumps(self.rename.get(op.name, op.name))
        head = (
            f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "{cat}",\n{_IND}    "name": {name},\n'
            f'{_IND}    "pid": {self.device},\n{_IND}    "tid": {stream_id},\n{_IND}    "ts": '
        )
        a = _IND + "        "
        if op.kind == "kernel":
            grid, block, regs, smem = GEOMETRY[op.name]
            blocks = grid[0] * grid[1] * grid[2]
            threads = block[0] * block[1] * block[2]
            bps = round(blocks / SMS, 6)
            wps = round(blocks * threads / 32 / SMS, 6)
            occ = min(100, int(100 * min(64.0, wps) / 64)) if blocks >= SMS else 0
            tail = (
                f',\n{a}"registers per thread": {regs},\n{a}"shared memory": {smem},\n'
                f'{a}"blocks per SM": {bps!r},\n{a}"warps per SM": {wps!r},\n'
                f'{a}"grid": {_list_lines(grid, a)},\n{a}"block": {_list_lines(block, a)},\n'
                f'{a}"est. achieved occupancy %": {occ}'
            )
            if op.coll_args is not None:
                cname, inn, outn, dtype = op.coll_args
                tail += (
                    f',\n{a}"Collective name": "{cname}",\n{a}"In msg nelems": {inn},\n'
                    f'{a}"Out msg nelems": {outn},\n{a}"Group size": {self.ranks},\n{a}"dtype": "{dtype}",\n'
                    f'{a}"In split size": "[]",\n{a}"Out split size": "[]",\n{a}"Process Group Name": "1",\n'
                    f'{a}"Process Group Description": "undefined",\n{a}"Process Group Ranks": {self.ranks_str}'
                )
            tail += f"\n{_IND}    }}\n{_IND}}}"
        else:
            tail = None  # memcpy/memset: bytes and bandwidth vary, rendered per event
        mid = (
            (
                f',\n{a}"queued": 0,\n{a}"device": {self.device},\n{a}"context": 1,\n{a}"stream": {stream_id},\n'
                f'{a}"correlation": '
            )
            if op.kind == "kernel"
            else (f',\n{a}"device": {self.device},\n{a}"context": 1,\n{a}"stream": {stream_id},\n{a}"correlation": ')
        )
        t = (head, mid, tail)
        self.cache[key] = t
        return t


_PY_FRAMES = (
    "vllm/v1/worker/gpu_model_runner.py(2211): _prepare_inputs",
    "vllm/v1/worker/gpu_input_batch.py(812): refresh_metadata",
    "vllm/v1/worker/block_table.py(113): commit_block_table",
    "vllm/v1/attention/backends/mla/common.py(640): build",
    "vllm/v1/attention/backends/mla/flashmla.py(131): _build_decode",
    "vllm/v1/worker/gpu_model_runner.py(1402): _calc_spec_decode_metadata",
    "vllm/v1/core/sched/output.py(88): num_scheduled_tokens",
    "vllm/forward_context.py(238): set_forward_context",
    "contextlib.py(137): __enter__",
    "contextlib.py(146): __exit__",
    "torch/utils/_contextlib.py(117): decorate_context",
    "torch/cuda/graphs.py(119): replay",
    "vllm/compilation/cuda_graph.py(171): __call__",
    "vllm/v1/sample/sampler.py(64): forward",
    "vllm/v1/sample/ops/topk_topp_sampler.py(101): forward_native",
    "numpy/core/fromnumeric.py(2313): sum",
    "<built-in method copy_ of Tensor object at 0x7f5ac1a3c5e0>",
    "<built-in function isinstance>",
    "<built-in method to of Tensor object at 0x7f5ac1a3d2b0>",
    "<built-in method item of Tensor object at 0x7f5ac1a3c6d0>",
    "<built-in function len>",
    "torch/_ops.py(1158): __call__",
    "vllm/utils/__init__.py(1297): cdiv",
    "vllm/v1/worker/gpu_model_runner.py(982): _update_states",
    "vllm/v1/spec_decode/utils.py(31): is_spec_decode_unsupported",
    "dataclasses.py(1303): replace",
    "typing.py(2187): cast",
)
_CPU_OPS = (
    ("aten::empty", "[[64], [], [], [], [], []]"),
    ("aten::slice", "[[512], [], [], [], []]"),
    ("aten::as_strided", "[[512], [], [], []]"),
    ("aten::view", "[[256, 7168], []]"),
    ("aten::fill_", "[[385], []]"),
    ("aten::index_select", "[[163840, 7168], [], [256]]"),
)


_PY_HEADS: dict[int, list[str]] = {}


def _py_heads(pid: int) -> list[str]:
    heads = [
        f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "python_function",\n{_IND}    "name": '
        f'{json.dumps(name)},\n{_IND}    "pid": {pid},\n{_IND}    "tid": {pid},\n{_IND}    "ts": '
        for name in _PY_FRAMES
    ]
    _PY_HEADS[pid] = heads
    return heads


_DIMS_CACHE: dict[tuple[str, str], str] = {}


class TraceWriter:
    """One rank's trace file, written event by event (gzip-compressed with isal when ``cfg.gzip``)."""

    def __init__(self, cfg: Config, rank: int, path: Path, meta: RankMeta):
        self.cfg, self.rank, self.path = cfg, rank, path
        self.offset = meta.offset_ns
        self.base = meta.base_ns
        self.pid = meta.pid
        self.tpl = _Templates(rank, cfg.ranks, dict(cfg.kernel_rename or {}))
        self.ext = 100
        self.corr = 1000
        self.py_id = 1_000_000
        self.ev_idx = 0
        self.n_events = 0
        self.raw = open(path, "wb")
        self.out: io.BufferedIOBase
        if cfg.gzip:
            from isal import igzip

            self.out = igzip.IGzipFile(fileobj=self.raw, mode="wb", compresslevel=cfg.compresslevel)
        else:
            self.out = self.raw
        self.bytes = 0
        self.first = True

    def rel(self, true_ns: int) -> str:
        return repr((true_ns + self.offset - self.base) / 1000)

    def emit(self, chunks: list[str]) -> None:
        if not chunks:
            return
        s = ",\n".join(chunks)
        if not self.first:
            s = ",\n" + s
        self.first = False
        b = s.encode()
        self.bytes += len(b)
        self.out.write(b)
        self.n_events += len(chunks)

    def tell_gz(self) -> int:
        return self.raw.tell() if self.cfg.gzip else self.bytes

    def header(self, header_obj: dict[str, Any]) -> None:
        txt = json.dumps(header_obj, indent=4)
        assert txt.endswith("\n}")
        s = txt[:-2] + ',\n    "traceEvents": [\n'
        b = s.encode()
        self.bytes += len(b)
        self.out.write(b)

    def footer(self, trace_name: str) -> None:
        b = ('\n    ],\n    "traceName": ' + json.dumps(trace_name) + "\n}").encode()
        self.bytes += len(b)
        self.out.write(b)
        if self.out is not self.raw:
            self.out.close()
        self.raw.close()

    # --- event renderers
    def x_cpu(self, cat: str, name: str, ts_true: int, dur: int, args: str) -> str:
        return (
            f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "{cat}",\n{_IND}    "name": {json.dumps(name)},\n'
            f'{_IND}    "pid": {self.pid},\n{_IND}    "tid": {self.pid},\n{_IND}    "ts": {self.rel(ts_true)},\n'
            f'{_IND}    "dur": {_f(dur)},\n{_IND}    "args": {{\n{args}\n{_IND}    }}\n{_IND}}}'
        )

    def py(self, name: str, ts: int, dur: int, parent: int) -> tuple[str, int]:
        self.py_id += 1
        self.ev_idx += 1
        a = _IND + "        "
        return (
            f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "python_function",\n{_IND}    "name": '
            f'{json.dumps(name)},\n{_IND}    "pid": {self.pid},\n{_IND}    "tid": {self.pid},\n'
            f'{_IND}    "ts": {self.rel(ts)},\n{_IND}    "dur": {_f(dur)},\n{_IND}    "args": {{\n'
            f'{a}"Python parent id": {parent},\n{a}"Python id": {self.py_id},\n{a}"Ev Idx": {self.ev_idx}\n'
            f"{_IND}    }}\n{_IND}}}"
        ), self.py_id

    def cpu_op(self, name: str, ts: int, dur: int, ext: int, dims: str | None = None) -> str:
        self.ev_idx += 1
        a = _IND + "        "
        args = f'{a}"External id": {ext},\n{a}"Record function id": 0'
        if dims is not None:
            args += f',\n{a}"Input Dims": {_dims_pretty(dims, a)}'
        args += f',\n{a}"Ev Idx": {self.ev_idx}'
        return self.x_cpu("cpu_op", name, ts, dur, args)

    def flow(self, ph: str, corr: int, pid: int, tid: int, ts: int) -> str:
        tail = f',\n{_IND}    "bp": "e"' if ph == "f" else ""
        return (
            f'{_IND}{{\n{_IND}    "ph": "{ph}",\n{_IND}    "id": {corr},\n{_IND}    "pid": {pid},\n'
            f'{_IND}    "tid": {tid},\n{_IND}    "ts": {self.rel(ts)},\n{_IND}    "cat": "ac2g",\n'
            f'{_IND}    "name": "ac2g"{tail}\n{_IND}}}'
        )

    def padding(self, n: int, t0: int, t1: int, parent: int, out: list[str], rng: random.Random) -> None:
        """n python_function/cpu_op events as nested call chains (depth 5) inside [t0, t1]."""
        if n <= 0 or t1 - t0 < 2:
            return
        n_chains = max(1, n // 5)
        width = (t1 - t0) // n_chains
        made = 0
        heads = _PY_HEADS[self.pid] if self.pid in _PY_HEADS else _py_heads(self.pid)
        nf = len(heads)
        base = self.offset - self.base
        a_ = _IND + "        "
        mid1 = f',\n{_IND}    "dur": '
        mid2 = f',\n{_IND}    "args": {{\n{a_}"Python parent id": '
        mid3 = f',\n{a_}"Python id": '
        mid4 = f',\n{a_}"Ev Idx": '
        end = f"\n{_IND}    }}\n{_IND}}}"
        py_id, ev_idx = self.py_id, self.ev_idx
        append = out.append
        rnd = rng.random
        for c in range(n_chains):
            depth = 5 if c < n_chains - 1 else n - made
            a = t0 + c * width
            b = a + max(1, width - 1)
            p = parent
            salt = int(rnd() * 1_000_003)
            op_leaf = salt % 4 == 0
            for d in range(depth):
                if b - a < 2:
                    b = a + 1
                if d == depth - 1 and op_leaf:
                    self.py_id, self.ev_idx = py_id, ev_idx
                    name, dims = _CPU_OPS[salt % len(_CPU_OPS)]
                    self.ext += 1
                    append(self.cpu_op(name, a, b - a, self.ext, dims))
                    py_id, ev_idx = self.py_id, self.ev_idx
                else:
                    py_id += 1
                    ev_idx += 1
                    append(
                        f"{heads[(salt + d * 7) % nf]}{(a + base) / 1000!r}{mid1}{(b - a) / 1000!r}{mid2}{p}"
                        f"{mid3}{py_id}{mid4}{ev_idx}{end}"
                    )
                    p = py_id
                made += 1
                shrink = (b - a) // 6
                a, b = a + (shrink >> 1), b - shrink
            if made >= n:
                break
        self.py_id, self.ev_idx = py_id, ev_idx

    # --- one step
    def step(self, st: StepSim, n_pad: int, rng: random.Random) -> None:
        """Write one simulated step: its CPU annotation, python frames and ``n_pad`` padding events, the runtime
        calls (and eager cpu_ops), the GPU activities with their flow events, and the GPU annotation."""
        cpu: list[str] = []
        frames = self._step_frames(st, cpu)
        self._pad(st, frames, n_pad, rng, cpu)
        rt: list[str] = []
        gpu: list[str] = []
        flows: list[str] = []
        span = self._launches(st, frames.ann_ext, cpu, rt, gpu, flows)
        if span is not None:
            gpu.append(self._gpu_annotation(st.prog.name, frames.ann_ext, *span))
        self.emit(cpu)
        self.emit(rt)
        self.emit(gpu)
        self.emit(flows)

    def _step_frames(self, st: StepSim, cpu: list[str]) -> _StepFrames:
        """The step's ``user_annotation`` and the python frames around its launches: ``execute_model`` (worker,
        model runner) over the annotation, and ``sample_tokens`` over the launches after it."""
        r, prog = self.rank, st.prog
        a0, a1 = st.ann_start[r], st.ann_end[r]
        self.ext += 1
        ann_ext = self.ext
        self.ev_idx += 1
        a = _IND + "        "
        cpu.append(
            self.x_cpu(
                "user_annotation",
                prog.name,
                a0,
                a1 - a0,
                f'{a}"External id": {ann_ext},\n{a}"Record function id": 0,\n{a}"Ev Idx": {self.ev_idx}',
            )
        )
        end_all = st.cpu_end[r]
        s, worker_id = self.py("vllm/v1/worker/gpu_worker.py(601): execute_model", a0 + 1000, a1 - a0 - 1500, 2)
        cpu.append(s)
        s, runner_id = self.py(
            "vllm/v1/worker/gpu_model_runner.py(2540): execute_model", a0 + 2500, a1 - a0 - 4000, worker_id
        )
        cpu.append(s)
        frames = _StepFrames(ann_ext, runner_id)
        launches = prog.launches
        if any(ln.after_annotation for ln in launches):
            t_after = min(st.launch_ts[r][i] for i, ln in enumerate(launches) if ln.after_annotation) - 60_000
            t_after = max(t_after, a1 + 1000)
            s, sample_id = self.py(
                "vllm/v1/worker/gpu_worker.py(622): sample_tokens", t_after, end_all - t_after - 5000, 2
            )
            cpu.append(s)
            s, frames.sample_parent = self.py(
                "vllm/v1/worker/gpu_model_runner.py(2905): sample_tokens",
                t_after + 1200,
                end_all - t_after - 8000,
                sample_id,
            )
            cpu.append(s)
            frames.t_after = t_after
        return frames

    def _pad(self, st: StepSim, frames: _StepFrames, n_pad: int, rng: random.Random, cpu: list[str]) -> None:
        """Spread ``n_pad`` padding events over the CPU gaps between launches, inside the annotation and in
        sample_tokens, in proportion to each gap's length."""
        r = self.rank
        launches = st.prog.launches
        a0, a1 = st.ann_start[r], st.ann_end[r]
        gaps: list[tuple[int, int, int]] = []  # (start, end, parent python id)
        prev = a0 + 4000
        for i, ln in enumerate(launches):
            lt = st.launch_ts[r][i]
            parent = frames.runner_id
            if ln.after_annotation:
                assert frames.sample_parent is not None  # set whenever a launch comes after the annotation
                parent = frames.sample_parent
            if ln.after_annotation and frames.t_after is not None and prev < frames.t_after + 1500:
                prev = frames.t_after + 1500
            if lt - 2000 > prev:
                gaps.append((prev, lt - 2000, parent))
            prev = lt + (ln.cpu_ns * 2) + 2000
        if not launches:
            gaps.append((a0 + 4000, a1 - 3000, frames.runner_id))
        total_gap = sum(g[1] - g[0] for g in gaps) or 1
        left = n_pad
        for gi, (g0, g1, parent) in enumerate(gaps):
            share = left if gi == len(gaps) - 1 else int(n_pad * (g1 - g0) / total_gap)
            share = min(share, left)
            self.padding(share, g0, g1, parent, cpu, rng)
            left -= share

    def _launches(
        self, st: StepSim, ann_ext: int, cpu: list[str], rt: list[str], gpu: list[str], flows: list[str]
    ) -> tuple[int, int] | None:
        """The runtime call of every launch (and its eager cpu_op), and the GPU activities it started with their
        flow events; returns the (start, end) of the GPU work launched inside the annotation (None if none)."""
        r, prog = self.rank, st.prog
        a = _IND + "        "
        span: tuple[int, int] | None = None
        for i, ln in enumerate(prog.launches):
            lt = st.launch_ts[r][i]
            self.corr += 1
            corr = self.corr
            if ln.cpu_op is not None:
                self.ext += 1
                ext = self.ext
                cpu.append(self.cpu_op(ln.cpu_op, lt - 1500, ln.cpu_ns + 3000, ext))
            else:
                ext = ann_ext if not ln.after_annotation else 0
            rt_args = f'{a}"External id": {ext},\n{a}"cbid": {ln.cbid},\n{a}"correlation": {corr}'
            rt.append(self.x_cpu("cuda_runtime", ln.name, lt, ln.cpu_ns, rt_args))
            if not ln.ops:
                continue
            flows.append(self.flow("s", corr, self.pid, self.pid, lt))
            for j in ln.ops:
                s0, d = st.start[r][j], st.dur[r][j]
                if not ln.after_annotation:
                    span = (s0, s0 + d) if span is None else (min(span[0], s0), max(span[1], s0 + d))
                stream_id = STREAM_IDS[prog.ops[j].stream]
                gpu.append(self._gpu_event(prog.ops[j], stream_id, s0, d, ext, corr))
                flows.append(self.flow("f", corr, self.rank, stream_id, s0))
        return span

    def _gpu_event(self, op: Op, stream_id: int, start: int, dur: int, ext: int, corr: int) -> str:
        a = _IND + "        "
        head, mid, tail = self.tpl.gpu(op, stream_id)
        if tail is None:
            bw = op.nbytes / dur if dur else 0.0
            tail = f',\n{a}"bytes": {op.nbytes},\n{a}"memory bandwidth (GB/s)": {bw!r}\n{_IND}    }}\n{_IND}}}'
        return (
            f'{head}{self.rel(start)},\n{_IND}    "dur": {_f(dur)},\n{_IND}    "args": {{\n'
            f'{a}"External id": {ext}{mid}{corr}{tail}'
        )

    def _gpu_annotation(self, name: str, ann_ext: int, start: int, end: int) -> str:
        """The ``gpu_user_annotation`` copy of the step marker on the main stream, over its GPU work."""
        a = _IND + "        "
        return (
            f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "gpu_user_annotation",\n'
            f'{_IND}    "name": {json.dumps(name)},\n{_IND}    "pid": {self.rank},\n'
            f'{_IND}    "tid": {STREAM_IDS[MAIN]},\n{_IND}    "ts": {self.rel(start)},\n'
            f'{_IND}    "dur": {_f(end - start)},\n{_IND}    "args": {{\n'
            f'{a}"External id": {ann_ext}\n{_IND}    }}\n{_IND}}}'
        )


@dataclass
class _StepFrames:
    """What the rest of a step's events hang from: the annotation's External id and the python ids that parent
    the padding (execute_model inside the annotation, sample_tokens after it)."""

    ann_ext: int
    runner_id: int
    sample_parent: int | None = None
    t_after: int | None = None  # start of the sample_tokens frame (None: no launch after the annotation)


def _dims_pretty(dims: str, ind: str) -> str:
    key = (dims, ind)
    r = _DIMS_CACHE.get(key)
    if r is None:
        r = _DIMS_CACHE[key] = json.dumps(json.loads(dims), indent=4).replace("\n", "\n" + ind)
    return r
