"""k25trace: where the time of a large-model decode step goes.

Pipeline (one module per stage, all headless and importable):
capture (``capture/``, installed as ``k25trace.capture``) -> ingest -> classify -> steps -> report / sql / tui.
"""

__version__ = "0.1.0"
