"""``python3 -m capture ...``: the same command as ``k25trace capture``."""
from capture.cli import capture_command

capture_command(prog_name="capture")
