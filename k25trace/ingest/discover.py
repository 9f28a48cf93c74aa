"""Finding trace files: directories searched for ``*.pt.trace.json[.gz]``, front-end and graph-capture traces
set aside, ``k25trace capture`` manifests attached to their files."""

from __future__ import annotations

import os
from pathlib import Path

from k25trace.capture.files import is_frontend_name, is_trace_name  # one definition, shared with capture
from k25trace.ingest.model import TraceFile

# ---------------------------------------------------------------------------------------------------------------
# Finding files


def discover(paths: list[Path], *, include_frontend: bool = False) -> tuple[list[TraceFile], list[str], list[str]]:
    """Expand PATH arguments into trace files. Returns (files, notes, errors).

    Directories are searched recursively for ``*.pt.trace.json[.gz]``; other ``*.json[.gz]`` files only when named.
    Front-end (``*.async_llm.*``) traces are skipped unless ``include_frontend``; graph-capture traces in
    ``capture_traces/`` folders are skipped unless named. A ``k25trace capture`` directory (``manifest.json``)
    attaches its level and concurrency to each file.
    """
    files: list[TraceFile] = []
    notes: list[str] = []
    errors: list[str] = []
    seen: set[Path] = set()

    def add(tf: TraceFile) -> None:
        real = tf.path.resolve()
        if real not in seen:
            seen.add(real)
            files.append(tf)

    for arg in paths:
        if not arg.exists():
            errors.append(f"{arg}: no such file or directory")
            continue
        if arg.is_file():
            if is_duckdb_file(arg):
                errors.append(f"{arg}: a DuckDB database, not a trace file; name a database with --db ({arg} is one)")
                continue
            add(TraceFile(arg, *_capture_info_for(arg, notes)[:3]))
            continue
        found = _walk_traces(arg, errors, notes)
        skipped_frontend = [p for p in found if is_frontend_name(p.name)]
        skipped_capture = [p for p in found if "capture_traces" in p.relative_to(arg).parts]
        if skipped_frontend and not include_frontend:
            notes.append(
                f"{arg}: skipped {len(skipped_frontend)} front-end (*.async_llm.*) trace(s); "
                "--include-frontend loads them"
            )
        if skipped_capture:
            notes.append(
                f"{arg}: skipped {len(skipped_capture)} graph-capture trace(s) in capture_traces/; name them to load"
            )
        kept = [p for p in found if p not in skipped_capture and (include_frontend or p not in skipped_frontend)]
        if not kept:
            errors.append(f"{arg}: no *.pt.trace.json[.gz] files found" + _other_json_hint(arg, found))
        for p in kept:
            info = _capture_info_for(p, notes)
            if info[3] is False:
                notes.append(f"{p}: skipped: the capture manifest marks it invalid ({info[4]})")
                continue
            add(TraceFile(p, *info[:3]))
    return files, notes, errors


def _other_json_hint(folder: Path, found: list[Path]) -> str:
    """What else a folder without trace files holds that may be traces: other ``*.json[.gz]`` files, to name."""
    others = sorted(
        p for p in folder.rglob("*.json*") if p.name.endswith((".json", ".json.gz")) and p not in found and p.is_file()
    )
    if not others:
        return ""
    shown = ", ".join(str(p.relative_to(folder)) for p in others[:3]) + (", …" if len(others) > 3 else "")
    return f"; it holds {len(others)} other .json[.gz] file(s) ({shown}): name them to load them"


def is_duckdb_file(path: Path) -> bool:
    """Whether a file starts with DuckDB's header (``DUCK`` at byte 8, as ``db.DUCKDB_MAGIC``): a database
    named where a trace is expected."""
    try:
        with path.open("rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def _walk_traces(root: Path, errors: list[str], notes: list[str] | None = None) -> list[Path]:
    """Trace files under a directory, recursively. Symlinked folders are followed (each real folder once: a link
    back to a folder already searched, a symlink loop, is skipped with a note); a folder that cannot be read is an
    error (its traces would be missing without a word)."""
    found: list[Path] = []
    seen: dict[tuple[int, int], str] = {}  # (device, inode) of each folder searched -> the path it was searched as

    def unreadable(exc: OSError) -> None:
        errors.append(f"{exc.filename}: cannot read directory: {exc.strerror}; trace files in it are not loaded")

    try:
        st = os.stat(root)
        seen[(st.st_dev, st.st_ino)] = str(root)
    except OSError:
        pass
    for folder, dirs, names in os.walk(root, onerror=unreadable, followlinks=True):
        kept = []
        for name in sorted(dirs):
            sub = os.path.join(folder, name)
            try:
                st = os.stat(sub)
            except OSError as exc:  # a link to a folder that went away
                errors.append(f"{sub}: cannot read directory: {exc.strerror}; trace files in it are not loaded")
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen:
                if notes is not None:
                    notes.append(
                        f"{sub}: skipped: the same folder as {seen[key]}, already searched (a symlink loop "
                        "or a second link to it)"
                    )
                continue
            seen[key] = sub
            kept.append(name)
        dirs[:] = kept
        for name in names:
            if is_trace_name(name):
                path = Path(folder) / name
                if path.is_file():
                    found.append(path)
    return sorted(found)


def _capture_info_for(
    path: Path, notes: list[str] | None = None
) -> tuple[Path | None, str | None, int | None, bool | None, str | None]:
    """If ``path`` lies in a ``k25trace capture`` directory: (capture dir, level, concurrency, valid, problem).

    A damaged manifest is read as far as it is sound (``capture.manifest.check_manifest``); what is wrong
    goes into ``notes`` once; when nothing in it can be used, its traces load as plain files."""
    from k25trace.capture.manifest import check_manifest

    for parent in list(path.resolve().parents)[:3]:
        if not (parent / "manifest.json").is_file():
            continue
        m = check_manifest(parent)
        if m is None:  # another tool's manifest.json
            continue
        if m.problems and notes is not None:
            note = f"{m.path}: damaged capture manifest: {m.summary()}; " + (
                "its traces load as plain files (no level, no request statistics)"
                if not m.usable
                else "the damaged entries are ignored"
            )
            if note not in notes:
                notes.append(note)
        if not m.usable:
            return None, None, None, None, None
        level, entry = m.locate(path.resolve().relative_to(parent).as_posix())
        if level is None:
            return parent, None, None, None, None
        return parent, level.name, level.concurrency, entry.valid if entry else None, entry.problem if entry else None
    return None, None, None, None, None


def file_size(path: Path) -> int:
    """The file's size on disk (0 when it cannot be read: the load reports that file)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
