"""The project's one quantile (standard library only: ``k25trace.capture`` runs next to a server and uses it too)."""

from __future__ import annotations

import math
from typing import Iterable


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q``-quantile (``q`` in [0, 1]; 0.5 is the median) by linear interpolation between the closest ranks.

    The same definition as numpy's default (``numpy.quantile(..., method="linear")``) and as
    ``statistics.quantiles(..., method="inclusive")``: on the sorted values ``s``, position ``(len(s) - 1) * q``.
    ``values`` need not be sorted. NaN for no values; ``q`` outside [0, 1] is a ``ValueError``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile: q must be in [0, 1], not {q}")
    s = sorted(values)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
