"""The docs cannot go stale: docs/commands.md is what the commands' --help says, every option has a help text, the
README shows every main command and stays short, every relative link resolves, and docs/schema.md names every
column."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))

import commands_doc  # noqa: E402  # .ci/commands_doc.py

from k25trace.cli import cli  # noqa: E402


def test_the_command_reference_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "commands_doc.py"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_every_command_and_option_has_a_help_text() -> None:
    missing = []
    for path, command in commands_doc._walk(cli, ["k25trace"]):
        if not (command.help or command.short_help):
            missing.append(" ".join(path))
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden and not param.help and param.name != "help":
                missing.append(f"{' '.join(path)} {'/'.join(param.opts)}")
    assert missing == []


def test_the_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch) -> None:
    """The positive control: a page missing one option is called stale."""
    page = tmp_path / "commands.md"
    page.write_text(commands_doc.render().replace("--top", "--t0p", 1))
    monkeypatch.setattr(commands_doc, "PAGE", page)
    monkeypatch.setattr(commands_doc, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["commands_doc.py", "--check"])
    assert commands_doc.main() == 1


def test_the_readme_shows_every_main_command() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("load", "report", "compare", "sql", "tui", "html", "export", "capture", "demo"):
        assert f"k25trace {name}" in readme, name


# ---- links, length and width, the CI command, the schema page ------------------------------------------------

DOCS = ROOT / "docs"
README_MAX_LINES = 220
CODE_WIDTH = 120
_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_ANCHOR_TAG = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The page without its fenced code blocks and inline code, where a `[x](y)` is not a link."""
    kept, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def _anchors(text: str) -> set[str]:
    """The anchors a page offers: GitHub's slug of every heading (with -1, -2 for repeats) and every <a id>."""
    found: set[str] = set(_ANCHOR_TAG.findall(text))
    seen: dict[str, int] = {}
    for line in _prose(text.replace("`", "")).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of a markdown page whose file (or heading anchor) does not exist."""
    problems = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.exists():
            problems.append(f"{page.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text(encoding="utf-8")):
            problems.append(f"{page.name}: {target} (no such heading)")
    return problems


def _ci_command() -> str:
    """The command line .ci/run runs: its one line that starts with the install."""
    return next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("python3 -m pip"))


def readme_problems(text: str, allowed_wide: str) -> list[str]:
    """What makes a README too long to read in two minutes, or a code line too wide for a terminal."""
    lines = text.splitlines()
    problems = [f"{len(lines)} lines (at most {README_MAX_LINES})"] if len(lines) > README_MAX_LINES else []
    fenced = False
    for number, line in enumerate(lines, 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif fenced and len(line) > CODE_WIDTH and line != allowed_wide:
            problems.append(f"line {number}: {len(line)} columns in a code block (at most {CODE_WIDTH})")
    return problems


def test_every_relative_link_points_to_a_file_that_exists() -> None:
    assert len(_pages()) >= 8
    assert [problem for page in _pages() for problem in broken_links(page)] == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The positive control: a missing file, a missing heading and a link in a code block (not a link)."""
    (tmp_path / "there.md").write_text("# A heading: `with code`\n\n## Again\n## Again\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading-with-code) [ok](there.md#again-1) [ok](#top)\n"
        "# Top\n[gone](gone.md) [bad](there.md#nope) [web](https://example.com/x.md)\n"
        "```\n[not a link](nowhere.md)\n```\n`[nor](this.md)`\n"
    )
    assert broken_links(page) == ["page.md: gone.md (no such file)", "page.md: there.md#nope (no such heading)"]


def test_the_readme_is_short_and_its_code_fits_a_terminal() -> None:
    assert readme_problems((ROOT / "README.md").read_text(encoding="utf-8"), _ci_command()) == []


def test_a_long_readme_or_a_wide_code_line_is_found() -> None:
    """The positive control: too many lines, and a wide line inside a code block (the same line outside is prose)."""
    wide = "x" * (CODE_WIDTH + 1)
    text = "\n".join([wide, "```sh", "short", wide, "```", *["line"] * README_MAX_LINES])
    assert readme_problems(text, "") == [
        f"{README_MAX_LINES + 5} lines (at most {README_MAX_LINES})",
        f"line 4: {CODE_WIDTH + 1} columns in a code block (at most {CODE_WIDTH})",
    ]
    assert readme_problems("```\n" + wide + "\n```", wide) == []  # the CI command is the one exception


def test_the_readme_test_command_is_what_ci_runs() -> None:
    assert f"```sh\n{_ci_command()}\n```" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```sh\npython3 -m pip install . && k25trace demo\n```" in (ROOT / "README.md").read_text(encoding="utf-8")


def schema_page_misses(page_text: str) -> list[str]:
    """Every table, view and column of a new database that the schema page does not name in backticks."""
    from k25trace import db

    con = db.connect(None)
    columns = con.execute(
        "select table_name, column_name from information_schema.columns where table_schema = 'main' order by all"
    ).fetchall()
    con.close()
    named = set(re.findall(r"`([^`]+)`", page_text))
    named |= {part for name in named for part in re.split(r"[\s.,()=|/]+", name)}  # `traces.rank_source`, `a = b`
    missing = sorted({table for table, _ in columns} - named)
    missing += [f"{table}.{column}" for table, column in columns if column not in named]
    return missing


def test_the_schema_page_names_every_table_and_column() -> None:
    assert schema_page_misses((DOCS / "schema.md").read_text(encoding="utf-8")) == []


def test_a_column_missing_from_the_schema_page_is_found() -> None:
    """The positive control: the page without one column's name."""
    text = (DOCS / "schema.md").read_text(encoding="utf-8").replace("far_activities", "far activities")
    assert schema_page_misses(text) == ["steps.far_activities"]


def test_the_readme_shows_the_real_demo_output(tmp_path: Path) -> None:
    """Every line of the README's demo block that is not a trim mark ("…") or a shortened path is a line that
    `k25trace demo` prints at 120 columns today: the README cannot show an output the tool no longer gives."""
    import os

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- demo output:", 1)[1].split("<!-- end of demo output -->", 1)[0]
    shown = block.split("```text\n", 1)[1].split("\n```", 1)[0].split("\n")
    kept = [line for line in shown if line and "…" not in line and not line.startswith("$ ")]
    assert len(kept) >= 30, "the demo block lost its output"
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-m", "k25trace", "demo", "--db", str(tmp_path / "demo.duckdb")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    printed = {line.rstrip() for line in (done.stdout + done.stderr).split("\n")}
    missing = [line for line in kept if line.rstrip() not in printed]
    assert missing == [], "README demo lines that `k25trace demo` no longer prints (paste a fresh run)"
