"""Issue 34, item 1: no value from a database (categories, kernel names, device and run names, file names) or from
the command line (``--title``, the database's own name) can put markup into the HTML page.

A real two-rank trace (``tests/data/h200x2-decode-loop/eager``) is loaded from a folder whose name is hostile, then
the database is edited with plain SQL the way a database someone sends could be: categories, kernel names, device
names, run labels, file names, capture level and step markers hold markup that breaks out of text, of single- and
double-quoted attributes, of an SVG ``<title>`` and of a class list. Each of the three page kinds (``html``,
``html --vs``, ``html --a/--b``) is opened in headless Chromium with a ``pwn()`` probe installed before the page's own
script: the page must call it never, hold exactly one ``<script>`` (its own), no element with an ``on*`` attribute,
no ``img``/``iframe``/``object``/``embed``, request nothing but itself, and show every hostile value literally.

Positive controls prove that the check can fail: the same page with the escaping undone (each escaped payload
replaced by the raw one) calls ``pwn()`` for every field, and a page drawn with the old class-name function
(``"c-" + category``) calls it for the category, as the page of the issue did.
"""

from __future__ import annotations

import csv
import html as stdlib_html
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from chromium import Browser, chromium_path
from k25trace import db
from k25trace.cli import cli
from k25trace.render import html as k25html
from k25trace.render.html import markup as k25html_markup

TRACES = Path(__file__).parent / "data" / "h200x2-decode-loop" / "eager"


def payload(field: str, slash: bool = True) -> str:
    """Markup that runs ``pwn(field)`` from text, from a "…" or '…' attribute, from a class list, from an SVG
    title; with ``slash``, also closing tags (``</title>``, ``</script>``), which a file name cannot hold."""
    p = f"{field}\"'><img src=x onerror=pwn('{field}')><svg onload=pwn('{field}')> x"
    if slash:
        p += f"</title></textarea></style><script>pwn('{field}')</script>&amp;"
    return p


FILE_FIELDS = {"run": payload("run", slash=False), "dbname": payload("dbname", slash=False)}
DB_FIELDS = {
    name: payload(name)
    for name in ("category", "category2", "kernel", "device", "label", "level", "marker", "trace_file")
}
TITLE = payload("title")
ALL = {**FILE_FIELDS, **DB_FIELDS, "title": TITLE}

PROBE = "window.__pwned = []; window.pwn = function (x) { window.__pwned.push(String(x)); };"


def hostile_database(base: Path, name: str) -> Path:
    """The eager TP2 run loaded from a hostile folder into a database with a hostile name, then edited."""
    folder = base / FILE_FIELDS["run"]
    shutil.copytree(TRACES, folder)
    path = base / (FILE_FIELDS["dbname"] + name + ".duckdb")
    result = CliRunner().invoke(cli, ["load", str(folder), "--db", str(path), "-q"])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(path))
    tables = [
        t
        for (t,) in con.execute(
            "select table_name from duckdb_columns() where column_name = 'category' and not internal "
            "and table_name in (select table_name from duckdb_tables())"
        ).fetchall()
    ]
    for table in tables:  # the two largest categories: gemm (kernels, breakdown, timeline) and allreduce (comm)
        con.execute(f'update "{table}" set category = ? where category = ?', [DB_FIELDS["category"], "gemm"])
        con.execute(f'update "{table}" set category = ? where category = ?', [DB_FIELDS["category2"], "allreduce"])
    con.execute(
        "update kernel_names set short_name = ? || short_name, name = ? || name",
        [DB_FIELDS["kernel"], DB_FIELDS["kernel"]],
    )
    con.execute(
        "update traces set device_name = ?, file_name = ?, level = ?",
        [DB_FIELDS["device"], DB_FIELDS["trace_file"], DB_FIELDS["level"]],
    )
    con.execute(
        "update trace_runs set run_label = ?, group_label = ?, file_name = ?",
        [DB_FIELDS["label"], DB_FIELDS["label"], DB_FIELDS["trace_file"]],
    )
    con.execute("update steps set marker = ?", [DB_FIELDS["marker"]])
    assert con.execute("select count(*) from gpu_events where category = ?", [DB_FIELDS["category"]]).fetchone()[0]
    con.close()
    return path


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, set[str]]]:
    """The three page kinds, each with the fields whose values it shows."""
    base = tmp_path_factory.mktemp("hostile")
    (base / "a").mkdir()
    (base / "b").mkdir()
    a, b = hostile_database(base / "a", "A"), hostile_database(base / "b", "B")
    out: dict[str, tuple[Path, set[str]]] = {}
    kinds = {
        "html": ([], {"run", "dbname", "category", "category2", "kernel", "device", "label", "title"}),
        "vs": (["--vs", str(b)], {"dbname", "category", "kernel", "label", "title"}),
        "ab": (["--a", "trace=1", "--b", "trace=2"], {"dbname", "category", "kernel", "label", "title"}),
    }
    for kind, (extra, fields) in kinds.items():
        page = base / f"{kind}.html"
        result = CliRunner().invoke(cli, ["html", "--db", str(a), "-o", str(page), "--title", TITLE, *extra])
        assert result.exit_code == 0, result.output
        out[kind] = (page, fields)
    return out


class Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))


def test_the_page_source_holds_no_foreign_markup(pages: dict[str, tuple[Path, set[str]]]) -> None:
    """Parsed as HTML (Python's parser, not k25trace's): one script, no event handler, no image, every class
    token a plain ``[A-Za-z0-9_-]`` word, and every hostile value present only escaped."""
    for kind, (page, fields) in pages.items():
        text = page.read_text(encoding="utf-8")
        parser = Elements()
        parser.feed(text)
        tags = [t for t, _ in parser.tags]
        assert tags.count("script") == 1, kind
        assert not {"img", "iframe", "object", "embed"} & set(tags), kind
        assert not [(t, k) for t, a in parser.tags for k in a if k.startswith("on")], kind
        for t, a in parser.tags:
            for token in a.get("class", "").split():
                assert re.fullmatch(r"[A-Za-z0-9_-]+", token), (kind, t, token)
        for field in fields:
            assert stdlib_html.escape(ALL[field], quote=True)[:60] in text, (kind, field)  # (long names are cut)
            assert ALL[field][:25] not in text, (kind, field)


def _pwned(browser: Browser, url: str) -> tuple[list[str], dict]:
    browser.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE)
    browser.open(url)
    browser.evaluate("new Promise(r => setTimeout(r, 300))", await_promise=True)  # let onerror/onload handlers fire
    pwned = browser.evaluate("window.__pwned")
    dom = browser.evaluate(
        "({scripts: document.scripts.length,"
        " handlers: Array.from(document.querySelectorAll('*')).flatMap(e => Array.from(e.attributes)"
        "   .filter(a => a.name.startsWith('on')).map(a => e.tagName + ' ' + a.name)),"
        " foreign: document.querySelectorAll('img, iframe, object, embed').length,"
        " text: document.body.innerText})"
    )
    return sorted(set(pwned)), dom


