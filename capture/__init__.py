"""k25trace capture: drive a running vLLM server's profiler under load and keep the traces safe.

Runs next to the server (httpx, click, rich and the standard library only).  Modules:

- :mod:`capture.client`: preflight and the profiler control calls (start once, stop exactly once);
- :mod:`capture.load`: the streaming load generator and its latency statistics;
- :mod:`capture.files`: trace-file completeness checks by streaming (``validate_trace_file``), the
  engine-step markers' decode batch sizes in the same pass (``scan_step_markers``), copies;
- :mod:`capture.manifest`: ``CAPTURE_DIR/manifest.json``, written atomically, read back without trusting
  it (``check_manifest``);
- :mod:`capture.runner`: one capture run, level by level;
- :mod:`capture.cli`: the ``capture`` click command (``k25trace capture``).
"""
from k25trace.capture.files import check_trace_file, validate_trace_file

__all__ = ["check_trace_file", "validate_trace_file"]
