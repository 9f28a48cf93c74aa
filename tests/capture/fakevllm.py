"""A small, fast, scriptable stand-in for a vLLM OpenAI server, for fault tests and the load benchmark.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE), listening on 127.0.0.1 only, in a background thread
(``FakeVllm().start()``) or as a process (``python tests/capture/fakevllm.py --port P ...``).

It speaks the endpoints capture uses: ``/health``, ``/version``, ``/v1/models``, ``/tokenize``,
``/v1/completions`` (streaming), ``/start_profile`` and ``/stop_profile``; and on stop it writes
trace files into ``trace_dir`` like vLLM does (gzip under the final name), with the faults the tests
ask for: a 500, an empty 200, a stop slower than the client, a reset connection, 404 routes, 409 on
start, a rank that arrives late, one that never arrives, a ``.gz`` left half written.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def trace_bytes(
    rank: int | None, world: int | None, n_events: int = 50, frontend: bool = False, markers: list[str] | tuple = ()
) -> bytes:
    """A small Kineto-like trace: metadata (distributedInfo) first, then traceEvents.

    ``markers``: engine-step annotations, written as Kineto does (``"ph", "cat", "name", "pid", …`` on one
    line, ``args`` after), each with its GPU copy on two streams."""
    head = {"schemaVersion": 1, "deviceProperties": []}
    if rank is not None and not frontend:
        head["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    head["vllm_version"] = "0.32.0"
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5}
        for i in range(n_events)
    ]
    for i, m in enumerate(markers):
        ts = 10 * n_events + 100 * i
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": m,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 90,
                "args": {"External id": i + 1},
            }
        )
        for stream in (7, 13):
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": m,
                    "pid": 0,
                    "tid": stream,
                    "ts": ts + 5,
                    "dur": 80,
                    "args": {"External id": i + 1},
                }
            )
    doc = dict(head)
    doc["traceEvents"] = events
    doc["traceName"] = "fake"
    doc["baseTimeNanoseconds"] = 1_700_000_000_000_000_000
    return json.dumps(doc, indent=1).encode()


def write_trace(
    path: Path,
    rank: int | None,
    world: int | None,
    n_events: int = 50,
    frontend: bool = False,
    markers: list[str] | tuple = (),
) -> None:
    data = trace_bytes(rank, world, n_events, frontend, markers)
    with gzip.open(path, "wb") as f:
        f.write(data)


def write_partial_gz(path: Path, rank: int, world: int, n_events: int = 2000) -> tuple:
    """Start a .gz and leave it open mid-stream (sync-flushed, so bytes are on disk). Returns a finisher."""
    data = trace_bytes(rank, world, n_events)
    f = open(path, "wb")
    gz = gzip.GzipFile(fileobj=f, mode="wb")
    half = len(data) // 2
    gz.write(data[:half])
    gz.flush()  # Z_SYNC_FLUSH
    f.flush()

    def finish() -> None:
        gz.write(data[half:])
        gz.close()
        f.close()

    return finish


@dataclass
class Behaviour:
    world_size: int = 1
    frontend: bool = True
    prefix_from_body: bool = True  # 0.32+: honour profile_prefix
    version: str = "0.32.0"
    routes: bool = True  # False: /start_profile and /stop_profile answer 404
    start_status: int = 200  # 409 to simulate someone else's session
    # ok | late (answers only once a stop has arrived: the client has given up; the start still takes effect,
    # before the stop, as vLLM's engine takes control calls in order) | late_noop (the same, but the start
    # has no effect) | reset (starts, then drops the connection unanswered) | hang (never answers; the engine
    # is stuck, so a stop is never answered either)
    start_mode: str = "ok"
    stop_mode: str = "ok"  # ok | 500 | slow | reset | close200
    stop_delay_s: float = 0.0  # before answering (files are written first unless files_after_reply)
    files_after_reply: bool = False  # write the files only after answering
    late_ranks: dict = field(default_factory=dict)  # rank -> extra delay (s) before its file appears
    never_ranks: set = field(default_factory=set)  # ranks whose file never appears
    partial_ranks: dict = field(default_factory=dict)  # rank -> seconds its .gz stays half-written (inf: forever)
    tokens: int = 8  # streamed tokens per request unless max_tokens is smaller
    token_delay_s: float = 0.0
    ttft_delay_s: float = 0.0
    n_events: int = 50
    completion_status: int = 200  # anything else: every completion request fails with it
    empty_stream: bool = False  # generate nothing: one closing chunk with "" text and finish_reason "length"
    empty_texts: tuple = ()  # indexes of tokens streamed with "" text (held back, as vLLM's detokenizer does)
    # the engine: at most max_running requests generate at once (vLLM's --max-num-seqs; 0 = no limit), the
    # others wait. batch_barrier=N: the first N requests hold their first token until N are running and, with
    # metrics on, a /metrics scrape has reported them (or batch_barrier_timeout_s passed): a batch of N, seen.
    max_running: int = 0
    batch_barrier: int = 0
    batch_barrier_timeout_s: float = 30.0
    metrics: bool = True  # serve /metrics (vllm:num_requests_running / _waiting)
    step_markers: bool = True  # the worker traces carry execute_context_… step annotations
    usage: bool = True  # send the usage chunk (stream_options.include_usage)


class FakeVllm:
    def __init__(self, trace_dir: Path | None = None, behaviour: Behaviour | None = None, port: int = 0):
        self.trace_dir = Path(trace_dir) if trace_dir else None
        self.b = behaviour or Behaviour()
        self.port = port
        self.calls: list[tuple[str, str]] = []
        self.start_calls = 0
        self.stop_calls = 0
        self.profiling = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.running = 0  # requests generating (holding an engine slot)
        self.metrics_calls = 0
        self.steps: list[str] = []  # step markers of the current profiling session (worker traces)
        self._slots: asyncio.Semaphore | None = None
        self._batch_full: asyncio.Event | None = None
        self._batch_seen: asyncio.Event | None = None
        self.completions = 0
        self.start_bodies: list = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server = None
        self._ready = threading.Event()
        self._finishers: list = []
        self._bg: list = []
        self._control: asyncio.Lock | None = None  # start/stop are handled in arrival order, one at a time
        self._stop_arrived: asyncio.Event | None = None
        self._never: asyncio.Event | None = None  # never set: what a hung engine waits on
        self._handlers: set = set()

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeVllm":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._control = asyncio.Lock()
        self._stop_arrived = asyncio.Event()
        self._never = asyncio.Event()
        self._slots = asyncio.Semaphore(self.b.max_running) if self.b.max_running else None
        self._batch_full = asyncio.Event()
        self._batch_seen = asyncio.Event()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port, backlog=1024)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def stop(self) -> None:
        if self._loop is None:
            return

        async def _close():
            self._server.close()
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        fut = asyncio.run_coroutine_threadsafe(_close(), self._loop)
        try:
            fut.result(5)
        except Exception:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop = None  # stopping twice is a no-op

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    # ------------------------------------------------------------------ HTTP plumbing
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        self._handlers.add(me)  # a strong reference: asyncio drops its own when the client disconnects
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                try:
                    method, path, _ = line.decode().split(" ", 2)
                except ValueError:
                    return
                headers = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0") or 0)
                body = await reader.readexactly(n) if n else b""
                self.calls.append((method, path))
                keep = await self._route(method, path.split("?")[0], body, writer)
                if keep is False:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            return  # the server is shutting down (3.11's stream callback would log a cancelled handler)
        finally:
            self._handlers.discard(me)
            try:
                writer.close()
            except Exception:
                pass

    @staticmethod
    def _head(status: int, headers: dict) -> bytes:
        reason = {
            200: "OK",
            404: "Not Found",
            405: "Method Not Allowed",
            409: "Conflict",
            500: "Internal Server Error",
        }.get(status, "X")
        lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _send(self, writer, status: int, body: bytes | dict | None = None, close: bool = False) -> None:
        if isinstance(body, dict) or isinstance(body, list):
            body = json.dumps(body).encode()
            ctype = "application/json"
        else:
            body = body or b""
            ctype = "application/json" if body else "text/plain"
        h = {"content-length": str(len(body)), "content-type": ctype}
        if close:
            h["connection"] = "close"
        writer.write(self._head(status, h) + body)
        await writer.drain()

    # ------------------------------------------------------------------ routes
    async def _route(self, method: str, path: str, body: bytes, writer) -> bool | None:
        b = self.b
        if path == "/metrics":
            self.metrics_calls += 1
        if path == "/health":
            await self._send(writer, 200)
        elif path == "/version":
            await self._send(writer, 200, {"version": b.version})
        elif path == "/v1/models":
            await self._send(
                writer,
                200,
                {"object": "list", "data": [{"id": "fake-model", "object": "model", "max_model_len": 4096}]},
            )
        elif path == "/tokenize" and method == "POST":
            req = json.loads(body or b"{}")
            words = str(req.get("prompt", "")).split()
            await self._send(
                writer,
                200,
                {"tokens": [100 + (hash(w) % 900) for w in words], "count": len(words), "max_model_len": 4096},
            )
        elif path in ("/start_profile", "/stop_profile") and not b.routes:
            await self._send(writer, 404, {"detail": "Not Found"})
        elif path in ("/start_profile", "/stop_profile") and method != "POST":
            await self._send(writer, 405, {"detail": "Method Not Allowed"})
        elif path == "/start_profile":
            return await self._start(body, writer)
        elif path == "/stop_profile":
            return await self._stop(writer)
        elif path == "/metrics" and b.metrics:
            running = self.running
            if b.batch_barrier and self._batch_full.is_set() and running >= b.batch_barrier:
                self._batch_seen.set()
            text = (
                "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="fake-model"}} {float(running)}\n'
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                "# TYPE vllm:num_requests_waiting gauge\n"
                f'vllm:num_requests_waiting{{engine="0",model_name="fake-model"}} '
                f"{float(self.in_flight - running)}\n"
            )
            await self._send(writer, 200, text.encode())
        elif path == "/v1/completions" and method == "POST":
            return await self._completions(json.loads(body), writer)
        else:
            await self._send(writer, 404, {"detail": "Not Found"})
        return None

    async def _start(self, body: bytes, writer) -> bool | None:
        self.start_calls += 1
        req = json.loads(body) if body else None
        self.start_bodies.append(req)
        mode = self.b.start_mode
        async with self._control:
            if self.b.start_status != 200:
                await self._send(
                    writer, self.b.start_status, {"error": {"message": "A profiling session is already active."}}
                )
                return None
            if self.profiling:
                await self._send(writer, 409, {"error": {"message": "A profiling session is already active."}})
                return None
            if mode == "hang":
                await self._never.wait()
            if mode in ("late", "late_noop"):
                await self._stop_arrived.wait()
            if mode != "late_noop":
                self.profiling = True
                self.steps = []
                self._prefix = (req or {}).get("profile_prefix") if self.b.prefix_from_body else None
        if mode == "reset":
            self._reset(writer)
            return False
        await self._send(writer, 200)  # (after "late": the client is gone; the write fails quietly)
        return None

    @staticmethod
    def _reset(writer) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    def _name(self, rank: int | None) -> str:
        ns = time.time_ns()
        p = f"{self._prefix}_" if self._prefix else ""
        if rank is None:
            return f"{p}fakehost_4242.async_llm.{ns}.pt.trace.json.gz"
        return f"{p}dp0_pp0_tp{rank}_dcp0_ep{rank}_rank{rank}.{ns}.pt.trace.json.gz"

    async def _write_files(self) -> None:
        b = self.b
        assert self.trace_dir is not None
        tasks = []
        for r in range(b.world_size):
            if r in b.never_ranks:
                continue
            if r in b.partial_ranks:
                fin = write_partial_gz(self.trace_dir / self._name(r), r, b.world_size, b.n_events * 40)
                secs = b.partial_ranks[r]
                if secs != float("inf"):
                    tasks.append(self._later(secs, fin))
                else:
                    self._finishers.append(fin)
            elif r in b.late_ranks:
                name = self._name(r)
                tasks.append(
                    self._later(
                        b.late_ranks[r],
                        lambda n=name, r=r, st=list(self.steps): write_trace(
                            self.trace_dir / n, r, b.world_size, b.n_events, markers=st
                        ),
                    )
                )
            else:
                write_trace(self.trace_dir / self._name(r), r, b.world_size, b.n_events, markers=self.steps)
            prefix = self._prefix + "_" if self._prefix else ""
            (self.trace_dir / f"{prefix}rank{r}.profiler_out.txt").write_text("table\n")
        if b.frontend:
            write_trace(self.trace_dir / self._name(None), None, None, b.n_events, frontend=True)
        for t in tasks:
            self._bg.append(asyncio.ensure_future(t))

    async def _later(self, secs: float, fn) -> None:
        await asyncio.sleep(secs)
        fn()

    async def _stop(self, writer) -> bool | None:
        b = self.b
        self.stop_calls += 1
        self._stop_arrived.set()
        async with self._control:
            was = self.profiling
            self.profiling = False
            if was and self.trace_dir is not None and not b.files_after_reply:
                await self._write_files()
        if b.stop_delay_s:
            await asyncio.sleep(b.stop_delay_s)
        if was and self.trace_dir is not None and b.files_after_reply:
            self._bg.append(asyncio.ensure_future(self._write_files()))
        if b.stop_mode == "500":
            await self._send(writer, 500, {"error": {"message": "Invocation of profile method failed"}})
        elif b.stop_mode == "reset":
            self._reset(writer)
            return False
        elif b.stop_mode == "close200":
            await self._send(writer, 200, close=True)
            return False
        else:  # ok / slow: empty 200, like vLLM
            await self._send(writer, 200)
        return None

    async def _completions(self, req: dict, writer) -> None:
        b = self.b
        if b.completion_status != 200:
            await self._send(writer, b.completion_status, {"error": {"message": "engine dead"}})
            return
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        slot = False
        try:
            n = (
                min(int(req.get("max_tokens") or b.tokens), b.tokens)
                if not req.get("ignore_eos")
                else int(req.get("max_tokens") or b.tokens)
            )
            if b.empty_stream:
                n = 0
            prompt = req.get("prompt")
            n_in = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            writer.write(self._head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"}))
            if b.ttft_delay_s:
                await asyncio.sleep(b.ttft_delay_s)

            def chunk(obj) -> bytes:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                return f"{len(data):x}\r\n".encode() + data + b"\r\n"

            if self._slots is not None:
                await self._slots.acquire()
            slot = True
            self.running += 1
            if self.profiling and b.step_markers:
                self.steps.append(f"execute_context_1({n_in})_generation_0(0)")  # its prefill
            if b.batch_barrier and not self._batch_full.is_set():
                if self.running >= b.batch_barrier:
                    self._batch_full.set()
                try:
                    await asyncio.wait_for(self._barrier(), b.batch_barrier_timeout_s)
                except asyncio.TimeoutError:
                    pass
            for i in range(n):
                if i and b.token_delay_s:
                    await asyncio.sleep(b.token_delay_s)
                if self.profiling and b.step_markers:  # one decode step per token, of the requests generating now
                    self.steps.append(f"execute_context_0(0)_generation_{self.running}({self.running})")
                writer.write(
                    chunk(
                        {
                            "id": "cmpl-1",
                            "object": "text_completion",
                            "model": req.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "text": "" if i in b.empty_texts else f" t{i}",
                                    "logprobs": None,
                                    "finish_reason": "length" if i == n - 1 else None,
                                }
                            ],
                        }
                    )
                )
                await writer.drain()
            if n == 0:  # what vLLM sends when a request ends without output: the finish reason alone
                writer.write(
                    chunk(
                        {
                            "id": "cmpl-1",
                            "object": "text_completion",
                            "model": req.get("model"),
                            "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}],
                        }
                    )
                )
            if b.usage:
                writer.write(
                    chunk(
                        {
                            "id": "cmpl-1",
                            "object": "text_completion",
                            "choices": [],
                            "usage": {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n},
                        }
                    )
                )
            writer.write(chunk(b"[DONE]"))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.completions += 1
        finally:
            self.in_flight -= 1
            if slot:
                self.running -= 1
                if self._slots is not None:
                    self._slots.release()

    async def _barrier(self) -> None:
        await self._batch_full.wait()
        if self.b.metrics:
            await self._batch_seen.wait()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--trace-dir")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--token-delay", type=float, default=0.0)
    a = ap.parse_args()
    srv = FakeVllm(a.trace_dir, Behaviour(tokens=a.tokens, token_delay_s=a.token_delay), a.port).start()
    print(srv.port, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
