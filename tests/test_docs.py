"""The docs cannot go stale: docs/commands.md is what the commands' --help says, every option has a help text,
and the README shows every main command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))

import commands_doc  # noqa: E402  # .ci/commands_doc.py

from k25trace.cli import cli  # noqa: E402


def test_the_command_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / ".ci" / "commands_doc.py"), "--check"], capture_output=True,
                          text=True)
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
