"""Writing a command's output without harming the user's files (``html -o``, ``export perfetto -o``, ``export
parquet DIR``).

- An output that is one of the command's inputs (the database, a trace file it holds, a capture manifest or model
  config it was loaded with, the other database of a comparison) is refused: compared by device and inode
  (``samefile``) when it exists, else by resolved path, so a symbolic link, a hard link or ``./`` spelling does not
  get past it.
- A regular file is replaced atomically (a temporary file beside it, renamed over it; its permissions kept); a new
  file is created the same way with the permissions ``open()`` would give it.
- A symbolic link is written through: its target is replaced atomically, the link stays.
- A FIFO or a character device (``/dev/null``, ``/dev/stdout``, a terminal) is opened and streamed to, never
  replaced by a regular file; a directory, block device or socket is refused.
- A missing or unwritable folder, or any other failure of the file system, is one :class:`K25Error` naming the path.
- :func:`terminate_raises`: while a command writes, SIGTERM raises :class:`Terminated` (like Ctrl-C raises
  ``KeyboardInterrupt``), so that the ``finally`` clauses that remove temporary files run on every exit path.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Iterable, Iterator

from k25trace.errors import K25Error


class Terminated(BaseException):
    """SIGTERM arrived while a command was writing (raised by the handler of :func:`terminate_raises`)."""


_terminated: list[int] = []


def was_terminated() -> bool:
    """Did SIGTERM arrive under :func:`terminate_raises`? (DuckDB turns an exception raised by a signal handler
    during a query into ``RuntimeError: Query interrupted``: this tells SIGTERM from Ctrl-C afterwards.)"""
    return bool(_terminated)


@contextmanager
def terminate_raises() -> Iterator[None]:
    """For the duration, SIGTERM raises :class:`Terminated` in the main thread; the previous handler is restored
    after. Outside the main thread (where no handler can be installed) it does nothing."""

    def handler(signum: int, frame: FrameType | None) -> None:
        _terminated.append(signum)
        if len(_terminated) == 1:  # once: a second SIGTERM must not cut short the clean-up the first one started
            raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def shown(path: str | os.PathLike[str]) -> str:
    """A path as printable text (bytes that are not UTF-8 as ``\\xHH``)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _os_error(path: str | os.PathLike[str], exc: OSError, doing: str = "cannot write") -> K25Error:
    problem = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        problem = "no such folder" if not Path(path).parent.exists() else problem
    return K25Error(f"{shown(path)}: {doing}: {problem}")


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Do two paths name one file? By device and inode when both exist, else by their resolved paths."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def check_not_input(
    out: str | os.PathLike[str], inputs: Iterable[tuple[str, str | os.PathLike[str]]], option: str = "-o"
) -> None:
    """Refuse an output path that names one of the command's inputs, given as (what it is, path) pairs."""
    if str(out) == "-":
        return
    for what, path in inputs:
        if path and same_file(out, path):
            raise K25Error(
                f"{option} {shown(out)}: that is {what} ({shown(path)}), an input of this command; "
                "refusing to write over it: choose another output name"
            )


def write_output(out: Path, data: bytes, *, inputs: Iterable[tuple[str, str | os.PathLike[str]]] = ()) -> None:
    """Write ``data`` to ``out`` (``-``: stdout) as the module docstring says."""
    if str(out) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    out = out.expanduser()
    check_not_input(out, inputs)
    target = out
    try:
        st = out.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(out, exc) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        try:
            st = out.stat()  # what the link points at
        except FileNotFoundError:
            st = None  # a dangling link: its target is created
        except OSError as exc:
            raise _os_error(out, exc) from None
        if st is None or stat.S_ISREG(st.st_mode):
            target = Path(os.path.realpath(out))  # replaced atomically; the link stays
    if st is not None and (stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        _stream(out, data)  # opened through the path as given: /dev/stdout's /proc/self/fd/1 link included
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a special file (not a FIFO or character device)"
        raise K25Error(f"{shown(out)}: cannot write: it is {kind}")
    _replace_atomically(out, target, data, None if st is None else stat.S_IMODE(st.st_mode))


def _stream(out: Path, data: bytes) -> None:
    try:
        with open(out, "wb", buffering=0) as fh:
            view = memoryview(data)
            while view:
                view = view[fh.write(view) or 0 :]
    except BrokenPipeError:
        raise K25Error(f"{shown(out)}: the reader closed it before everything was written") from None
    except OSError as exc:
        raise _os_error(out, exc) from None


def _replace_atomically(out: Path, target: Path, data: bytes, mode: int | None) -> None:
    parent = target.parent
    if not parent.is_dir():
        raise K25Error(
            f"{shown(out)}: cannot write: no such folder {shown(parent)}"
            if not parent.exists()
            else f"{shown(out)}: cannot write: {shown(parent)} is not a folder"
        )
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise _os_error(out, exc) from None
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # as open() would create it (mkstemp makes it private): a file to share
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _os_error(out, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(out_dir: Path) -> None:
    """An export folder: created (with its parents) when missing; a K25Error naming it when it cannot be, when it
    is not a folder, or when it cannot be written."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise K25Error(f"{shown(out_dir)}: cannot export there: it is not a folder") from None
    except OSError as exc:
        raise _os_error(out_dir, exc, "cannot create the folder") from None
    if not out_dir.is_dir():
        raise K25Error(f"{shown(out_dir)}: cannot export there: it is not a folder")
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise K25Error(f"{shown(out_dir)}: cannot write into the folder: permission denied")
