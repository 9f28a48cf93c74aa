"""``k25trace html``: the report as one self-contained HTML page with charts, to share in a chat or a review.

Charts are hand-written inline SVG built here from the frames of :mod:`k25trace.analysis.page_data` (the same the
CLI prints: :func:`.report.breakdown` and a few named queries): no JavaScript library, no CDN, no font or image
files, so the page opens offline and stays small (a few hundred KB for a TP2 run with three batch sizes), and a test
can read every drawn number back from the page (each mark carries its value in ``data-*`` attributes; tooltips are
SVG ``<title>``). A few lines of inline JavaScript (``page.js``) only highlight a category across the charts when
its legend entry is pointed at.

Sections (:mod:`.sections`, :mod:`.step_sections`): runs; where the step time goes (stacked bars per run and batch
size, overlap and idle included); decode step time and throughput vs batch size (with TPOT and tok/s from
``capture_levels`` when present); collectives across ranks (transfer vs wait, the straggler: ``report --by comm``);
why the GPU is idle (``report --by idle``); the step-time distribution per batch size (outliers marked); one
representative step per batch size on every rank, clocks aligned (``rank_offsets``), as a Gantt chart by category;
the top kernels. :mod:`.compare_page` draws ``k25trace compare``'s result. Both pages share one shell
(:func:`.page.shell`: ``page.html`` and ``page.css``) and one bar-chart frame (:func:`.markup.bar_frame`). Colours
are the TUI's (:mod:`k25trace.render.colors`).
"""

from __future__ import annotations

from k25trace.render.html.compare_page import render_comparison
from k25trace.render.html.markup import css_class
from k25trace.render.html.page import build

__all__ = ["build", "css_class", "render_comparison"]
