"""``python3 -m k25trace.capture ...``: the same command as ``k25trace capture``."""

from k25trace.capture.cli import capture_command

capture_command(prog_name="python3 -m k25trace.capture")
