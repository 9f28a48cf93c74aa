"""Write (or check) docs/commands.md, the command reference, from the commands' own ``--help``.

    python3 .ci/commands_doc.py           # rewrite docs/commands.md
    python3 .ci/commands_doc.py --check   # exit 1, naming what differs, when docs/commands.md is stale

Every command and sub-command of ``k25trace`` gets a section with its ``--help`` text, rendered by click at 100
columns with no terminal styling; tests/test_docs.py runs ``--check``, so an option added without regenerating the
page fails CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "commands.md"
WIDTH = 100
HEAD = """# Command reference

Generated from each command's `--help` by `python3 .ci/commands_doc.py` (a test checks it is current).
The [README](../README.md) shows the main commands with an example each; this page lists every option.

"""


def _walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found += _walk(sub, [*path, name])
    return found


def _help(path: list[str], command: click.Command) -> str:
    parent = None
    for depth, name in enumerate(path):
        parent = click.Context(
            command if depth == len(path) - 1 else click.Group(name),
            info_name=name,
            parent=parent,
            terminal_width=WIDTH,
            max_content_width=WIDTH,
        )
    assert parent is not None
    return command.get_help(parent)


def render() -> str:
    os.environ["COLUMNS"] = str(WIDTH)
    from k25trace.cli import cli

    parts = [HEAD]
    commands = _walk(cli, ["k25trace"])
    parts.append("".join(f"- [`{' '.join(path)}`](#{'-'.join(path)})\n" for path, _ in commands[1:]) + "\n")
    for path, command in commands:
        title = " ".join(path)
        parts.append(f'<a id="{"-".join(path)}"></a>\n\n## `{title}`\n\n```text\n{_help(path, command)}\n```\n\n')
    return "".join(parts).rstrip() + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if PAGE.exists() and PAGE.read_text() == text:
            return 0
        print(f"{PAGE.relative_to(ROOT)} is stale: run `python3 .ci/commands_doc.py` and commit it", file=sys.stderr)
        return 1
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} ({text.count(chr(10))} lines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
