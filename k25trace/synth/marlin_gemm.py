"""Marlin W4A16 GEMMs for the decode loop (``--marlin``): the standalone IST-DASLab/marlin kernel, built and checked.

Needs torch, nvcc and ninja, imported only when used; the kernel's source is not part of k25trace.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

_MARLIN_WRAPPER = """// by k25trace.synth.decode_loop: the standalone Marlin kernel in namespace marlin, as in vLLM
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <iostream>
namespace marlin {
#include "%s"
}
int marlin_cuda(const void* A, const void* B, void* C, void* s, int prob_m, int prob_n, int prob_k, void* workspace,
                int groupsize, int dev, cudaStream_t stream, int thread_k, int thread_n, int sms, int max_par) {
  return marlin::marlin_cuda(A, B, C, s, prob_m, prob_n, prob_k, workspace, groupsize, dev, stream, thread_k,
                             thread_n, sms, max_par);
}
"""


# The one change made to Marlin's kernel source (in a copy in the build directory): its weight and scale loads drop
# the L2 evict-first cache hint (createpolicy + cp.async ... L2::cache_hint). With it, every launch stopped with
# "an illegal instruction was encountered" on the H200 (driver 580.159.04, CUDA 13.0; built for sm_90a and for
# sm_90 alike; compute-sanitizer placed it in fetch_to_shared); without it the kernel passes its check. The load is
# the same 16-byte cp.async.cg, without the hint.
_MARLIN_CACHE_HINT = (
    '    "   .reg .b64 p;\\n"\n'
    '    "   createpolicy.fractional.L2::evict_first.b64 p, 1.0;"\n'
    '    "   cp.async.cg.shared.global.L2::cache_hint [%0], [%1], %2, p;\\n"\n'
)
_MARLIN_NO_HINT = '    "   cp.async.cg.shared.global [%0], [%1], %2;\\n"\n'


def load_marlin(src: str, build: str | None = None, verbose: bool = False, no_cache_hint: bool = True) -> Any:
    """Build (once; cached in ``build``) and import the standalone IST-DASLab/marlin extension ``marlin_cuda``
    from its source tree ``src`` (holding ``marlin/marlin_cuda.cpp`` and ``marlin/marlin_cuda_kernel.cu``), for
    this GPU's architecture, its kernel wrapped in ``namespace marlin`` and (``no_cache_hint``) without the L2
    cache hint on its weight loads (see ``_MARLIN_CACHE_HINT``). Needs torch, nvcc and ninja."""
    import tempfile

    import torch
    from torch.utils import cpp_extension

    src = os.path.abspath(src)
    cpp, cu = (os.path.join(src, "marlin", f) for f in ("marlin_cuda.cpp", "marlin_cuda_kernel.cu"))
    for f in (cpp, cu):
        if not os.path.isfile(f):
            raise SystemExit(f"--marlin: {f} is missing (export github:IST-DASLab/marlin into --marlin-src)")
    if "TORCH_CUDA_ARCH_LIST" not in os.environ and torch.cuda.is_available():
        os.environ["TORCH_CUDA_ARCH_LIST"] = "%d.%d" % torch.cuda.get_device_capability()
    build = os.path.abspath(build or os.path.join(tempfile.gettempdir(), "k25trace-marlin-build"))
    os.makedirs(build, exist_ok=True)

    def write(path: str, text: str) -> None:
        if not os.path.isfile(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)

    if no_cache_hint:
        kernel = open(cu).read()
        if kernel.count(_MARLIN_CACHE_HINT) != 1:
            raise SystemExit(f"--marlin: {cu} is not the kernel source this build knows (its cache-hint copy)")
        cu = os.path.join(build, "marlin_cuda_kernel_nohint.cu")
        write(cu, kernel.replace(_MARLIN_CACHE_HINT, _MARLIN_NO_HINT))
    wrapper = os.path.join(build, "marlin_ns_kernel.cu")
    write(wrapper, _MARLIN_WRAPPER % cu)
    mod = cpp_extension.load(
        name="marlin_cuda",
        sources=[cpp, wrapper],
        build_directory=build,
        extra_cflags=["-O3"],
        extra_cuda_cflags=["-O3", "-lineinfo"],
        verbose=verbose,
    )
    sys.modules.setdefault("marlin_cuda", mod)  # the package's marlin/__init__.py imports it by that name
    return mod


class MarlinGemms:
    """Marlin W4A16 (FP16 x INT4, group size 128) GEMMs: random int4 weights in Marlin's layout, one workspace."""

    groupsize = 128

    def __init__(self, src: str, build: str | None, device: Any) -> None:
        self.src, self.dev = os.path.abspath(src), device
        self.mod = load_marlin(src, build)
        self.max_n = 256
        self.workspace: Any = None
        self.shapes: list[tuple[int, int]] = []
        self.check_rel_err = self._check()

    def _check(self) -> float:
        """Marlin against a dequantized fp32 matmul on packed random int4 weights (m = 1, 8, 64); returns the
        worst mean relative error and fails above 1e-2."""
        import torch

        if self.src not in sys.path:
            sys.path.insert(0, self.src)
        import marlin  # the package in --marlin-src, for its weight packing (Layer.pack)

        k, n, g = 1024, 512, self.groupsize
        q = torch.randint(0, 16, (k, n), device=self.dev)
        scale = (torch.rand(k // g, n, device=self.dev) * 0.01 + 0.005).half()
        ref = (q - 8).half() * scale.repeat_interleave(g, 0)  # (k, n)
        lin = torch.nn.Linear(k, n, bias=False).half().to(self.dev)
        lin.weight.data = ref.t().contiguous()
        layer = marlin.Layer(k, n, groupsize=g).to(self.dev)
        layer.pack(lin, scale.t())
        worst = 0.0
        for m in (1, 8, 64):
            x = torch.randn(m, k, dtype=torch.half, device=self.dev)
            got = layer(x).float()
            want = x.float() @ ref.float()
            worst = max(worst, float((got - want).abs().mean() / want.abs().mean()))
        if not worst < 1e-2:
            raise SystemExit(f"--marlin: Marlin differs from the dequantized matmul (mean relative error {worst:.3g})")
        return worst

    def weight(self, k: int, n: int) -> dict[str, Any]:
        """A random int4 (k, n) weight in Marlin's packed layout ((k/16, 2n) int32; its nibbles uniform in 0..15,
        so the dequantized weights (q - 8) * s have a standard deviation near 1/sqrt(k)) and its fp16 scales."""
        import torch

        if k % 128 or n % 256:
            raise SystemExit(f"--marlin: a ({k}, {n}) weight: Marlin needs K % 128 == 0 and N % 256 == 0")
        packed = torch.randint(0, 256, (k // 16 * 2 * n * 4,), dtype=torch.uint8, device=self.dev)
        scales = torch.full((k // self.groupsize, n), 1.0 / (4.64 * math.sqrt(k)), dtype=torch.float16, device=self.dev)
        self.max_n = max(self.max_n, n)
        self.shapes.append((k, n))
        return {"B": packed.view(torch.int32).view(k // 16, 2 * n), "s": scales, "k": k, "n": n}

    def finish(self) -> None:
        import torch

        self.workspace = torch.zeros(self.max_n // 128 * 16, dtype=torch.int32, device=self.dev)

    def mm(self, x: Any, w: dict[str, Any]) -> Any:
        import torch

        out = torch.empty(x.shape[0], w["n"], dtype=x.dtype, device=x.device)
        self.mod.mul(x, w["B"], out, w["s"], self.workspace, -1, -1, -1, 16)  # thread_k/n, sms: auto; max_par 16
        return out
