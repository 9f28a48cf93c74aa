"""Readable short names for demangled GPU kernel names (which can be several KB of C++ templates).

Method (after vLLM's ``benchmarks/forward/profile.py: short_name``): drop the return type, the template
arguments and the argument list; for generic launchers (``cutlass::device_kernel<…>``, ``Kernel2<…>``, …) keep
the first template argument, shortened the same way, so FlashAttention-3 and CUTLASS GEMMs stay tellable apart.

Additions for names seen in real traces:

- PyTorch's generic launchers (``at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<…>…>``,
  ``reduce_kernel<…ArgMaxOps…>``) keep the functor that says what they do: ``…<FillFunctor>``, ``…<ArgMaxOps>``;
- ROCm traces can carry still-mangled names (``_ZN5aiter24add_rmsnorm_quant_kernelI…``): the qualified name is
  read back from the Itanium nested name (``aiter::add_rmsnorm_quant_kernel``);
- hipBLASLt/Tensile ``Cijk_…`` names (hundreds of characters of tuning flags) are cut after the macro-tile and
  matrix-instruction fields;
- the result is never empty and never longer than :data:`MAX_LEN`.
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
    "kentry",
    "enable_sm90_or_later",
    "enable_sm80_to_sm89",
    "enable_sm100_or_later",
}
# PyTorch launchers whose template arguments carry the functor / lambda that names the operation.
_TORCH_LAUNCHERS = {
    "elementwise_kernel",
    "vectorized_elementwise_kernel",
    "unrolled_elementwise_kernel",
    "elementwise_kernel_manual_unroll",
    "elementwise_kernel_with_index",
    "index_elementwise_kernel",
    "reduce_kernel",
    "multi_tensor_apply_kernel",
    "_scatter_gather_elementwise_kernel",
}
_FUNCTOR = re.compile(
    r"([A-Za-z_]\w*?"
    r"(?:Functor(?:\w*)|functor|Ops|_kernel_cuda|_kernel_impl|_kernel|_cuda_out|_impl))\b"
)
_FUNCTOR_SKIP = {
    "gpu_kernel_impl",
    "gpu_kernel_impl_nocast",
    "gpu_index_kernel",
    "BinaryFunctor",
    "AUnaryFunctor",
    "BUnaryFunctor",
    "UnaryFunctor",
}
# A first template argument that is a plain type or a number says nothing about the kernel.
_BORING_ARG = re.compile(
    r"^(?:-?\d+\w*|true|false|void|bool|char|short|int|long|float|double|half|unsigned(?: \w+)*|signed(?: \w+)*"
    r"|c10::\w+|__nv_\w+|__hip_\w+|cutlass::\w+_t|at::\w+|std::\w+)$"
)
_CUTE_SUFFIX = re.compile(r"(_object_at_|_tensorptr).*$")
_TENSILE = re.compile(r"^(Cijk_\w*?_MT\w+?_MI\d+x\d+x\d+)_")
_ANON = "(anonymous namespace)"


def _top_level(text: str) -> tuple[str, str | None, str | None]:
    """Scan ``text`` at depth 0 up to the argument list.

    Returns (the depth-0 characters, the first template argument of the *last* depth-0 template group, that
    group's full text). The last group is the function's own: a return type such as ``std::enable_if<…>::type``
    comes before it.
    """
    depth = 0
    kept: list[str] = []
    group_start = -1
    first_arg: str | None = None
    group: str | None = None
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch in "<({[":
            if ch == "(" and depth == 0:
                # "(anonymous namespace)" is part of a qualified name, not an argument list.
                if text.startswith(_ANON, i):
                    kept.append(_ANON)
                    i += len(_ANON)
                    continue
                if kept and not kept[-1].isspace() and not text.startswith("operator", max(0, i - 8)):
                    break
            if ch == "<" and depth == 0 and text.startswith("<<", i) and text[max(0, i - 8) : i].endswith("operator"):
                kept.append("<<")
                i += 2
                continue
            if depth == 0 and ch == "<":
                group_start = i + 1
                first_arg = None
                group = None
            depth += 1
        elif ch in ">)}]":
            depth = max(0, depth - 1)
            if depth == 0 and ch == ">" and group_start >= 0 and group is None:
                group = text[group_start:i]
                if first_arg is None:
                    first_arg = group
            i += 1
            continue
        elif ch == "," and depth == 1 and first_arg is None and group_start >= 0:
            first_arg = text[group_start:i]
        if depth == 0:
            kept.append(ch)
        i += 1
    return "".join(kept), first_arg, group


def _read_source_name(s: str, i: int) -> tuple[str | None, int]:
    """Itanium <source-name> at ``s[i]``: a decimal length then that many characters."""
    m = re.match(r"\d+", s[i:])
    if not m:
        return None, i
    length = int(m.group())
    start = i + len(m.group())
    return s[start : start + length], start + length


def _nested_name(s: str, i: int) -> tuple[list[str], int]:
    """Itanium <nested-name> ``N…`` (or one <source-name>) at ``s[i]``: its identifiers, skipping substitutions."""
    parts: list[str] = []
    if not s.startswith("N", i):
        part, i = _read_source_name(s, i)
        return ([part] if part else []), i
    i += 1
    while i < len(s):
        if s[i].isdigit():
            part, i = _read_source_name(s, i)
            if not part:
                break
            parts.append(part)
        elif s[i] == "S" and (m := re.match(r"S[0-9A-Z]*_", s[i:])):
            i += len(m.group())  # substitution of an earlier prefix: already in parts
        else:
            break
    return parts, i


def _demangle_prefix(s: str) -> str | None:
    """The qualified name of a mangled ``_Z…`` symbol (namespaces and function, no types), or None.

    Only the nested-name prefix is decoded; for a launcher (``ck_tile::kentry<…>``) the first named template
    argument is appended as ``<Name>``. Good enough for readable short names, not a demangler.
    """
    if not s.startswith("_Z"):
        return None
    parts, i = _nested_name(s, 2)
    if not parts:
        return None
    name = "::".join(parts)
    if parts[-1] in _WRAPPERS and s.startswith("I", i):
        j = i + 1
        while s.startswith("L", j):  # literal template arguments (Li1E): skip
            end = s.find("E", j)
            if end < 0:
                break
            j = end + 1
        inner, _ = _nested_name(s, j)
        if inner:
            name += "<" + "::".join(inner) + ">"
    return name


def _functor(group: str) -> str | None:
    for m in _FUNCTOR.finditer(group.replace(_ANON + "::", "")):
        word = m.group(1)
        if word not in _FUNCTOR_SKIP:
            return word
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 1] + "…"


def short_name(name: str) -> str:
    """A readable short name for a kernel, memcpy or memset name (never empty, at most ``MAX_LEN`` characters)."""
    original = name
    name = name.strip().replace(_ANON + "::", "")
    if not name:
        return _clip(original.strip() or "?") if original.strip() else "?"
    if name.startswith(("Memcpy", "Memset")):
        return _clip(name)
    if name.startswith("_Z") and (demangled := _demangle_prefix(name)):
        return _clip(demangled)
    if (m := _TENSILE.match(name)) is not None:
        return _clip(m.group(1))
    if " " not in name and "<" not in name and "(" not in name:
        return _clip(_CUTE_SUFFIX.sub("", name) or name)
    head, first_arg, group = _top_level(name)
    head = head.strip()
    # The function name is the last depth-0 token: everything before it is the return type.
    token = head.rsplit(" ", 1)[-1] if " " in head else head
    base = token.rsplit("::", 1)[-1]
    if base in _WRAPPERS and first_arg and not _BORING_ARG.match(first_arg.strip()):
        inner = short_name(first_arg.strip())
        if inner and inner != "?":
            token = f"{token}<{inner}>"
    elif base in _TORCH_LAUNCHERS and group and (functor := _functor(group)):
        token = f"{token}<{functor}>"
    token = _CUTE_SUFFIX.sub("", token).strip()
    return _clip(token) if token else _clip(name)


# ------------------------------------------------------------------------------------- families (compare)

# Tile and cluster shapes inside a name: nvjet's ``128x64_64x6_2x1``, cuBLAS's ``tilesize64x64x64``,
# Tensile's ``MT256x48x64_MI16x16x1``. Builds and batch sizes pick other tiles for the same operation.
_TILE_SHAPE = re.compile(r"\d+(?:x\d+)+")
# NCCL's algorithm and protocol (``_RING_LL``, ``_TREE_LL128``, ``_NVLS_SIMPLE``): chosen per message size and
# NCCL version for the same collective.
_NCCL_ALGO = re.compile(r"_(?:RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(?:LL128|LL|SIMPLE)(?=_|$)")
# Inductor/Triton kernels end in an index that only numbers the kernels of one compiled graph.
_TRITON_INDEX = re.compile(r"^(triton_\w+?)_\d+$")


def kernel_family(name: str) -> str:
    """The family of a GPU activity name, for matching kernels across builds, versions and batch sizes.

    The short name (no return type, template arguments or argument list), with tile shapes written as ``#``
    (``nvjet_tst_128x64_64x6_2x1_v_bz_TNT`` → ``nvjet_tst_#_#_#_v_bz_TNT``), NCCL's algorithm/protocol suffix
    dropped (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` → ``ncclDevKernel_AllReduce_Sum_bf16``) and an
    Inductor kernel's trailing index dropped. Memcpy and memset names are their own family.
    """
    short = short_name(name)
    if short.startswith(("Memcpy", "Memset")):
        return short
    family = _NCCL_ALGO.sub("", short)
    family = _TRITON_INDEX.sub(r"\1", family)
    return _TILE_SHAPE.sub("#", family)


def template_args(name: str, limit: int = 100) -> str | None:
    """The function's own template arguments of a demangled name (``<c10::BFloat16, 8>``), clipped to ``limit``
    characters; None when it has none. Tells apart the variants of one short name (Marlin's w13 and w2)."""
    text = name.strip().replace(_ANON + "::", "")
    if "<" not in text:
        return None
    _, _, group = _top_level(text)
    if not group:
        return None
    group = " ".join(group.split())
    return "<" + (group if len(group) <= limit else group[: limit - 1] + "…") + ">"
