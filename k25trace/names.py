"""Readable short names for demangled GPU kernel names (which can be several KB of C++ templates).

Method (after vLLM's ``benchmarks/forward/profile.py: short_name``): drop the return type, the template
arguments and the argument list; for generic launchers (``cutlass::device_kernel<…>``, ``Kernel2<…>``, …) keep
the first template argument, shortened the same way, so FlashAttention-3 and CUTLASS GEMMs stay tellable apart.
"""

from __future__ import annotations

import re

MAX_LEN = 160

# Launcher templates whose first template argument says what the kernel really is.
_WRAPPERS = {
    "device_kernel",
    "Kernel",
    "Kernel2",
    "kernel",
    "KernelWrapper",
    "enable_sm90_or_later",
    "enable_sm80_to_sm89",
    "enable_sm100_or_later",
}
_CUTE_SUFFIX = re.compile(r"(_object_at_|_tensorptr).*$")
_OPEN = "<({["
_CLOSE = ">)}]"


def _top_level(text: str) -> tuple[str, str | None, int]:
    """Split ``text`` at depth 0: (the depth-0 characters up to the argument list, first template arg, paren index)."""
    depth = 0
    kept: list[str] = []
    first_arg_start = -1
    first_arg: str | None = None
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in "<({[":
            if ch == "(" and depth == 0:
                # "(anonymous namespace)" is part of a qualified name, not an argument list.
                if text.startswith("(anonymous namespace)", i):
                    kept.append("(anonymous namespace)")
                    i += len("(anonymous namespace)")
                    continue
                if kept and not kept[-1].isspace() and not text.startswith("operator", max(0, i - 8)):
                    return "".join(kept), first_arg, i
            if ch == "<" and depth == 0 and text.startswith("<<", i) and text[max(0, i - 8) : i].endswith("operator"):
                kept.append("<<")
                i += 2
                continue
            if depth == 0 and ch == "<":
                first_arg_start = i + 1
            depth += 1
        elif ch in ">)}]":
            depth = max(0, depth - 1)
            if depth == 0 and ch == ">" and first_arg is None and first_arg_start >= 0:
                first_arg = text[first_arg_start:i]
            i += 1
            continue
        elif ch == "," and depth == 1 and first_arg is None and first_arg_start >= 0:
            first_arg = text[first_arg_start:i]
        if depth == 0:
            kept.append(ch)
        i += 1
    return "".join(kept), first_arg, -1


def short_name(name: str) -> str:
    """A readable short name for a kernel, memcpy or memset name."""
    name = name.strip().replace("(anonymous namespace)::", "")
    if not name:
        return name
    if name.startswith(("Memcpy", "Memset")) or " " not in name and "<" not in name and "(" not in name:
        return _CUTE_SUFFIX.sub("", name)[:MAX_LEN]
    head, first_arg, _ = _top_level(name)
    head = head.strip()
    # The function name is the last depth-0 token: everything before it is the return type.
    token = head.rsplit(" ", 1)[-1] if " " in head else head
    base = token.rsplit("::", 1)[-1]
    if base in _WRAPPERS and first_arg:
        inner = short_name(first_arg.strip())
        token = f"{token}<{inner}>"
    token = _CUTE_SUFFIX.sub("", token)
    if len(token) > MAX_LEN:
        token = token[: MAX_LEN - 1] + "…"
    return token or name[:MAX_LEN]