@pytest.mark.skipif(
    chromium_path() is None, reason="needs a Chromium browser on PATH (Debian: apt-get install chromium)"
)
def test_no_page_runs_a_script_it_did_not_ship(
    pages: dict[str, tuple[Path, set[str]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Browser() as browser:
        for kind, (page, fields) in pages.items():
            pwned, dom = _pwned(browser, page.as_uri())
            assert pwned == [], kind
            assert dom["scripts"] == 1 and dom["handlers"] == [] and dom["foreign"] == 0, (kind, dom["handlers"])
            assert browser.requests() == [page.as_uri()], kind
            for field in fields & {"category", "kernel", "device", "label", "title"}:  # shown as text, literally
                assert ALL[field][:45] in dom["text"], (kind, field)
            assert browser.evaluate("document.title") == TITLE, kind

            # positive control 1: the same page with every escaped payload put back raw runs every field's script
            text = page.read_text(encoding="utf-8")
            for value in ALL.values():
                head = value[: value.index(">", value.index("<img")) + 1]  # its <img …>: short enough to survive cuts
                text = text.replace(stdlib_html.escape(value, quote=True), value)
                text = text.replace(stdlib_html.escape(head, quote=True), head)
            control = tmp_path / f"unescaped-{kind}.html"
            control.write_text(text, encoding="utf-8")
            pwned, _ = _pwned(browser, control.as_uri())
            assert set(pwned) >= fields, (kind, fields - set(pwned))

        # positive control 2: the class name of the issue ("c-" + the raw category) runs the category's script
        source = next(p for p, _ in [pages["html"]])
        db_path = next(source.parent.glob("a/*.duckdb"))
        monkeypatch.setattr(
            k25html_markup, "css_class", lambda c: "c-" + (c or "other").replace(":", "-").replace("_", "-")
        )
        con = db.connect(db_path, read_only=True)
        old, _ = k25html.build(con, source=db_path.name)
        con.close()
        control = tmp_path / "old-class.html"
        control.write_text(old, encoding="utf-8")
        pwned, _ = _pwned(browser, control.as_uri())
        assert "category" in pwned


def test_a_category_gets_a_safe_distinct_class_token() -> None:
    """Built-in categories keep their readable class; any other name becomes one ``[a-z0-9-]`` token, distinct
    for distinct names (even names that slug alike), the same for the same name."""
    assert k25html.css_class("attention") == "c-attention"
    assert k25html.css_class("idle:host") == "c-idle-host"
    assert k25html.css_class("comm_other") == "c-comm-other"
    names = ['x" onmouseover="alert(1)', "my_cat", "my-cat", "My Cat", "", "<>", "é", "a" * 500, "c-gemm", "gemm "]
    tokens = [k25html.css_class(n) for n in names]
    assert all(re.fullmatch(r"c-[a-z0-9-]+", t) and len(t) < 48 for t in tokens), tokens
    assert len(set(tokens)) == len(names)
    assert tokens == [k25html.css_class(n) for n in names]


ISSUE_CATEGORY = '"><img src=x onerror="pwn(\'rules\')">'
"""The category of the issue, as a rules file gives it."""


def test_the_category_of_the_issue_from_classify_rules(tmp_path: Path) -> None:
    """`classify --rules FILE` with the issue's category, then `html`: the name is in the page only escaped and
    no class attribute holds anything but plain tokens (in Chromium too, when there is one)."""
    path = tmp_path / "run.duckdb"
    trace = next((Path(__file__).parent / "data" / "h200-decode-loop").glob("*.pt.trace.json.gz"))
    assert CliRunner().invoke(cli, ["load", str(trace), "--db", str(path), "-q"]).exit_code == 0
    rules = tmp_path / "rules.csv"
    with rules.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["category", "kind", "name_pattern", "collective_pattern", "note"])
        w.writerow([ISSUE_CATEGORY, "kernel", ".", "", ""])
    result = CliRunner().invoke(cli, ["classify", "--db", str(path), "--rules", str(rules)])
    assert result.exit_code == 0, result.output
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("select count(*) from gpu_events where category = ?", [ISSUE_CATEGORY]).fetchone()[0] > 0
    con.close()
    page = tmp_path / "run.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(path), "-o", str(page)])
    assert result.exit_code == 0, result.output
    text = page.read_text(encoding="utf-8")
    assert ISSUE_CATEGORY not in text and stdlib_html.escape(ISSUE_CATEGORY) in text
    parser = Elements()
    parser.feed(text)
    assert not [t for t, _ in parser.tags if t == "img"]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", tok) for _, a in parser.tags for tok in a.get("class", "").split())
    if chromium_path() is not None:
        with Browser() as browser:
            pwned, dom = _pwned(browser, page.as_uri())
            assert pwned == [] and dom["foreign"] == 0
            assert ISSUE_CATEGORY in dom["text"]
