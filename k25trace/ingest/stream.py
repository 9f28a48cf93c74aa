"""The streaming reader: gzip (isal) or plain JSON read block by block while hashed, and cut at event
boundaries into ``[event, …]`` chunks (a fast guessed cut, proven by decoding, or an exact structural scan)."""

from __future__ import annotations

import bisect
import hashlib
import io
import mmap
import os
import re
import zlib
from pathlib import Path
from typing import Any, Callable

import msgspec
import orjson

from k25trace.errors import TraceError
from k25trace.ingest import limits
from k25trace.ingest.events import _byte_of, _reason

try:  # isal: ~4x faster gzip decompression than zlib
    from isal import igzip as _gzip
    from isal import igzip_threaded as _gzip_threaded
except ImportError:  # pragma: no cover - isal is a dependency, zlib is the fallback
    import gzip as _gzip  # type: ignore[no-redef]

    _gzip_threaded = None  # type: ignore[assignment]

_PLAIN_RE = re.compile(rb'[^"\[\]{}]*+')  # text up to the next string or bracket
_STRING_RE = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)  # one whole string, escapes included
_KEY_VALUE_RE = re.compile(rb"[ \t\r\n]*:[ \t\r\n]*(?=[^ \t\r\n])")  # after a key: the colon, up to its value
_KEY_PENDING_RE = re.compile(rb"[ \t\r\n]*(?::[ \t\r\n]*)?\Z")  # the text ends before a key's value begins
_BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")  # a guess at an event boundary (see _Splitter)
# exact structure (see _Scan): skip everything but brackets and quotes, and whole strings (escapes included), then
# take the next bracket (group 1), or the quote of a string that does not end in the text so far
_SCAN_RE = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+(?:([\[\]{}])|")', re.DOTALL)
_COMMA_RE = re.compile(rb"[ \t\r\n]*,")
# ---------------------------------------------------------------------------------------------------------------
# Streaming reader


def last_event_boundary(buf: bytes | bytearray | memoryview | mmap.mmap, end: int) -> tuple[int, int] | None:
    """The last guessed event boundary ``}, {`` in ``buf[1:end]``: (position of its ``}``, position after its ``{``),
    or None. Searches the last 64 KB first, then windows eight times larger, back to the start (a chunk is cut near
    its end; going through every match of the last MB took 1.33 ms per 9 MB chunk, this 0.08 ms, measured).
    Matches cannot overlap (each starts with ``}`` and ends with ``{``), so the last one inside a window is the
    last one in the text. A guess: the decoder proves it (see :class:`_Splitter`)."""
    size = 64 << 10
    start = max(1, end - size)
    while True:
        last = None
        for match in _BOUNDARY_RE.finditer(buf, start, end):
            last = match
        if last is not None:
            return last.start(), last.end()
        if start == 1:
            return None
        size *= 8
        start = max(1, end - size)


def _threaded_gzip(raw: Any) -> Any:
    """A reader of ``raw``'s gzip data decompressed ahead, in a thread of its own, one block of
    ``limits.THREADED_READ_BLOCK`` at a time (isal's ``igzip_threaded``; its decompression lets the thread that
    decodes run meanwhile; a read of ``limits.BLOCK_SIZE`` takes several blocks); gzip's own reader without isal."""
    if _gzip_threaded is None:  # pragma: no cover - isal is a dependency
        return _gzip.open(raw, "rb")
    block = min(limits.THREADED_READ_BLOCK, limits.BLOCK_SIZE) or limits.BLOCK_SIZE
    return _gzip_threaded.open(raw, "rb", threads=1, block_size=block)


class _HashingFile(io.RawIOBase):
    """The trace file as it is read: every byte handed to the decompressor also goes into a sha256, so the hash
    stored for a trace is the hash of exactly what was decoded (a file still growing while it is read cannot be
    stored under the hash of an earlier, shorter version)."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "rb", buffering=0)
        self.sha = hashlib.sha256()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.fh.readinto(b)
        if n:
            with memoryview(b) as view:
                self.sha.update(view[:n])
            self.count += n
        return n or 0

    def close(self) -> None:
        self.fh.close()
        super().close()


class _Reader:
    """Decompresses a trace, translating gzip failures into one-line TraceErrors naming the file, and hashes the
    bytes it reads (:attr:`sha256`, :attr:`count`)."""

    def __init__(self, path: Path, threaded: bool = False) -> None:
        self.path = path
        self.raw = _HashingFile(path)
        self.reported = 0  # compressed bytes already passed to a progress callback (:meth:`report`)
        try:
            magic = os.pread(self.raw.fh.fileno(), 2, 0)
            if magic == b"\x1f\x8b":
                self.fh: Any = _threaded_gzip(self.raw) if threaded else _gzip.open(self.raw, "rb")
            elif path.name.endswith(".gz"):
                raise TraceError(str(path), "named .gz but is not gzip data")
            else:
                self.fh = self.raw
        except BaseException:
            self.raw.close()
            raise

    def _call(self, method: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return method(arg)
        except EOFError as exc:
            raise TraceError(
                str(self.path),
                "truncated gzip: the compressed stream ends before its end marker "
                "(the writer may still be running, or was killed)",
            ) from exc
        except (OSError, zlib.error) as exc:
            raise TraceError(str(self.path), f"corrupt gzip data: {exc}") from exc

    def read(self, size: int) -> bytes:
        return self._call(self.fh.read, size)

    def readinto(self, view: memoryview) -> int:
        """Decompress into the caller's buffer (no intermediate copy)."""
        return self._call(self.fh.readinto, view)

    def position(self) -> int:
        """Compressed bytes read so far (for progress)."""
        return self.raw.count

    def report(self, progress: Callable[[int], Any]) -> None:
        """Tell ``progress`` how many compressed bytes were read since the last report (nothing when none)."""
        pos = self.raw.count
        if pos > self.reported:
            progress(pos - self.reported)
            self.reported = pos

    @property
    def sha256(self) -> str:
        return self.raw.sha.hexdigest()

    @property
    def count(self) -> int:
        return self.raw.count

    def close(self) -> None:
        self.fh.close()
        self.raw.close()


class _Scan:
    """The exact structure of traceEvents text, from a real event boundary on, resumable as text is appended:
    strings (with escapes) and brackets, no recursion (any depth), where the top-level elements start and end, and
    where the array closes. Regex jumps from bracket to bracket, so it is slower than the guess in
    :meth:`_Splitter.feed` but never fooled by a ``}, {`` inside a string, a nested list or the metadata after the
    array."""

    __slots__ = ("pos", "depth", "starts", "ends", "array_end", "bad")

    def __init__(self, pos: int) -> None:
        self.pos = pos  # where to go on: the start of a string not closed yet, or the end of the text scanned
        self.depth = 1  # 1 = between the elements of traceEvents
        self.starts: list[int] = []  # positions of the top-level objects (and arrays)
        self.ends: list[int] = []  # positions just after them
        self.array_end: int | None = None  # position of the "]" that closes traceEvents
        self.bad: int | None = None  # position of a bracket that closes more than was opened

    def run(self, text: Any) -> None:
        if self.array_end is not None or self.bad is not None:
            return
        match = _SCAN_RE.match
        pos, depth = self.pos, self.depth
        starts, ends = self.starts, self.ends
        while True:
            m = match(text, pos)
            if m is None:  # no bracket and no open string up to the end
                pos = len(text)
                break
            b = m.group(1)
            if b is None:  # a string that does not end in the text so far: resume at its start
                pos = m.end() - 1
                break
            pos = m.end()
            if b == b"{" or b == b"[":
                depth += 1
                if depth == 2:
                    starts.append(pos - 1)
            else:
                depth -= 1
                if depth == 1:
                    ends.append(pos)
                elif depth == 0:
                    if b == b"]":
                        self.array_end = pos - 1
                    else:
                        self.bad = pos - 1
                    break
        self.pos, self.depth = pos, depth


class _TopLevelKey:
    """Finds the ``traceEvents`` array of the top-level object in the text before it, resumable as text is appended
    (the prefix is read block by block). Only a key of the top-level object counts: the same key in a nested object
    (``{"meta": {"traceEvents": []}, "traceEvents": [...]}``) or inside a string is skipped, as a JSON parser
    reads it. The text scanned is the metadata before the events: a few KB in a Kineto trace."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0  # where the scan resumes (the start of a string or key not complete yet)
        self.depth = 0  # bracket depth at ``pos``: 1 = between the keys of the top-level object
        self.over = False  # the top-level value ended, or is not an object: no key to find (finish() says what)

    def find(self, text: bytearray) -> int | None:
        """The position just after the ``[`` that opens the top-level ``traceEvents`` array, or None (not in
        ``text`` yet, or never: the caller's end of input tells)."""
        if self.over:
            return None
        pos, depth, end = self.pos, self.depth, len(text)
        while True:
            pos = _PLAIN_RE.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= end:
                break
            c = text[pos]
            if c != 0x22:  # a bracket
                if depth == 0 and c != 0x7B:  # the top level is not an object
                    self.over = True
                    return None
                depth += 1 if c in (0x5B, 0x7B) else -1
                pos += 1
                if depth <= 0:  # the top-level object ended without the key
                    self.over = True
                    return None
                continue
            m = _STRING_RE.match(text, pos)
            if m is None:
                break  # the string goes on in the next block
            if depth == 1 and _is_trace_events(m.group()):
                value = _KEY_VALUE_RE.match(text, m.end())
                if value is None:
                    if _KEY_PENDING_RE.match(text, m.end()):
                        break  # the colon or the value is in the next block
                    pos = m.end()  # a string value, not a key ("x": "traceEvents")
                    continue
                if text[value.end()] == 0x5B:
                    return value.end() + 1
                raise TraceError(str(self.path), "the top-level traceEvents is not an array: not a Kineto trace")
            pos = m.end()
        self.pos, self.depth = pos, depth
        return None


def _is_trace_events(token: bytes) -> bool:
    """Whether a JSON string token (quotes included) is the text ``traceEvents`` (an escaped spelling included)."""
    if token == b'"traceEvents"':
        return True
    if b"\\" not in token or len(token) > 200:
        return False
    try:
        return orjson.loads(token) == "traceEvents"
    except orjson.JSONDecodeError:
        return False


class _Splitter:
    """Cuts the decompressed text into (metadata text, chunks of complete event objects).

    A chunk is returned as one bytearray ``[ev, ev, …]`` ready for the decoder. The fast cut is a guess: the last
    ``}, {`` in the buffer (the block is copied once into the chunk, the text after the cut is carried over). A
    chunk that then fails to decode goes back to :meth:`resplit`, which cuts the same text exactly (:class:`_Scan`)
    and stays exact for the rest of the file once guesses have failed :data:`limits.FAST_MISSES` times. A decodable
    chunk proves its cut: it starts at a real boundary and holds only whole top-level values, so it ends at one.

    Positions: ``buf[0]`` is the ``[``; ``buf[1]`` is byte :attr:`offset` of the decompressed file; a chunk's
    :attr:`chunk_offset` likewise; :attr:`events` counts the elements of traceEvents before the pending text (the
    caller adds each decoded chunk's count) for messages that name the event.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prefix = bytearray()
        self._key = _TopLevelKey(path)
        self.in_array = False
        self.ended = False  # the closing "]" of traceEvents was found; what follows is metadata (``after``)
        self.after = bytearray()
        self.buf = bytearray(b"[")
        self.offset = 0
        self.gap = b""  # what the last fast cut dropped between its chunk and the carry (", " and white space)
        self.exact: _Scan | None = None  # exact mode: the scan of ``buf`` so far
        self.misses = 0
        self.events = 0
        self.chunk_offset = 0
        self.chunk_starts: list[int] | None = None  # event starts of the last chunk (None: a guessed cut)

    @property
    def fast(self) -> bool:
        """Inside traceEvents and cutting by guess (the parallel path may take over the cutting)."""
        return self.in_array and not self.ended and self.exact is None

    def where(self) -> tuple[int, int, list[int]] | None:
        """(events before, byte offset, event starts) of the last chunk if it was cut exactly, else None."""
        return None if self.chunk_starts is None else (self.events, self.chunk_offset, self.chunk_starts)

    def feed(self, block: bytes | bytearray) -> bytearray | None:
        """Add a block; return ``[`` + complete events + ``]`` as a bytearray, or None."""
        if not self.in_array:
            self.prefix += block
            start = self._key.find(self.prefix)
            if start is None:
                if len(self.prefix) > limits.MAX_PREFIX:
                    raise TraceError(str(self.path), "no traceEvents array in the first 256 MB: not a Kineto trace")
                return None
            self.buf += self.prefix[start:]
            self.offset = start
            del self.prefix[start - 1 :]  # keep up to the key and colon
            self.in_array = True
        elif self.ended:
            self.after += block
            return None
        else:
            self.buf += block
        if self.exact is not None:
            return self._exact_cut()
        buf = self.buf
        last = last_event_boundary(buf, len(buf))
        if last is None:
            return None
        cut, resume = last
        self.cut_at(cut, resume, buf, len(buf))
        del buf[cut + 1 :]
        buf += b"]"
        return buf

    def cut_at(self, cut: int, resume: int, text: Any, end: int) -> None:
        """Cut by guess at the boundary (``cut``, ``resume``) of ``text[:end]`` (``[`` + the pending text + a
        block): what follows it is the new pending text. The caller makes the chunk (``text[:cut + 1]`` + ``]``)."""
        self.chunk_offset, self.chunk_starts = self.offset, None
        self.gap = bytes(text[cut + 1 : resume - 1])
        self.offset += resume - 2
        self.buf = bytearray(b"[") + text[resume - 1 : end]

    def fits_buffer(self) -> bool:
        """Cutting by guess, and ``[`` + the pending text + a block fit in a buffer of ``limits.RING_BUFFER_BYTES``
        (see :meth:`cut_in`)."""
        return self.fast and len(self.buf) + 1 + limits.BLOCK_SIZE <= limits.RING_BUFFER_BYTES

    def cut_in(self, reader: _Reader, buf: Any) -> int | None:
        """:meth:`feed` in the caller's buffer, used again for every block (the workers' shared-memory ring, or
        an in-process stream's reused buffer; :meth:`fits_buffer` must hold): ``[`` + the pending text + the next
        block read straight into ``buf``, cut by guess, the comma after the last complete event turned into ``]``.
        Returns the chunk's size (``buf[:size]``), 0 at the end of the file, or None when no event ends in the
        text yet (it all stays pending)."""
        start = len(self.buf)
        buf[:start] = self.buf
        with memoryview(buf) as view, view[start : start + limits.BLOCK_SIZE] as target:  # released even when the
            n = reader.readinto(target)  # read fails (a truncated gzip): the caller can then close ``buf``
        if not n:
            return 0
        total = start + n
        last = last_event_boundary(buf, total)
        if last is None:
            self.buf = bytearray(buf[:total])
            return None
        cut, resume = last
        self.cut_at(cut, resume, buf, total)
        buf[cut + 1] = 0x5D  # ]
        return cut + 2

    def resplit(self, failed: bytearray | memoryview) -> bytearray | None:
        """The chunk just returned did not decode: its cut was a guess that may not hold. Go back to where it
        began and cut exactly; returns the exactly cut chunk, or None when no event ends in the text yet."""
        return self.recut([(failed, self.gap)], self.chunk_offset)

    def recut(self, chunks: list[tuple[Any, bytes]], offset: int) -> bytearray | None:
        """A guessed cut did not hold, with chunks cut after it (the decode workers' ring, a worker's threads):
        ``chunks`` are that chunk and the later ones, each ``[`` + events + ``]`` with the text after its cut;
        ``offset`` is where the first began. The text from there, cut exactly (:meth:`restart`)."""
        (first, first_gap), *later = chunks
        text = bytearray(first[:-1])
        text += first_gap
        for chunk, gap in later:
            text += chunk[1:-1]
            text += gap
        text += memoryview(self.buf)[1:]
        return self.restart(text, offset)

    def restart(self, text: bytearray, offset: int) -> bytearray | None:
        """Cut ``text`` (``[`` + text from a real event boundary at byte ``offset``) exactly, from scratch."""
        self.misses += 1
        self.buf, self.offset, self.gap = text, offset, b""
        self.exact = _Scan(1)
        return self._exact_cut()

    def _exact_cut(self, final: bool = False) -> bytearray | None:
        scan = self.exact
        assert scan is not None
        buf = self.buf
        scan.run(buf)
        if scan.bad is not None:
            raise TraceError(
                str(self.path),
                f"invalid JSON in traceEvents {self.at(scan.bad, scan.starts)}: "
                "a closing bracket without an opening one",
            )
        if scan.array_end is not None:
            end = scan.array_end
            chunk = bytearray(memoryview(buf)[:end])
            chunk += b"]"
            self.after = bytearray(memoryview(buf)[end + 1 :])
            self.ended = True
            self.chunk_offset, self.chunk_starts = self.offset, scan.starts
            self.buf, self.exact = bytearray(b"["), None
            return chunk
        m = None
        for end in reversed(scan.ends):
            m = _COMMA_RE.match(buf, end)
            if m is not None:
                break
        if m is None:
            if final:
                return None
            if len(buf) > limits.MAX_PENDING:
                raise TraceError(
                    str(self.path),
                    f"invalid JSON in traceEvents {self.at(1, scan.starts)}: no end of "
                    f"an event in {limits.MAX_PENDING >> 20} MB (an unclosed string or bracket?)",
                )
            return None
        chunk = bytearray(memoryview(buf)[:end])
        chunk += b"]"
        self.chunk_offset = self.offset
        self.chunk_starts = scan.starts[: bisect.bisect_left(scan.starts, end)]
        self.offset += m.end() - 1
        self.buf = bytearray(b"[") + memoryview(buf)[m.end() :]
        self.exact = _Scan(1) if self.misses >= limits.FAST_MISSES else None
        return chunk

    def at(self, pos: int, starts: list[int], offset: int | None = None) -> str:
        """'at event N (byte B of the decompressed JSON)' for position ``pos`` of a buffer whose event starts are
        ``starts``."""
        index = max(0, bisect.bisect_right(starts, pos) - 1)
        return (
            f"at event {self.events + index:,} (byte {(self.offset if offset is None else offset) + pos - 1:,} "
            "of the decompressed JSON)"
        )

    def finish(self) -> tuple[bytearray | None, bytes]:
        """At end of input: the last events (a chunk, cut exactly, or None) and the metadata text."""
        if not self.in_array:
            text = bytes(self.prefix).strip()
            if not text:
                raise TraceError(str(self.path), "empty file")
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise TraceError(str(self.path), f"invalid JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise TraceError(
                    str(self.path), f"top-level JSON is a {type(obj).__name__}, not an object with traceEvents"
                )
            raise TraceError(str(self.path), "no traceEvents array: not a Kineto/Chrome trace")
        chunk = None
        if not self.ended:
            if self.exact is None:
                self.exact = _Scan(1)
            scan = self.exact
            scan.run(self.buf)
            if scan.array_end is None and scan.bad is None:
                raise self._unfinished(scan)
            chunk = self._exact_cut(final=True)
        return chunk, bytes(self.prefix) + b"null" + bytes(self.after)

    def _unfinished(self, scan: _Scan) -> TraceError:
        """The input ended inside traceEvents: truncated, or invalid JSON that never closes."""
        rest_from = scan.ends[-1] if scan.ends else 1
        tail = bytes(self.buf[rest_from:])
        stripped = tail.lstrip(b" \t\r\n,")
        try:
            msgspec.json.decode(b"[" + stripped)
        except msgspec.DecodeError as exc:
            if "truncated" not in str(exc):
                pos = rest_from + len(tail) - len(stripped) + max(0, (_byte_of(exc) or 1) - 1)
                where = self.at(pos, scan.starts)
                return TraceError(str(self.path), f"invalid JSON in traceEvents {where}: {_reason(exc)}")
        except (msgspec.ValidationError, RecursionError):
            pass
        return TraceError(
            str(self.path),
            f"truncated JSON: the file ends inside traceEvents "
            f"{self.at(len(self.buf), scan.starts)} (the writer may still be running, or was killed)",
        )
