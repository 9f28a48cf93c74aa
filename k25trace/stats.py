"""The project's statistics: its one quantile, and the Welch t-test and Holm adjustment ``k25trace compare`` rests
on (standard library only at import: ``k25trace.capture`` runs next to a server and uses the quantile; :func:`welch`
imports numpy when called)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import numpy as np


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


# ------------------------------------------------------------------------------- Welch's t-test, Holm's adjustment


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return min(1.0, betainc(df / 2.0, 0.5, df / (df + t * t)))


def t_quantile(p_two_sided: float, df: float) -> float:
    """The t such that P(|T| ≥ t) = ``p_two_sided`` (for confidence intervals): Newton's method on the tail with
    t's density, kept inside a bracket that a step leaving it halves instead (5-10 tail evaluations, not ~45)."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > p_two_sided:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    t = (lo + hi) / 2.0
    for _ in range(200):
        excess = t_two_sided_p(t, df) - p_two_sided  # falls as t grows; its derivative is -2 × density(t)
        if excess > 0:
            lo = t
        else:
            hi = t
        density = math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))
        step = t + excess / (2.0 * density) if density > 0 else (lo + hi) / 2.0
        if not lo < step < hi:
            step = (lo + hi) / 2.0
        if abs(step - t) <= 1e-13 * step or hi - lo <= 1e-12 * hi:
            return step
        t = step
    return t


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(b) − mean(a): ``p`` two-sided (None with fewer than 2 values on a side), ``ci95`` the
    half-width of the difference's 95 % confidence interval, ``df`` the Welch–Satterthwaite degrees of freedom."""

    delta: float
    p: float | None
    ci95: float | None
    df: float | None


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> Welch:
    """Welch's unequal-variance t-test of B against A (two-sided)."""
    import numpy as np  # here, not at the top: the quantile above is standard library only

    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    delta = float(xb.mean() - xa.mean()) if xa.size and xb.size else math.nan
    if xa.size < 2 or xb.size < 2:
        return Welch(delta, None, None, None)
    sa, sb = float(xa.var(ddof=1)) / xa.size, float(xb.var(ddof=1)) / xb.size
    se2 = sa + sb
    scale = max(abs(float(xa.mean())), abs(float(xb.mean())), 1e-300)
    if se2 <= (1e-12 * scale) ** 2:  # no variation on either side: the difference is exact
        same = abs(delta) <= 1e-12 * scale
        return Welch(0.0 if same else delta, 1.0 if same else 0.0, 0.0, None)
    df = se2 * se2 / ((sa * sa / (xa.size - 1) if sa else 0.0) + (sb * sb / (xb.size - 1) if sb else 0.0))
    se = math.sqrt(se2)
    return Welch(delta, t_two_sided_p(delta / se, df), t_quantile(0.05, df) * se, df)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None stays None); the family is the non-None values."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(indexed)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out
