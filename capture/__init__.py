"""k25trace capture: drive a running vLLM server's profiler under load and keep the traces safe.

Runs next to the server (httpx, click, rich and the standard library only).  Modules:

- :mod:`k25trace.capture.client`: preflight and the profiler control calls (start once, stop exactly once);
- :mod:`k25trace.capture.load`: the streaming load generator and its latency statistics;
- :mod:`k25trace.capture.files`: trace-file completeness checks by streaming (``check_trace_file``), the
  engine-step markers' decode batch sizes in the same pass (``scan_step_markers``), copies;
- :mod:`k25trace.capture.manifest`: ``CAPTURE_DIR/manifest.json``, written atomically, read back without
  trusting it (``check_manifest``, typed entries for the loader);
- :mod:`k25trace.capture.runner`: one capture run, level by level;
- :mod:`k25trace.capture.cli`: the ``capture`` click command (``k25trace capture``,
  ``python3 -m k25trace.capture``).

The folder sits at the top of the checkout (``capture/``) and installs as ``k25trace.capture``.
"""

from k25trace.capture.files import check_trace_file

__all__ = ["check_trace_file"]
