"""Classify GPU activities into categories (allreduce, marlin_gemm, attention, …) with ordered rules kept as data.

The rules are ``queries/kernel_rules.csv``: one rule per line, columns
``category,kind,name_pattern,collective_pattern,note``. A rule matches an activity when every non-empty field
matches (``kind`` exactly, the patterns as RE2 regular expressions searched anywhere in the full demangled
name / in the NCCL ``Collective name`` arg). Rules are tried in file order; the first match wins; no match is
``other``. A user rules file (same columns) is tried *before* the built-in rules, so it can both extend and
override them; ``replace=True`` uses the user's rules alone.

Matching runs in SQL (``queries/kernel_classes.sql``) over the distinct (name, kind, collective) keys, not
per event, and writes the category into ``gpu_events``; the loader runs the same query for each new trace.
:func:`classify_names` (public API) answers the same question for bare names, without a trace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from k25trace.csvfile import read_commented_csv
from k25trace.db import ensure_schema, queries_dir, query_dicts, run_query
from k25trace.errors import K25Error, QueryError
from k25trace.names import short_name

RULE_COLUMNS = ("category", "kind", "name_pattern", "collective_pattern", "note")
KINDS = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class Rule:
    rule_id: int
    category: str
    kind: str | None
    name_pattern: str | None
    collective_pattern: str | None
    note: str
    source: str


def builtin_rules_path() -> Path:
    return queries_dir() / "kernel_rules.csv"


def read_rules(path: Path, *, first_id: int = 1, source: str | None = None) -> list[Rule]:
    """Parse a rules CSV; errors name the file and line."""
    source = source or path.name
    table = read_commented_csv(
        path,
        columns=RULE_COLUMNS,
        required="category",
        unreadable="cannot read rules file",
        no_header="a rules file needs a header line with columns",
        noun="rules",
    )
    rules: list[Rule] = []
    for line in table.rows:
        row, number = line.fields, line.number
        if line.extra:
            raise K25Error(
                f"{path}: rule {number} has {len(table.columns) + len(line.extra)} fields, expected "
                f"{len(table.columns)}: quote patterns that contain commas"
            )
        category = (row.get("category") or "").strip()
        kind = (row.get("kind") or "").strip() or None
        name_pattern = (row.get("name_pattern") or "") or None
        collective_pattern = (row.get("collective_pattern") or "") or None
        if not category:
            raise K25Error(f"{path}: rule {number} has no category")
        if kind is not None and kind not in KINDS:
            raise K25Error(f"{path}: rule {number} ({category}): kind must be one of {KINDS}, not {kind!r}")
        if kind is None and name_pattern is None and collective_pattern is None:
            raise K25Error(f"{path}: rule {number} ({category}) matches everything; give a kind or a pattern")
        rules.append(
            Rule(
                first_id + len(rules),
                category,
                kind,
                name_pattern,
                collective_pattern,
                (row.get("note") or "").strip(),
                source,
            )
        )
    return rules


def load_rules(user_rules: Path | None = None, *, replace: bool = False) -> list[Rule]:
    """The rule list in matching order: the user's rules first (if any), then the built-in ones."""
    rules: list[Rule] = []
    if user_rules is not None:
        rules = read_rules(user_rules, source=f"user:{user_rules.name}")
    if not replace:
        rules += read_rules(builtin_rules_path(), first_id=len(rules) + 1, source="builtin")
    return rules


def rules_installed(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the database holds classification rules (a new one holds none until its first load)."""
    return bool(run_query(con, "kernel_rules_count").fetchall()[0][0])


def install_rules(con: duckdb.DuckDBPyConnection, rules: list[Rule]) -> None:
    """Replace the rows of ``kernel_rules`` (``queries/kernel_rules_install.sql``), after checking that every pattern
    compiles in DuckDB's regex engine (``queries/kernel_rule_check.sql``)."""
    for rule in rules:
        for pattern in (rule.name_pattern, rule.collective_pattern):
            if pattern is None:
                continue
            try:
                run_query(con, "kernel_rule_check", {"pattern": pattern}).fetchall()
            except QueryError as exc:
                raise K25Error(
                    f"rule {rule.rule_id} ({rule.source}, {rule.category}): bad pattern {pattern!r}: {exc.message}"
                ) from exc
    run_query(
        con,
        "kernel_rules_install",
        {
            "rules": [
                {
                    "rule_id": r.rule_id,
                    "category": r.category,
                    "kind": r.kind,
                    "name_pattern": r.name_pattern,
                    "collective_pattern": r.collective_pattern,
                    "note": r.note,
                    "source": r.source,
                }
                for r in rules
            ]
        },
    )


def classify(con: duckdb.DuckDBPyConnection, user_rules: Path | None = None, *, replace: bool = False) -> None:
    """Classify every GPU activity in the database (idempotent; re-run after changing rules)."""
    install_rules(con, load_rules(user_rules, replace=replace))
    run_query(con, "kernel_classes_reset")
    classify_trace(con, None)


def classify_trace(con: duckdb.DuckDBPyConnection, trace_id: int | None) -> None:
    """Classify the kernel keys of one trace (None: every trace) that are not classified yet, then write its GPU
    activities' categories."""
    run_query(con, "kernel_class_keys", {"trace_id": trace_id})
    run_query(con, "kernel_classes")
    run_query(con, "kernel_categories_set", {"trace_id": trace_id})


def classify_staged(con: duckdb.DuckDBPyConnection) -> None:
    """Classify the kernel keys of a file's staged GPU activities (``_stage_gpu``) that are not classified yet: a
    file stored beside others writes its classes first, in a transaction of its own (:mod:`k25trace.ingest`)."""
    run_query(con, "kernel_class_keys_staged")
    run_query(con, "kernel_classes")


def classify_names(
    keys: list[tuple[str, str, str | None]] | list[str],
    user_rules: Path | None = None,
    *,
    replace: bool = False,
) -> list[dict[str, object]]:
    """Classify kernel names without a trace (public API): what category would these names get?

    ``keys`` are names (taken as kind ``kernel``, no collective) or ``(name, kind, collective_name)`` tuples.
    ``user_rules`` and ``replace`` are those of :func:`load_rules`. Returns one dict per key, in order, with the
    keys ``name``, ``kind``, ``collective_name``, ``category`` (``'other'`` when no rule matched) and ``rule_id``
    (``None`` then). Runs the same SQL as :func:`classify` (``queries/kernel_classes.sql``) on a scratch in-memory
    database, so the answer is the one a loaded trace would get. Example::

        >>> classify_names(
        ...     ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"])[0]["category"]
        'allreduce'
    """
    norm: list[tuple[str, str, str | None]] = [
        (k, "kernel", None) if isinstance(k, str) else tuple(k)  # type: ignore[misc]
        for k in keys
    ]
    names = sorted({k[0] for k in norm})
    name_ids = {n: i for i, n in enumerate(names, start=1)}
    con = duckdb.connect(":memory:")
    try:
        ensure_schema(con)
        run_query(
            con,
            "kernel_names_stage",
            {
                "names": [{"name_id": i, "name": n, "short_name": short_name(n)} for n, i in name_ids.items()],
                "keys": [
                    {"event_id": i, "kind": kind, "name_id": name_ids[name], "collective_name": coll}
                    for i, (name, kind, coll) in enumerate(norm)
                ],
            },
        )
        classify(con, user_rules, replace=replace)
        got = {
            (r["name"], r["kind"], r["collective_name"]): (r["category"], r["rule_id"])
            for r in query_dicts(con, "kernel_rule_matches")
        }
    finally:
        con.close()
    return [
        {"name": n, "kind": k, "collective_name": c, "category": got[(n, k, c)][0], "rule_id": got[(n, k, c)][1]}
        for (n, k, c) in norm
    ]
